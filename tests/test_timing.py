"""Honest timing: warm-ups run first and are never timed, repeats alternate their order, the
meter counts only the passes it is meant to. Behaviour only: no speed is asserted here."""

from __future__ import annotations

import time

import pytest
import torch

from specwhisper.timing import ForwardMeter, Timings, alternate, device_name, timed


def _recorder(log: list[str], name: str):
    def run() -> str:
        log.append(name)
        return f"{name}{len(log)}"

    return run


def test_repeats_alternate_their_order_after_the_warm_ups():
    log: list[str] = []
    runs = {"a": _recorder(log, "a"), "b": _recorder(log, "b")}

    timings = alternate(runs, repeats=4, warmup=2)

    assert log[:4] == ["a", "a", "b", "b"]  # every warm-up before the first timed run
    assert log[4:] == ["a", "b", "b", "a", "a", "b", "b", "a"]  # A B, B A, A B, B A
    assert set(timings) == {"a", "b"}


def test_warm_ups_are_absent_from_the_timed_list():
    log: list[str] = []
    progress: list[tuple[int, int, str]] = []

    timings = alternate(
        {"a": _recorder(log, "a")}, repeats=3, warmup=5, on_repeat=lambda *p: progress.append(p)
    )

    assert len(log) == 8 and len(timings["a"].times_s) == 3
    assert progress == [(0, 3, "a"), (1, 3, "a"), (2, 3, "a")]  # timed runs only
    assert timings["a"].result == "a8"  # the last run's result
    assert all(t >= 0 for t in timings["a"].times_s)


def test_no_warm_up_and_at_least_one_repeat():
    log: list[str] = []
    assert len(alternate({"a": _recorder(log, "a")}, repeats=1, warmup=0)["a"].times_s) == 1
    assert log == ["a"]
    with pytest.raises(ValueError, match="at least 1"):
        alternate({"a": _recorder(log, "a")}, repeats=0)


def test_timed_brackets_the_call():
    result, seconds = timed(lambda: time.sleep(0.02) or "done")
    assert result == "done"
    assert 0.02 <= seconds < 5  # at least the sleep; the bound only catches a broken clock


def test_median_of_the_repeats():
    assert Timings((3.0, 1.0, 2.0), None).median_s == 2.0
    assert Timings((1.0, 4.0), None).median_s == 2.5


def test_the_meter_counts_passes_and_hides_paused_ones():
    layer = torch.nn.Linear(4, 4)
    x = torch.ones(1, 4)
    with ForwardMeter(layer) as meter:
        layer(x)
        with meter.paused():  # a main model drafting for itself: the draft's passes
            layer(x)
            layer(x)
        layer(x)
    assert meter.n_calls == 2
    assert meter.total_s > 0
    layer(x)  # after the block its hooks are gone
    assert meter.n_calls == 2


def test_pauses_nest():
    layer = torch.nn.Linear(2, 2)
    with ForwardMeter(layer) as meter:
        with meter.paused():
            with meter.paused():
                layer(torch.ones(1, 2))
            layer(torch.ones(1, 2))  # still inside the outer pause
        layer(torch.ones(1, 2))
    assert meter.n_calls == 1


def test_a_cpu_device_names_its_threads():
    name = device_name(torch.device("cpu"))
    assert name.startswith("cpu (") and "thread" in name
