"""What the `compare` endpoint and the Compare button run: check the request, read the audio,
refuse what needs no GPU to refuse, run on the device (which loads the pair), and hand the
result to the renderers. The API answers with the result itself; the button draws it.

On the page a failed run's sentence takes the verdict's place and every other view is emptied
(as it is when a run starts), so an older clip's result never stays on screen; the API raises.
Each finished run also measures this machine's speed, for the estimate shown before the next.

The handlers decode nothing themselves (specwhisper.compare does, through zerogpu) and draw
nothing themselves (verdict, tokens, figure, snippet and exports do). Batch mode's handler is in
batch_mode.py.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import gradio as gr
import numpy as np
import pandas as pd
import torch

from specwhisper import request_check
from specwhisper.audio import AudioError, AudioLimits, load_audio
from specwhisper.request_check import DEFAULTS, CompareError, CompareRequest
from specwhisper.ui import gpu_time, zerogpu
from specwhisper.ui.api import compare_request
from specwhisper.ui.choices import reference_for
from specwhisper.ui.errors import person_errors
from specwhisper.ui.estimate import SpeedLog, estimate_line, measured_speed
from specwhisper.ui.exports import markdown_table, write_json
from specwhisper.ui.figure import audio_figure
from specwhisper.ui.form import request_settings
from specwhisper.ui.reference_view import reference_outputs
from specwhisper.ui.snippet import reproduce_snippet
from specwhisper.ui.tokens import STEP_COLUMNS, draft_tokens, steps_frame
from specwhisper.ui.verdict import render_error, render_side, render_verdict

# This machine's speed, from the comparisons it has finished: the estimate before each run.
SPEEDS = SpeedLog()
# The verdict while a run is under way: blank, and tall enough for the progress bar, which
# would otherwise spill over the reference text under it.
RUNNING = '<div style="min-height: 96px"></div>'


def run_compare(
    audio: str | None,
    language: str,
    task: str,
    main: str,
    assistant: str,
    gamma: int = DEFAULTS.gamma,
    gamma_schedule: str = DEFAULTS.gamma_schedule,
    repeats: int = DEFAULTS.repeats,
    dtype: str = DEFAULTS.dtype,
    timestamps: bool = DEFAULTS.timestamps,
    engine: str = DEFAULTS.engine,
    temperature: float = DEFAULTS.temperature,
    seed: int = DEFAULTS.seed,
    fallback: bool = DEFAULTS.fallback,
    encoder_dtype: str = DEFAULTS.encoder_dtype,
    reference: str = DEFAULTS.reference,
    loop_alone: bool = DEFAULTS.loop_alone,
    progress: gr.Progress = gr.Progress(),  # noqa: B008 - gradio's way to ask for a progress bar
) -> dict[str, Any]:
    """Transcribe an audio file with Whisper alone (greedy) and with an assistant model drafting
    tokens for it (speculative decoding), and compare the two runs: transcripts, token ids,
    timings and whether the outputs are identical.

    One line per parameter: gradio builds each MCP parameter's description from its own line of
    this docstring and drops the lines under it (a test compares the schema with this text).

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
        temperature: 0 for greedy (token-identical); above 0, both sides sample (speculative sampling: identical in distribution, not token for token).
        seed: the sampling seed; the same seed repeats a run.
        fallback: Whisper's temperature fallback recipe (greedy first, then 0.2 ... 1.0 for windows that fail its checks), in both runs; our engine only.
        encoder_dtype: the main's encoder alone, shared by both runs: "auto" (the same as dtype) or "bfloat16" (about 3x faster on a CPU with AMX; the decoder still verifies in dtype, so the runs stay token for token).
        reference: another engine timed beside the columns, for context: "" (off), "faster-whisper:int8" or "faster-whisper:float32"; on a CPU only. A different engine: its transcript can differ from the baseline's.
        loop_alone: also time our loop without drafting (gamma 0, one main pass per token as plain generate makes) in the same rounds, to split the speed-up into the loop's part and drafting's; our engine only.
    Returns:
        JSON with `baseline` and `speculative` (text, token ids, time, speed)
        `identical`, `first_divergence`, `speedup`, the pair, device, dtype and audio notes;
        `reference` (None when off): its text, time and agreement with the baseline;
        `loop_alone` (None when off) with `loop_alone_speedup` (the baseline's time over it)
        and `speculative_speedup_over_loop_alone` (drafting's part).
    """  # noqa: E501 - one line per parameter (see above)
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
        loop_alone=loop_alone,
    )
    return compare_run(audio, req, progress).result


class Shown(NamedTuple):
    """What the Compare button draws, one field per view: layout.Results has a component of each
    name, and its outputs() lists them in this order, so every value lands in its own view."""

    estimate: str  # how long Compare takes on this clip, above the verdict
    verdict: str  # the headline, or the failed run's sentence
    baseline: str
    speculative: str
    spectrogram: Any  # a matplotlib figure, or None
    token_view: Any  # gr.Accordion(open=...): the draft-token view, open once a result exists
    origins: list[tuple[str, str | None]] | None
    steps: pd.DataFrame
    snippet: str
    markdown: str
    json_file: str | None
    reference_box: Any  # gr.Column(visible=...): the reference column, shown when one ran
    reference: str  # the reference column's HTML


# Every view but the estimate and the verdict, empty: what a starting or failed run shows. Made
# fresh per call (a component update or a frame is not shared between two answers).
EMPTY: dict[str, Callable[[], Any]] = {
    "baseline": str,
    "speculative": str,
    "spectrogram": lambda: None,
    "token_view": lambda: gr.Accordion(open=False),
    "origins": lambda: None,
    "steps": lambda: pd.DataFrame(columns=STEP_COLUMNS),
    "snippet": str,
    "markdown": str,
    "json_file": lambda: None,
    "reference_box": lambda: gr.Column(visible=False),
    "reference": str,
}


def on_compare(
    audio: str | None,
    progress: gr.Progress = gr.Progress(),  # noqa: B008
    **settings: Any,
) -> Shown:
    """The Compare button: the API's run, drawn into the page. `settings` are the page's fields
    by CompareRequest name (gradio's inputs_kwargs). A run that fails puts its sentence where
    the verdict would be and clears every other view, so no older clip's result stays on
    screen; the API (run_compare) raises instead, for its callers."""
    try:
        with person_errors():  # a view that fails to draw, too, is a sentence, not red pills
            req = compare_request(**request_settings(settings))
            run = compare_run(audio, req, progress)
            shown = drawn(run, req, reference_for(audio))
    except gr.Error as e:
        gr.Warning(html.escape(e.message), title="Not compared")  # the sentence stays below
        return failed(e.message, on_estimate(audio, settings.get("main"), settings.get("repeats")))
    for note in run.result["audio_notes"]:
        gr.Warning(note)
    return shown


def drawn(run: Run, req: CompareRequest, example_text: str = "") -> Shown:
    """A finished run in every view; the draft-token view opened. `example_text`: what is said
    in an example clip, for the reference column's WER ("" for other audio)."""
    result, pieces = run.result, run.pieces
    reference_box, reference = reference_outputs(result, example_text)
    return Shown(
        estimate=estimate_line(result["duration_s"], req.repeats, req.main, SPEEDS.speed(req.main)),
        verdict=render_verdict(result, pieces),
        baseline=render_side(result, "baseline"),
        speculative=render_side(result, "speculative"),
        spectrogram=audio_figure(run.samples, result),
        token_view=gr.Accordion(open=True),
        origins=draft_tokens(result, pieces),
        steps=steps_frame(result, pieces),
        snippet=reproduce_snippet(result, req),
        markdown=markdown_table(result),
        json_file=write_json(result),
        reference_box=reference_box,
        reference=reference,
    )


def on_start() -> Shown:
    """The page as a run starts: every view of the last run emptied, so only the progress bar
    shows where the result will be (over no older text), and no older result stays beside a
    run of another clip. The estimate above stays."""
    return cleared(gr.skip(), RUNNING)


def failed(message: str, estimate: str = "") -> Shown:
    """The page after a failed run: the sentence in the verdict's place, every view empty."""
    return cleared(estimate, render_error(message))


def cleared(estimate: Any, verdict: str) -> Shown:
    """The page with this estimate and verdict, and every other view empty."""
    return Shown(
        estimate=estimate, verdict=verdict, **{name: empty() for name, empty in EMPTY.items()}
    )


def on_estimate(audio: str | None, main: str | None, repeats: Any) -> str:
    """The estimate above the result for the clip and settings now in the form; empty when the
    clip cannot be read (Compare then says why) or the repeats are not a number yet."""
    if not audio or not main:
        return ""
    try:
        n_repeats = int(repeats)
    except (TypeError, ValueError):
        return ""
    try:
        duration_s = load_audio(audio, audio_limits()).duration_s
    except AudioError:
        return ""
    return estimate_line(duration_s, n_repeats, main, SPEEDS.speed(main))


def audio_limits() -> AudioLimits:
    """The longest audio and largest file this process takes: longer on a GPU, and on ZeroGPU
    what a logged-out visitor's daily quota can compare (gpu_time)."""
    return gpu_time.audio_limits(on_gpu=torch.cuda.is_available())


class Run(NamedTuple):
    """One comparison as the handlers see it."""

    result: dict[str, Any]  # the `compare` API's JSON
    pieces: dict[int, str]  # the text of every token id in it
    samples: np.ndarray  # the audio as decoded: float32 mono 16 kHz


def compare_run(audio: str | None, req: CompareRequest, progress: gr.Progress | None) -> Run:
    """Check the request, read the audio, refuse here what needs no GPU to refuse, then load
    and run on the device.

    Nothing loads in this, the server's, process: on ZeroGPU only the thread that imported
    `spaces` can put a model on the GPU (see specwhisper.ui.zerogpu), so the pair loads inside
    the device call, or is found there already.
    """
    with person_errors():
        start_s = time.perf_counter()
        # checked once: a wrong checkpoint or language is reported before decoding
        checked = request_check.check_request(req)
        report = zerogpu.reporter(progress)
        report(0.0, "Reading the audio")
        clip = load_audio(audio, audio_limits())
        problem = request_check.transformers_timestamps_problem(
            req, checked.assistant, clip.duration_s
        )
        if problem:
            raise CompareError(problem)
        result, pieces = zerogpu.on_device(clip.samples, checked, progress)
        result["audio_notes"] = list(clip.notes)
        speed = measured_speed(result, time.perf_counter() - start_s - result["load_time_s"])
        if speed is not None:
            SPEEDS.add(req.main, speed)
        return Run(result, pieces, clip.samples)
