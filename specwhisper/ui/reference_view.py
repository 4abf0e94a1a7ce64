"""The reference column, as HTML: faster-whisper's time and tokens/s, its transcript, whether it
equals the baseline's (a word diff where not), the WER of every column against an example's
reference text, and the sentence that it is another engine, shown for context. Reads the
compare JSON's `reference`; runs and times nothing."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import gradio as gr

from specwhisper.scoring import word_error_rate
from specwhisper.ui.verdict import figures_table

MAX_CHANGES = 12  # word changes listed; the rest are counted


def reference_outputs(result: Mapping[str, Any], example_text: str = "") -> tuple[gr.Column, str]:
    """The column's box, shown only with a reference (an empty column would still take a third
    of the row), and its HTML."""
    rendered = render_reference(result, example_text)
    return gr.Column(visible=bool(rendered)), rendered


def render_reference(result: Mapping[str, Any], example_text: str = "") -> str:
    """The reference column ("" when no reference was asked for). `example_text` is what is
    said in an example clip, for the WER line ("" for other audio)."""
    ref = result.get("reference")
    if not ref:
        return ""
    title = f"{html.escape(ref['engine'])} ({html.escape(ref['compute_type'])})"
    if not ref["available"]:
        return _box(title, "", f"<p>{html.escape(ref['note'])}</p>")
    what = (
        f"{ref['weights']}, CTranslate2 {ref['ct2_compute_type']}, {ref['threads']} "
        f"thread{'s' if ref['threads'] != 1 else ''}; greedy, no timestamps"
    )
    runs = ", ".join(f"{t:.3f}" for t in ref["times_s"])
    spec_s = result["speculative"]["time_s"]
    rows = [
        ("Generation time", f"{ref['time_s']:.3f} s", f"{ref['timing']}; runs: {runs} s"),
        ("Tokens generated", str(ref["n_tokens"]), ""),
        ("Tokens/s", f"{ref['tokens_per_s']:.1f}", ""),
        ("Against the baseline", f"<b>{ref['speedup']:.2f}×</b>", "baseline time / its time"),
        (
            "Speculative against it",
            f"<b>{ref['time_s'] / spec_s:.2f}×</b>" if spec_s else "n/a",
            "its time / speculative time (above 1: the speculative column is faster)",
        ),
    ]
    body = (
        f'<p style="font-size: 1.1em; margin: 10px 0">'
        f"{html.escape(ref['text']) or '<i>(empty)</i>'}</p>"
        f'<div style="margin-bottom: 8px">{_agreement(ref)}</div>'
        + figures_table(rows)
        + _wer_line(result, example_text)
        + f'<p style="opacity: 0.75; font-size: 0.9em; margin-top: 8px">'
        f"{html.escape(ref['note'])}</p>"
    )
    return _box(title, html.escape(what), body)


def _agreement(ref: Mapping[str, Any]) -> str:
    """Equal to the baseline (token ids, text, or after normalizing), or the word changes."""
    if ref["identical"]:
        return "<b>Same token ids as the baseline.</b>"
    if ref["same_text"]:
        return "<b>Same text as the baseline</b> (other token ids)."
    changes = ref["diff"]
    shown = "".join(
        "<li>"
        + (
            f'<del style="background: #fecaca; color: #7f1d1d">{html.escape(c["baseline"])}</del>'
            if c["baseline"]
            else ""
        )
        + (" → " if c["baseline"] and c["reference"] else "")
        + (
            f'<ins style="background: #bbf7d0; color: #14532d">{html.escape(c["reference"])}</ins>'
            if c["reference"]
            else ""
        )
        + "</li>"
        for c in changes[:MAX_CHANGES]
    )
    more = f"<li>… and {len(changes) - MAX_CHANGES} more</li>" if len(changes) > MAX_CHANGES else ""
    normalized = (
        "the same words after normalizing (case, punctuation, spelling)"
        if ref["same_normalized_text"]
        else "different words"
    )
    return (
        f"<b>Differs from the baseline</b>: {normalized}; baseline → faster-whisper:"
        f'<ul style="margin: 4px 0">{shown}{more}</ul>'
    )


def _wer_line(result: Mapping[str, Any], example_text: str) -> str:
    """The WER of each column against the example's reference text ("" for other audio)."""
    if not example_text.strip():
        return ""
    language = result["reference"].get("language") or result.get("language")
    language = None if language == "auto" else language
    scores = []
    for name, text in (
        ("baseline", result["baseline"]["text"]),
        ("speculative", result["speculative"]["text"]),
        ("faster-whisper", result["reference"]["text"]),
    ):
        error_rate = word_error_rate(example_text, text, language)
        if error_rate is not None:
            scores.append(f"{name} {100 * error_rate:.1f}%")
    if not scores:
        return ""
    return (
        '<div style="margin-top: 8px">WER against the example\'s reference text: '
        + ", ".join(scores)
        + "</div>"
    )


def _box(title: str, what: str, body: str) -> str:
    return (
        '<div style="border: 1px dashed rgba(128, 128, 128, 0.6); border-radius: 8px; '
        'padding: 12px">'
        f'<div style="font-size: 1.3em; font-weight: 700">Reference: {title}</div>'
        + (f'<div style="opacity: 0.7; font-size: 0.9em">{what}</div>' if what else "")
        + body
        + "</div>"
    )
