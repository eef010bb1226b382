"""Sizing an A/B design (pure): how many tasks and runs reach 80% power, and what that would cost.

One power function: :func:`harness.analysis.stats.power`, whose inverse at 80% is the smallest detectable
effect every report shows (:func:`harness.analysis.stats.mde`). ``skilltrial plan`` sizes a design with it
from a pilot run, a calibration run or stated rates (:func:`size`), and a report of an inconclusive run says
what a new, separately locked experiment would need (:func:`next_experiment`): never more trials for the run
that was decided, whose plan was locked.

The power is that of the fixed design's final test at level ``alpha``; under a group-sequential design
``alpha`` is the final look's nominal level, which makes the figure a lower bound (a boundary may also be
crossed earlier). No design is smaller than the fewest tasks that can adopt at all (6, or 7 at a Pocock
design's level: :func:`harness.analysis.rules.fewest_tasks_to_adopt`); below
:data:`harness.analysis.rules.SIGN_FLIP_BELOW_TASKS` the interval rule also needs the exact sign-flip test,
which the power function does not model (the figure is optimistic there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.analysis import exact, groupseq, stats
from harness.analysis.estimates import Analysis
from harness.analysis.rules import fewest_tasks_to_adopt
from harness.study.config import MAX_TASKS, DecisionSettings

RUNS_OPTIONS = (1, 2, 3, 5, 10)
"""The runs per arm ``skilltrial plan`` tabulates (besides the preregistered one)."""
TARGET_POWER = stats.DEFAULT_POWER


@dataclass(frozen=True)
class Sizing:
    """One design: ``tasks`` x ``runs`` per arm (None tasks: more than :data:`MAX_TASKS` would be needed)."""

    gain: float
    runs: int
    tasks: int | None
    power: float
    """The power at the gain with that many tasks (at :data:`MAX_TASKS` when ``tasks`` is None)."""
    cost_usd: float | None
    """2 x tasks x runs x the cost of a trial, when a cost per trial is known."""

    @property
    def trials(self) -> int | None:
        return None if self.tasks is None else 2 * self.tasks * self.runs


def design_alpha(settings: DecisionSettings, runs: int) -> float:
    """The two-sided level the power is computed at: 1 - confidence, or under a group-sequential design the
    final look's nominal level (2 x its one-sided p), which gives a lower bound on the design's power."""
    if settings.sequential is not None and settings.rule == "interval":
        return 2.0 * groupseq.design(settings.sequential, runs, settings.confidence).final.nominal
    return 1.0 - settings.confidence


def tasks_needed(
    gain: float,
    runs: int,
    *,
    alpha: float,
    variances: stats.Variances,
    power: float = TARGET_POWER,
    max_tasks: int = MAX_TASKS,
) -> int | None:
    """The fewest tasks whose power at ``gain`` with ``runs`` per arm reaches ``power``, and never fewer than
    can adopt at all at ``alpha`` (:func:`harness.analysis.rules.fewest_tasks_to_adopt`); None when ``gain``
    is not positive or more than ``max_tasks`` would be needed. The power is monotone in the task count at
    any power above one half, so the search halves."""
    if not exact.above(gain, 0.0) or runs < 1:
        return None

    def enough(tasks: int) -> bool:  # a continuous figure against a threshold: within the stated tolerance
        return exact.at_least(stats.power(gain, tasks, runs, alpha=alpha, variances=variances), power)

    if not enough(max_tasks):
        return None
    lo, hi = fewest_tasks_to_adopt(1.0 - alpha), max_tasks
    if enough(lo):
        return lo
    while hi - lo > 1:  # enough(hi), not enough(lo)
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid
    return hi


def sizing(gain: float, runs: int, *, alpha: float, variances: stats.Variances, cost_per_trial: float | None) -> Sizing:
    """The smallest design with ``runs`` per arm reaching 80% power at ``gain``, with its cost."""
    tasks = tasks_needed(gain, runs, alpha=alpha, variances=variances)
    shown = tasks if tasks is not None else MAX_TASKS
    cost = None if tasks is None or cost_per_trial is None else 2 * tasks * runs * cost_per_trial
    return Sizing(gain, runs, tasks, stats.power(gain, shown, runs, alpha=alpha, variances=variances), cost)


def size(
    gain: float,
    *,
    alpha: float,
    variances: stats.Variances,
    cost_per_trial: float | None,
    runs_options: tuple[int, ...] = RUNS_OPTIONS,
) -> tuple[Sizing, ...]:
    """One :class:`Sizing` per runs-per-arm option, fewest runs first."""
    return tuple(
        sizing(gain, r, alpha=alpha, variances=variances, cost_per_trial=cost_per_trial)
        for r in sorted(set(runs_options))
    )


def cheapest(options: tuple[Sizing, ...]) -> Sizing | None:
    """The option with the fewest trials (ties: fewer tasks, since tasks are what a team must write)."""
    feasible = [s for s in options if s.trials is not None]
    return min(feasible, key=lambda s: (s.trials or 0, s.tasks or 0)) if feasible else None


@dataclass(frozen=True)
class NextExperiment:
    """What a new, separately locked experiment would need after an inconclusive run."""

    basis: Literal["observed difference", "minimum worthwhile gain"]
    design: Sizing
    """At the observed difference when it exceeds the minimum worthwhile gain, else at that minimum."""
    at_minimum: Sizing | None
    """At the minimum worthwhile gain as well, when ``design`` is at the (larger) observed difference."""
    variances: Literal["this run", "default"]
    """Where the variance components came from (the report's MDE used the same)."""


def next_experiment(
    analysis: Analysis, settings: DecisionSettings, runs: int, *, cost_per_trial: float | None
) -> NextExperiment | None:
    """The design a new experiment would need for 80% power, with ``runs`` per arm, at the observed paired
    difference when it exceeds the minimum worthwhile gain (and then at that minimum too), else at the
    minimum; the variances are the ones the report's MDE used. None when there is no positive gain to power
    (the observed difference is not above a minimum worthwhile gain of 0)."""
    alpha = design_alpha(settings, runs)
    variances = analysis.mde_variances
    source: Literal["this run", "default"] = "this run" if analysis.mde_source == "pilot" else "default"
    minimum = settings.min_worthwhile_gain
    observed = analysis.paired.mean
    if observed is not None and exact.above(observed, minimum):
        at_min = (
            sizing(minimum, runs, alpha=alpha, variances=variances, cost_per_trial=cost_per_trial)
            if exact.above(minimum, 0.0)
            else None
        )
        design = sizing(observed, runs, alpha=alpha, variances=variances, cost_per_trial=cost_per_trial)
        return NextExperiment("observed difference", design, at_min, source)
    if not exact.above(minimum, 0.0):
        return None
    design = sizing(minimum, runs, alpha=alpha, variances=variances, cost_per_trial=cost_per_trial)
    return NextExperiment("minimum worthwhile gain", design, None, source)
