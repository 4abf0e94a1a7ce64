"""Benchmark: a manifest of clips -> baseline vs speculative Whisper, per clip and in total.

    python -m specwhisper.bench --main whisper-tiny.en --assistant self-int8 \\
        --manifest ../shared/data/speech/manifest.tsv --category read --repeats 3 --peer

For every clip it times the plain `generate` baseline and the speculative engine (and, with
`--peer`, transformers' own assisted generation with the same assistant) alternately, after a
warm-up and between device syncs, with the page's own code (`compare.compare_loaded`), and
keeps the medians. With `--reference faster-whisper[:int8|float32]` it also times
faster-whisper (CTranslate2) on the main's weights in the same runs, for context (see
reference.py). It prints a table (progress bar on stderr), writes `results.json` and
`speedups.png` to `--out`, and its last stdout line is one JSON object with the totals,
hardware and library versions.

The formulas (speed-up, acceptance alpha, cost ratio c, Leviathan's prediction) are
specwhisper.metrics'; totals apply them to all clips' decoding runs pooled. It does not
download anything a manifest names, retry failed clips, or judge speed: clips whose
transcripts differ are reported in the JSON, and the exit code is still 0. Bad input (manifest,
audio file, checkpoint, pair, language), and a GPU running out of memory, is one line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import shlex
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

import specwhisper
from specwhisper import (
    bench_batch,
    compare,
    decoding,
    drafters,
    examples,
    metrics,
    models,
    reference,
    schedule,
)
from specwhisper.audio import SAMPLE_RATE, AudioLimits, load_audio
from specwhisper.compare import CompareRequest, Comparison
from specwhisper.decoding import WINDOW_S, DecodeResult
from specwhisper.examples import Example
from specwhisper.timing import cpu_features, cpu_model, device_name, has_amx

EXIT_BAD_INPUT = 2
# Benchmark clips are the user's own local files, not uploads: only sanity limits apply.
BENCH_LIMITS = AudioLimits(max_duration_s=3600.0, max_file_bytes=2_000_000_000)
PEER_ENGINE = "transformers"


class BenchError(ValueError):
    """Bad input, worded for a person: the CLI prints it on one line and exits with code 2."""


@dataclass(frozen=True)
class Clip:
    """One manifest row picked for the run, with its audio decoded."""

    name: str  # file as written in the manifest (relative to it, or absolute)
    category: str  # the manifest's category column, "" when absent
    language: str | None  # Whisper code given to the main; None: auto-detect
    reference_text: str  # the manifest's true text of the clip
    samples: np.ndarray = dataclasses.field(repr=False)  # [n] float32 mono 16 kHz


@dataclass(frozen=True)
class Scored:
    """Texts as scored: after Whisper's normalizer for the clip's language."""

    reference_text: str
    baseline: str
    speculative: str
    peer: str | None
    reference: str | None = None  # --reference's transcript


@dataclass(frozen=True)
class ClipResult:
    """One clip: the shared baseline against our engine and, with --peer, transformers'."""

    clip: Clip
    speculative: Comparison  # baseline vs --engine
    peer: Comparison | None  # the same baseline runs vs transformers' assisted generation
    scored: Scored

    @property
    def speedup_over_peer(self) -> float | None:
        """The speculative column's speed-up over the peer (peer time over speculative time):
        above 1 means our loop beat transformers' on this clip."""
        if self.peer is None:
            return None
        return metrics.ratio(self.peer.speculative.time_s, self.speculative.speculative.time_s)

    def to_dict(self) -> dict[str, Any]:
        s = self.scored
        baseline = compare.side_json(
            self.speculative.baseline, self.speculative.baseline_times_s, tokens=False
        )
        row = {
            "file": self.clip.name,
            "category": self.clip.category,
            "language": self.clip.language or "auto",
            "duration_s": round(self.speculative.duration_s, 3),
            "reference_text": self.clip.reference_text,
            "normalized_reference_text": s.reference_text,
            "baseline": baseline | {"wer": _round(wer([(s.reference_text, s.baseline)]))},
            "speculative": _side_dict(self.speculative, wer([(s.reference_text, s.speculative)])),
        }
        if self.peer is not None and s.peer is not None:
            row["peer"] = _side_dict(self.peer, wer([(s.reference_text, s.peer)]))
            row["speculative_speedup_over_peer"] = _round(self.speedup_over_peer)
        if self.speculative.reference is not None:
            row["reference"] = self.speculative.reference.to_dict()
            if s.reference is not None:
                row["reference"]["wer"] = _round(wer([(s.reference_text, s.reference)]))
                row["speculative_speedup_over_reference"] = _round(self.speedup_over_reference)
        return with_old_names(row)

    @property
    def speedup_over_reference(self) -> float | None:
        """The speculative column's speed-up over --reference (its time over the speculative
        column's): above 1 means our column beat it on this clip."""
        ref = self.speculative.reference
        if not isinstance(ref, reference.ReferenceResult):
            return None
        return metrics.ratio(ref.time_s, self.speculative.speculative.time_s)


def _side_dict(c: Comparison, error_rate: float | None) -> dict[str, Any]:
    """One speculative side of a clip row: the API's side JSON without token ids and steps, what
    its runs mean, and its WER."""
    side = compare.side_json(c.speculative, c.speculative_times_s, drafts=True, tokens=False)
    return side | c.outcome() | {"wer": _round(error_rate)}


@dataclass(frozen=True)
class SideTotals:
    """One speculative engine against the shared baseline, over all clips."""

    n_identical_clips: int
    time_s: float  # sum of the per-clip medians
    speedup: float  # sum of baseline times / sum of this side's times
    median_clip_speedup: float
    min_clip_speedup: float
    wer: float | None  # corpus WER of this side's transcripts
    acceptance_rate: float  # accepted / drafted tokens, all clips pooled
    tokens_per_main_forward: float
    alpha: float  # per-token acceptance, geometric model, all steps pooled
    mean_gamma: float
    cost_ratio: float  # c: draft time per draft token / baseline main time per forward
    predicted_speedup: float  # Leviathan's, from the pooled alpha, gamma and c
    predicted_end_to_end: float  # the same, with the encoder and per-step overhead added

    def to_dict(self, name: str) -> dict[str, Any]:
        """Flat keys: `speedup`, `wer_speculative`, ... for the speculative column;
        `peer_speedup`, ... for the peer."""
        p = "" if name == "speculative" else f"{name}_"
        return {
            f"{p}n_identical_clips": self.n_identical_clips,
            f"{name}_s": round(self.time_s, 4),
            f"{p}speedup": round(self.speedup, 4),
            f"{p}median_clip_speedup": round(self.median_clip_speedup, 4),
            f"{p}min_clip_speedup": round(self.min_clip_speedup, 4),
            f"wer_{name}": _round(self.wer),
            f"{p}acceptance_rate": round(self.acceptance_rate, 4),
            f"{p}tokens_per_main_forward": round(self.tokens_per_main_forward, 3),
            f"{p}alpha": round(self.alpha, 4),
            f"{p}mean_gamma": round(self.mean_gamma, 3),
            f"{p}cost_ratio": round(self.cost_ratio, 4),
            f"{p}predicted_speedup": round(self.predicted_speedup, 4),
            f"{p}predicted_end_to_end": round(self.predicted_end_to_end, 4),
        }


@dataclass(frozen=True)
class Totals:
    n_clips: int
    audio_s: float
    baseline_s: float  # sum of the per-clip baseline medians
    wer_baseline: float | None
    speculative: SideTotals
    peer: SideTotals | None
    speedup_over_peer: float | None  # sum of peer times / sum of speculative times
    median_clip_speedup_over_peer: float | None
    reference: dict[str, Any] | None = None  # --reference's totals (reference.bench_totals)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "n_clips": self.n_clips,
            "audio_s": round(self.audio_s, 3),
            "baseline_s": round(self.baseline_s, 4),
            "wer_baseline": _round(self.wer_baseline),
            **self.speculative.to_dict("speculative"),
        }
        if self.peer is not None:
            d |= self.peer.to_dict("peer")
            d["speculative_speedup_over_peer"] = _round(self.speedup_over_peer)
            d["median_clip_speculative_speedup_over_peer"] = _round(
                self.median_clip_speedup_over_peer
            )
        if self.reference is not None:
            d |= self.reference
        return with_old_names(d)


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


# ---------------------------------------------------------------------------------------------
# Input: which clips, in which language


def select_clips(
    manifest: str | os.PathLike,
    *,
    language: str = "auto",
    pattern: str | None = None,
    category: str | None = None,
    limit: int | None = None,
) -> list[Clip]:
    """Read the manifest, keep the rows asked for, and decode their audio; BenchError if bad."""
    try:
        rows = examples.read_manifest(manifest)
    except ValueError as e:
        raise BenchError(str(e)) from None
    path = Path(manifest)
    path = path / examples.MANIFEST_NAME if path.is_dir() else path
    names = {ex.path: _name(ex.path, path.parent) for ex in rows}
    if category is not None and not any(ex.category for ex in rows):
        raise BenchError(f"--category needs a category column; {path} has none.")
    if pattern is not None:
        try:
            regex = re.compile(pattern)
        except re.error as e:
            raise BenchError(f"--filter {pattern!r} is not a regular expression: {e}.") from None
        rows = [ex for ex in rows if regex.search(names[ex.path])]
    if category is not None:
        wanted = category.strip().lower()
        rows = [ex for ex in rows if ex.category.lower().startswith(wanted)]
    rows = rows[:limit] if limit is not None else rows
    if not rows:
        raise BenchError(f"No clip in {path} matches --filter/--category.")
    return [_clip(ex, names[ex.path], ex.category, language) for ex in rows]


def _name(clip: Path, folder: Path) -> str:
    """The file as the manifest wrote it: relative to the manifest's folder, or absolute."""
    # Relative rows are folder / row, so relative_to gives the row back (even with a "../");
    # an absolute row replaced the folder and is not under it.
    return clip.relative_to(folder).as_posix() if clip.is_relative_to(folder) else clip.as_posix()


def _clip(ex: Example, name: str, category: str, language: str) -> Clip:
    try:
        # --language auto: each row's own language when it names one, else auto-detect.
        code = compare.language_code(
            ex.language if language.strip().lower() == "auto" else language
        )
        audio = load_audio(ex.path, BENCH_LIMITS)
    except ValueError as e:  # CompareError, AudioError
        raise BenchError(f"{name}: {e}") from None
    return Clip(name, category, code, ex.reference_text, audio.samples)


def join_clips(
    clips: list[Clip], min_s: float, gap_s: float = 0.3, max_s: float = WINDOW_S
) -> list[Clip]:
    """Join consecutive clips of one language into clips of at least `min_s` and at most
    `max_s` seconds (one 30 s window), with `gap_s` of silence between them and their
    reference texts joined: real speech at the 20-30 s lengths where a window is mostly used, from a
    manifest of short lines. A clip that would push a group past `max_s` starts the next group
    (a clip longer than `max_s` stays alone); a remainder shorter than min_s / 2 is added to
    the language's previous joined clip when that still fits in `max_s`."""
    gap = np.zeros(int(gap_s * SAMPLE_RATE), dtype=np.float32)

    def seconds(group: list[Clip]) -> float:
        return (sum(len(c.samples) for c in group) + (len(group) - 1) * len(gap)) / SAMPLE_RATE

    groups: list[list[Clip]] = []
    for clip in clips:
        last = groups[-1] if groups else None
        if (
            last is None
            or seconds(last) >= min_s
            or seconds([*last, clip]) > max_s
            or last[0].language != clip.language
        ):
            groups.append([clip])
        else:
            last.append(clip)
    merged: list[list[Clip]] = []
    for group in groups:
        short = seconds(group) < min_s / 2
        if (
            short
            and merged
            and merged[-1][0].language == group[0].language
            and seconds(merged[-1] + group) <= max_s
        ):
            merged[-1] += group  # a language's short remainder
        else:
            merged.append(group)
    groups = merged
    joined = []
    for group in groups:
        parts = [p for c in group for p in (c.samples, gap)][:-1]
        name = f"{group[0].name}+{len(group) - 1}" if len(group) > 1 else group[0].name
        text = " ".join(c.reference_text for c in group)
        joined.append(Clip(name, group[0].category, group[0].language, text, np.concatenate(parts)))
    return joined


def check_clips(checked: compare.CheckedRequest, clips: list[Clip]) -> None:
    """Every clip's language must suit the main; raise BenchError before anything loads (each
    clip's language is already a Whisper code, read by compare.language_code)."""
    main = checked.main
    others = sorted({c.language for c in clips if c.language not in (None, "en")})
    if main.english_only and others:
        n = sum(c.language in others for c in clips)
        raise BenchError(
            f"{main.label} is English-only, but {n} selected clip(s) are in {', '.join(others)}. "
            "Select English clips (--filter, --category) or pick a multilingual main."
        )


# ---------------------------------------------------------------------------------------------
# Running


def run_clip(
    clip: Clip,
    req: CompareRequest,
    main: models.Loaded,
    assistant: models.Loaded,
    *,
    peer: tuple[int, str] | None,
    max_new_tokens: int | None = None,
    on_run: Callable[[str], None] = lambda name: None,
    warmup: int = 1,
) -> ClipResult:
    """Time baseline, speculative (and peer) alternately on one clip, as compare() does, and
    score the transcripts. `peer`: the peer's (gamma, schedule), or None to time no peer."""
    peer_req = None
    timestamped = req.timestamps or len(clip.samples) > WINDOW_S * SAMPLE_RATE
    if peer is not None and (assistant.checkpoint.decoder_only or not timestamped):
        # with a full Whisper assistant, transformers' engine does not reproduce timestamped
        # decoding (compare.TRANSFORMERS_TIMESTAMPS): no peer on such clips
        peer_req = dataclasses.replace(
            req, engine=PEER_ENGINE, gamma=peer[0], gamma_schedule=peer[1]
        )

    def around(side: str, run: Callable[[], DecodeResult]) -> DecodeResult:
        on_run(req.engine if side == "speculative" else side)
        return run()

    speculative, peer_comparison = compare.compare_loaded(
        clip.samples,
        req,
        main,
        assistant,
        language=clip.language,
        peer=peer_req,
        max_new_tokens=max_new_tokens,
        around=around,
        warmup=warmup,
    )
    normalize = normalizer(clip.language or ("en" if main.checkpoint.english_only else None), main)
    scored = Scored(
        reference_text=normalize(clip.reference_text),
        baseline=normalize(speculative.baseline.text),
        speculative=normalize(speculative.speculative.text),
        peer=normalize(peer_comparison.speculative.text) if peer_comparison else None,
        reference=_reference_transcript(speculative, normalize),
    )
    return ClipResult(clip, speculative, peer_comparison, scored)


def _reference_transcript(c: Comparison, normalize: Callable[[str], str]) -> str | None:
    """--reference's transcript, normalized; None when it did not run."""
    if isinstance(c.reference, reference.ReferenceResult):
        return normalize(c.reference.run.text)
    return None


# ---------------------------------------------------------------------------------------------
# Scoring and totals


def normalizer(language: str | None, main: models.Loaded) -> Callable[[str], str]:
    """Whisper's text normalizer for scoring (reference.text_normalizer), with the main's
    British->American spellings for English."""
    if language != "en":
        return reference.text_normalizer(language)
    # Converted tokenizers may lack normalizer.json; the spelling mapping is then empty.
    spelling = getattr(main.processor.tokenizer, "english_spelling_normalizer", None) or {}
    return reference.text_normalizer(language, spelling)


def wer(pairs: list[tuple[str, str]]) -> float | None:
    """Corpus WER of normalized (reference, hypothesis) pairs: errors summed over the pairs
    over reference words summed. Pairs with an empty reference are skipped; None if none is left.
    """
    import jiwer

    pairs = [(ref, hyp) for ref, hyp in pairs if ref]
    if not pairs:
        return None
    return float(jiwer.wer([ref for ref, _ in pairs], [hyp for _, hyp in pairs]))


def side_totals(comparisons: list[Comparison], pairs: list[tuple[str, str]]) -> SideTotals:
    """Totals of one side, every clip's runs pooled; `pairs` are the normalized (reference,
    transcript) of each clip."""
    base = [c.baseline for c in comparisons]
    spec = [c.speculative for c in comparisons]
    speedups = [c.speedup for c in comparisons]
    return SideTotals(
        n_identical_clips=sum(c.identical for c in comparisons),
        time_s=sum(r.time_s for r in spec),
        speedup=metrics.speedup(base, spec),
        median_clip_speedup=statistics.median(speedups),
        min_clip_speedup=min(speedups),
        wer=wer(pairs),
        acceptance_rate=metrics.acceptance_rate(spec),
        tokens_per_main_forward=metrics.tokens_per_main_forward(spec),
        alpha=metrics.alpha(spec),
        mean_gamma=metrics.mean_gamma(spec),
        cost_ratio=metrics.cost_ratio(base, spec),
        predicted_speedup=metrics.predicted_speedup(base, spec),
        predicted_end_to_end=metrics.predicted_end_to_end(base, spec),
    )


def totals(results: list[ClipResult]) -> Totals:
    def pairs(side: str) -> list[tuple[str, str]]:
        return [(r.scored.reference_text, getattr(r.scored, side) or "") for r in results]

    speculative = side_totals([r.speculative for r in results], pairs("speculative"))
    peers = [r.peer for r in results if r.peer is not None]
    peer = side_totals(peers, pairs("peer")) if len(peers) == len(results) else None
    ratios = [r.speedup_over_peer or 0.0 for r in results] if peer else []
    refs = [r.speculative.reference for r in results]
    reference_totals = None
    if refs and all(isinstance(ref, reference.ReferenceResult) for ref in refs):
        reference_totals = reference.bench_totals(
            [r.speculative.baseline.time_s for r in results],
            [r.speculative.speculative.time_s for r in results],
            refs,
            wer(pairs("reference")),
        )
    return Totals(
        n_clips=len(results),
        audio_s=sum(r.speculative.duration_s for r in results),
        baseline_s=sum(r.speculative.baseline.time_s for r in results),
        wer_baseline=wer(pairs("baseline")),
        speculative=speculative,
        peer=peer,
        speedup_over_peer=metrics.ratio(peer.time_s, speculative.time_s) if peer else None,
        median_clip_speedup_over_peer=statistics.median(ratios) if ratios else None,
        reference=reference_totals,
    )


# ---------------------------------------------------------------------------------------------
# Where it ran


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


# ---------------------------------------------------------------------------------------------
# Output


def print_table(console: Any, results: list[ClipResult], total: Totals) -> None:
    from rich.table import Table

    table = Table(title="Per clip (median times, seconds)")
    for name in ("clip", "lang", "audio", "base", "spec", "×"):
        table.add_column(name, justify="left" if name == "clip" else "right")
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
    """Per-clip speed-ups as bars (the speculative column, the peer and the reference when
    run), with a line at 1.0."""
    from matplotlib.figure import Figure

    n = len(results)
    x = np.arange(n)
    engine = results[0].speculative.engine
    bars = [
        (
            [r.speculative.speedup for r in results],
            f"{engine} (total {total.speculative.speedup:.2f}×)",
        )
    ]
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


# ---------------------------------------------------------------------------------------------
# CLI


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m specwhisper.bench",
        description="Baseline vs speculative Whisper on a manifest of clips: per-clip timings, "
        "identical-transcript check, WER, and totals. The last stdout line is a JSON object.",
    )
    parser.add_argument("--main", required=True, help="Hub id, local folder name or path")
    parser.add_argument("--assistant", required=True, help="Hub id, local folder, or self-int8")
    parser.add_argument("--manifest", required=True, help="manifest.tsv (or its folder)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side (default 3)")
    parser.add_argument(
        "--language", default="auto", help="auto (each row's language column) or a Whisper code"
    )
    parser.add_argument(
        "--peer", action="store_true", help="also time transformers' assisted generation"
    )
    parser.add_argument("--out", default="bench-out", help="folder for results.json and the PNG")
    parser.add_argument("--engine", default="specwhisper", choices=decoding.ENGINES)
    parser.add_argument("--gamma", type=int, default=5, help="draft tokens per step (start value)")
    parser.add_argument("--gamma-schedule", default="adaptive", choices=schedule.SCHEDULES)
    parser.add_argument("--peer-gamma", type=int, help="the peer's draft tokens (default: --gamma)")
    parser.add_argument(
        "--peer-gamma-schedule",
        choices=schedule.SCHEDULES,
        help="the peer's schedule (default: --gamma-schedule); adaptive is transformers' own "
        "dynamic drafting (confidence threshold 0.4)",
    )
    parser.add_argument("--dtype", default="auto", help="auto (fp16 on GPU, fp32 on CPU), ...")
    parser.add_argument(
        "--encoder-dtype",
        default="auto",
        help="the main's encoder alone: auto (the same as --dtype), bfloat16 (about 3x faster "
        "on a CPU with AMX; the decoder stays in --dtype), float16 or float32",
    )
    parser.add_argument("--timestamps", action="store_true", help="segment timestamps")
    parser.add_argument(
        "--reference",
        nargs="?",
        const=reference.ENGINE,
        default="",
        type=reference_flag,
        metavar="faster-whisper[:int8|float32|float16]",
        help="also time faster-whisper (CTranslate2) on the main's weights, greedy, for context "
        f"(default compute type {reference.DEFAULT_COMPUTE_TYPE}; float16 on a GPU only)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="0: greedy (identical tokens); above 0 both sides sample (speculative sampling)",
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument(
        "--fallback", action="store_true", help="Whisper's temperature fallback, both sides"
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="identity checks only: no warm-up run, so the timings are not speed figures",
    )
    parser.add_argument("--filter", metavar="REGEX", help="keep clips whose file name matches")
    parser.add_argument("--category", help="keep clips whose category starts with this")
    parser.add_argument("--limit", type=int, help="keep the first N selected clips")
    parser.add_argument(
        "--join",
        type=float,
        metavar="SECONDS",
        help="join consecutive clips of a language into clips of at least this many seconds",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, help="cap tokens per 30 s window (quick checks only)"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="batch mode: decode the clips N at a time, batched baseline vs our batched loop",
    )
    parser.add_argument(
        "--batch-sweep",
        type=bench_batch.parse_sweep,
        metavar="SIZES",
        help="batch mode at each size (e.g. 1,2,4,8,16), with a speed-up chart",
    )
    args = parser.parse_args(argv)
    if args.batch_size is not None or args.batch_sweep:
        if args.batch_size is not None and args.batch_sweep:
            parser.error("give --batch-size or --batch-sweep, not both")
        batch_problem = bench_batch.problem(args)
        if batch_problem:
            parser.error(batch_problem)
    if args.reference and (args.batch_size is not None or args.batch_sweep):
        parser.error("--reference times one clip at a time; it does not run in batch mode")
    if args.peer and args.engine == PEER_ENGINE:
        parser.error(f"--peer times {PEER_ENGINE}' assisted generation; use --engine specwhisper")
    if (args.peer_gamma is not None or args.peer_gamma_schedule) and not args.peer:
        parser.error("--peer-gamma and --peer-gamma-schedule set the peer: add --peer")
    if args.peer_gamma is not None and not 1 <= args.peer_gamma <= 64:
        parser.error("--peer-gamma must be between 1 and 64")
    if not 0.0 <= args.temperature <= compare.MAX_TEMPERATURE:
        parser.error(f"--temperature must be between 0 and {compare.MAX_TEMPERATURE:g}")
    if args.peer and args.fallback:
        parser.error(f"--fallback runs on our engine only: {PEER_ENGINE}' engine cannot run it")
    for name in ("limit", "max_new_tokens"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def reference_flag(value: str) -> str:
    """--reference's value, checked: "faster-whisper[:compute type]" as spec.name."""
    try:
        spec = reference.parse_reference(value)
    except reference.ReferenceError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return spec.name if spec else ""


def request(args: argparse.Namespace) -> CompareRequest:
    return CompareRequest(
        main=args.main,
        assistant=args.assistant,
        language=args.language,
        gamma=args.gamma,
        gamma_schedule=args.gamma_schedule,
        repeats=args.repeats,
        dtype=args.dtype,
        encoder_dtype=args.encoder_dtype,
        timestamps=args.timestamps,
        engine=args.engine,
        temperature=args.temperature,
        seed=args.seed,
        fallback=args.fallback,
        reference=args.reference,
    )


def run_all(
    clips: list[Clip],
    req: CompareRequest,
    main: models.Loaded,
    assistant: models.Loaded,
    args: argparse.Namespace,
) -> list[ClipResult]:
    """Every clip in turn, with a progress bar on stderr (one tick per decoding run)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    peer = peer_gamma(args)
    warmup = 0 if args.no_warmup else 1
    n_sides = 2 + bool(peer) + bool(req.reference)
    n_runs = len(clips) * n_sides * (req.repeats + warmup)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    results = []
    with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True)) as progress:
        task = progress.add_task("starting", total=n_runs)
        for clip in clips:

            def on_run(side: str, name: str = clip.name) -> None:
                progress.update(task, description=f"{name}: {side}")
                progress.advance(task)

            result = run_clip(
                clip,
                req,
                main,
                assistant,
                peer=peer,
                max_new_tokens=args.max_new_tokens,
                on_run=on_run,
                warmup=warmup,
            )
            results.append(result)
            # one line per clip, so a long run that is stopped early still shows its clips
            spec = result.speculative
            same = "identical" if spec.identical else f"differs at {spec.first_divergence}"
            progress.console.print(
                f"clip {len(results)}/{len(clips)} {clip.name}: {same}, "
                f"acceptance {spec.speculative.acceptance_rate:.0%}, {spec.speedup:.2f}×"
            )
    return results


def peer_gamma(args: argparse.Namespace) -> tuple[int, str] | None:
    """The peer's (gamma, schedule): its own flags, else the speculative column's; None
    without --peer."""
    if not args.peer:
        return None
    return (
        args.gamma if args.peer_gamma is None else args.peer_gamma,
        args.peer_gamma_schedule or args.gamma_schedule,
    )


def settings_of(
    args: argparse.Namespace,
    req: CompareRequest,
    main: models.Loaded,
    assistant: models.Loaded,
    load_s: float,
) -> dict[str, Any]:
    peer = peer_gamma(args)
    batched = args.batch_size is not None or bool(args.batch_sweep)
    sampling = req.temperature > 0
    stops = schedule.draft_stops_early(
        req.engine, req.gamma_schedule, sampling=sampling, batched=batched
    )
    return {
        "main": main.checkpoint.label,
        "assistant": assistant.checkpoint.label,
        "engine": req.engine,
        "peer": args.peer,
        "gamma": req.gamma,
        "gamma_schedule": req.gamma_schedule,
        "peer_gamma": peer[0] if peer else None,
        "peer_gamma_schedule": peer[1] if peer else None,
        "dtype": models.dtype_name(main.dtype),
        "encoder_dtype": models.dtype_name(main.encoder_precision),
        "draft_cross_attention": drafters.cross_precision(assistant, req.engine),
        # the probability under which our drafts stop early, where they do (None: they don't)
        "draft_confidence": schedule.draft_confidence() if stops else None,
        "repeats": req.repeats,
        "timing": (
            f"median of {req.repeats} after 1 warm-up, alternating order, device synced"
            if not args.no_warmup
            else "one run per side, no warm-up: an identity check, not a speed figure"
        ),
        "language": args.language,
        "timestamps": req.timestamps,
        "decoding": req.decoding,
        "temperature": req.temperature,
        "seed": req.seed,
        "max_new_tokens": args.max_new_tokens,
        "manifest": str(Path(args.manifest).resolve()),
        "load_time_s": round(load_s, 3),
        "reference": req.reference or None,
    }


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


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from transformers.utils import logging as hf_logging

    arguments = sys.argv[1:] if argv is None else argv
    args = parse_args(arguments)
    hf_logging.set_verbosity_error()  # per-call generate chatter would bury the progress bar
    req = request(args)
    try:  # 1. every input checked and every clip decoded before anything is timed
        checked = compare.check_request(req)
        filters = dict(pattern=args.filter, category=args.category, limit=args.limit)
        clips = select_clips(args.manifest, language=args.language, **filters)
        if args.join:
            clips = join_clips(clips, args.join)
        check_clips(checked, clips)
        main_model, assistant, load_s = compare.load_pair(checked)
        if req.reference:  # no CTranslate2 copy of the main: said now, not after the clips
            reference.load_reference(reference.parse_reference(req.reference), main_model)
    except ValueError as e:  # BenchError, CompareError, CheckpointError, AudioError
        print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT

    # 2. what runs where, then every clip timed, then the table
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)
    settings = settings_of(args, req, main_model, assistant, load_s)
    hw, libs = hardware(main_model.device), versions()
    print_header(console, settings, hw, libs, clips)
    if args.batch_size is not None or args.batch_sweep:
        settings["batch_sizes"] = bench_batch.batch_sizes(args)
        return bench_batch.run(args, arguments, clips, main_model, assistant, settings, hw, libs)
    try:
        results = run_all(clips, req, main_model, assistant, args)
    except compare.CompareError as e:  # the GPU ran out of memory
        print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    total = totals(results)
    print_table(console, results, total)

    # 3. results.json and the chart in --out, then the JSON last line
    body = {"argv": sys.argv, "totals": total.to_dict(), "clips": [r.to_dict() for r in results]}
    return write_results(
        console,
        args,
        arguments,
        {"settings": settings, "hardware": hw, "versions": libs},
        body,
        total.to_dict(),
        lambda path, title: save_chart(results, total, path, title),
        "speedups.png",
    )


# Bench JSON keys renamed in 0.2: each new key's old names are written beside it for one release
# (BENCHMARKS.md#bench-json). The compare API's keys never changed.
OLD_NAMES = {
    "n_identical_clips": ("identical_clips",),
    "peer_n_identical_clips": ("peer_identical_clips",),
    "speculative_speedup_over_peer": ("ours_vs_peer",),
    "median_clip_speculative_speedup_over_peer": ("median_clip_ours_vs_peer",),
    "speculative_speedup_over_reference": ("ours_vs_reference",),
    "median_clip_speculative_speedup_over_reference": ("median_clip_ours_vs_reference",),
    "min_clip_speculative_speedup_over_reference": ("min_clip_ours_vs_reference",),
    "reference_n_threads": ("reference_threads",),
    "reference_n_identical_clips": ("reference_identical_clips",),
    "reference_n_same_text_clips": ("reference_same_text_clips",),
    "reference_n_same_normalized_clips": ("reference_same_normalized_clips",),
    "normalized_reference_text": ("normalized_reference",),
    "n_identical_rows": ("n_identical", "identical_clips"),
    "n_rows": ("n_clips",),
    "n_main_forwards": ("n_main_passes",),
}


def with_old_names(d: dict[str, Any]) -> dict[str, Any]:
    """`d` with each renamed key's old names beside it (top level only)."""
    old = {o: d[new] for new, olds in OLD_NAMES.items() if new in d for o in olds if o not in d}
    return d | old


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
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
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


if __name__ == "__main__":
    sys.exit(main())
