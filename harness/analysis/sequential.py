"""A preregistered group-sequential design at work (pure): which look decides, and when the loop stops.

With ``decision.sequential`` (interval rule only) the data are analysed at the looks of
:func:`harness.analysis.groupseq.design`, each after a round of the plan. A look analyses exactly the
trials of the rounds up to it (``Observation.run_index``), complete in every planned task and arm, and
applies :func:`harness.analysis.decide.decide` (every gate included) at the look's nominal confidence:
the repeated confidence intervals. The first interim look whose verdict is adopt or reject decides the
run; otherwise the final look does, at its own nominal level, with the futility stop re-derived at the
levels of the looks that were still ahead when it fired.

* :func:`decide_run`: the verdict of a run, and the analysis its reports show (the deciding look's data).
  It depends on the data alone, not on when the loop stopped: a sharded run that went on past a crossing
  look is decided by that look all the same (the trials after it are recorded and left out).
* :func:`early_stop`: what the running loop acts on after a trial: a look that decides, else the futility
  stop (:func:`harness.analysis.curtail.early_stop_verdict` at the looks' levels).

Without ``decision.sequential`` both are the fixed design's: :func:`decide_run` is ``analyze`` then
``decide``. See docs/statistics.md#group-sequential-design.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from harness import fmt
from harness.analysis import groupseq
from harness.analysis.curtail import EarlyStop, Levels, StopVerdict, early_stop_verdict, planned_tasks, stop_message
from harness.analysis.decide import DecisionResult, decide
from harness.analysis.estimates import Analysis, analyze
from harness.analysis.observations import DecisionContext, Observation
from harness.analysis.reasons import Reason, ReasonCode
from harness.records import ARMS
from harness.study.config import DecisionSettings


class Decided(NamedTuple):
    """A run's decision and the analysis its reports show (the data the decision rests on)."""

    analysis: Analysis
    decision: DecisionResult


def sequential_design(settings: DecisionSettings, runs: int) -> groupseq.SequentialDesign | None:
    """The preregistered design for ``runs`` runs per arm, or None (the fixed design, or the point rule)."""
    if settings.sequential is None or settings.rule != "interval":
        return None
    return groupseq.design(settings.sequential, runs, settings.confidence)


def look_observations(observations: Iterable[Observation], round_: int) -> tuple[Observation, ...]:
    """The trials a look after ``round_`` rounds analyses: runs 0 .. round_ - 1 (a trial of unknown run is
    in no interim look)."""
    return tuple(o for o in observations if o.run_index is not None and o.run_index < round_)


def rounds_complete(observations: Iterable[Observation], planned_task_ids: Iterable[str], runs: int) -> int:
    """How many rounds are complete: every planned task has a finished (not skipped) trial of each of those
    runs in both arms."""
    have: dict[tuple[str, str], set[int]] = {}
    for o in observations:
        if o.outcome != "skipped" and o.run_index is not None:
            have.setdefault((o.task_id, o.arm), set()).add(o.run_index)
    done = runs
    ids = list(planned_task_ids)
    if not ids:
        return 0
    for tid in ids:
        for arm in ARMS:
            got = have.get((tid, arm), set())
            r = 0
            while r < done and r in got:
                r += 1
            done = r
    return done


def _planned_ids(observations: Sequence[Observation], context: DecisionContext) -> list[str]:
    if context.planned_task_ids is not None:
        return sorted(context.planned_task_ids)
    return sorted({o.task_id for o in observations if o.outcome != "skipped"})


def _look_settings(settings: DecisionSettings, look: groupseq.Look) -> DecisionSettings:
    """The fixed interval rule at the look's nominal level (the design itself does not recur inside)."""
    return settings.model_copy(update={"confidence": look.confidence, "sequential": None})


def _look_decision(
    observations: Sequence[Observation], look: groupseq.Look, settings: DecisionSettings, context: DecisionContext
) -> tuple[Analysis, DecisionResult]:
    """An interim look: the rounds up to it are a complete plan of ``look.round`` runs, decided at its level."""
    look_settings = _look_settings(settings, look)
    analysis = analyze(look_observations(observations, look.round), look_settings, mde_alpha=1.0 - settings.confidence)
    ctx = DecisionContext(
        budget_stopped=False,
        provenance_by_arm=context.provenance_by_arm,
        planned_runs_per_arm=look.round,
        planned_task_ids=context.planned_task_ids,
        max_cost_per_trial=context.max_cost_per_trial,
    )
    return analysis, decide(analysis, look_settings, ctx)


def _finished(observations: Iterable[Observation]) -> int:
    return sum(1 for o in observations if o.outcome != "skipped")


def _look_words(design: groupseq.SequentialDesign, look: groupseq.Look) -> str:
    return f"look {look.number} of {len(design.looks)} (after round {look.round} of {design.runs})"


def decide_run(observations: Iterable[Observation], settings: DecisionSettings, context: DecisionContext) -> Decided:
    """The run's verdict under the preregistered design, and the analysis its reports show.

    Fixed design: ``analyze`` and ``decide``. Group-sequential: the first interim look (with complete data)
    whose verdict is adopt or reject decides, with the analysis of its rounds; else the final look on all
    the data at its nominal level (the report's analysis then covers all the data at the preregistered
    confidence, beside the look's repeated intervals in ``decision.sequential``).
    """
    obs = tuple(observations)
    design = sequential_design(settings, context.planned_runs_per_arm)
    if design is None:
        analysis = analyze(obs, settings)
        return Decided(analysis, decide(analysis, settings, context))
    ids = _planned_ids(obs, context)
    done = rounds_complete(obs, ids, design.runs)
    planned = 2 * len(ids) * design.runs
    reached = 0
    for look in design.looks[:-1]:
        if look.round > done:
            break
        reached += 1
        look_analysis, found = _look_decision(obs, look, settings, context)
        if found.verdict not in ("adopt", "reject"):
            continue
        data = look_observations(obs, look.round)
        result = _result(design, look, look_analysis, reached=reached, planned=planned, data=data, every=obs)
        decision = _noted(found, result, ReasonCode.BOUNDARY_CROSSED, _crossed_words(result, found.verdict))
        return Decided(analyze(data, settings), decision)

    final = design.final
    final_settings = _look_settings(settings, final)
    ctx = dataclasses.replace(context, futility_levels=design.futility_levels(done))
    final_analysis = analyze(obs, final_settings, mde_alpha=1.0 - settings.confidence)
    found = decide(final_analysis, final_settings, ctx)
    reached += 1 if done >= final.round else 0
    result = _result(design, final, final_analysis, reached=reached, planned=planned, data=obs, every=obs)
    decision = _noted(found, result, ReasonCode.FINAL_LOOK, _final_words(result))
    return Decided(analyze(obs, settings), decision)


def _result(
    design: groupseq.SequentialDesign,
    look: groupseq.Look,
    analysis: Analysis,
    *,
    reached: int,
    planned: int,
    data: Sequence[Observation],
    every: Sequence[Observation],
) -> groupseq.SequentialResult:
    """What the decision carries: ``look`` decided on ``data`` (of ``every`` finished trial) with ``analysis``."""
    return groupseq.SequentialResult(
        design=design,
        look=look,
        stopped_early=look is not design.final,
        paired=analysis.paired,
        cost=analysis.cost,
        looks_reached=reached,
        planned_trials=planned,
        analysed_trials=_finished(data),
        later_trials=_finished(every) - _finished(data),
    )


def _noted(found: DecisionResult, result: groupseq.SequentialResult, code: ReasonCode, words: str) -> DecisionResult:
    return dataclasses.replace(found, reasons=(*found.reasons, Reason(code, words, "note")), sequential=result)


def _crossed_words(result: groupseq.SequentialResult, verdict: str) -> str:
    design, look = result.design, result.look
    later = (
        f"; {result.later_trials} trial(s) of later rounds finished and are left out of the decision"
        if result.later_trials
        else ""
    )
    why = "success" if verdict == "adopt" else "a gain below the minimum worthwhile gain"
    return (
        f"{_look_words(design, look)} decided {verdict} ({why}): the preregistered {design.name} boundary "
        f"(z >= {look.boundary:.3f}, nominal level {fmt.pct(look.confidence, 2)}) keeps the overall false-adoption "
        f"level at {fmt.pct(design.alpha, 1)} one-sided; repeated {fmt.pct(1 - 2 * design.alpha)} interval of the gain "
        f"{fmt.pp(result.paired.mean)} {fmt.interval(result.paired.interval)}; {result.analysed_trials} of "
        f"{result.planned_trials} planned trials analysed{later}"
    )


def _final_words(result: groupseq.SequentialResult) -> str:
    design, look = result.design, result.look
    interim = len(design.looks) - 1
    return (
        f"group-sequential design ({design.name}): no interim look decided "
        f"({min(result.looks_reached, interim)} of {interim} reached); the final look decides at its nominal "
        f"level {fmt.pct(look.confidence, 2)} (repeated {fmt.pct(1 - 2 * design.alpha)} interval of the gain "
        f"{fmt.pp(result.paired.mean)} {fmt.interval(result.paired.interval)})"
    )


class SequentialStop(NamedTuple):
    """What the loop acts on: the verdict a stop reports now (None: go on), the trials left, and the look
    that decided (None when the stop is the futility stop)."""

    verdict: StopVerdict | None
    remaining: int
    look: groupseq.Look | None = None
    looks: int = 0
    """How many looks the design has (for the message)."""


def early_stop(
    observations: Iterable[Observation],
    settings: DecisionSettings,
    context: DecisionContext,
    *,
    looks_checked: int = 0,
) -> SequentialStop:
    """The preregistered early stop under a group-sequential design, over the final records so far.

    A complete interim look whose verdict is adopt or reject stops the run; else the futility stop
    (:func:`harness.analysis.curtail.early_stop_verdict`) at the levels of the looks still ahead.
    ``looks_checked``: interim looks at rounds up to this one are known not to decide (a caller that checked
    them already; their data cannot change), so they are skipped. Without a design: the fixed design's stop.
    """
    obs = tuple(observations)
    runs = context.planned_runs_per_arm
    design = sequential_design(settings, runs)
    analysis = analyze(obs, settings)
    ids = planned_tasks(analysis, context.planned_task_ids)
    if design is None:
        stop = early_stop_verdict(analysis, settings, runs, ids, max_cost_per_trial=context.max_cost_per_trial)
        return SequentialStop(stop.verdict, stop.remaining)
    done = rounds_complete(obs, ids, runs)
    left = max(0, 2 * len(ids) * runs - _finished(obs))
    for look in design.looks[:-1]:
        if look.round > done:
            break
        if look.round <= looks_checked:
            continue
        _, found = _look_decision(obs, look, settings, context)
        if found.verdict in ("adopt", "reject"):
            return SequentialStop(found.verdict, left, look, len(design.looks))
    stop = early_stop_verdict(
        analysis,
        settings,
        runs,
        ids,
        max_cost_per_trial=context.max_cost_per_trial,
        levels=Levels(*design.futility_levels(done)),
    )
    return SequentialStop(stop.verdict, stop.remaining, None, len(design.looks))


def sequential_stop_message(settings: DecisionSettings, stop: SequentialStop) -> str:
    """The reason the loop records on every trial a stop kept from running."""
    if stop.look is None:
        return stop_message(settings, EarlyStop(stop.verdict, stop.remaining))
    return (
        f"early stop (preregistered group-sequential design): look {stop.look.number} of {stop.looks} "
        f"(after round {stop.look.round}) decided {stop.verdict}; the {stop.remaining} remaining trial(s) are not run"
    )
