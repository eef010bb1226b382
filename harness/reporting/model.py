"""The data every report renders: :class:`ReportInput`, how it is built, and the views renderers share.

:func:`build_input` analyses result lines under the preregistered settings and decides (pure);
:func:`analyze_records` is that for a study's lines plus the base image ``experiment.json`` recorded
(what ``eval``, ``report``, ``gate`` and ``merge`` all show); :func:`load_experiment` rebuilds it from
an experiment directory without writing there (through :mod:`harness.results.load`), so
``skilltrial report`` and ``skilltrial gate`` need no Docker. The derived views (the deciding reasons,
the headline, provenance, dates, flags by task, the every-trial rows) are computed here once so
that every renderer says the same thing; the wording of numbers is :mod:`harness.fmt`'s and
escaping is per format (:mod:`harness.reporting.escape`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from harness import fmt
from harness.analysis import sizing
from harness.analysis.decide import DecisionResult
from harness.analysis.estimates import Analysis, TaskRow
from harness.analysis.observations import context_from_records, observations_from_records
from harness.analysis.reasons import Reason
from harness.analysis.runnotes import api_notes, engine_notes, reuse_notes
from harness.analysis.sequential import decide_run
from harness.records import PassRule, TrialRecord, outcome
from harness.results import attempts as runstate
from harness.results.load import read_experiment
from harness.results.meta import read_meta
from harness.study import basetree, prices
from harness.study.config import MAX_TASKS, Preregistration, Study


@dataclass(frozen=True)
class FlaggedTrial:
    """A trial a reviewer should look at: its last attempt carries a flag or a rejected patch."""

    trial_id: str
    task_id: str
    arm: str
    outcome: str
    flags: tuple[str, ...]
    files: tuple[str, ...]
    """The files its patch changed."""


@dataclass(frozen=True)
class ReportInput:
    """An analysed experiment: everything every renderer shows, computed once."""

    prereg: Preregistration
    analysis: Analysis
    decision: DecisionResult
    lock_hash: str
    skipped_tasks: tuple[str, ...]
    flagged: tuple[FlaggedTrial, ...]
    """Trials a reviewer should look at, by trial id."""
    experiment_dir: str
    spent_usd: float
    records: tuple[TrialRecord, ...] = ()
    """Every result line the analysis used (all attempts), for per-trial charts and tables."""
    notes: tuple[str, ...] = field(default=())
    """Things the reader should know about the inputs (unreadable result lines, a torn tail)."""
    skip_reasons: tuple[tuple[str, str], ...] = ()
    """(task id, reason) of skipped tasks not skipped for a TODO prompt (the preflight's trivial tasks)."""

    base_image: str = ""
    """The image the trial image was built on (``--base-image``, else the harness runtime image)."""

    def skip_reason(self, task_id: str) -> str:
        return dict(self.skip_reasons).get(task_id, "TODO in prompt")

    @property
    def experiment_id(self) -> str:
        return self.lock_hash[:12]

    @property
    def final_records(self) -> tuple[TrialRecord, ...]:
        """The last attempt of every trial (what the analysis counted)."""
        return tuple(runstate.final_attempts(self.records).finals)


# ========================================================================= building


def flagged(records: Iterable[TrialRecord], pass_rule: PassRule) -> tuple[FlaggedTrial, ...]:
    """Every trial whose last attempt carries a flag or a rejected patch, by trial id."""
    out = []
    for tid, r in sorted(runstate.latest_by_trial(records).items()):
        flags = (
            (r.patch.flags if r.patch else ())
            + r.flags
            + ((f"rejected: {r.patch.rejected}",) if r.patch and r.patch.rejected else ())
        )
        if flags:
            files = r.patch.files if r.patch else ()
            out.append(FlaggedTrial(tid, r.task_id, r.arm, outcome(r, pass_rule), tuple(flags), files))
    return tuple(out)


def build_input(
    prereg: Preregistration,
    records: Sequence[TrialRecord],
    *,
    planned_task_ids: Iterable[str],
    skipped_tasks: Sequence[str],
    lock_hash: str,
    experiment_dir: str,
    notes: Sequence[str] = (),
    skip_reasons: Mapping[str, str] | None = None,
) -> ReportInput:
    """Analyse result lines under the preregistered settings and decide (pure).

    How the run stopped (budget or preregistered early stop) is read from the skipped
    records; the per-trial cost cap bounds what a missing trial could have cost; the
    spend leaves out reused baseline trials (spent by another experiment)."""
    settings = prereg.decision
    observations = observations_from_records(records, settings.pass_rule)
    budget_stopped, early_stopped = runstate.stops(records)
    context = context_from_records(
        records,
        prereg.execution.runs_per_arm,
        budget_stopped,
        early_stopped=early_stopped,
        planned_task_ids=list(planned_task_ids),
        max_cost_per_trial=runstate.max_cost_per_trial(prereg),
    )
    # the fixed design: analyze and decide; a group-sequential one: the deciding look's data and verdict
    analysis, decision = decide_run(observations, settings, context)
    return ReportInput(
        prereg=prereg,
        analysis=analysis,
        decision=decision,
        lock_hash=lock_hash,
        skipped_tasks=tuple(skipped_tasks),
        flagged=flagged(records, settings.pass_rule),
        experiment_dir=experiment_dir,
        spent_usd=runstate.spent_usd(records),
        records=tuple(records),
        notes=(
            *notes,
            *reuse_notes(records),
            *api_notes(records),
            *engine_notes(records, settings.pass_rule),
            *prices.missing_notes(prereg.execution),
        ),
        skip_reasons=tuple(sorted((skip_reasons or {}).items())),
    )


def analyze_records(
    study: Study, records: Sequence[TrialRecord], *, lock_hash: str, experiment_dir: Path
) -> ReportInput:
    """The report input of a study's result lines (what `eval`, `report`, `gate` and `merge` all show)."""
    data = build_input(
        study.prereg,
        records,
        planned_task_ids=[t.id for t in study.target_tasks()],
        skipped_tasks=[t.id for t in study.skipped_tasks()] + list(study.excluded),
        lock_hash=lock_hash,
        experiment_dir=str(experiment_dir),
        skip_reasons=study.excluded,
    )
    meta = read_meta(Path(experiment_dir))
    inputs = (meta.trial_inputs if meta is not None else None) or {}
    notes = (*data.notes, *base_tree_notes(study, inputs.get("base_excluded")))
    return dataclasses.replace(data, base_image=str(inputs.get("base_image", "")), notes=notes)


def base_tree_notes(study: Study, ran_without: object) -> list[str]:
    """What the trials' base tree was made without (``ran_without``: the run's record of it, else the lock's)
    and what both arms saw that can change an agent's behaviour."""
    lock = study.prereg.lock
    recorded = dict(lock.base_excluded) if lock is not None else {}
    visible = dict(lock.base_visible) if lock is not None else {}
    if isinstance(ran_without, list):
        recorded = {str(p): recorded.get(str(p), "the scripted model's scenario") for p in ran_without}
    return basetree.describe(recorded, visible)


def load_experiment(root: Path, prereg_path: Path | None = None) -> ReportInput:
    """Rebuild the analysed experiment from ``root`` without writing anything there.

    The preregistration is the one ``experiment.json`` names unless
    ``prereg_path`` is given; its lock must be the experiment's (a re-locked
    preregistration may have other decision settings). The skill folder is not
    needed: a shelved skill's experiment still renders.
    """
    exp = read_experiment(root, prereg_path)
    # The very analysis `skilltrial eval` ran (how the run stopped, the cost cap, reused trials), so a
    # re-rendered report and the gate can never disagree with eval.
    data = analyze_records(exp.study, exp.lines.records, lock_hash=exp.meta.lock_hash, experiment_dir=root)
    return dataclasses.replace(data, notes=(*data.notes, *exp.lines.notes))


def results_digest(records: Iterable[TrialRecord]) -> str:
    """SHA-256 over the result lines as read (each as canonical JSON, in order; fields at their default
    left out, so a field a later schema adds with a default does not change it): what ``decision.json``
    records it was computed from, and the gate trusts it only while the lines still give this digest (a
    line edited by hand, in place, changes it)."""
    h = hashlib.sha256()
    for r in records:
        h.update(r.model_dump_json(exclude_defaults=True).encode("utf-8") + b"\n")
    return h.hexdigest()


# ============================================================================ views


def verdict_word(d: DecisionResult) -> str:
    """The verdict in capitals, or the amber point-only label: never a plain ADOPT the interval rule does not back."""
    return d.label.upper() if d.point_only_adopt else d.verdict.upper()


def deciding_reasons(d: DecisionResult) -> tuple[Reason, ...]:
    """The reasons that produced the verdict: the gates that fired, else the rule's findings."""
    kind = {"invalid": "invalid", "inconclusive": "inconclusive"}.get(d.verdict, "rule")
    chosen = tuple(r for r in d.reasons if r.kind == kind)
    return chosen or tuple(r for r in d.reasons if r.kind != "note")


def headline(r: ReportInput) -> str:
    """One sentence with the figures behind the verdict (rates with N, gain with CI, cost with limit). Under a
    group-sequential design the gain and cost intervals are the deciding look's repeated intervals."""
    a = r.analysis
    conf = round(100 * a.confidence)
    p, cost, which = a.paired, a.cost, f"{conf}% CI"
    seq = r.decision.sequential
    if seq is not None:
        p, cost = seq.paired, seq.cost
        which = f"repeated {conf}% CI at look {seq.look.number} of {len(seq.design.looks)}:"
    return (
        f"skill {fmt.rate(a.skill)} vs baseline {fmt.rate(a.baseline)} passed; "
        f"per-task gain {fmt.pp(p.mean)} ({which} {fmt.pp(p.interval.low)} to {fmt.pp(p.interval.high)}); "
        f"cost {fmt.ratio(cost.ratio)} of baseline (limit {fmt.ratio(1 + r.prereg.decision.cost_increase_max)})"
    )


def paired_label(r: ReportInput) -> str:
    """How reports name the paired interval of the analysis: the plain one, or under a group-sequential
    design the unadjusted one (the repeated intervals that decide are :func:`sequential_lines`')."""
    conf = round(100 * r.analysis.confidence)
    return f"unadjusted {conf}% CI" if r.decision.sequential is not None else f"{conf}% CI"


def sequential_lines(r: ReportInput) -> tuple[str, ...]:
    """Two sentences on a group-sequential design (empty for the fixed design): the design with its looks,
    then which look decided, with its repeated intervals."""
    seq = r.decision.sequential
    if seq is None:
        return ()
    design, look = seq.design, seq.look
    looks = design.looks
    overall = fmt.pct(1 - 2 * design.alpha)
    first = (
        f"group-sequential design: {design.name} alpha spending, looks after rounds "
        f"{', '.join(str(x.round) for x in looks)} of {design.runs} (information fractions "
        f"{' / '.join(f'{x.fraction:.2f}' for x in looks)}; nominal levels "
        f"{' / '.join(fmt.pct(x.confidence, 2) for x in looks)}); overall false-adoption level "
        f"{fmt.pct(design.alpha, 1)} one-sided, the fixed design's"
    )
    where = f"look {look.number} of {len(looks)} (after round {look.round})"
    figures = (
        f"repeated {overall} interval of the gain {fmt.pp(seq.paired.mean)} {fmt.interval(seq.paired.interval)} "
        f"(nominal {fmt.pct(look.confidence, 2)}); cost ratio {fmt.ratio(seq.cost.ratio)} "
        f"{fmt.interval(seq.cost.interval, fmt.ratio)}; {seq.analysed_trials} of {seq.planned_trials} planned trials "
        "analysed"
    )
    if seq.stopped_early:
        later = f" ({seq.later_trials} later trial(s) finished and are left out)" if seq.later_trials else ""
        second = f"stopped at {where}: {r.decision.verdict}; {figures}{later}"
    else:
        interim = len(looks) - 1
        second = (
            f"no interim look decided ({min(seq.looks_reached, interim)} of {interim} reached); "
            f"the final {where} gives {r.decision.verdict}: {figures}"
        )
    return first, second


def cost_per_trial(r: ReportInput) -> float | None:
    """What one trial of this run cost on average, agents and judges (infra retries included): the spend
    over the trials it ran itself (reused and skipped ones left out); None when it ran none."""
    ran = [x for x in r.final_records if x.status != "skipped" and x.reused_from is None]
    return r.spent_usd / len(ran) if ran else None


def next_experiment(r: ReportInput) -> sizing.NextExperiment | None:
    """After an inconclusive verdict: what a new, separately locked experiment would need (None otherwise)."""
    if r.decision.verdict != "inconclusive":
        return None
    return sizing.next_experiment(
        r.analysis, r.prereg.decision, r.prereg.execution.runs_per_arm, cost_per_trial=cost_per_trial(r)
    )


def about_usd(x: float) -> str:
    """An estimate in dollars, to the precision it deserves: ``$0.0420``, ``$4.10``, ``$1,250``."""
    if x >= 100:
        return f"${x:,.0f}"
    return f"${x:,.2f}" if x >= 1 else fmt.usd(x)


def design_words(s: sizing.Sizing) -> str:
    """``about 18 tasks x 3 runs per arm (108 trials, about $4.10)``."""
    if s.tasks is None:
        return f"more than {MAX_TASKS:,} tasks x {s.runs} runs per arm"
    cost = f", about {about_usd(s.cost_usd)}" if s.cost_usd is not None else ""
    runs = f"{s.runs} run{'s' if s.runs != 1 else ''}"
    return f"about {s.tasks:,} tasks x {runs} per arm ({s.trials or 0:,} trials{cost})"


def next_experiment_text(r: ReportInput) -> str | None:
    """The sentence every report prints after an inconclusive verdict (None otherwise)."""
    nxt = next_experiment(r)
    if nxt is None:
        return None
    d = nxt.design
    words = (
        f"a new, separately locked experiment would need {design_words(d)} for 80% power at the "
        f"{nxt.basis} ({fmt.pp(d.gain)})"
    )
    if nxt.at_minimum is not None:
        words += f"; at the minimum worthwhile gain ({fmt.pp(nxt.at_minimum.gain)}), {design_words(nxt.at_minimum)}"
    source = "variances from this run" if nxt.variances == "this run" else "default variances"
    return (
        f"{words} ({source}; skilltrial plan PREREG --pilot on this directory sizes other designs). This run's "
        "verdict stands: its plan was locked, so trials are never added to it."
    )


def _provenance(records: Iterable[TrialRecord], pick: Callable[[TrialRecord], str | None]) -> str:
    values = sorted({v for v in (pick(rec) for rec in records if rec.is_outcome) if v})
    return ", ".join(values) if values else "n/a"


AGENT_NAMES = {"claude-code": "Claude Code", "codex": "Codex CLI"}
"""How the reports name ``provenance.agent`` (records without one ran Claude Code)."""


def run_provenance(r: ReportInput) -> dict[str, str]:
    """Agent, model, resolved model, CLI version and image of the trials that reached the model."""
    finals = r.final_records
    return {
        "agent": _provenance(finals, lambda x: AGENT_NAMES.get(x.provenance.agent or "claude-code")),
        "model": _provenance(finals, lambda x: x.provenance.model),
        "resolved_model": _provenance(finals, lambda x: x.agent.resolved_model if x.agent else None),
        "judge_model": _provenance(finals, lambda x: x.provenance.judge_model),
        "cli_version": _provenance(finals, lambda x: x.provenance.cli_version),
        "image_digest": _provenance(finals, lambda x: x.provenance.image_digest[:19]),
        "base_sha": _provenance(finals, lambda x: x.provenance.base_sha[:12]),
    }


class RunDates(NamedTuple):
    """When the trials ran: ISO timestamps as recorded (None without trials)."""

    first: str | None
    """The first trial's start."""
    last: str | None
    """The last trial's finish."""


def run_dates(r: ReportInput) -> RunDates:
    """(first start, last finish) of the trials."""
    if not r.records:
        return RunDates(None, None)
    return RunDates(min(x.started_at for x in r.records), max(x.finished_at for x in r.records))


def wall_seconds(r: ReportInput) -> float | None:
    """From the first trial's start to the last one's end (None without parseable timestamps)."""
    first, last = run_dates(r)
    if not first or not last:
        return None
    try:
        return max(0.0, (dt.datetime.fromisoformat(last) - dt.datetime.fromisoformat(first)).total_seconds())
    except ValueError:
        return None


def tasks_by_difference(a: Analysis) -> list[TaskRow]:
    """Per-task rows, largest gain first; tasks without a difference last."""
    return sorted(a.tasks, key=lambda t: (t.difference is None, -(t.difference or 0.0), t.task_id))


def flags_by_task(r: ReportInput) -> dict[str, tuple[str, ...]]:
    """Per task, the distinct flags of its flagged trials as ``arm: flag`` (which arm did it matters)."""
    out: dict[str, list[str]] = {}
    for t in r.flagged:
        bucket = out.setdefault(t.task_id, [])
        for f in t.flags:
            item = f"{t.arm}: {f}"
            if item not in bucket:
                bucket.append(item)
    return {k: tuple(v) for k, v in out.items()}


# ==================================================================== every trial
# Artifacts are content-addressed (``artifacts/<sha[:2]>/<sha>``, see harness.results.store); the links
# are relative to the experiment directory, where both reports are written, so they work in a browser,
# in a CI artifact and in a copy of the directory.

LINKED = (("patch.diff", "patch"), ("verify.log", "verify log"), ("transcript.jsonl", "transcript"))
"""The artifacts a reader opens for one trial, in this order: (artifact name, link text)."""


def artifact_path(digest: str) -> str:
    return f"artifacts/{digest[:2]}/{digest}"


@dataclass(frozen=True)
class TrialRow:
    """One row of the every-trial tables (Markdown and HTML), figures already worded."""

    trial_id: str
    task_id: str
    arm: str
    outcome: str
    status: str
    agent_cost: str
    total_cost: str
    links: tuple[tuple[str, str], ...]
    """(link text, relative path) of each artifact the trial has."""


def trial_rows(r: ReportInput) -> list[TrialRow]:
    """The final attempt of every trial, by task, run and arm (pure)."""
    rule = r.prereg.decision.pass_rule
    rows = []
    for x in sorted(r.final_records, key=lambda x: (x.task_id, x.run_index, x.arm)):
        links = tuple((text, artifact_path(x.artifacts[name])) for name, text in LINKED if name in x.artifacts)
        rows.append(
            TrialRow(
                trial_id=x.trial_id,
                task_id=x.task_id,
                arm=x.arm,
                outcome=outcome(x, rule) if x.status != "skipped" else "skipped",
                status=x.status,
                agent_cost=fmt.usd(x.agent_cost_usd),
                total_cost=fmt.usd(x.total_cost_usd),
                links=links,
            )
        )
    return rows
