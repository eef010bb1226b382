"""From trial outcomes to adopt / reject / inconclusive / invalid (pure, deterministic, no I/O).

Three steps, each usable on its own:

1. :func:`observations_from_records` reduces ``results.jsonl`` records to one
   :class:`Observation` per trial (the last attempt of each trial id).
2. :func:`analyze` computes everything a report shows (DESIGN.md section 3,
   stats_anchors.md section 3): per-arm ``k/n`` with their exclusions, the
   per-task table, the paired task-level difference with its t-interval and an
   exact sign-flip p, McNemar and Newcombe when there is one run per arm, the
   cost ratio with its interval, the MDE, and best/worst-case fills of missing
   trials.
3. :func:`decide` applies the preregistered rule and the gates around it:
   invalid when provenance differs, inconclusive when the data cannot carry a
   verdict, otherwise the rule's verdict. Every reason that applied is
   returned, not only the first.

:func:`curtailment` is the exact early-stopping check for the point rule.

Outcomes: ``pass``/``fail`` are valid trials (the denominators). ``unknown``
(the judge gave no verdict) and ``truncated`` (deadline or per-trial budget)
are *missing*: excluded from denominators, counted, and filled both ways for
the sensitivity bounds. ``infra`` is not a model outcome: excluded from rates
and from cost, counted, its spend reported as waste. ``skipped`` (TODO tasks)
is counted and otherwise ignored.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, get_args

from harness import fmt
from harness.analysis import stats
from harness.records import ARMS, Arm, Outcome, PassRule, TrialRecord, outcome
from harness.results.attempts import final_attempts
from harness.study.config import DecisionSettings

Verdict = Literal["adopt", "reject", "inconclusive", "invalid"]
PointVerdict = Literal["adopt", "reject"]
IntervalVerdict = Literal["adopt", "reject", "inconclusive"]
Evidence = Literal["supported", "contradicted", "not distinguishable from noise"]
ReasonKind = Literal["invalid", "inconclusive", "rule", "note"]

OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))
MIN_TASKS = 2
"""Fewer tasks with valid trials in both arms than this: no variance estimate, so no verdict."""
MIN_ADOPT_TASKS = 6
"""Fewer paired tasks than this: no rule may adopt (the verdict becomes inconclusive)."""
SIGN_FLIP_BELOW_TASKS = 10
"""Below this many paired tasks the interval rule also needs the exact sign-flip p <= alpha to adopt."""
POINT_ONLY_LABEL = "adopt by the point rule; not distinguishable from noise"
"""What every report shows (in amber) instead of a plain ADOPT when only the point rule adopts."""
MDE_WARN = 0.15
"""Print a warning when the design cannot detect gains smaller than this (stats_anchors 3.7)."""
INFRA_SHARE_WARN = 0.05
INFRA_GAP_WARN = 0.03
"""Infra-error share above 5% in an arm, or 3 points apart between arms, is flagged (stats_anchors 3.5)."""

PROVENANCE_FIELDS: tuple[str, ...] = (
    "model",
    "cli_version",
    "image_digest",
    "base_sha",
    "prompt_template_sha256",
    "lock_hash",
    "judge_model",
    "harness_version",
)
"""Field order for provenance given as plain tuples; mappings and (field, value) pairs may name any field."""

# Reason codes. Gates first (they override the rule), then the rules' own findings, then notes.
PROVENANCE_MISMATCH = "PROVENANCE_MISMATCH"
BUDGET_STOPPED = "BUDGET_STOPPED"
UNBALANCED = "UNBALANCED"
INCOMPLETE = "INCOMPLETE"
UNPLANNED_TRIALS = "UNPLANNED_TRIALS"
EARLY_STOP_UNSUPPORTED = "EARLY_STOP_UNSUPPORTED"
TOO_MANY_MISSING = "TOO_MANY_MISSING"
MISSING_SENSITIVE = "MISSING_SENSITIVE"
TOO_FEW_TASKS = "TOO_FEW_TASKS"
POOLED_TASK_DISAGREE = "POOLED_TASK_DISAGREE"
SKILL_BETTER = "SKILL_BETTER"
NOT_BETTER = "NOT_BETTER"
NO_VALID_TRIALS = "NO_VALID_TRIALS"
GAIN_SIGNIFICANT = "GAIN_SIGNIFICANT"
GAIN_BELOW_MINIMUM = "GAIN_BELOW_MINIMUM"
UNDERPOWERED = "UNDERPOWERED"
COST_OK = "COST_OK"
COST_TOO_HIGH = "COST_TOO_HIGH"
COST_UNCERTAIN = "COST_UNCERTAIN"
EARLY_STOPPED = "EARLY_STOPPED"
INFRA_NOISE = "INFRA_NOISE"
MDE_LARGE = "MDE_LARGE"
MDE_IMPOSSIBLE = "MDE_IMPOSSIBLE"
INFRA_IMBALANCE = "INFRA_IMBALANCE"
TOO_FEW_TASKS_TO_ADOPT = "TOO_FEW_TASKS_TO_ADOPT"
SIGN_FLIP_REQUIRED = "SIGN_FLIP_REQUIRED"
ADOPT_NOT_DISTINGUISHABLE = "ADOPT_NOT_DISTINGUISHABLE"
JUDGE_NOT_INDEPENDENT = "JUDGE_NOT_INDEPENDENT"


# ================================================================================ inputs


@dataclass(frozen=True)
class Observation:
    """The final outcome of one planned trial, as the analysis sees it.

    ``infra_retries`` / ``infra_retry_cost_usd`` describe earlier attempts of
    the same trial that failed for infrastructure reasons and were superseded
    by this one: they never count for or against an arm, but their number and
    spend are reported.
    """

    task_id: str
    arm: Arm
    outcome: Outcome
    cost_usd: float = 0.0
    turns: int | None = None
    duration_s: float | None = None
    infra_retries: int = 0
    infra_retry_cost_usd: float = 0.0
    reached_model: bool = False
    """For ``infra`` outcomes: the gateway forwarded at least one request upstream (GatewayMeter.forwarded > 0).
    Such a trial reached the model, so it counts like an unknown (missing) in the fills and the missing share:
    otherwise a skill could turn its failures into excluded infrastructure errors."""

    def __post_init__(self) -> None:
        if self.arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {self.arm!r}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {sorted(OUTCOMES)}, got {self.outcome!r}")
        # A NaN or negative cost would silently poison every mean and ratio downstream.
        for name in ("cost_usd", "infra_retry_cost_usd"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.infra_retries < 0:
            raise ValueError("infra_retries must be >= 0")


def _duration(rec: TrialRecord) -> float | None:
    # The agent's own wall-clock (CLI duration_ms) is the comparable figure across arms;
    # the controller's phase timing is the fallback when the CLI printed no result.
    if rec.agent is not None and rec.agent.duration_ms is not None:
        return rec.agent.duration_ms / 1000.0
    agent_phase = rec.durations_s.get("agent")
    return float(agent_phase) if agent_phase is not None else None


def observations_from_records(records: Iterable[TrialRecord], pass_rule: PassRule) -> tuple[Observation, ...]:
    """One :class:`Observation` per trial id from result lines (every attempt of every trial).

    The last attempt decides the trial's outcome via :func:`harness.records.outcome`
    under ``pass_rule``; earlier ``infra_error`` attempts are superseded and
    counted in ``infra_retries`` (with their spend in ``infra_retry_cost_usd``).
    Cost is the agent's (``TrialRecord.agent_cost_usd``: the larger of the CLI's figure and the
    gateway's meter); the judge's cost is the harness's overhead, identical in kind for both arms.
    """
    finals, earlier = final_attempts(records)
    out: list[Observation] = []
    for rec in finals:
        superseded = [r for r in earlier.get(rec.trial_id, []) if r.status == "infra_error"]
        out.append(
            Observation(
                task_id=rec.task_id,
                arm=rec.arm,
                outcome=outcome(rec, pass_rule),
                cost_usd=max(0.0, rec.agent_cost_usd),
                turns=rec.agent.num_turns if rec.agent is not None else None,
                duration_s=_duration(rec),
                infra_retries=len(superseded),
                infra_retry_cost_usd=math.fsum(max(0.0, r.agent_cost_usd) for r in superseded),
                reached_model=rec.gateway is not None and rec.gateway.forwarded > 0,
            )
        )
    return tuple(out)


ProvenanceKey = tuple[tuple[str, str | None], ...]
ProvenanceLike = Mapping[str, str | None] | tuple[str | None, ...] | tuple[tuple[str, str | None], ...]


def provenance_key(value: ProvenanceLike) -> ProvenanceKey:
    """Normalise one provenance (mapping, (field, value) pairs, or a plain tuple in PROVENANCE_FIELDS order)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), None if v is None else str(v)) for k, v in value.items()))
    items = tuple(value)
    if items and all(isinstance(x, tuple) and len(x) == 2 for x in items):
        pairs = [(str(p[0]), None if p[1] is None else str(p[1])) for p in items if isinstance(p, tuple)]
        return tuple(sorted(pairs))
    if len(items) > len(PROVENANCE_FIELDS):
        raise ValueError(f"a plain provenance tuple has at most {len(PROVENANCE_FIELDS)} fields: {PROVENANCE_FIELDS}")
    return tuple(sorted((f, None if v is None else str(v)) for f, v in zip(PROVENANCE_FIELDS, items, strict=False)))


@dataclass(frozen=True)
class DecisionContext:
    """What the decision needs besides the outcomes: how the run went, and what it ran on.

    ``provenance_by_arm`` maps each arm to the distinct provenances of its
    trials (mappings, (field, value) pairs or plain tuples in
    :data:`PROVENANCE_FIELDS` order; normalised on construction). A None value
    means "not known for that trial" and is not compared.
    ``planned_task_ids``: tasks the plan ran (None: the tasks seen in the data).
    ``max_cost_per_trial``: a hard per-trial cost bound (the gateway's cap), used
    only by :func:`curtailment` to decide whether the cost condition is settled.
    """

    budget_stopped: bool
    provenance_by_arm: Mapping[str, Collection[ProvenanceLike]]
    planned_runs_per_arm: int
    early_stopped: bool = False
    planned_task_ids: frozenset[str] | None = None
    max_cost_per_trial: float | None = None
    normalized_provenance: Mapping[str, frozenset[ProvenanceKey]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.planned_runs_per_arm < 1:
            raise ValueError("planned_runs_per_arm must be >= 1")
        norm = {arm: frozenset(provenance_key(p) for p in provs) for arm, provs in self.provenance_by_arm.items()}
        object.__setattr__(self, "normalized_provenance", norm)
        if self.planned_task_ids is not None:
            object.__setattr__(self, "planned_task_ids", frozenset(self.planned_task_ids))


def context_from_records(
    records: Iterable[TrialRecord],
    planned_runs_per_arm: int,
    budget_stopped: bool,
    *,
    early_stopped: bool = False,
    planned_task_ids: Iterable[str] | None = None,
    max_cost_per_trial: float | None = None,
) -> DecisionContext:
    """Build a :class:`DecisionContext` from result lines.

    Provenance is collected from the final attempt of each trial whose outcome
    is neither infra nor skipped: an attempt that failed on infrastructure
    produced no outcome, so a stray value on it cannot make outcomes
    incomparable. The model the API actually resolved (``agent.resolved_model``)
    is included beside the requested alias, so an alias that moved mid-run is
    caught.
    """
    finals, _ = final_attempts(records)
    by_arm: dict[str, set[ProvenanceKey]] = {arm: set() for arm in ARMS}
    for rec in finals:
        if not rec.is_outcome:
            continue
        prov: dict[str, str | None] = dict(rec.provenance.model_dump())
        prov["resolved_model"] = rec.agent.resolved_model if rec.agent is not None else None
        by_arm[rec.arm].add(provenance_key(prov))
    return DecisionContext(
        budget_stopped=budget_stopped,
        provenance_by_arm={arm: frozenset(v) for arm, v in by_arm.items()},
        planned_runs_per_arm=planned_runs_per_arm,
        early_stopped=early_stopped,
        planned_task_ids=None if planned_task_ids is None else frozenset(planned_task_ids),
        max_cost_per_trial=max_cost_per_trial,
    )


# ============================================================================== analysis


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
        s, b = self.skill.rate, self.baseline.rate
        return None if s is None or b is None else s - b


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
    def missing(self) -> int:
        """Unknown, truncated, and infra after reaching the model."""
        return self.unknown + self.truncated + self.infra_reached

    @property
    def missing_share(self) -> float:
        """missing / (trials that reached the model); infra that never reached it and skipped are not in the base."""
        base = self.valid + self.missing
        return self.missing / base if base else 0.0

    @property
    def infra_share(self) -> float:
        base = self.valid + self.unknown + self.truncated + self.infra
        return self.infra / base if base else 0.0


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

    baseline_rate: float | None
    skill_rate: float | None
    paired: stats.MeanInterval
    sign_flip_p: float | None = None

    @property
    def pooled_difference(self) -> float | None:
        if self.skill_rate is None or self.baseline_rate is None:
            return None
        return self.skill_rate - self.baseline_rate


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
        s, b = self.skill.rate, self.baseline.rate
        return None if s is None or b is None else s - b

    @property
    def tasks_improved(self) -> int:
        return sum(1 for t in self.tasks if t.difference is not None and t.difference > 0)

    @property
    def tasks_worse(self) -> int:
        return sum(1 for t in self.tasks if t.difference is not None and t.difference < 0)

    @property
    def tasks_tied(self) -> int:
        return sum(1 for t in self.tasks if t.difference == 0)


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

    def pooled(pairs: list[tuple[int, int]]) -> float | None:
        n = sum(p[1] for p in pairs)
        return sum(p[0] for p in pairs) / n if n else None

    paired = stats.paired_difference_counts(skill, base, confidence)
    diffs = [ks / ns - kb / nb for (ks, ns), (kb, nb) in zip(skill, base, strict=True) if ns and nb]
    return FilledEstimate(pooled(base), pooled(skill), paired, stats.sign_flip_test(diffs).p_value)


def _paired_median(rows: Sequence[TaskRow], pick: str) -> float | None:
    diffs: list[float | None] = []
    for r in rows:
        s = getattr(r.skill, pick).median
        b = getattr(r.baseline, pick).median
        diffs.append(None if s is None or b is None else s - b)
    return stats.summarize(diffs).median


def analyze(observations: Iterable[Observation], settings: DecisionSettings) -> Analysis:
    """Compute every estimate, interval and count the decision and the report use.

    Pooled rates count each arm's valid trials over all tasks; the paired
    difference, its interval and the sign-flip p use only the T' tasks with
    valid trials in both arms (stats_anchors 3.2-3.3). Cost uses every trial
    that reached the model, unknown and truncated included (they were paid for).
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
    diffs = [r.difference for r in rows if r.difference is not None]
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

    alpha = 1.0 - confidence
    runs = math.fsum(r.skill.valid + r.baseline.valid for r in usable) / (2 * len(usable)) if usable else 0.0
    mde_default = stats.mde(len(usable), runs, alpha=alpha)
    pilot = stats.pilot_variances(
        [(r.skill.passes, r.skill.valid, r.baseline.passes, r.baseline.valid) for r in usable], runs
    )
    pilot_total = pilot.omega2 + (pilot.sigma2_skill + pilot.sigma2_baseline) / runs if runs else 0.0
    mde_value = mde_default
    mde_source: Literal["pilot", "default"] = "default"
    # A pilot with zero observed variance (every task identical) would claim MDE = 0; keep the default then.
    if len(usable) >= 2 and pilot_total > 0:
        mde_value = stats.mde(len(usable), runs, alpha=alpha, variances=pilot)
        mde_source = "pilot"

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
    )


# ============================================================================== decision


@dataclass(frozen=True)
class Reason:
    """One finding: a stable machine ``code``, a sentence for people, and what it did to the verdict.

    ``kind``: ``invalid`` / ``inconclusive`` force that verdict; ``rule`` is what
    the preregistered rule found (it decides when no gate fired); ``note`` is
    informational and never changes the verdict.
    """

    code: str
    message: str
    kind: ReasonKind


@dataclass(frozen=True)
class DecisionResult:
    """The verdict, every reason that applied, and both rules' verdicts for display."""

    verdict: Verdict
    rule: Literal["point", "interval"]
    reasons: tuple[Reason, ...]
    point_verdict: PointVerdict | None
    """The article's rule on these data (None when an arm has no valid trial)."""
    interval_verdict: IntervalVerdict
    evidence: Evidence
    """From the paired interval: supported (lower bound > 0), contradicted (upper < 0), else noise."""
    early_stop_verdict: PointVerdict | None = None
    """What curtailment certified when the run stopped early (None otherwise)."""

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    @property
    def point_only_adopt(self) -> bool:
        """The verdict is adopt by the point rule while the interval rule does not adopt: shown amber."""
        return self.verdict == "adopt" and self.rule == "point" and self.interval_verdict != "adopt"

    @property
    def label(self) -> str:
        """The verdict as every report words it: ``adopt``, or :data:`POINT_ONLY_LABEL` (amber)."""
        return POINT_ONLY_LABEL if self.point_only_adopt else self.verdict

    @property
    def point_label(self) -> str:
        """The point rule's own verdict for display: never a plain adopt when the interval rule disagrees."""
        if self.point_verdict == "adopt" and self.interval_verdict != "adopt":
            return POINT_ONLY_LABEL
        return self.point_verdict or "n/a"


def _plain_ratio(x: float | None) -> str:
    """A cost ratio as the reasons quote it, beside a bare threshold: ``1.23`` (no ``x``)."""
    return fmt.ratio(x, suffix="")


def evidence_label(paired: stats.MeanInterval) -> Evidence:
    """supported if the paired lower bound > 0, contradicted if the upper bound < 0, else noise."""
    if paired.mean is not None and paired.interval.low > 0:
        return "supported"
    if paired.mean is not None and paired.interval.high < 0:
        return "contradicted"
    return "not distinguishable from noise"


def _point_rule(
    skill_rate: float | None,
    baseline_rate: float | None,
    cost: stats.CostRatio,
    settings: DecisionSettings,
    counts: tuple[str, str] = ("", ""),
) -> tuple[PointVerdict | None, list[Reason]]:
    threshold = 1.0 + settings.cost_increase_max
    if skill_rate is None or baseline_rate is None or cost.ratio is None:
        return None, [
            Reason(NO_VALID_TRIALS, "an arm has no valid (pass/fail) trial: the point rule cannot compare", "rule")
        ]
    reasons: list[Reason] = []
    skill_n, base_n = (f" ({c})" if c else "" for c in counts)
    better = skill_rate > baseline_rate
    if better:
        reasons.append(
            Reason(
                SKILL_BETTER,
                f"skill pass rate {fmt.pct(skill_rate, 1)}{skill_n} > baseline {fmt.pct(baseline_rate, 1)}{base_n}",
                "rule",
            )
        )
    else:
        reasons.append(
            Reason(
                NOT_BETTER,
                f"skill pass rate {fmt.pct(skill_rate, 1)}{skill_n} does not beat baseline {fmt.pct(baseline_rate, 1)}{base_n} "
                "(ties reject)",
                "rule",
            )
        )
    cost_ok = cost.ratio <= threshold
    if cost_ok:
        reasons.append(Reason(COST_OK, f"cost ratio {_plain_ratio(cost.ratio)} <= {_plain_ratio(threshold)}", "rule"))
    else:
        reasons.append(
            Reason(COST_TOO_HIGH, f"cost ratio {_plain_ratio(cost.ratio)} > {_plain_ratio(threshold)}", "rule")
        )
    return ("adopt" if better and cost_ok else "reject"), reasons


def _interval_rule(
    paired: stats.MeanInterval,
    cost: stats.CostRatio,
    mde: float,
    settings: DecisionSettings,
    sign_flip_p: float | None = None,
) -> tuple[IntervalVerdict, list[Reason]]:
    threshold = 1.0 + settings.cost_increase_max
    level = f"{100 * settings.confidence:g}%"
    reasons: list[Reason] = []
    iv = paired.interval
    gain_sig = paired.mean is not None and iv.low > 0
    alpha = 1.0 - settings.confidence
    if gain_sig and paired.n < SIGN_FLIP_BELOW_TASKS and (sign_flip_p is None or sign_flip_p > alpha):
        # Below 10 tasks the t-interval alone is not trusted: the exact sign-flip test must agree.
        gain_sig = False
        reasons.append(
            Reason(
                SIGN_FLIP_REQUIRED,
                f"the interval of the gain {fmt.interval(iv)} excludes 0, but with {paired.n} tasks (< {SIGN_FLIP_BELOW_TASKS}) "
                f"adoption also needs the exact sign-flip p <= {alpha:g} (p = " + fmt.p_value(sign_flip_p) + ")",
                "rule",
            )
        )
    gain_small = paired.mean is not None and iv.high < settings.min_worthwhile_gain
    if gain_sig:
        reasons.append(
            Reason(GAIN_SIGNIFICANT, f"the {level} interval of the gain {fmt.interval(iv)} excludes 0", "rule")
        )
    if gain_small:
        reasons.append(
            Reason(
                GAIN_BELOW_MINIMUM,
                f"the {level} interval of the gain {fmt.interval(iv)} lies below the minimum worthwhile gain "
                f"{fmt.pp(settings.min_worthwhile_gain)}",
                "rule",
            )
        )
    if not gain_sig and not gain_small and not reasons:
        reasons.append(
            Reason(
                UNDERPOWERED,
                f"the {level} interval of the gain {fmt.interval(iv)} includes 0 and reaches the minimum worthwhile gain "
                f"{fmt.pp(settings.min_worthwhile_gain)}; this design detects gains of about {fmt.pp(mde)} (MDE)",
                "rule",
            )
        )
    civ = cost.interval
    cost_ok = cost.ratio is not None and civ.high <= threshold
    cost_high = cost.ratio is not None and civ.low > threshold
    if cost_ok:
        reasons.append(
            Reason(
                COST_OK,
                f"cost ratio {_plain_ratio(cost.ratio)} {fmt.interval(civ, _plain_ratio)} stays <= {_plain_ratio(threshold)}",
                "rule",
            )
        )
    elif cost_high:
        reasons.append(
            Reason(
                COST_TOO_HIGH,
                f"cost ratio {_plain_ratio(cost.ratio)} {fmt.interval(civ, _plain_ratio)} > {_plain_ratio(threshold)}",
                "rule",
            )
        )
    else:
        reasons.append(
            Reason(
                COST_UNCERTAIN,
                f"cost ratio {_plain_ratio(cost.ratio)} {fmt.interval(civ, _plain_ratio)} crosses {_plain_ratio(threshold)}",
                "rule",
            )
        )
    # A gain certainly below the preregistered minimum is not worth adopting even if it is certainly > 0.
    if gain_small or cost_high:
        return "reject", reasons
    if gain_sig and cost_ok:
        return "adopt", reasons
    return "inconclusive", reasons


def _rule_verdict(
    settings: DecisionSettings,
    skill_rate: float | None,
    baseline_rate: float | None,
    paired: stats.MeanInterval,
    cost: stats.CostRatio,
    mde: float,
    sign_flip_p: float | None = None,
) -> str | None:
    if settings.rule == "point":
        return _point_rule(skill_rate, baseline_rate, cost, settings)[0]
    return _interval_rule(paired, cost, mde, settings, sign_flip_p)[0]


_MODEL_FAMILIES = ("opus", "sonnet", "haiku")


def judge_independence_warning(model: str | None, judge_model: str | None) -> str | None:
    """A sentence when the judge is not independent of the executor (same model or same family), else None."""
    if not model or not judge_model:
        return None
    a, b = model.strip().lower(), judge_model.strip().lower()
    if a == b:
        return f"the judge model is the executor model ({model}): its verdicts are not independent"
    fam_a = {f for f in _MODEL_FAMILIES if f in a}
    fam_b = {f for f in _MODEL_FAMILIES if f in b}
    if fam_a & fam_b:
        return (
            f"the judge model ({judge_model}) is of the same family as the executor model ({model}): "
            "its verdicts may share the executor's blind spots"
        )
    return None


def _judge_reasons(context: DecisionContext) -> list[Reason]:
    models: set[str] = set()
    judges: set[str] = set()
    for keys in context.normalized_provenance.values():
        for key in keys:
            fields = dict(key)
            for name in ("model", "resolved_model"):
                if fields.get(name):
                    models.add(str(fields[name]))
            if fields.get("judge_model"):
                judges.add(str(fields["judge_model"]))
    out: list[Reason] = []
    for m in sorted(models):
        for j in sorted(judges):
            why = judge_independence_warning(m, j)
            if why is not None:
                out.append(Reason(JUDGE_NOT_INDEPENDENT, why, "note"))
    return out[:1]


def _provenance_reasons(context: DecisionContext) -> list[Reason]:
    values: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for arm, keys in context.normalized_provenance.items():
        for key in keys:
            for name, value in key:
                if value is not None:
                    values[name][arm].add(value)
    reasons: list[Reason] = []
    for name in sorted(values):
        per_arm = values[name]
        every = set().union(*per_arm.values())
        if len(every) <= 1:
            continue
        where = "; ".join(f"{arm}: {', '.join(sorted(per_arm[arm]))}" for arm in sorted(per_arm))
        within = [arm for arm in sorted(per_arm) if len(per_arm[arm]) > 1]
        scope = f"within {' and '.join(within)}" if within else "between arms"
        reasons.append(
            Reason(PROVENANCE_MISMATCH, f"{name} differs {scope} ({where}): the arms are not comparable", "invalid")
        )
    return reasons


def _planned_tasks(analysis: Analysis, planned_task_ids: Iterable[str] | None) -> list[str]:
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
) -> tuple[PointVerdict | None, int]:
    """The preregistered early stop: (the verdict no remaining trial can change, or None; how many
    trials remain). None whenever curtailment was not preregistered (it serves the point rule only).
    The same check for the running loop, the decision and the benchmark's simulation."""
    remaining = remaining_trials(analysis, planned_runs_per_arm, planned_task_ids)
    left = sum(sum(v.values()) for v in remaining.values())
    if settings.early_stop != "curtail" or settings.rule != "point":
        return None, left
    return curtailment(analysis, remaining, settings, max_cost_per_trial=max_cost_per_trial), left


def remaining_trials(
    analysis: Analysis, planned_runs_per_arm: int, planned_task_ids: Iterable[str] | None = None
) -> dict[str, dict[str, int]]:
    """Trials still to run, per arm and task: planned runs minus finished ones (never negative)."""
    rows = {r.task_id: r for r in analysis.tasks}
    out: dict[str, dict[str, int]] = {arm: {} for arm in ARMS}
    for tid in _planned_tasks(analysis, planned_task_ids):
        row = rows.get(tid)
        for arm in ARMS:
            done = row.arm(arm).finished if row is not None else 0
            out[arm][tid] = max(0, planned_runs_per_arm - done)
    return out


def _design_reasons(analysis: Analysis, context: DecisionContext, waive_balance: bool) -> list[Reason]:
    reasons: list[Reason] = []
    planned = context.planned_runs_per_arm
    rows = {r.task_id: r for r in analysis.tasks}
    unbalanced, short, extra = [], [], []
    for tid in _planned_tasks(analysis, context.planned_task_ids):
        row = rows.get(tid)
        b = row.baseline.finished if row else 0
        s = row.skill.finished if row else 0
        if b != s:
            unbalanced.append(f"{tid} ({b} vs {s})")
        if min(b, s) < planned:
            short.append(tid)
        if max(b, s) > planned:
            extra.append(tid)
    unplanned = sorted(
        r.task_id
        for r in analysis.tasks
        if context.planned_task_ids is not None
        and r.task_id not in context.planned_task_ids
        and (r.baseline.finished or r.skill.finished)
    )
    if unbalanced and not waive_balance:
        reasons.append(
            Reason(
                UNBALANCED,
                f"the arms finished different numbers of trials on {len(unbalanced)} task(s) "
                f"(baseline vs skill): {', '.join(unbalanced[:5])}{' ...' if len(unbalanced) > 5 else ''}",
                "inconclusive",
            )
        )
    if short and not waive_balance:
        reasons.append(
            Reason(
                INCOMPLETE,
                f"{len(short)} task(s) have fewer finished trials than the planned {planned} per arm",
                "inconclusive",
            )
        )
    if extra or unplanned:
        which = extra + unplanned
        reasons.append(
            Reason(
                UNPLANNED_TRIALS,
                f"results hold trials the plan did not call for (tasks: {', '.join(which[:5])})",
                "inconclusive",
            )
        )
    return reasons


def decide(analysis: Analysis, settings: DecisionSettings, context: DecisionContext) -> DecisionResult:
    """Apply the preregistered rule, with the validity and completeness gates in front of it.

    Order of precedence: ``invalid`` (provenance differs between or within
    arms) > ``inconclusive`` (budget stop, unbalanced or incomplete arms, an
    unsupported early stop, too many missing trials, missing-data fills that
    change the verdict, fewer than 2 paired tasks, pooled and task-weighted
    differences of opposite sign) > the rule's verdict. Every reason that
    applied is returned; both rules' verdicts are computed for display.
    """
    reasons: list[Reason] = _provenance_reasons(context)

    cost = analysis.cost
    point_v, point_reasons = _point_rule(
        analysis.skill.rate,
        analysis.baseline.rate,
        cost,
        settings,
        (fmt.rate_and_excluded(analysis.skill), fmt.rate_and_excluded(analysis.baseline)),
    )
    interval_v, interval_reasons = _interval_rule(
        analysis.paired, cost, analysis.mde, settings, analysis.sign_flip.p_value
    )

    early: PointVerdict | None = None
    legit_early = False
    if context.early_stopped:
        early, left = early_stop_verdict(
            analysis,
            settings,
            context.planned_runs_per_arm,
            context.planned_task_ids,
            max_cost_per_trial=context.max_cost_per_trial,
        )
        if early is not None:
            legit_early = True
            reasons.append(
                Reason(
                    EARLY_STOPPED,
                    f"stopped early by preregistered curtailment: none of the {left} remaining trial(s) "
                    f"could change the point rule's verdict ({early})",
                    "note",
                )
            )
        else:
            why = (
                "the preregistration did not ask for early stopping"
                if settings.early_stop != "curtail"
                else "curtailment applies to the point rule only"
                if settings.rule != "point"
                else f"the {left} remaining trial(s) could still change the verdict"
            )
            reasons.append(Reason(EARLY_STOP_UNSUPPORTED, f"the run stopped early but {why}", "inconclusive"))

    if context.budget_stopped:
        reasons.append(
            Reason(BUDGET_STOPPED, "the cumulative budget stopped the run before the planned design", "inconclusive")
        )
    reasons.extend(_design_reasons(analysis, context, waive_balance=legit_early))

    for arm in (analysis.baseline, analysis.skill):
        if arm.missing_share > settings.max_missing_share:
            reasons.append(
                Reason(
                    TOO_MANY_MISSING,
                    f"{arm.arm}: {arm.missing} of {arm.valid + arm.missing} trials unknown, truncated or "
                    "infra after reaching the model "
                    f"({fmt.pct(arm.missing_share, 1)} > {fmt.pct(settings.max_missing_share, 1)})",
                    "inconclusive",
                )
            )

    if analysis.n_paired_tasks < MIN_TASKS:
        reasons.append(
            Reason(
                TOO_FEW_TASKS,
                f"{analysis.n_paired_tasks} task(s) have valid trials in both arms; at least {MIN_TASKS} are needed",
                "inconclusive",
            )
        )

    observed = point_v if settings.rule == "point" else interval_v
    worst, best = analysis.worst_case, analysis.best_case
    v_worst = _rule_verdict(
        settings, worst.skill_rate, worst.baseline_rate, worst.paired, cost, analysis.mde, worst.sign_flip_p
    )
    v_best = _rule_verdict(
        settings, best.skill_rate, best.baseline_rate, best.paired, cost, analysis.mde, best.sign_flip_p
    )
    if len({observed, v_worst, v_best}) > 1:
        shown = "pooled difference" if settings.rule == "point" else "task-weighted gain"
        w_gain = worst.pooled_difference if settings.rule == "point" else worst.paired.mean
        b_gain = best.pooled_difference if settings.rule == "point" else best.paired.mean
        reasons.append(
            Reason(
                MISSING_SENSITIVE,
                f"filling the unknown/truncated trials against the skill ({shown} {fmt.pp(w_gain)}: {v_worst}) "
                f"or in its favour ({fmt.pp(b_gain)}: {v_best}) changes the verdict ({observed} as observed)",
                "inconclusive",
            )
        )

    pooled, task_w = analysis.pooled_difference, analysis.paired.mean
    if pooled is not None and task_w is not None and pooled * task_w < 0:
        reasons.append(
            Reason(
                POOLED_TASK_DISAGREE,
                f"the pooled difference ({fmt.pp(pooled)}) and the task-weighted difference ({fmt.pp(task_w)}) "
                "point in opposite directions",
                "inconclusive",
            )
        )

    gap = abs(analysis.baseline.infra_share - analysis.skill.infra_share)
    if gap > settings.max_infra_imbalance:
        reasons.append(
            Reason(
                INFRA_IMBALANCE,
                f"infra-error shares differ by {fmt.pp(gap).lstrip('+')} between arms (baseline "
                f"{fmt.pct(analysis.baseline.infra_share, 1)}, skill {fmt.pct(analysis.skill.infra_share, 1)}; preregistered "
                f"limit {fmt.pp(settings.max_infra_imbalance).lstrip('+')}): the arms did not run alike",
                "inconclusive",
            )
        )
    if observed == "adopt" and analysis.n_paired_tasks < MIN_ADOPT_TASKS:
        reasons.append(
            Reason(
                TOO_FEW_TASKS_TO_ADOPT,
                f"only {analysis.n_paired_tasks} task(s) have valid trials in both arms; adoption needs at least "
                f"{MIN_ADOPT_TASKS}",
                "inconclusive",
            )
        )

    reasons.extend(point_reasons if settings.rule == "point" else interval_reasons)
    reasons.extend(_judge_reasons(context))

    for arm in (analysis.baseline, analysis.skill):
        if arm.infra_share > INFRA_SHARE_WARN:
            reasons.append(
                Reason(INFRA_NOISE, f"{arm.arm}: {fmt.pct(arm.infra_share, 1)} of trials ended in infra errors", "note")
            )
    if gap > INFRA_GAP_WARN:
        reasons.append(Reason(INFRA_NOISE, f"infra-error shares differ by {fmt.pp(gap)} between arms", "note"))
    headroom = 1.0 - (analysis.baseline.rate if analysis.baseline.rate is not None else 0.0)
    if analysis.mde >= 1.0 or (analysis.baseline.rate is not None and analysis.mde > headroom):
        reasons.append(
            Reason(
                MDE_IMPOSSIBLE,
                f"the smallest detectable effect ({fmt.pp(analysis.mde).lstrip('+')}) exceeds what this design can "
                f"show at all (a gain of at most {fmt.pp(min(1.0, headroom)).lstrip('+')} over the baseline's "
                "pass rate): no result of this size can support adoption; add tasks",
                "note",
            )
        )
    elif analysis.mde > MDE_WARN:
        reasons.append(
            Reason(
                MDE_LARGE,
                f"this design can only detect gains of about {fmt.pp(analysis.mde)} or more; add tasks to see smaller ones",
                "note",
            )
        )

    verdict: Verdict
    if any(r.kind == "invalid" for r in reasons):
        verdict = "invalid"
    elif any(r.kind == "inconclusive" for r in reasons):
        verdict = "inconclusive"
    elif settings.rule == "point":
        verdict = point_v if point_v is not None else "inconclusive"
    else:
        verdict = interval_v
    if verdict == "adopt" and settings.rule == "point" and interval_v != "adopt":
        reasons.append(
            Reason(
                ADOPT_NOT_DISTINGUISHABLE,
                f"{POINT_ONLY_LABEL}: the interval rule says {interval_v} (paired gain {fmt.pp(analysis.paired.mean)} "
                f"{fmt.interval(analysis.paired.interval)})",
                "note",
            )
        )
    return DecisionResult(
        verdict=verdict,
        rule=settings.rule,
        reasons=tuple(reasons),
        point_verdict=point_v,
        interval_verdict=interval_v,
        evidence=evidence_label(analysis.paired),
        early_stop_verdict=early,
    )


# ============================================================================ curtailment


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
    data: Analysis | Iterable[Observation],
    remaining_by_arm: Mapping[str, Mapping[str, int]],
    settings: DecisionSettings,
    *,
    max_cost_per_trial: float | None = None,
) -> PointVerdict | None:
    """The point rule's final verdict if no outcome of the remaining trials can change it, else None.

    Deterministic curtailment (stats_anchors 3.8 item 1), exact on pooled rates
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
    analysis = data if isinstance(data, Analysis) else analyze(data, settings)
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
