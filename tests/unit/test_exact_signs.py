"""Floating-point noise never flips a verdict (issue 24 item 4; docs/statistics.md#exact-comparisons).

Where a sign or a threshold decides, figures from counts are compared as exact rationals and continuous
figures with a stated tolerance (:mod:`harness.analysis.exact`). Each test sits on a boundary: exactly at
it, and one ulp (or one count) either side.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from harness.analysis import contributions, exact, stats
from harness.analysis.curtail import curtailment, remaining_trials
from harness.analysis.decide import decide
from harness.analysis.estimates import analyze
from harness.analysis.observations import DecisionContext, Observation, provenance_by_arm
from harness.analysis.reasons import ReasonCode
from harness.analysis.rules import SIGN_FLIP_BELOW_TASKS, cost_limit, evidence_label, interval_rule, point_rule
from harness.records import Arm, Outcome
from harness.study.config import DecisionSettings

POINT = DecisionSettings(rule="point")
INTERVAL = DecisionSettings(rule="interval")
TOL = exact.TOLERANCE
UP, DOWN = math.inf, -math.inf


def counts_obs(spec: dict[str, tuple[tuple[int, int], tuple[int, int]]], runs: int = 3,
               skill_cost: float = 0.01, base_cost: float = 0.01) -> list[Observation]:  # fmt: skip
    """``{task: ((skill passes, valid), (baseline passes, valid))}``; a task's trials short of ``runs`` are
    infrastructure errors before any request (they leave every denominator)."""
    out = []
    for task, per_arm in spec.items():
        arms: tuple[tuple[Arm, tuple[int, int], float], ...] = (
            ("skill", per_arm[0], skill_cost),
            ("baseline", per_arm[1], base_cost),
        )
        for arm, (k, n), cost in arms:
            for j in range(runs):
                outcome: Outcome = "pass" if j < k else "fail" if j < n else "infra"
                out.append(Observation(task, arm, outcome, cost if outcome != "infra" else 0.0))
    return out


def context(tasks: int, runs: int = 3) -> DecisionContext:
    return DecisionContext(False, provenance_by_arm({"model": "m"}), runs,
                           planned_task_ids=frozenset(f"t{i}" for i in range(tasks)))  # fmt: skip


# The six tasks: per-task differences -1/3, -1/2, -1/3, 0, +1, 0 sum to exactly 0.
SIX = {
    "t0": ((2, 3), (2, 2)),
    "t1": ((0, 2), (1, 2)),
    "t2": ((2, 2), (3, 3)),
    "t3": ((3, 3), (3, 3)),
    "t4": ((3, 3), (0, 3)),
    "t5": ((1, 3), (1, 2)),
}


def test_task_differences_that_sum_to_zero_have_no_direction() -> None:
    # reproduced first: the mean was -9.25e-18 and POOLED_TASK_DISAGREE made the point rule's adopt inconclusive
    a = analyze(counts_obs(SIX), POINT)
    assert a.paired.exact_mean == 0 and a.paired.mean == 0.0
    assert a.exact_pooled_difference == Fraction(11, 16) - Fraction(2, 3) > 0
    d = decide(a, POINT, context(6))
    assert ReasonCode.POOLED_TASK_DISAGREE not in d.codes
    assert d.verdict == "adopt" and d.point_only_adopt  # the point rule's verdict, shown amber
    assert (a.tasks_improved, a.tasks_worse, a.tasks_tied) == (1, 3, 2)


def test_a_task_weighted_difference_one_count_below_zero_still_disagrees() -> None:
    # positive control two counts away: baseline t1 2/2 and t3 2/3 make the mean -1/36 while pooled is +1/48
    spec = {**SIX, "t1": ((0, 2), (2, 2)), "t3": ((3, 3), (2, 3))}
    a = analyze(counts_obs(spec), POINT)
    assert a.paired.exact_mean == Fraction(-1, 36) and a.exact_pooled_difference == Fraction(1, 48)
    assert ReasonCode.POOLED_TASK_DISAGREE in decide(a, POINT, context(6)).codes


def test_curtailment_agrees_with_the_decision_on_a_mean_of_exactly_zero() -> None:
    # before: the bounds of the task-weighted mean were floats around -9e-18, so a gate "could fire"
    a = analyze(counts_obs(SIX), POINT.model_copy(update={"early_stop": "curtail"}))
    done = remaining_trials(a, 3, [f"t{i}" for i in range(6)])
    done = {arm: dict.fromkeys(tasks, 0) for arm, tasks in done.items()}
    assert curtailment(a, done, POINT, max_cost_per_trial=1.0) == "adopt"


@pytest.mark.parametrize(
    ("threshold", "value", "above", "below"),
    [
        (0.0, 0.0, False, False),
        (0.0, math.nextafter(0.0, UP), False, False),  # noise: 5e-324
        (0.0, -1e-17, False, False),
        (0.0, TOL, False, False),  # at the tolerance: still at the threshold
        (0.0, math.nextafter(TOL, UP), True, False),
        (0.0, -TOL, False, False),
        (0.0, math.nextafter(-TOL, DOWN), False, True),
        (1.5, 1.5, False, False),
        (1.5, math.nextafter(1.5, UP), False, False),
        (1.5, math.nextafter(1.5, DOWN), False, False),
        (1.5, 1.5 + 1.5 * TOL, False, False),  # relative beyond 1
        (1.5, math.nextafter(1.5 + 1.5 * TOL, UP), True, False),
        (1.5, math.nextafter(1.5 - 1.5 * TOL, DOWN), False, True),
    ],
)
def test_the_tolerance_at_a_threshold_and_one_ulp_either_side(
    threshold: float, value: float, above: bool, below: bool
) -> None:
    assert exact.above(value, threshold) is above
    assert exact.below(value, threshold) is below
    assert exact.at_most(value, threshold) is not above
    assert exact.at_least(value, threshold) is not below


def test_no_figure_is_never_above_or_below() -> None:
    for value in (None, math.nan):
        assert not (exact.above(value, 0.0) or exact.below(value, 0.0) or exact.at_most(value, 0.0))


def test_preregistered_figures_are_the_decimals_written() -> None:
    assert exact.decimal(0.2) == Fraction(1, 5) and exact.alpha(0.95) == Fraction(1, 20)
    assert 1.0 - 0.95 != 0.05  # what the float arithmetic gave
    assert cost_limit(DecisionSettings(cost_increase_max=0.1)) == 1.1
    with pytest.raises(ValueError, match="finite"):
        exact.decimal(math.inf)


# ------------------------------------------------------------------------------- the point rule


def ratio(cost: float) -> stats.CostRatio:
    return stats.CostRatio(cost, stats.Interval(cost, cost), 1.0, 1.0, 6)


def test_equal_pass_rates_from_different_counts_tie_and_one_more_pass_wins() -> None:
    tie = point_rule(Fraction(1, 3), Fraction(2, 6), ratio(1.0), POINT)
    assert tie.verdict == "reject" and ReasonCode.NOT_BETTER in [r.code for r in tie.reasons]
    ahead = point_rule(Fraction(7, 21) + Fraction(1, 10**9), Fraction(1, 3), ratio(1.0), POINT)
    assert ahead.verdict == "adopt"


def test_a_cost_ratio_at_the_limit_up_to_float_noise_is_within_it() -> None:
    # 0.045 / 0.03 is 1.5000000000000002 in floats: it used to be "cost ratio 1.50 > 1.50", a reject
    obs = counts_obs({f"t{i}": ((3, 3), (0, 3)) for i in range(6)}, skill_cost=0.045, base_cost=0.03)
    a = analyze(obs, POINT)
    assert a.cost.ratio is not None and a.cost.ratio > 1.5
    d = decide(a, POINT, context(6))
    assert d.verdict == "adopt" and ReasonCode.COST_OK in d.codes
    for over in (math.nextafter(1.5 + 1.5 * TOL, UP), 1.5 + 1e-6):  # one ulp past the tolerance, and a real excess
        assert point_rule(Fraction(1), Fraction(0), ratio(over), POINT).verdict == "reject"
    assert point_rule(Fraction(1), Fraction(0), ratio(1.5 + 1.5 * TOL), POINT).verdict == "adopt"


# ---------------------------------------------------------------------------- the interval rule


def paired(low: float, high: float, n: int = SIGN_FLIP_BELOW_TASKS) -> stats.MeanInterval:
    return stats.MeanInterval((low + high) / 2, stats.Interval(low, high), 0.1, n)


@pytest.mark.parametrize(
    ("low", "significant"),
    [(0.0, False), (1e-17, False), (TOL, False), (math.nextafter(TOL, UP), True), (0.01, True)],
)
def test_a_lower_bound_at_zero_up_to_noise_does_not_exclude_zero(low: float, significant: bool) -> None:
    result = interval_rule(paired(low, 0.3), ratio(1.0), 0.1, INTERVAL, sign_flip_p=0.001)
    assert (ReasonCode.GAIN_SIGNIFICANT in [r.code for r in result.reasons]) is significant
    assert result.verdict == ("adopt" if significant else "inconclusive")
    assert (evidence_label(paired(low, 0.3)) == "supported") is significant


@pytest.mark.parametrize(
    ("high", "small"),
    [(0.05, False), (math.nextafter(0.05, DOWN), False), (0.05 - TOL, False),
     (math.nextafter(0.05 - TOL, DOWN), True)],
)  # fmt: skip
def test_an_upper_bound_at_the_minimum_worthwhile_gain_is_not_below_it(high: float, small: bool) -> None:
    result = interval_rule(paired(-0.3, high), ratio(1.0), 0.1, INTERVAL)
    assert (result.verdict == "reject") is small


def test_the_sign_flip_p_is_compared_with_the_alpha_written() -> None:
    # 5 tasks all improved: p = 2/32 = 1/16; confidence 0.9375 means alpha = 1/16 exactly: p <= alpha adopts
    settings = DecisionSettings(rule="interval", confidence=0.9375)
    at = interval_rule(paired(0.1, 0.3, n=5), ratio(1.0), 0.1, settings, sign_flip_p=1 / 16)
    assert at.verdict == "adopt"
    past = interval_rule(paired(0.1, 0.3, n=5), ratio(1.0), 0.1, settings, sign_flip_p=math.nextafter(1 / 16, UP))
    assert past.verdict == "inconclusive" and ReasonCode.SIGN_FLIP_REQUIRED in [r.code for r in past.reasons]


# ------------------------------------------------------------------------------------ the gates


def coded(spec: dict[str, tuple[str, str]]) -> list[Observation]:
    """``{task: (skill codes, baseline codes)}``: P pass, F fail, U unknown, I infra before any request."""
    names = {"P": "pass", "F": "fail", "U": "unknown", "I": "infra"}
    return [
        Observation(task, arm, names[c], 0.01)  # type: ignore[arg-type]
        for task, both in spec.items()
        for arm, codes in zip(("skill", "baseline"), both, strict=True)
        for c in codes
    ]


def test_infra_shares_exactly_the_limit_apart_are_not_imbalanced() -> None:
    # 8/20 - 6/20 is 0.10000000000000003 in floats, above the default limit of 0.1; exactly it is at the limit
    spec = {"t0": ("IIPF", "IIPF"), "t1": ("IIPF", "IPFP"), "t2": ("IIP", "IPF"), "t3": ("IIF", "IFP"),
            "t4": ("PFP", "IPF"), "t5": ("PFF", "PFF")}  # fmt: skip
    at = analyze(coded(spec), INTERVAL)
    assert at.skill.infra_share - at.baseline.infra_share > INTERVAL.max_infra_imbalance
    assert at.skill.exact_infra_share - at.baseline.exact_infra_share == Fraction(1, 10)
    assert ReasonCode.INFRA_IMBALANCE not in decide(at, INTERVAL, context(6, runs=4)).codes
    over = analyze(coded({**spec, "t5": ("IFF", "PFF")}), INTERVAL)  # 9/20 vs 6/20
    assert ReasonCode.INFRA_IMBALANCE in decide(over, INTERVAL, context(6, runs=4)).codes


def test_a_missing_share_exactly_at_the_cap_is_not_over_it() -> None:
    # 6 unknown of 30 is 1/5, the default cap: not over it; 7 of 31 is
    spec = {f"t{i}": ("PFPFU", "PFPFP") for i in range(6)}
    at = analyze(coded(spec), POINT)
    assert at.skill.exact_missing_share == Fraction(1, 5)
    assert ReasonCode.TOO_MANY_MISSING not in decide(at, POINT, context(6, runs=5)).codes
    over = analyze(coded({**spec, "t0": ("PFPFUU", "PFPFPP")}), POINT)
    assert ReasonCode.TOO_MANY_MISSING in decide(over, POINT, context(6, runs=5)).codes


# ----------------------------------------------------------------------------------- libraries


def test_a_coefficient_at_zero_up_to_noise_is_not_selected() -> None:
    def fit(betas: list[float]) -> contributions.LibraryFit:
        est = tuple(
            contributions.SkillEstimate(
                skill=f"s{i}",
                beta=b,
                se_hc3=0.1,
                se_classical=0.1,
                ci_low=b - 0.1,
                ci_high=b + 0.1,
                masked_mean=0.5,
                bare_mean=0.5,
                delta_mean=0.0,
                n_with=3,
                p_value=0.5,
                p_holm=0.5,
            )
            for i, b in enumerate(betas)
        )
        return contributions.LibraryFit(skills=tuple(e.skill for e in est), estimates=est, n=8, df_resid=4, rss=1.0,
                                        condition_number=1.0, n_boot=2000, seed=0, alpha=0.05, observations=())  # fmt: skip

    chosen = contributions.select(fit([1e-17, TOL, math.nextafter(TOL, UP), 0.2]), top_k=4, method="positive")
    assert chosen == ("s3", "s2")
