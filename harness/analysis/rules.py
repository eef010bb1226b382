"""The two preregistrable rules, each on its own: the point rule (the article's) and the interval rule.

* :func:`point_rule`: adopt when the skill's pooled pass rate beats the baseline's (ties reject) and
  the cost ratio stays within 1 + ``cost_increase_max``.
* :func:`interval_rule`: adopt when the paired gain's interval lies above 0 (below
  :data:`SIGN_FLIP_BELOW_TASKS` tasks the exact sign-flip test must agree) and the cost ratio's
  interval stays within the limit; reject when the gain's interval lies below the minimum
  worthwhile gain or the cost certainly exceeds the limit; otherwise inconclusive.

Each returns its verdict with the findings (``rule`` reasons) behind it; which rule decides, and
which gates override it, is :func:`harness.analysis.decide.decide`'s. The design thresholds every
rule shares (:data:`MIN_TASKS`, :data:`MIN_ADOPT_TASKS`) live here too.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Generic, Literal, NamedTuple, TypeVar

from harness import fmt
from harness.analysis import exact, stats
from harness.analysis.reasons import Reason, ReasonCode
from harness.study.config import DecisionSettings

PointVerdict = Literal["adopt", "reject"]
IntervalVerdict = Literal["adopt", "reject", "inconclusive"]
Evidence = Literal["supported", "contradicted", "not distinguishable from noise"]

MIN_TASKS = 2
"""Fewer tasks with valid trials in both arms than this: no variance estimate, so no verdict."""
MIN_ADOPT_TASKS = 6
"""Fewer paired tasks than this: no rule may adopt (the verdict becomes inconclusive)."""
SIGN_FLIP_BELOW_TASKS = 10
"""Below this many paired tasks the interval rule also needs the exact sign-flip p <= alpha to adopt."""

V = TypeVar("V")
Rate = Fraction | float
"""A pass rate: exact (``Fraction(k, n)``, what the decision passes) or a float (tests, simulations). Two
rates are compared exactly either way; the decision passes both exact, so equal ``k/n`` tie."""


def sign_flip_can_pass(tasks: int, confidence: float) -> bool:
    """Whether ``tasks`` paired tasks can meet the small-sample rule at two-sided ``confidence``: below
    :data:`SIGN_FLIP_BELOW_TASKS` adoption also needs the exact sign-flip p <= alpha, and with m tasks
    p >= 2 / 2^m (the observed signs and their mirror image both count). Exact: 2^(1-m) against the alpha
    of the decimal confidence (:func:`harness.analysis.exact.alpha`)."""
    return tasks >= SIGN_FLIP_BELOW_TASKS or Fraction(2) ** (1 - tasks) <= exact.alpha(confidence)


def fewest_tasks_to_adopt(confidence: float) -> int:
    """The fewest paired tasks that can ever adopt at two-sided ``confidence``: at least
    :data:`MIN_ADOPT_TASKS`, and enough for the sign-flip floor (6 at 95%; 7 at a Pocock look's 97.8%)."""
    tasks = MIN_ADOPT_TASKS
    while not sign_flip_can_pass(tasks, confidence):
        tasks += 1
    return tasks


class RuleResult(NamedTuple, Generic[V]):
    """A rule's verdict on the data and the findings behind it."""

    verdict: V
    reasons: list[Reason]


def _plain_ratio(x: float | None) -> str:
    """A cost ratio as the reasons quote it, beside a bare threshold: ``1.23`` (no ``x``)."""
    return fmt.ratio(x, suffix="")


def evidence_label(paired: stats.MeanInterval) -> Evidence:
    """supported if the paired lower bound > 0, contradicted if the upper bound < 0, else noise (a bound
    within :data:`harness.analysis.exact.TOLERANCE` of 0 is at 0)."""
    if paired.mean is not None and exact.above(paired.interval.low, 0.0):
        return "supported"
    if paired.mean is not None and exact.below(paired.interval.high, 0.0):
        return "contradicted"
    return "not distinguishable from noise"


def cost_limit(settings: DecisionSettings) -> float:
    """1 + cost_increase_max: the largest cost ratio the rules accept (a ratio within
    :data:`harness.analysis.exact.TOLERANCE` of it is at it)."""
    return float(1 + exact.decimal(settings.cost_increase_max))


def _pct(rate: Rate) -> str:
    return fmt.pct(float(rate), 1)


def point_rule(
    skill_rate: Rate | None,
    baseline_rate: Rate | None,
    cost: stats.CostRatio,
    settings: DecisionSettings,
    counts: tuple[str, str] = ("", ""),
) -> RuleResult[PointVerdict | None]:
    """Adopt when the skill's pooled pass rate beats the baseline's (compared exactly: ties reject) and
    the cost ratio is at most the limit (up to :data:`harness.analysis.exact.TOLERANCE`)."""
    threshold = cost_limit(settings)
    if skill_rate is None or baseline_rate is None or cost.ratio is None:
        return RuleResult(
            None,
            [
                Reason(
                    ReasonCode.NO_VALID_TRIALS,
                    "an arm has no valid (pass/fail) trial: the point rule cannot compare",
                    "rule",
                ),
            ],
        )
    reasons: list[Reason] = []
    skill_n, base_n = (f" ({c})" if c else "" for c in counts)
    better = skill_rate > baseline_rate
    if better:
        reasons.append(
            Reason(
                ReasonCode.SKILL_BETTER,
                f"skill pass rate {_pct(skill_rate)}{skill_n} > baseline {_pct(baseline_rate)}{base_n}",
                "rule",
            )
        )
    else:
        reasons.append(
            Reason(
                ReasonCode.NOT_BETTER,
                f"skill pass rate {_pct(skill_rate)}{skill_n} does not beat baseline {_pct(baseline_rate)}{base_n} "
                "(ties reject)",
                "rule",
            )
        )
    cost_ok = exact.at_most(cost.ratio, threshold)
    if cost_ok:
        reasons.append(
            Reason(ReasonCode.COST_OK, f"cost ratio {_plain_ratio(cost.ratio)} <= {_plain_ratio(threshold)}", "rule")
        )
    else:
        reasons.append(
            Reason(
                ReasonCode.COST_TOO_HIGH, f"cost ratio {_plain_ratio(cost.ratio)} > {_plain_ratio(threshold)}", "rule"
            )
        )
    return RuleResult("adopt" if better and cost_ok else "reject", reasons)


def interval_rule(
    paired: stats.MeanInterval,
    cost: stats.CostRatio,
    mde: float,
    settings: DecisionSettings,
    sign_flip_p: float | None = None,
) -> RuleResult[IntervalVerdict]:
    threshold = cost_limit(settings)
    level = f"{round(100 * settings.confidence, 2):g}%"  # 95%; a group-sequential look's 99.44%
    reasons: list[Reason] = []
    iv = paired.interval
    gain_sig = paired.mean is not None and exact.above(iv.low, 0.0)
    alpha = exact.alpha(settings.confidence)
    # p is an exact dyadic rational (a share of 2^n sign vectors), alpha the decimal the user wrote: exact
    if gain_sig and paired.n < SIGN_FLIP_BELOW_TASKS and (sign_flip_p is None or sign_flip_p > alpha):
        # Below 10 tasks the t-interval alone is not trusted: the exact sign-flip test must agree.
        gain_sig = False
        reasons.append(
            Reason(
                ReasonCode.SIGN_FLIP_REQUIRED,
                f"the interval of the gain {fmt.interval(iv)} excludes 0, but with {paired.n} tasks (< {SIGN_FLIP_BELOW_TASKS}) "
                f"adoption also needs the exact sign-flip p <= {float(alpha):g} (p = " + fmt.p_value(sign_flip_p) + ")",
                "rule",
            )
        )
    gain_small = paired.mean is not None and exact.below(iv.high, settings.min_worthwhile_gain)
    if gain_sig:
        reasons.append(
            Reason(
                ReasonCode.GAIN_SIGNIFICANT, f"the {level} interval of the gain {fmt.interval(iv)} excludes 0", "rule"
            )
        )
    if gain_small:
        reasons.append(
            Reason(
                ReasonCode.GAIN_BELOW_MINIMUM,
                f"the {level} interval of the gain {fmt.interval(iv)} lies below the minimum worthwhile gain "
                f"{fmt.pp(settings.min_worthwhile_gain)}",
                "rule",
            )
        )
    if not gain_sig and not gain_small and not reasons:
        reasons.append(
            Reason(
                ReasonCode.UNDERPOWERED,
                f"the {level} interval of the gain {fmt.interval(iv)} includes 0 and reaches the minimum worthwhile gain "
                f"{fmt.pp(settings.min_worthwhile_gain)}; this design detects gains of about {fmt.pp(mde)} (MDE)",
                "rule",
            )
        )
    civ = cost.interval
    cost_ok = cost.ratio is not None and exact.at_most(civ.high, threshold)
    cost_high = cost.ratio is not None and exact.above(civ.low, threshold)
    if cost_ok:
        reasons.append(
            Reason(
                ReasonCode.COST_OK,
                f"cost ratio {_plain_ratio(cost.ratio)} {fmt.interval(civ, _plain_ratio)} stays <= {_plain_ratio(threshold)}",
                "rule",
            )
        )
    elif cost_high:
        reasons.append(
            Reason(
                ReasonCode.COST_TOO_HIGH,
                f"cost ratio {_plain_ratio(cost.ratio)} {fmt.interval(civ, _plain_ratio)} > {_plain_ratio(threshold)}",
                "rule",
            )
        )
    else:
        reasons.append(
            Reason(
                ReasonCode.COST_UNCERTAIN,
                f"cost ratio {_plain_ratio(cost.ratio)} {fmt.interval(civ, _plain_ratio)} crosses {_plain_ratio(threshold)}",
                "rule",
            )
        )
    # A gain certainly below the preregistered minimum is not worth adopting even if it is certainly > 0.
    if gain_small or cost_high:
        return RuleResult("reject", reasons)
    if gain_sig and cost_ok:
        return RuleResult("adopt", reasons)
    return RuleResult("inconclusive", reasons)


def rule_verdict(
    settings: DecisionSettings,
    skill_rate: Rate | None,
    baseline_rate: Rate | None,
    paired: stats.MeanInterval,
    cost: stats.CostRatio,
    mde: float,
    sign_flip_p: float | None = None,
) -> PointVerdict | IntervalVerdict | None:
    if settings.rule == "point":
        return point_rule(skill_rate, baseline_rate, cost, settings).verdict
    return interval_rule(paired, cost, mde, settings, sign_flip_p).verdict
