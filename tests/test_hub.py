"""The Hub as the app meets it without HF_HUB_OFFLINE: one short check at start-up decides
whether Hub checkpoints are offered. An unreachable Hub (here, a closed loopback port as
HF_ENDPOINT) lists only local folders and Hub ids already in the local cache, a pick that
cannot load is one sentence with no server path, and the pair already loaded stays loaded.

Loopback only: no test here sends a packet off this machine.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from test_loading import REVISION, seed_hub_cache

from specwhisper import compare, hub, loading, request_check
from specwhisper.checkpoints import CheckpointError

CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there
CPU = torch.device("cpu")


@pytest.fixture
def online(monkeypatch, tmp_path) -> Path:
    """HF_HUB_OFFLINE unset, an empty Hugging Face cache, and a fresh Hub check; returns the
    cache folder."""
    for name in ("HF_HUB_OFFLINE", "SPECWHISPER_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    hub.forget_hub_check()
    yield cache
    hub.forget_hub_check()


@pytest.fixture
def unreachable(online, monkeypatch) -> Path:
    monkeypatch.setenv("HF_ENDPOINT", CLOSED)
    return online


class Recorder(http.server.BaseHTTPRequestHandler):
    """A loopback stand-in for the Hub's front door: answers HEAD with `status`."""

    status = 200
    seen: list[str] = []

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(self.path)
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def hub_server(online, monkeypatch) -> Iterator[type[Recorder]]:
    handler = type("Handler", (Recorder,), {"seen": [], "status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}/")
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


# --- the check ----------------------------------------------------------------------------------


def test_a_closed_port_is_unreachable_decided_once_and_quickly(unreachable):
    start = time.perf_counter()
    assert hub.hub_offline()
    assert time.perf_counter() - start < hub.HUB_CHECK_TIMEOUT_S + 1.0
    start = time.perf_counter()
    assert not hub.hub_reachable() and hub.hub_offline()  # the first answer stays
    assert time.perf_counter() - start < 0.05


def test_an_answering_endpoint_is_reachable_and_asked_once(hub_server):
    assert not hub.hub_offline()
    assert not hub.hub_offline()
    assert hub_server.seen == ["/"]


def test_a_failing_hub_counts_as_unreachable(hub_server):
    hub_server.status = 503
    assert hub.hub_offline()


def test_offline_mode_wins_and_asks_nothing(hub_server, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.hub_offline()
    assert hub_server.seen == []


# --- what an unreachable Hub offers, and a pick that fails ----------------------------------


def test_an_unreachable_hub_offers_local_and_cached_checkpoints_only(
    unreachable, tiny_models, use_models
):
    from specwhisper.ui import choices

    use_models(tiny_models)
    seed_hub_cache(unreachable, "openai/whisper-tiny", tiny_models / "tiny-random-a")
    start = choices.form_start()
    assert start.mains == ["tiny-random-a (local)", "tiny-random-b (local)", "openai/whisper-tiny"]
    offered = set(start.mains) | set(start.assistants)
    for main in start.mains:
        offered |= set(choices.main_settings(main)[0])
    hub_ids = {c for c in offered if "/" in c}
    assert hub_ids == {"openai/whisper-tiny"}, "an uncached Hub checkpoint is offered"
    assert start.notice == choices.HUB_UNREACHABLE


def test_a_failing_pick_keeps_the_loaded_pair_and_names_no_server_path(
    unreachable, tiny_models, use_models
):
    use_models(tiny_models)
    cache = loading.ModelCache()
    default = request_check.CompareRequest(main="tiny-random-a", assistant="tiny-random-b")
    main, assistant, _ = compare.load_pair(default, cache=cache)

    uncached = request_check.CompareRequest(main="openai/whisper-small", assistant="self-int8")
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as refusal:
        compare.load_pair(uncached, cache=cache)
    assert time.perf_counter() - start < 1.0, "the pick waited for the Hub"
    message = str(refusal.value)
    assert "did not answer" in message and "not in the server's Hugging Face cache" in message
    assert str(unreachable) not in message and "/hf-cache" not in message

    # a cached snapshot that turns out to be broken: the load itself fails
    broken = seed_hub_cache(unreachable, "openai/whisper-base", tiny_models / "tiny-random-b")
    (broken / "model.safetensors").unlink()
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError) as failure:
        compare.load_pair(
            request_check.CompareRequest(main="openai/whisper-base", assistant="self-int8"),
            cache=cache,
        )
    message = str(failure.value)
    assert message.startswith("Could not load the Hub checkpoint 'openai/whisper-base'")
    assert str(unreachable) not in message and REVISION not in message, message

    again, again_assistant, load_s = compare.load_pair(default, cache=cache)
    assert (again, again_assistant, load_s) == (main, assistant, 0.0), "the loaded pair was lost"
