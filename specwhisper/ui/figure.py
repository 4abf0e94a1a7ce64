"""The audio as Whisper reads it: a log-mel spectrogram with the baseline's segments and the
30 s windows marked, and under it a strip that colours the time axis by who produced the
tokens said there (accepted draft tokens, the main model's corrections where the draft was
rejected, its own tokens). A matplotlib figure for gr.Plot; it computes no token times (see
specwhisper.alignment), it only draws the `token_times_s` of the compare JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from specwhisper import decoding
from specwhisper.audio import SAMPLE_RATE
from specwhisper.ui.tokens import ORIGINS, token_origins

SEGMENT_COLORS = ("#22c55e", "#3b82f6")  # segments alternate, so neighbours stay apart
TOKEN_S = 0.3  # a token's length when no gap between two tokens says it (a word is ~0.3 s)


def audio_figure(samples: np.ndarray, result: Mapping[str, Any]) -> Figure:
    """The audio as Whisper reads it, a log-mel spectrogram (80 bands, 10 ms hop), with the
    baseline's segments over it (timestamps on, or audio over 30 s) and the 30 s windows; with
    token times in `result`, the strip of who produced the tokens under it, else their note."""
    import librosa
    import librosa.display

    mel = librosa.feature.melspectrogram(
        y=samples, sr=SAMPLE_RATE, n_fft=400, hop_length=160, n_mels=80
    )
    spec = result["speculative"]
    times = spec.get("token_times_s")
    figure = Figure(figsize=(10, 4.3 if times else 3.2), layout="constrained")
    if times:
        ax, strip = figure.subplots(2, 1, sharex=True, height_ratios=[8, 1])
    else:
        ax = figure.add_subplot()
    librosa.display.specshow(
        librosa.power_to_db(mel, ref=np.max),
        sr=SAMPLE_RATE,
        hop_length=160,
        x_axis="time",
        y_axis="mel",
        cmap="magma",
        ax=ax,
    )
    ax.set_xlabel("time (s)")
    segments = result["baseline"].get("segments", [])
    for i, segment in enumerate(segments):
        ax.axvspan(segment["start_s"], segment["end_s"], ymin=0.9, color=SEGMENT_COLORS[i % 2])
        words = segment["text"].split()
        label = " ".join(words[:4]) + (" …" if len(words) > 4 else "")
        ax.text(
            segment["start_s"],
            0.95,
            f" {label}",
            transform=ax.get_xaxis_transform(),
            fontsize=7,
            color="white",
            va="center",
            clip_on=True,
        )
    duration_s = len(samples) / SAMPLE_RATE
    for edge_s in np.arange(decoding.WINDOW_S, duration_s, decoding.WINDOW_S):
        ax.axvline(edge_s, color="white", linestyle="--", linewidth=1)
    ax.set_title(
        f"Log-mel spectrogram with the baseline's {len(segments)} segments"
        if segments
        else "Log-mel spectrogram (turn on Timestamps to mark the segments)",
        fontsize=10,
    )
    if times:
        ax.set_xlabel("")
        spans = strip_spans(times, token_origins(spec["token_ids"], spec["steps"]), duration_s)
        draw_strip(strip, spans)
    elif spec.get("token_times_note"):
        figure.supxlabel(spec["token_times_note"], fontsize=8)
    return figure


@dataclass(frozen=True)
class Span:
    """A stretch of audio whose tokens share one origin (an ORIGINS key)."""

    start_s: float
    end_s: float
    origin: str
    n_tokens: int


def strip_spans(
    starts_s: Sequence[float], origins: Sequence[tuple[int, str]], duration_s: float
) -> list[Span]:
    """The strip's spans: each token lasts from its start to the next token's (the last one,
    for the typical gap), and neighbours of one origin merge. `origins` pairs each token with
    its origin, in the order of `starts_s`."""
    if len(starts_s) != len(origins):
        raise ValueError(f"{len(starts_s)} token times for {len(origins)} tokens")
    if not starts_s:
        return []
    gaps = np.diff(starts_s)
    typical_s = float(np.median(gaps[gaps > 0])) if np.any(gaps > 0) else TOKEN_S
    ends_s = [*starts_s[1:], min(duration_s, starts_s[-1] + typical_s)]
    spans: list[Span] = []
    for start, end, (_, origin) in zip(starts_s, ends_s, origins, strict=True):
        if spans and spans[-1].origin == origin:
            last = spans[-1]
            spans[-1] = Span(last.start_s, end, origin, last.n_tokens + 1)
        else:
            spans.append(Span(start, end, origin, 1))
    return spans


def draw_strip(ax: Axes, spans: Sequence[Span]) -> None:
    """The spans as coloured bars along the time axis, with a legend of what each colour is
    and how many tokens have it. Corrections go on top and never thinner than a few pixels:
    the alignment can give a token no width, and a rejection is what the strip is for."""
    low, high = ax.get_xlim()
    min_width_s = (high - low) / 300
    for span in sorted(spans, key=lambda s: s.origin == "correction"):
        width = span.end_s - span.start_s
        if span.origin == "correction":
            width = max(width, min_width_s)
        ax.axvspan(span.start_s, span.start_s + width, color=ORIGINS[span.origin][0], lw=0)
    ax.set_xlim(low, high)
    ax.set_yticks([])
    ax.set_ylabel("tokens", rotation=0, ha="right", va="center", fontsize=8)
    ax.set_xlabel("time (s): who produced the tokens said there (Whisper's own alignment)")
    counts: dict[str, int] = {}
    for span in spans:
        counts[span.origin] = counts.get(span.origin, 0) + span.n_tokens
    handles = [
        Patch(color=color, label=f"{label} ({counts[origin]})")
        for origin, (color, label) in ORIGINS.items()
        if origin in counts
    ]
    ax.figure.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8)
