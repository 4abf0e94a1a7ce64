"""Batch mode on the page: several files, cut into 30 s rows, through batched `generate` and
our batched speculative loop at each batch size picked; the run's JSON, then drawn by
batch_view. Decodes nothing itself (specwhisper.batched does, on the device)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np
import pandas as pd
import torch

from specwhisper import batched, compare, models
from specwhisper.audio import AudioError, AudioLimits, chunks, load_audio
from specwhisper.compare import CompareError
from specwhisper.ui import device
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
    row named by its file."""
    with person_errors():
        if not files:
            raise CompareError("Add one or more audio files for batch mode.")
        sizes = _batch_sizes(batch_sizes)
        req = compare_request(
            main=main, assistant=assistant, language=language, repeats=repeats, **BATCH_SETTINGS
        )
        main_ckpt = compare.check_request(req).main
        report = device.reporter(progress)
        report(0.0, "Reading the audio")
        pieces, names, notes, recordings = _cut_files(files)
        if len(pieces) > MAX_BATCH_ROWS:
            raise CompareError(
                f"Batch mode takes up to {MAX_BATCH_ROWS} pieces of 30 s; these files make "
                f"{len(pieces)}. Use fewer or shorter files."
            )
        code = None if main_ckpt.english_only else compare.language_code(req.language)
        loaded, _, _ = compare.load_pair(req, progress=report)
        sweep = device.on_device_batch(pieces, [code] * len(pieces), sizes, req, progress)
        for entry in sweep:
            for row, name in zip(entry["rows"], names, strict=True):
                row["clip"] = name
        stitched = _stitch(loaded, sweep[-1]["rows"], recordings)
        return {
            "sweep": sweep,
            "recordings": stitched,
            "audio_notes": notes,
            "main": main,
            "assistant": assistant,
        }


def _batch_sizes(batch_sizes: list[Any] | None) -> list[int]:
    """The picked batch sizes, ascending; CompareError unless they are 1 to 64."""
    try:
        sizes = sorted({int(size) for size in batch_sizes or []})
    except (TypeError, ValueError):
        raise CompareError("Batch sizes must be whole numbers.") from None
    if not sizes or sizes[0] < 1 or sizes[-1] > 64:
        raise CompareError("Pick at least one batch size, from 1 to 64.")
    return sizes


# A recording cut into several rows: its name, its rows, and their strides (to stitch them).
Recording = tuple[str, range, list[tuple[int, int, int]]]


def _cut_files(files: list[str]) -> tuple[list[np.ndarray], list[str], list[str], list[Recording]]:
    """Every file read and cut into 30 s pieces, one row each: the pieces, the rows' names
    ("f.wav", or "f.wav #2" for a recording's second piece), the audio notes and the
    recordings to stitch back."""
    limits = AudioLimits.from_env(on_gpu=torch.cuda.is_available())
    pieces, names, notes, recordings = [], [], [], []
    for path in files:
        name = Path(path).name
        try:
            clip = load_audio(path, limits)
        except AudioError as e:
            raise CompareError(f"{name}: {e}") from None
        notes += [f"{name}: {note}" for note in clip.notes]
        parts = chunks(clip.samples)
        if len(parts) > 1:
            rows = range(len(pieces), len(pieces) + len(parts))
            recordings.append((name, rows, [stride for _, stride in parts]))
        pieces += [piece for piece, _ in parts]
        names += [name if len(parts) == 1 else f"{name} #{i + 1}" for i in range(len(parts))]
    return pieces, names, notes, recordings


def _stitch(
    loaded: models.Loaded, rows: list[dict[str, Any]], recordings: list[Recording]
) -> list[dict]:
    """Each recording's rows put back together as the ASR pipeline does, on both sides."""
    return [
        {
            "clip": name,
            **{
                f"{side}_text": batched.merge_pieces(
                    loaded, [tuple(rows[i][f"{side}_tokens"]) for i in span], strides
                )
                for side in ("baseline", "speculative")
            },
            "identical": all(rows[i]["identical"] for i in span),
        }
        for name, span, strides in recordings
    ]


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
