"""Baseline and speculative Whisper decoding, returning one DecodeResult type.

Three engines, all greedy and batch size 1:
- `generate`: plain `model.generate(...)`, as a user would call it (the baseline).
- `transformers`: the same call with `assistant_model=...` (transformers' assisted generation).
- `specwhisper`: the same call, with transformers' assisted loop swapped for our own
  (specwhisper.loop). Whisper's own `generate` still does everything around it (language
  detection, prompts, logits processors, 30 s windows for long-form audio), so both columns go
  through identical pre- and post-processing; only the token loop differs.

This module does not load checkpoints, read audio or time repeats (see loading, audio, timing);
the loop, the drafters and the gamma schedule live in loop, drafters and schedule.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specwhisper import metrics
from specwhisper.audio import SAMPLE_RATE
from specwhisper.drafters import make_drafter
from specwhisper.loading import Loaded
from specwhisper.loop import DraftStep, LoopStats, own_loop
from specwhisper.parallel import parallel_drafting, parallel_loop
from specwhisper.schedule import DEFAULT_GAMMA, SCHEDULES, GammaSchedule
from specwhisper.timing import ForwardMeter, clock, timed

ENGINES = ("specwhisper", "transformers")
WINDOW_S = 30.0


# Whisper's long-form recipe (OpenAI's, as transformers runs it): a window is decoded greedily,
# and again at each higher temperature while it fails a check. transformers measures the
# compression ratio on token ids, where its documented 1.35 plays the part of OpenAI's 2.4 on text.
FALLBACK: dict[str, Any] = dict(
    temperature=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    compression_ratio_threshold=1.35,
    logprob_threshold=-1.0,
    no_speech_threshold=0.6,
)


TRANSFORMERS_FALLBACK = (
    "transformers' assisted generation cannot run Whisper's temperature fallback (it fails on "
    "the first retried window); pick the specwhisper engine for the fallback recipe."
)


@dataclass(frozen=True)
class DecodeOptions:
    """What to decode and how to speculate. Whisper's own defaults apply where None."""

    language: str | None = None  # Whisper code ("en"); None = auto-detect (multilingual mains)
    task: str | None = None  # "transcribe" | "translate"; None for English-only mains
    return_timestamps: bool = False  # segment timestamps; always on for audio over 30 s
    gamma: int = DEFAULT_GAMMA  # draft tokens per step (where adaptive/heuristic schedules start)
    gamma_schedule: str = "adaptive"  # adaptive (Leviathan cost model), constant, heuristic
    max_gamma: int = 12  # the adaptive schedule never drafts more than this
    engine: str = "specwhisper"  # speculative engine: our loop, or transformers' assisted loop
    max_new_tokens: int | None = None  # per window; None: Whisper's limit (448 minus prompt)
    temperature: float = 0.0  # 0: greedy (identical tokens); > 0: sampling (same distribution)
    top_k: int | None = None  # sampling only, applied to both models alike
    top_p: float | None = None  # sampling only
    seed: int = 0  # sampling only: the same seed repeats a run
    fallback: bool = False  # Whisper's temperature fallback (FALLBACK), in both columns alike
    # our engine, greedy: the draft drafts the next block while the main verifies this one
    # (specwhisper.parallel); sampling stays sequential. SPECWHISPER_PARALLEL_DRAFT=1 turns it on
    parallel_draft: bool = False


@dataclass(frozen=True)
class Segment:
    start_s: float
    end_s: float
    text: str


@dataclass(frozen=True)
class DecodeResult:
    """One decoding run. Baseline runs leave the draft fields at zero."""

    text: str  # decoded transcript, special tokens removed
    token_ids: tuple[int, ...]  # generated tokens: no prompt, no end-of-text
    time_s: float  # wall time of the generate call (encoder + decoder), device synced
    n_tokens: int  # len(token_ids): text and timestamp tokens the decoder produced
    n_main_forwards: int  # main decoder forward passes (incl. language detection, if any)
    engine: str  # "generate", "specwhisper" or "transformers"
    n_draft_tokens: int = 0  # tokens proposed by the draft
    n_accepted: int = 0  # proposed tokens the main model accepted
    n_windows: int = 1  # 30 s windows decoded (not generate's language-detection pass)
    steps: tuple[DraftStep, ...] = ()  # per speculative step, in order
    segments: tuple[Segment, ...] = ()  # with timestamps only
    # total time inside main decoder forwards: the decoder stack only, not the output
    # projection to logits (proj_out runs outside the metered module)
    main_forward_s: float = 0.0
    draft_s: float = 0.0  # total time inside the draft (parallel drafting: time the main waited)
    draft_overlapped_s: float = 0.0  # parallel drafting: draft time hidden behind main passes
    encoder_s: float = 0.0  # total time inside the main's encoder
    # with the fallback recipe: the temperature each decoded window ended at (0.0: greedy)
    window_temperatures: tuple[float, ...] = ()

    @property
    def acceptance_rate(self) -> float:
        return metrics.acceptance_rate([self])

    @property
    def tokens_per_main_forward(self) -> float:
        return metrics.tokens_per_main_forward([self])


# ---------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Features:
    """Log-mel input for generate, prepared once per audio and shared by every run."""

    input_features: torch.Tensor  # [1, n_mels, frames]
    attention_mask: torch.Tensor | None  # [1, frames], long-form only
    duration_s: float

    @property
    def long_form(self) -> bool:
        return self.duration_s > WINDOW_S


def prepare_features(main: Loaded, samples: np.ndarray) -> Features:
    """Log-mel features on the main's device and dtype; long-form keeps the whole signal."""
    duration_s = len(samples) / SAMPLE_RATE
    kwargs: dict[str, Any] = dict(sampling_rate=SAMPLE_RATE, return_tensors="pt")
    if duration_s > WINDOW_S:
        # Sequential long-form decoding needs every frame and a mask of the real ones.
        kwargs |= dict(truncation=False, padding="longest", return_attention_mask=True)
    out = main.processor(samples, **kwargs)
    features = out.input_features.to(main.device, main.dtype)
    mask = out.get("attention_mask") if duration_s > WINDOW_S else None
    return Features(features, None if mask is None else mask.to(main.device), duration_s)


def generate_options(opts: DecodeOptions, *, multilingual: bool, long_form: bool) -> dict[str, Any]:
    """The keyword arguments every engine passes to `generate` but the tensors: what to decode
    and how, identical for all of them. The page's snippet renders its `generate` call from it."""
    kwargs: dict[str, Any] = dict(do_sample=False, num_beams=1)
    if opts.fallback:
        kwargs |= FALLBACK
    if opts.temperature > 0:
        kwargs |= dict(do_sample=True, temperature=opts.temperature)
        if opts.top_k:
            kwargs["top_k"] = opts.top_k
        if opts.top_p is not None and opts.top_p < 1.0:
            kwargs["top_p"] = opts.top_p
    if opts.max_new_tokens is not None:
        kwargs["max_new_tokens"] = opts.max_new_tokens
    if multilingual:
        if opts.language:
            kwargs["language"] = opts.language
        if opts.task:
            kwargs["task"] = opts.task
    if opts.return_timestamps or long_form:
        kwargs |= dict(return_timestamps=True, return_segments=True)
    return kwargs


def generate_kwargs(main: Loaded, features: Features, opts: DecodeOptions) -> dict[str, Any]:
    """generate_options for this main and audio, with the long-form attention mask."""
    multilingual = getattr(main.model.generation_config, "is_multilingual", False)
    kwargs = generate_options(opts, multilingual=multilingual, long_form=features.long_form)
    if features.attention_mask is not None:
        kwargs["attention_mask"] = features.attention_mask
    return kwargs


def assistant_settings(gamma: int, gamma_schedule: str) -> dict[str, Any]:
    """What transformers' assisted generation reads from the assistant's generation config (not
    from generate()), for our gamma and schedule. adaptive: its own dynamic drafting (its
    defaults for assisted generation): up to gamma tokens, stopping early when the draft's
    confidence falls under 0.4 (a threshold it re-tunes as it goes when scikit-learn is
    installed). heuristic: gamma +2 after a fully accepted draft, -1 otherwise. constant:
    always gamma. The transformers engine and the page's snippet both use it."""
    return dict(
        num_assistant_tokens=gamma,
        num_assistant_tokens_schedule="heuristic" if gamma_schedule == "heuristic" else "constant",
        # 0.0, not None: transformers fills a None with its default, 0.4
        assistant_confidence_threshold=0.4 if gamma_schedule == "adaptive" else 0.0,
    )


@contextlib.contextmanager
def record_candidates(model: torch.nn.Module, stats: LoopStats, device: Any) -> Iterator[None]:
    """Record transformers' assisted steps (drafted, accepted, main token) without changing them,
    in the loop's step convention."""
    original = model._get_candidate_generator

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        generator = original(*args, **kwargs)
        get_candidates, update = generator.get_candidates, generator.update_candidate_strategy
        pending: dict[str, Any] = {}

        def get(input_ids, *a, **k):
            t0 = clock(device)
            with stats.drafting():
                candidates, logits = get_candidates(input_ids, *a, **k)
            stats.draft_s += clock(device) - t0
            pending["drafted"] = tuple(candidates[0, input_ids.shape[1] :].tolist())
            return candidates, logits

        def upd(input_ids, scores, num_matches):
            # transformers keeps n_matches + 1 tokens; when it cut the block on end-of-text or
            # the length limit, the last kept token is a drafted one the main agreed with.
            drafted, n, last = pending.pop("drafted", ()), int(num_matches), int(input_ids[0, -1])
            if n < len(drafted) and drafted[n] == last:
                stats.steps.append(DraftStep(drafted, n + 1, None))
            else:
                stats.steps.append(DraftStep(drafted, n, last))
            return update(input_ids, scores, num_matches)

        generator.get_candidates, generator.update_candidate_strategy = get, upd
        stats.n_windows += 1
        return generator

    model._get_candidate_generator = wrapped
    try:
        yield
    finally:
        del model._get_candidate_generator


# ---------------------------------------------------------------------------------------------
# Entry points


def n_prompt_tokens(ids: list[int], generation_config: Any) -> int:
    """Leading prompt tokens (<|startoftranscript|>, language, task, <|notimestamps|>)."""
    special = {generation_config.decoder_start_token_id, generation_config.no_timestamps_token_id}
    special |= set((getattr(generation_config, "lang_to_id", None) or {}).values())
    special |= set((getattr(generation_config, "task_to_id", None) or {}).values())
    n = 0
    while n < len(ids) and ids[n] in special:
        n += 1
    return n


def _finish(
    main: Loaded, output: Any, seconds: float, engine: str, meter: ForwardMeter, **extra: Any
) -> DecodeResult:
    processor = main.processor
    segments: tuple[Segment, ...] = ()
    if isinstance(output, dict):
        sequences = output["sequences"]
        segments = tuple(
            Segment(
                float(s["start"]),
                float(s["end"]),
                processor.decode(s["tokens"], skip_special_tokens=True).strip(),
            )
            for s in (output.get("segments") or [[]])[0]
        )
    else:
        sequences = output
    config = main.model.generation_config
    ids = [int(t) for t in sequences[0].tolist()]
    # generate returns the prompt and end-of-text on some paths (assisted, short-form) and not on
    # others; keep only the generated tokens so every engine is compared on the same footing.
    ids = ids[n_prompt_tokens(ids, config) :]
    ends = {config.pad_token_id, config.eos_token_id}
    while ids and ids[-1] in ends:
        ids.pop()
    text = processor.decode(ids, skip_special_tokens=True).strip()
    n_tokens = len(ids)
    return DecodeResult(
        text=text,
        token_ids=tuple(ids),
        time_s=seconds,
        n_tokens=n_tokens,
        n_main_forwards=meter.n_calls,
        engine=engine,
        segments=segments,
        main_forward_s=meter.total_s,
        **extra,
    )


@contextlib.contextmanager
def record_fallback(model: torch.nn.Module, temperatures: list[float]) -> Iterator[None]:
    """Record the temperature each window ended at under Whisper's fallback recipe, by watching
    generate's own per-attempt check (`_need_fallback`)."""
    original = model._need_fallback
    last = FALLBACK["temperature"][-1]

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        needs, skip = original(*args, **kwargs)
        temperature = float((args[-1] if args else kwargs["temperature"]) or 0.0)
        if not needs or temperature >= last:
            temperatures.append(temperature)
        return needs, skip

    model._need_fallback = wrapped
    try:
        yield
    finally:
        del model._need_fallback


@contextlib.contextmanager
def detection(model: Any, encoder: ForwardMeter) -> Iterator[list[int]]:
    """[n]: the encoder passes `generate` makes inside its language detection (one, on the first
    30 s, when no language is given). No window is decoded from them, so they are not counted as
    windows."""
    n = [0]
    detect = model.detect_language

    def counted(*args: Any, **kwargs: Any) -> Any:
        before = encoder.n_calls
        try:
            return detect(*args, **kwargs)
        finally:
            n[0] += encoder.n_calls - before

    model.detect_language = counted
    try:
        yield n
    finally:
        del model.detect_language


def decode_baseline(main: Loaded, features: Features, opts: DecodeOptions) -> DecodeResult:
    """Plain `generate` (greedy, or sampling when opts.temperature > 0), as a user runs it: the
    reference both columns are held to."""
    kwargs = generate_kwargs(main, features, opts)
    if opts.temperature > 0 or opts.fallback:
        torch.manual_seed(opts.seed)
    temperatures: list[float] = []
    with ForwardMeter(main.model.model.decoder, main.device) as meter, torch.inference_mode():
        encoder = ForwardMeter(main.model.model.encoder, main.device)
        recording = record_fallback(main.model, temperatures) if opts.fallback else None
        with encoder, recording or contextlib.nullcontext(), detection(main.model, encoder) as n:
            output, seconds = timed(
                lambda: main.model.generate(features.input_features, **kwargs), main.device
            )
    return _finish(
        main,
        output,
        seconds,
        "generate",
        meter,
        n_windows=encoder.n_calls - n[0],
        encoder_s=encoder.total_s,
        window_temperatures=tuple(temperatures),
    )


@contextlib.contextmanager
def _assistant_config(model: torch.nn.Module, settings: dict[str, Any]) -> Iterator[None]:
    """Set the assistant's generation config for one call and restore it afterwards: Whisper's
    generate also writes `force_unique_generate_call` into it, which would turn later long-form
    runs of the same model (main as its own assistant) into a single 30 s window."""
    saved = model.generation_config
    model.generation_config = copy.deepcopy(saved)
    for key, value in settings.items():
        setattr(model.generation_config, key, value)
    try:
        yield
    finally:
        model.generation_config = saved


def options_problem(engine: str, gamma_schedule: str, gamma: int, fallback: bool) -> str | None:
    """Why these speculative settings cannot run, in one sentence, or None. The one home of the
    engine and schedule checks (the page's request check words its refusals with it)."""
    if engine not in ENGINES:
        return f"Unknown engine '{engine}'; use one of {', '.join(ENGINES)}."
    if gamma_schedule not in SCHEDULES:
        return f"Unknown gamma schedule '{gamma_schedule}'; use one of {', '.join(SCHEDULES)}."
    if engine == "transformers" and fallback:
        # transformers 5.23 fails inside generate_with_fallback when an assistant is passed (a
        # retried window's input is None: TypeError), so only our loop runs the recipe.
        return TRANSFORMERS_FALLBACK
    if engine == "transformers" and gamma < 1:
        return (
            "transformers' assisted generation drafts at least one token: set the number of "
            "draft tokens to 1 or more, or pick the specwhisper engine (0 there: no drafting)."
        )
    return None


def decode_speculative(
    main: Loaded, assistant: Loaded, features: Features, opts: DecodeOptions
) -> DecodeResult:
    """The same `generate` call with an assistant: our loop or transformers' assisted loop."""
    problem = options_problem(opts.engine, opts.gamma_schedule, opts.gamma, opts.fallback)
    if problem:
        raise ValueError(problem)
    kwargs = generate_kwargs(main, features, opts)
    meter = ForwardMeter(main.model.model.decoder, main.device)
    encoder = ForwardMeter(main.model.model.encoder, main.device)  # the same for both columns
    stats = LoopStats(drafting=meter.paused)  # a main drafting for itself: not main passes
    context = contextlib.ExitStack()
    if opts.engine == "specwhisper":
        schedule = GammaSchedule(opts.gamma_schedule, max(opts.gamma, 0), max(opts.max_gamma, 1))
        generator = None
        if opts.temperature > 0 or opts.fallback:
            generator = torch.Generator(device=main.device).manual_seed(opts.seed)
        drafter = make_drafter(main, assistant)
        # a main drafting for itself runs its metered decoder in the draft: sequential only
        parallel = parallel_drafting(opts.parallel_draft) and assistant.model is not main.model
        loop = parallel_loop if parallel else own_loop
        kwargs["custom_generate"] = loop(drafter, schedule, stats, generator)
    else:
        settings = assistant_settings(opts.gamma, opts.gamma_schedule)
        kwargs["assistant_model"] = assistant.model
        context.enter_context(_assistant_config(assistant.model, settings))
        context.enter_context(record_candidates(main.model, stats, main.device))
    if opts.temperature > 0 or opts.fallback:
        torch.manual_seed(opts.seed)  # transformers' engine samples from the global generator
    temperatures: list[float] = []
    if opts.fallback:
        context.enter_context(record_fallback(main.model, temperatures))
    with meter, encoder, context, torch.inference_mode():
        output, seconds = timed(
            lambda: main.model.generate(features.input_features, **kwargs), main.device
        )
    return _finish(
        main,
        output,
        seconds,
        opts.engine,
        meter,
        n_windows=stats.n_windows,
        steps=tuple(stats.steps),
        n_draft_tokens=sum(len(s.drafted) for s in stats.steps),
        n_accepted=sum(s.n_accepted for s in stats.steps),
        draft_s=stats.draft_s,
        draft_overlapped_s=stats.draft_overlapped_s,
        encoder_s=encoder.total_s,
        window_temperatures=tuple(temperatures),
    )


def first_divergence(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """Index of the first differing token, or None when the sequences are identical."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class TransformersOwnCalls(logging.Filter):
    """Drops the notices transformers 5.23 logs about calls it makes itself inside `generate`,
    which no caller can avoid, so a server log shows what our requests cause:

    - "Passing `generation_config` together with generation-related arguments": Whisper's
      `generate_with_fallback` passes its own generation_config with suppress_tokens and
      begin_suppress_tokens (generation_whisper.py, a workaround its comment dates to PR 48108),
      and assisted generation's candidate generator passes the assistant's with
      max_new_tokens, min_new_tokens and use_cache. The same notice naming other arguments is
      kept: that one a caller can act on.
    - "Both `max_new_tokens` ... and `max_length` ... seem to have been set": the candidate
      generator at every draft step, and any capped run; max_new_tokens wins, as we want.
    """

    OWN_ARGUMENTS = (
        {"suppress_tokens", "begin_suppress_tokens"},
        {"use_cache", "min_new_tokens", "max_new_tokens"},
    )

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Passing `generation_config` together with generation-related"):
            named = set(re.findall(r"'(\w+)'", message.split(")", 1)[0]))
            return not any(named <= own for own in self.OWN_ARGUMENTS)
        return not message.startswith("Both `max_new_tokens`")


# transformers logs both from here; getLogger makes the logger transformers will use.
logging.getLogger("transformers.generation.utils").addFilter(TransformersOwnCalls())
