"""Batch mode on the page: several files read, cut into 30 s rows and compared at each batch size
picked (specwhisper.batch_mode, on the device), and the result drawn: a line per batch size,
every row's transcripts, and the speed-up against batch size beside the Distil-Whisper paper's
figures. Decodes nothing itself."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd
import torch

from specwhisper import batch_mode, request_check
from specwhisper.audio import AudioError, load_audio
from specwhisper.request_check import DEFAULTS, CompareError
from specwhisper.ui import gpu_time, zerogpu
from specwhisper.ui.api import compare_request
from specwhisper.ui.errors import person_errors
from specwhisper.ui.verdict import badge

MAX_BATCH_ROWS = 32  # 30 s pieces in one batch-mode run, all files together
# Batch mode runs the picked pair, language and repeats with these: greedy, our loop.
BATCH_SETTINGS = dict(
    task=DEFAULTS.task,
    gamma=DEFAULTS.gamma,
    gamma_schedule=DEFAULTS.gamma_schedule,
    dtype=DEFAULTS.dtype,
    timestamps=DEFAULTS.timestamps,
    engine=DEFAULTS.engine,
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
        sizes = batch_mode.check_batch_sizes(batch_sizes or [])
        req = compare_request(
            main=main, assistant=assistant, language=language, repeats=repeats, **BATCH_SETTINGS
        )
        checked = request_check.check_request(req)  # once: the loaders below take it as it is
        report = zerogpu.reporter(progress)
        report(0.0, "Reading the audio")
        code = None if checked.main.english_only else checked.language
        recordings, notes = _read_files(files, code)
        rows = batch_mode.cut_rows(recordings)
        if len(rows.names) > MAX_BATCH_ROWS:
            raise CompareError(
                f"Batch mode takes up to {MAX_BATCH_ROWS} pieces of 30 s; these files make "
                f"{len(rows.names)}. Use fewer or shorter files."
            )
        result = zerogpu.on_device_batch(rows, list(sizes), checked, progress)
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


BATCH_COLUMNS = ["Clip", "Batched baseline", "Batched speculative", "Identical"]


def render_batch(result: Mapping[str, Any]) -> str:
    """One line per batch size: both times, the speed-up, acceptance and the row checks."""
    head = (
        "<tr><th>Batch size</th><th>Batched baseline</th><th>Batched speculative</th>"
        "<th>Speed-up</th><th>Acceptance</th><th>Identical rows</th>"
        "<th>Batched baseline = batch of one</th></tr>"
    )
    lines = []
    for e in result["sweep"]:
        same = e["n_identical_rows"] == e["n_rows"]
        rows_badge = badge(
            f"{e['n_identical_rows']}/{e['n_rows']}", "#16a34a" if same else "#dc2626"
        )
        lines.append(
            f"<tr><td>{e['batch_size']}</td><td>{e['baseline_s']:.2f} s</td>"
            f"<td>{e['speculative_s']:.2f} s</td><td><b>{e['speedup']:.2f}×</b></td>"
            f"<td>{e['acceptance_rate']:.0%}</td><td>{rows_badge}</td>"
            f"<td>{e['batched_baseline_equals_batch_of_one'] or '–'}</td></tr>"
        )
    pair = html.escape(f"{result['main']} + {result['assistant']}")
    return (
        f"<p><b>{pair}</b>, greedy, medians of the timed repeats after a warm-up.</p>"
        f"<table>{head}{''.join(lines)}</table>"
    )


def batch_rows_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    """Every row of the largest batch size: both transcripts, and whether the tokens match;
    then each recording cut into pieces, stitched back together as the ASR pipeline does."""
    rows = result["sweep"][-1]["rows"]
    rows += [r | {"clip": f"{r['clip']} (pieces stitched)"} for r in result["recordings"]]
    return pd.DataFrame(
        [
            [
                r["clip"],
                r["baseline_text"],
                r["speculative_text"],
                "yes" if r["identical"] else f"no, from token {r.get('first_divergence')}",
            ]
            for r in rows
        ],
        columns=BATCH_COLUMNS,
    )


def batch_chart_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    """Speed-up against batch size: this run, and the paper's A100 figures for reference."""
    points = [("this run", e["batch_size"], e["speedup"]) for e in result["sweep"]]
    points += [("Distil-Whisper paper, A100", n, x) for n, x in batch_mode.PAPER_A100.items()]
    return pd.DataFrame(points, columns=["series", "batch size", "speed-up"])
