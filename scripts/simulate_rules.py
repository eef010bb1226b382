"""Operating characteristics of the decision rules, by simulation with known true effects.

Each simulated experiment draws T tasks with U-shaped difficulty (baseline pass
probability p ~ Beta(.5, .5)), gives the skill a logit shift b chosen so that
the mean true gain E[expit(logit p + b) - p] equals the target effect, runs N
trials per arm and task, and sends the outcomes through the real
``harness.analysis.estimates.analyze`` and ``harness.analysis.decide.decide`` under both rules.
Costs are drawn per task (log-normal) with per-trial noise; the skill's true
cost ratio is ``--cost-ratio`` (default 1.0, so the cost condition rarely
binds and the table shows the pass-rate logic). Every cell has its own seeded
``random.Random``, so a cell's numbers do not depend on which other cells ran.

    python3 scripts/simulate_rules.py --reps 1000 --seed 20261130

Prints a Markdown table: P(adopt) / P(reject) / P(inconclusive) per rule.
At effect 0 P(adopt) is the false-adoption rate; at positive effects it is power.
The small-suite rows (3-6 tasks) show the small-sample gates at work. A second table
gives the coverage of the cost-ratio interval (``harness.analysis.stats.cost_ratio``, Fieller)
for a skill whose true cost ratio is ``--coverage-ratio``.

A third table (``--futility-reps``, at ``--futility-tasks``) replays the same simulated experiments
trial by trial in a planned order (``harness.plan.plan_trials``) with the interval rule's futility stop
checked after every trial, as the running loop does with ``--jobs 1``
(``harness.analysis.curtail.early_stop_verdict``), and compares the verdict each stopped run reports
(``decide`` on the stopped data) with the verdict of the same experiment run in full. No per-trial cost
cap is assumed (the simulated costs are unbounded), so the cost condition never stops a run here.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pickle
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file (python3 scripts/simulate_rules.py): make the repository root importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.analysis import sequential
from harness.analysis.curtail import early_stop_verdict
from harness.analysis.decide import decide
from harness.analysis.estimates import analyze
from harness.analysis.groupseq import Spending
from harness.analysis.observations import DecisionContext, Observation, provenance_by_arm
from harness.plan import plan_trials
from harness.records import Arm, Outcome
from harness.study.config import DecisionSettings, SequentialSettings, Task

DEFAULT_REPS = 2000
DEFAULT_SEED = 20261130
TASKS = (3, 5, 6, 10, 20, 50)
RUNS = 3
EFFECTS = (0.0, 0.06, 0.125, 0.24)
_GRID = 4000
_PROVENANCE = {
    "model": "sim-model",
    "cli_version": "0.0.0",
    "image_digest": "sha256:sim",
    "base_sha": "0" * 40,
    "prompt_template_sha256": "sim-template",
    "lock_hash": "sim-lock",
}


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _expit(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _arcsine(u: float) -> float:
    # p = sin^2(u * pi/2) with u ~ U(0,1) is exactly Beta(.5, .5); clamp so logit stays finite.
    return min(1.0 - 1e-12, max(1e-12, math.sin(u * math.pi / 2.0) ** 2))


def mean_gain(shift: float) -> float:
    """E[expit(logit p + shift) - p] for p ~ Beta(.5, .5), by midpoint quadrature over the arcsine map."""
    total = 0.0
    for i in range(_GRID):
        p = _arcsine((i + 0.5) / _GRID)
        total += _expit(_logit(p) + shift) - p
    return total / _GRID


def shift_for(effect: float) -> float:
    """The logit shift whose mean true gain is ``effect`` (bisection; the gain is increasing in the shift)."""
    if effect == 0.0:
        return 0.0
    lo, hi = (0.0, 20.0) if effect > 0 else (-20.0, 0.0)
    for _ in range(80):
        mid = (lo + hi) / 2.0
        if mean_gain(mid) < effect:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Cell:
    tasks: int
    runs: int
    effect: float
    shift: float
    reps: int
    seed: int
    cost_ratio: float
    unknown_rate: float


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    point: dict[str, int]
    interval: dict[str, int]
    mean_mde: float
    seconds: float


def simulate_experiment(rng: random.Random, cell: Cell) -> list[Observation]:
    """One experiment's observations: T tasks x N runs x 2 arms."""
    obs: list[Observation] = []
    for t in range(cell.tasks):
        task_id = f"t{t:03d}"
        p_base = _arcsine(rng.random())
        p_skill = _expit(_logit(p_base) + cell.shift)
        task_cost = math.exp(rng.gauss(math.log(0.30), 0.5))
        arms: tuple[tuple[Arm, float, float], ...] = (("baseline", p_base, 1.0), ("skill", p_skill, cell.cost_ratio))
        for arm, p, mult in arms:
            for _ in range(cell.runs):
                passed = rng.random() < p
                cost = task_cost * mult * math.exp(rng.gauss(0.0, 0.3))
                unknown = cell.unknown_rate > 0 and rng.random() < cell.unknown_rate
                outcome: Outcome = "unknown" if unknown else ("pass" if passed else "fail")
                obs.append(Observation(task_id, arm, outcome, cost, None, None))
    return obs


def run_cell(cell: Cell) -> CellResult:
    start = time.perf_counter()
    rng = random.Random(f"{cell.seed}:{cell.tasks}:{cell.runs}:{cell.effect}")
    point_settings = DecisionSettings(rule="point")
    interval_settings = DecisionSettings(rule="interval")
    context = DecisionContext(
        budget_stopped=False,
        provenance_by_arm=provenance_by_arm(_PROVENANCE),
        planned_runs_per_arm=cell.runs,
    )
    point: Counter[str] = Counter()
    interval: Counter[str] = Counter()
    mde_sum = 0.0
    for _ in range(cell.reps):
        analysis = analyze(simulate_experiment(rng, cell), point_settings)
        point[decide(analysis, point_settings, context).verdict] += 1
        interval[decide(analysis, interval_settings, context).verdict] += 1
        mde_sum += analysis.mde
    return CellResult(cell, dict(point), dict(interval), mde_sum / cell.reps, time.perf_counter() - start)


@dataclass(frozen=True)
class Replay:
    """What replaying a cell's experiments trial by trial in a planned order needs: the cell's two seeded
    streams (the experiments', the same as the main table's, and the plan orders'), the planned tasks and the
    contexts of a run in full and of a stopped one."""

    rng: random.Random
    order_rng: random.Random
    tasks: list[Task]
    ids: frozenset[str]
    full_ctx: DecisionContext
    stop_ctx: DecisionContext

    @classmethod
    def of(cls, cell: Cell) -> Replay:
        tasks = [Task(id=f"t{t:03d}", prompt=f"task {t}", verify_cmd="true") for t in range(cell.tasks)]
        ids = frozenset(t.id for t in tasks)
        prov = provenance_by_arm(_PROVENANCE)
        return cls(
            random.Random(f"{cell.seed}:{cell.tasks}:{cell.runs}:{cell.effect}"),
            random.Random(f"{cell.seed}:order:{cell.tasks}:{cell.runs}:{cell.effect}"),
            tasks,
            ids,
            DecisionContext(False, prov, cell.runs, planned_task_ids=ids),
            DecisionContext(False, prov, cell.runs, early_stopped=True, planned_task_ids=ids),
        )

    def order(self, obs: Sequence[Observation], runs: int) -> list[Observation]:
        """The experiment's trials in the order a seeded plan runs them, each with its run index."""
        by_trial: dict[tuple[str, str], list[Observation]] = {}
        for o in obs:
            by_trial.setdefault((o.task_id, o.arm), []).append(o)
        return [
            dataclasses.replace(by_trial[(s.task.id, s.arm)][s.run_index], run_index=s.run_index)
            for s in plan_trials(self.tasks, runs, self.order_rng.randrange(1 << 30))
        ]


FUTILITY_TASKS = (6, 10, 20)
FUTILITY_EFFECTS = (-0.24, -0.125, 0.0, 0.125, 0.24)
"""A harmful skill too: the stop must not turn the rejects the full plan gives into inconclusives."""
FUTILITY_REPS = 400


@dataclass(frozen=True)
class FutilityResult:
    cell: Cell
    full: dict[str, int]
    """The interval rule's verdicts of the experiments run in full (the main table's, same draws)."""
    reported: dict[str, int]
    """The verdicts with the futility stop: the stopped run's decision, or the full one when it never stopped."""
    stopped: int
    saved: float
    """Sum over experiments of the share of planned trials not run."""
    reject_stops: int
    reject_differ: int
    """Stops reporting reject whose experiment run in full gives another verdict (must be 0)."""
    inconclusive_full: dict[str, int]
    """Stops reporting inconclusive, by the verdict the same experiment gives run in full."""
    seconds: float


def run_futility_cell(cell: Cell) -> FutilityResult:
    """The main table's experiments of ``cell`` (same seed, same draws), replayed trial by trial with the
    interval rule's futility stop checked after every trial."""
    start = time.perf_counter()
    replay = Replay.of(cell)
    settings = DecisionSettings(rule="interval", futility_stop=True)
    full: Counter[str] = Counter()
    reported: Counter[str] = Counter()
    inconclusive_full: Counter[str] = Counter()
    stopped = reject_stops = reject_differ = 0
    saved = 0.0
    for _ in range(cell.reps):
        obs = simulate_experiment(replay.rng, cell)
        final = decide(analyze(obs, settings), settings, replay.full_ctx).verdict
        full[final] += 1
        order = replay.order(obs, cell.runs)
        verdict = final
        for i in range(1, len(order)):
            seen = order[:i]
            if {o.arm for o in seen} != {"baseline", "skill"}:
                continue
            analysis = analyze(seen, settings)
            stop = early_stop_verdict(analysis, settings, cell.runs, replay.ids, max_cost_per_trial=None)
            if stop.verdict is None:
                continue
            verdict = decide(analysis, settings, replay.stop_ctx).verdict
            stopped += 1
            saved += 1.0 - i / len(order)
            if verdict == "reject":
                reject_stops += 1
                reject_differ += final != "reject"
            else:
                inconclusive_full[final] += 1
            break
        reported[verdict] += 1
    return FutilityResult(
        cell,
        dict(full),
        dict(reported),
        stopped,
        saved,
        reject_stops,
        reject_differ,
        dict(inconclusive_full),
        time.perf_counter() - start,
    )


def render_futility(results: Sequence[FutilityResult], reps: int) -> str:
    lines = [
        (
            f"Interval rule with the futility stop ({reps} experiments per row, drawn as in the main table, stop "
            "checked after every trial in plan order; no per-trial cost cap). full: the same experiment run in "
            "full; stop: the verdict the stopped run reports (the full one when it never stopped)."
        ),
        "",
        (
            "| tasks x runs | true gain | P(adopt) full | P(adopt) stop | P(reject) full | P(reject) stop "
            "| P(inconcl.) full | P(inconcl.) stop | stopped early | trials saved (mean) "
            "| reject stops (differ from full) | inconclusive stops: full reject / inconcl. / adopt "
            "| reported != full |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.cell
        n = c.reps
        inc = r.inconclusive_full
        inc_total = sum(inc.values())
        differ = r.reject_differ + inc_total - inc.get("inconclusive", 0)
        cells = [
            f"{c.tasks} x {c.runs}",
            f"{c.effect:+.3f}",
            *(_share(counts, v, n) for v in ("adopt", "reject", "inconclusive") for counts in (r.full, r.reported)),
            f"{r.stopped / n:.3f}",
            f"{r.saved / n:.1%}",
            f"{r.reject_stops / n:.3f} ({r.reject_differ})",
            f"{inc_total / n:.3f}: {inc.get('reject', 0)} / {inc.get('inconclusive', 0)} / {inc.get('adopt', 0)}",
            f"{differ / n:.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


EFFICACY_TASKS = (6, 10, 20)
EFFICACY_EFFECTS = (0.0, 0.12, 0.24, -0.24)
EFFICACY_REPS = 1000
EFFICACY_SPENDING: tuple[Spending, ...] = ("obrien-fleming", "pocock")
EFFICACY_SAVED_AT = (20, 0.24)
"""The design and effect whose trial savings the last line quotes."""


@dataclass(frozen=True)
class EfficacyResult:
    cell: Cell
    spending: Spending
    fixed: dict[str, int]
    """The interval rule's verdicts of the experiments run in full, as the fixed design decides them."""
    sequential: dict[str, int]
    """The verdicts under the group-sequential design, replayed trial by trial with every stop armed."""
    crossed: dict[int, int]
    """Runs an interim look decided, by look number."""
    futility_stops: int
    saved: float
    """Sum over experiments of the share of planned trials not run."""
    adopt_only_sequential: int
    adopt_only_fixed: int
    """Paired discordance of the two designs' adoptions on the same experiments."""
    seconds: float


def run_efficacy_cell(cell: Cell, spending: Spending) -> EfficacyResult:
    """The experiments of ``cell`` (same seed scheme as the main table) decided twice: by the fixed interval
    rule on the full plan, and by the group-sequential design (``decision.sequential`` with ``spending``, the
    futility stop on as by default) replayed trial by trial in a planned order, each stop checked after every
    trial as the running loop does with ``--jobs 1`` (``harness.analysis.sequential.early_stop``), the verdict
    then ``decide_run`` on the data the run has when it stops."""
    start = time.perf_counter()
    replay = Replay.of(cell)
    fixed_settings = DecisionSettings(rule="interval")
    settings = DecisionSettings(rule="interval", sequential=SequentialSettings(spending=spending))
    fixed: Counter[str] = Counter()
    seq: Counter[str] = Counter()
    crossed: Counter[int] = Counter()
    futility_stops = only_seq = only_fixed = 0
    saved = 0.0
    for _ in range(cell.reps):
        obs = simulate_experiment(replay.rng, cell)
        final_fixed = decide(analyze(obs, fixed_settings), fixed_settings, replay.full_ctx).verdict
        fixed[final_fixed] += 1
        order = replay.order(obs, cell.runs)
        verdict: str | None = None
        checked = 0
        for i in range(1, len(order)):
            seen = order[:i]
            if {o.arm for o in seen} != {"baseline", "skill"}:
                continue
            stop = sequential.early_stop(seen, settings, replay.full_ctx, looks_checked=checked)
            checked = max(checked, sequential.rounds_complete(seen, replay.ids, cell.runs))
            if stop.verdict is None:
                continue
            decision = sequential.decide_run(seen, settings, replay.stop_ctx).decision
            verdict = decision.verdict
            saved += 1.0 - i / len(order)
            if decision.sequential is not None and decision.sequential.stopped_early:
                crossed[decision.sequential.look.number] += 1
            else:
                futility_stops += 1
            break
        if verdict is None:
            decision = sequential.decide_run(order, settings, replay.full_ctx).decision
            verdict = decision.verdict
            if decision.sequential is not None and decision.sequential.stopped_early:  # a look at the last trial
                crossed[decision.sequential.look.number] += 1
        seq[verdict] += 1
        only_seq += verdict == "adopt" and final_fixed != "adopt"
        only_fixed += final_fixed == "adopt" and verdict != "adopt"
    return EfficacyResult(
        cell, spending, dict(fixed), dict(seq), dict(crossed), futility_stops, saved, only_seq, only_fixed,
        time.perf_counter() - start,
    )  # fmt: skip


def _run_efficacy(args: tuple[Cell, Spending]) -> EfficacyResult:
    return run_efficacy_cell(*args)


def render_efficacy(results: Sequence[EfficacyResult], reps: int, command: str) -> str:
    lines = [
        (
            f"Group-sequential interval rule (`{command}`; {reps} experiments per row, drawn as in the main table; "
            "looks after every round, the futility stop beside them, every stop checked after every trial in plan "
            "order; no per-trial cost cap). fixed: the interval rule on the full plan; sequential: the verdict the "
            "group-sequential run reports. Monte Carlo SE of a share p: sqrt(p(1-p)/reps); of the difference in "
            "P(adopt): sqrt(b + c)/reps with b, c the discordant adoptions."
        ),
        "",
        (
            "| tasks x runs | spending | true gain | P(adopt) fixed | P(adopt) sequential | difference (MC SE) "
            "| P(reject) fixed | P(reject) sequential | P(inconcl.) fixed | P(inconcl.) sequential "
            "| decided at look 1 / 2 | futility stops | trials saved (mean) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.cell
        n = c.reps
        diff = (r.adopt_only_sequential - r.adopt_only_fixed) / n
        se = math.sqrt(r.adopt_only_sequential + r.adopt_only_fixed) / n
        looks = " / ".join(str(r.crossed.get(k, 0)) for k in range(1, c.runs))
        cells = [
            f"{c.tasks} x {c.runs}",
            r.spending,
            f"{c.effect:+.2f}",
            _share(r.fixed, "adopt", n),
            _share(r.sequential, "adopt", n),
            f"{diff:+.3f} ({se:.3f})",
            _share(r.fixed, "reject", n),
            _share(r.sequential, "reject", n),
            _share(r.fixed, "inconclusive", n),
            _share(r.sequential, "inconclusive", n),
            looks,
            str(r.futility_stops),
            f"{r.saved / n:.1%}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def efficacy_line(results: Sequence[EfficacyResult]) -> str:
    """The closing line: the largest false adoption of the default design, and its savings at +0.24 (20 x 3)."""
    default = [r for r in results if r.spending == "obrien-fleming"]
    nulls = [r.sequential.get("adopt", 0) / r.cell.reps for r in default if r.cell.effect == 0.0]
    tasks, effect = EFFICACY_SAVED_AT
    at = [r for r in default if r.cell.tasks == tasks and math.isclose(r.cell.effect, effect)]
    worst = f"{max(nulls):.3f}" if nulls else "n/a"
    saved = f"{100 * at[0].saved / at[0].cell.reps:.1f}" if at else "n/a"
    return (
        f"efficacy stop: false adoption <= {worst} at every design; "
        f"trials saved at +{effect:.2f} ({tasks} x {RUNS}): {saved}%"
    )


COVERAGE_TASKS = (6, 10, 20, 50)
COVERAGE_RATIO = 1.2


@dataclass(frozen=True)
class CoverageCell:
    tasks: int
    runs: int
    ratio: float
    reps: int
    seed: int


def cost_coverage(cell: CoverageCell) -> tuple[CoverageCell, float, float]:
    """Share of simulated experiments whose cost-ratio interval covers the true ratio, and the mean width."""
    from harness.analysis import stats

    rng = random.Random(f"{cell.seed}:cost:{cell.tasks}:{cell.runs}:{cell.ratio}")
    hits = 0
    width = 0.0
    finite = 0
    for _ in range(cell.reps):
        skill: list[float | None] = []
        base: list[float | None] = []
        for _t in range(cell.tasks):
            task_cost = math.exp(rng.gauss(math.log(0.30), 0.5))
            base.append(sum(task_cost * math.exp(rng.gauss(0.0, 0.3)) for _ in range(cell.runs)) / cell.runs)
            skill.append(
                sum(task_cost * cell.ratio * math.exp(rng.gauss(0.0, 0.3)) for _ in range(cell.runs)) / cell.runs
            )
        iv = stats.cost_ratio(skill, base).interval
        hits += iv.low <= cell.ratio <= iv.high
        if math.isfinite(iv.high):
            width += iv.high - iv.low
            finite += 1
    return cell, hits / cell.reps, width / finite if finite else math.inf


def render_coverage(rows: Sequence[tuple[CoverageCell, float, float]]) -> str:
    lines = [
        "| tasks x runs | true cost ratio | coverage of the 95% cost-ratio interval (Fieller) | mean width |",
        "|---|---|---|---|",
    ]
    for cell, cov, width in rows:
        lines.append(f"| {cell.tasks} x {cell.runs} | {cell.ratio:.2f} | {cov:.3f} | {width:.3f} |")
    return "\n".join(lines)


def _share(counts: dict[str, int], verdict: str, reps: int) -> str:
    return f"{counts.get(verdict, 0) / reps:.3f}"


def render(results: Sequence[CellResult], reps: int, seed: int, command: str) -> str:
    lines = [
        (
            f"Simulated with `{command}` ({reps} reps per row, seed {seed}); U-shaped difficulty Beta(.5,.5), "
            "logit-shift effect, decisions by harness.analysis.decide.decide."
        ),
        f"Monte Carlo standard error of a share p: sqrt(p(1-p)/{reps}) (at most {0.5 / math.sqrt(reps):.3f}).",
        "",
        (
            "| tasks x runs | true gain | logit shift | point P(adopt) | point P(reject) | point P(inconcl.) "
            "| interval P(adopt) | interval P(reject) | interval P(inconcl.) | mean MDE |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.cell
        lines.append(
            f"| {c.tasks} x {c.runs} | {c.effect:+.3f} | {c.shift:.3f} "
            f"| {_share(r.point, 'adopt', c.reps)} | {_share(r.point, 'reject', c.reps)} "
            f"| {_share(r.point, 'inconclusive', c.reps)} "
            f"| {_share(r.interval, 'adopt', c.reps)} | {_share(r.interval, 'reject', c.reps)} "
            f"| {_share(r.interval, 'inconclusive', c.reps)} | {r.mean_mde:.3f} |"
        )
    other = {
        v
        for r in results
        for counts in (r.point, r.interval)
        for v in counts
        if v not in ("adopt", "reject", "inconclusive")
    }
    if other:
        lines.append("")
        lines.append(f"Unexpected verdicts seen: {sorted(other)}")
    return "\n".join(lines)


def _picklable(fn: object) -> bool:
    # Loaded through runpy.run_path the module is not importable by name, so workers could not
    # find run_cell; run in-process then instead of failing.
    try:
        pickle.dumps(fn)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=DEFAULT_REPS, help=f"experiments per row (default {DEFAULT_REPS})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"base seed (default {DEFAULT_SEED})")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2; 1 runs in-process)")
    parser.add_argument("--tasks", type=int, nargs="+", default=list(TASKS), help="suite sizes (default 10 20 50)")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"trials per arm and task (default {RUNS})")
    parser.add_argument("--effects", type=float, nargs="+", default=list(EFFECTS), help="true mean gains")
    parser.add_argument("--cost-ratio", type=float, default=1.0, help="true skill/baseline cost ratio (default 1.0)")
    parser.add_argument("--unknown-rate", type=float, default=0.0, help="share of trials with no verdict (default 0)")
    parser.add_argument("--coverage-reps", type=int, default=4000, help="experiments per cost-coverage row (0: skip)")
    parser.add_argument("--coverage-ratio", type=float, default=COVERAGE_RATIO, help="true cost ratio for coverage")
    parser.add_argument(
        "--futility-reps",
        type=int,
        default=FUTILITY_REPS,
        help=f"experiments per futility-stop row (default {FUTILITY_REPS}; 0: skip)",
    )
    parser.add_argument(
        "--futility-effects",
        type=float,
        nargs="+",
        default=list(FUTILITY_EFFECTS),
        help="true mean gains of the futility-stop rows (default -0.24 -0.125 0 0.125 0.24)",
    )
    parser.add_argument(
        "--futility-tasks",
        type=int,
        nargs="+",
        default=list(FUTILITY_TASKS),
        help="suite sizes of the futility-stop rows (default 6 10 20)",
    )
    parser.add_argument(
        "--efficacy",
        action="store_true",
        help="only the group-sequential design (decision.sequential) against the fixed design, then the closing line",
    )
    parser.add_argument(
        "--efficacy-reps", type=int, default=EFFICACY_REPS, help=f"experiments per row (default {EFFICACY_REPS})"
    )
    parser.add_argument(
        "--efficacy-tasks",
        type=int,
        nargs="+",
        default=list(EFFICACY_TASKS),
        help="suite sizes of the group-sequential rows (default 6 10 20)",
    )
    parser.add_argument(
        "--efficacy-effects",
        type=float,
        nargs="+",
        default=list(EFFICACY_EFFECTS),
        help="true mean gains of the group-sequential rows (default 0 0.12 0.24 -0.24)",
    )
    parser.add_argument(
        "--efficacy-spending",
        nargs="+",
        choices=list(EFFICACY_SPENDING),
        default=list(EFFICACY_SPENDING),
        help="spending functions to simulate (default both; the closing line quotes obrien-fleming, the default)",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.reps < 1 or args.runs < 1 or args.jobs < 1 or min(args.tasks) < 1:
        parser.error("--reps, --runs, --jobs and --tasks must be >= 1")
    if not 0.0 <= args.unknown_rate < 1.0:
        parser.error("--unknown-rate must be in [0, 1)")

    command = "python3 scripts/simulate_rules.py " + " ".join(list(argv) if argv is not None else sys.argv[1:])
    if args.efficacy:
        return _efficacy_main(args, command.strip())

    shifts = {e: shift_for(e) for e in args.effects}
    cells = [
        Cell(t, args.runs, e, shifts[e], args.reps, args.seed, args.cost_ratio, args.unknown_rate)
        for t in args.tasks
        for e in args.effects
    ]
    start = time.perf_counter()
    if args.jobs == 1 or not _picklable(run_cell):
        results = [run_cell(c) for c in cells]
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(run_cell, cells))
    print(render(results, args.reps, args.seed, command.strip()))
    if args.coverage_reps > 0:
        cov_cells = [
            CoverageCell(t, args.runs, args.coverage_ratio, args.coverage_reps, args.seed) for t in COVERAGE_TASKS
        ]
        if args.jobs == 1 or not _picklable(cost_coverage):
            cov = [cost_coverage(c) for c in cov_cells]
        else:
            with ProcessPoolExecutor(max_workers=args.jobs) as pool:
                cov = list(pool.map(cost_coverage, cov_cells))
        print()
        print(f"Cost-ratio interval coverage ({args.coverage_reps} experiments per row, log-normal task costs):")
        print()
        print(render_coverage(cov))
    if args.futility_reps > 0:
        fut_shifts = {e: shifts[e] if e in shifts else shift_for(e) for e in args.futility_effects}
        fut_cells = [
            Cell(t, args.runs, e, fut_shifts[e], args.futility_reps, args.seed, args.cost_ratio, args.unknown_rate)
            for t in args.futility_tasks
            for e in args.futility_effects
        ]
        if args.jobs == 1 or not _picklable(run_futility_cell):
            fut = [run_futility_cell(c) for c in fut_cells]
        else:
            with ProcessPoolExecutor(max_workers=args.jobs) as pool:
                fut = list(pool.map(run_futility_cell, fut_cells))
        print()
        print(render_futility(fut, args.futility_reps))
    print(f"\nreps used: {args.reps} per row; {len(cells)} rows; {time.perf_counter() - start:.1f} s wall")
    return 0


def _efficacy_main(args: argparse.Namespace, command: str) -> int:
    if args.efficacy_reps < 1:
        raise SystemExit("--efficacy-reps must be >= 1")
    start = time.perf_counter()
    shifts = {e: shift_for(e) for e in args.efficacy_effects}
    jobs = [
        (Cell(t, args.runs, e, shifts[e], args.efficacy_reps, args.seed, args.cost_ratio, args.unknown_rate), sp)
        for sp in args.efficacy_spending
        for t in args.efficacy_tasks
        for e in args.efficacy_effects
    ]
    if args.jobs == 1 or not _picklable(_run_efficacy):
        results = [_run_efficacy(j) for j in jobs]
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(_run_efficacy, jobs))
    print(render_efficacy(results, args.efficacy_reps, command))
    print(f"\nreps used: {args.efficacy_reps} per row; {len(jobs)} rows; {time.perf_counter() - start:.1f} s wall")
    print(efficacy_line(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
