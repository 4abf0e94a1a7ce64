"""The page's loading under ZeroGPU, on the CPU.

ZeroGPU runs the `spaces.GPU` function in a worker process forked from the server's; what the
worker loads is lost with it, and only the server's own memory carries over to the next worker.
Here every call of the page's device part (`specwhisper.ui.device.on_device`) runs in a fresh
forked child, the strictest case: the second request for a pair must load nothing, and neither
must the first request for the default pair once the app has preloaded it. Tiny random
checkpoints keep it quick.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specwhisper import checkpoints, compare, loading
from specwhisper.audio import load_audio
from specwhisper.compare import CompareRequest
from specwhisper.ui import zerogpu
from specwhisper.ui.choices import default_pair
from specwhisper.ui.handlers import run_compare
from specwhisper.ui.startup import preload_default_pair, preload_wanted

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SPANISH = Path(__file__).resolve().parents[1] / "examples" / "es_asterisk_priv-introsaved.wav"
CHILD_TIMEOUT_S = 300


def in_a_fork(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` run in a child forked at each call, as ZeroGPU runs a worker: the arguments are
    the parent's memory, the result comes back pickled, the child's memory is then gone."""
    context = multiprocessing.get_context("fork")

    def call(*args: Any) -> Any:
        receive, send = context.Pipe(duplex=False)

        def child() -> None:
            try:
                send.send((True, fn(*args)))
            except BaseException:
                send.send((False, traceback.format_exc()))

        process = context.Process(target=child, daemon=True)
        process.start()
        try:
            assert receive.poll(CHILD_TIMEOUT_S), "the forked call did not answer"
            ok, value = receive.recv()
        finally:
            process.join(10)
            if process.is_alive():
                process.kill()
        assert ok, value
        return value

    return call


@pytest.fixture
def forked_app(app_models, use_models, tmp_path, monkeypatch):
    """The app with its device part in a fresh fork per call, an empty model cache, and a models
    folder holding two tiny checkpoints (the first is then the CPU default main)."""
    for name in ("tiny-random-a", "tiny-random-b"):
        (tmp_path / name).symlink_to(app_models / name, target_is_directory=True)
    use_models(tmp_path)
    monkeypatch.setattr(zerogpu, "on_device", in_a_fork(zerogpu.on_device))
    loading.CACHE.clear()
    yield
    loading.CACHE.clear()


def compare_in_fork(assistant: str) -> tuple[dict[str, Any], float]:
    """One request through the page's API handler; also the seconds the server process (this
    one) spent loading for it."""
    before = loading.CACHE.total_load_s
    result = run_compare(str(SPANISH), "auto", "transcribe", "tiny-random-a", assistant, repeats=1)
    return result, loading.CACHE.total_load_s - before


def test_second_request_loads_nothing(forked_app):
    first, loaded_here = compare_in_fork("tiny-random-b")
    assert first["identical"] is True
    assert loaded_here > 0  # the server process loaded the pair ...
    assert first["load_time_s"] == round(loaded_here, 3)  # ... and the worker nothing more

    second, loaded_here = compare_in_fork("tiny-random-b")
    assert loaded_here == 0
    assert second["load_time_s"] == 0  # a new worker, and still nothing to load
    assert second["baseline"]["token_ids"] == first["baseline"]["token_ids"]


def test_preloaded_default_pair_loads_nothing_on_the_first_request(forked_app):
    assert default_pair() == ("tiny-random-a (local)", checkpoints.SELF_INT8)
    preload_default_pair()
    result, loaded_here = compare_in_fork(checkpoints.SELF_INT8)
    assert loaded_here == 0 and result["load_time_s"] == 0
    assert result["identical"] is True


def test_gpu_reservation_counts_loading(forked_app):
    req = CompareRequest(main="tiny-random-a", assistant="tiny-random-b", repeats=1)
    samples = load_audio(SPANISH).samples
    main, assistant, load_s = compare.load_pair(req)
    assert load_s > 0
    duration_s = len(samples) / 16_000
    runs_s = 0.2 * (req.repeats + 1) * duration_s  # 2 x (repeats + 1) runs at 10x real time
    assert zerogpu.gpu_seconds(samples, req) >= int(2 * load_s + runs_s)


def test_only_the_app_preloads_at_import(monkeypatch):
    monkeypatch.delenv("SPECWHISPER_PRELOAD", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert preload_wanted("app") is False  # tests and tools importing app load nothing
    assert preload_wanted("__main__") is True  # python app.py
    monkeypatch.setenv("SPACE_ID", "someone/specwhisper")
    assert preload_wanted("app") is True  # on a Space, however it is started
    monkeypatch.setenv("SPECWHISPER_PRELOAD", "0")
    assert preload_wanted("__main__") is False
    monkeypatch.setenv("SPECWHISPER_PRELOAD", "1")
    monkeypatch.delenv("SPACE_ID")
    assert preload_wanted("app") is True


def test_the_stop_wrapper_keeps_the_forked_path_working(forked_app):
    """The page's handlers are awaited through stops_when_gone, whose stop flag the forked
    worker never sees (it stops with the GPU call instead); a request still runs whole there."""
    import asyncio

    from specwhisper.ui.stopping import stops_when_gone

    request = (str(SPANISH), "auto", "transcribe", "tiny-random-a", "tiny-random-b")
    result = asyncio.run(stops_when_gone(run_compare)(*request, repeats=1))
    assert result["identical"] is True and result["baseline"]["token_ids"]
