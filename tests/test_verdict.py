"""The verdict's reading of a result: the time breakdown, what bounds the speed-up, when the
speed-up is within the spread of the repeats, the headline and the two columns (a mismatch
shown where it is), and a failed run's sentence. Pure rendering of a compare result; no model
runs."""

from __future__ import annotations

import dataclasses
import re

import pytest
from results import PIECES, api_result, changed, run, synthetic_result

from specwhisper.ui.exports import markdown_table
from specwhisper.ui.timebars import (
    bound_line,
    ideal_main_passes,
    render_time_bars,
    speedup_bound,
    spread_note,
    time_parts,
)
from specwhisper.ui.verdict import precision_note, render_error, render_side, render_verdict


def result(**changes) -> dict:
    """A 28 s clip's comparison as the API returns it (a real Comparison's JSON): 100 tokens,
    101 baseline main passes, 24 speculative ones; the last timed run of each column has its
    parts metered."""
    base = run(
        "generate",
        text="from fairest creatures",
        token_ids=tuple(range(100)),
        time_s=4.0,
        n_main_forwards=101,
        encoder_s=1.0,
        main_forward_s=2.0,
    )
    spec = dataclasses.replace(
        base, engine="specwhisper", time_s=2.0, n_main_forwards=24, main_forward_s=0.6, draft_s=0.3
    )
    numbers = dict(
        speculative={"acceptance_rate": 0.9},
        predicted_speedup=2.4,
        predicted_end_to_end=1.8,
        cost_ratio=0.1,
        mean_gamma=4.0,
        duration_s=27.8,
    )
    return changed(api_result(base, spec, ((4.2, 4.0, 4.0), (2.1, 2.0, 2.0)), **numbers), changes)


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


def test_identical_badge_speedup_and_prediction():
    html = render_verdict(synthetic_result(load_time_s=7.25), PIECES)
    assert "IDENTICAL" in html and "MISMATCH" not in html
    assert "2.00×" in html and "faster" in html
    assert "Predicted: <b>1.80×</b> end to end" in html  # what is timed
    assert "decoding loop alone would gain 2.40×" in html  # Leviathan's figure
    assert "Models loaded in 7.2 s (not included in timings)" in html
    cached = render_verdict(synthetic_result(load_time_s=0.0), PIECES)
    assert "Models were cached (no load time)" in cached and "Models loaded in" not in cached
    slower = render_verdict(synthetic_result(speedup=0.8), PIECES)
    assert "0.80×" in slower and "slower than the baseline" in slower


def test_mismatch_is_shown_with_position_and_both_texts():
    result = synthetic_result(
        speculative={"token_ids": [1, 2, 7], "text": "ask not your"},
        identical=False,
        first_divergence=2,
    )
    html = render_verdict(result, PIECES)
    assert "MISMATCH" in html and "IDENTICAL" not in html
    assert "differ from token 2 on" in html
    # Both sides: the shared text, then each one's own continuation highlighted.
    assert "…ask not<mark" in html
    assert ">  what…" not in html and "> what</mark>" in html and "> your</mark>" in html
    assert "#dc2626" in render_side(result, "speculative")  # the card is flagged too
    assert "no (from token 2)" in markdown_table(result)


def test_mismatch_where_one_output_stops_early():
    result = synthetic_result(
        speculative={"token_ids": [1, 2]}, identical=False, first_divergence=2
    )
    assert "(ends here)" in render_verdict(result, PIECES)


def test_columns_show_timing_method_counts_and_segments():
    segments = [{"start_s": 0.0, "end_s": 1.5, "text": "ask not"}]
    result = synthetic_result(baseline={"segments": segments}, speculative={"segments": segments})
    base = render_side(result, "baseline")
    assert "median of 3 after warm-up, device synchronized" in base
    assert "runs: 2.100, 2.000, 1.900 s" in base
    assert "[0.00–1.50]" in base and "ask not" in base
    spec = render_side(result, "speculative")
    assert "66.7%" in spec and "2 of 3 drafted tokens" in spec and "2.00×" in spec
    assert "Tokens per main forward" in spec


def test_half_precision_says_it_can_change_a_token():
    assert precision_note("float32") == ""
    for dtype in ("float16", "bfloat16"):
        html = render_verdict(synthetic_result(dtype=dtype), PIECES)
        assert f"Run in {dtype}: half precision can change a token" in html
        assert "γ + 1 rows rounds differently from the baseline&#x27;s one-row steps" in html
    assert "half precision" not in render_verdict(synthetic_result(), PIECES)
