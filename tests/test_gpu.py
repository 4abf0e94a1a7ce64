"""Everything that runs models, once on a CUDA device: tiny random checkpoints (tests/tiny.py: two
seq2seq models and a decoder-only assistant), synthetic audio, in float32 and float16.

`pytest -m gpu` runs this file; without CUDA every test is skipped with the reason. It checks
that nothing meets a device or dtype error (models, features, drafts, caches and timers all on
the GPU), that float32 keeps the baseline's tokens exactly, and prints, without asserting,
whether float16 did (a verify pass over several tokens can round a near tie apart).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from specwhisper import alignment, batch_mode, checkpoints, compare, decoding, loading, timing
from specwhisper.audio import SAMPLE_RATE
from specwhisper.request_check import CompareRequest

DEVICE = torch.device("cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        DEVICE.type == "cuda" and not torch.cuda.is_available(),
        reason="needs a CUDA device; torch sees none here",
    ),
]
DTYPES = {"float32": torch.float32, "float16": torch.float16}
MAX_NEW_TOKENS = 40  # a random decoder seldom ends: enough tokens for many draft steps
ASSISTANTS = {"seq2seq": "tiny-random-b", "decoder-only": "tiny-random-decoder"}
DECODINGS = {
    "greedy": {},
    "sampling": {"temperature": 0.7, "seed": 3},
    "fallback": {"fallback": True},
}


def speech_like(duration_s: float, seed: int = 0) -> np.ndarray:
    """Float32 mono 16 kHz: a wandering tone in noise, loud enough to give varied features."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(duration_s * SAMPLE_RATE)) / SAMPLE_RATE
    tone = np.sin(2 * np.pi * (180 + 60 * np.sin(2 * np.pi * 0.3 * t)) * t)
    return (0.3 * tone + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.fixture(scope="module", params=list(DTYPES))
def loaded(request, tiny_models: Path) -> tuple[str, loading.Loaded, dict[str, loading.Loaded]]:
    """(dtype name, the main, each assistant kind) on the device, in one precision."""
    dtype = DTYPES[request.param]
    cache = loading.ModelCache(capacity=8)

    def load(name: str) -> loading.Loaded:
        return cache.get(checkpoints._local_checkpoint(tiny_models / name), DEVICE, dtype)

    return request.param, load("tiny-random-a"), {k: load(v) for k, v in ASSISTANTS.items()}


def record(dtype: str, what: str, comparison: compare.Comparison) -> None:
    """float32 must keep the baseline's tokens; float16's outcome is printed."""
    if dtype == "float32":
        assert comparison.identical, f"{what}: first divergence {comparison.first_divergence}"
    else:
        print(f"{dtype} {what}: identical={comparison.identical}", flush=True)


def on_device(comparison: compare.Comparison) -> None:
    assert comparison.setup.device.startswith(DEVICE.type)
    assert comparison.baseline.n_tokens > 0 and comparison.baseline_times_s


@pytest.mark.parametrize("decoding_name", list(DECODINGS))
@pytest.mark.parametrize("kind", list(ASSISTANTS))
@pytest.mark.parametrize("engine", ["specwhisper", "transformers"])
def test_compare_loaded(loaded, engine, kind, decoding_name):
    dtype, main, assistants = loaded
    settings = DECODINGS[decoding_name]
    problem = decoding.options_problem(engine, "adaptive", 5, settings.get("fallback", False))
    if problem:
        pytest.skip(f"refused before any run: {problem}")
    req = CompareRequest(
        main="tiny-random-a", assistant=ASSISTANTS[kind], engine=engine, repeats=1, **settings
    )
    ours, _ = compare.compare_loaded(
        speech_like(6.0), req, main, assistants[kind], language="en", max_new_tokens=MAX_NEW_TOKENS
    )
    on_device(ours)
    if decoding_name == "greedy":
        record(dtype, f"{engine}, {kind} assistant", ours)


@pytest.mark.parametrize("kind", list(ASSISTANTS))
def test_long_form_with_timestamps(loaded, kind):
    dtype, main, assistants = loaded
    req = CompareRequest(main="tiny-random-a", assistant=ASSISTANTS[kind], timestamps=True)
    req = CompareRequest(**{**vars(req), "repeats": 1})
    ours, _ = compare.compare_loaded(
        speech_like(45.0, seed=1), req, main, assistants[kind], language="en"
    )
    on_device(ours)
    assert ours.baseline.n_windows >= 2  # 45 s: at least two 30 s windows
    record(dtype, f"45 s with timestamps, {kind} assistant", ours)


def test_batch_sweep(loaded):
    dtype, main, assistants = loaded
    recordings = [(f"clip{i}.wav", speech_like(d, seed=i), "en") for i, d in enumerate([4, 9, 14])]
    recordings.append(("long.wav", speech_like(45.0, seed=9), "en"))
    rows = batch_mode.cut_rows(recordings)
    results = list(
        batch_mode.sweep(
            main, assistants["seq2seq"], rows, [1, 2, 4], repeats=1, max_new_tokens=MAX_NEW_TOKENS
        )
    )
    assert [r.batch_size for r in results] == [1, 2, 4]
    for result in results:
        if dtype == "float32":
            assert result.n_identical == len(rows.names), f"batch size {result.batch_size}"
        else:
            n = f"{result.n_identical}/{len(rows.names)}"
            print(f"{dtype} batch size {result.batch_size}: {n} rows identical", flush=True)
    assert batch_mode.sweep_json(main, rows, results)  # the page's JSON, stitched back per file


def test_alignment(loaded):
    dtype, main, assistants = loaded
    samples = speech_like(6.0, seed=2)
    req = CompareRequest(main="tiny-random-a", assistant="tiny-random-b", repeats=1)
    ours, _ = compare.compare_loaded(
        samples, req, main, assistants["seq2seq"], language="en", max_new_tokens=MAX_NEW_TOKENS
    )
    kernel = main.model.model.config._attn_implementation
    features = decoding.prepare_features(main, samples)
    opts = compare.decode_options(req, main.checkpoint, "en", MAX_NEW_TOKENS)
    times = alignment.align_tokens(main, features, opts, ours.baseline.token_ids)
    assert times.note not in (alignment.FAILED, alignment.OUT_OF_MEMORY)
    if times.start_s:
        assert len(times.start_s) == len(ours.baseline.token_ids)
        assert all(a <= b for a, b in zip(times.start_s, times.start_s[1:], strict=False))
    else:
        print(f"{dtype} alignment: {times.note}", flush=True)
    assert main.model.model.config._attn_implementation == kernel  # back to its own kernel


def test_timed_waits_for_the_device():
    """timing.timed brackets its call with device syncs: a kernel that sleeps on the GPU is
    timed whole, though launching it returns at once."""
    cycles = 200_000_000  # about 0.1 s at 2 GHz
    torch.cuda._sleep(1_000)  # warm-up
    timing.sync(DEVICE)
    start = time.perf_counter()
    torch.cuda._sleep(cycles)
    launch_s = time.perf_counter() - start
    _, elapsed_s = timing.timed(lambda: torch.cuda._sleep(cycles), DEVICE)
    assert elapsed_s > 0.02 and launch_s < elapsed_s / 2
