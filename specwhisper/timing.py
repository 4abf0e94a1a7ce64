"""Honest timing: warm-up first, device sync around the timed region, alternating repeats, medians.

Nothing here knows about Whisper; it times callables. Speed goals live in the benchmark, never
in tests.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued device work, so a timer brackets what actually ran."""
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: torch.device | str | None = None) -> tuple[Any, float]:
    """Run fn once; return (its result, wall seconds between two device syncs)."""
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return result, time.perf_counter() - start


@dataclass(frozen=True)
class Timings:
    """Repeated timings of one callable; warm-up runs are not in `times_s`."""

    times_s: tuple[float, ...]  # one per timed repeat, in run order
    result: Any  # the last run's result

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)


def alternate(
    runs: dict[str, Callable[[], Any]],
    *,
    repeats: int = 3,
    warmup: int = 1,
    device: torch.device | str | None = None,
    on_repeat: Callable[[int, int, str], None] | None = None,
) -> dict[str, Timings]:
    """Time several callables in turn, so that drift (thermal, other tenants) hits all of them.

    Each callable is first run `warmup` times untimed. Then for each repeat, every callable runs
    once; the order flips on odd repeats (A B, B A, A B, ...) so neither is always first.
    `on_repeat(i, n, name)` is called before each timed run, for progress bars.
    """
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    for fn in runs.values():
        for _ in range(warmup):
            fn()
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    results: dict[str, Any] = {}
    for i in range(repeats):
        for name in names if i % 2 == 0 else reversed(names):
            if on_repeat is not None:
                on_repeat(i, repeats, name)
            results[name], seconds = timed(runs[name], device)
            times[name].append(seconds)
    return {name: Timings(tuple(times[name]), results[name]) for name in names}
