"""The bench's output: where it ran (hardware, versions), the header, the table and the chart,
and the one writer of results.json and the last JSON line, for single-clip and batch modes."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

import specwhisper
from specwhisper import (
    reference,
)
from specwhisper.audio import SAMPLE_RATE
from specwhisper.bench.running import (
    PEER_ENGINE,
    ClipResult,
    LoopAloneTotals,
    Totals,
    with_old_names,
)
from specwhisper.bench.selection import Clip
from specwhisper.compare import Comparison
from specwhisper.timing import cpu_features, cpu_model, device_name, has_amx


def hardware(device: torch.device) -> dict[str, Any]:
    info = {
        "device": device_name(device),
        "cpu": cpu_model(),
        "cpu_features": cpu_features(),  # vector level and AMX: say it in every hardware line
        "amx": has_amx(),
        "n_cpus": os.cpu_count(),
        "n_threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_memory_gb"] = round(
            torch.cuda.get_device_properties(device).total_memory / 1e9, 1
        )
    return info


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "specwhisper": specwhisper.__version__}
    for package in ("torch", "transformers", "numpy", "jiwer", "faster-whisper", "ctranslate2"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    if torch.version.cuda:
        found["cuda"] = torch.version.cuda
    return found


def print_table(console: Any, results: list[ClipResult], total: Totals) -> None:
    from rich.table import Table

    table = Table(title="Per clip (median times, seconds)")
    for name in ("clip", "lang", "audio", "base", "spec", "×"):
        table.add_column(name, justify="left" if name == "clip" else "right")
    if total.loop_alone is not None:  # our loop at gamma 0, and the two parts of ×
        for name in ("γ 0", "loop ×", "draft ×"):
            table.add_column(name, justify="right")
    if total.peer is not None:
        table.add_column("peer", justify="right")
        table.add_column("peer ×", justify="right")
    if total.reference is not None:
        for name in ("ref", "ref ×", "ref same"):
            table.add_column(name, justify="right")
    for name in ("tokens", "accept", "tok/fwd", "same"):
        table.add_column(name, justify="right")
    for r in results:
        o = r.speculative
        cells = [r.clip.name, r.clip.language or "auto", f"{o.duration_s:.1f}"]
        cells += [f"{o.baseline.time_s:.3f}", f"{o.speculative.time_s:.3f}", f"{o.speedup:.2f}"]
        if total.loop_alone is not None:
            cells += [f"{o.loop_alone.time_s:.3f}", f"{o.loop_alone_speedup:.2f}"]
            cells += [f"{o.speedup_over_loop_alone:.2f}"]
        if total.peer is not None:
            cells += [f"{r.peer.speculative.time_s:.3f}", f"{r.peer.speedup:.2f}"]
        if total.reference is not None:
            ref = o.reference
            cells += [f"{ref.time_s:.3f}", f"{ref.speedup:.2f}", _reference_same(ref)]
        cells += [str(o.baseline.n_tokens), f"{o.speculative.acceptance_rate:.0%}"]
        cells += [f"{o.speculative.tokens_per_main_forward:.2f}", _same(o)]
        table.add_row(*cells)
    spec = total.speculative
    table.add_section()
    cells = ["total", "", f"{total.audio_s:.1f}", f"{total.baseline_s:.3f}"]
    cells += [f"{spec.time_s:.3f}", f"{spec.speedup:.2f}"]
    if total.loop_alone is not None:
        alone = total.loop_alone
        cells += [f"{alone.time_s:.3f}", f"{alone.speedup:.2f}", f"{alone.speculative_speedup:.2f}"]
    if total.peer is not None:
        cells += [f"{total.peer.time_s:.3f}", f"{total.peer.speedup:.2f}"]
    if total.reference is not None:
        t = total.reference
        cells += [f"{t['reference_s']:.3f}", f"{t['reference_speedup']:.2f}"]
        cells += [f"{t['reference_n_same_text_clips']}/{total.n_clips}"]
    cells += [str(sum(r.speculative.baseline.n_tokens for r in results))]
    cells += [f"{spec.acceptance_rate:.0%}", f"{spec.tokens_per_main_forward:.2f}"]
    cells += [f"{spec.n_identical_clips}/{total.n_clips}"]
    table.add_row(*cells)
    console.print(table)
    no_peer = [r.clip.name for r in results if r.peer is None]
    lines = [
        f"identical transcripts (token ids): {spec.n_identical_clips}/{total.n_clips}",
        f"speed-up: total {spec.speedup:.2f}×, median clip {spec.median_clip_speedup:.2f}×, "
        f"min clip {spec.min_clip_speedup:.2f}×",
        f"WER: baseline {_pct(total.wer_baseline)}, speculative {_pct(spec.wer)}",
        f"acceptance {spec.acceptance_rate:.1%} (alpha {spec.alpha:.3f}), mean gamma "
        f"{spec.mean_gamma:.2f}, draft/verify cost c = {spec.cost_ratio:.3f}",
        f"predicted speed-up: {spec.predicted_speedup:.2f}× decoder loop (Leviathan), "
        f"{spec.predicted_end_to_end:.2f}× end to end (encoder and per-pass overhead added) vs "
        f"measured {spec.speedup:.2f}× (whole generate call)",
    ]
    if total.loop_alone is not None:
        lines += loop_alone_lines(total.loop_alone, spec.speedup, total.n_clips)
    if total.peer is not None:
        p = total.peer
        lines += [
            f"peer ({PEER_ENGINE} assisted generation): {p.speedup:.2f}× total, "
            f"{p.n_identical_clips}/{total.n_clips} identical, WER {_pct(p.wer)}, "
            f"acceptance {p.acceptance_rate:.1%}; speculative over peer "
            f"{total.speedup_over_peer or 0:.2f}×",
        ]
    elif any(r.peer is not None for r in results) and no_peer:
        lines.append(
            f"peer: not run on {', '.join(no_peer)} (timestamps or over 30 s, which "
            f"{PEER_ENGINE}' assisted generation with a full Whisper assistant does not "
            "reproduce), so no peer totals"
        )
    if total.reference is not None:
        lines += reference_lines(total.reference, total.n_clips)
    for line in lines:
        console.print(line, highlight=False)


def loop_alone_lines(alone: LoopAloneTotals, speedup: float, n_clips: int) -> list[str]:
    """The speed-up split: our loop without drafting over the baseline, drafting over that loop,
    and their product, the total."""
    return [
        f"speed-up split: the loop (our loop at gamma 0 over plain generate) "
        f"{alone.speedup:.2f}× (median clip {alone.median_clip_speedup:.2f}×, min clip "
        f"{alone.min_clip_speedup:.2f}×) × drafting (our loop with drafting over it) "
        f"{alone.speculative_speedup:.2f}× (median clip "
        f"{alone.median_clip_speculative_speedup:.2f}×, min clip "
        f"{alone.min_clip_speculative_speedup:.2f}×) = {speedup:.2f}× total",
        f"our loop at gamma 0 vs baseline: identical {alone.n_identical_clips}/{n_clips}",
    ]


def reference_lines(t: dict[str, Any], n_clips: int) -> list[str]:
    """--reference's summary: its ratios against the baseline and the speculative column, its
    text agreement."""
    return [
        f"reference {t['reference']} (CTranslate2 {t['reference_ct2_compute_type']}, "
        f"{t['reference_n_threads']} threads): {t['reference_speedup']:.2f}× the baseline in "
        f"total, median clip {t['reference_median_clip_speedup']:.2f}×, min clip "
        f"{t['reference_min_clip_speedup']:.2f}×",
        f"speculative over reference (its time / the speculative column's): total "
        f"{t['speculative_speedup_over_reference']:.2f}×, median clip "
        f"{t['median_clip_speculative_speedup_over_reference']:.2f}×, min clip "
        f"{t['min_clip_speculative_speedup_over_reference']:.2f}×",
        f"reference vs baseline text: same token ids {t['reference_n_identical_clips']}/{n_clips}, "
        f"same text {t['reference_n_same_text_clips']}/{n_clips}, same after normalizing "
        f"{t['reference_n_same_normalized_clips']}/{n_clips}; WER {_pct(t['wer_reference'])} "
        "(a different engine: its transcript may differ)",
    ]


def _reference_same(ref: reference.ReferenceResult) -> str:
    """tokens, text, norm (same after normalizing) or no: how close to the baseline's."""
    if ref.same_tokens:
        return "tokens"
    return "text" if ref.same_text else "norm" if ref.same_normalized else "no"


def _same(c: Comparison) -> str:
    return "yes" if c.identical else f"no @{c.first_divergence}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def save_chart(results: list[ClipResult], total: Totals, path: Path, title: str) -> None:
    """Per-clip speed-ups as bars (our loop without drafting, the speculative column, the peer
    and the reference when run), with a line at 1.0; the speculative bar's label splits its
    total into the loop's part and drafting's."""
    from matplotlib.figure import Figure

    n = len(results)
    x = np.arange(n)
    engine = results[0].speculative.engine
    alone = total.loop_alone
    bars = []
    if alone is not None:
        bars.append(
            (
                [r.speculative.loop_alone_speedup or 0.0 for r in results],
                f"our loop without drafting, γ 0 (total {alone.speedup:.2f}×)",
            )
        )
    split = (
        f" = loop {alone.speedup:.2f}× × drafting {alone.speculative_speedup:.2f}×" if alone else ""
    )
    bars.append(
        (
            [r.speculative.speedup for r in results],
            f"{engine} (total {total.speculative.speedup:.2f}×{split})",
        )
    )
    if total.peer is not None:
        peer = [r.peer.speedup if r.peer else 0.0 for r in results]
        bars.append((peer, f"{PEER_ENGINE} (total {total.peer.speedup:.2f}×)"))
    if total.reference is not None:
        ref = [r.speculative.reference.speedup for r in results]
        name, ref_total = total.reference["reference"], total.reference["reference_speedup"]
        bars.append((ref, f"{name}, reference (total {ref_total:.2f}×)"))
    width = 0.8 / len(bars)
    fig = Figure(figsize=(max(6.0, 0.35 * n + 2.0), 4.5))
    ax = fig.add_subplot()
    for i, (values, label) in enumerate(bars):
        ax.bar(x + (i - (len(bars) - 1) / 2) * width, values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    ax.set_xticks(x, [r.clip.name for r in results], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("speed-up over baseline (×)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def print_header(
    console: Any,
    settings: dict[str, Any],
    hw: dict[str, Any],
    libs: dict[str, str],
    clips: list[Clip],
) -> None:
    audio_s = sum(len(c.samples) for c in clips) / SAMPLE_RATE
    peer = (
        f" (peer: {PEER_ENGINE} assisted generation, gamma {settings['peer_gamma']} "
        f"{settings['peer_gamma_schedule']})"
        if settings["peer"]
        else ""
    )
    lines = [
        f"[bold]specwhisper bench[/bold]: {settings['main']} + {settings['assistant']}, "
        f"engine {settings['engine']}{peer}",
        f"gamma {settings['gamma']} {settings['gamma_schedule']}, {settings['dtype']}"
        + f" (encoder {settings['encoder_dtype']})"
        + (
            f" (draft cross-attention {settings['draft_cross_attention']})"
            if settings.get("draft_cross_attention")
            else ""
        )
        + "; "
        + settings["timing"],
        f"device: {hw['device']}, {hw['n_threads']} torch threads, {hw['n_cpus']} CPUs",
        "versions: " + ", ".join(f"{k} {v}" for k, v in libs.items()),
        f"{len(clips)} clips, {audio_s:.1f} s of audio; "
        f"models loaded in {settings['load_time_s']:.1f} s",
    ]
    for line in lines:
        console.print(line, highlight=False)


def write_results(
    console: Any,
    args: argparse.Namespace,
    arguments: list[str],
    setup: dict[str, Any],
    body: dict[str, Any],
    head: dict[str, Any],
    draw: Callable[[Path, str], None],
    chart_name: str,
) -> int:
    """The one writer of both modes: `results.json` (the command, when, `setup` - settings,
    hardware, versions - and `body`) and the chart in --out, then the last stdout line: `head`,
    the hardware, versions and settings, and where the files are."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path, chart_path = out / "results.json", out / chart_name
    document = {
        "command": shlex.join(["python", "-m", "specwhisper.bench", *arguments]),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        **setup,
        **body,
    }
    results_path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    settings, hw = setup["settings"], setup["hardware"]
    draw(chart_path, f"{settings['main']} + {settings['assistant']} on {hw['device']}")
    console.print(f"wrote {results_path} and {chart_path}", highlight=False)
    summary = {**with_old_names(head), "hardware": hw, "versions": setup["versions"], **settings}
    summary |= {"results": str(results_path), "chart": str(chart_path)}
    sys.stdout.flush()
    print(json.dumps(summary, ensure_ascii=False), flush=True)
    return 0
