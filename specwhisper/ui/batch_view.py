"""Batch mode's results drawn: a line per batch size, every row's transcripts, and the speed-up
against batch size beside the Distil-Whisper paper's figures. Rendering only: the run is
batch.run_batch's."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import pandas as pd

from specwhisper import batch
from specwhisper.ui.verdict import badge

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
    points += [("Distil-Whisper paper, A100", n, x) for n, x in batch.PAPER_A100.items()]
    return pd.DataFrame(points, columns=["series", "batch size", "speed-up"])
