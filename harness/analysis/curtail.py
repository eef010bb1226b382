"""Early stopping (pure): exact curtailment for the point rule, the futility stop for the interval rule.

:func:`remaining_trials` counts what the plan still calls for. Every check here asks what the **final**
verdict can be over every completion of the plan (docs/statistics.md#curtailment): each remaining trial
may pass, fail, end missing (unknown, truncated, infra after reaching the model) or end as infra before
it, every gate included.

* :func:`curtailment` (point rule, ``early_stop: curtail``): the verdict every completion gives, else None.
* :func:`futility` (interval rule, ``futility_stop``): whether *no* completion can end in adopt, and if so
  what the stop reports: reject when every completion rejects, else inconclusive (``FUTILITY_STOPPED``).
  Its bounds are conservative (a stop may come later than it could, never wrongly); the proof sketch is
  in the docstrings of :func:`futility` and the bound functions, and in docs/statistics.md.
  :func:`interval_stop_accepts` says when the loop acts on it: at once on a certain verdict, and on an
  uncertain inconclusive only when a completion is shown to end inconclusive and the run is not heading
  for a reject (a prediction: it only ever makes a stop wait, which never changes a verdict).

:func:`early_stop_verdict` applies whichever the preregistration armed; the running loop
(harness.experiment), the decision (an early-stopped run is legitimate only when these certify it) and
the simulations all call the same functions. Limits: provenance (an ``invalid`` verdict) and the budget
are not outcomes and are not modelled; certain *adopt* is certified for the point rule only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Literal, NamedTuple

from harness import fmt
from harness.analysis import exact, stats
from harness.analysis.estimates import Analysis, ArmSummary, TaskArm
from harness.analysis.rules import MIN_ADOPT_TASKS, MIN_TASKS, PointVerdict, cost_limit, sign_flip_can_pass
from harness.records import ARMS
from harness.study.config import DecisionSettings

StopVerdict = Literal["adopt", "reject", "inconclusive"]
FutilityVerdict = Literal["reject", "inconclusive"]
Fill = Literal["observed", "worst", "best"]

EPS = exact.TOLERANCE
"""Margin on every bound compared with a threshold, so that rounding in the decision's own arithmetic
(a lower bound computed as 1e-17 instead of 0) can never cross a bound that holds exactly: the decision
compares continuous figures with :data:`harness.analysis.exact.TOLERANCE`, and a bound here keeps that
much further away from the threshold than the verdict it rules out."""


class EarlyStop(NamedTuple):
    """What the preregistered early stop found: the verdict a stop now reports (None: go on) and the trials left."""

    verdict: StopVerdict | None
    remaining: int


class Futility(NamedTuple):
    """The interval rule can no longer adopt: what a stop reports, and how sure that is.

    ``verdict``: reject when every completion of the plan rejects, else inconclusive. ``certain``: every
    completion gives ``verdict`` (so the stop cannot change the final verdict). ``witnessed``: some
    completion gives ``verdict`` (always true for reject; for inconclusive, a completion that trips a gate
    is exhibited, or ``certain``). ``heading_for_reject``: the data so far, carried to the full plan at
    their own rates, would reject (:func:`_heading_for_reject`). ``why``: which bound ruled adoption out.
    The running loop stops only when :func:`interval_stop_accepts` says so.
    """

    verdict: FutilityVerdict
    certain: bool
    witnessed: bool
    why: str
    heading_for_reject: bool = False


def planned_tasks(analysis: Analysis, planned_task_ids: Iterable[str] | None) -> list[str]:
    """The planned task ids, sorted; without a plan, every task with a finished trial."""
    if planned_task_ids is not None:
        return sorted(set(planned_task_ids))
    return [r.task_id for r in analysis.tasks if r.baseline.finished or r.skill.finished]


def early_stop_armed(settings: DecisionSettings, n_planned_tasks: int) -> bool:
    """Whether the preregistration armed an early stop for this plan.

    Point rule: ``early_stop: curtail``. Interval rule: ``futility_stop`` or ``early_stop: curtail``, and
    only for a plan of at least :data:`MIN_ADOPT_TASKS` tasks: a smaller plan cannot adopt whatever its
    data (it is a pilot), so a stop would learn nothing the preregistration did not already say, and it
    runs in full."""
    if settings.rule == "point":
        return settings.early_stop == "curtail"
    return (settings.futility_stop or settings.early_stop == "curtail") and n_planned_tasks >= MIN_ADOPT_TASKS


def interval_stop_accepts(settings: DecisionSettings, found: Futility) -> bool:
    """Whether the interval rule's armed stop acts on ``found`` now.

    Curtailment (``early_stop: curtail`` without ``futility_stop``) only on a certain verdict. The futility
    stop also on an uncertain inconclusive, when it is witnessed (some completion does end inconclusive, so
    the stop never reports a verdict the full plan could not give) and the run is not heading for a reject:
    stopping then would turn the reject the full plan is likely to reach into an inconclusive, so the run
    goes on until the reject is certain, or impossible, or the plan ends. Going on never changes a verdict."""
    if found.certain or not settings.futility_stop:
        return found.certain
    return found.witnessed and not found.heading_for_reject


def early_stop_verdict(
    analysis: Analysis,
    settings: DecisionSettings,
    planned_runs_per_arm: int,
    planned_task_ids: Iterable[str] | None,
    *,
    max_cost_per_trial: float | None,
    levels: Levels | None = None,
) -> EarlyStop:
    """The preregistered early stop: the verdict a stop now reports (None while the run must go on, and
    whenever no stop was armed, :func:`early_stop_armed`), and how many trials remain. Point rule: the
    verdict :func:`curtailment` certifies. Interval rule: the :func:`futility` verdict (at ``levels``),
    when the armed stop accepts it (:func:`interval_stop_accepts`). The same check for the running loop
    and the simulations; a group-sequential design's looks are :mod:`harness.analysis.sequential`'s."""
    remaining = remaining_trials(analysis, planned_runs_per_arm, planned_task_ids)
    left = sum(sum(v.values()) for v in remaining.values())
    if not early_stop_armed(settings, len(remaining["skill"])):
        return EarlyStop(None, left)
    if settings.rule == "point":
        return EarlyStop(curtailment(analysis, remaining, settings, max_cost_per_trial=max_cost_per_trial), left)
    found = futility(analysis, remaining, settings, max_cost_per_trial=max_cost_per_trial, levels=levels)
    if found is None or not interval_stop_accepts(settings, found):
        return EarlyStop(None, left)
    return EarlyStop(found.verdict, left)


def stop_message(settings: DecisionSettings, stop: EarlyStop) -> str:
    """The reason the loop records on every trial a stop kept from running."""
    if settings.rule == "point":
        return (
            f"early stop (preregistered curtailment): the point rule's verdict is {stop.verdict} "
            f"whatever the {stop.remaining} remaining trial(s) give"
        )
    which = "futility stop" if settings.futility_stop else "curtailment"
    if stop.verdict == "reject":
        return (
            f"early stop (preregistered {which}): adoption is no longer possible and the verdict is "
            f"reject whatever the {stop.remaining} remaining trial(s) give"
        )
    return (
        f"early stop (preregistered {which}): adoption is no longer possible under the plan, "
        f"whatever the {stop.remaining} remaining trial(s) give; the run ends inconclusive (FUTILITY_STOPPED)"
    )


def remaining_trials(
    analysis: Analysis, planned_runs_per_arm: int, planned_task_ids: Iterable[str] | None = None
) -> dict[str, dict[str, int]]:
    """Trials still to run, per arm and task: planned runs minus finished ones (never negative)."""
    rows = {r.task_id: r for r in analysis.tasks}
    out: dict[str, dict[str, int]] = {arm: {} for arm in ARMS}
    for tid in planned_tasks(analysis, planned_task_ids):
        row = rows.get(tid)
        for arm in ARMS:
            done = row.arm(arm).finished if row is not None else 0
            out[arm][tid] = max(0, planned_runs_per_arm - done)
    return out


def _check_remaining(remaining_by_arm: Mapping[str, Mapping[str, int]]) -> tuple[int, int]:
    if any(v < 0 for arm in remaining_by_arm.values() for v in arm.values()):
        raise ValueError("remaining trial counts must be >= 0")
    return sum(remaining_by_arm.get("skill", {}).values()), sum(remaining_by_arm.get("baseline", {}).values())


def _cost_bounds(analysis: Analysis, remaining: Mapping[str, Mapping[str, int]], cap: float) -> tuple[float, float]:
    """Lowest and highest cost ratio any completion of the plan can produce (conservative).

    The ratio of task-weighted means is sum_i c_S,i / sum_i c_B,i over tasks
    with cost in both arms. A future trial costs between 0 and ``cap`` (inf
    when no hard cap is known) or nothing at all (infra). A task already costed
    in both arms stays in the sum with its mean in a known range; a task that
    could still enter the sum is counted only in the direction that can hurt.
    """
    rows = {r.task_id: r for r in analysis.tasks}
    task_ids = set(rows) | set(remaining.get("skill", {})) | set(remaining.get("baseline", {}))

    def mean_range(t: TaskArm | None, r: int) -> tuple[float, float] | None:
        c = t.cost_total if t else 0.0
        n = t.cost_trials if t else 0
        if n == 0:
            return None
        low = c / (n + r)
        high = c / n if r == 0 else max(c / n, (c + r * cap) / (n + r) if math.isfinite(cap) else math.inf)
        return low, high

    num_hi = num_lo = den_hi = den_lo = 0.0
    for tid in task_ids:
        row = rows.get(tid)
        rs = remaining.get("skill", {}).get(tid, 0)
        rb = remaining.get("baseline", {}).get(tid, 0)
        s = mean_range(row.skill if row else None, rs)
        b = mean_range(row.baseline if row else None, rb)
        if s is not None and b is not None:
            num_lo += s[0]
            num_hi += s[1]
            den_lo += b[0]
            den_hi += b[1]
            continue
        can_enter = (s is not None or rs > 0) and (b is not None or rb > 0)
        if can_enter:
            num_hi += s[1] if s is not None else cap
            den_hi += b[1] if b is not None else cap

    def ratio(num: float, den: float) -> float:
        if den == 0.0:
            return 1.0 if num == 0.0 else math.inf
        return num / den

    return (0.0 if math.isinf(den_hi) else ratio(num_lo, den_hi)), (
        math.inf if math.isinf(num_hi) else ratio(num_hi, den_lo)
    )


def _gates_may_fire(analysis: Analysis, remaining: Mapping[str, Mapping[str, int]], settings: DecisionSettings) -> bool:
    """Whether some completion of the plan could trip a gate that makes the verdict inconclusive (or no
    verdict is possible yet): then no verdict but inconclusive is certain. Each remaining trial may pass,
    fail, end missing (unknown, truncated, infra after reaching the model) or as infra before it (leaving
    every denominator)."""
    rem_s, rem_b = _check_remaining(remaining)
    S, B = analysis.skill, analysis.baseline
    if S.valid == 0 or B.valid == 0:
        return True
    if _worst_missing_exceeds(analysis, rem_s, rem_b, settings):
        return True
    if _max_infra_gap(analysis, rem_s, rem_b) > exact.decimal(settings.max_infra_imbalance):
        return True
    if analysis.n_paired_tasks < MIN_TASKS:
        return True
    t_lo, t_hi = _task_mean_bounds(analysis, remaining)
    p_lo = Fraction(S.passes, S.valid + rem_s) - Fraction(B.passes + rem_b, B.valid + rem_b)
    p_hi = Fraction(S.passes + rem_s, S.valid + rem_s) - Fraction(B.passes, B.valid + rem_b)
    signs_agree = (p_lo >= 0 and t_lo >= 0) or (p_hi <= 0 and t_hi <= 0)
    return not signs_agree


def _worst_missing_exceeds(analysis: Analysis, rem_s: int, rem_b: int, settings: DecisionSettings) -> bool:
    """Some completion (every remaining trial of one arm ending missing) pushes an arm's missing share over the cap."""
    return any(
        Fraction(arm.missing + rem, arm.valid + arm.missing + rem) > exact.decimal(settings.max_missing_share)
        for arm, rem in ((analysis.skill, rem_s), (analysis.baseline, rem_b))
        if arm.valid + arm.missing + rem > 0
    )


def _missing_certainly_exceeds(analysis: Analysis, rem_s: int, rem_b: int, settings: DecisionSettings) -> bool:
    """Every completion leaves an arm's missing share over the cap (even if all its remaining trials are valid)."""
    return any(
        Fraction(arm.missing, arm.valid + arm.missing + rem) > exact.decimal(settings.max_missing_share)
        for arm, rem in ((analysis.skill, rem_s), (analysis.baseline, rem_b))
        if arm.valid + arm.missing + rem > 0
    )


def curtailment(
    analysis: Analysis,
    remaining_by_arm: Mapping[str, Mapping[str, int]],
    settings: DecisionSettings,
    *,
    max_cost_per_trial: float | None = None,
) -> PointVerdict | None:
    """The point rule's final verdict if no outcome of the remaining trials can change it, else None.

    Deterministic curtailment (docs/statistics.md#curtailment), exact on pooled rates
    rather than raw counts because unknown/truncated/infra trials leave the
    denominators: each remaining trial may pass, fail, or drop out.

    * ``"reject"`` when the skill cannot end strictly ahead even if all its
      remaining trials pass and all the baseline's fail, or when the cost
      ratio is certain to exceed 1 + cost_increase_max;
    * ``"adopt"`` when the skill stays strictly ahead even if all its remaining
      trials fail and all the baseline's pass, **and** the cost ratio is certain
      to stay within the limit. Future costs are bounded only by
      ``max_cost_per_trial`` (a hard cap such as the gateway's); without one
      the cost condition is settled only once the skill arm has no trial left
      on a task it is compared on, so an adopt is rarely certified early.

    ``remaining_by_arm`` maps arm -> task id -> trials still to run (see
    :func:`remaining_trials`). An arm that could still end with no valid trial
    is never curtailed (the verdict would then be undefined, not reject).
    Returns None for ``rule="interval"``: this check is for the point rule only (see :func:`futility`).
    """
    if settings.rule != "point":
        return None
    rem_s, rem_b = _check_remaining(remaining_by_arm)
    S, B = analysis.skill, analysis.baseline
    ks, ns, ms = S.passes, S.valid, S.missing
    kb, nb, mb = B.passes, B.valid, B.missing
    cap = math.inf if max_cost_per_trial is None else max_cost_per_trial
    threshold = cost_limit(settings)
    # Gates that any completion could trip make the final verdict uncertain.
    if _gates_may_fire(analysis, remaining_by_arm, settings):
        return None
    cost_low, cost_high = _cost_bounds(analysis, remaining_by_arm, cap)

    # The rule's verdict as observed and under both missing-data fills: remaining trials count as
    # missing in the fills, so the fills bound every completion.
    best_skill = Fraction(ks + ms + rem_s, ns + ms + rem_s)
    best_base = Fraction(kb, nb + mb + rem_b)
    # the cost bounds keep a tolerance's margin from the limit: the decision's own ratio may differ from them
    # by rounding, and must land on the same side of the limit (harness.analysis.exact)
    if best_skill <= best_base or exact.above(cost_low, threshold + EPS):
        return "reject"
    worst_skill = Fraction(ks, ns + ms + rem_s)
    worst_base = Fraction(kb + mb + rem_b, nb + mb + rem_b)
    if worst_skill > worst_base and cost_high <= threshold and analysis.n_paired_tasks >= MIN_ADOPT_TASKS:
        return "adopt"
    return None


def _infra_share_range(arm: ArmSummary, rem: int) -> tuple[Fraction, Fraction]:
    """Lowest and highest infra share of an arm over completions (every remaining trial not infra, or all
    infra), exactly."""
    base = arm.valid + arm.unknown + arm.truncated + arm.infra
    if base + rem == 0:
        return Fraction(0), Fraction(0)
    low = Fraction(arm.infra, base + rem) if base else Fraction(0)
    return low, Fraction(arm.infra + rem, base + rem)


def _reachable_infra_gap(analysis: Analysis, rem_s: int, rem_b: int) -> Fraction:
    """The largest gap between the arms' infra shares a completion reaches (one arm's remaining trials all
    infra, the other's none: both extremes belong to one completion, so the gap is attained)."""
    s_lo, s_hi = _infra_share_range(analysis.skill, rem_s)
    b_lo, b_hi = _infra_share_range(analysis.baseline, rem_b)
    return max(s_hi - b_lo, b_hi - s_lo)


def _max_infra_gap(analysis: Analysis, rem_s: int, rem_b: int) -> Fraction:
    """The largest gap between the arms' infra shares any completion, or the data as they stand, can show."""
    gap_now = abs(analysis.skill.exact_infra_share - analysis.baseline.exact_infra_share)
    return max(_reachable_infra_gap(analysis, rem_s, rem_b), gap_now)


def _task_mean_bounds(analysis: Analysis, remaining: Mapping[str, Mapping[str, int]]) -> tuple[Fraction, Fraction]:
    """Lowest and highest task-weighted mean difference any completion can produce, exactly (their signs
    decide whether POOLED_TASK_DISAGREE can fire).

    A task with valid trials in both arms stays paired with d_i in a known range; a task that
    could still become paired may or may not enter the mean, so it is added only while it pulls
    the mean further (greedy, exact for a mean over a fixed set plus optional members)."""
    rows = {r.task_id: r for r in analysis.tasks}
    ids = set(rows) | set(remaining.get("skill", {})) | set(remaining.get("baseline", {}))
    certain_lo: list[Fraction] = []
    certain_hi: list[Fraction] = []
    maybe_lo: list[Fraction] = []
    maybe_hi: list[Fraction] = []
    for tid in ids:
        row = rows.get(tid)
        s = row.skill if row else TaskArm()
        b = row.baseline if row else TaskArm()
        rs = remaining.get("skill", {}).get(tid, 0)
        rb = remaining.get("baseline", {}).get(tid, 0)
        if (s.valid == 0 and rs == 0) or (b.valid == 0 and rb == 0):
            continue
        s_min = Fraction(s.passes, s.valid + rs) if s.valid else Fraction(0)
        s_max = Fraction(s.passes + rs, s.valid + rs)
        b_min = Fraction(b.passes, b.valid + rb) if b.valid else Fraction(0)
        b_max = Fraction(b.passes + rb, b.valid + rb)
        lo, hi = s_min - b_max, s_max - b_min
        if s.valid and b.valid:
            certain_lo.append(lo)
            certain_hi.append(hi)
        else:
            maybe_lo.append(lo)
            maybe_hi.append(hi)

    def extreme(fixed: list[Fraction], optional: list[Fraction], lowest: bool) -> Fraction:
        values = list(fixed)
        for v in sorted(optional, reverse=not lowest):
            mean = exact.mean(values)
            if mean is None or (v < mean if lowest else v > mean):
                values.append(v)
        return exact.mean(values) or Fraction(0)

    return extreme(certain_lo, maybe_lo, True), extreme(certain_hi, maybe_hi, False)


# =========================================================================== the futility stop


class _Counts(NamedTuple):
    """One arm of one task as an estimate sees it: ``k`` passes of ``n`` counted trials so far, and ``r``
    trials still to come. Every completion gives (k + b) of (n + j) with 0 <= b <= j <= r: j of the r count
    (the rest end as infra before the model and leave), b of those pass (or, in a fill, are filled as passes)."""

    k: int
    n: int
    r: int

    @property
    def possible(self) -> bool:
        return self.n + self.r > 0

    def rate_range(self) -> tuple[float, float]:
        if self.n == 0:
            return 0.0, 1.0
        return self.k / (self.n + self.r), (self.k + self.r) / (self.n + self.r)

    def jeffreys_range(self) -> tuple[float, float]:
        return _jeffreys_range(self.k, self.n, self.r)


@lru_cache(maxsize=8192)
def _jeffreys_range(k0: int, n0: int, r: int) -> tuple[float, float]:
    """Smallest and largest Jeffreys variance v_J(k0 + b, n0 + j) over the reachable counts (n0 + j >= 1):
    for a fixed count, p(1 - p) is concave in the passes, so the minimum sits at an end of the reachable
    passes and the maximum at the one nearest half the count. Cached: the counts are small and recur."""
    low, high = math.inf, 0.0
    for n in range(max(1, n0), n0 + r + 1):
        k_min, k_max = k0, k0 + (n - n0)
        low = min(low, stats.jeffreys_variance(k_min, n), stats.jeffreys_variance(k_max, n))
        for k in (n // 2, (n + 1) // 2):
            high = max(high, stats.jeffreys_variance(min(k_max, max(k_min, k)), n))
    return low, high


class _TaskBox(NamedTuple):
    """What one task's paired difference d_i and its variance-floor term v_J(S) + v_J(B) can become."""

    certain: bool
    """Already in the paired set (counted trials in both arms): it stays there in every completion."""
    d_lo: float
    d_hi: float
    w_lo: float
    w_hi: float


def _arm_counts(t: TaskArm, r: int, fill: Fill, arm: str) -> _Counts:
    """The counts the estimate behind ``fill`` uses: observed (valid trials), or missing trials filled as
    fails (worst case for the skill, best for the baseline) or passes (the opposite)."""
    if fill == "observed":
        return _Counts(t.passes, t.valid, r)
    as_pass = (fill == "best") == (arm == "skill")
    return _Counts(t.passes + (t.missing if as_pass else 0), t.valid + t.missing, r)


def _boxes(analysis: Analysis, remaining: Mapping[str, Mapping[str, int]], fill: Fill) -> list[_TaskBox]:
    rows = {r.task_id: r for r in analysis.tasks}
    ids = sorted(set(rows) | set(remaining.get("skill", {})) | set(remaining.get("baseline", {})))
    out: list[_TaskBox] = []
    for tid in ids:
        row = rows.get(tid)
        s = _arm_counts(row.skill if row else TaskArm(), remaining.get("skill", {}).get(tid, 0), fill, "skill")
        b = _arm_counts(row.baseline if row else TaskArm(), remaining.get("baseline", {}).get(tid, 0), fill, "baseline")
        if not (s.possible and b.possible):
            continue
        (s_lo, s_hi), (b_lo, b_hi) = s.rate_range(), b.rate_range()
        (vs_lo, vs_hi), (vb_lo, vb_hi) = s.jeffreys_range(), b.jeffreys_range()
        out.append(_TaskBox(s.n > 0 and b.n > 0, s_lo - b_hi, s_hi - b_lo, vs_lo + vb_lo, vs_hi + vb_hi))
    return out


def _split(boxes: Sequence[_TaskBox]) -> tuple[list[_TaskBox], list[_TaskBox]]:
    return [b for b in boxes if b.certain], [b for b in boxes if not b.certain]


def _quantile(confidence: float) -> float:
    return 1.0 - (1.0 - confidence) / 2.0


def _sign_flip_can_pass(m: int, confidence: float) -> bool:
    return sign_flip_can_pass(m, confidence)


class Levels(NamedTuple):
    """The two-sided confidence levels a futility check bounds the interval rule at. The fixed design: the
    preregistered confidence for both. A group-sequential design (:mod:`harness.analysis.groupseq`):
    ``adopt`` is the lowest level of the looks still ahead (adoption at any of them needs at least that
    lower bound), ``final`` the final look's (where a reject every completion gives is certified)."""

    adopt: float
    final: float


def _max_lower_bound(boxes: Sequence[_TaskBox], confidence: float) -> float:
    """An upper bound on the paired interval's lower bound L over every completion that could adopt.

    With m paired tasks L = Delta - t_{m-1} s_u / sqrt(m), and s_u^2 >= floor = sum_i w_i / m (the Jeffreys
    floor), so L <= Delta - t_{m-1} sqrt(sum_i w_i) / m. Over the paired sets of size m (the certain tasks
    plus any m - c of the optional ones) Delta is at most the mean of the certain d_hi and the m - c largest
    optional d_hi, and sum_i w_i at least that of the certain w_lo and the m - c smallest optional w_lo.
    Only m >= MIN_ADOPT_TASKS (and, below SIGN_FLIP_BELOW_TASKS, m with 2 / 2^m <= alpha) can adopt, so the
    maximum is over those m; -inf when there is none."""
    certain, optional = _split(boxes)
    d_top = sorted((b.d_hi for b in optional), reverse=True)
    w_low = sorted(b.w_lo for b in optional)
    sum_d = math.fsum(b.d_hi for b in certain)
    sum_w = math.fsum(b.w_lo for b in certain)
    q = _quantile(confidence)
    best = -math.inf
    for m in range(max(len(certain), MIN_ADOPT_TASKS, MIN_TASKS), len(boxes) + 1):
        if not _sign_flip_can_pass(m, confidence):
            continue
        k = m - len(certain)
        mean = (sum_d + math.fsum(d_top[:k])) / m
        se = math.sqrt(sum_w + math.fsum(w_low[:k])) / m
        best = max(best, mean - stats.t_quantile(q, m - 1) * se)
    return best


def _min_upper_bound(boxes: Sequence[_TaskBox], confidence: float) -> float:
    """A lower bound on the paired interval's upper bound U over every completion with at least MIN_TASKS
    paired tasks (fewer give no verdict): U >= Delta + t_{m-1} sqrt(sum_i w_i) / m, with Delta at least the
    mean of the certain d_lo and the m - c smallest optional d_lo; +inf when no completion pairs enough."""
    certain, optional = _split(boxes)
    d_low = sorted(b.d_lo for b in optional)
    w_low = sorted(b.w_lo for b in optional)
    sum_d = math.fsum(b.d_lo for b in certain)
    sum_w = math.fsum(b.w_lo for b in certain)
    q = _quantile(confidence)
    least = math.inf
    for m in range(max(len(certain), MIN_TASKS), len(boxes) + 1):
        k = m - len(certain)
        mean = (sum_d + math.fsum(d_low[:k])) / m
        se = math.sqrt(sum_w + math.fsum(w_low[:k])) / m
        least = min(least, mean + stats.t_quantile(q, m - 1) * se)
    return least


_CENTRES = tuple(i / 100 for i in range(-100, 101))
"""Fixed centres c for the sample-variance bound of :func:`_max_upper_bound` (a fixed set keeps the bound
monotone: it can only tighten as trials finish)."""


def _max_upper_bound(boxes: Sequence[_TaskBox], confidence: float) -> float:
    """An upper bound on the paired interval's upper bound U over every completion (+inf when fewer than
    MIN_TASKS tasks are certainly paired: some completion gives no verdict at all).

    U = Delta + t_{m-1} s_u / sqrt(m) with s_u^2 = max(s^2, floor). For any c,
    (m - 1) s^2 = sum_i (d_i - Delta)^2 <= sum_i (d_i - c)^2 <= sum_i max((d_lo - c)^2, (d_hi - c)^2), so s^2 is
    at most the smallest such bound over a fixed set of c; the floor is at most the mean of the w_hi, Delta
    at most the mean of the d_hi. Each is maximised over the paired sets of size m separately, then the
    bound over m."""
    certain, optional = _split(boxes)
    if len(certain) < MIN_TASKS:
        return math.inf
    q = _quantile(confidence)
    d_top = sorted((b.d_hi for b in optional), reverse=True)
    w_top = sorted((b.w_hi for b in optional), reverse=True)
    sum_d = math.fsum(b.d_hi for b in certain)
    sum_w = math.fsum(b.w_hi for b in certain)

    def spread(b: _TaskBox, c: float) -> float:
        return max((b.d_lo - c) ** 2, (b.d_hi - c) ** 2)

    per_c = [
        (math.fsum(spread(b, c) for b in certain), sorted((spread(b, c) for b in optional), reverse=True))
        for c in _CENTRES
    ]
    worst = -math.inf
    for m in range(len(certain), len(boxes) + 1):
        k = m - len(certain)
        mean = (sum_d + math.fsum(d_top[:k])) / m
        floor = (sum_w + math.fsum(w_top[:k])) / m
        s2 = min(fixed + math.fsum(extra[:k]) for fixed, extra in per_c) / (m - 1)
        worst = max(worst, mean + stats.t_quantile(q, m - 1) * math.sqrt(max(s2, floor) / m))
    return worst


def futility(
    analysis: Analysis,
    remaining_by_arm: Mapping[str, Mapping[str, int]],
    settings: DecisionSettings,
    *,
    max_cost_per_trial: float | None = None,
    levels: Levels | None = None,
) -> Futility | None:
    """The interval rule's futility stop: None while some completion of the plan could still end in adopt.

    A final adopt needs every one of: at least MIN_ADOPT_TASKS paired tasks; each arm's missing share
    within the cap; the gain's lower bound L > 0 as observed **and** with the missing trials filled
    against the skill (else MISSING_SENSITIVE); below SIGN_FLIP_BELOW_TASKS tasks a sign-flip p <= alpha;
    and the cost ratio's upper bound <= 1 + cost_increase_max, which is at least the ratio itself. Adoption
    is impossible when one of them fails in every completion, shown by a bound
    (:func:`_max_lower_bound` for L, :func:`_cost_bounds` for the ratio; all conservative).

    What the stop then reports:

    * ``reject`` (certain) when no gate can fire in any completion (:func:`_gates_may_fire`) and the upper
      bound U stays below ``min_worthwhile_gain`` as observed and under both fills in every completion
      (:func:`_max_upper_bound`): every completion ends in reject. A cost-driven reject is never certified
      (bounding Fieller's lower bound needs the costs' variances): such a run ends inconclusive or runs on.
    * ``inconclusive`` otherwise, ``certain`` when no completion can reject either (U >= the minimum gain
      as observed in every completion, :func:`_min_upper_bound`, and the cost ratio cannot exceed the limit)
      or a gate certainly fires, ``witnessed`` when it is certain or a completion trips a gate (all of an
      arm's remaining trials missing, or infra in one arm only, or dropped with fewer than MIN_TASKS
      tasks paired), and ``heading_for_reject`` when the full plan could plausibly still reject
      (:func:`_heading_for_reject`). The loop stops on an uncertain inconclusive only when it is witnessed
      and not heading for a reject (:func:`interval_stop_accepts`), so a stop never reports a verdict the
      full plan could not give, and rarely an inconclusive where the full plan would have rejected.

    Every bound only tightens as trials finish, so adoption once ruled out stays ruled out (the decision's
    re-check on the final data, trials that were still running included, agrees).

    ``levels``: the confidence levels the bounds use (:class:`Levels`; default the preregistered confidence):
    a group-sequential design rules adoption out at the lowest level of its looks ahead and certifies a
    reject at its final look's.
    """
    if settings.rule != "interval":
        return None
    adopt_conf, final_conf = levels or Levels(settings.confidence, settings.confidence)
    rem_s, rem_b = _check_remaining(remaining_by_arm)
    cap = math.inf if max_cost_per_trial is None else max_cost_per_trial
    threshold = cost_limit(settings)
    observed = _boxes(analysis, remaining_by_arm, "observed")
    missing_certain = _missing_certainly_exceeds(analysis, rem_s, rem_b, settings)
    cost_low, cost_high = _cost_bounds(analysis, remaining_by_arm, cap)

    why: str | None = None
    if len(observed) < MIN_ADOPT_TASKS:
        why = (
            f"at most {len(observed)} task(s) can end with valid trials in both arms; adoption needs {MIN_ADOPT_TASKS}"
        )
    elif missing_certain:
        why = f"an arm's missing share stays above {fmt.pct(settings.max_missing_share, 1)} whatever remains"
    elif exact.above(cost_low, threshold + EPS):
        why = f"the cost ratio is at least {fmt.ratio(cost_low, '')} in every completion (limit {fmt.ratio(threshold, '')})"
    else:
        lower = min(
            _max_lower_bound(observed, adopt_conf),
            _max_lower_bound(_boxes(analysis, remaining_by_arm, "worst"), adopt_conf),
        )
        # adoption needs L above 0 beyond the tolerance; a bound at or below 0 rules that out with room to spare
        if lower <= 0.0:
            why = (
                "no completion has enough paired tasks to adopt"
                if math.isinf(lower)
                else f"the lower bound of the gain's interval stays at or below {fmt.pp(lower)} in every completion"
            )
    if why is None:
        return None

    if not _gates_may_fire(analysis, remaining_by_arm, settings) and all(
        exact.below(
            _max_upper_bound(_boxes(analysis, remaining_by_arm, fill), final_conf), settings.min_worthwhile_gain - EPS
        )
        for fill in ("observed", "worst", "best")
    ):
        return Futility("reject", True, True, why)
    cannot_reject = exact.at_least(_min_upper_bound(observed, adopt_conf), settings.min_worthwhile_gain + EPS) and (
        exact.below(cost_high, threshold)
    )
    certain = missing_certain or cannot_reject
    witnessed = (
        certain
        or _worst_missing_exceeds(analysis, rem_s, rem_b, settings)
        or _reachable_infra_gap(analysis, rem_s, rem_b) > exact.decimal(settings.max_infra_imbalance)
        or analysis.n_paired_tasks < MIN_TASKS
    )
    heading = _heading_for_reject(analysis, remaining_by_arm, settings, final_conf)
    return Futility("inconclusive", certain, witnessed, why, heading)


PREDICTION_SDS = 2.0
"""How many standard deviations of the final gain's prediction :func:`_heading_for_reject` allows."""


def _heading_for_reject(
    analysis: Analysis, remaining: Mapping[str, Mapping[str, int]], settings: DecisionSettings, confidence: float
) -> bool:
    """Whether the full plan could plausibly still reject: a prediction that decides only whether a
    futility stop waits, never a verdict.

    The prediction carries every paired task to its planned trials at its own observed rates: Delta and
    the spread of the d_i stay as observed, the Jeffreys floor moves to the planned counts, giving a
    predicted upper bound U*. The remaining trials make the final Delta uncertain around the observed one,
    with variance sum_i [r_S p_S (1 - p_S) / N_S^2 + r_B p_B (1 - p_B) / N_B^2] / m^2 (binomial outcomes of
    r trials at the Jeffreys-adjusted rate p, N planned). The run heads for a reject when U* is below
    ``min_worthwhile_gain`` by less than :data:`PREDICTION_SDS` of those standard deviations would undo,
    or when the cost ratio's interval already lies above the limit (Fieller's interval uses the per-task
    mean costs, which the prediction keeps)."""
    cost = analysis.cost
    if cost.ratio is not None and exact.above(cost.interval.low, cost_limit(settings)):
        return True
    paired = [r for r in analysis.tasks if r.difference is not None]
    m = len(paired)
    if m < MIN_TASKS or analysis.paired.mean is None:
        return False
    floor = 0.0
    spread = 0.0
    for row in paired:
        for arm, t in (("skill", row.skill), ("baseline", row.baseline)):
            r = remaining.get(arm, {}).get(row.task_id, 0)
            n = t.valid + r
            p = (t.passes * n / t.valid + 0.5) / (n + 1.0)
            floor += p * (1.0 - p) / n
            spread += r * p * (1.0 - p) / (n * n)
    sd = analysis.paired.sd or 0.0
    predicted = analysis.paired.mean + stats.t_quantile(_quantile(confidence), m - 1) * math.sqrt(
        max(sd * sd, floor / m) / m
    )
    return predicted - PREDICTION_SDS * math.sqrt(spread) / m < settings.min_worthwhile_gain
