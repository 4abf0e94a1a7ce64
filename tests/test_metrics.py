"""What the runs mean: Leviathan's formula, the predictions, pooled runs, and every ratio
through one function. Real DecodeResults built by hand; nothing is decoded."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from specwhisper import metrics
from specwhisper.decoding import DecodeResult
from specwhisper.loop import DraftStep


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


def test_every_ratio_is_the_slower_time_over_the_subjects():
    assert metrics.ratio(3.0, 1.5) == 2.0
    assert metrics.ratio(3.0, 0.0) is None  # the subject unmeasured
    assert metrics.times_faster(1.0, 0.0) == 0.0
    assert metrics.per_second(10, 2.0) == 5.0 and metrics.per_second(10, 0.0) == 0.0


def test_metrics_imports_nothing_from_the_package():
    """It reads runs by field name (its protocols), so any layer can use it."""
    tree = ast.parse(inspect.getsource(metrics))
    modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in modules if m.startswith("specwhisper")]
