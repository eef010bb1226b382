"""Everything a report shows, computed once from the observations (pure): :func:`analyze`.

Per arm: ``k/n`` with their exclusions, the naive (Wilson) and task-clustered intervals, cost per
trial and per pass, waste. Per task: the same counts and d_i, the task's difference. Across tasks
(docs/design.md#the-decision, docs/statistics.md): the paired task-level difference with its
t-interval and an exact sign-flip p, McNemar and Newcombe when there is one run per arm, the cost
ratio with its interval, the MDE, and best/worst-case fills of missing trials. The wording of these
figures is :mod:`harness.fmt`'s; the verdict is :mod:`harness.analysis.decide`'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from harness.analysis import exact, stats
from harness.analysis.observations import OUTCOMES, Observation
from harness.records import ARMS, Arm
from harness.study.config import DecisionSettings


@dataclass(frozen=True)
class TaskArm:
    """One task in one arm: outcome counts, cost, turns and duration."""

    passes: int = 0
    fails: int = 0
    unknown: int = 0
    truncated: int = 0
    infra: int = 0
    skipped: int = 0
    infra_retries: int = 0
    infra_reached: int = 0
    """Infra outcomes after the gateway forwarded a request (a subset of ``infra``; counted as missing)."""
    cost_total: float = 0.0
    """Spend of the trials that reached the model (pass, fail, unknown, truncated)."""
    cost_trials: int = 0
    waste_usd: float = 0.0
    """Spend of infra outcomes and superseded infra attempts."""
    turns: stats.Summary = stats.EMPTY_SUMMARY
    duration: stats.Summary = stats.EMPTY_SUMMARY

    @property
    def valid(self) -> int:
        return self.passes + self.fails

    @property
    def missing(self) -> int:
        """Unknown, truncated, and infra after reaching the model: filled both ways for the bounds."""
        return self.unknown + self.truncated + self.infra_reached

    @property
    def finished(self) -> int:
        """Planned trials that produced a final record (infra included; skipped excluded)."""
        return self.valid + self.unknown + self.truncated + self.infra

    @property
    def rate(self) -> float | None:
        return self.passes / self.valid if self.valid else None

    @property
    def exact_rate(self) -> Fraction | None:
        """passes/valid as an exact rational (what signs and thresholds are decided on)."""
        return exact.rate(self.passes, self.valid)

    @property
    def mean_cost(self) -> float | None:
        return self.cost_total / self.cost_trials if self.cost_trials else None


@dataclass(frozen=True)
class TaskRow:
    """One row of the per-task table; ``difference`` is d_i (None without valid trials in both arms)."""

    task_id: str
    baseline: TaskArm
    skill: TaskArm

    def arm(self, arm: str) -> TaskArm:
        return self.skill if arm == "skill" else self.baseline

    @property
    def difference(self) -> float | None:
        d = self.exact_difference
        return None if d is None else float(d)

    @property
    def exact_difference(self) -> Fraction | None:
        """d_i as an exact rational: its sign is never rounding noise."""
        return exact.difference(self.skill.exact_rate, self.baseline.exact_rate)


@dataclass(frozen=True)
class ArmSummary:
    """One arm across all tasks.

    ``rate`` is the pooled pass rate passes/valid (what the point rule compares);
    ``wilson`` its naive interval (trials treated as independent);
    ``clustered`` the task-clustered mean of per-task rates with a t-interval.
    ``mean_cost_per_trial`` is task-weighted (mean over tasks of per-task mean cost).
    """

    arm: Arm
    passes: int
    valid: int
    unknown: int
    truncated: int
    infra: int
    infra_attempts: int
    """Final infra outcomes plus superseded infra attempts: every attempt infrastructure spoiled."""
    skipped: int
    wilson: stats.Interval
    clustered: stats.MeanInterval
    mean_cost_per_trial: float | None
    total_cost_usd: float
    cost_per_pass: float | None
    waste_usd: float
    turns: stats.Summary
    duration: stats.Summary
    infra_reached: int = 0
    """Infra outcomes after the gateway forwarded a request (a subset of ``infra``; counted as missing)."""

    @property
    def rate(self) -> float | None:
        return self.passes / self.valid if self.valid else None

    @property
    def exact_rate(self) -> Fraction | None:
        """The pooled pass rate as an exact rational (what the point rule compares)."""
        return exact.rate(self.passes, self.valid)

    @property
    def missing(self) -> int:
        """Unknown, truncated, and infra after reaching the model."""
        return self.unknown + self.truncated + self.infra_reached

    @property
    def missing_share(self) -> float:
        """missing / (trials that reached the model); infra that never reached it and skipped are not in the base."""
        return float(self.exact_missing_share)

    @property
    def exact_missing_share(self) -> Fraction:
        base = self.valid + self.missing
        return Fraction(self.missing, base) if base else Fraction(0)

    @property
    def infra_share(self) -> float:
        return float(self.exact_infra_share)

    @property
    def exact_infra_share(self) -> Fraction:
        base = self.valid + self.unknown + self.truncated + self.infra
        return Fraction(self.infra, base) if base else Fraction(0)


@dataclass(frozen=True)
class PairedTable:
    """One-run-per-arm analysis: the paired 2x2 table over tasks, exact McNemar and Newcombe's interval."""

    both_pass: int
    skill_only: int
    baseline_only: int
    both_fail: int
    mcnemar_p: float
    newcombe: stats.PairedProportion


@dataclass(frozen=True)
class FilledEstimate:
    """The estimates after filling every unknown/truncated trial one way (for the sensitivity bounds)."""

    exact_baseline_rate: Fraction | None
    exact_skill_rate: Fraction | None
    paired: stats.MeanInterval
    sign_flip_p: float | None = None

    @property
    def baseline_rate(self) -> float | None:
        return None if self.exact_baseline_rate is None else float(self.exact_baseline_rate)

    @property
    def skill_rate(self) -> float | None:
        return None if self.exact_skill_rate is None else float(self.exact_skill_rate)

    @property
    def pooled_difference(self) -> float | None:
        d = exact.difference(self.exact_skill_rate, self.exact_baseline_rate)
        return None if d is None else float(d)


@dataclass(frozen=True)
class Analysis:
    """Everything the decision and the report need, computed once from the observations."""

    confidence: float
    baseline: ArmSummary
    skill: ArmSummary
    tasks: tuple[TaskRow, ...]
    """Sorted by task id; a report may re-sort by ``difference``."""
    paired: stats.MeanInterval
    """Task-weighted paired difference over the T' tasks with valid trials in both arms."""
    sign_flip: stats.SignFlipResult
    paired_table: PairedTable | None
    """Set when every paired task has exactly one valid trial per arm."""
    cost: stats.CostRatio
    mde: float
    mde_source: Literal["pilot", "default"]
    mde_default: float
    """MDE at the same design under the default variances (sigma2 = 0.125, omega2 = 0)."""
    worst_case: FilledEstimate
    """Skill missing -> fail, baseline missing -> pass."""
    best_case: FilledEstimate
    """Skill missing -> pass, baseline missing -> fail."""
    turns_paired_median: float | None
    """Median over tasks of (skill median turns - baseline median turns); descriptive."""
    duration_paired_median: float | None
    mde_variances: stats.Variances = stats.DEFAULT_VARIANCES
    """The variance components the MDE used (this run's when ``mde_source`` is pilot): what
    :mod:`harness.analysis.sizing` sizes a next experiment with."""

    def arm(self, arm: str) -> ArmSummary:
        return self.skill if arm == "skill" else self.baseline

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @property
    def n_paired_tasks(self) -> int:
        """T': tasks with at least one valid trial in both arms."""
        return self.paired.n

    @property
    def pooled_difference(self) -> float | None:
        d = self.exact_pooled_difference
        return None if d is None else float(d)

    @property
    def exact_pooled_difference(self) -> Fraction | None:
        """Skill minus baseline pooled pass rate, exactly (its sign decides POOLED_TASK_DISAGREE)."""
        return exact.difference(self.skill.exact_rate, self.baseline.exact_rate)

    @property
    def tasks_improved(self) -> int:
        return sum(1 for t in self.tasks if exact.sign(t.exact_difference) > 0)

    @property
    def tasks_worse(self) -> int:
        return sum(1 for t in self.tasks if exact.sign(t.exact_difference) < 0)

    @property
    def tasks_tied(self) -> int:
        return sum(1 for t in self.tasks if t.exact_difference == 0)


def _task_arm(obs: Sequence[Observation]) -> TaskArm:
    counts = {o: 0 for o in OUTCOMES}
    for o in obs:
        counts[o.outcome] += 1
    costed = [o for o in obs if o.outcome in ("pass", "fail", "unknown", "truncated")]
    waste = math.fsum(o.cost_usd for o in obs if o.outcome == "infra") + math.fsum(o.infra_retry_cost_usd for o in obs)
    ran = [o for o in obs if o.outcome not in ("infra", "skipped")]
    return TaskArm(
        passes=counts["pass"],
        fails=counts["fail"],
        unknown=counts["unknown"],
        truncated=counts["truncated"],
        infra=counts["infra"],
        skipped=counts["skipped"],
        infra_retries=sum(o.infra_retries for o in obs),
        infra_reached=sum(1 for o in obs if o.outcome == "infra" and o.reached_model),
        cost_total=math.fsum(o.cost_usd for o in costed),
        cost_trials=len(costed),
        waste_usd=waste,
        turns=stats.summarize([o.turns for o in ran]),
        duration=stats.summarize([o.duration_s for o in ran]),
    )


def _arm_summary(arm: Arm, rows: Sequence[TaskRow], obs: Sequence[Observation], confidence: float) -> ArmSummary:
    parts = [r.arm(arm) for r in rows]
    passes = sum(p.passes for p in parts)
    valid = sum(p.valid for p in parts)
    costs = [p.mean_cost for p in parts if p.mean_cost is not None]
    total_cost = math.fsum(p.cost_total for p in parts)
    ran = [o for o in obs if o.arm == arm and o.outcome not in ("infra", "skipped")]
    return ArmSummary(
        arm=arm,
        passes=passes,
        valid=valid,
        unknown=sum(p.unknown for p in parts),
        truncated=sum(p.truncated for p in parts),
        infra=sum(p.infra for p in parts),
        infra_attempts=sum(p.infra + p.infra_retries for p in parts),
        skipped=sum(p.skipped for p in parts),
        wilson=stats.wilson_interval(passes, valid, confidence),
        clustered=stats.t_interval([p.rate for p in parts], confidence),
        mean_cost_per_trial=math.fsum(costs) / len(costs) if costs else None,
        total_cost_usd=total_cost,
        cost_per_pass=stats.cost_per_pass(total_cost, passes),
        waste_usd=math.fsum(p.waste_usd for p in parts),
        turns=stats.summarize([o.turns for o in ran]),
        duration=stats.summarize([o.duration_s for o in ran]),
        infra_reached=sum(p.infra_reached for p in parts),
    )


def _filled(rows: Sequence[TaskRow], skill_missing_pass: bool, confidence: float) -> FilledEstimate:
    def fill(t: TaskArm, as_pass: bool) -> tuple[int, int]:
        return (t.passes + (t.missing if as_pass else 0), t.valid + t.missing)

    skill = [fill(r.skill, skill_missing_pass) for r in rows]
    base = [fill(r.baseline, not skill_missing_pass) for r in rows]

    def pooled(pairs: list[tuple[int, int]]) -> Fraction | None:
        return exact.rate(sum(p[0] for p in pairs), sum(p[1] for p in pairs))

    paired = stats.paired_difference_counts(skill, base, confidence)
    diffs = [Fraction(ks, ns) - Fraction(kb, nb) for (ks, ns), (kb, nb) in zip(skill, base, strict=True) if ns and nb]
    return FilledEstimate(pooled(base), pooled(skill), paired, stats.sign_flip_test(diffs).p_value)


def _paired_median(rows: Sequence[TaskRow], pick: str) -> float | None:
    diffs: list[float | None] = []
    for r in rows:
        s = getattr(r.skill, pick).median
        b = getattr(r.baseline, pick).median
        diffs.append(None if s is None or b is None else s - b)
    return stats.summarize(diffs).median


def analyze(
    observations: Iterable[Observation], settings: DecisionSettings, *, mde_alpha: float | None = None
) -> Analysis:
    """Compute every estimate, interval and count the decision and the report use.

    Pooled rates count each arm's valid trials over all tasks; the paired
    difference, its interval and the sign-flip p use only the T' tasks with
    valid trials in both arms (docs/statistics.md#paired-difference). Cost uses every trial
    that reached the model, unknown and truncated included (they were paid for).
    ``mde_alpha``: the two-sided level of the smallest detectable effect, default 1 - confidence (a
    group-sequential look computes its intervals at its own nominal level and the design's MDE at the
    preregistered one).
    """
    obs = tuple(observations)
    confidence = settings.confidence
    by_task: dict[str, dict[str, list[Observation]]] = defaultdict(lambda: {a: [] for a in ARMS})
    for o in obs:
        by_task[o.task_id][o.arm].append(o)
    rows = tuple(
        TaskRow(task_id, _task_arm(arms["baseline"]), _task_arm(arms["skill"]))
        for task_id, arms in sorted(by_task.items())
    )
    paired = stats.paired_difference_counts(
        [(r.skill.passes, r.skill.valid) for r in rows],
        [(r.baseline.passes, r.baseline.valid) for r in rows],
        confidence,
    )
    diffs = [d for r in rows if (d := r.exact_difference) is not None]
    sign_flip = stats.sign_flip_test(diffs)

    usable = [r for r in rows if r.difference is not None]
    paired_table: PairedTable | None = None
    if usable and all(r.skill.valid == 1 and r.baseline.valid == 1 for r in usable):
        both = sum(1 for r in usable if r.skill.passes and r.baseline.passes)
        s_only = sum(1 for r in usable if r.skill.passes and not r.baseline.passes)
        b_only = sum(1 for r in usable if not r.skill.passes and r.baseline.passes)
        neither = len(usable) - both - s_only - b_only
        paired_table = PairedTable(
            both,
            s_only,
            b_only,
            neither,
            stats.mcnemar_exact(s_only, b_only),
            stats.newcombe_paired_interval(both, s_only, b_only, neither, confidence),
        )

    cost = stats.cost_ratio([r.skill.mean_cost for r in rows], [r.baseline.mean_cost for r in rows], confidence)

    alpha = 1.0 - confidence if mde_alpha is None else mde_alpha
    runs = math.fsum(r.skill.valid + r.baseline.valid for r in usable) / (2 * len(usable)) if usable else 0.0
    mde_default = stats.mde(len(usable), runs, alpha=alpha)
    pilot = stats.pilot_variances(
        [(r.skill.passes, r.skill.valid, r.baseline.passes, r.baseline.valid) for r in usable], runs
    )
    pilot_total = pilot.omega2 + (pilot.sigma2_skill + pilot.sigma2_baseline) / runs if runs else 0.0
    mde_value = mde_default
    mde_source: Literal["pilot", "default"] = "default"
    variances = stats.DEFAULT_VARIANCES
    # A pilot with zero observed variance (every task identical) would claim MDE = 0; keep the default then.
    if len(usable) >= 2 and pilot_total > 0:
        mde_value = stats.mde(len(usable), runs, alpha=alpha, variances=pilot)
        mde_source = "pilot"
        variances = pilot

    return Analysis(
        confidence=confidence,
        baseline=_arm_summary("baseline", rows, obs, confidence),
        skill=_arm_summary("skill", rows, obs, confidence),
        tasks=rows,
        paired=paired,
        sign_flip=sign_flip,
        paired_table=paired_table,
        cost=cost,
        mde=mde_value,
        mde_source=mde_source,
        mde_default=mde_default,
        worst_case=_filled(rows, skill_missing_pass=False, confidence=confidence),
        best_case=_filled(rows, skill_missing_pass=True, confidence=confidence),
        turns_paired_median=_paired_median(rows, "turns"),
        duration_paired_median=_paired_median(rows, "duration"),
        mde_variances=variances,
    )
