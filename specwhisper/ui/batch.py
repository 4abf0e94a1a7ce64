"""Batch mode on the page: several files read, cut into 30 s rows and compared at each batch size
picked (specwhisper.batch, on the device); the run's JSON, then drawn by batch_view. Decodes
nothing itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd
import torch

from specwhisper import batch, compare
from specwhisper.audio import AudioError, load_audio
from specwhisper.compare import CompareError
from specwhisper.ui import device, gpu_time
from specwhisper.ui.api import compare_request
from specwhisper.ui.batch_view import batch_chart_frame, batch_rows_frame, render_batch
from specwhisper.ui.errors import person_errors

MAX_BATCH_ROWS = 32  # 30 s pieces in one batch-mode run, all files together
# Batch mode runs the picked pair, language and repeats with these: greedy, our loop.
BATCH_SETTINGS = dict(
    task="transcribe",
    gamma=5,
    gamma_schedule="adaptive",
    dtype="auto",
    timestamps=False,
    engine="specwhisper",
)


def run_batch(
    files: list[str] | None,
    batch_sizes: list[Any] | None,
    repeats: int,
    main: str,
    assistant: str,
    language: str,
    progress: gr.Progress | None = None,
) -> dict[str, Any]:
    """Batch mode: every file (cut into 30 s pieces) through batched `generate` and our batched
    speculative loop at each batch size; one entry per size (BatchComparison.to_dict), each
    row named by its file, and the files cut into pieces stitched back together."""
    with person_errors():
        if not files:
            raise CompareError("Add one or more audio files for batch mode.")
        sizes = batch.check_batch_sizes(batch_sizes or [])
        req = compare_request(
            main=main, assistant=assistant, language=language, repeats=repeats, **BATCH_SETTINGS
        )
        checked = compare.check_request(req)  # once: the loaders below take it as it is
        report = device.reporter(progress)
        report(0.0, "Reading the audio")
        code = None if checked.main.english_only else checked.language
        recordings, notes = _read_files(files, code)
        rows = batch.cut_rows(recordings)
        if len(rows.names) > MAX_BATCH_ROWS:
            raise CompareError(
                f"Batch mode takes up to {MAX_BATCH_ROWS} pieces of 30 s; these files make "
                f"{len(rows.names)}. Use fewer or shorter files."
            )
        result = device.on_device_batch(rows, list(sizes), checked, progress)
        return result | {"audio_notes": notes, "main": main, "assistant": assistant}


def _read_files(
    files: list[str], language: str | None
) -> tuple[list[tuple[str, Any, str | None]], list[str]]:
    """Every file read as 16 kHz mono: (name, samples, language) each, and the audio notes.
    CompareError naming the file that cannot be read."""
    limits = gpu_time.audio_limits(on_gpu=torch.cuda.is_available())
    recordings, notes = [], []
    for path in files:
        name = Path(path).name
        try:
            clip = load_audio(path, limits)
        except AudioError as e:
            raise CompareError(f"{name}: {e}") from None
        notes += [f"{name}: {note}" for note in clip.notes]
        recordings.append((name, clip.samples, language))
    return recordings, notes


def on_batch(
    files: list[str] | None,
    batch_sizes: list[Any] | None,
    repeats: int,
    main: str,
    assistant: str,
    language: str,
    progress: gr.Progress = gr.Progress(),  # noqa: B008
) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The Compare-in-batches button: the summary, every row, and the speed-up chart."""
    result = run_batch(files, batch_sizes, repeats, main, assistant, language, progress)
    for note in result["audio_notes"]:
        gr.Warning(note)
    return render_batch(result), batch_rows_frame(result), batch_chart_frame(result)
