"""The audio as Whisper reads it: a log-mel spectrogram with the baseline's segments and the
30 s windows marked. A matplotlib figure for gr.Plot; nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from specwhisper import decoding
from specwhisper.audio import SAMPLE_RATE

SEGMENT_COLORS = ("#22c55e", "#3b82f6")  # segments alternate, so neighbours stay apart


def audio_figure(samples: np.ndarray, result: Mapping[str, Any]) -> Figure:
    """The audio as Whisper reads it, a log-mel spectrogram (80 bands, 10 ms hop), with the
    baseline's segments over it (timestamps on, or audio over 30 s) and the 30 s windows."""
    import librosa
    import librosa.display

    mel = librosa.feature.melspectrogram(
        y=samples, sr=SAMPLE_RATE, n_fft=400, hop_length=160, n_mels=80
    )
    figure = Figure(figsize=(10, 3.2), layout="constrained")
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
    return figure
