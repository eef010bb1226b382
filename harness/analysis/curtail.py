"""Curtailment: stopping a point-rule run early once no remaining trial can change its verdict (pure).

:func:`remaining_trials` counts what the plan still calls for; :func:`curtailment` is the exact
check (docs/statistics.md#curtailment) that every completion of the plan ends in the same verdict, gates
included; :func:`early_stop_verdict` applies it only when the preregistration asked for it. The
running loop (harness.experiment), the decision (an early-stopped run is legitimate only when this
certifies it) and the benchmark's simulation all call the same function.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import NamedTuple

from harness.analysis.estimates import Analysis, ArmSummary, TaskArm
from harness.analysis.rules import MIN_ADOPT_TASKS, MIN_TASKS, PointVerdict
from harness.records import ARMS
from harness.study.config import DecisionSettings


class EarlyStop(NamedTuple):
    """What the preregistered early stop found: the certified verdict (or None) and the trials left."""

    verdict: PointVerdict | None
    remaining: int


def planned_tasks(analysis: Analysis, planned_task_ids: Iterable[str] | None) -> list[str]:
    """The planned task ids, sorted; without a plan, every task with a finished trial."""
    if planned_task_ids is not None:
        return sorted(set(planned_task_ids))
    return [r.task_id for r in analysis.tasks if r.baseline.finished or r.skill.finished]


def early_stop_verdict(
    analysis: Analysis,
    settings: DecisionSettings,
    planned_runs_per_arm: int,
    planned_task_ids: Iterable[str] | None,
    *,
    max_cost_per_trial: float | None,
) -> EarlyStop:
    """The preregistered early stop: the verdict no remaining trial can change (None when some can, and
    whenever curtailment was not preregistered: it serves the point rule only), and how many trials
    remain. The same check for the running loop, the decision and the benchmark's simulation."""
    remaining = remaining_trials(analysis, planned_runs_per_arm, planned_task_ids)
    left = sum(sum(v.values()) for v in remaining.values())
    if settings.early_stop != "curtail" or settings.rule != "point":
        return EarlyStop(None, left)
    return EarlyStop(curtailment(analysis, remaining, settings, max_cost_per_trial=max_cost_per_trial), left)


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
    Returns None for ``rule="interval"``: this check is for the point rule only.
    """
    if settings.rule != "point":
        return None
    rem_s = sum(remaining_by_arm.get("skill", {}).values())
    rem_b = sum(remaining_by_arm.get("baseline", {}).values())
    if min(rem_s, rem_b) < 0 or any(v < 0 for arm in remaining_by_arm.values() for v in arm.values()):
        raise ValueError("remaining trial counts must be >= 0")
    S, B = analysis.skill, analysis.baseline
    ks, ns, ms = S.passes, S.valid, S.missing
    kb, nb, mb = B.passes, B.valid, B.missing
    if ns == 0 or nb == 0:
        return None
    cap = math.inf if max_cost_per_trial is None else max_cost_per_trial
    threshold = 1.0 + settings.cost_increase_max
    cost_low, cost_high = _cost_bounds(analysis, remaining_by_arm, cap)

    # Gates that any completion could trip make the final verdict uncertain: every remaining
    # trial may pass, fail, or end missing (unknown, truncated, infra after reaching the model)
    # or as infra before it (leaving every denominator).
    for arm, rem in ((S, rem_s), (B, rem_b)):
        worst_missing = (arm.missing + rem) / (arm.valid + arm.missing + rem)
        if worst_missing > settings.max_missing_share:
            return None
    if _max_infra_gap(analysis, rem_s, rem_b) > settings.max_infra_imbalance:
        return None
    certain_pairs = analysis.n_paired_tasks
    if certain_pairs < MIN_TASKS:
        return None
    t_lo, t_hi = _task_mean_bounds(analysis, remaining_by_arm)
    p_lo = Fraction(ks, ns + rem_s) - Fraction(kb + rem_b, nb + rem_b)
    p_hi = Fraction(ks + rem_s, ns + rem_s) - Fraction(kb, nb + rem_b)
    signs_agree = (p_lo >= 0 and t_lo >= 0) or (p_hi <= 0 and t_hi <= 0)
    if not signs_agree:
        return None

    # The rule's verdict as observed and under both missing-data fills: remaining trials count as
    # missing in the fills, so the fills bound every completion.
    best_skill = Fraction(ks + ms + rem_s, ns + ms + rem_s)
    best_base = Fraction(kb, nb + mb + rem_b)
    if best_skill <= best_base or cost_low > threshold:
        return "reject"
    worst_skill = Fraction(ks, ns + ms + rem_s)
    worst_base = Fraction(kb + mb + rem_b, nb + mb + rem_b)
    if worst_skill > worst_base and cost_high <= threshold and certain_pairs >= MIN_ADOPT_TASKS:
        return "adopt"
    return None


def _max_infra_gap(analysis: Analysis, rem_s: int, rem_b: int) -> float:
    """The largest gap between the arms' infra shares any completion can produce."""

    def share_range(arm: ArmSummary, rem: int) -> tuple[float, float]:
        base = arm.valid + arm.unknown + arm.truncated + arm.infra
        if base + rem == 0:
            return 0.0, 0.0
        low = arm.infra / (base + rem) if base else 0.0
        return low, (arm.infra + rem) / (base + rem)

    s_lo, s_hi = share_range(analysis.skill, rem_s)
    b_lo, b_hi = share_range(analysis.baseline, rem_b)
    return max(s_hi - b_lo, b_hi - s_lo, abs(analysis.skill.infra_share - analysis.baseline.infra_share))


def _task_mean_bounds(analysis: Analysis, remaining: Mapping[str, Mapping[str, int]]) -> tuple[float, float]:
    """Lowest and highest task-weighted mean difference any completion can produce.

    A task with valid trials in both arms stays paired with d_i in a known range; a task that
    could still become paired may or may not enter the mean, so it is added only while it pulls
    the mean further (greedy, exact for a mean over a fixed set plus optional members)."""
    rows = {r.task_id: r for r in analysis.tasks}
    ids = set(rows) | set(remaining.get("skill", {})) | set(remaining.get("baseline", {}))
    certain_lo: list[float] = []
    certain_hi: list[float] = []
    maybe_lo: list[float] = []
    maybe_hi: list[float] = []
    for tid in ids:
        row = rows.get(tid)
        s = row.skill if row else TaskArm()
        b = row.baseline if row else TaskArm()
        rs = remaining.get("skill", {}).get(tid, 0)
        rb = remaining.get("baseline", {}).get(tid, 0)
        if (s.valid == 0 and rs == 0) or (b.valid == 0 and rb == 0):
            continue
        s_min = s.passes / (s.valid + rs) if s.valid else 0.0
        s_max = (s.passes + rs) / (s.valid + rs)
        b_min = b.passes / (b.valid + rb) if b.valid else 0.0
        b_max = (b.passes + rb) / (b.valid + rb)
        lo, hi = s_min - b_max, s_max - b_min
        if s.valid and b.valid:
            certain_lo.append(lo)
            certain_hi.append(hi)
        else:
            maybe_lo.append(lo)
            maybe_hi.append(hi)

    def extreme(fixed: list[float], optional: list[float], lowest: bool) -> float:
        values = list(fixed)
        for v in sorted(optional, reverse=not lowest):
            mean = math.fsum(values) / len(values) if values else None
            if mean is None or (v < mean if lowest else v > mean):
                values.append(v)
        return math.fsum(values) / len(values) if values else 0.0

    return extreme(certain_lo, maybe_lo, True), extreme(certain_hi, maybe_hi, False)
