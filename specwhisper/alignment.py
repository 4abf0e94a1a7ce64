"""Where each token sits in the audio: Whisper's own word alignment (the cross-attention of its
alignment heads, warped onto the audio frames by dynamic time warping), as transformers'
`generate(..., return_token_timestamps=True)` computes it.

It runs after a comparison's timed runs, never inside one: one more, untimed, baseline decode
of the same audio with the same options. The times belong to the baseline's tokens, which are
the speculative run's tokens when decoding is greedy; when they differ, or this decode does not
reproduce them, there are no times, and a note names why. Long-form audio (over 30 s) gets
absolute times, each 30 s window's tokens offset by where that window starts. No token starts
before the speech does (where a voice activity detector first hears it).

It does not time anything, draw anything or change the comparison's other keys.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specwhisper import compare, decoding, request_check
from specwhisper.audio import SAMPLE_RATE
from specwhisper.decoding import DecodeOptions, Features
from specwhisper.loading import Loaded
from specwhisper.request_check import CheckedRequest, CompareRequest

TIME_PRECISION_S = 0.02  # one alignment step: two mel frames, one encoder frame

NO_ALIGNMENT_HEADS = "{main} names no alignment heads, so its tokens cannot be placed in the audio."
DIFFERENT_TOKENS = (
    "The tokens are not placed in the audio: the speculative run's tokens differ from the "
    "baseline's ({why}), and Whisper's alignment is computed for the baseline's."
)
SAMPLED = "sampling"
IN_FLOAT32 = "unexpected in float32: the verdict shows where they part"
HALF_PRECISION = "in half precision a verify pass over several tokens can round a near tie apart"
# transformers runs the alignment decode with eager attention, to read the attention weights
# (generation_whisper.py sets `_attn_implementation = "eager"` for return_token_timestamps),
# while the timed runs use the model's own kernel (SDPA): in greedy decoding that is the cause.
OTHER_ALIGNMENT_TOKENS = (
    "The tokens are not placed in the audio: the alignment decode chose other tokens than the "
    "timed runs ({why}), and Whisper's alignment is computed for the tokens it decodes."
)
EAGER_ATTENTION = (
    "to read the attention weights it runs eager attention instead of the runs' kernel, "
    "which can round a near tie apart"
)
OUT_OF_MEMORY = "The tokens are not placed in the audio: aligning them ran out of GPU memory."
FAILED = "The tokens are not placed in the audio: Whisper's alignment failed on this clip."

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenTimes:
    """Each token's start in the audio, or why there are none."""

    start_s: tuple[float, ...] = ()  # one per token, non-decreasing, within the audio
    note: str = ""  # why start_s is empty ("" when it is not)


def align_tokens(
    main: Loaded, features: Features, opts: DecodeOptions, token_ids: Sequence[int]
) -> TokenTimes:
    """Decode once more with token timestamps, and return the start of each of `token_ids`
    (generated tokens, as DecodeResult keeps them) when this decode reproduces them."""
    if not getattr(main.model.generation_config, "alignment_heads", None):
        return TokenTimes(note=NO_ALIGNMENT_HEADS.format(main=main.checkpoint.label))
    kwargs = decoding.generate_kwargs(main, features, opts)
    # the real frames, so the warping ignores the padding of a short clip
    kwargs["attention_mask"] = _frames_mask(features)
    sampled = opts.temperature > 0 or opts.fallback
    if sampled:
        torch.manual_seed(opts.seed)  # the baseline's own seed: its draws again
    attention = main.model.model.config._attn_implementation
    try:
        with torch.inference_mode():
            output = main.model.generate(
                features.input_features, return_token_timestamps=True, **kwargs
            )
    except torch.cuda.OutOfMemoryError:
        return TokenTimes(note=OUT_OF_MEMORY)
    except (RuntimeError, ValueError, IndexError):
        # the comparison is already done and stands without the times: keep it, and keep the
        # cause in the server log
        log.exception("token alignment failed")
        return TokenTimes(note=FAILED)
    finally:
        # generate leaves the cached model on eager attention: later runs keep their kernel
        main.model.model.config._attn_implementation = attention
    tokens, times = _tokens_and_times(output)
    start = _find(tokens, list(token_ids))
    if start is None:
        why = SAMPLED if sampled else EAGER_ATTENTION
        return TokenTimes(note=OTHER_ALIGNMENT_TOKENS.format(why=why))
    starts = np.clip(times[start : start + len(token_ids)], 0.0, features.duration_s)
    return TokenTimes(start_s=tuple(float(t) for t in starts))


def _frames_mask(features: Features) -> torch.Tensor:
    """The mask of real (not padding) frames: long-form features carry one already; a short
    clip's 30 s of features are real up to its duration (10 ms per frame)."""
    if features.attention_mask is not None:
        return features.attention_mask
    n_frames = features.input_features.shape[-1]
    n_real = min(n_frames, int(np.ceil(features.duration_s * SAMPLE_RATE / 160)))
    mask = torch.zeros((1, n_frames), dtype=torch.long, device=features.input_features.device)
    mask[:, :n_real] = 1
    return mask


def _tokens_and_times(output: dict[str, Any]) -> tuple[list[int], np.ndarray]:
    """The decoded tokens and their starts in seconds. With segments (timestamps on, or audio
    over 30 s), each segment's token times carry its window's offset; they are held inside the
    segment, because the warping places a window's closing timestamp token at the window's end,
    past where the next window starts."""
    segments = (output.get("segments") or [[]])[0]
    if not segments:
        tokens = [int(t) for t in output["sequences"][0].tolist()]
        return tokens, output["token_timestamps"][0].float().cpu().numpy()
    tokens, times = [], []
    for segment in segments:
        tokens += [int(t) for t in segment["tokens"].tolist()]
        start, end = float(segment["start"]), float(segment["end"])
        times.append(np.clip(segment["token_timestamps"].float().cpu().numpy(), start, end))
    # held inside its segment, each token starts no earlier than the one before it
    return tokens, np.maximum.accumulate(np.concatenate(times))


def _find(haystack: list[int], needle: list[int]) -> int | None:
    """Where `needle` starts in `haystack` (after the prompt tokens generate may return)."""
    for start in range(len(haystack) - len(needle) + 1):
        if haystack[start : start + len(needle)] == needle:
            return start
    return None


def add_token_times(
    result: dict[str, Any],
    samples: np.ndarray,
    req: CompareRequest | CheckedRequest,
    progress: compare.Progress | None = None,
) -> dict[str, Any]:
    """The compare API's JSON with `speculative.token_times_s` (each token's start in the audio,
    one per `speculative.token_ids`) added, or `speculative.token_times_note` saying why not.
    The pair is a cache hit: the comparison has just run on it."""
    checked = request_check.checked(req)
    main, _, _ = compare.load_pair(checked)
    features = decoding.prepare_features(main, samples)
    opts = compare.decode_options(checked.request, main.checkpoint, checked.language)
    spec = result["speculative"]
    if result["baseline"]["token_ids"] != spec["token_ids"]:
        if checked.request.decoding != "greedy":
            why = SAMPLED
        else:
            why = HALF_PRECISION if checked.dtype != torch.float32 else IN_FLOAT32
        spec["token_times_note"] = DIFFERENT_TOKENS.format(why=why)
        return result
    if progress:
        progress(1.0, "Placing each token in the audio (untimed)")
    times = align_tokens(main, features, opts, spec["token_ids"])
    if times.note:
        spec["token_times_note"] = times.note
    else:
        onset_s = speech_onset_s(samples)
        spec["token_times_s"] = [round(max(t, onset_s), 2) for t in times.start_s]
    return result


def speech_onset_s(samples: np.ndarray) -> float:
    """Where speech starts in the audio (0.0 when no speech is found, or no detector is
    installed): the first speech chunk of Silero's voice activity detector, which faster-whisper
    ships.

    Whisper's alignment starts the first token at 0.0 whatever comes before the speech (the
    warping path begins at the first frame), so 4 s of leading silence would read as the first
    word; no token can start before the speech does, so earlier starts are moved up to it."""
    try:
        from faster_whisper.vad import VadOptions, get_speech_timestamps
    except ImportError:  # the reference engine's extra is not installed
        return 0.0
    # no padding: the chunk starts where the detector first hears speech
    chunks = get_speech_timestamps(samples, VadOptions(speech_pad_ms=0), SAMPLE_RATE)
    return chunks[0]["start"] / SAMPLE_RATE if chunks else 0.0
