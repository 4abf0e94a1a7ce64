"""Batch mode: recordings cut into 30 s rows, the batched baseline against our batched loop at
each batch size, and the rows stitched back into recordings.

The page and the bench both run batch mode through this module and only present what it
returns. A recording longer than one window becomes several rows, cut as transformers' ASR
pipeline cuts it and named "name #1", "name #2", ...; `check_batch_sizes` is the one range
check of the sizes; `sweep` runs the sizes in ascending order, so that batch size 1's baselines
serve as every row's batch of one; `stitch` puts a recording's rows back together as the
pipeline does, on both sides.

It does not read audio files (see audio), load checkpoints (see loading) or decode (see
batch_loop).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specwhisper import metrics
from specwhisper.audio import SAMPLE_RATE, chunks
from specwhisper.batch_loop import decode_batch_baseline, decode_batch_speculative, prepare_batch
from specwhisper.decoding import WINDOW_S, first_divergence
from specwhisper.loading import Loaded
from specwhisper.request_check import DEFAULTS, CompareError
from specwhisper.timing import alternate

MIN_BATCH_SIZE, MAX_BATCH_SIZE = 1, 64
# The Distil-Whisper paper (Gandhi et al. 2023): speculative decoding with distil-large-v2
# assisting large-v2 on an A100, speed-up by batch size; the page and the bench draw the
# speculative column's beside it.
PAPER_A100 = {1: 2.0, 4: 1.3, 16: 0.8}


class BatchError(CompareError):
    """A batch-mode request that cannot run, worded for a person."""


def check_batch_sizes(sizes: Iterable[Any]) -> tuple[int, ...]:
    """The batch sizes ascending, each once; BatchError unless they are whole numbers from
    MIN_BATCH_SIZE to MAX_BATCH_SIZE."""
    try:
        checked = sorted({int(size) for size in sizes})
    except (TypeError, ValueError):
        raise BatchError("Batch sizes must be whole numbers.") from None
    if not checked or checked[0] < MIN_BATCH_SIZE or checked[-1] > MAX_BATCH_SIZE:
        raise BatchError(
            f"Pick at least one batch size, from {MIN_BATCH_SIZE} to {MAX_BATCH_SIZE}."
        )
    return tuple(checked)


# ---------------------------------------------------------------------------------------------
# Recordings cut into rows


@dataclass(frozen=True)
class Recording:
    """One recording's place among the rows: which rows it became, and how to stitch them."""

    name: str
    rows: range  # indices into Rows
    strides: tuple[tuple[int, int, int], ...]  # per row: length, left and right stride (samples)


@dataclass(frozen=True)
class Rows:
    """Recordings cut into windows of up to 30 s, one row each, in order."""

    samples: tuple[np.ndarray, ...]
    languages: tuple[str | None, ...]  # per row, its recording's (None: detect, or English-only)
    names: tuple[str, ...]  # "f.wav", or "f.wav #2" for a recording's second row
    recordings: tuple[Recording, ...]

    @property
    def duration_s(self) -> float:
        return sum(len(s) for s in self.samples) / SAMPLE_RATE


def row_name(recording: str, index: int, n_rows: int) -> str:
    """A row's name: the recording's, numbered from 1 when it was cut into several rows."""
    return recording if n_rows == 1 else f"{recording} #{index + 1}"


def cut_rows(recordings: Iterable[tuple[str, np.ndarray, str | None]]) -> Rows:
    """(name, 16 kHz samples, language) per recording, cut as the ASR pipeline cuts them."""
    samples: list[np.ndarray] = []
    languages: list[str | None] = []
    names: list[str] = []
    placed: list[Recording] = []
    for name, audio, language in recordings:
        parts = chunks(audio)
        rows = range(len(samples), len(samples) + len(parts))
        placed.append(Recording(name, rows, tuple(stride for _, stride in parts)))
        samples += [piece for piece, _ in parts]
        languages += [language] * len(parts)
        names += [row_name(name, i, len(parts)) for i in range(len(parts))]
    return Rows(tuple(samples), tuple(languages), tuple(names), tuple(placed))


# ---------------------------------------------------------------------------------------------
# Baseline against speculative, batch by batch


@dataclass(frozen=True)
class RowResult:
    """One row of a batched comparison."""

    baseline_text: str
    speculative_text: str
    identical: bool  # speculative tokens == the batched baseline's, for this row
    first_divergence: int | None
    # the batched baseline's tokens == a batch of one's (None: not checked)
    same_as_batch_of_one: bool | None = None
    baseline_tokens: tuple[int, ...] = ()  # the batched baseline's, for later comparisons
    speculative_tokens: tuple[int, ...] = ()


@dataclass(frozen=True)
class BatchComparison:
    """The batched baseline and our batched loop on the same rows, cut into batches of
    `batch_size` in order (the last one may be smaller); times are sums of per-batch medians."""

    batch_size: int
    n_batches: int
    baseline_s: float
    speculative_s: float
    n_draft_tokens: int
    n_accepted: int
    n_main_forwards: tuple[int, int]  # baseline, speculative (the last repeat, all batches)
    rows: tuple[RowResult, ...]

    @property
    def speedup(self) -> float:
        return metrics.times_faster(self.baseline_s, self.speculative_s)

    @property
    def n_identical_rows(self) -> int:
        return sum(r.identical for r in self.rows)

    @property
    def acceptance_rate(self) -> float:
        return metrics.acceptance_rate([self])

    @property
    def batch_of_one_tally(self) -> str | None:
        """ "k/n": rows whose batched baseline equals their batch of one (None: not checked)."""
        checked = [r.same_as_batch_of_one for r in self.rows if r.same_as_batch_of_one is not None]
        return f"{sum(checked)}/{len(checked)}" if checked else None

    def to_dict(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """The JSON the page and the bench write; each row named from `names` when given."""
        rows = [dataclasses.asdict(r) for r in self.rows]
        if names is not None:
            rows = [row | {"clip": name} for row, name in zip(rows, names, strict=True)]
        forwards = {"baseline": self.n_main_forwards[0], "speculative": self.n_main_forwards[1]}
        return {
            "batch_size": self.batch_size,
            "n_batches": self.n_batches,
            "baseline_s": round(self.baseline_s, 4),
            "speculative_s": round(self.speculative_s, 4),
            "speedup": round(self.speedup, 4),
            "n_rows": len(self.rows),
            "n_identical_rows": self.n_identical_rows,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "n_main_forwards": forwards,
            "batched_baseline_equals_batch_of_one": self.batch_of_one_tally,
            "rows": rows,
        }


def compare_batches(
    main: Loaded,
    assistant: Loaded,
    clips: Sequence[np.ndarray],
    languages: Sequence[str | None],
    batch_size: int,
    *,
    repeats: int = DEFAULTS.repeats,
    warmup: int = 1,
    gamma: int = DEFAULTS.gamma,
    gamma_schedule: str = DEFAULTS.gamma_schedule,
    max_new_tokens: int | None = None,
    check_batch_of_one: bool = False,
    batch_of_one: Sequence[tuple[int, ...]] | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> BatchComparison:
    """Time the batched baseline against our batched loop, batch by batch (alternating, after a
    warm-up, medians), and check every row's tokens. With `check_batch_of_one`, each row's
    batched baseline is also compared with its baseline in a batch of one (padding and batch
    shape can round differently), against `batch_of_one` (each row's tokens from a batch of
    one, e.g. a batch-size-1 comparison's baseline) when given, else by running it."""
    (batch_size,) = check_batch_sizes([batch_size])
    starts = range(0, len(clips), batch_size)
    baseline_s = speculative_s = 0.0
    n_draft = n_accepted = forwards_baseline = forwards_speculative = 0
    rows: list[RowResult] = []
    options = dict(gamma=gamma, gamma_schedule=gamma_schedule, max_new_tokens=max_new_tokens)
    for i, start in enumerate(starts):
        if on_batch is not None:
            on_batch(i, len(starts))
        part = slice(start, start + batch_size)
        batch = prepare_batch(main, list(clips[part]), list(languages[part]))
        runs = {
            "baseline": lambda b=batch: decode_batch_baseline(main, b, max_new_tokens),
            "speculative": lambda b=batch: decode_batch_speculative(main, assistant, b, **options),
        }
        timings = alternate(runs, repeats=repeats, warmup=warmup, device=main.device)
        baseline, speculative = timings["baseline"].result, timings["speculative"].result
        baseline_s += timings["baseline"].median_s
        speculative_s += timings["speculative"].median_s
        n_draft += speculative.n_draft_tokens
        n_accepted += speculative.n_accepted
        forwards_baseline += baseline.n_main_forwards
        forwards_speculative += speculative.n_main_forwards
        for j, (b_ids, s_ids) in enumerate(
            zip(baseline.token_ids, speculative.token_ids, strict=True)
        ):
            alone = None
            if check_batch_of_one and batch_of_one is not None:
                alone = batch_of_one[start + j] == b_ids
            elif check_batch_of_one:
                one = prepare_batch(main, [clips[start + j]], [languages[start + j]])
                alone = decode_batch_baseline(main, one, max_new_tokens).token_ids[0] == b_ids
            texts = baseline.texts[j], speculative.texts[j]
            divergence = first_divergence(b_ids, s_ids)
            rows.append(RowResult(*texts, s_ids == b_ids, divergence, alone, b_ids, s_ids))
    return BatchComparison(
        batch_size=batch_size,
        n_batches=len(starts),
        baseline_s=baseline_s,
        speculative_s=speculative_s,
        n_draft_tokens=n_draft,
        n_accepted=n_accepted,
        n_main_forwards=(forwards_baseline, forwards_speculative),
        rows=tuple(rows),
    )


def sweep(
    main: Loaded,
    assistant: Loaded,
    rows: Rows,
    sizes: Iterable[int],
    *,
    repeats: int = DEFAULTS.repeats,
    warmup: int = 1,
    gamma: int = DEFAULTS.gamma,
    gamma_schedule: str = DEFAULTS.gamma_schedule,
    max_new_tokens: int | None = None,
    on_batch: Callable[[int, int, int], None] | None = None,
) -> Iterator[BatchComparison]:
    """`compare_batches` over every row at each batch size, ascending, one result per size as it
    finishes. Every size above 1 checks each row's batched baseline against its batch of one:
    batch size 1's baselines when 1 was among the sizes, else a run for the purpose.
    `on_batch(size, i, n)` is told before batch i of n at each size."""
    batch_of_one = None
    for size in check_batch_sizes(sizes):
        result = compare_batches(
            main,
            assistant,
            rows.samples,
            rows.languages,
            size,
            repeats=repeats,
            warmup=warmup,
            gamma=gamma,
            gamma_schedule=gamma_schedule,
            max_new_tokens=max_new_tokens,
            check_batch_of_one=size > 1,
            batch_of_one=batch_of_one,
            on_batch=None if on_batch is None else lambda i, n, s=size: on_batch(s, i, n),
        )
        if size == 1:
            batch_of_one = [row.baseline_tokens for row in result.rows]
        yield result


# ---------------------------------------------------------------------------------------------
# Rows stitched back into recordings


@dataclass(frozen=True)
class StitchedRecording:
    """A recording cut into several rows, its rows' texts put back together on both sides."""

    clip: str
    baseline_text: str
    speculative_text: str
    identical: bool  # every one of its rows identical


def stitch(main: Loaded, rows: Rows, result: BatchComparison) -> tuple[StitchedRecording, ...]:
    """Each recording cut into several rows, stitched back from `result`'s rows."""
    out = []
    for recording in rows.recordings:
        if len(recording.rows) < 2:
            continue
        span = [result.rows[i] for i in recording.rows]
        baseline = [r.baseline_tokens for r in span]
        speculative = [r.speculative_tokens for r in span]
        out.append(
            StitchedRecording(
                recording.name,
                merge_pieces(main, baseline, recording.strides),
                merge_pieces(main, speculative, recording.strides),
                all(r.identical for r in span),
            )
        )
    return tuple(out)


def merge_pieces(
    main: Loaded, rows: Sequence[tuple[int, ...]], strides: Sequence[tuple[int, int, int]]
) -> str:
    """One recording's text from its overlapping pieces (audio.chunks), stitched the way
    transformers' ASR pipeline stitches them: the longest common token run in each overlap."""
    outputs = [
        {"tokens": torch.tensor([list(ids)]), "stride": tuple(x / SAMPLE_RATE for x in stride)}
        for ids, stride in zip(rows, strides, strict=True)
    ]
    precision = WINDOW_S / main.model.config.max_source_positions
    text, _ = main.processor.tokenizer._decode_asr(
        outputs, return_timestamps=False, return_language=None, time_precision=precision
    )
    return text.strip()


def sweep_json(main: Loaded, rows: Rows, results: Sequence[BatchComparison]) -> dict[str, Any]:
    """What the page shows of a sweep: each size's JSON with its rows named, and the recordings
    cut into several rows stitched back from the largest size's."""
    return {
        "sweep": [result.to_dict(rows.names) for result in results],
        "recordings": [dataclasses.asdict(s) for s in stitch(main, rows, results[-1])],
    }
