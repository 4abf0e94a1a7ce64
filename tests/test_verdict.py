"""The verdict's reading of a result: the time breakdown, what bounds the speed-up, when the
speed-up is within the spread of the repeats, and a failed run's sentence. Pure rendering of
a compare result; no model runs."""

from __future__ import annotations

import re

import pytest

from specwhisper.ui.timebars import (
    bound_line,
    ideal_main_passes,
    render_time_bars,
    speedup_bound,
    spread_note,
    time_parts,
)
from specwhisper.ui.verdict import render_error, render_verdict


def result(**changes) -> dict:
    """A 28 s clip's comparison as the API returns it: 100 tokens, 101 baseline main passes,
    24 speculative ones; the last timed run of each column has its parts metered."""
    base = {
        "text": "from fairest creatures",
        "token_ids": list(range(100)),
        "time_s": 4.0,
        "times_s": [4.2, 4.0, 4.0],
        "n_tokens": 100,
        "n_main_forwards": 101,
        "n_windows": 1,
        "encoder_s": 1.0,
        "main_forward_s": 2.0,
        "draft_s": 0.0,
    }
    spec = base | {
        "time_s": 2.0,
        "times_s": [2.1, 2.0, 2.0],
        "n_main_forwards": 24,
        "encoder_s": 1.0,
        "main_forward_s": 0.6,
        "draft_s": 0.3,
        "acceptance_rate": 0.9,
        "steps": [],
    }
    out = {
        "baseline": base,
        "speculative": spec,
        "identical": True,
        "first_divergence": None,
        "speedup": 2.0,
        "predicted_speedup": 2.4,
        "predicted_end_to_end": 1.8,
        "cost_ratio": 0.1,
        "mean_gamma": 4.0,
        "device": "cpu",
        "dtype": "float32",
        "engine": "specwhisper",
        "load_time_s": 0.0,
        "duration_s": 27.8,
    }
    for key, value in changes.items():
        out[key] = out[key] | value if key in ("baseline", "speculative") else value
    return out


def test_parts_add_up_to_the_median_in_the_last_runs_shares():
    parts = time_parts(result()["baseline"])
    assert (parts.encoder_s, parts.main_s, parts.draft_s) == (1.0, 2.0, 0.0)
    assert parts.rest_s == pytest.approx(1.0) and parts.total_s == pytest.approx(4.0)
    # the last run took 5 s where the median is 4 s: its parts scale by 4/5
    scaled = time_parts(result(baseline={"times_s": [4.0, 3.0, 5.0]})["baseline"])
    assert scaled.encoder_s == pytest.approx(0.8) and scaled.total_s == pytest.approx(4.0)


def test_ideal_passes_give_gamma_plus_one_tokens_each():
    assert ideal_main_passes(100, 4.0) == 20
    assert ideal_main_passes(101, 4.0) == 21  # a partial step is still a pass
    assert ideal_main_passes(100, 0.0) == 100  # no draft: one token per pass
    assert ideal_main_passes(3, 9.0, n_windows=2) == 2  # at least one pass per window


def test_the_bound_is_the_encoder_plus_one_main_pass_per_ideal_step():
    bound = speedup_bound(result())
    assert bound.encoder_share == pytest.approx(0.25)
    assert bound.ideal_passes == 20
    # 4 s over the 1 s encoder plus 20 passes at the baseline's (4 - 1) s / 101 passes
    assert bound.max_speedup == pytest.approx(4.0 / (1.0 + 20 * 3.0 / 101))
    line = bound_line(result())
    assert "25% of the baseline's time" in line and "20 main passes" in line
    assert f"more than {4.0 / (1.0 + 20 * 3.0 / 101):.2f}× on this clip." in line
    assert "did better" not in line
    assert "did better" in bound_line(result(speedup=3.0))  # said, never hidden


def test_an_encoder_that_is_most_of_the_time_caps_the_gain():
    short = result(baseline={"encoder_s": 3.5, "main_forward_s": 0.4}, mean_gamma=9.0)
    bound = speedup_bound(short)
    assert bound.encoder_share == pytest.approx(0.875)
    assert 1.0 < bound.max_speedup < 4.0 / 3.5


def test_a_result_without_its_breakdown_gets_no_bound_or_bars():
    old = result()
    for side in ("baseline", "speculative"):
        for key in ("encoder_s", "main_forward_s", "draft_s"):
            del old[side][key]
    assert bound_line(old) == ""
    html = render_verdict(old, {})
    assert "Where the time went" not in html and "IDENTICAL" in html


@pytest.mark.parametrize(
    ("baseline", "speculative", "within"),
    [
        ([4.2, 4.0, 4.0], [2.1, 2.0, 2.0], False),  # apart: a result
        ([2.0, 2.2, 2.1], [2.1, 1.9, 2.0], True),  # overlapping ranges
        ([2.0, 2.2], [2.2, 2.3], True),  # touching counts as overlapping
        ([2.5, 2.6], [2.6, 2.7], True),
        ([2.5, 2.6], [2.61, 2.7], False),  # slower, but measurably so
    ],
)
def test_speedup_within_the_spread_of_the_repeats(baseline, speculative, within):
    assert bool(spread_note(baseline, speculative)) is within


def test_one_repeat_has_no_spread_to_judge_by():
    assert "spread is unknown" in spread_note([2.0], [1.0])


def test_verdict_says_passes_and_shows_the_spread_instead_of_a_result():
    html = render_verdict(result(), {})
    assert "main passes 101 → 24" in html
    assert "2.00×" in html and ">faster<" in html
    assert "What bounds it here" in html and "Where the time went" in html
    close = result(baseline={"times_s": [2.1, 2.0, 1.9]}, speculative={"times_s": [2.0, 2.2, 1.8]})
    html = render_verdict(close, {})
    assert "within the spread of the timed repeats" in html and ">faster<" not in html


def test_time_bars_share_one_scale():
    html = render_time_bars(result())
    widths = [float(w) for w in re.findall(r"width: ([\d.]+)%; min-width", html)]
    assert widths == [100.0, 50.0]  # 4 s and 2 s
    for label in ("encoder", "main decoder passes", "draft", "the rest"):
        assert label in html
    assert "Baseline 4.00 s</b>" in html and "Speculative 2.00 s</b>" in html


def test_an_error_is_escaped_and_badged():
    html = render_error("The file <notes.wav> contains text, not audio.")
    assert "&lt;notes.wav&gt;" in html and "NOT COMPARED" in html and 'role="alert"' in html


def test_the_verdict_splits_the_speedup_when_the_loop_alone_was_timed():
    alone = {"time_s": 3.0, "times_s": [3.0, 3.1, 2.9], "identical": True}
    html = render_verdict(
        result(
            loop_alone=alone,
            loop_alone_speedup=1.3333,
            speculative_speedup_over_loop_alone=1.5,
        ),
        {},
    )
    assert "measured in this run" in html
    assert "1.33× × 1.50× = 2.00×" in html


def test_without_the_loop_alone_the_verdict_does_not_credit_drafting_with_it_all():
    html = render_verdict(result(loop_alone=None), {})
    assert "includes our leaner loop&#x27;s own gain" in html
    assert "Also time our loop without drafting" in html
    assert "our leaner loop&#x27;s alone" in render_verdict(result(gamma=0), {})
    assert "leaner loop" not in render_verdict(result(engine="transformers"), {})
