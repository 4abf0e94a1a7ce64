"""The loop's edges on scripted models: a main and a draft whose next tokens we choose.

The main here is a decoder whose greedy next token is a chosen function of the sequence so far
(one-hot hidden states through an identity output head), and the draft a `LogitsDrafter`
whose logits follow its own script. `speculative_decode` runs on them unchanged: its verify
pass, accept rule, cache cropping and step records are the ones the page uses.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specwhisper.drafters import LogitsDrafter
from specwhisper.loop import (
    DraftStep,
    LoopStats,
    accept,
    process_logits,
    speculative_decode,
    step_tokens,
)
from specwhisper.schedule import GammaSchedule

V = 16  # vocabulary
EOS = 15
PROMPT = [1, 2]  # stands for <|startoftranscript|> and friends


class TokenCache:
    """Holds the tokens fed so far; crops as transformers' caches do (negative count)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def get_seq_length(self) -> int:
        return len(self.tokens)

    def crop(self, n: int) -> None:
        assert n < 0
        del self.tokens[n:]


class ScriptedDecoder(torch.nn.Module):
    """Feeds `input_ids` into the cache; the hidden state at each position is the one-hot of
    `next_token(sequence up to and including it)`."""

    def __init__(self, next_token) -> None:
        super().__init__()
        self.next_token = next_token
        self.n_calls = 0

    def forward(self, input_ids, encoder_hidden_states, past_key_values, use_cache):
        self.n_calls += 1
        rows = []
        for token in input_ids[0].tolist():
            past_key_values.tokens.append(token)
            rows.append(self.next_token(past_key_values.tokens))
        hidden = torch.nn.functional.one_hot(torch.tensor(rows), V).float()[None]
        return SimpleNamespace(last_hidden_state=hidden)


def scripted_main(next_token) -> torch.nn.Module:
    main = torch.nn.Module()
    main.model = torch.nn.Module()
    main.model.decoder = ScriptedDecoder(next_token)
    main.proj_out = torch.nn.Linear(V, V, bias=False)
    with torch.no_grad():
        main.proj_out.weight.copy_(torch.eye(V))
    return main


class ScriptedDrafter(LogitsDrafter):
    """The shared greedy `propose` (it stops after an end-of-text) on scripted logits."""

    def __init__(self, next_token, max_len: int) -> None:
        self.next_token, self.max_len = next_token, max_len
        self.suppress = torch.zeros(V, dtype=torch.bool)
        self.eos = frozenset([EOS])
        self.tokens: list[int] = []
        self.n = 0
        self.proposed: list[list[int]] = []

    def begin(self, encoder_hidden, cache, features) -> None:
        self.tokens, self.n = [], 0

    def next_logits(self, ids: list[int]) -> torch.Tensor:
        self.tokens += ids
        self.n = len(self.tokens)
        return torch.nn.functional.one_hot(torch.tensor(self.next_token(self.tokens)), V).float()

    def propose(self, tokens: list[int], n: int, stop_below: float = 0.0) -> list[int]:
        drafted = super().propose(tokens, n, stop_below)
        self.proposed.append(drafted)
        return drafted

    def accept(self, n_valid: int) -> None:
        del self.tokens[n_valid:]
        self.n = len(self.tokens)


def window() -> dict:
    """What generate hands the loop besides the prompt: an empty cache, the encoder outputs."""
    encoder = SimpleNamespace(last_hidden_state=torch.zeros(1, 1, 4))
    return dict(past_key_values=TokenCache(), encoder_outputs=encoder)


def sequence(text: list[int]):
    """next_token for a model that says `text` after the prompt, then end-of-text forever."""

    def next_token(tokens: list[int]) -> int:
        i = len(tokens) - len(PROMPT)
        return text[i] if i < len(text) else EOS

    return next_token


def run(main_text, draft_text, *, gamma: int, max_new_tokens: int):
    max_length = len(PROMPT) + max_new_tokens
    main = scripted_main(sequence(main_text))
    drafter = ScriptedDrafter(sequence(draft_text), max_length)
    stats = LoopStats()
    config = SimpleNamespace(
        _eos_token_tensor=torch.tensor([EOS]), max_length=max_length, return_dict_in_generate=False
    )
    schedule = GammaSchedule("constant", gamma, gamma)
    out = speculative_decode(
        main, drafter, schedule, stats, torch.tensor([PROMPT]), [], config, **window()
    )
    generated = out[0].tolist()[len(PROMPT) :]
    return generated, stats, drafter, main.model.decoder


def baseline(main_text, max_new_tokens: int) -> list[int]:
    """What one-token greedy steps give: the text, cut at end-of-text (kept) or the limit."""
    return ([*main_text, EOS])[:max_new_tokens]


def check_steps(generated: list[int], stats: LoopStats) -> None:
    """The invariant: replaying the steps gives the output; the prefill step drafts nothing; a
    step with no main token ended inside its accepted draft."""
    assert [t for s in stats.steps for t in step_tokens(s)] == generated
    assert stats.steps[0].drafted == () and stats.steps[0].main_token is not None
    for s in stats.steps:
        assert 0 <= s.n_accepted <= len(s.drafted)
        if s.main_token is None:
            assert s.n_accepted > 0


TEXT = [3, 4, 5, 6, 7, 8, 9, 10]


def test_end_of_text_inside_a_draft():
    # The draft says the text and ends one word early; the main agrees on the end-of-text.
    generated, stats, drafter, _ = run(TEXT, TEXT, gamma=5, max_new_tokens=40)
    assert generated == baseline(TEXT, 40)
    check_steps(generated, stats)
    last = stats.steps[-1]
    assert last.drafted[-1] == EOS and last.main_token is None  # the draft's EOS, not the main's
    assert all(d.count(EOS) <= 1 for d in drafter.proposed)  # no drafting past end-of-text


def test_draft_ending_early_is_corrected():
    short = TEXT[:3]
    generated, stats, drafter, _ = run(TEXT, short, gamma=6, max_new_tokens=40)
    assert generated == baseline(TEXT, 40)
    check_steps(generated, stats)
    rejected = [s for s in stats.steps if s.drafted and s.drafted[s.n_accepted :][:1] == (EOS,)]
    assert rejected and rejected[0].main_token == TEXT[3]  # the main's correction


@pytest.mark.parametrize("max_new_tokens", [2, 3, 4, 5, 7])
def test_length_limit_inside_an_accepted_draft(max_new_tokens):
    # The draft would be right for all 8 tokens; the limit cuts the run short of them.
    generated, stats, drafter, _ = run(TEXT, TEXT, gamma=6, max_new_tokens=max_new_tokens)
    assert generated == baseline(TEXT, max_new_tokens)
    check_steps(generated, stats)


@pytest.mark.parametrize("gamma", [3, 10, 40])
def test_gamma_larger_than_the_room_left(gamma):
    generated, stats, drafter, _ = run(TEXT, TEXT, gamma=gamma, max_new_tokens=6)
    assert generated == baseline(TEXT, 6)
    check_steps(generated, stats)
    # a draft never reaches past the limit: it leaves room for the main's own token
    before = 1  # the prefill token
    for s in stats.steps[1:]:
        assert len(s.drafted) + 1 <= 6 - before
        before += len(step_tokens(s))


class UnsureDrafter(ScriptedDrafter):
    """A scripted draft sure of its tokens (logit 20: p ~ 1) except at the generated positions
    in `unsure_at` (logit 1 among 16: p = e / (e + 15) = 0.15)."""

    def __init__(self, next_token, max_len: int, unsure_at: set[int]) -> None:
        super().__init__(next_token, max_len)
        self.unsure_at = unsure_at

    def next_logits(self, ids: list[int]) -> torch.Tensor:
        logits = super().next_logits(ids)  # the next token's, at generated position i
        i = len(self.tokens) - len(PROMPT)
        return logits * (1.0 if i in self.unsure_at else 20.0)


def test_a_draft_stops_after_a_token_it_is_unsure_of():
    drafter = UnsureDrafter(sequence(TEXT), 40, unsure_at={2, 5})
    drafter.begin(None, None, None)
    assert drafter.propose(PROMPT, 8, stop_below=0.5) == TEXT[:3]  # the unsure one, then stop
    assert drafter.n == len(PROMPT) + 2  # nothing fed after it
    assert drafter.propose([*PROMPT, *TEXT[:3]], 8, stop_below=0.5) == TEXT[3:6]
    drafter.accept(len(PROMPT))
    assert drafter.propose(PROMPT, 8) == TEXT  # no stop: all 8
    drafter.accept(len(PROMPT))
    assert drafter.propose(PROMPT, 8, stop_below=0.1) == TEXT  # 0.15 is sure enough


@pytest.mark.parametrize("kind", ["adaptive", "constant"])
def test_only_the_adaptive_schedule_stops_unsure_drafts(kind, monkeypatch):
    """The draft is wrong, and unsure, at position 5. The adaptive schedule's drafts stop there
    (never a draft token after it); the output is the main's either way."""
    monkeypatch.delenv("SPECWHISPER_DRAFT_CONFIDENCE", raising=False)
    wrong = [*TEXT[:5], TEXT[5] + 1, *TEXT[6:]]
    max_length = len(PROMPT) + 40
    main = scripted_main(sequence(TEXT))
    drafter = UnsureDrafter(sequence(wrong), max_length, unsure_at={5})
    stats = LoopStats()
    config = SimpleNamespace(
        _eos_token_tensor=torch.tensor([EOS]), max_length=max_length, return_dict_in_generate=False
    )
    schedule = GammaSchedule(kind, gamma=8, max_gamma=8)
    assert schedule.stop_below == (0.5 if kind == "adaptive" else 0.0)
    out = speculative_decode(
        main, drafter, schedule, stats, torch.tensor([PROMPT]), [], config, **window()
    )
    generated = out[0].tolist()[len(PROMPT) :]
    assert generated == baseline(TEXT, 40)
    check_steps(generated, stats)
    before, past_unsure = 1, []  # the prefill gave position 0
    for s in stats.steps[1:]:
        past_unsure += [before + i > 5 for i in range(len(s.drafted)) if before <= 5]
        before += len(step_tokens(s))
    assert any(past_unsure) == (kind == "constant")
    # the first draft (gamma 8, before any timing) covers positions 1-5 or 1-8
    assert len(stats.steps[1].drafted) == (5 if kind == "adaptive" else 8)


def test_max_new_tokens_one():
    generated, stats, drafter, decoder = run(TEXT, TEXT, gamma=5, max_new_tokens=1)
    assert generated == [TEXT[0]]
    assert stats.steps == [DraftStep((), 0, TEXT[0])]
    assert drafter.proposed == [] and decoder.n_calls == 1  # prefill only


def test_a_wrong_draft_costs_one_main_pass_per_token():
    wrong = [t + 1 for t in TEXT] + [1] * 4  # wrong everywhere, end-of-text included
    generated, stats, _, decoder = run(TEXT, wrong, gamma=4, max_new_tokens=40)
    assert generated == baseline(TEXT, 40)
    check_steps(generated, stats)
    assert decoder.n_calls == len(stats.steps) == len(generated)  # every token the main's
    assert sum(s.n_accepted for s in stats.steps) == 0


def test_accept_rule():
    # agree on 2, correct the third
    assert accept([5, 6, 7], [5, 6, 9, 1], set(), 10) == DraftStep((5, 6, 7), 2, 9)
    # all agree: the bonus token
    assert accept([5, 6], [5, 6, 8], set(), 10) == DraftStep((5, 6), 2, 8)
    # an accepted end-of-text ends the step; the main's row after it is not a token
    assert accept([5, EOS, 3], [5, EOS, 3, 3], {EOS}, 10) == DraftStep((5, EOS, 3), 2, None)
    # the main's own end-of-text after a correction is its token
    assert accept([5, 6], [5, EOS, 1], {EOS}, 10) == DraftStep((5, 6), 1, EOS)
    # the length limit inside the accepted prefix: drafted tokens only, no main token
    assert accept([5, 6, 7], [5, 6, 7, 8], set(), 2) == DraftStep((5, 6, 7), 2, None)
    # the limit right after the accepted prefix: the main's token still fits
    assert accept([5, 6, 7], [5, 6, 7, 8], set(), 4) == DraftStep((5, 6, 7), 3, 8)
    # nothing drafted: the main's token alone
    assert accept([], [4], set(), 1) == DraftStep((), 0, 4)


# ---------------------------------------------------------------------------------------------
# Speculative sampling: the main's distribution, whatever the draft's

K = 3  # sampled tokens per run
N_RUNS = 3_000  # enough to catch a 5% shift (test_a_five_percent_shift_is_detectable)


def markov(seed: int, sharpness: float) -> torch.Tensor:
    """A [V, V] next-token table over tokens 3-8 (no end-of-text), as probabilities."""
    g = torch.Generator().manual_seed(seed)
    table = torch.zeros(V, V)
    table[:, 3:9] = torch.softmax(sharpness * torch.randn(V, 6, generator=g), -1)
    return table


def sampled_runs(main_table, draft_table, gamma: int, seed: int = 0) -> torch.Tensor:
    """N_RUNS runs of K sampled tokens: [N_RUNS, K]."""

    def from_table(table):
        return lambda tokens: table[tokens[-1]].log().clamp(min=-1e4)  # finite: x @ I

    g = torch.Generator().manual_seed(seed)
    config = SimpleNamespace(
        _eos_token_tensor=torch.tensor([EOS]),
        max_length=len(PROMPT) + K,
        return_dict_in_generate=False,
        do_sample=True,
    )
    out = []
    main = scripted_main(None)
    main.model.decoder = ProbabilityDecoder(from_table(main_table))
    drafter = ScriptedDrafter(None, len(PROMPT) + K)
    drafter.next_logits = _table_forward(drafter, draft_table)
    for _ in range(N_RUNS):
        schedule = GammaSchedule("constant", gamma, gamma)
        ids = speculative_decode(
            main,
            drafter,
            schedule,
            LoopStats(),
            torch.tensor([PROMPT]),
            [],
            config,
            generator=g,
            **window(),
        )
        out.append(ids[0, len(PROMPT) :].tolist())
    return torch.tensor(out)


class ProbabilityDecoder(ScriptedDecoder):
    """Hidden state = log-probabilities of the next token (the output head is the identity)."""

    def forward(self, input_ids, encoder_hidden_states, past_key_values, use_cache):
        rows = []
        for token in input_ids[0].tolist():
            past_key_values.tokens.append(token)
            rows.append(self.next_token(past_key_values.tokens))
        return SimpleNamespace(last_hidden_state=torch.stack(rows)[None])


def _table_forward(drafter, table):
    def forward(ids):
        drafter.tokens += ids
        drafter.n = len(drafter.tokens)
        return table[drafter.tokens[-1]].log().clamp(min=-1e4)

    return forward


def chi_square_p(samples: torch.Tensor, expected: torch.Tensor) -> float:
    from scipy.stats import chisquare

    cells = expected > 0
    counts = torch.bincount(samples, minlength=V)[cells].double()
    expected = expected[cells].double()
    return float(chisquare(counts, expected / expected.sum() * counts.sum()).pvalue)


def marginals(table: torch.Tensor) -> list[torch.Tensor]:
    """The exact distribution of each of the K tokens when the main samples on its own."""
    dist = table[PROMPT[-1]]
    out = [dist]
    for _ in range(K - 1):
        dist = dist @ table
        out.append(dist)
    return out


MAIN_TABLE = markov(seed=1, sharpness=1.0)
DRAFT_TABLE = markov(seed=2, sharpness=3.0)  # a draft that disagrees strongly


@pytest.mark.parametrize("gamma", [1, 4])
def test_speculative_sampling_keeps_the_main_distribution(gamma):
    runs = sampled_runs(MAIN_TABLE, DRAFT_TABLE, gamma)
    for position, expected in enumerate(marginals(MAIN_TABLE)):
        assert chi_square_p(runs[:, position], expected) > 1e-3, f"token {position}"


def test_the_distribution_test_catches_a_broken_acceptance_rule(monkeypatch):
    """A classic bug: on a rejection, draw the main's token from p instead of the residual
    max(0, p - q). The draft's agreement then leaks in, and the test above sees it."""
    from specwhisper import loop

    def broken(drafted, q, p, eos, room, generator):
        n = 0
        while n < len(drafted):
            u = torch.rand((), generator=generator)
            if u * q[n, drafted[n]] > p[n, drafted[n]]:
                break
            n += 1
        token = int(torch.multinomial(p[n], 1, generator=generator))
        return loop.kept_step(drafted, n, token, eos, room)

    monkeypatch.setattr(loop, "accept_sampled", broken)
    runs = sampled_runs(MAIN_TABLE, DRAFT_TABLE, gamma=4)
    p_values = [chi_square_p(runs[:, i], m) for i, m in enumerate(marginals(MAIN_TABLE))]
    assert min(p_values) < 1e-6


def test_a_five_percent_shift_is_detectable():
    """The sample size is enough: moving 5% of the probability from the first token's most
    likely value to another fails the test."""
    expected = marginals(MAIN_TABLE)[0]
    shifted = expected.clone()
    top = int(expected.argmax())
    other = int(torch.where(expected > 0, expected, 2.0).argmin())  # the least likely token
    shifted[top] -= 0.05
    shifted[other] += 0.05
    draws = torch.multinomial(shifted, N_RUNS, replacement=True, generator=torch.Generator())
    assert chi_square_p(draws, expected) < 1e-3


def test_processing_a_block_equals_the_processors_one_row_at_a_time():
    """`process_logits` (the verify pass and a sampling draft) keeps the suppression masks across
    calls and skips rows: the same logits as each processor's own call on each row's prefix."""
    from transformers.generation.logits_process import (
        SuppressTokensAtBeginLogitsProcessor,
        SuppressTokensLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
    )

    processors = [
        SuppressTokensLogitsProcessor([3, 7]),
        SuppressTokensAtBeginLogitsProcessor([5, 9], begin_index=4),
        TemperatureLogitsWarper(0.6),
        TopKLogitsWarper(6),
    ]
    generator = torch.Generator().manual_seed(0)
    prefix = torch.tensor([[1, 2, 0, 4, 8, 6]])  # rows 0-3 see prefixes of length 3-6
    for _ in range(2):  # the second call reuses the masks
        logits = torch.randn(4, V, generator=generator)
        expected = logits.clone()
        for i in range(4):
            row = expected[i : i + 1]
            for p in processors:
                row = p(prefix[:, : 3 + i], row)
            expected[i] = row[0]
        assert torch.equal(process_logits(processors, prefix, logits.clone()), expected)


def test_draw_samples_the_given_distribution_and_never_a_zero():
    """`draw` (the loop's sampler, inverse CDF) against the exact distribution: unnormalized
    weights, zeros among them, and a vocabulary of Whisper's size."""
    from specwhisper.drafters import draw

    weights = torch.zeros(51_865)
    weights[[0, 17, 18, 40_000, 51_864]] = torch.tensor([3.0, 0.5, 1.5, 2.0, 1.0])
    generator = torch.Generator().manual_seed(0)
    samples = torch.tensor([draw(weights, generator) for _ in range(N_RUNS)])
    assert set(samples.tolist()) <= {0, 17, 18, 40_000, 51_864}
    assert chi_square_p(samples, weights / weights.sum()) > 1e-3
