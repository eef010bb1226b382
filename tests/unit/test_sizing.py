"""One power function: the report's smallest detectable effect, ``skilltrial plan``'s sizing and the advice
after an inconclusive run all come from :func:`harness.analysis.stats.power`."""

from __future__ import annotations

import json
import math

import pytest
from statsmodels.stats.power import TTestPower

from harness.analysis import sizing, stats
from harness.analysis.rules import MIN_ADOPT_TASKS
from harness.reporting.decision_json import decision_json, dumps
from harness.reporting.html import render
from harness.reporting.markdown import markdown
from harness.reporting.model import ReportInput, build_input, cost_per_trial, next_experiment, next_experiment_text
from harness.reporting.text import terminal_summary
from harness.study.config import DecisionSettings, Preregistration
from tests import reportkit as kit
from tests.factories import LOCK, outcome_records

PILOT = stats.Variances(0.15, 0.11, 0.02)


@pytest.mark.parametrize(("tasks", "runs"), [(6, 1), (10, 3), (20, 3), (50, 5)])
@pytest.mark.parametrize("variances", [stats.DEFAULT_VARIANCES, PILOT])
def test_the_mde_is_the_power_functions_inverse_at_80_percent(
    tasks: int, runs: int, variances: stats.Variances
) -> None:
    m = stats.mde(tasks, runs, variances=variances)
    assert stats.power(m, tasks, runs, variances=variances) == pytest.approx(0.8, abs=1e-12)
    assert (
        stats.power(m * 0.99, tasks, runs, variances=variances)
        < 0.8
        < stats.power(m * 1.01, tasks, runs, variances=variances)
    )


def test_the_power_function_is_the_t_tests_and_close_to_the_noncentral_t_of_statsmodels() -> None:
    """Miller's approximation (a shifted central t) against statsmodels' exact one-sided noncentral-t power of
    the same test on the per-task differences: within 0.01 from 50% power up."""
    for tasks, runs in ((10, 3), (20, 3), (20, 1), (50, 3)):
        sd = math.sqrt(0.25 / runs)  # the default variances, omega2 = 0
        for effect in (0.1, 0.2, 0.3):
            ours = stats.power(effect, tasks, runs)
            exact = TTestPower().power(effect_size=effect / sd, nobs=tasks, alpha=0.025, alternative="larger")
            if exact >= 0.5:
                assert ours == pytest.approx(exact, abs=0.01), (tasks, runs, effect)
    assert stats.power(0.0, 20, 3) == pytest.approx(0.025, abs=1e-12), "a null gain is 'detected' at alpha/2"
    assert stats.power(0.3, 1, 3) == 0.0 and stats.power(0.3, 5, 0) == 0.0


@pytest.mark.parametrize(("gain", "runs", "variances"), [(0.2, 3, stats.DEFAULT_VARIANCES), (0.12, 1, PILOT),
                                                          (0.3, 5, PILOT), (0.05, 3, stats.DEFAULT_VARIANCES)])  # fmt: skip
def test_tasks_needed_is_the_smallest_suite_that_reaches_80_percent(
    gain: float, runs: int, variances: stats.Variances
) -> None:
    n = sizing.tasks_needed(gain, runs, alpha=0.05, variances=variances)
    assert n is not None
    brute = next(
        t for t in range(MIN_ADOPT_TASKS, 20_000) if stats.power(gain, t, runs, variances=variances) >= 0.8 - 1e-9
    )
    assert n == brute
    assert stats.mde(n, runs, variances=variances) <= gain < stats.mde(n - 1, runs, variances=variances) or n == 6


def test_the_sizing_never_goes_below_the_adoption_floor_nor_past_the_task_limit() -> None:
    assert sizing.tasks_needed(0.9, 10, alpha=0.05, variances=stats.DEFAULT_VARIANCES) == MIN_ADOPT_TASKS
    assert sizing.tasks_needed(0.0, 3, alpha=0.05, variances=stats.DEFAULT_VARIANCES) is None
    assert sizing.tasks_needed(-0.1, 3, alpha=0.05, variances=stats.DEFAULT_VARIANCES) is None
    assert sizing.tasks_needed(0.001, 3, alpha=0.05, variances=stats.DEFAULT_VARIANCES) is None
    s = sizing.sizing(0.001, 3, alpha=0.05, variances=stats.DEFAULT_VARIANCES, cost_per_trial=0.1)
    assert s.tasks is None and s.trials is None and s.cost_usd is None and s.power < 0.8


def test_no_design_is_smaller_than_the_fewest_tasks_that_can_adopt_at_its_level() -> None:
    """Below 10 tasks adoption needs the exact sign-flip p <= alpha, and p >= 2/2^T: 6 tasks at 0.05, 7 at a
    Pocock design's final look (0.0217), 10 at the first O'Brien-Fleming look (0.0002)."""
    from harness.analysis.rules import fewest_tasks_to_adopt

    pocock = DecisionSettings.model_validate({"rule": "interval", "sequential": {"spending": "pocock"}})
    alpha = sizing.design_alpha(pocock, 3)
    assert fewest_tasks_to_adopt(0.95) == 6 and fewest_tasks_to_adopt(1 - alpha) == 7
    assert fewest_tasks_to_adopt(1 - 0.000207) == 10
    assert sizing.tasks_needed(0.9, 10, alpha=alpha, variances=stats.DEFAULT_VARIANCES) == 7


def test_size_tabulates_runs_and_costs_and_picks_the_fewest_trials() -> None:
    options = sizing.size(0.15, alpha=0.05, variances=PILOT, cost_per_trial=0.5)
    assert [s.runs for s in options] == list(sizing.RUNS_OPTIONS)
    for s in options:
        assert s.tasks is not None and s.cost_usd == pytest.approx(2 * s.tasks * s.runs * 0.5)
        assert s.power >= 0.8
    # with effect heterogeneity more runs stop paying: the cheapest design is not the one with most runs
    best = sizing.cheapest(options)
    assert best is not None and best.trials == min(s.trials or 0 for s in options)
    assert best.runs < 10


def test_a_group_sequential_design_sizes_at_its_final_looks_level() -> None:
    fixed = DecisionSettings(rule="interval")
    seq = DecisionSettings.model_validate({"rule": "interval", "sequential": {}})
    assert sizing.design_alpha(fixed, 3) == pytest.approx(0.05)
    assert sizing.design_alpha(seq, 3) == pytest.approx(2 * 0.023128, abs=1e-5)


# ======================================================================= after an inconclusive run


def _interval(spec: dict[str, tuple[str, str]], **decision: object) -> ReportInput:
    pre = Preregistration.model_validate(
        {"skill": "tidy", "skill_ref": "skill", "execution": {"runs_per_arm": 3},
         "decision": {"rule": "interval", **decision}}
    )  # fmt: skip
    recs = outcome_records(spec, skill_cost=0.05, base_cost=0.05)
    return build_input(
        pre, recs, planned_task_ids=list(spec), skipped_tasks=[], lock_hash=LOCK, experiment_dir="/tmp/x"
    )


PROMISING = {f"t{i}": ("PFF", "PPF") for i in range(6)} | {"t6": ("PPF", "PFF")}
"""Seven tasks, the skill ahead on six: inconclusive (too few tasks to show it), observed gain above 5 points."""


def test_an_inconclusive_report_says_what_a_new_locked_experiment_would_need_in_every_renderer() -> None:
    r = _interval(PROMISING)
    assert r.decision.verdict == "inconclusive"
    nxt = next_experiment(r)
    assert nxt is not None and nxt.basis == "observed difference" and nxt.variances == "this run"
    observed = r.analysis.paired.mean
    assert observed is not None and nxt.design.gain == observed
    expected = sizing.tasks_needed(observed, 3, alpha=0.05, variances=r.analysis.mde_variances)
    assert nxt.design.tasks == expected and nxt.design.runs == 3
    per_trial = cost_per_trial(r)
    assert per_trial is not None and per_trial == pytest.approx(r.spent_usd / 42)
    assert nxt.design.cost_usd == pytest.approx(2 * (expected or 0) * 3 * per_trial)
    assert nxt.at_minimum is not None and nxt.at_minimum.gain == 0.05
    assert (nxt.at_minimum.tasks or 10**9) > (nxt.design.tasks or 0)
    text = next_experiment_text(r)
    assert text is not None
    assert f"about {expected} tasks x 3 runs per arm" in text and "80% power at the observed difference" in text
    assert "separately locked experiment" in text and "never added to it" in text
    for out in (terminal_summary(r), markdown(r), render(r)):
        assert f"about {expected} tasks x 3 runs per arm" in out and "separately locked" in out
    data = json.loads(dumps(decision_json(r)))["next_experiment"]
    assert data["design"]["tasks"] == expected and data["design"]["runs_per_arm"] == 3
    assert data["basis"] == "observed difference" and data["at_minimum_worthwhile_gain"]["gain"] == 0.05
    assert data["text"] == text


def test_a_small_or_negative_difference_is_sized_at_the_minimum_worthwhile_gain() -> None:
    flat = {f"t{i}": ("PFF", "PFF") for i in range(7)}
    r = _interval(flat)
    nxt = next_experiment(r)
    assert r.decision.verdict == "inconclusive" and nxt is not None
    assert nxt.basis == "minimum worthwhile gain" and nxt.design.gain == 0.05 and nxt.at_minimum is None
    assert next_experiment(_interval(flat, min_worthwhile_gain=0.0)) is None, "nothing positive to power"


def test_decided_runs_get_no_advice_and_the_golden_dataset_is_untouched() -> None:
    win = _interval(kit.WIN | {"fix-g": ("FFF", "PPF"), "fix-h": ("PFF", "PPP"), "fix-i": ("FFF", "PPF"),
                               "fix-j": ("PFF", "PPF")})  # fmt: skip
    assert win.decision.verdict == "adopt"
    assert next_experiment(win) is None and "next_experiment" not in decision_json(win)
    assert "next:" not in terminal_summary(win) and "**Next:**" not in markdown(win)
