"""What a comparison's runs mean: speed-up, acceptance alpha, mean gamma, cost ratio c and
Leviathan et al.'s predicted speed-ups, as pure functions over decoding runs.

Every function takes lists of runs, so one clip (lists of one) and a whole benchmark (every
clip's runs of one side, pooled) use the same formulas. The page's API, the benchmark's totals
and the tests read them here. It runs nothing and times nothing: the runs come from decoding,
through compare.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specwhisper.decoding import DecodeResult

Runs = Sequence["DecodeResult"]  # one clip's run of a side, or every clip's runs of it


def ratio(slower_s: float, faster_s: float) -> float | None:
    """How many times faster `faster_s` is than `slower_s`: every speed-up is one of these,
    the subject's time below the line (None when that time is unmeasured)."""
    return slower_s / faster_s if faster_s else None


def speedup(baseline: Runs, speculative: Runs) -> float:
    """Baseline time over speculative time, times summed over the runs (0 when unmeasured)."""
    spec_s = sum(r.time_s for r in speculative)
    return sum(r.time_s for r in baseline) / spec_s if spec_s else 0.0


def acceptance_rate(runs: Runs) -> float:
    """Accepted draft tokens over drafted ones."""
    drafted = sum(r.n_draft_tokens for r in runs)
    return sum(r.n_accepted for r in runs) / drafted if drafted else 0.0


def tokens_per_main_forward(runs: Runs) -> float:
    """Generated tokens per main decoder forward pass."""
    forwards = sum(r.n_main_forwards for r in runs)
    return sum(r.n_tokens for r in runs) / forwards if forwards else 0.0


def alpha(runs: Runs) -> float:
    """Per-token acceptance probability, from the geometric model of each step: every drafted
    token is a trial until the first rejection."""
    steps = [s for r in runs for s in r.steps]
    accepted = sum(s.n_accepted for s in steps)
    rejections = sum(1 for s in steps if s.n_accepted < len(s.drafted))
    trials = accepted + rejections
    return accepted / trials if trials else 0.0


def mean_gamma(runs: Runs) -> float:
    """Draft tokens per step that drafted at all."""
    drafted = [len(s.drafted) for r in runs for s in r.steps if s.drafted]
    return statistics.fmean(drafted) if drafted else 0.0


def cost_ratio(baseline: Runs, speculative: Runs) -> float:
    """c: one draft token's time over one main decoder step's time (the baseline's steps)."""
    n_draft = sum(r.n_draft_tokens for r in speculative)
    n_main = sum(r.n_main_forwards for r in baseline)
    main_s = sum(r.main_forward_s for r in baseline)
    if not n_draft or not n_main or not main_s:
        return 0.0
    return (sum(r.draft_s for r in speculative) / n_draft) / (main_s / n_main)


def leviathan_speedup(alpha: float, gamma: float, c: float) -> float:
    """Expected improvement factor of the decoding loop (Leviathan et al. 2023, eq. 1-2):
    (1 - a^(g+1)) / ((1 - a)(g c + 1))."""
    if gamma <= 0:
        return 1.0
    expected = gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return expected / (gamma * c + 1)


def predicted_speedup(baseline: Runs, speculative: Runs) -> float:
    """Leviathan's speed-up of the decoding loop at the measured alpha, mean gamma and c
    (1.0 when c is unmeasured: nothing was drafted, or the baseline was not metered)."""
    c = cost_ratio(baseline, speculative)
    if c == 0:
        return 1.0
    return leviathan_speedup(alpha(speculative), mean_gamma(speculative), c)


def predicted_end_to_end(baseline: Runs, speculative: Runs) -> float:
    """The prediction for what is timed: the baseline's encoder time, its main decoder passes
    sped up by `predicted_speedup`, and its per-pass overhead (logits processing, Python) paid
    once per main pass of the speculative runs."""
    base_s = sum(r.time_s for r in baseline)
    n_main = sum(r.n_main_forwards for r in baseline)
    if not base_s or not n_main:
        return 1.0
    encoder_s = sum(r.encoder_s for r in baseline)
    main_s = sum(r.main_forward_s for r in baseline)
    per_pass_s = max(base_s - encoder_s - main_s, 0.0) / n_main
    predicted_s = (
        encoder_s
        + main_s / predicted_speedup(baseline, speculative)
        + per_pass_s * sum(r.n_main_forwards for r in speculative)
    )
    return base_s / predicted_s if predicted_s > 0 else 1.0
