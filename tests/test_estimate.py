"""The estimate said before a run: this machine's measured speed, applied to a clip."""

from __future__ import annotations

import pytest

from specwhisper.ui.estimate import (
    Speed,
    SpeedLog,
    about,
    estimate_line,
    estimate_s,
    measured_speed,
    n_decodes,
    n_windows,
)


def run_result(duration_s: float = 20.0, repeats: int = 3) -> dict:
    """Both columns' last runs: 2 s and 1 s, each with a 0.5 s encoder."""
    side = {"time_s": 2.0, "times_s": [2.0] * repeats, "encoder_s": 0.5}
    fast = side | {"time_s": 1.0, "times_s": [1.0] * repeats}
    return {"duration_s": duration_s, "repeats": repeats, "baseline": side, "speculative": fast}


def test_windows_and_decodes():
    assert [n_windows(s) for s in (0.5, 30.0, 30.1, 95.0)] == [1, 1, 2, 4]
    assert n_decodes(3) == 8  # a warm-up and 3 timed runs, per column


def test_speed_is_measured_from_a_finished_run():
    # 8 decodes in 12 s: 3 s per pass of both columns, a third of it the two encoders
    speed = measured_speed(run_result(), wall_s=12.0)
    assert speed.window_s == pytest.approx(1.0)
    assert speed.audio_s == pytest.approx(2.0 / 20.0)


def test_a_measured_speed_predicts_its_own_run():
    speed = measured_speed(run_result(), wall_s=12.0)
    assert estimate_s(20.0, 3, speed) == pytest.approx(12.0)


def test_longer_clips_and_more_repeats_take_longer():
    speed = Speed(window_s=1.0, audio_s=0.1)
    assert estimate_s(10.0, 3, speed) == pytest.approx(4 * (1.0 + 1.0))
    assert estimate_s(28.0, 3, speed) > estimate_s(10.0, 3, speed)
    assert estimate_s(28.0, 5, speed) > estimate_s(28.0, 3, speed)
    # a second window adds its encoder
    assert estimate_s(31.0, 1, speed) == pytest.approx(2 * (2 * 1.0 + 3.1))


def test_no_estimate_from_a_run_that_cannot_tell():
    assert measured_speed(run_result(duration_s=0.0), wall_s=12.0) is None
    assert measured_speed(run_result(), wall_s=0.0) is None


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0.2, "about 1 s"),
        (4.4, "about 4 s"),
        (38.0, "about 40 s"),
        (62.0, "about 60 s"),
        (100.0, "about 2 min"),
        (600.0, "about 10 min"),
    ],
)
def test_about(seconds, said):
    assert about(seconds) == said


def test_log_keeps_the_median_of_the_latest_runs_per_main():
    log = SpeedLog(keep=3)
    assert log.speed("whisper-base") is None
    for window_s in (9.0, 1.0, 2.0, 3.0):  # the first falls out
        log.add("whisper-base", Speed(window_s=window_s, audio_s=0.1))
    assert log.speed("whisper-base") == Speed(window_s=2.0, audio_s=0.1)
    assert log.speed("whisper-tiny.en") is None


def test_the_line_before_a_run():
    line = estimate_line(27.8, 3, "whisper-base", Speed(window_s=1.0, audio_s=0.1))
    assert "27.8 s of audio, 3 timed repeats per column" in line
    assert "takes about 15 s on this machine" in line  # 4 passes of both x (1 + 2.78) s
    first = estimate_line(27.8, 1, "whisper-base", None)
    assert "no estimate" in first and "1 timed repeat per column" in first
    assert estimate_line(None, 3, "whisper-base", None) == ""
