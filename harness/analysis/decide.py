"""The verdict: the preregistered rule, with the validity and completeness gates in front of it (pure).

:func:`decide` reads like its docstring: each gate is a function returning the reasons it found
(an empty list when it did not fire), in the order reports list them; then the rule's findings,
then notes. ``invalid`` reasons force an invalid verdict, ``inconclusive`` ones an inconclusive
one, and only when none fired does the preregistered rule decide. Every reason that applied is
returned, not only the first, and both rules' verdicts are kept for display.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, NamedTuple

from harness import fmt
from harness.analysis import exact
from harness.analysis.curtail import (
    Futility,
    Levels,
    StopVerdict,
    early_stop_armed,
    early_stop_verdict,
    futility,
    planned_tasks,
    remaining_trials,
)
from harness.analysis.estimates import Analysis
from harness.analysis.groupseq import SequentialResult
from harness.analysis.observations import DecisionContext
from harness.analysis.reasons import Reason, ReasonCode
from harness.analysis.rules import (
    MIN_ADOPT_TASKS,
    MIN_TASKS,
    Evidence,
    IntervalVerdict,
    PointVerdict,
    evidence_label,
    interval_rule,
    point_rule,
    rule_verdict,
)
from harness.study.config import DecisionSettings

Verdict = Literal["adopt", "reject", "inconclusive", "invalid"]
POINT_ONLY_LABEL = "adopt by the point rule; not distinguishable from noise"
"""What every report shows (in amber) instead of a plain ADOPT when only the point rule adopts."""
MDE_WARN = 0.15
"""Print a warning when the design cannot detect gains smaller than this (docs/statistics.md#smallest-detectable-effect)."""
INFRA_SHARE_WARN = 0.05
INFRA_GAP_WARN = 0.03
"""Infra-error share above 5% in an arm, or 3 points apart between arms, is flagged (docs/statistics.md#infra-imbalance)."""


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
    early_stop_verdict: StopVerdict | None = None
    """What the early stop certified when the run stopped early (None otherwise): the point rule's
    curtailed verdict, or a futility stop's reject or inconclusive."""
    sequential: SequentialResult | None = None
    """With a group-sequential design: which look decided, with its repeated intervals
    (:func:`harness.analysis.sequential.decide_run`); None for the fixed design."""

    @property
    def codes(self) -> tuple[ReasonCode, ...]:
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


def decide(analysis: Analysis, settings: DecisionSettings, context: DecisionContext) -> DecisionResult:
    """Apply the preregistered rule, with the validity and completeness gates in front of it.

    Order of precedence: ``invalid`` (provenance differs between or within
    arms) > ``inconclusive`` (budget stop, unbalanced or incomplete arms, an
    unsupported early stop, too many missing trials, missing-data fills that
    change the verdict, fewer than 2 paired tasks, pooled and task-weighted
    differences of opposite sign, unequal infrastructure noise, too few tasks
    to adopt) > the rule's verdict. Every reason that applied is returned; both
    rules' verdicts are computed for display.
    """
    point = point_rule(
        analysis.skill.exact_rate,
        analysis.baseline.exact_rate,
        analysis.cost,
        settings,
        (fmt.rate_and_excluded(analysis.skill), fmt.rate_and_excluded(analysis.baseline)),
    )
    interval = interval_rule(analysis.paired, analysis.cost, analysis.mde, settings, analysis.sign_flip.p_value)
    observed = point.verdict if settings.rule == "point" else interval.verdict
    early = _early_stop(analysis, settings, context)
    reasons = [
        *provenance_reasons(context),
        *early.reasons,
        *_budget_reasons(context),
        *_design_reasons(analysis, context, waive_balance=early.legitimate),
        *_missing_share_reasons(analysis, settings),
        *_task_count_reasons(analysis),
        *_sensitivity_reasons(analysis, settings, observed),
        *_direction_reasons(analysis),
        *_infra_imbalance_reasons(analysis, settings),
        *_adopt_task_count_reasons(analysis, observed),
        *(point.reasons if settings.rule == "point" else interval.reasons),
        *_judge_reasons(context),
        *_notes(analysis),
    ]
    verdict = _verdict(reasons, settings, point.verdict, interval.verdict)
    if verdict == "adopt" and settings.rule == "point" and interval.verdict != "adopt":
        reasons.append(
            Reason(
                ReasonCode.ADOPT_NOT_DISTINGUISHABLE,
                f"{POINT_ONLY_LABEL}: the interval rule says {interval.verdict} (paired gain "
                f"{fmt.pp(analysis.paired.mean)} {fmt.interval(analysis.paired.interval)})",
                "note",
            )
        )
    return DecisionResult(
        verdict=verdict,
        rule=settings.rule,
        reasons=tuple(reasons),
        point_verdict=point.verdict,
        interval_verdict=interval.verdict,
        evidence=evidence_label(analysis.paired),
        early_stop_verdict=early.verdict,
    )


def _verdict(
    reasons: list[Reason], settings: DecisionSettings, point_v: PointVerdict | None, interval_v: IntervalVerdict
) -> Verdict:
    """The strongest gate that fired, else the preregistered rule's verdict."""
    if any(r.kind == "invalid" for r in reasons):
        return "invalid"
    if any(r.kind == "inconclusive" for r in reasons):
        return "inconclusive"
    if settings.rule == "point":
        return point_v if point_v is not None else "inconclusive"
    return interval_v


# ================================================================================= gates


class _EarlyStopCheck(NamedTuple):
    verdict: StopVerdict | None
    """What the early stop certified (None when the run did not stop early, or stopped unsupported)."""
    legitimate: bool
    """The run stopped early by a preregistered, certified stop: the balance gates are waived."""
    reasons: list[Reason]


def _early_stop(analysis: Analysis, settings: DecisionSettings, context: DecisionContext) -> _EarlyStopCheck:
    """An early stop re-derived from the final data (trials still running when it fired included).

    Point rule: a note when curtailment certifies the verdict. Interval rule: when adoption is (still)
    impossible under the plan (:func:`harness.analysis.curtail.futility`), a note when every completion
    rejects, else ``FUTILITY_STOPPED`` (inconclusive). Any other early stop makes the run inconclusive.
    """
    if not context.early_stopped:
        return _EarlyStopCheck(None, False, [])
    remaining = remaining_trials(analysis, context.planned_runs_per_arm, context.planned_task_ids)
    left = sum(sum(v.values()) for v in remaining.values())
    n_tasks = len(remaining["skill"])
    armed = early_stop_armed(settings, n_tasks)
    if armed and settings.rule == "interval":
        levels = Levels(*context.futility_levels) if context.futility_levels is not None else None
        found = futility(analysis, remaining, settings, max_cost_per_trial=context.max_cost_per_trial, levels=levels)
        # The futility stop is re-derived from the final data, where its witness may be gone (trials that were
        # still running have finished): adoption stays impossible once it was (the bounds only tighten), so
        # it is accepted on that alone. Curtailment needs its certainty, which also persists.
        if found is not None and (settings.futility_stop or found.certain):
            return _futility_reasons(found, settings, left, 2 * n_tasks * context.planned_runs_per_arm)
    elif armed:
        early, _ = early_stop_verdict(
            analysis,
            settings,
            context.planned_runs_per_arm,
            context.planned_task_ids,
            max_cost_per_trial=context.max_cost_per_trial,
        )
        if early is not None:
            note = Reason(
                ReasonCode.EARLY_STOPPED,
                f"stopped early by preregistered curtailment: none of the {left} remaining trial(s) "
                f"could change the point rule's verdict ({early})",
                "note",
            )
            return _EarlyStopCheck(early, True, [note])
    if settings.rule == "point":
        why = (
            f"the {left} remaining trial(s) could still change the verdict"
            if armed
            else "the preregistration did not ask for early stopping"
        )
    elif armed and settings.futility_stop:
        why = f"adoption is still possible with the {left} remaining trial(s)"
    elif armed:
        why = f"the {left} remaining trial(s) could still change the verdict"
    elif settings.futility_stop or settings.early_stop == "curtail":
        why = f"the interval rule's early stops are armed only for plans of at least {MIN_ADOPT_TASKS} tasks"
    else:
        why = "the preregistration did not ask for early stopping"
    reason = Reason(ReasonCode.EARLY_STOP_UNSUPPORTED, f"the run stopped early but {why}", "inconclusive")
    return _EarlyStopCheck(None, False, [reason])


def _futility_reasons(found: Futility, settings: DecisionSettings, left: int, planned: int) -> _EarlyStopCheck:
    """An interval-rule stop: a note when every completion rejects (the rule's own reasons then say
    reject), else FUTILITY_STOPPED, which makes the verdict inconclusive (never adopt: no completion could)."""
    which = "the preregistered futility stop" if settings.futility_stop else "preregistered curtailment"
    saved = f"{left} of {planned} planned trial(s) not run ({fmt.pct(left / planned if planned else 0.0)})"
    if found.verdict == "reject":
        note = Reason(
            ReasonCode.EARLY_STOPPED,
            f"stopped early by {which}: {found.why}, and every completion of the plan ends in reject; {saved}",
            "note",
        )
        return _EarlyStopCheck("reject", True, [note])
    outlook = (
        "every completion of the plan ends inconclusive"
        if found.certain
        else "the full plan could have ended reject or inconclusive, never adopt"
    )
    reason = Reason(
        ReasonCode.FUTILITY_STOPPED,
        f"adoption is no longer possible under the plan; stopped early by {which}: {found.why}; {saved}; {outlook}",
        "inconclusive",
    )
    return _EarlyStopCheck("inconclusive", True, [reason])


def _budget_reasons(context: DecisionContext) -> list[Reason]:
    if not context.budget_stopped:
        return []
    return [
        Reason(
            ReasonCode.BUDGET_STOPPED,
            "the cumulative budget stopped the run before the planned design",
            "inconclusive",
        )
    ]


def _missing_share_reasons(analysis: Analysis, settings: DecisionSettings) -> list[Reason]:
    return [
        Reason(
            ReasonCode.TOO_MANY_MISSING,
            f"{arm.arm}: {arm.missing} of {arm.valid + arm.missing} trials unknown, truncated or "
            "infra after reaching the model "
            f"({fmt.pct(arm.missing_share, 1)} > {fmt.pct(settings.max_missing_share, 1)})",
            "inconclusive",
        )
        for arm in (analysis.baseline, analysis.skill)
        if arm.exact_missing_share > exact.decimal(settings.max_missing_share)
    ]


def _task_count_reasons(analysis: Analysis) -> list[Reason]:
    if analysis.n_paired_tasks >= MIN_TASKS:
        return []
    return [
        Reason(
            ReasonCode.TOO_FEW_TASKS,
            f"{analysis.n_paired_tasks} task(s) have valid trials in both arms; at least {MIN_TASKS} are needed",
            "inconclusive",
        )
    ]


def _sensitivity_reasons(
    analysis: Analysis, settings: DecisionSettings, observed: PointVerdict | IntervalVerdict | None
) -> list[Reason]:
    """Inconclusive when filling the missing trials against the skill or in its favour changes the verdict."""
    worst, best = analysis.worst_case, analysis.best_case
    cost, mde = analysis.cost, analysis.mde
    v_worst = rule_verdict(settings, worst.exact_skill_rate, worst.exact_baseline_rate, worst.paired, cost, mde,
                           worst.sign_flip_p)  # fmt: skip
    v_best = rule_verdict(settings, best.exact_skill_rate, best.exact_baseline_rate, best.paired, cost, mde,
                          best.sign_flip_p)  # fmt: skip
    if len({observed, v_worst, v_best}) == 1:
        return []
    shown = "pooled difference" if settings.rule == "point" else "task-weighted gain"
    w_gain = worst.pooled_difference if settings.rule == "point" else worst.paired.mean
    b_gain = best.pooled_difference if settings.rule == "point" else best.paired.mean
    return [
        Reason(
            ReasonCode.MISSING_SENSITIVE,
            f"filling the unknown/truncated trials against the skill ({shown} {fmt.pp(w_gain)}: {v_worst}) "
            f"or in its favour ({fmt.pp(b_gain)}: {v_best}) changes the verdict ({observed} as observed)",
            "inconclusive",
        )
    ]


def _direction_reasons(analysis: Analysis) -> list[Reason]:
    """Inconclusive when the pooled and the task-weighted differences have opposite signs, decided on the
    exact rationals (a difference that is exactly 0 has no direction)."""
    pooled, task_w = analysis.pooled_difference, analysis.paired.mean
    if exact.sign(analysis.exact_pooled_difference) * exact.sign(analysis.paired.exact_mean) >= 0:
        return []
    return [
        Reason(
            ReasonCode.POOLED_TASK_DISAGREE,
            f"the pooled difference ({fmt.pp(pooled)}) and the task-weighted difference ({fmt.pp(task_w)}) "
            "point in opposite directions",
            "inconclusive",
        )
    ]


def _infra_gap(analysis: Analysis) -> Fraction:
    """How far apart the arms' infra-error shares are, exactly (0.4 - 0.3 is not above a limit of 0.1)."""
    return abs(analysis.baseline.exact_infra_share - analysis.skill.exact_infra_share)


def _infra_imbalance_reasons(analysis: Analysis, settings: DecisionSettings) -> list[Reason]:
    gap = _infra_gap(analysis)
    if gap <= exact.decimal(settings.max_infra_imbalance):
        return []
    return [
        Reason(
            ReasonCode.INFRA_IMBALANCE,
            f"infra-error shares differ by {fmt.pp(float(gap)).lstrip('+')} between arms (baseline "
            f"{fmt.pct(analysis.baseline.infra_share, 1)}, skill {fmt.pct(analysis.skill.infra_share, 1)}; "
            f"preregistered limit {fmt.pp(settings.max_infra_imbalance).lstrip('+')}): the arms did not run alike",
            "inconclusive",
        )
    ]


def _adopt_task_count_reasons(analysis: Analysis, observed: PointVerdict | IntervalVerdict | None) -> list[Reason]:
    if observed != "adopt" or analysis.n_paired_tasks >= MIN_ADOPT_TASKS:
        return []
    return [
        Reason(
            ReasonCode.TOO_FEW_TASKS_TO_ADOPT,
            f"only {analysis.n_paired_tasks} task(s) have valid trials in both arms; adoption needs at least "
            f"{MIN_ADOPT_TASKS}",
            "inconclusive",
        )
    ]


def _notes(analysis: Analysis) -> list[Reason]:
    """Infrastructure noise and what the design can detect: never change the verdict."""
    notes = [
        Reason(
            ReasonCode.INFRA_NOISE, f"{arm.arm}: {fmt.pct(arm.infra_share, 1)} of trials ended in infra errors", "note"
        )
        for arm in (analysis.baseline, analysis.skill)
        if arm.exact_infra_share > exact.decimal(INFRA_SHARE_WARN)
    ]
    gap = _infra_gap(analysis)
    if gap > exact.decimal(INFRA_GAP_WARN):
        notes.append(
            Reason(ReasonCode.INFRA_NOISE, f"infra-error shares differ by {fmt.pp(float(gap))} between arms", "note")
        )
    headroom = 1.0 - (analysis.baseline.rate if analysis.baseline.rate is not None else 0.0)
    if analysis.mde >= 1.0 or (analysis.baseline.rate is not None and analysis.mde > headroom):
        notes.append(
            Reason(
                ReasonCode.MDE_IMPOSSIBLE,
                f"the smallest detectable effect ({fmt.pp(analysis.mde).lstrip('+')}) exceeds what this design can "
                f"show at all (a gain of at most {fmt.pp(min(1.0, headroom)).lstrip('+')} over the baseline's "
                "pass rate): no result of this size can support adoption; add tasks",
                "note",
            )
        )
    elif analysis.mde > MDE_WARN:
        notes.append(
            Reason(
                ReasonCode.MDE_LARGE,
                f"this design can only detect gains of about {fmt.pp(analysis.mde)} or more; "
                "add tasks to see smaller ones",
                "note",
            )
        )
    return notes


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
                out.append(Reason(ReasonCode.JUDGE_NOT_INDEPENDENT, why, "note"))
    return out[:1]


def provenance_reasons(context: DecisionContext) -> list[Reason]:
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
            Reason(
                ReasonCode.PROVENANCE_MISMATCH,
                f"{name} differs {scope} ({where}): the arms are not comparable",
                "invalid",
            )
        )
    return reasons


def _design_reasons(analysis: Analysis, context: DecisionContext, waive_balance: bool) -> list[Reason]:
    reasons: list[Reason] = []
    planned = context.planned_runs_per_arm
    rows = {r.task_id: r for r in analysis.tasks}
    unbalanced, short, extra = [], [], []
    for tid in planned_tasks(analysis, context.planned_task_ids):
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
                ReasonCode.UNBALANCED,
                f"the arms finished different numbers of trials on {len(unbalanced)} task(s) "
                f"(baseline vs skill): {', '.join(unbalanced[:5])}{' ...' if len(unbalanced) > 5 else ''}",
                "inconclusive",
            )
        )
    if short and not waive_balance:
        reasons.append(
            Reason(
                ReasonCode.INCOMPLETE,
                f"{len(short)} task(s) have fewer finished trials than the planned {planned} per arm",
                "inconclusive",
            )
        )
    if extra or unplanned:
        which = extra + unplanned
        reasons.append(
            Reason(
                ReasonCode.UNPLANNED_TRIALS,
                f"results hold trials the plan did not call for (tasks: {', '.join(which[:5])})",
                "inconclusive",
            )
        )
    return reasons
