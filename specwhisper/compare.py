"""One audio -> baseline vs speculative comparison. The app, its API and the benchmark share it.

Validates the request (checkpoints, pair, language, task), loads the pair through the model cache
(load time kept apart from generation time), runs both decoders alternately with warm-up and
device sync, and returns a Comparison whose `to_dict()` is the public `compare` API's JSON.

It does not decode audio files (see audio) and knows nothing about Gradio.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specwhisper import decoding, drafters, models, reference
from specwhisper.audio import SAMPLE_RATE
from specwhisper.decoding import DecodeOptions, DecodeResult, Features
from specwhisper.timing import Timings, alternate, device_name

Progress = Callable[[float, str], None]  # (fraction done, what is happening)
Around = Callable[[str, Callable[[], DecodeResult]], DecodeResult]  # (side, its run) -> result


class CompareError(ValueError):
    """A request problem worded for a person (shown in the page as is)."""


@dataclass(frozen=True)
class CompareRequest:
    """Everything a person picks on the page (or passes to the API)."""

    main: str  # checkpoint id, local folder name
    assistant: str  # checkpoint id, local folder name, or "self-int8"
    language: str = "auto"  # "auto", a Whisper code ("fr") or a name ("French")
    task: str = "transcribe"  # "transcribe" | "translate"
    gamma: int = 5  # draft tokens per step (start value for adaptive schedules)
    gamma_schedule: str = "adaptive"  # adaptive | constant | heuristic
    repeats: int = 3  # timed repeats per side, after one warm-up
    dtype: str = "auto"  # auto: fp16 on GPU, fp32 on CPU
    encoder_dtype: str = "auto"  # the main's encoder: auto (= dtype) or bfloat16 (AMX CPUs)
    timestamps: bool = False  # segment timestamps in both columns
    engine: str = "specwhisper"  # specwhisper (our loop) | transformers (assisted generation)
    temperature: float = 0.0  # 0: greedy (identical tokens); > 0: sampling (same distribution)
    seed: int = 0  # sampling: the same seed repeats a run
    fallback: bool = False  # Whisper's temperature fallback recipe, in both columns
    reference: str = ""  # another engine timed for context: "" (off), "faster-whisper:int8", ...

    @property
    def decoding(self) -> str:
        """ "greedy", "sampling" or "fallback": what "identical" can promise."""
        return "fallback" if self.fallback else "sampling" if self.temperature > 0 else "greedy"


MAX_TEMPERATURE = 2.0  # the page, the API and the bench refuse hotter sampling

# What the badge says when the columns sample: different tokens are expected, not a failure.
SAMPLING_NOTE = (
    "Sampling draws different tokens on each side, so the transcripts may differ: speculative "
    "sampling is identical in distribution (each token follows the main model's probabilities "
    "exactly), not token for token."
)


def language_code(value: str | None) -> str | None:
    """'auto'/'' -> None; a code or an English name (any case) -> the Whisper code."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

    text = (value or "").strip().lower()
    if text in ("", "auto", "auto-detect", "detect"):
        return None
    if text.startswith("<|") and text.endswith("|>"):
        text = text[2:-2]
    if text in LANGUAGES:
        return text
    if text in TO_LANGUAGE_CODE:
        return TO_LANGUAGE_CODE[text]
    raise CompareError(f"Unknown language '{value}'. Pick one from the list, or auto-detect.")


# Measured with transformers 5.23, whisper-base assisted by a second copy of itself: on the 53 s
# sonnet it gave 12 of the baseline's 163 tokens; on the 11 s JFK clip with timestamps it stopped
# after the first words. Decoder-only assistants (distil-style, self-int8) are identical there:
# the seq2seq assistant's own Whisper `generate` is what goes wrong.
TRANSFORMERS_TIMESTAMPS = (
    "transformers' assisted generation with a full Whisper model as the assistant ({assistant}) "
    "does not reproduce timestamped decoding: with timestamps, and so with any audio over 30 s, "
    "it stops after the first segment. Pick the specwhisper engine, a decoder-only assistant "
    "(distil-style, or self-int8), or a clip of 30 s or less without timestamps."
)


def check_request(req: CompareRequest) -> tuple[models.Checkpoint, str | models.Checkpoint]:
    """Validate a request before anything loads; raise CompareError or CheckpointError."""
    main = models.resolve(req.main, role="main")
    if main.decoder_only:
        raise CompareError(f"{main.label} is a decoder-only assistant; it cannot be the main.")
    assistant: str | models.Checkpoint = models.SELF_INT8
    if req.assistant.strip() != models.SELF_INT8:
        assistant = models.resolve(req.assistant, role="assistant")
    problem = models.pair_problem(main, assistant)
    if problem:
        raise CompareError(problem)
    code = language_code(req.language)
    if req.task not in ("transcribe", "translate"):
        raise CompareError(f"Unknown task '{req.task}'; use transcribe or translate.")
    if main.english_only:
        if code not in (None, "en"):
            raise CompareError(
                f"{main.label} is English-only: it cannot transcribe '{req.language}'. "
                "Pick a multilingual checkpoint, or leave the language on auto."
            )
        if req.task == "translate":
            raise CompareError(
                f"{main.label} is English-only: it can only transcribe English, not translate."
            )
    if not 0 <= req.gamma <= 64:
        raise CompareError("The number of draft tokens must be between 0 and 64.")
    if not 0.0 <= req.temperature <= MAX_TEMPERATURE:
        raise CompareError(f"The temperature must be between 0 (greedy) and {MAX_TEMPERATURE:g}.")
    problem = decoding.options_problem(req.engine, req.gamma_schedule, req.gamma, req.fallback)
    if problem:
        raise CompareError(problem)
    if not 1 <= req.repeats <= 20:
        raise CompareError("Repeats must be between 1 and 20.")
    device = models.default_device()  # unknown precisions are refused before anything loads
    problem = reference.reference_problem(req.reference, on_gpu=device.type == "cuda")
    if problem:
        raise CompareError(problem)
    models.resolve_encoder_dtype(req.encoder_dtype, device, models.resolve_dtype(req.dtype, device))
    return main, assistant


@dataclass(frozen=True)
class Comparison:
    """Both runs of one audio, with their median timings and what they mean."""

    baseline: DecodeResult  # time_s is the median over repeats
    speculative: DecodeResult
    baseline_times_s: tuple[float, ...]  # every timed repeat
    speculative_times_s: tuple[float, ...]
    main: str
    assistant: str
    device: str
    dtype: str
    engine: str
    repeats: int
    gamma: int  # requested draft tokens (the start value for adaptive/heuristic)
    gamma_schedule: str
    load_time_s: float  # loading both checkpoints in this request (0 when cached)
    duration_s: float  # audio length
    language: str | None  # as requested (None: auto-detected)
    task: str | None
    main_revision: str | None = None  # Hub commit hash of the main's snapshot; None: local folder
    assistant_revision: str | None = None  # the assistant's (self-int8: its main's)
    decoding: str = "greedy"  # greedy | sampling | fallback (CompareRequest.decoding)
    temperature: float = 0.0
    seed: int = 0
    draft_cross_attention: str | None = None  # drafters.cross_precision
    assistant_dtype: str = ""  # the assistant's weights ("" read as `dtype`)
    encoder_dtype: str = ""  # the main's encoder (both columns share it); "" read as `dtype`
    # another engine timed in the same runs, for context (CompareRequest.reference); None: off
    reference: reference.ReferenceResult | reference.ReferenceUnavailable | None = None

    @property
    def precision(self) -> dict[str, str]:
        """What each part ran in: the main's encoder (shared by both columns), its decoder (the
        baseline's steps and the speculative verify passes) and the draft."""
        return {
            "encoder": self.encoder_dtype or self.dtype,
            "decoder": self.dtype,
            "draft": self.draft_precision,
        }

    @property
    def draft_precision(self) -> str:
        if self.draft_cross_attention:  # the lean self-int8 draft of our engine
            return f"int8 weights, {self.draft_cross_attention} cross-attention keys/values"
        if self.assistant.startswith(models.SELF_INT8):
            return "int8 weights"
        return self.assistant_dtype or self.dtype

    @property
    def identical(self) -> bool:
        return self.baseline.token_ids == self.speculative.token_ids

    @property
    def first_divergence(self) -> int | None:
        return decoding.first_divergence(self.baseline.token_ids, self.speculative.token_ids)

    @property
    def speedup(self) -> float:
        return self.baseline.time_s / self.speculative.time_s if self.speculative.time_s else 0.0

    @property
    def alpha(self) -> float:
        """Per-token acceptance probability, from the geometric model of each step."""
        accepted = sum(s.n_accepted for s in self.speculative.steps)
        rejections = sum(1 for s in self.speculative.steps if s.n_accepted < len(s.drafted))
        trials = accepted + rejections
        return accepted / trials if trials else 0.0

    @property
    def mean_gamma(self) -> float:
        drafted = [len(s.drafted) for s in self.speculative.steps if s.drafted]
        return statistics.fmean(drafted) if drafted else 0.0

    @property
    def cost_ratio(self) -> float:
        """c: one draft token's time over one main decoder step's time (baseline steps)."""
        spec, base = self.speculative, self.baseline
        if not spec.n_draft_tokens or not base.n_main_forwards or not base.main_forward_s:
            return 0.0
        return (spec.draft_s / spec.n_draft_tokens) / (base.main_forward_s / base.n_main_forwards)

    @property
    def predicted_speedup(self) -> float:
        """Leviathan et al.'s expected speed-up of the decoding loop, from the measured
        acceptance and cost ratio at the mean gamma: (1 - a^(g+1)) / ((1 - a)(g c + 1))."""
        if self.cost_ratio == 0:
            return 1.0
        return leviathan_speedup(self.alpha, self.mean_gamma, self.cost_ratio)

    @property
    def predicted_end_to_end(self) -> float:
        """The prediction for what is timed: the baseline's encoder time, its main decoder passes
        sped up by `predicted_speedup`, and its per-pass overhead (logits processing, Python)
        paid once per main pass of the speculative run."""
        base, spec = self.baseline, self.speculative
        if not base.time_s or not base.n_main_forwards:
            return 1.0
        overhead = max(base.time_s - base.encoder_s - base.main_forward_s, 0.0)
        per_pass = overhead / base.n_main_forwards
        predicted_s = (
            base.encoder_s
            + base.main_forward_s / self.predicted_speedup
            + per_pass * spec.n_main_forwards
        )
        return base.time_s / predicted_s if predicted_s > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        """The `compare` API's JSON."""

        def side(r: DecodeResult, times: tuple[float, ...]) -> dict[str, Any]:
            d = {
                "text": r.text,
                "token_ids": list(r.token_ids),
                "time_s": round(r.time_s, 4),
                "times_s": [round(t, 4) for t in times],
                "n_tokens": r.n_tokens,
                "tokens_per_s": round(r.n_tokens / r.time_s, 2) if r.time_s else 0.0,
                "n_main_forwards": r.n_main_forwards,
                "n_windows": r.n_windows,
                "engine": r.engine,
            }
            if r.segments:
                d["segments"] = [dataclasses.asdict(s) for s in r.segments]
            if r.window_temperatures:
                d["window_temperatures"] = list(r.window_temperatures)
            return d

        spec = side(self.speculative, self.speculative_times_s)
        spec |= {
            "acceptance_rate": round(self.speculative.acceptance_rate, 4),
            "tokens_per_main_forward": round(self.speculative.tokens_per_main_forward, 3),
            "n_draft_tokens": self.speculative.n_draft_tokens,
            "n_accepted": self.speculative.n_accepted,
            "steps": [
                {"drafted": list(s.drafted), "n_accepted": s.n_accepted, "main_token": s.main_token}
                for s in self.speculative.steps
            ],
        }
        return {
            "baseline": side(self.baseline, self.baseline_times_s),
            "speculative": spec,
            "identical": self.identical,
            "first_divergence": self.first_divergence,
            "speedup": round(self.speedup, 4),
            "predicted_speedup": round(self.predicted_speedup, 4),
            "predicted_end_to_end": round(self.predicted_end_to_end, 4),
            "cost_ratio": round(self.cost_ratio, 4),
            "mean_gamma": round(self.mean_gamma, 3),
            "alpha": round(self.alpha, 4),
            "gamma": self.gamma,
            "gamma_schedule": self.gamma_schedule,
            "main": self.main,
            "assistant": self.assistant,
            "main_revision": self.main_revision,
            "assistant_revision": self.assistant_revision,
            "device": self.device,
            "dtype": self.dtype,
            "encoder_dtype": self.precision["encoder"],
            "precision": self.precision,
            "draft_cross_attention": self.draft_cross_attention,
            "engine": self.engine,
            "decoding": self.decoding,
            "temperature": self.temperature,
            "seed": self.seed,
            "repeats": self.repeats,
            "timing": f"median of {self.repeats} after warm-up, device synchronized",
            "load_time_s": round(self.load_time_s, 3),
            "duration_s": round(self.duration_s, 3),
            "language": self.language or "auto",
            "task": self.task,
            "reference": self.reference.to_dict() if self.reference is not None else None,
        }


def load_pair(
    req: CompareRequest,
    *,
    cache: models.ModelCache = models.CACHE,
    progress: Progress | None = None,
) -> tuple[models.Loaded, models.Loaded, float]:
    """Load (or fetch from the cache) the main and the assistant; return both and the seconds
    spent loading in this call."""
    main_ckpt, assistant_ckpt = check_request(req)
    device = models.default_device()
    dtype = models.resolve_dtype(req.dtype, device)
    encoder_dtype = models.resolve_encoder_dtype(req.encoder_dtype, device, dtype)
    if progress:
        progress(0.0, f"Loading {main_ckpt.label}")
    before = cache.total_load_s
    main = cache.get(main_ckpt, device, dtype, encoder_dtype)
    if progress:
        progress(0.1, f"Loading assistant {req.assistant}")
    if isinstance(assistant_ckpt, str):
        assistant = drafters.self_int8(main, cache)
    else:  # a seq2seq assistant's own encoder runs in the same precision as the main's
        assistant = cache.get(assistant_ckpt, device, dtype, encoder_dtype)
    return main, assistant, cache.total_load_s - before


def decode_options(
    req: CompareRequest,
    main: models.Loaded,
    language: str | None,
    max_new_tokens: int | None = None,
) -> DecodeOptions:
    """The request as decoder options: English-only mains get no language or task token."""
    multilingual = not main.checkpoint.english_only
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
    req: CompareRequest,
    *,
    cache: models.ModelCache = models.CACHE,
    progress: Progress | None = None,
) -> Comparison:
    """Transcribe `samples` (float32 mono 16 kHz) with and without the assistant."""
    main, assistant, load_s = load_pair(req, cache=cache, progress=progress)
    n_sides = 3 if reference.parse_reference(req.reference) else 2
    n_runs = n_sides * (req.repeats + 1)
    n_windows = max(1, math.ceil(len(samples) / SAMPLE_RATE / decoding.WINDOW_S))
    done = [0]

    def run(side: str, fn: Callable[[], DecodeResult]) -> DecodeResult:
        """One run, reporting progress at its start and at each 30 s window it encodes."""
        run_index, window = done[0], [0]
        done[0] += 1

        def on_window(*_: Any) -> None:
            window[0] += 1
            where = run_index + min(window[0], n_windows) / (n_windows + 1)
            label = f"{side.capitalize()} run {run_index // n_sides + 1} of {req.repeats + 1}"
            if n_windows > 1:
                label += f", window {window[0]} of ~{n_windows}"
            progress(0.2 + 0.8 * where / n_runs, label)

        on_window()
        window[0] = 0
        hook = main.model.model.encoder.register_forward_pre_hook(on_window)
        try:
            return fn()
        finally:
            hook.remove()

    ours, _ = compare_loaded(
        samples,
        req,
        main,
        assistant,
        language=language_code(req.language),
        load_time_s=load_s,
        cache=cache,
        around=run if progress else None,
    )
    return ours


def compare_loaded(
    samples: np.ndarray,
    req: CompareRequest,
    main: models.Loaded,
    assistant: models.Loaded,
    *,
    language: str | None,
    peer: CompareRequest | None = None,
    max_new_tokens: int | None = None,
    load_time_s: float = 0.0,
    cache: models.ModelCache = models.CACHE,
    around: Around | None = None,
    warmup: int = 1,
) -> tuple[Comparison, Comparison | None]:
    """compare() on models already loaded, for the page and the benchmark alike.

    Times the baseline and `req`'s speculative engine, and with `peer` (the same request with
    another engine, gamma or schedule) a third run, alternately after one warm-up each; the peer
    is compared with the same baseline runs. `language` is the Whisper code (None: detect).
    `around(side, run)` wraps every run ("baseline", "speculative", "peer") and returns its
    result, for progress reports. `warmup=0` is for identity checks only: the first timed run
    then pays first-call costs. A GPU out-of-memory empties `cache` and becomes a CompareError.
    """
    features: Features = decoding.prepare_features(main, samples)
    opts = decode_options(req, main, language, max_new_tokens)
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
        peer_opts = decode_options(peer, main, language, max_new_tokens)
        runs["peer"] = lambda: decoding.decode_speculative(main, assistant, features, peer_opts)
    column = reference.prepare(req.reference, main, samples, language, opts.task)
    if column is not None and column.run is not None:
        runs["reference"] = column.run
    if around is not None:
        runs = {side: functools.partial(around, side, fn) for side, fn in runs.items()}
    try:
        timings = alternate(runs, repeats=req.repeats, warmup=warmup, device=main.device)
    except torch.cuda.OutOfMemoryError as e:
        cache.clear()
        raise CompareError(
            "The GPU ran out of memory for this pair and audio; the model cache was emptied. "
            "Try a smaller checkpoint or shorter audio."
        ) from e

    def comparison(side: str, side_req: CompareRequest) -> Comparison:
        return comparison_of(
            timings["baseline"],
            timings[side],
            side_req,
            main,
            assistant,
            load_time_s=load_time_s,
            duration_s=len(samples) / SAMPLE_RATE,
            language=language,
        )

    ours = comparison("speculative", req)
    if column is not None:
        spelling = getattr(main.processor.tokenizer, "english_spelling_normalizer", None)
        context = column.result(timings.get("reference"), ours.baseline, spelling)
        ours = dataclasses.replace(ours, reference=context)
    return ours, comparison("peer", peer) if peer else None


def comparison_of(
    base: Timings,
    spec: Timings,
    req: CompareRequest,
    main: models.Loaded,
    assistant: models.Loaded,
    *,
    load_time_s: float,
    duration_s: float,
    language: str | None,
) -> Comparison:
    """A Comparison from the timed runs of both sides (the medians become their times)."""
    return Comparison(
        baseline=dataclasses.replace(base.result, time_s=base.median_s),
        speculative=dataclasses.replace(spec.result, time_s=spec.median_s),
        baseline_times_s=base.times_s,
        speculative_times_s=spec.times_s,
        main=main.checkpoint.label,
        assistant=assistant.checkpoint.label,
        device=device_name(main.device),
        dtype=models.dtype_name(main.dtype),
        engine=req.engine,
        repeats=req.repeats,
        gamma=req.gamma,
        gamma_schedule=req.gamma_schedule,
        load_time_s=load_time_s,
        duration_s=duration_s,
        language=language,
        task=None if main.checkpoint.english_only else req.task,
        main_revision=main.revision,
        assistant_revision=assistant.revision,
        decoding=req.decoding,
        temperature=req.temperature,
        seed=req.seed,
        draft_cross_attention=drafters.cross_precision(assistant, req.engine),
        assistant_dtype=_precision_of(assistant),
        encoder_dtype=models.dtype_name(main.encoder_precision),
    )


def _precision_of(loaded: models.Loaded) -> str:
    """A loaded assistant's weights, with its own encoder's where that differs."""
    encoder = loaded.encoder_precision
    if encoder is None or encoder == loaded.dtype:
        return models.dtype_name(loaded.dtype)
    return f"{models.dtype_name(loaded.dtype)}, encoder {models.dtype_name(encoder)}"


def leviathan_speedup(alpha: float, gamma: float, c: float) -> float:
    """Expected improvement factor of the decoding loop (Leviathan et al. 2023, eq. 1-2)."""
    if gamma <= 0:
        return 1.0
    expected = gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return expected / (gamma * c + 1)
