"""How many tokens to draft next: the gamma schedules of the speculative loop.

`adaptive` follows Leviathan et al.'s cost model with acceptance and costs measured as the loop
runs, and stops each greedy draft early where the draft is unsure (`stop_below`); `constant`
always drafts gamma; `heuristic` is transformers' rule (+2 after a fully accepted draft, -1
otherwise). It knows nothing about models or tokens, only counts and seconds.
"""

from __future__ import annotations

import os
import statistics
from collections import deque
from dataclasses import dataclass, field

SCHEDULES = ("adaptive", "constant", "heuristic")
# Draft tokens per step, where nobody picks it (the adaptive schedules start there): the one
# home of the default gamma, which request_check.CompareRequest and every layer above it read.
DEFAULT_GAMMA = 5

# The adaptive schedule's greedy draft stops after a token it gives less than this probability:
# a rejection is likely there (teacher-forced over the 95 one-window shared clips, whisper-base's
# self-int8 draft gave under 0.5 to 74% of the tokens the main rejects and to 7% of the ones it
# keeps; BENCHMARKS.md#lever-schedule).
DRAFT_CONFIDENCE = 0.5


def draft_confidence() -> float:
    """DRAFT_CONFIDENCE, or SPECWHISPER_DRAFT_CONFIDENCE (0 to 1; 0 turns the stop off), for
    ablations."""
    text = os.environ.get("SPECWHISPER_DRAFT_CONFIDENCE")
    if text is None:
        return DRAFT_CONFIDENCE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"SPECWHISPER_DRAFT_CONFIDENCE must be between 0 and 1, not {text!r}")
    return value


def draft_stops_early(engine: str, gamma_schedule: str, *, sampling: bool, batched: bool) -> bool:
    """Does the draft stop itself after a token it gives under draft_confidence()? The one home
    of the rule every caller asks (the loops, the bench's settings, the page's snippet): only
    our batch-1 loop's greedy drafts under the adaptive schedule. A sampled draft must run its
    whole gamma to keep the main's distribution; batched rows draft in step, one gamma for the
    batch; transformers' engine has its own rule (a threshold on its assistant's config)."""
    return engine == "specwhisper" and gamma_schedule == "adaptive" and not sampling and not batched


@dataclass
class GammaSchedule:
    """How many tokens to draft next.

    adaptive: pick gamma maximizing expected tokens per unit of time under Leviathan et al.'s
    model, E[tokens] = (1 - a^(g+1)) / (1 - a), cost = draft_cost(g) + verify_cost(g + 1), with
    the acceptance a and both costs measured as we go. Gamma 0 (no drafting) wins when the draft
    does not pay; a probe every `probe_every` tokens keeps the estimate of `a` fresh. Gamma is
    then a cap: our loop's greedy draft stops after a token it gives less than `stop_below`
    probability, so drafts run long where the draft is sure and end where a rejection is
    likely. The longest cap within 2% of the rate of the shorter-first choice is taken then
    (`next(draft_stops=True)`); sampled and batched drafts, which never stop early, keep the
    shorter-first choice (a longer gamma only where its rate is more than 2% better).

    The draft's cost comes from its last few drafting steps, not counting the first (that one
    also catches the draft up on the prompt and pays first-call setup), through medians: one
    slow step on a busy machine must not switch drafting off for the rest of the audio, which
    a moving average fed only by the occasional probe would do. A draft's first forward costs
    more than the others (it also feeds the main's last token, with the draft's weights just
    evicted by the main's pass), so once drafts of different lengths were timed the cost is
    fixed + per token (`draft_cost`); a per-token median alone made short drafts look dear.
    """

    kind: str = "adaptive"
    gamma: int = DEFAULT_GAMMA
    max_gamma: int = 12
    # main passes without drafting before a probe: 24 left a clip undrafted for most of its
    # tokens after a few early rejections (BENCHMARKS.md#lever-schedule)
    probe_every: int = 8
    # running estimates: acceptance and verify costs as exponential moving averages, the
    # draft's cost from medians over its recent steps (draft_cost)
    accepted: float = 4.0  # prior: 4 of 5 draft tokens accepted
    trials: float = 5.0
    # recent drafting steps: (tokens drafted, seconds)
    draft_steps: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=8))
    n_drafting_steps: int = 0
    t_verify_s: dict[int, float] = field(default_factory=dict)  # by tokens fed to the main
    since_draft: int = 0
    decay: float = 0.9
    confidence: float | None = None  # adaptive only, see stop_below (None: draft_confidence())

    @property
    def stop_below(self) -> float:
        """A greedy draft of our batch-1 loop stops after a token it gives less than this
        probability (0: never)."""
        if not draft_stops_early("specwhisper", self.kind, sampling=False, batched=False):
            return 0.0
        return draft_confidence() if self.confidence is None else self.confidence

    @property
    def never_drafts(self) -> bool:
        """Gamma 0 from the start: no schedule ever drafts then (adaptive moves off its start
        value only after a timed draft, heuristic only after a drafted step), so the loop is
        our loop without drafting, one main pass per token as plain `generate` makes."""
        return self.gamma == 0

    @property
    def t_draft_s(self) -> float | None:
        """One draft token's time: the median of the recent drafting steps (None: not yet)."""
        if not self.draft_steps:
            return None
        return statistics.median(s / n for n, s in self.draft_steps)

    def draft_cost(self, g: int) -> float:
        """Seconds to draft g tokens (after at least one timed step): fixed + per token, fitted
        robustly (Theil-Sen: the median of the slopes between steps of different lengths, then
        the median intercept), or g per-token medians while all steps had one length."""
        steps = list(self.draft_steps)
        slopes = [
            (s2 - s1) / (n2 - n1)
            for i, (n1, s1) in enumerate(steps)
            for n2, s2 in steps[i + 1 :]
            if n2 != n1
        ]
        per_token = statistics.median(slopes) if slopes else 0.0
        if per_token <= 0:
            return g * (self.t_draft_s or 0.0)
        fixed = max(0.0, statistics.median(s - per_token * n for n, s in steps))
        return fixed + per_token * g

    def alpha(self) -> float:
        return min(max(self.accepted / max(self.trials, 1e-9), 0.0), 0.995)

    def verify_cost(self, k: int) -> float:
        """Cost of one main pass over k tokens: measured, or linear from the nearest measured."""
        if k in self.t_verify_s:
            return self.t_verify_s[k]
        known = sorted(self.t_verify_s)
        lo = max((x for x in known if x < k), default=None)
        hi = min((x for x in known if x > k), default=None)
        if lo is not None and hi is not None:  # interpolate between measured neighbours
            w = (k - lo) / (hi - lo)
            return (1 - w) * self.t_verify_s[lo] + w * self.t_verify_s[hi]
        near = known[-2:] if hi is None else known[:2]
        if len(near) == 2:  # extrapolate along the measured slope (never downhill)
            slope = max(
                0.0, (self.t_verify_s[near[1]] - self.t_verify_s[near[0]]) / (near[1] - near[0])
            )
        else:  # one point, k0: each token adds 12% of a one-token pass (base on CPU: 21 ms
            # for 1 token, 35 ms for 6, 50 ms for 13); a line down from V(k0) made a one-token
            # pass look 14 ms, and held gamma at 1-2 after the first passes
            k0 = near[0]
            return self.t_verify_s[k0] * (1 + 0.12 * (k - 1)) / (1 + 0.12 * (k0 - 1))
        anchor = near[-1] if hi is None else near[0]
        return self.t_verify_s[anchor] + slope * (k - anchor)

    def next(self, draft_stops: bool = False) -> int:
        """The next gamma. `draft_stops`: the caller's draft stops itself after a token under
        `stop_below` (our greedy loop; not sampled or batched drafts)."""
        if self.kind != "adaptive" or not self.draft_steps or not self.t_verify_s:
            return self.gamma
        a = self.alpha()
        rates = [1.0 / self.verify_cost(1)]  # tokens per second at gamma 0, 1, ...
        for g in range(1, self.max_gamma + 1):
            expected = (1 - a ** (g + 1)) / (1 - a)
            rates.append(expected / (self.draft_cost(g) + self.verify_cost(g + 1)))
        best_g, best_rate = 0, rates[0]
        for g in range(1, self.max_gamma + 1):
            if rates[g] > best_rate * 1.02:  # prefer the shorter draft unless clearly better
                best_g, best_rate = g, rates[g]
        if best_g > 0 and draft_stops and self.stop_below > 0:
            # ...unless the draft stops itself where it is unsure: then a longer cap only runs
            # on where the draft is sure, whose tokens the pooled `a` undervalues. The longest
            # within 2% of the rate that rule picked (as measured: BENCHMARKS.md#lever-schedule;
            # best_g itself qualifies)
            best_g = max(g for g in range(1, self.max_gamma + 1) if rates[g] * 1.02 >= best_rate)
        if best_g == 0 and self.since_draft >= self.probe_every:
            return 2  # a cheap probe, so a changed acceptance can switch drafting back on
        return best_g

    def update(
        self,
        n_drafted: int,
        n_accepted: int,
        draft_s: float,
        verify_s: float,
        unsure: bool = False,
    ) -> None:
        """One step. `unsure`: the draft stopped itself after its last token (`stop_below`);
        that token is no trial of the acceptance estimate, which sets the cap for the runs the
        draft is sure of (early unsure rejections held gamma at 1 for a dozen passes)."""
        self.update_batch([n_drafted], [n_accepted], draft_s, verify_s, [unsure])

    def update_batch(
        self,
        n_drafted: list[int],
        n_accepted: list[int],
        draft_s: float,
        verify_s: float,
        unsure: list[bool] | None = None,
    ) -> None:
        """One step of a batch (one row at batch size 1): every row drafted in the same draft
        passes and was verified in the same main pass, so the costs are the batch's, and the
        acceptance counts pool the rows."""
        longest = max(n_drafted, default=0)
        k = longest + 1
        old = self.t_verify_s.get(k)
        self.t_verify_s[k] = (
            verify_s if old is None else self.decay * old + (1 - self.decay) * verify_s
        )
        if longest == 0:
            self.since_draft += 1
            return
        self.since_draft = 0
        self.n_drafting_steps += 1
        if self.n_drafting_steps > 1:  # the first one also caught up on the prompt
            self.draft_steps.append((longest, draft_s))
        # Geometric model: each draft token is a trial until the first rejection (a row's
        # unsure last token is left out).
        unsure = unsure or [False] * len(n_drafted)
        sure = [max(d - bool(u), 0) for d, u in zip(n_drafted, unsure, strict=True)]
        kept = [min(a, d) for d, a in zip(sure, n_accepted, strict=True)]
        trials = sum(a + (1 if a < d else 0) for d, a in zip(sure, kept, strict=True))
        self.accepted = self.decay * self.accepted + sum(kept)
        self.trials = self.decay * self.trials + trials
        if self.kind == "heuristic":  # transformers' rule
            fully = all(a == d for d, a in zip(n_drafted, n_accepted, strict=True))
            self.gamma = self.gamma + 2 if fully else max(1, self.gamma - 1)
