"""Where each column's time went, and what bounds the speed-up on this clip: the stacked time
bars (encoder, main decoder passes, draft, the rest), the most any draft could give, and
whether the speed-up stands out of the spread of the timed repeats. Reads the compare JSON;
decodes and times nothing."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specwhisper import metrics

# The stacked bar's parts: (key of TimeParts, legend label, colour).
TIME_PARTS = (
    ("encoder_s", "encoder", "#f59e0b"),
    ("main_s", "main decoder passes", "#3b82f6"),
    ("draft_s", "draft", "#22c55e"),
    ("rest_s", "the rest", "#94a3b8"),
)


def spread_note(baseline_times_s: Sequence[float], speculative_times_s: Sequence[float]) -> str:
    """Why the speed-up is not a result, or "" when it is one: the two columns' timed repeats
    overlap (the slowest speculative run is no faster than the fastest baseline run, or the
    other way round), or a column was timed only once, so its spread is unknown."""
    if len(baseline_times_s) < 2 or len(speculative_times_s) < 2:
        return "one timed run per column: its spread is unknown, so this is not yet a result"
    base = (min(baseline_times_s), max(baseline_times_s))
    spec = (min(speculative_times_s), max(speculative_times_s))
    if base[0] <= spec[1] and spec[0] <= base[1]:
        return (
            f"within the spread of the timed repeats (baseline {base[0]:.2f}–{base[1]:.2f} s, "
            f"speculative {spec[0]:.2f}–{spec[1]:.2f} s): no measured difference"
        )
    return ""


@dataclass(frozen=True)
class TimeParts:
    """Where one column's median time went, in seconds."""

    encoder_s: float  # the main's encoder, once per 30 s window
    main_s: float  # the main decoder's forward passes
    draft_s: float  # the assistant drafting
    rest_s: float  # everything else: logits processing, the loop itself, generate's set-up

    @property
    def total_s(self) -> float:
        return self.encoder_s + self.main_s + self.draft_s + self.rest_s


def time_parts(side: Mapping[str, Any]) -> TimeParts:
    """A column's median time cut into its parts. The parts are metered in the last timed run
    (`times_s[-1]`), so they are scaled to the median by that run's time: the bar is as long
    as the time the page reports, and cut in the shares that run measured."""
    median_s = side["time_s"]
    last_s = side["times_s"][-1] if side.get("times_s") else median_s
    scale = median_s / last_s if last_s > 0 else 0.0
    encoder, main, draft = (
        scale * side.get(k, 0.0) for k in ("encoder_s", "main_forward_s", "draft_s")
    )
    return TimeParts(encoder, main, draft, max(median_s - encoder - main - draft, 0.0))


def ideal_main_passes(n_tokens: int, gamma: float, n_windows: int = 1) -> int:
    """Main passes with a perfect, free draft: every pass checks γ drafted tokens, keeps them all
    and adds its own, so each gives γ + 1 tokens; at least one pass per 30 s window."""
    return max(math.ceil(n_tokens / (gamma + 1)), n_windows, 1)


@dataclass(frozen=True)
class Bound:
    """What limits the speed-up on one clip."""

    encoder_share: float  # the encoder's part of the baseline's time, 0-1
    ideal_passes: int  # main passes with a perfect draft at the run's mean γ
    max_speedup: float  # the baseline's time over its encoder plus ideal_passes main passes


def speedup_bound(result: Mapping[str, Any]) -> Bound:
    """The most any draft could give on this clip at this run's mean γ: both columns pay the
    encoder, and even a perfect, free draft needs one main pass per γ + 1 tokens, each costing
    what a baseline pass costs (its decoder forward and its share of the rest: logits
    processing, the loop)."""
    base = result["baseline"]
    parts = time_parts(base)
    gamma = result.get("mean_gamma") or 0.0
    passes = ideal_main_passes(base["n_tokens"], gamma, base.get("n_windows", 1))
    per_pass_s = (parts.total_s - parts.encoder_s) / max(base["n_main_forwards"], 1)
    ideal_s = parts.encoder_s + passes * per_pass_s
    return Bound(
        encoder_share=parts.encoder_s / parts.total_s if parts.total_s > 0 else 0.0,
        ideal_passes=passes,
        max_speedup=metrics.ratio(parts.total_s, ideal_s) or 1.0,
    )


def bound_line(result: Mapping[str, Any]) -> str:
    """One sentence under the speed-up: what bounds it on this clip."""
    base = result["baseline"]
    if not base.get("main_forward_s"):
        return ""  # a result without its time breakdown (made before it was recorded)
    bound = speedup_bound(result)
    return (
        f"What bounds it here: the encoder, which both columns pay, is "
        f"{100 * bound.encoder_share:.0f}% of the baseline's time; a perfect draft at this run's "
        f"mean γ {result.get('mean_gamma') or 0:.1f} would still need {bound.ideal_passes} main "
        f"passes for the {base['n_tokens']} tokens (of the baseline's {base['n_main_forwards']}), "
        f"so at the baseline's cost per pass no draft could give more than "
        f"{bound.max_speedup:.2f}× on this clip."
    ) + (
        # possible where our loop spends less per pass than generate's own loop
        " This run did better: its loop costs less per pass than the baseline's."
        if result["speedup"] > bound.max_speedup
        else ""
    )


def render_time_bars(result: Mapping[str, Any]) -> str:
    """Each column's time as one stacked bar (encoder, main passes, draft, the rest), both on
    one scale, so the shorter bar is the faster column. Plain HTML: it wraps at any width."""
    sides = {name: time_parts(result[name]) for name in ("baseline", "speculative")}
    longest_s = max(p.total_s for p in sides.values()) or 1.0
    rows = "".join(_time_bar(name.capitalize(), parts, longest_s) for name, parts in sides.items())
    legend = "".join(
        f'<span style="white-space: nowrap"><span style="display: inline-block; width: 0.8em; '
        f'height: 0.8em; background: {color}; border-radius: 2px"></span> {label}</span>'
        for _, label, color in TIME_PARTS
    )
    return (
        '<div class="time-bars" style="margin: 6px 0">'
        '<div style="font-weight: 700; margin-bottom: 4px">Where the time went (median run)</div>'
        f"{rows}"
        '<div style="display: flex; flex-wrap: wrap; gap: 2px 14px; font-size: 0.85em; '
        f'opacity: 0.85">{legend}</div></div>'
    )


def _time_bar(title: str, parts: TimeParts, longest_s: float) -> str:
    """One column's stacked bar, its length its share of the longer column's time."""
    cells = "".join(
        f'<div title="{label}: {getattr(parts, key):.2f} s" style="width: '
        f'{100 * getattr(parts, key) / parts.total_s:.2f}%; background: {color}"></div>'
        for key, label, color in TIME_PARTS
        if parts.total_s > 0 and getattr(parts, key) > 0
    )
    detail = ", ".join(f"{label} {getattr(parts, key):.2f} s" for key, label, _ in TIME_PARTS)
    return (
        f'<div style="margin-bottom: 6px"><div style="font-size: 0.9em">'
        f"<b>{title} {parts.total_s:.2f} s</b>: {detail}</div>"
        f'<div style="display: flex; height: 14px; border-radius: 3px; overflow: hidden; '
        f'width: {100 * parts.total_s / longest_s:.2f}%; min-width: 4px">{cells}</div></div>'
    )
