"""A comparison's request, checked once: what a person or an API caller asked for
(CompareRequest, with the defaults every surface takes), and the same request with everything
it names resolved (CheckedRequest) or refused with a sentence (CompareError) before anything
loads.

It loads, decodes and times nothing (compare does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specwhisper import checkpoints, decoding, languages, loading, reference
from specwhisper.schedule import DEFAULT_GAMMA


class CompareError(ValueError):
    """A request problem worded for a person (shown in the page as is)."""


@dataclass(frozen=True)
class CompareRequest:
    """Everything a person picks on the page (or passes to the API)."""

    main: str  # checkpoint id, local folder name
    assistant: str  # checkpoint id, local folder name, or "self-int8"
    language: str = "auto"  # "auto", a Whisper code ("fr") or a name ("French")
    task: str = "transcribe"  # "transcribe" | "translate"
    gamma: int = DEFAULT_GAMMA  # draft tokens per step (start value for adaptive schedules)
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
    # also time our loop at gamma 0 (no drafting), which splits the speed-up into the loop's
    # part and drafting's part (our engine only)
    loop_alone: bool = False

    @property
    def decoding(self) -> str:
        """ "greedy", "sampling" or "fallback": what "identical" can promise."""
        return "fallback" if self.fallback else "sampling" if self.temperature > 0 else "greedy"


# A request with nothing picked but the pair: where the API, the page's form, the handler's
# signature, batch mode and the bench's flags take their defaults, so they cannot drift apart.
DEFAULTS = CompareRequest(main="", assistant="")


MAX_TEMPERATURE = 2.0  # the page, the API and the bench refuse hotter sampling


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


def transformers_timestamps_problem(
    req: CompareRequest, assistant: checkpoints.Checkpoint | str, duration_s: float
) -> str | None:
    """TRANSFORMERS_TIMESTAMPS when this request would meet it, else None: known from the
    request and the audio's length alone, so the page says it before asking for a GPU."""
    if req.engine != "transformers" or not (req.timestamps or duration_s > decoding.WINDOW_S):
        return None
    if isinstance(assistant, str) or assistant.decoder_only:  # self-int8, distil-style
        return None
    return TRANSFORMERS_TIMESTAMPS.format(assistant=assistant.label)


LOOP_ALONE_ENGINE = (
    "Timing our loop without drafting splits our own engine's speed-up into the loop's part and "
    "drafting's part: pick the specwhisper engine for it."
)


@dataclass(frozen=True)
class CheckedRequest:
    """A request that passed `check_request`, with what it names resolved: the loaders, compare()
    and the bench take it, so one request is checked once however many steps it goes through."""

    request: CompareRequest
    main: checkpoints.Checkpoint
    assistant: checkpoints.Checkpoint | str  # a checkpoint, or checkpoints.SELF_INT8
    language: str | None  # the Whisper code; None: auto-detect
    device: torch.device
    dtype: torch.dtype  # the decoders' weights
    encoder_dtype: torch.dtype  # the main's encoder (the same as dtype unless asked otherwise)


def check_request(req: CompareRequest) -> CheckedRequest:
    """Validate a request before anything loads; raise CompareError or CheckpointError."""
    main = checkpoints.resolve(req.main, role="main")
    if main.decoder_only:
        raise CompareError(f"{main.label} is a decoder-only assistant; it cannot be the main.")
    assistant: str | checkpoints.Checkpoint = checkpoints.SELF_INT8
    if req.assistant.strip() != checkpoints.SELF_INT8:
        assistant = checkpoints.resolve(req.assistant, role="assistant")
    problem = checkpoints.pair_problem(main, assistant)
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
    problem = languages.language_problem(main, code)
    if problem:
        raise CompareError(problem)
    if not 0 <= req.gamma <= 64:
        raise CompareError("The number of draft tokens must be between 0 and 64.")
    if not 0.0 <= req.temperature <= MAX_TEMPERATURE:
        raise CompareError(f"The temperature must be between 0 (greedy) and {MAX_TEMPERATURE:g}.")
    problem = decoding.options_problem(req.engine, req.gamma_schedule, req.gamma, req.fallback)
    if problem:
        raise CompareError(problem)
    if req.loop_alone and req.engine != "specwhisper":
        raise CompareError(LOOP_ALONE_ENGINE)
    if not 1 <= req.repeats <= 20:
        raise CompareError("Repeats must be between 1 and 20.")
    device = loading.default_device()  # unknown precisions are refused before anything loads
    dtype = loading.resolve_dtype(req.dtype, device)
    encoder_dtype = loading.resolve_encoder_dtype(req.encoder_dtype, device, dtype)
    problem = reference.reference_problem(req.reference, on_gpu=device.type == "cuda")
    if problem:
        raise CompareError(problem)
    return CheckedRequest(req, main, assistant, code, device, dtype, encoder_dtype)


def checked(req: CompareRequest | CheckedRequest) -> CheckedRequest:
    """The request checked: a CheckedRequest as it is, a CompareRequest through check_request."""
    return req if isinstance(req, CheckedRequest) else check_request(req)
