"""How long Compare will take on this machine, said before the run starts: from the clip's
length, the timed repeats and this machine's speed as measured by the runs it has completed.

A comparison decodes the clip 2 x (1 + repeats) times (a warm-up and the timed repeats, for
each column). One pass of both columns costs about a fixed time per 30 s window (the encoder)
plus a time per second of audio (the decoder: tokens follow the speech). Both are measured from
each finished run and kept per main checkpoint, since a larger main is slower on every count.
Before any run of a main, there is no estimate: the page says so rather than guess.

Pure functions plus one small thread-safe log; it runs no model and times nothing itself.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

WINDOW_S = 30.0  # Whisper reads audio in 30 s windows, and the encoder runs once per window
KEEP_RUNS = 5  # the speed is the median of this many latest runs of a main


@dataclass(frozen=True)
class Speed:
    """This machine's speed for one main checkpoint: one pass of both columns over a clip."""

    window_s: float  # the encoders of both columns, per 30 s window
    audio_s: float  # everything else, per second of audio


def n_windows(duration_s: float) -> int:
    """The 30 s windows Whisper reads for a clip of this length."""
    return max(1, math.ceil(duration_s / WINDOW_S))


def n_decodes(repeats: int) -> int:
    """Decodes of the clip per comparison: per column one warm-up and `repeats` timed runs."""
    return 2 * (1 + repeats)


def measured_speed(result: Mapping[str, Any], wall_s: float) -> Speed | None:
    """The speed a finished comparison shows: `wall_s`, its time in the handler less loading,
    spread over its decodes, then cut into the encoders' part per window and the rest per
    second of audio. None when the result cannot tell (no audio, no time)."""
    duration_s = result.get("duration_s") or 0.0
    repeats = result.get("repeats") or 1
    if duration_s <= 0 or wall_s <= 0:
        return None
    pair_s = 2 * wall_s / n_decodes(repeats)  # one pass of both columns
    window_s = encoder_share(result) * pair_s / n_windows(duration_s)
    rest_s = pair_s - window_s * n_windows(duration_s)
    return Speed(window_s=window_s, audio_s=rest_s / duration_s)


def encoder_share(result: Mapping[str, Any]) -> float:
    """The encoders' share of both columns' last timed runs (where the parts were metered)."""
    encoders_s = total_s = 0.0
    for side in (result["baseline"], result["speculative"]):
        times = side.get("times_s") or [side.get("time_s", 0.0)]
        encoders_s += side.get("encoder_s", 0.0)
        total_s += times[-1]
    return min(encoders_s / total_s, 1.0) if total_s > 0 else 0.0


def estimate_s(duration_s: float, repeats: int, speed: Speed) -> float:
    """Seconds a comparison of a clip this long should take, models already loaded."""
    pair_s = speed.window_s * n_windows(duration_s) + speed.audio_s * duration_s
    return pair_s * n_decodes(repeats) / 2


def about(seconds: float) -> str:
    """A duration as a person says it: "about 5 s", "about 40 s", "about 2 min"."""
    if seconds < 10:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90:
        return f"about {5 * round(seconds / 5)} s"
    return f"about {round(seconds / 60)} min"


class SpeedLog:
    """The speeds of the latest runs, per main checkpoint; read and written from the server's
    threads."""

    def __init__(self, keep: int = KEEP_RUNS):
        self._runs: defaultdict[str, deque[Speed]] = defaultdict(lambda: deque(maxlen=keep))
        self._lock = threading.Lock()

    def add(self, main: str, speed: Speed) -> None:
        with self._lock:
            self._runs[main].append(speed)

    def speed(self, main: str) -> Speed | None:
        """The median of the latest runs of `main`; None before its first run."""
        with self._lock:
            runs = list(self._runs.get(main, ()))
        if not runs:
            return None
        return Speed(
            window_s=statistics.median(s.window_s for s in runs),
            audio_s=statistics.median(s.audio_s for s in runs),
        )


def estimate_line(duration_s: float | None, repeats: int, main: str, speed: Speed | None) -> str:
    """What the page says above the result before Compare is pressed."""
    if not duration_s:
        return ""
    clip = f"{duration_s:.1f} s of audio, {repeats} timed repeat{'s' * (repeats != 1)} per column"
    if speed is None:
        return (
            f"Compare on this clip ({clip}): no run of {main} has been timed on this machine "
            "yet, so there is no estimate; the first run measures it."
        )
    return (
        f"Compare on this clip ({clip}) takes {about(estimate_s(duration_s, repeats, speed))} "
        "on this machine, from its latest runs (plus loading, if the pair is not loaded yet)."
    )
