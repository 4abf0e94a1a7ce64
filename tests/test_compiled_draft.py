"""The compiled self-int8 draft step: its int8 linear op, and the eager fallback.

The op is checked by torch's own `opcheck` (schema, fake kernel, dispatch) and against fbgemm's
linear. Where no C++ compiler exists, or compiling fails, the draft runs eager and the tokens
are the baseline's. The compiled step itself (slow: inductor compiles for minutes on a busy
CPU) gives the eager step's draft tokens on a tiny random checkpoint.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from specwhisper import checkpoints, compiled_draft, decoding, drafters, int8_forward, loading
from specwhisper.decoding import DecodeOptions

CPU, FP32 = torch.device("cpu"), torch.float32

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def loaded(tiny_models):
    cache = loading.ModelCache(capacity=4)
    main = cache.get(checkpoints._local_checkpoint(tiny_models / "tiny-random-a"), CPU, FP32)
    return main, drafters.self_int8(main, cache)


def _features(main: loading.Loaded, seed: int) -> decoding.Features:
    rng = np.random.default_rng(seed)
    samples = (rng.standard_normal(16_000 * 4) * 0.2).astype(np.float32)
    return decoding.prepare_features(main, samples)


def test_the_int8_linear_op_is_fbgemms_linear(loaded):
    main, draft = loaded
    w = int8_forward.lean_weights(draft.model)
    layers, _ = compiled_draft.keyed(w)
    x = torch.randn(3, w.d_model)
    out = compiled_draft.int8_linear_op(x, layers[0].fc1)
    assert torch.equal(out, int8_forward.int8_linear(x, w.layers[0].fc1))
    assert out.shape == (3, 2 * w.d_model)  # the tiny model's fc1 width
    torch.library.opcheck(compiled_draft.int8_linear_op, (x, layers[0].fc1))


def test_no_compiler_means_the_eager_draft_and_the_same_tokens(loaded, monkeypatch, capsys):
    main, draft = loaded
    opts = DecodeOptions(language="en", task="transcribe", max_new_tokens=30)
    features = _features(main, 1)
    base = decoding.decode_baseline(main, features, opts)
    monkeypatch.setenv("SPECWHISPER_DRAFT_COMPILE", "1")
    monkeypatch.setattr(compiled_draft.shutil, "which", lambda name: None)
    assert compiled_draft.compiler_problem() is not None
    spec = decoding.decode_speculative(main, draft, features, opts)
    assert spec.token_ids == base.token_ids
    assert "runs eager: no C++ compiler" in capsys.readouterr().err


def test_a_failed_compile_falls_back_to_the_eager_step(loaded, monkeypatch, capsys):
    main, draft = loaded
    opts = DecodeOptions(language="en", task="transcribe", max_new_tokens=30)
    features = _features(main, 2)
    base = decoding.decode_baseline(main, features, opts)

    def broken(fn, **kwargs):
        def call(*args, **kw):
            raise RuntimeError("inductor could not lower an op")

        return call

    monkeypatch.setenv("SPECWHISPER_DRAFT_COMPILE", "1")
    monkeypatch.setattr(compiled_draft, "_STEP", None)
    monkeypatch.setattr(compiled_draft.torch, "compile", broken)
    for parallel_draft in (False, True):
        run = dataclasses.replace(opts, parallel_draft=parallel_draft)
        spec = decoding.decode_speculative(main, draft, features, run)
        assert spec.token_ids == base.token_ids
    assert "the draft step runs eager (RuntimeError)" in capsys.readouterr().err


def test_the_switch_reads_the_environment(monkeypatch):
    monkeypatch.delenv("SPECWHISPER_DRAFT_COMPILE", raising=False)
    assert not compiled_draft.compiled_drafting()
    monkeypatch.setenv("SPECWHISPER_DRAFT_COMPILE", "1")
    assert compiled_draft.compiled_drafting()
    monkeypatch.setenv("SPECWHISPER_DRAFT_COMPILE", "on")
    with pytest.raises(ValueError, match="SPECWHISPER_DRAFT_COMPILE"):
        compiled_draft.compiled_drafting()


@pytest.mark.slow
def test_the_compiled_step_drafts_the_eager_steps_tokens(loaded, monkeypatch):
    main, draft = loaded
    if compiled_draft.compiler_problem():
        pytest.skip(compiled_draft.compiler_problem())
    # a constant gamma: the adaptive one follows the measured costs, which compiling changes
    opts = DecodeOptions(
        language="en", task="transcribe", max_new_tokens=40, gamma=4, gamma_schedule="constant"
    )
    features = _features(main, 3)
    eager = decoding.decode_speculative(main, draft, features, opts)
    monkeypatch.setenv("SPECWHISPER_DRAFT_COMPILE", "1")
    compiled = decoding.decode_speculative(main, draft, features, opts)
    assert compiled.token_ids == eager.token_ids
    # the same proposals, step for step (rounding inside the fused ops may differ)
    assert [s.drafted for s in compiled.steps] == [s.drafted for s in eager.steps]
    assert compiled_draft.CompiledInt8Drafter.compile_s is not None
