"""Several variants against one baseline (A/B/n): Holm's correction across the family, and its verdict (pure).

Each variant is compared with the shared baseline exactly as a two-arm run is (``analyze`` then
``decide`` on the variant's trials and the baseline's); this module only adds what the family needs:

* one p-value per comparison, the test the interval rule's adoption rests on
  (:func:`comparison_p_value`): the two-sided paired t-test read off the rule's own interval, and below
  :data:`~harness.analysis.rules.SIGN_FLIP_BELOW_TASKS` tasks the larger of that and the exact sign-flip p
  (the rule needs both there);
* Holm's step-down adjustment of those p-values (:func:`holm`, checked against statsmodels'
  ``multipletests(method="holm")`` in the tests);
* each variant's corrected verdict (with two or more variants): an ``adopt`` stands only when its Holm-adjusted
  p <= alpha, otherwise it becomes ``inconclusive`` (HOLM_NOT_SIGNIFICANT); every other verdict is kept;
* the family's verdict (:func:`decide_family`): ``invalid`` when any comparison is invalid (they share the
  baseline, so the correction would be over a broken family); else the *best* variant is the one with the
  largest paired gain among those not rejected, and the family adopts it only when its corrected verdict is
  adopt; ``reject`` when every variant is rejected; otherwise ``inconclusive`` (FAMILY_BEST_NOT_ADOPTED names
  any other variant that did survive the correction, since adopting it would pick a variant whose estimated
  gain is smaller than one the data could not yet tell apart from noise).

With one variant the family is that comparison: Holm's adjustment of one p-value is the p-value itself, and
the family verdict is the comparison's (the point rule's adoption then needs nothing more). With two or more,
adoption needs the corrected interval evidence under either rule: the point rule alone adopts a skill that does
nothing about half the time, and across n variants nearly always.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as _scipy_stats

from harness import fmt
from harness.analysis import exact, stats
from harness.analysis.decide import DecisionResult, Verdict
from harness.analysis.estimates import Analysis
from harness.analysis.reasons import Reason, ReasonCode
from harness.analysis.rules import SIGN_FLIP_BELOW_TASKS


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (monotone, capped at 1), in the input order.

    Sorted ascending, the i-th (from 0) of m is multiplied by m - i, then a running maximum keeps the
    adjusted values in the raw order; ties keep their input order (the result does not depend on it).
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def interval_p_value(paired: stats.MeanInterval, confidence: float) -> float:
    """The two-sided p-value of "mean gain = 0" from the t-interval the rule reads, so that p < alpha exactly
    when that interval excludes 0.

    The standard error is read off the interval's half-width (it may use the within-task variance floor,
    :func:`harness.analysis.stats.paired_difference_counts`), not recomputed from the observed sd. No usable
    task or an infinite interval (one task) gives 1; a zero-width interval gives 0 for a non-zero gain.
    """
    mean = paired.mean
    if mean is None or paired.n < 2:
        return 1.0
    half = (paired.interval.high - paired.interval.low) / 2.0
    if not math.isfinite(half):
        return 1.0
    if half == 0.0:
        return 0.0 if mean != 0.0 else 1.0
    q = stats.t_quantile(1.0 - (1.0 - confidence) / 2.0, paired.df)
    t = abs(mean) * q / half
    return float(min(1.0, 2.0 * _scipy_stats.t.sf(t, paired.df)))


def comparison_p_value(analysis: Analysis) -> float:
    """The p-value the interval rule's adoption rests on for one comparison: the interval's t-test, and below
    :data:`SIGN_FLIP_BELOW_TASKS` paired tasks the larger of it and the exact sign-flip p (the rule adopts
    only when both are <= alpha, so their maximum is the test's p-value)."""
    p = interval_p_value(analysis.paired, analysis.confidence)
    if analysis.paired.n < SIGN_FLIP_BELOW_TASKS:
        sf = analysis.sign_flip.p_value
        p = max(p, 1.0 if sf is None else sf)
    return p


@dataclass(frozen=True)
class Comparison:
    """One variant against the shared baseline: the two-arm analysis and decision of that pair."""

    variant: str
    analysis: Analysis
    decision: DecisionResult


@dataclass(frozen=True)
class MemberVerdict:
    """One variant's place in the family: its own verdict, its p-values and its verdict after the correction."""

    variant: str
    gain: float | None
    """The paired gain over the baseline (task-weighted mean difference)."""
    p_value: float
    p_holm: float
    own_verdict: Verdict
    """The comparison's verdict on its own (:func:`harness.analysis.decide.decide`)."""
    verdict: Verdict
    """After Holm's correction: ``adopt`` only when ``p_holm`` <= alpha."""
    reasons: tuple[Reason, ...]
    """What the correction added (empty when it changed nothing)."""


@dataclass(frozen=True)
class FamilyResult:
    """The family's verdict, the variant it adopts (if any), and each member's corrected verdict."""

    verdict: Verdict
    members: tuple[MemberVerdict, ...]
    best: str | None
    """The variant with the largest paired gain among those not rejected (None when all are rejected or invalid)."""
    adopted: str | None
    """The variant the family adopts: ``best`` when its corrected verdict is adopt, else None."""
    alpha: float
    reasons: tuple[Reason, ...]

    def member(self, variant: str) -> MemberVerdict:
        return next(m for m in self.members if m.variant == variant)


def _member(c: Comparison, p: float, p_adj: float, alpha: float, size: int) -> MemberVerdict:
    own = c.decision.verdict
    reasons: list[Reason] = []
    verdict = own
    # p and alpha are floats from scipy and a decimal the user wrote: compare as the rules do (exact margins)
    if size > 1 and own == "adopt" and not exact.at_most(p_adj, alpha):
        verdict = "inconclusive"
        reasons.append(
            Reason(
                ReasonCode.HOLM_NOT_SIGNIFICANT,
                f"{c.variant}: adopts on its own (p = {fmt.p_value(p)}), but its Holm-adjusted p = "
                f"{fmt.p_value(p_adj)} across {size} variants is > {alpha:g}",
                "inconclusive",
            )
        )
    return MemberVerdict(c.variant, c.analysis.paired.mean, p, p_adj, own, verdict, tuple(reasons))


def decide_family(comparisons: Sequence[Comparison], confidence: float) -> FamilyResult:
    """The family's verdict over variant-vs-baseline comparisons sharing one baseline (see the module doc)."""
    if not comparisons:
        raise ValueError("a family needs at least one variant")
    names = [c.variant for c in comparisons]
    if len(set(names)) != len(names):
        raise ValueError(f"variant names repeat: {names}")
    alpha = float(exact.alpha(confidence))
    raw = [comparison_p_value(c.analysis) for c in comparisons]
    adjusted = holm(raw)
    members = tuple(
        _member(c, p, q, alpha, len(comparisons)) for c, p, q in zip(comparisons, raw, adjusted, strict=True)
    )
    reasons: list[Reason] = [r for m in members for r in m.reasons]
    invalid = [m.variant for m in members if m.verdict == "invalid"]
    if invalid:
        reasons.append(
            Reason(
                ReasonCode.FAMILY_MEMBER_INVALID,
                f"the comparison of {', '.join(invalid)} with the baseline is invalid; the family shares that "
                "baseline, so no variant is chosen",
                "invalid",
            )
        )
        return FamilyResult("invalid", members, None, None, alpha, tuple(reasons))
    open_ = [m for m in members if m.verdict != "reject"]
    if not open_:
        return FamilyResult("reject", members, None, None, alpha, tuple(reasons))
    # largest gain first; a variant without a gain estimate ranks last; ties keep the preregistered order
    best = max(open_, key=lambda m: -math.inf if m.gain is None else m.gain)
    if best.verdict == "adopt":
        return FamilyResult("adopt", members, best.variant, best.variant, alpha, tuple(reasons))
    others = [m.variant for m in members if m.verdict == "adopt"]
    if others:
        reasons.append(
            Reason(
                ReasonCode.FAMILY_BEST_NOT_ADOPTED,
                f"{', '.join(others)} adopts after the correction, but {best.variant} has the larger estimated gain "
                f"({fmt.pp(best.gain)}) and is not distinguishable from the baseline yet; run more tasks to choose",
                "inconclusive",
            )
        )
    return FamilyResult("inconclusive", members, best.variant, None, alpha, tuple(reasons))
