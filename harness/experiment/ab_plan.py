"""``skilltrial plan`` for an A/B preregistration: how many tasks and runs reach 80% power at the minimum
worthwhile gain, and what that would cost, before anything runs.

The power function is the report's (:func:`harness.analysis.stats.power`, whose inverse is the smallest
detectable effect every report shows); the search is :mod:`harness.analysis.sizing`'s. What this module adds
is where the variance components and the cost per trial come from, one of:

* a **pilot run** (``--pilot DIR``, any experiment directory): the variances its own report's MDE used
  (within-task per arm and between-task of the effect, from its per-task counts) and its spend per trial;
* an **A/A calibration run** (``--calibration DIR``): the within-task variance of the baseline, for both
  arms alike; an A/A run cannot see how much a skill's effect varies between tasks, so that part is as
  stated (``--omega2``, default 0) -- and the spend per trial of the baseline, for both arms;
* **stated rates** (``--baseline-rate P [--skill-rate Q]``): p(1 - p) per arm, the largest within-task
  variance a suite with that mean pass rate can have (so the sizing errs towards more tasks);
* nothing: the defaults of the report's MDE (a suite whose tasks mostly pass or mostly fail).

``--cost-per-trial`` states the cost (agents and judges, per trial) and wins over the pilot's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness import fmt
from harness.analysis import sizing, stats
from harness.analysis.groupseq import SPENDING_NAMES
from harness.analysis.rules import SIGN_FLIP_BELOW_TASKS
from harness.errors import ConfigError
from harness.reporting.model import about_usd, cost_per_trial, load_experiment
from harness.study.config import MAX_TASKS, Study


@dataclass(frozen=True)
class VarianceSource:
    """The variance components a sizing uses, where they came from, and a cost per trial if one is known."""

    variances: stats.Variances
    words: str
    cost_per_trial: float | None = None
    cost_words: str = ""


def from_pilot(root: Path) -> VarianceSource:
    """The variances the pilot run's own MDE used, and its spend per trial."""
    r = load_experiment(root)
    a = r.analysis
    if a.mde_source == "pilot":
        words = f"the pilot run {root} ({a.n_paired_tasks} paired tasks)"
    else:
        words = f"defaults: the pilot run {root} has too few paired tasks or no spread to estimate them"
    cost = cost_per_trial(r)
    return VarianceSource(a.mde_variances, words, cost, f"the pilot's spend per trial ({root})")


def from_calibration(root: Path, omega2: float) -> VarianceSource:
    """An A/A run: its two identical arms' within-task variance for both arms, ``omega2`` as stated."""
    r = load_experiment(root)
    a = r.analysis
    if a.mde_source != "pilot":
        return VarianceSource(
            stats.Variances(stats.DEFAULT_SIGMA2, stats.DEFAULT_SIGMA2, omega2),
            f"defaults: the calibration run {root} has too few paired tasks or no spread to estimate them",
        )
    within = (a.mde_variances.sigma2_baseline + a.mde_variances.sigma2_skill) / 2.0
    return VarianceSource(
        stats.Variances(within, within, omega2),
        f"within-task: the A/A calibration run {root} ({a.n_paired_tasks} tasks, both arms alike); "
        f"between-task omega2 as stated ({omega2:g}): an A/A run cannot see it",
        cost_per_trial(r),
        f"the calibration's spend per trial ({root}; the skill arm assumed to cost the same)",
    )


def from_rates(baseline: float, skill: float, omega2: float) -> VarianceSource:
    """Stated pass rates: p(1 - p) per arm, the most a suite with that mean rate can vary within tasks."""
    return VarianceSource(
        stats.Variances(skill * (1 - skill), baseline * (1 - baseline), omega2),
        f"stated pass rates, baseline {fmt.pct(baseline)} and skill {fmt.pct(skill)}: p(1 - p) per arm, the "
        "largest a suite with that mean can have",
    )


def default_source(omega2: float) -> VarianceSource:
    return VarianceSource(
        stats.Variances(stats.DEFAULT_SIGMA2, stats.DEFAULT_SIGMA2, omega2),
        "the defaults, 0.125 per arm: a suite whose tasks mostly pass or mostly fail (give --pilot, "
        "--calibration or --baseline-rate for better ones)",
    )


def _check(name: str, value: float | None, low: float, high: float, *, open_low: bool = False) -> None:
    if value is None:
        return
    if not (low < value <= high if open_low else low <= value <= high):
        bound = f"({low:g}, {high:g}]" if open_low else f"[{low:g}, {high:g}]"
        raise ConfigError(name, f"must be in {bound}, got {value:g}")


def source_from_options(
    *,
    pilot: Path | None,
    calibration: Path | None,
    baseline_rate: float | None,
    skill_rate: float | None,
    omega2: float | None,
    gain: float,
) -> VarianceSource:
    """The one source the options name (the CLI makes them exclusive), checked."""
    _check("--baseline-rate", baseline_rate, 0.0, 1.0)
    _check("--skill-rate", skill_rate, 0.0, 1.0)
    _check("--omega2", omega2, 0.0, 1.0)
    if skill_rate is not None and baseline_rate is None:
        raise ConfigError("--skill-rate", "goes with --baseline-rate (stated rates)")
    if pilot is not None:
        if omega2 is not None:
            raise ConfigError("--omega2", "a pilot run estimates the between-task variance itself; drop --omega2")
        return from_pilot(pilot)
    if calibration is not None:
        return from_calibration(calibration, omega2 or 0.0)
    if baseline_rate is not None:
        skill = skill_rate if skill_rate is not None else min(1.0, baseline_rate + gain)
        return from_rates(baseline_rate, skill, omega2 or 0.0)
    return default_source(omega2 or 0.0)


def plan_ab_lines(
    study: Study, source: VarianceSource, *, gain: float | None = None, cost_per_trial: float | None = None
) -> list[str]:
    """What ``skilltrial plan`` prints for an A/B preregistration: the preregistered design's MDE and power,
    then per runs-per-arm option the tasks that reach 80% power at ``gain`` (default: the minimum worthwhile
    gain) with their trials and expected cost, and the option with the fewest trials."""
    settings = study.prereg.decision
    runs = study.prereg.execution.runs_per_arm
    tasks = len(study.target_tasks())
    target = gain if gain is not None else settings.min_worthwhile_gain
    _check("--gain", target, 0.0, 1.0, open_low=True)
    _check("--cost-per-trial", cost_per_trial, 0.0, 1e6)
    alpha = sizing.design_alpha(settings, runs)
    v = source.variances
    cost = cost_per_trial if cost_per_trial is not None else source.cost_per_trial
    cost_words = "as stated" if cost_per_trial is not None else source.cost_words
    seq = settings.sequential if settings.rule == "interval" else None
    level = fmt.pct(1 - alpha, 2)
    lines = [
        f"A/B sizing for {study.prereg.skill}: {settings.rule} rule, {fmt.pct(settings.confidence)} confidence"
        + (
            f"; group-sequential ({SPENDING_NAMES[seq.spending]} spending): power of the final look alone, at its "
            f"nominal {level} (a lower bound: a boundary may be crossed earlier)"
            if seq is not None
            else ""
        ),
        f"variances per task: within-task sigma2 baseline {v.sigma2_baseline:.3f}, skill {v.sigma2_skill:.3f}; "
        f"between-task omega2 {v.omega2:.3f}; source: {source.words}",
        f"cost per trial (agents and judges): {about_usd(cost) + ' (' + cost_words + ')' if cost is not None else 'unknown (give --cost-per-trial or --pilot)'}",
        f"preregistered design, {tasks} tasks x {runs} runs per arm: smallest detectable effect "
        f"{fmt.pp(stats.mde(tasks, runs, alpha=alpha, variances=v)).lstrip('+')}; power at {fmt.pp(target)}: "
        f"{fmt.pct(stats.power(target, tasks, runs, alpha=alpha, variances=v))}",
        f"80% power at {fmt.pp(target)}"
        + (" (the minimum worthwhile gain)" if gain is None else "")
        + ", by runs per arm:",
        f"  {'runs per arm':>12}  {'tasks':>8}  {'trials':>9}  {'expected cost':>13}  {'power':>6}",
    ]
    options = sizing.size(
        target, alpha=alpha, variances=v, cost_per_trial=cost, runs_options=(*sizing.RUNS_OPTIONS, runs)
    )
    for s in options:
        mark = " *" if s.runs == runs else "  "
        if s.tasks is None:
            lines.append(f"  {s.runs:>10}{mark}  {'> ' + format(MAX_TASKS, ','):>8}  {'-':>9}  {'-':>13}  {'-':>6}")
            continue
        price = about_usd(s.cost_usd) if s.cost_usd is not None else "n/a"
        lines.append(f"  {s.runs:>10}{mark}  {s.tasks:>8,}  {s.trials or 0:>9,}  {price:>13}  {fmt.pct(s.power, 1):>6}")
    lines.append("  (* the preregistered runs per arm)")
    best = sizing.cheapest(options)
    if best is None:
        lines.append(f"no design of at most {MAX_TASKS:,} tasks reaches 80% power at {fmt.pp(target)}")
    else:
        lines.append(f"fewest trials: {design_line(best)}")
    lines.append(
        "the power function is the one behind every report's smallest detectable effect "
        f"(docs/statistics.md#smallest-detectable-effect); below {SIGN_FLIP_BELOW_TASKS} tasks adoption also needs "
        "the exact sign-flip test, which it does not model"
    )
    return lines


def design_line(s: sizing.Sizing) -> str:
    cost = f", about {about_usd(s.cost_usd)}" if s.cost_usd is not None else ""
    return f"{s.tasks:,} tasks x {s.runs} run{'s' if s.runs != 1 else ''} per arm ({s.trials or 0:,} trials{cost})"
