"""Honest timing: warm-up first, device sync around the timed region, alternating repeats, medians,
and what the timings ran on (device, CPU model and its matrix features).

Nothing here knows about Whisper; it times callables. Speed goals live in the benchmark, never
in tests.
"""

from __future__ import annotations

import contextlib
import functools
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued device work, so a timer brackets what actually ran."""
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.synchronize()


def clock(device: torch.device | str | None = None) -> float:
    """perf_counter after a device sync: on CUDA, a read without one measures kernel launches."""
    sync(device)
    return time.perf_counter()


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


class ForwardMeter:
    """Counts and times (device-synced) the forward calls of one module while active.

    `paused()` hides calls made meanwhile: a main model drafting for itself runs the same
    decoder, and those passes are the draft's, not the main's.
    """

    def __init__(self, module: torch.nn.Module, device: torch.device | str | None = None):
        self.module, self.device = module, device
        self.n_calls, self.total_s = 0, 0.0
        self._start = 0.0
        self._paused = False
        self._handles: list[Any] = []

    def __enter__(self) -> ForwardMeter:
        self._handles = [
            self.module.register_forward_pre_hook(self._pre),
            self.module.register_forward_hook(self._post),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        was, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = was

    def _pre(self, *_: Any) -> None:
        if not self._paused:
            self.n_calls += 1
            self._start = clock(self.device)

    def _post(self, *_: Any) -> None:
        if not self._paused:
            self.total_s += clock(self.device) - self._start


# ---------------------------------------------------------------------------------------------
# Where it ran


def device_name(device: torch.device) -> str:
    """The device as every timing is labelled: GPU name, or CPU model, features and threads."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    threads = torch.get_num_threads()
    return f"cpu ({cpu_model()}; {cpu_features()}; {threads} thread{'s' if threads != 1 else ''})"


def cpu_model() -> str:
    for line in _cpuinfo():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    for line in _cpuinfo():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def has_amx() -> bool:
    """AMX-BF16 tile units (Sapphire Rapids and later): bf16 matmuls several times faster."""
    return "amx_bf16" in cpu_flags()


def has_native_bf16() -> bool:
    """bf16 dot-product instructions (AVX512-BF16) or AMX-BF16 tiles: where bf16 attention
    reads half the bytes of fp32 without paying for emulated arithmetic."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def cpu_features() -> str:
    """torch's vector level and the matrix units, e.g. "AVX2, no AMX" or "AVX512, AMX"."""
    vector = torch.backends.cpu.get_cpu_capability()
    return f"{vector}, {'AMX' if has_amx() else 'no AMX'}"


@functools.cache  # read once per process: the drafter asks at every 30 s window
def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []
