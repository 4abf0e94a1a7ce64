"""One audio -> baseline vs speculative comparison. The page, its API and the benchmark share it.

Takes a request checked once (request_check: checkpoints, pair, language, task, precisions),
loads the pair through the model cache (load time kept apart from generation time), runs both
decoders alternately with warm-up and device sync, and returns a Comparison (the request, the
set-up and the two runs) whose `to_dict()` is the public `compare` API's JSON. What the runs
mean (speed-up, alpha, c, the predictions) is computed in metrics.

It does not decode audio files (see audio) and knows nothing about Gradio.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specwhisper import cancel, checkpoints, decoding, drafters, loading, metrics, reference
from specwhisper.audio import SAMPLE_RATE
from specwhisper.decoding import DecodeOptions, DecodeResult, Features
from specwhisper.request_check import (
    TRANSFORMERS_TIMESTAMPS,
    CheckedRequest,
    CompareError,
    CompareRequest,
    checked,
)
from specwhisper.timing import Timings, alternate, device_name

Progress = Callable[[float, str], None]  # (fraction done, what is happening)
Around = Callable[[str, Callable[[], DecodeResult]], DecodeResult]  # (side, its run) -> result


# What the badge says when the columns sample: different tokens are expected, not a failure.
SAMPLING_NOTE = (
    "Sampling draws different tokens on each side, so the transcripts may differ: speculative "
    "sampling is identical in distribution (each token follows the main model's probabilities "
    "exactly), not token for token."
)


def loop_alone_options(opts: DecodeOptions) -> DecodeOptions:
    """Our loop without drafting: the same options at gamma 0 under the constant schedule, so the
    loop makes one main pass per token, as plain `generate` does, and never sets a drafter up."""
    return dataclasses.replace(opts, gamma=0, gamma_schedule="constant")


@dataclass(frozen=True)
class Setup:
    """What a comparison ran on: the loaded pair, where and in what precision, and the audio."""

    main: str  # the main's label
    assistant: str  # the assistant's label ("self-int8" for the main's int8 copy)
    main_revision: str | None  # Hub commit hash of the main's snapshot; None: local folder
    assistant_revision: str | None  # the assistant's (self-int8: its main's)
    device: str
    dtype: str  # the main's decoder (the baseline's steps and the speculative verify passes)
    encoder_dtype: str  # the main's encoder, shared by both columns
    assistant_dtype: str  # the assistant's weights, with its own encoder's where that differs
    # the lean self-int8 draft's cross-attention copy (drafters.cross_precision); None: no lean
    # draft ran
    draft_cross_attention: str | None
    language: str | None  # the Whisper code decoded with; None: auto-detected
    task: str | None  # None for English-only mains, which take no task token
    load_time_s: float  # loading both checkpoints in this request (0 when cached)
    duration_s: float  # audio length

    @property
    def draft_precision(self) -> str:
        """What the draft computed in, as the page and the API say it."""
        if self.draft_cross_attention:  # the lean self-int8 draft of our engine
            return f"int8 weights, {self.draft_cross_attention} cross-attention keys/values"
        if self.assistant.startswith(checkpoints.SELF_INT8):
            return "int8 weights"
        return self.assistant_dtype

    @property
    def precision(self) -> dict[str, str]:
        """What each part ran in: the main's encoder (shared by both columns), its decoder and
        the draft."""
        return {"encoder": self.encoder_dtype, "decoder": self.dtype, "draft": self.draft_precision}


def setup_of(
    req: CompareRequest,
    main: loading.Loaded,
    assistant: loading.Loaded,
    *,
    language: str | None,
    load_time_s: float,
    duration_s: float,
) -> Setup:
    """The set-up of one side's runs: `req` is that side's request (its engine decides which
    draft ran), `language` the Whisper code decoded with."""
    return Setup(
        main=main.checkpoint.label,
        assistant=assistant.checkpoint.label,
        main_revision=main.revision,
        assistant_revision=assistant.revision,
        device=device_name(main.device),
        dtype=loading.dtype_name(main.dtype),
        encoder_dtype=loading.dtype_name(main.encoder_precision),
        assistant_dtype=_precision_of(assistant),
        draft_cross_attention=drafters.cross_precision(assistant, req.engine),
        language=language,
        task=None if main.checkpoint.english_only else req.task,
        load_time_s=load_time_s,
        duration_s=duration_s,
    )


def _precision_of(loaded: loading.Loaded) -> str:
    """A loaded assistant's weights, with its own encoder's where that differs."""
    encoder = loaded.encoder_precision
    if encoder is None or encoder == loaded.dtype:
        return loading.dtype_name(loaded.dtype)
    return f"{loading.dtype_name(loaded.dtype)}, encoder {loading.dtype_name(encoder)}"


@dataclass(frozen=True)
class Comparison:
    """One audio decoded by the baseline and by a speculative engine: the request, what it ran
    on, and both runs (each run's time_s is the median of its timed repeats)."""

    request: CompareRequest  # this side's request (the peer's: the engine and gamma it ran)
    setup: Setup
    baseline: DecodeResult
    speculative: DecodeResult
    baseline_times_s: tuple[float, ...]  # every timed repeat
    speculative_times_s: tuple[float, ...]
    # another engine timed in the same runs, for context (CompareRequest.reference); None: off
    reference: reference.ReferenceResult | reference.ReferenceUnavailable | None = None
    # our loop without drafting, timed in the same runs (CompareRequest.loop_alone); None: off
    loop_alone: DecodeResult | None = None
    loop_alone_times_s: tuple[float, ...] = ()

    @property
    def engine(self) -> str:
        return self.request.engine

    @property
    def duration_s(self) -> float:
        return self.setup.duration_s

    @property
    def identical(self) -> bool:
        return self.baseline.token_ids == self.speculative.token_ids

    @property
    def first_divergence(self) -> int | None:
        return decoding.first_divergence(self.baseline.token_ids, self.speculative.token_ids)

    @property
    def speedup(self) -> float:
        return metrics.speedup([self.baseline], [self.speculative])

    @property
    def loop_alone_speedup(self) -> float | None:
        """The loop's part of the speed-up: the baseline's time over our loop's without drafting
        (None: not timed). Times drafting's part, it is the speed-up."""
        if self.loop_alone is None:
            return None
        return metrics.ratio(self.baseline.time_s, self.loop_alone.time_s)

    @property
    def speedup_over_loop_alone(self) -> float | None:
        """Drafting's part of the speed-up: our loop's time without drafting over its time with
        it (None: not timed)."""
        if self.loop_alone is None:
            return None
        return metrics.ratio(self.loop_alone.time_s, self.speculative.time_s)

    def loop_alone_outcome(self) -> dict[str, Any]:
        """The split, rounded (None when the loop alone was not timed): our loop without
        drafting as a column, whether it kept the baseline's tokens, and the two parts."""
        if self.loop_alone is None:
            return dict.fromkeys(LOOP_ALONE_KEYS)
        return {
            "loop_alone": side_json(self.loop_alone, self.loop_alone_times_s, tokens=False)
            | {"identical": self.loop_alone.token_ids == self.baseline.token_ids},
            "loop_alone_speedup": _round(self.loop_alone_speedup),
            "speculative_speedup_over_loop_alone": _round(self.speedup_over_loop_alone),
        }

    def outcome(self) -> dict[str, Any]:
        """Whether the speculative run kept the baseline's tokens and what the runs mean (the
        metrics formulas, rounded): the API's top level, and each side of a bench row."""
        base, spec = [self.baseline], [self.speculative]
        return {
            "identical": self.identical,
            "first_divergence": self.first_divergence,
            "speedup": round(self.speedup, 4),
            "predicted_speedup": round(metrics.predicted_speedup(base, spec), 4),
            "predicted_end_to_end": round(metrics.predicted_end_to_end(base, spec), 4),
            "cost_ratio": round(metrics.cost_ratio(base, spec), 4),
            "mean_gamma": round(metrics.mean_gamma(spec), 3),
            "alpha": round(metrics.alpha(spec), 4),
        }

    def to_dict(self) -> dict[str, Any]:
        """The `compare` API's JSON."""
        req, setup = self.request, self.setup
        return {
            "baseline": side_json(self.baseline, self.baseline_times_s),
            "speculative": side_json(self.speculative, self.speculative_times_s, drafts=True),
            **self.outcome(),
            "gamma": req.gamma,
            "gamma_schedule": req.gamma_schedule,
            "main": setup.main,
            "assistant": setup.assistant,
            "main_revision": setup.main_revision,
            "assistant_revision": setup.assistant_revision,
            "device": setup.device,
            "dtype": setup.dtype,
            "encoder_dtype": setup.encoder_dtype,
            "precision": setup.precision,
            "draft_cross_attention": setup.draft_cross_attention,
            "engine": req.engine,
            "decoding": req.decoding,
            "temperature": req.temperature,
            "seed": req.seed,
            "repeats": req.repeats,
            "timing": f"median of {req.repeats} after warm-up, device synchronized",
            "load_time_s": round(setup.load_time_s, 3),
            "duration_s": round(setup.duration_s, 3),
            "language": setup.language or "auto",
            "task": setup.task,
            "reference": self.reference.to_dict() if self.reference is not None else None,
            **self.loop_alone_outcome(),
        }


LOOP_ALONE_KEYS = ("loop_alone", "loop_alone_speedup", "speculative_speedup_over_loop_alone")


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def side_json(
    run: DecodeResult, times_s: tuple[float, ...], *, drafts: bool = False, tokens: bool = True
) -> dict[str, Any]:
    """One column's JSON, for the API and the bench alike. `drafts`: a speculative run's draft
    counts and steps; `tokens`: its token ids, steps, segments and fallback temperatures (the
    API's; the bench's per-clip rows leave them out)."""
    d: dict[str, Any] = {
        "text": run.text,
        "time_s": round(run.time_s, 4),
        "times_s": [round(t, 4) for t in times_s],
        "n_tokens": run.n_tokens,
        "tokens_per_s": round(metrics.per_second(run.n_tokens, run.time_s), 2),
        "n_main_forwards": run.n_main_forwards,
        "n_windows": run.n_windows,
        "engine": run.engine,
        # where the last timed run's time went (time_s is the median of all of them)
        "encoder_s": round(run.encoder_s, 4),
        "main_forward_s": round(run.main_forward_s, 4),
        "draft_s": round(run.draft_s, 4),
    }
    if tokens:
        d["token_ids"] = list(run.token_ids)
        if run.segments:
            d["segments"] = [dataclasses.asdict(s) for s in run.segments]
        if run.window_temperatures:
            d["window_temperatures"] = list(run.window_temperatures)
    if drafts:
        d |= {
            "acceptance_rate": round(run.acceptance_rate, 4),
            "tokens_per_main_forward": round(run.tokens_per_main_forward, 3),
            "n_draft_tokens": run.n_draft_tokens,
            "n_accepted": run.n_accepted,
        }
        if tokens:
            d["steps"] = [
                {"drafted": list(s.drafted), "n_accepted": s.n_accepted, "main_token": s.main_token}
                for s in run.steps
            ]
    return d


def load_pair(
    req: CompareRequest | CheckedRequest,
    *,
    cache: loading.ModelCache = loading.CACHE,
    progress: Progress | None = None,
) -> tuple[loading.Loaded, loading.Loaded, float]:
    """Load (or fetch from the cache) the main and the assistant; return both and the seconds
    spent loading in this call. A CompareRequest is checked first."""
    ok = checked(req)
    if progress:
        progress(0.0, f"Loading {ok.main.label}")
    before = cache.total_load_s
    main = cache.get(ok.main, ok.device, ok.dtype, ok.encoder_dtype)
    if progress:
        progress(0.1, f"Loading assistant {ok.request.assistant}")
    if isinstance(ok.assistant, str):
        assistant = drafters.self_int8(main, cache)
    else:  # a seq2seq assistant's own encoder runs in the same precision as the main's
        assistant = cache.get(ok.assistant, ok.device, ok.dtype, ok.encoder_dtype)
    return main, assistant, cache.total_load_s - before


def decode_options(
    req: CompareRequest,
    main: checkpoints.Checkpoint,
    language: str | None,
    max_new_tokens: int | None = None,
) -> DecodeOptions:
    """The request as decoder options: English-only mains get no language or task token."""
    multilingual = not main.english_only
    return DecodeOptions(
        language=language if multilingual else None,
        task=req.task if multilingual else None,
        return_timestamps=req.timestamps,
        gamma=req.gamma,
        gamma_schedule=req.gamma_schedule,
        engine=req.engine,
        max_new_tokens=max_new_tokens,
        temperature=req.temperature,
        seed=req.seed,
        fallback=req.fallback,
    )


def compare(
    samples: np.ndarray,
    req: CompareRequest | CheckedRequest,
    *,
    cache: loading.ModelCache = loading.CACHE,
    progress: Progress | None = None,
) -> Comparison:
    """Transcribe `samples` (float32 mono 16 kHz) with and without the assistant. A
    CompareRequest is checked first."""
    ok = checked(req)
    main, assistant, load_s = load_pair(ok, cache=cache, progress=progress)
    repeats = ok.request.repeats
    n_sides = 2 + bool(reference.parse_reference(ok.request.reference)) + ok.request.loop_alone
    n_runs = n_sides * (repeats + 1)
    n_windows = max(1, math.ceil(len(samples) / SAMPLE_RATE / decoding.WINDOW_S))
    detects_language = ok.language is None and not ok.main.english_only
    done = [0]

    def run(side: str, fn: Callable[[], DecodeResult]) -> DecodeResult:
        """One run, reporting progress at its start and at each 30 s window it encodes."""
        run_index, n_pass = done[0], [0]
        done[0] += 1

        def on_window(*_: Any) -> None:
            where = run_index + min(n_pass[0], n_windows) / (n_windows + 1)
            n_run = run_index // n_sides + 1
            label = run_label(side, n_run, repeats + 1, n_pass[0], n_windows, detects_language)
            progress(0.2 + 0.8 * where / n_runs, label)
            n_pass[0] += 1

        on_window()  # the run starts: before its first encoder pass
        hook = main.model.model.encoder.register_forward_pre_hook(on_window)
        try:
            return fn()
        finally:
            hook.remove()

    speculative, _ = compare_loaded(
        samples,
        ok.request,
        main,
        assistant,
        language=ok.language,
        load_time_s=load_s,
        cache=cache,
        around=run if progress else None,
    )
    return speculative


def run_label(
    side: str, n_run: int, n_runs: int, n_pass: int, n_windows: int, detects_language: bool
) -> str:
    """What the progress bar says during a run, e.g. "Baseline run 2 of 4, window 1 of ~2", as
    the run starts (`n_pass` 0) and before its `n_pass`-th encoder pass. With the language on
    auto, Whisper's first encoder pass detects it (on the first 30 s), before any window.
    `n_windows`, the audio's length in 30 s windows, is an estimate: each window starts where
    the last one's words ended, so a clip can take more; past it, no total is given."""
    label = f"{side.replace('_', ' ').capitalize()} run {n_run} of {n_runs}"
    if detects_language and n_pass == 1:
        return label + ", detecting the language"
    n_window = max(1, n_pass - detects_language)  # pass 0: the run starts, its first window
    if n_windows > 1 or n_window > 1:
        label += f", window {n_window}" + (f" of ~{n_windows}" if n_window <= n_windows else "")
    return label


def compare_loaded(
    samples: np.ndarray,
    req: CompareRequest,
    main: loading.Loaded,
    assistant: loading.Loaded,
    *,
    language: str | None,
    peer: CompareRequest | None = None,
    max_new_tokens: int | None = None,
    load_time_s: float = 0.0,
    cache: loading.ModelCache = loading.CACHE,
    around: Around | None = None,
    warmup: int = 1,
) -> tuple[Comparison, Comparison | None]:
    """compare() on models already loaded (from a checked request), for the page and the
    benchmark alike.

    Times the baseline and `req`'s speculative engine, and with `peer` (the same request with
    another engine, gamma or schedule) a third run, alternately after one warm-up each; the peer
    is compared with the same baseline runs. With `req.loop_alone`, our loop without drafting
    is one more side of the same rounds, kept in the speculative Comparison. `language` is the
    Whisper code (None: detect). `around(side, run)` wraps every run ("baseline",
    "speculative", "peer", "loop_alone", "reference") and returns its result, for progress
    reports. `warmup=0` is for identity checks only: the first timed run
    then pays first-call costs. A GPU out-of-memory empties `cache` and becomes a CompareError.
    """
    features: Features = decoding.prepare_features(main, samples)
    opts = decode_options(req, main.checkpoint, language, max_new_tokens)
    if opts.return_timestamps or features.long_form:
        if any(r is not None and r.engine == "transformers" for r in (req, peer)):
            if not assistant.checkpoint.decoder_only:  # self-int8 and distil-style are fine
                label = assistant.checkpoint.label
                raise CompareError(TRANSFORMERS_TIMESTAMPS.format(assistant=label))
    runs: dict[str, Callable[[], DecodeResult]] = {
        "baseline": lambda: decoding.decode_baseline(main, features, opts),
        "speculative": lambda: decoding.decode_speculative(main, assistant, features, opts),
    }
    if peer is not None:
        peer_opts = decode_options(peer, main.checkpoint, language, max_new_tokens)
        runs["peer"] = lambda: decoding.decode_speculative(main, assistant, features, peer_opts)
    if req.loop_alone:
        alone_opts = loop_alone_options(opts)
        runs["loop_alone"] = lambda: decoding.decode_speculative(
            main, assistant, features, alone_opts
        )
    column = reference.prepare(req.reference, main, samples, language, opts.task)
    if column is not None and column.run is not None:
        runs["reference"] = column.run
    if around is not None:
        runs = {side: functools.partial(around, side, fn) for side, fn in runs.items()}
    try:
        timings = alternate(runs, repeats=req.repeats, warmup=warmup, device=main.device)
    except cancel.Cancelled:
        # A stop ends the reference's worker even between its runs, so that no stopped
        # request leaves a process behind; the next request loads it again.
        if column is not None and column.loaded is not None:
            column.loaded.model.close()
        raise
    except torch.cuda.OutOfMemoryError as e:
        cache.clear()
        raise CompareError(
            "The GPU ran out of memory for this pair and audio; the model cache was emptied. "
            "Try a smaller checkpoint or shorter audio."
        ) from e

    def comparison(side: str, side_req: CompareRequest) -> Comparison:
        setup = setup_of(
            side_req,
            main,
            assistant,
            language=language,
            load_time_s=load_time_s,
            duration_s=len(samples) / SAMPLE_RATE,
        )
        return comparison_of(side_req, setup, timings["baseline"], timings[side])

    speculative = comparison("speculative", req)
    if "loop_alone" in timings:
        alone = timings["loop_alone"]
        speculative = dataclasses.replace(
            speculative,
            loop_alone=dataclasses.replace(alone.result, time_s=alone.median_s),
            loop_alone_times_s=alone.times_s,
        )
    if column is not None:
        spelling = getattr(main.processor.tokenizer, "english_spelling_normalizer", None)
        context = column.result(timings.get("reference"), speculative.baseline, spelling)
        speculative = dataclasses.replace(speculative, reference=context)
    return speculative, comparison("peer", peer) if peer else None


def comparison_of(req: CompareRequest, setup: Setup, base: Timings, spec: Timings) -> Comparison:
    """A Comparison from the timed runs of both sides (the medians become their times)."""
    return Comparison(
        request=req,
        setup=setup,
        baseline=dataclasses.replace(base.result, time_s=base.median_s),
        speculative=dataclasses.replace(spec.result, time_s=spec.median_s),
        baseline_times_s=base.times_s,
        speculative_times_s=spec.times_s,
    )
