"""The bench's batch mode: `--batch-size N` and `--batch-sweep 1,2,4,8,16`.

The manifest's clips (each cut into 30 s pieces when longer) go through the batched `generate`
baseline and our batched speculative loop in batches of N, in manifest order; the speed-up is
against the batched baseline at the same N. Every row's tokens are checked against the batched
baseline's, and each clip's batched baseline against its baseline in a batch of one. A sweep
draws the speed-up against the batch size next to the Distil-Whisper paper's A100 figures.

It reuses bench's clip selection, hardware and version lines; the timing and checks are
batched.compare_batches.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specwhisper import audio, batched, models


def batch_sizes(args: argparse.Namespace) -> list[int]:
    """In ascending order: size 1's baselines then serve as the batch-of-one check."""
    if args.batch_sweep:
        return args.batch_sweep
    return [args.batch_size]


def parse_sweep(text: str) -> list[int]:
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
    if not sizes or sizes[0] < 1 or sizes[-1] > 64:
        raise argparse.ArgumentTypeError("batch sizes go from 1 to 64")
    return sizes


def problem(args: argparse.Namespace) -> str | None:
    """Why these bench flags cannot run in batch mode, or None."""
    if args.temperature > 0 or args.fallback:
        return batched.BATCH_ONLY_GREEDY
    if args.peer:
        return "transformers' assisted generation runs at batch size 1 only: drop --peer."
    if args.timestamps:
        return "Batch mode decodes without timestamps: drop --timestamps."
    if args.engine != "specwhisper":
        return "Batch mode runs our loop: transformers refuses an assistant at batch size > 1."
    return None


def pieces(clips: list[Any]) -> tuple[list[Any], list[str | None], list[str]]:
    """Every clip as rows of up to 30 s (longer ones cut as the ASR pipeline cuts them):
    samples, language and name per row."""
    samples, languages, names = [], [], []
    for clip in clips:
        parts = [piece for piece, _ in audio.chunks(clip.samples)]
        for i, part in enumerate(parts):
            samples.append(part)
            languages.append(clip.language)
            names.append(clip.name if len(parts) == 1 else f"{clip.name}#{i + 1}")
    return samples, languages, names


def run(
    args: argparse.Namespace,
    arguments: list[str],
    clips: list[Any],
    main: models.Loaded,
    assistant: models.Loaded,
    settings: dict[str, Any],
    hw: dict[str, Any],
    libs: dict[str, str],
) -> int:
    from rich.console import Console

    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True)
    samples, languages, names = pieces(clips)
    if not getattr(main.model.generation_config, "is_multilingual", False):
        languages = [None] * len(samples)
    warmup = 0 if args.no_warmup else 1
    results = []
    alone = None  # each row's tokens in a batch of one, once size 1 has run
    for size in batch_sizes(args):

        def on_batch(i: int, n: int, size: int = size) -> None:
            err.print(f"batch size {size}: batch {i + 1}/{n}", highlight=False)

        result = batched.compare_batches(
            main, assistant, samples, languages, size,
            repeats=args.repeats, warmup=warmup, gamma=args.gamma,
            gamma_schedule=args.gamma_schedule, max_new_tokens=args.max_new_tokens,
            check_batch_of_one=size > 1, batch_of_one=alone, on_batch=on_batch,
        )  # fmt: skip
        results.append(result)
        if size == 1:
            alone = [row.baseline_tokens for row in result.rows]
        console.print(
            f"batch size {size:>2}: baseline {result.baseline_s:8.2f} s, speculative "
            f"{result.speculative_s:8.2f} s, speed-up {result.speedup:.2f}×, acceptance "
            f"{result.acceptance_rate:.1%}, identical rows {result.n_identical}/"
            f"{len(result.rows)}, batched baseline = batch of one: "
            f"{result.same_as_batch_of_one or '-'}",
            highlight=False,
        )
        for name, row in zip(names, result.rows, strict=True):
            if not row.identical or row.same_as_batch_of_one is False:
                console.print(
                    f"  {name}: speculative "
                    + ("identical" if row.identical else f"differs at {row.first_divergence}")
                    + ("" if row.same_as_batch_of_one is not False else "; batched baseline "
                       "differs from the batch of one"),
                    highlight=False,
                )  # fmt: skip

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path, chart_path = out / "results.json", out / "batch-speedups.png"
    sweep = [r.to_dict() for r in results]
    for entry in sweep:
        for name, row in zip(names, entry["rows"], strict=True):
            row["clip"] = name
    document = {
        "command": shlex.join(["python", "-m", "specwhisper.bench", *arguments]),
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings,
        "hardware": hw,
        "versions": libs,
        "n_rows": len(samples),
        "sweep": sweep,
    }
    results_path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    title = f"{settings['main']} + {settings['assistant']} on {hw['device']}, {len(samples)} rows"
    save_sweep_chart(results, chart_path, title)
    console.print(f"wrote {results_path} and {chart_path}", highlight=False)
    last = {k: v for k, v in sweep[-1].items() if k != "rows"}
    summary = {
        **last,
        "sweep": [{k: v for k, v in s.items() if k != "rows"} for s in sweep],
        "hardware": hw,
        "versions": libs,
        **settings,
        "results": str(results_path),
        "chart": str(chart_path),
    }
    sys.stdout.flush()
    print(json.dumps(summary, ensure_ascii=False), flush=True)
    return 0


def save_sweep_chart(results: list[batched.BatchComparison], path: Path, title: str) -> None:
    """Speed-up over the batched baseline against the batch size, with the paper's A100 points."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    sizes = [r.batch_size for r in results]
    ax.plot(sizes, [r.speedup for r in results], marker="o", label="ours (this run)")
    ax.plot(
        list(batched.PAPER_A100), list(batched.PAPER_A100.values()), marker="s", linestyle=":",
        label="Distil-Whisper paper, A100 (large-v2 + distil-large-v2)",
    )  # fmt: skip
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes) | set(batched.PAPER_A100))
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("batch size")
    ax.set_ylabel("speed-up over the batched baseline (×)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
