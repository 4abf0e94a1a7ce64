"""How many tokens to draft next: the gamma schedules of the speculative loop.

`adaptive` follows Leviathan et al.'s cost model with acceptance and costs measured as the loop
runs; `constant` always drafts gamma; `heuristic` is transformers' rule (+2 after a fully
accepted draft, -1 otherwise). It knows nothing about models or tokens, only counts and seconds.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

SCHEDULES = ("adaptive", "constant", "heuristic")


@dataclass
class GammaSchedule:
    """How many tokens to draft next.

    adaptive: pick gamma maximizing expected tokens per unit of time under Leviathan et al.'s
    model, E[tokens] = (1 - a^(g+1)) / (1 - a), cost = g * t_draft + t_verify(g), with the
    acceptance a and both costs measured as we go. Gamma 0 (no drafting) wins when the draft
    does not pay; a probe every `probe_every` tokens keeps the estimate of `a` fresh.

    The draft's cost per token is the median of its last few drafting steps, not counting the
    first (that one also catches the draft up on the prompt and pays first-call setup): one
    slow step on a busy machine must not switch drafting off for the rest of the audio, which
    a moving average fed only by the occasional probe would do.
    """

    kind: str = "adaptive"
    gamma: int = 5
    max_gamma: int = 12
    # main passes without drafting before a probe: 24 left a clip undrafted for most of its
    # tokens after a few early rejections (BENCHMARKS, "Issue 12, next session")
    probe_every: int = 8
    # running estimates: acceptance and verify costs as exponential moving averages, the
    # draft's cost per token as a median (t_draft_s)
    accepted: float = 4.0  # prior: 4 of 5 draft tokens accepted
    trials: float = 5.0
    draft_times: deque[float] = field(default_factory=lambda: deque(maxlen=5))  # per token
    n_drafting_steps: int = 0
    t_verify_s: dict[int, float] = field(default_factory=dict)  # by tokens fed to the main
    since_draft: int = 0
    decay: float = 0.9

    @property
    def t_draft_s(self) -> float | None:
        """One draft token's time: the median of the recent drafting steps (None: not yet)."""
        return statistics.median(self.draft_times) if self.draft_times else None

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
        else:  # one point: assume 12% more per token, as measured on CPU for base
            slope = 0.12 * self.t_verify_s[near[0]]
        anchor = near[-1] if hi is None else near[0]
        return self.t_verify_s[anchor] + slope * (k - anchor)

    def next(self) -> int:
        t_draft = self.t_draft_s
        if self.kind != "adaptive" or t_draft is None or not self.t_verify_s:
            return self.gamma
        a = self.alpha()
        best_g, best_rate = 0, 1.0 / self.verify_cost(1)
        for g in range(1, self.max_gamma + 1):
            expected = (1 - a ** (g + 1)) / (1 - a)
            rate = expected / (g * t_draft + self.verify_cost(g + 1))
            if rate > best_rate * 1.02:  # prefer the shorter draft unless clearly better
                best_g, best_rate = g, rate
        if best_g == 0 and self.since_draft >= self.probe_every:
            return 2  # a cheap probe, so a changed acceptance can switch drafting back on
        return best_g

    def update(self, n_drafted: int, n_accepted: int, draft_s: float, verify_s: float) -> None:
        self.update_batch([n_drafted], [n_accepted], draft_s, verify_s)

    def update_batch(
        self, n_drafted: list[int], n_accepted: list[int], draft_s: float, verify_s: float
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
            self.draft_times.append(draft_s / longest)
        # Geometric model: each draft token is a trial until the first rejection.
        trials = sum(a + (1 if a < d else 0) for d, a in zip(n_drafted, n_accepted, strict=True))
        self.accepted = self.decay * self.accepted + sum(n_accepted)
        self.trials = self.decay * self.trials + trials
        if self.kind == "heuristic":  # transformers' rule
            fully = all(a == d for d, a in zip(n_drafted, n_accepted, strict=True))
            self.gamma = self.gamma + 2 if fully else max(1, self.gamma - 1)
