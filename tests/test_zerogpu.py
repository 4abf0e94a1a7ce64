"""The page's loading under ZeroGPU, on the CPU.

ZeroGPU runs the `spaces.GPU` function in a worker process forked from the server's; the server
process loads only the preloaded default pair (see specwhisper.ui.zerogpu), and every other pair
loads inside the call. spaces keeps an idle worker for the next call, or forks a fresh one. Here
the page's device part (`specwhisper.ui.zerogpu.on_device`) runs either in a fresh child forked at
each call, the strictest case, or in one forked child that serves every call, as a reused worker
does. Tiny random checkpoints keep it quick. tests/test_zerogpu_spaces.py runs the same with the
`spaces` package's own patching of the server process.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specwhisper import checkpoints, loading
from specwhisper.ui import zerogpu
from specwhisper.ui.choices import default_pair
from specwhisper.ui.handlers import run_compare
from specwhisper.ui.startup import preload_default_pair, preload_wanted

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SPANISH = Path(__file__).resolve().parents[1] / "examples" / "es_asterisk_priv-introsaved.wav"
CHILD_TIMEOUT_S = 300
ON_DEVICE = zerogpu.on_device  # as imported, before a test forks it


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


def in_one_worker(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` run in one child forked at the first call, which serves every later call too, as a
    worker spaces reuses: what one call loads is there for the next."""
    context = multiprocessing.get_context("fork")
    worker: dict[str, Any] = {}

    def serve(calls: Any, answers: Any) -> None:
        while True:
            args = calls.recv()
            try:
                answers.send((True, fn(*args)))
            except BaseException:
                answers.send((False, traceback.format_exc()))

    def call(*args: Any) -> Any:
        if not worker:
            to_child, calls = context.Pipe()
            answers, from_child = context.Pipe()
            process = context.Process(target=serve, args=(calls, from_child), daemon=True)
            process.start()
            worker.update(process=process, calls=to_child, answers=answers)
        worker["calls"].send(args)
        assert worker["answers"].poll(CHILD_TIMEOUT_S), "the worker did not answer"
        ok, value = worker["answers"].recv()
        assert ok, value
        return value

    call.worker = worker  # type: ignore[attr-defined]
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


def test_the_device_call_loads_a_pair_the_server_process_does_not(forked_app):
    first, loaded_here = compare_in_fork("tiny-random-b")
    assert first["identical"] is True
    assert loaded_here == 0  # the server process loaded nothing ...
    assert first["load_time_s"] > 0  # ... the worker did

    second, loaded_here = compare_in_fork("tiny-random-b")
    assert loaded_here == 0
    assert second["load_time_s"] > 0  # a fresh worker loads again
    assert second["baseline"]["token_ids"] == first["baseline"]["token_ids"]


def test_a_reused_worker_keeps_what_it_loaded(forked_app, monkeypatch):
    worker = in_one_worker(ON_DEVICE)
    monkeypatch.setattr(zerogpu, "on_device", worker)
    try:
        first, _ = compare_in_fork("tiny-random-b")
        second, loaded_here = compare_in_fork("tiny-random-b")
    finally:
        worker.worker["process"].kill()
    assert first["load_time_s"] > 0 and second["load_time_s"] == 0 and loaded_here == 0
    assert second["baseline"]["token_ids"] == first["baseline"]["token_ids"]


def test_preloaded_default_pair_loads_nothing_on_the_first_request(forked_app):
    assert default_pair() == ("tiny-random-a (local)", checkpoints.SELF_INT8)
    preload_default_pair()
    result, loaded_here = compare_in_fork(checkpoints.SELF_INT8)
    assert loaded_here == 0 and result["load_time_s"] == 0
    assert result["identical"] is True


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
