"""faster-whisper (CTranslate2) as a reference engine: what a CPU user would pick instead.

A *reference* is another engine shown beside the columns for context. It runs the same main's
weights with decoding settings equal to the baseline's (greedy: one beam, temperature 0, no
timestamps, no VAD, no conditioning on earlier windows, the language given or detected), is
timed by the same rules (warm-up first, median of the repeats, in turn with the other runs),
and is compared with the baseline's transcript: token ids, exact text, text normalized the way
the bench scores WER, and a word diff. Its transcript may differ (its own feature extraction
and kernels): that is reported, not treated as a failure.

Weights: for the offline checkpoints, the CTranslate2 model the converter read (a package
folder, or model.bin pieces joined in memory, so nothing is copied to disk); a `ctranslate2/`
folder inside a local checkpoint; for Hub mains, faster-whisper's own CTranslate2 repository
(e.g. "base" -> Systran/faster-whisper-base), from the Hugging Face cache when the Hub is off.
Without one, a sentence says so; so does a copy faster-whisper fails to load or run, and the
other columns stand. On a CPU faster-whisper runs in a worker process, which a stop ends at once
(specwhisper.reference_worker).

It does not decode audio files, load transformers models or know about the page.
"""

from __future__ import annotations

import difflib
import json
import logging
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specwhisper import cancel, checkpoints, hub, loading, metrics, offline
from specwhisper.decoding import DecodeResult
from specwhisper.reference_worker import InProcess, Transcript, Weights, Worker
from specwhisper.scoring import text_normalizer
from specwhisper.timing import Timings, device_name

ENGINE = "faster-whisper"
COMPUTE_TYPES = ("int8", "float32", "float16")  # float16 on a GPU only
DEFAULT_COMPUTE_TYPE = "int8"  # what CPU users of faster-whisper usually run
CT2_SUBFOLDER = "ctranslate2"  # a local checkpoint's own CTranslate2 copy, if it has one

NO_CT2 = "No CTranslate2 copy of {main} is available here, so faster-whisper cannot run it."
DIFFERENT_ENGINE = (
    "faster-whisper is a different engine (CTranslate2, with its own feature extraction and "
    "kernels), so its transcript can differ from the baseline's: it is shown for context, not as "
    "a column that must be identical."
)
TIMING = (
    "median of {repeats} after warm-up, in turn with the other runs; includes its own log-mel "
    "features (the other columns' are computed once, before timing)"
)


# What the column says when faster-whisper itself fails (the details go to the server log).
LOAD_FAILED = (
    "faster-whisper could not load the CTranslate2 copy of {main} in {compute_type}, so it was "
    "not timed; the details are in the server log."
)
RUN_FAILED = (
    "faster-whisper failed while transcribing this clip, so it was not timed; the details are in "
    "the server log."
)

log = logging.getLogger(__name__)


class ReferenceError(ValueError):
    """A reference problem worded for a person."""


# ---------------------------------------------------------------------------------------------
# What was asked for


@dataclass(frozen=True)
class ReferenceSpec:
    """A reference engine and its compute type, e.g. faster-whisper:int8."""

    engine: str
    compute_type: str

    @property
    def name(self) -> str:
        return f"{self.engine}:{self.compute_type}"


def parse_reference(value: str | None) -> ReferenceSpec | None:
    """ "" (or "off") -> None; "faster-whisper[:int8|float32|float16]" -> the spec."""
    text = (value or "").strip().lower()
    if text in ("", "off", "none"):
        return None
    engine, _, compute_type = text.partition(":")
    if engine != ENGINE:
        raise ReferenceError(f"Unknown reference engine '{value}'; use {ENGINE} or leave it off.")
    compute_type = compute_type or DEFAULT_COMPUTE_TYPE
    if compute_type not in COMPUTE_TYPES:
        raise ReferenceError(
            f"Unknown compute type '{compute_type}' for {ENGINE}; use "
            + ", ".join(COMPUTE_TYPES[:-1])
            + f" (or {COMPUTE_TYPES[-1]} on a GPU)."
        )
    return ReferenceSpec(engine, compute_type)


# ctranslate2 4.8.5's wheel opens CUDA 12's cuBLAS by name (libcublas.so.12) while PyPI's torch
# 2.13 brings CUDA 13's, and no run on a GPU has measured it: a GPU offers no reference column.
NOT_ON_GPU = (
    f"{ENGINE} is not offered on a GPU here: its CTranslate2 build needs CUDA 12's cuBLAS "
    "(libcublas.so.12), which this app's CUDA 13 torch does not bring, and it has not been "
    "run on a GPU."
)


def reference_problem(value: str | None, on_gpu: bool) -> str | None:
    """Why a `reference` setting cannot run on this hardware, or None (also when it is off)."""
    try:
        spec = parse_reference(value)
    except ReferenceError as e:
        return str(e)
    if spec is not None and on_gpu:
        return NOT_ON_GPU
    if spec is not None and spec.compute_type == "float16":
        return f"{ENGINE} runs float16 on a GPU only; on a CPU pick int8 or float32."
    return None


def compute_types(on_gpu: bool) -> list[str]:
    """The compute types the page offers on this hardware (none on a GPU: NOT_ON_GPU)."""
    return [] if on_gpu else [t for t in COMPUTE_TYPES if t != "float16"]


# ---------------------------------------------------------------------------------------------
# Where the CTranslate2 weights are


@dataclass(frozen=True)
class Ct2Source:
    """One CTranslate2 model: a folder faster-whisper loads as is, or model.bin pieces."""

    label: str  # what the column names, e.g. "whisper-base (local)" or a Hub repository
    folder: Path | None = None  # a CTranslate2 folder (model.bin, config.json, tokenizer.json)
    parts: tuple[Path, ...] = ()  # model.bin pieces; config.json etc. next to the first

    @property
    def key(self) -> str:
        return str(self.folder or self.parts)


def ct2_source(ckpt: checkpoints.Checkpoint) -> Ct2Source:
    """Where the CTranslate2 copy of a main is; ReferenceError (NO_CT2) when there is none."""
    found = _hub_source(ckpt) if ckpt.path is None else _local_source(ckpt, ckpt.path)
    if found is None:
        raise ReferenceError(NO_CT2.format(main=ckpt.id))
    return found


def _local_source(ckpt: checkpoints.Checkpoint, folder: Path) -> Ct2Source | None:
    """The checkpoint's own ctranslate2/ folder, else the model the offline converter read."""
    own = folder / CT2_SUBFOLDER
    if (own / "model.bin").is_file():
        return Ct2Source(ckpt.label, folder=own)
    parts = _stamped_parts(folder) or _offline_parts(folder.name)
    if not parts:
        return None
    if len(parts) == 1 and parts[0].name == "model.bin":
        return Ct2Source(ckpt.label, folder=parts[0].parent)  # the installed package's folder
    return Ct2Source(ckpt.label, parts=tuple(parts))


def _stamped_parts(folder: Path) -> list[Path]:
    """The model.bin pieces the converter recorded in the folder's stamp, if all still exist."""
    try:
        stamp = json.loads((folder / offline.STAMP_FILE).read_text())
        parts = [Path(p) for p in stamp["source"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return parts if parts and all(p.is_file() for p in parts) else []


def _offline_parts(name: str) -> list[Path]:
    """The installed weight package's pieces for an offline checkpoint name (never installs)."""
    for source in offline.SOURCES:
        if source.name == name:
            try:
                return offline.source_parts(source, install=False)
            except offline.OfflineModelsError:
                return []
    return []


def _hub_source(ckpt: checkpoints.Checkpoint) -> Ct2Source | None:
    """faster-whisper's own CTranslate2 repository for an openai/whisper-* main, fetched into
    (or, with the Hub off, found in) the Hugging Face cache; None if it has none or it is not
    there."""
    from faster_whisper.utils import available_models, download_model

    org, _, name = ckpt.id.partition("/")
    size = name.removeprefix("whisper-")
    if org != "openai" or size not in available_models():
        return None
    try:
        folder = download_model(
            size, local_files_only=hub.hub_offline(), cache_dir=str(hub.hub_cache_dir())
        )
    except Exception:  # with the Hub off, not in the cache; or the Hub unreachable
        return None
    # <cache>/models--Systran--faster-whisper-base/snapshots/<hash>: name the repository
    repo = Path(folder).parent.parent.name
    label = repo.removeprefix("models--").replace("--", "/") if repo.startswith("models--") else ""
    return Ct2Source(label or ckpt.id, folder=Path(folder))


def _weights(source: Ct2Source) -> Weights:
    """The source as the worker takes it: plain paths."""
    folder = str(source.folder) if source.folder is not None else None
    return Weights(source.label, folder, tuple(str(p) for p in source.parts))


# ---------------------------------------------------------------------------------------------
# Loading


@dataclass(frozen=True)
class LoadedReference:
    """A faster-whisper model ready to run, and how it was set up."""

    model: Worker | InProcess  # faster-whisper in its worker process (CPU), or here (GPU)
    spec: ReferenceSpec
    source: Ct2Source
    device: str  # "cpu" or "cuda"
    n_threads: int  # CTranslate2's intra-op threads (the same as torch's)
    load_time_s: float  # 0 when it came from the cache

    @property
    def ct2_compute_type(self) -> str:
        """What CTranslate2 runs, e.g. int8_float32 for int8 weights on a CPU."""
        return self.model.compute_type


_CACHE: dict[tuple, LoadedReference] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 2  # a reference model per compute type at most; they are small next to the main


def load_reference(
    spec: ReferenceSpec, main: loading.Loaded, check: Callable[[], None] = cancel.check
) -> LoadedReference:
    """faster-whisper on the main's CTranslate2 copy, on the main's device, with torch's thread
    count: in a worker process on a CPU (specwhisper.reference_worker says why), here on a GPU;
    cached while its worker lives. ReferenceError when there is no copy; `check` runs while it
    loads (a stop ends the worker)."""
    source = ct2_source(main.checkpoint)
    device = "cuda" if main.device.type == "cuda" else "cpu"
    n_threads = torch.get_num_threads()
    key = (source.key, spec.compute_type, device, n_threads)
    with _CACHE_LOCK:
        if key in _CACHE and _CACHE[key].model.alive:
            loaded = _CACHE[key]
            return LoadedReference(loaded.model, spec, source, device, n_threads, 0.0)
        _CACHE.pop(key, None)
        start = time.perf_counter()
        engine = Worker if device == "cpu" else InProcess
        model = engine(_weights(source), device, spec.compute_type, n_threads, check)
        loaded = LoadedReference(
            model, spec, source, device, n_threads, time.perf_counter() - start
        )
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE))).model.close()
        _CACHE[key] = loaded
        return loaded


# ---------------------------------------------------------------------------------------------
# Running


ReferenceRun = Transcript  # one faster-whisper transcription: text, token ids, language


# ---------------------------------------------------------------------------------------------
# Against the baseline


@dataclass(frozen=True)
class WordChange:
    """One place where the reference's words differ from the baseline's."""

    baseline: str  # the baseline's words there ("" where the reference inserted words)
    reference: str  # the reference's words there ("" where it dropped words)


def word_diff(baseline: str, reference: str) -> tuple[WordChange, ...]:
    """The word-level differences of two transcripts, in order."""
    a, b = baseline.split(), reference.split()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return tuple(
        WordChange(" ".join(a[i1:i2]), " ".join(b[j1:j2]))
        for op, i1, i2, j1, j2 in matcher.get_opcodes()
        if op != "equal"
    )


@dataclass(frozen=True)
class ReferenceResult:
    """The reference column: its timed run and how its transcript compares with the baseline."""

    spec: ReferenceSpec
    ct2_compute_type: str
    weights: str  # the CTranslate2 copy it ran
    device: str
    n_threads: int
    run: ReferenceRun
    time_s: float  # median of the timed repeats
    times_s: tuple[float, ...]
    baseline_time_s: float  # the baseline's median in the same runs
    load_time_s: float
    same_tokens: bool
    same_text: bool  # exact, after stripping the edges
    same_normalized: bool  # after Whisper's normalizer, as the bench scores WER
    diff: tuple[WordChange, ...]  # word changes against the baseline's text

    @property
    def n_tokens(self) -> int:
        return len(self.run.token_ids)

    @property
    def speedup(self) -> float:
        """Baseline time over the reference's: above 1, faster-whisper beat the baseline."""
        return metrics.times_faster(self.baseline_time_s, self.time_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "available": True,
            "engine": self.spec.engine,
            "compute_type": self.spec.compute_type,
            "ct2_compute_type": self.ct2_compute_type,
            "weights": self.weights,
            "device": self.device,
            "n_threads": self.n_threads,
            "threads": self.n_threads,  # the old name of n_threads, kept for API callers
            "text": self.run.text,
            "token_ids": list(self.run.token_ids),
            "language": self.run.language,
            "time_s": round(self.time_s, 4),
            "times_s": [round(t, 4) for t in self.times_s],
            "n_tokens": self.n_tokens,
            "tokens_per_s": round(metrics.per_second(self.n_tokens, self.time_s), 2),
            "speedup": round(self.speedup, 4),
            "load_time_s": round(self.load_time_s, 3),
            "identical": self.same_tokens,
            "same_text": self.same_text,
            "same_normalized_text": self.same_normalized,
            "diff": [{"baseline": c.baseline, "reference": c.reference} for c in self.diff],
            "timing": TIMING.format(repeats=len(self.times_s)),
            "note": DIFFERENT_ENGINE,
        }


@dataclass(frozen=True)
class ReferenceUnavailable:
    """The reference was asked for but cannot run here; `note` says why."""

    spec: ReferenceSpec
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "available": False,
            "engine": self.spec.engine,
            "compute_type": self.spec.compute_type,
            "note": self.note,
        }


def compare_with_baseline(
    loaded: LoadedReference,
    timings: Timings,
    baseline: DecodeResult,
    spelling: dict[str, str] | None = None,
) -> ReferenceResult:
    """The reference's timed runs against the baseline's result (its time_s: the median)."""
    run: ReferenceRun = timings.result
    normalize = text_normalizer(run.language, spelling)
    return ReferenceResult(
        spec=loaded.spec,
        ct2_compute_type=loaded.ct2_compute_type,
        weights=loaded.source.label,
        device=device_name(torch.device(loaded.device)),
        n_threads=loaded.n_threads,
        run=run,
        time_s=timings.median_s,
        times_s=timings.times_s,
        baseline_time_s=baseline.time_s,
        load_time_s=loaded.load_time_s,
        same_tokens=run.token_ids == tuple(baseline.token_ids),
        same_text=run.text == baseline.text.strip(),
        same_normalized=normalize(run.text) == normalize(baseline.text),
        diff=word_diff(baseline.text, run.text),
    )


class GuardedRun:
    """The reference's run on one clip, for the timer. It raises only to stop (a Cancelled):
    a failure is logged and kept as the column's sentence, and later calls do nothing, so a
    reference that breaks costs the comparison its own column and nothing else."""

    def __init__(
        self, loaded: LoadedReference, samples: np.ndarray, language: str | None, task: str | None
    ) -> None:
        self.loaded = loaded
        self.failure = ""  # the column's sentence once it failed
        self.audio_key = loaded.model.set_audio(samples, language, task, cancel.check)

    def __call__(self) -> ReferenceRun | None:
        if self.failure:
            return None
        try:
            return self.loaded.model.run(self.audio_key, cancel.check)
        except Exception:
            log.exception("faster-whisper failed while transcribing")
            self.failure = RUN_FAILED
            return None


@dataclass(frozen=True)
class ReferenceColumn:
    """A reference prepared for one audio: `run` to time (None when it cannot run), and what
    turns its timings into the column."""

    spec: ReferenceSpec
    run: GuardedRun | None
    loaded: LoadedReference | None = None
    note: str = ""  # why it cannot run

    def result(
        self, timings: Timings | None, baseline: DecodeResult, spelling: dict[str, str] | None
    ) -> ReferenceResult | ReferenceUnavailable:
        if self.run is not None and self.run.failure:
            return ReferenceUnavailable(self.spec, self.run.failure)
        if self.loaded is None or timings is None:
            return ReferenceUnavailable(self.spec, self.note)
        return compare_with_baseline(self.loaded, timings, baseline, spelling)


def prepare(
    value: str | None,
    main: loading.Loaded,
    samples: np.ndarray,
    language: str | None,
    task: str | None,
) -> ReferenceColumn | None:
    """The reference column for a request's `reference` setting (None when off): loaded and
    ready to time, or unavailable with a sentence saying why (no CTranslate2 copy, or
    faster-whisper failed to load it or to take the clip)."""
    spec = parse_reference(value)
    if spec is None:
        return None
    try:
        loaded = load_reference(spec, main)
        return ReferenceColumn(spec, GuardedRun(loaded, samples, language, task), loaded)
    except ReferenceError as e:
        return ReferenceColumn(spec, None, note=str(e))
    except Exception:
        log.exception("faster-whisper could not load %s", main.checkpoint.label)
        note = LOAD_FAILED.format(main=main.checkpoint.id, compute_type=spec.compute_type)
        return ReferenceColumn(spec, None, note=note)


# ---------------------------------------------------------------------------------------------
# Totals for the bench


def bench_totals(
    baseline_s: Sequence[float],
    speculative_s: Sequence[float],
    results: Sequence[ReferenceResult],
    wer_reference: float | None,
) -> dict[str, Any]:
    """The reference's totals over a bench run, as new keys of its JSON: its time; its total,
    median and min speed-up over the baseline (`reference_speedup`: baseline time over its);
    the speculative column's speed-up over it (`speculative_speedup_over_reference`: its time
    over the speculative column's, so above 1 means our column beat it); and how often its
    text agreed with the baseline's."""
    ref_s = [r.time_s for r in results]
    speedups = [metrics.ratio(b, r) for b, r in zip(baseline_s, ref_s, strict=True) if r]
    over = [metrics.ratio(r, s) for r, s in zip(ref_s, speculative_s, strict=True) if s]
    total_ref, total_spec = sum(ref_s), sum(speculative_s)
    first = results[0]
    return {
        "reference": first.spec.name,
        "reference_ct2_compute_type": first.ct2_compute_type,
        "reference_n_threads": first.n_threads,
        "reference_s": round(total_ref, 4),
        "reference_speedup": _round(metrics.ratio(sum(baseline_s), total_ref)),
        "reference_median_clip_speedup": _median(speedups),
        "reference_min_clip_speedup": round(min(speedups), 4) if speedups else None,
        "speculative_speedup_over_reference": _round(metrics.ratio(total_ref, total_spec)),
        "median_clip_speculative_speedup_over_reference": _median(over),
        "min_clip_speculative_speedup_over_reference": round(min(over), 4) if over else None,
        "reference_n_identical_clips": sum(r.same_tokens for r in results),
        "reference_n_same_text_clips": sum(r.same_text for r in results),
        "reference_n_same_normalized_clips": sum(r.same_normalized for r in results),
        "wer_reference": _round(wer_reference),
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None
