"""The bench's runs: each clip timed baseline against speculative (and the peer), with the
page's own code (compare.compare_loaded), scored, and totalled over all clips; the JSON shape of
a clip's row and of the totals, with the old names of renamed keys beside the new."""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specwhisper import (
    compare,
    loading,
    metrics,
    reference,
)
from specwhisper.audio import SAMPLE_RATE
from specwhisper.bench.selection import Clip
from specwhisper.compare import Comparison
from specwhisper.decoding import WINDOW_S, DecodeResult
from specwhisper.request_check import CompareRequest
from specwhisper.scoring import normalizer, wer

PEER_ENGINE = "transformers"


@dataclass(frozen=True)
class Scored:
    """Texts as scored: after Whisper's normalizer for the clip's language."""

    reference_text: str
    baseline: str
    speculative: str
    peer: str | None
    reference: str | None = None  # --reference's transcript
    loop_alone: str | None = None  # our loop without drafting's transcript


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
        alone = self.speculative.loop_alone_outcome()
        if alone["loop_alone"] is not None:
            alone["loop_alone"]["wer"] = _round(wer([(s.reference_text, s.loop_alone or "")]))
            row |= alone
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
class LoopAloneTotals:
    """Our loop without drafting (gamma 0) over all clips: the speed-up split into the loop's
    part (the baseline's time over it) and drafting's part (its time over the speculative
    column's); their product is the speculative column's speed-up."""

    n_identical_clips: int  # its tokens against the baseline's
    time_s: float  # sum of the per-clip medians
    speedup: float  # the loop's part: sum of baseline times / sum of its times
    median_clip_speedup: float
    min_clip_speedup: float
    speculative_speedup: float  # drafting's part: sum of its times / sum of speculative times
    median_clip_speculative_speedup: float
    min_clip_speculative_speedup: float
    wer: float | None

    def to_dict(self) -> dict[str, Any]:
        over = "speculative_speedup_over_loop_alone"
        return {
            "loop_alone_n_identical_clips": self.n_identical_clips,
            "loop_alone_s": round(self.time_s, 4),
            "loop_alone_speedup": round(self.speedup, 4),
            "median_clip_loop_alone_speedup": round(self.median_clip_speedup, 4),
            "min_clip_loop_alone_speedup": round(self.min_clip_speedup, 4),
            over: round(self.speculative_speedup, 4),
            f"median_clip_{over}": round(self.median_clip_speculative_speedup, 4),
            f"min_clip_{over}": round(self.min_clip_speculative_speedup, 4),
            "wer_loop_alone": _round(self.wer),
        }


def loop_alone_totals(
    comparisons: list[Comparison], pairs: list[tuple[str, str]]
) -> LoopAloneTotals | None:
    """The split over all clips; None unless every clip timed our loop without drafting."""
    if not comparisons or any(c.loop_alone is None for c in comparisons):
        return None
    base_s = sum(c.baseline.time_s for c in comparisons)
    alone_s = sum(c.loop_alone.time_s for c in comparisons)
    spec_s = sum(c.speculative.time_s for c in comparisons)
    loop = [c.loop_alone_speedup or 0.0 for c in comparisons]
    drafting = [c.speedup_over_loop_alone or 0.0 for c in comparisons]
    return LoopAloneTotals(
        n_identical_clips=sum(c.loop_alone.token_ids == c.baseline.token_ids for c in comparisons),
        time_s=alone_s,
        speedup=metrics.ratio(base_s, alone_s) or 0.0,
        median_clip_speedup=statistics.median(loop),
        min_clip_speedup=min(loop),
        speculative_speedup=metrics.ratio(alone_s, spec_s) or 0.0,
        median_clip_speculative_speedup=statistics.median(drafting),
        min_clip_speculative_speedup=min(drafting),
        wer=wer(pairs),
    )


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
    loop_alone: LoopAloneTotals | None = None  # --loop-alone: the speed-up split

    def to_dict(self) -> dict[str, Any]:
        d = {
            "n_clips": self.n_clips,
            "audio_s": round(self.audio_s, 3),
            "baseline_s": round(self.baseline_s, 4),
            "wer_baseline": _round(self.wer_baseline),
            **self.speculative.to_dict("speculative"),
        }
        if self.loop_alone is not None:
            d |= self.loop_alone.to_dict()
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


def run_clip(
    clip: Clip,
    req: CompareRequest,
    main: loading.Loaded,
    assistant: loading.Loaded,
    *,
    peer: tuple[int, str] | None,
    max_new_tokens: int | None = None,
    on_run: Callable[[str], None] = lambda name: None,
    warmup: int = 1,
) -> ClipResult:
    """Time baseline, speculative (and the peer, our loop without drafting with
    `req.loop_alone`, the reference) alternately on one clip, as compare() does, and score the
    transcripts. `peer`: the peer's (gamma, schedule), or None to time no peer."""
    peer_req = None
    timestamped = req.timestamps or len(clip.samples) > WINDOW_S * SAMPLE_RATE
    if peer is not None and (assistant.checkpoint.decoder_only or not timestamped):
        # with a full Whisper assistant, transformers' engine does not reproduce timestamped
        # decoding (request_check.TRANSFORMERS_TIMESTAMPS): no peer on such clips
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
        loop_alone=normalize(speculative.loop_alone.text) if speculative.loop_alone else None,
    )
    return ClipResult(clip, speculative, peer_comparison, scored)


def _reference_transcript(c: Comparison, normalize: Callable[[str], str]) -> str | None:
    """--reference's transcript, normalized; None when it did not run."""
    if isinstance(c.reference, reference.ReferenceResult):
        return normalize(c.reference.run.text)
    return None


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
        loop_alone=loop_alone_totals([r.speculative for r in results], pairs("loop_alone")),
    )


def run_all(
    clips: list[Clip],
    req: CompareRequest,
    main: loading.Loaded,
    assistant: loading.Loaded,
    args: argparse.Namespace,
) -> list[ClipResult]:
    """Every clip in turn, with a progress bar on stderr (one tick per decoding run)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    peer = peer_gamma(args)
    warmup = 0 if args.no_warmup else 1
    n_sides = 2 + bool(peer) + bool(req.reference) + req.loop_alone
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
            split = (
                f" (loop {spec.loop_alone_speedup:.2f}× · drafting "
                f"{spec.speedup_over_loop_alone:.2f}×)"
                if spec.loop_alone is not None
                else ""
            )
            progress.console.print(
                f"clip {len(results)}/{len(clips)} {clip.name}: {same}, "
                f"acceptance {spec.speculative.acceptance_rate:.0%}, {spec.speedup:.2f}×{split}"
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
