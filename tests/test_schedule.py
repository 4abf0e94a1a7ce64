"""The gamma schedules: when drafting pays and when it stops, probes after switching off, costs
from measured steps, and the one rule for where a draft stops itself. Counts and seconds only,
no models."""

from __future__ import annotations

import pytest

from specwhisper.schedule import DRAFT_CONFIDENCE, GammaSchedule, draft_stops_early


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
