"""What the `compare` endpoint and the Compare button run: check the request, read the audio,
load the pair in this (the server's) process, run on the device, and hand the result to the
renderers. The API answers with the result itself; the button draws it.

The handlers decode nothing themselves (specwhisper.compare does, through device) and draw
nothing themselves (verdict, tokens, figure, snippet and exports do). Batch mode's handler is in
batch.py.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr
import numpy as np
import torch

from specwhisper import compare
from specwhisper.audio import AudioLimits, load_audio
from specwhisper.compare import CompareRequest
from specwhisper.ui import device
from specwhisper.ui.api import compare_request
from specwhisper.ui.choices import reference_for
from specwhisper.ui.errors import person_errors
from specwhisper.ui.exports import markdown_table, timings_frame, write_json
from specwhisper.ui.figure import audio_figure
from specwhisper.ui.form import request_settings
from specwhisper.ui.reference_view import reference_outputs
from specwhisper.ui.snippet import reproduce_snippet
from specwhisper.ui.tokens import draft_tokens, result_token_ids, steps_frame, token_pieces
from specwhisper.ui.verdict import render_side, render_verdict


def run_compare(
    audio: str | None,
    language: str,
    task: str,
    main: str,
    assistant: str,
    gamma: int = 5,
    gamma_schedule: str = "adaptive",
    repeats: int = 3,
    dtype: str = "auto",
    timestamps: bool = False,
    engine: str = "specwhisper",
    temperature: float = 0.0,
    seed: int = 0,
    fallback: bool = False,
    encoder_dtype: str = "auto",
    reference: str = "",
    progress: gr.Progress = gr.Progress(),  # noqa: B008 - gradio's way to ask for a progress bar
) -> dict[str, Any]:
    """Transcribe an audio file with Whisper alone (greedy) and with an assistant model drafting
    tokens for it (speculative decoding), and compare the two runs: transcripts, token ids,
    timings and whether the outputs are identical.

    Args:
        audio: the audio file (WAV, FLAC, MP3, OGG, M4A or WEBM).
        language: "auto", a Whisper language code ("fr") or its English name ("French").
        task: "transcribe", or "translate" (into English).
        main: the main checkpoint: a listed Hub id or a local folder name ("whisper-base").
        assistant: the assistant checkpoint (same tokenizer as the main), or "self-int8".
        gamma: draft tokens per step, 0 to 64 (the start value for the adaptive schedule).
        gamma_schedule: "adaptive", "constant" or "heuristic".
        repeats: timed repeats per side after one warm-up, 1 to 20.
        dtype: "auto" (float16 on GPU, float32 on CPU), "float32", "float16" or "bfloat16".
        timestamps: segment timestamps in both runs.
        engine: "specwhisper" (our speculative loop) or "transformers" (assisted generation).
        temperature: 0 for greedy (token-identical); above 0, both sides sample (speculative
            sampling: identical in distribution, not token for token).
        seed: the sampling seed; the same seed repeats a run.
        fallback: Whisper's temperature fallback recipe (greedy first, then 0.2 ... 1.0 for
            windows that fail its checks), in both runs; our engine only.
        encoder_dtype: the main's encoder alone, shared by both runs: "auto" (the same as
            dtype) or "bfloat16" (about 3x faster on a CPU with AMX; the decoder still
            verifies in dtype, so the runs stay token for token).
        reference: another engine timed beside the columns, for context: "" (off),
            "faster-whisper:int8" or "faster-whisper:float32" ("faster-whisper:float16" on a
            GPU). A different engine: its transcript can differ from the baseline's.
    Returns:
        JSON with `baseline` and `speculative` (text, token ids, time, speed)
        `identical`, `first_divergence`, `speedup`, the pair, device, dtype and audio notes;
        `reference` (None when off): its text, time and agreement with the baseline.
    """
    req = compare_request(
        main=main,
        assistant=assistant,
        language=language,
        task=task,
        gamma=gamma,
        gamma_schedule=gamma_schedule,
        repeats=repeats,
        dtype=dtype,
        timestamps=timestamps,
        engine=engine,
        temperature=temperature,
        seed=seed,
        fallback=fallback,
        encoder_dtype=encoder_dtype,
        reference=reference,
    )
    return compare_run(audio, req, progress).result


def on_compare(
    audio: str | None,
    progress: gr.Progress = gr.Progress(),  # noqa: B008
    **settings: Any,
) -> tuple[Any, ...]:
    """The Compare button: the API's run, drawn into the page. `settings` are the page's fields
    by CompareRequest name (gradio's inputs_kwargs)."""
    req = compare_request(**request_settings(settings))
    run = compare_run(audio, req, progress)
    result, pieces = run.result, run.pieces
    for note in result["audio_notes"]:
        gr.Warning(note)
    return (
        render_verdict(result, pieces),
        render_side(result, "baseline"),
        render_side(result, "speculative"),
        audio_figure(run.samples, result),
        draft_tokens(result, pieces),
        steps_frame(result, pieces),
        reproduce_snippet(result, req),
        markdown_table(result),
        write_json(result),
        timings_frame(result),
        *reference_outputs(result, reference_for(audio)),
    )


class Run(NamedTuple):
    """One comparison as the handlers see it."""

    result: dict[str, Any]  # the `compare` API's JSON
    pieces: dict[int, str]  # the text of every token id in it
    samples: np.ndarray  # the audio as decoded: float32 mono 16 kHz


def compare_run(audio: str | None, req: CompareRequest, progress: gr.Progress | None) -> Run:
    """Check the request, read the audio, load the pair here, run the comparison on the device.

    Loading happens in this, the server's process, and not in the GPU call: ZeroGPU runs that in
    a forked worker, where a model loaded would be lost with the worker. Loaded here, the pair
    stays in the cache of the process every worker is forked from.
    """
    with person_errors():
        compare.check_request(req)  # a wrong checkpoint or language is reported before decoding
        report = device.reporter(progress)
        report(0.0, "Reading the audio")
        clip = load_audio(audio, AudioLimits.from_env(on_gpu=torch.cuda.is_available()))
        main, _, load_s = compare.load_pair(req, progress=report)
        result = device.on_device(clip.samples, req, progress)
        # what this process loaded, plus what the worker had to load itself (0 when it found
        # the pair in the cache it was forked with)
        result["load_time_s"] = round(load_s + result["load_time_s"], 3)
        result["audio_notes"] = list(clip.notes)
        pieces = token_pieces(main.processor.tokenizer, result_token_ids(result))
        return Run(result, pieces, clip.samples)
