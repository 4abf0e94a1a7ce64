"""The bench's batch mode: `--batch-size N` and `--batch-sweep 1,2,4,8,16`.

The manifest's clips (each cut into 30 s pieces when longer) go through the batched `generate`
baseline and our batched speculative loop in batches of N, in manifest order; the speed-up is
against the batched baseline at the same N. Every row's tokens are checked against the batched
baseline's, and each clip's batched baseline against its baseline in a batch of one. A sweep
draws the speed-up against the batch size next to the Distil-Whisper paper's A100 figures.

It reuses bench's clip selection, hardware and version lines; the rows, the sweep and the checks
are specwhisper.batch_mode's: this module parses the flags and presents.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specwhisper import batch_loop, batch_mode, loading
from specwhisper.bench import reporting, running


def batch_sizes(args: argparse.Namespace) -> list[int]:
    """The sizes asked for, ascending."""
    return list(batch_mode.check_batch_sizes(args.batch_sweep or [args.batch_size]))


def parse_sweep(text: str) -> list[int]:
    try:
        return list(batch_mode.check_batch_sizes(x for x in text.split(",") if x.strip()))
    except batch_mode.BatchError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def problem(args: argparse.Namespace) -> str | None:
    """Why these bench flags cannot run in batch mode, or None."""
    try:
        batch_mode.check_batch_sizes(args.batch_sweep or [args.batch_size])
    except batch_mode.BatchError as e:
        return str(e)
    if args.temperature > 0 or args.fallback:
        return batch_loop.BATCH_ONLY_GREEDY
    if args.peer:
        return "transformers' assisted generation runs at batch size 1 only: drop --peer."
    if args.timestamps:
        return "Batch mode decodes without timestamps: drop --timestamps."
    if args.engine != "specwhisper":
        return "Batch mode runs our loop: transformers refuses an assistant at batch size > 1."
    return None


def run(
    args: argparse.Namespace,
    arguments: list[str],
    clips: list[Any],
    main: loading.Loaded,
    assistant: loading.Loaded,
    settings: dict[str, Any],
    hw: dict[str, Any],
    libs: dict[str, str],
) -> int:
    from rich.console import Console

    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True)
    rows = batch_mode.cut_rows((clip.name, clip.samples, clip.language) for clip in clips)

    def on_batch(size: int, i: int, n: int) -> None:
        err.print(f"batch size {size}: batch {i + 1}/{n}", highlight=False)

    results = []
    for result in batch_mode.sweep(
        main,
        assistant,
        rows,
        batch_sizes(args),
        repeats=args.repeats,
        warmup=0 if args.no_warmup else 1,
        gamma=args.gamma,
        gamma_schedule=args.gamma_schedule,
        max_new_tokens=args.max_new_tokens,
        on_batch=on_batch,
    ):
        results.append(result)
        print_result(console, rows, result)
    sweep = [running.with_old_names(r.to_dict(rows.names)) for r in results]
    without_rows = [{k: v for k, v in s.items() if k != "rows"} for s in sweep]

    def draw(path: Path, title: str) -> None:
        save_sweep_chart(results, path, f"{title}, {len(rows.names)} rows")

    return reporting.write_results(
        console,
        args,
        arguments,
        {"settings": settings, "hardware": hw, "versions": libs},
        {"n_rows": len(rows.names), "sweep": sweep},
        {**without_rows[-1], "sweep": without_rows},
        draw,
        "batch-speedups.png",
    )


def print_result(console: Any, rows: batch_mode.Rows, result: batch_mode.BatchComparison) -> None:
    """One line for a batch size, then a line for each row that is not identical or whose
    batched baseline differs from its batch of one."""
    console.print(
        f"batch size {result.batch_size:>2}: baseline {result.baseline_s:8.2f} s, speculative "
        f"{result.speculative_s:8.2f} s, speed-up {result.speedup:.2f}×, acceptance "
        f"{result.acceptance_rate:.1%}, identical rows {result.n_identical_rows}/"
        f"{len(result.rows)}, batched baseline = batch of one: "
        f"{result.batch_of_one_tally or '-'}",
        highlight=False,
    )
    for name, row in zip(rows.names, result.rows, strict=True):
        if row.identical and row.same_as_batch_of_one is not False:
            continue
        line = "identical" if row.identical else f"differs at {row.first_divergence}"
        if row.same_as_batch_of_one is False:
            line += "; batched baseline differs from the batch of one"
        console.print(f"  {name}: speculative {line}", highlight=False)


def save_sweep_chart(results: list[batch_mode.BatchComparison], path: Path, title: str) -> None:
    """Speed-up over the batched baseline against the batch size, with the paper's A100 points."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    sizes = [r.batch_size for r in results]
    ax.plot(sizes, [r.speedup for r in results], marker="o", label="speculative (this run)")
    paper = batch_mode.PAPER_A100
    label = "Distil-Whisper paper, A100 (large-v2 + distil-large-v2)"
    ax.plot(list(paper), list(paper.values()), marker="s", linestyle=":", label=label)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes) | set(paper))
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("batch size")
    ax.set_ylabel("speed-up over the batched baseline (×)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
