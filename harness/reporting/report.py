"""Rendering an analysed experiment for people and machines (read-only over results).

Every rendering shows every rate with its N (``7/10``) and what was excluded,
both rules' verdicts beside the preregistered one, and every reason that
applied:

* :func:`terminal_summary`: what ``harness eval`` prints;
* :func:`markdown`: ``report.md``, sized for a GitHub step summary;
* :func:`harness.reporting.html.render`: ``report.html``, one self-contained file
  with inline SVG charts (no network, no scripts);
* :func:`junit_xml`: ``junit.xml``, one testcase per task plus a ``decision``
  testcase that fails unless the verdict is adopt;
* :func:`decision_json`: ``decision.json``, the machine-readable verdict that
  :func:`gate` reads.

:func:`load_experiment` rebuilds a :class:`ReportInput` from an experiment
directory (``results.jsonl`` and the preregistration named in
``experiment.json``) without writing to it, so ``harness report`` and
``harness gate`` need no Docker. Agent-controlled strings (trial flags, file
names, reasons quoting model output) are escaped for each format here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import fmt
from harness.analysis import skilluse as skillreport
from harness.analysis.decide import DecisionResult, decide
from harness.analysis.estimates import Analysis, ArmSummary, TaskRow, analyze
from harness.analysis.observations import context_from_records, observations_from_records
from harness.analysis.reasons import Reason
from harness.errors import HarnessError, ResultsUnavailable
from harness.records import TrialRecord, outcome
from harness.redact import Redactor
from harness.results import attempts as runstate
from harness.results.load import read_experiment, read_records
from harness.results.meta import ExperimentMeta, read_meta, require_meta
from harness.results.store import RESULTS, atomic_write
from harness.study import prices
from harness.study.config import Preregistration, Study
from harness.trial import apihealth, samepatch

DECISION_JSON = "decision.json"
SUMMARY_TXT = "summary.txt"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
JUNIT_XML = "junit.xml"
REPORT_FILES = (REPORT_MD, REPORT_HTML, JUNIT_XML)
"""The files a person or a CI system opens (decision.json and summary.txt are written beside them)."""

GATE_CODES: dict[str, int] = {"adopt": 0, "reject": 1, "inconclusive": 2, "invalid": 3}
"""``harness gate`` exit codes; 3 is also every case where no verdict can be read or computed."""


@dataclass(frozen=True)
class ReportInput:
    prereg: Preregistration
    analysis: Analysis
    decision: DecisionResult
    lock_hash: str
    skipped_tasks: tuple[str, ...]
    flagged: tuple[tuple[str, tuple[str, ...]], ...]
    """(trial id, flags) of trials a reviewer should look at."""
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
        return tuple(runstate.final_attempts(self.records)[0])


# ========================================================================= building


def flagged(records: Iterable[TrialRecord]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(trial id, flags) of every trial whose last attempt carries a flag or a rejected patch."""
    out = []
    for tid, r in sorted(runstate.latest_by_trial(records).items()):
        flags = (
            (r.patch.flags if r.patch else ())
            + r.flags
            + ((f"rejected: {r.patch.rejected}",) if r.patch and r.patch.rejected else ())
        )
        if flags:
            out.append((tid, tuple(flags)))
    return tuple(out)


@dataclass(frozen=True)
class FlaggedTrial:
    """One row of the flagged-trials tables (Markdown and HTML)."""

    trial_id: str
    arm: str
    outcome: str
    flags: tuple[str, ...]
    files: tuple[str, ...]
    """The files its patch changed."""


def flagged_trials(r: ReportInput) -> list[FlaggedTrial]:
    by_id = {x.trial_id: x for x in r.final_records}
    out = []
    for tid, flags in r.flagged:
        rec = by_id.get(tid)
        out.append(
            FlaggedTrial(
                trial_id=tid,
                arm=rec.arm if rec else "?",
                outcome=outcome(rec, r.prereg.decision.pass_rule) if rec else "?",
                flags=flags,
                files=rec.patch.files if rec and rec.patch else (),
            )
        )
    return out


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
    analysis = analyze(observations, settings)
    budget_stopped, early_stopped = runstate.stops(records)
    context = context_from_records(
        records,
        prereg.execution.runs_per_arm,
        budget_stopped,
        early_stopped=early_stopped,
        planned_task_ids=list(planned_task_ids),
        max_cost_per_trial=runstate.max_cost_per_trial(prereg),
    )
    return ReportInput(
        prereg=prereg,
        analysis=analysis,
        decision=decide(analysis, settings, context),
        lock_hash=lock_hash,
        skipped_tasks=tuple(skipped_tasks),
        flagged=flagged(records),
        experiment_dir=experiment_dir,
        spent_usd=runstate.spent_usd(records),
        records=tuple(records),
        notes=(
            *notes,
            *samepatch.reuse_notes(records),
            *apihealth.report_notes(records),
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
    return dataclasses.replace(data, base_image=str(inputs.get("base_image", "")))


def load_experiment(root: Path, prereg_path: Path | None = None) -> ReportInput:
    """Rebuild the analysed experiment from ``root`` without writing anything there.

    The preregistration is the one ``experiment.json`` names unless
    ``prereg_path`` is given; its lock must be the experiment's (a re-locked
    preregistration may have other decision settings). The skill folder is not
    needed: a shelved skill's experiment still renders.
    """
    exp = read_experiment(root, prereg_path)
    # The very analysis `harness eval` ran (how the run stopped, the cost cap, reused trials), so a
    # re-rendered report and the gate can never disagree with eval.
    data = analyze_records(exp.study, exp.lines.records, lock_hash=exp.meta.lock_hash, experiment_dir=root)
    return dataclasses.replace(data, notes=(*data.notes, *exp.lines.notes))


# ======================================================================= formatting


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")


def clean(text: str) -> str:
    """Drop control characters (invalid in XML, confusing everywhere) from untrusted text."""
    return _CONTROL.sub("\ufffd", text)


def deciding_reasons(d: DecisionResult) -> tuple[Reason, ...]:
    """The reasons that produced the verdict: the gates that fired, else the rule's findings."""
    kind = {"invalid": "invalid", "inconclusive": "inconclusive"}.get(d.verdict, "rule")
    chosen = tuple(r for r in d.reasons if r.kind == kind)
    return chosen or tuple(r for r in d.reasons if r.kind != "note")


def headline(r: ReportInput) -> str:
    """One sentence with the figures behind the verdict (rates with N, gain with CI, cost with limit)."""
    a = r.analysis
    conf = round(100 * a.confidence)
    p = a.paired
    return (
        f"skill {fmt.rate(a.skill)} vs baseline {fmt.rate(a.baseline)} passed; "
        f"per-task gain {fmt.pp(p.mean)} ({conf}% CI {fmt.pp(p.interval.low)} to {fmt.pp(p.interval.high)}); "
        f"cost {fmt.ratio(a.cost.ratio)} of baseline (limit {fmt.ratio(1 + r.prereg.decision.cost_increase_max)})"
    )


def _provenance(records: Iterable[TrialRecord], pick: Callable[[TrialRecord], str | None]) -> str:
    values = sorted({v for v in (pick(rec) for rec in records if rec.is_outcome) if v})
    return ", ".join(values) if values else "n/a"


def run_provenance(r: ReportInput) -> dict[str, str]:
    """Model, resolved model, CLI version and image of the trials that reached the model."""
    finals = r.final_records
    return {
        "model": _provenance(finals, lambda x: x.provenance.model),
        "resolved_model": _provenance(finals, lambda x: x.agent.resolved_model if x.agent else None),
        "judge_model": _provenance(finals, lambda x: x.provenance.judge_model),
        "cli_version": _provenance(finals, lambda x: x.provenance.cli_version),
        "image_digest": _provenance(finals, lambda x: x.provenance.image_digest[:19]),
        "base_sha": _provenance(finals, lambda x: x.provenance.base_sha[:12]),
    }


def run_dates(r: ReportInput) -> tuple[str | None, str | None]:
    """(first start, last finish) of the trials, ISO timestamps as recorded."""
    if not r.records:
        return None, None
    return min(x.started_at for x in r.records), max(x.finished_at for x in r.records)


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


# ========================================================================= terminal


def terminal_summary(r: ReportInput) -> str:
    a, d = r.analysis, r.decision
    conf = round(100 * a.confidence)
    lines = [
        f"skill {r.prereg.skill}   lock {r.lock_hash[:12]}   rule {d.rule}   "
        f"tasks {a.n_tasks} x {r.prereg.execution.runs_per_arm} runs per arm",
        "",
        f"{'':10}{'pass rate':>14}  {'naive ' + str(conf) + '% (Wilson)':>22}  {'$/trial':>9}  {'$/pass':>9}  excluded",
    ]
    for arm in (a.baseline, a.skill):
        w = arm.wilson
        lines.append(
            f"{arm.arm:10}{fmt.rate(arm):>14}  {f'[{fmt.num(w.low, 2)}, {fmt.num(w.high, 2)}]':>22}  "
            f"{fmt.usd(arm.mean_cost_per_trial):>9}  {fmt.usd(arm.cost_per_pass):>9}  {fmt.excluded(arm) or '-'}"
        )
    p = a.paired
    lines += [
        "",
        f"paired difference (skill - baseline, per task): {fmt.pp(p.mean)}  {conf}% CI [{fmt.pp(p.interval.low)}, "
        f"{fmt.pp(p.interval.high)}] (t, {max(p.n - 1, 0)} df)   sign-flip p = " + fmt.p_value(a.sign_flip.p_value),
        f"tasks improved / worse / tied: {a.tasks_improved} / {a.tasks_worse} / {a.tasks_tied}   "
        f"smallest detectable effect: {fmt.pp(a.mde).lstrip('+')}",
        f"cost ratio skill/baseline: {fmt.ratio(a.cost.ratio)}  {conf}% CI [{fmt.ratio(a.cost.interval.low)}, "
        f"{fmt.ratio(a.cost.interval.high)}]   limit {fmt.ratio(1 + r.prereg.decision.cost_increase_max)}",
    ]
    if a.paired_table is not None:
        t = a.paired_table
        lines.append(
            f"one run per arm: McNemar p = {fmt.p_value(t.mcnemar_p)}, Newcombe {fmt.pp(t.newcombe.difference)} "
            f"[{fmt.pp(t.newcombe.interval.low)}, {fmt.pp(t.newcombe.interval.high)}]"
        )
    if r.skipped_tasks:
        lines.append("skipped: " + ", ".join(f"{t} ({r.skip_reason(t)})" for t in r.skipped_tasks))
    if r.flagged:
        lines.append(
            f"flagged trials ({len(r.flagged)}): "
            + "; ".join(f"{t} [{', '.join(f)}]" for t, f in r.flagged[:6])
            + (" ..." if len(r.flagged) > 6 else "")
        )
    for note in r.notes:
        lines.append(f"note: {note}")
    lines += skillreport.terminal_lines(r.final_records, r.prereg.decision.pass_rule)
    lines += [
        "",
        f"point rule (the article's): {d.point_label}   interval rule: {d.interval_verdict}   evidence: {d.evidence}",
    ]
    for reason in d.reasons:
        lines.append(f"  - [{reason.code}] {reason.message}")
    lines += [
        "",
        f"DECISION ({d.rule} rule, preregistered): {verdict_word(d)}",
        f"spent {fmt.usd(r.spent_usd)} (agents and judges)   results and reports (report.md, report.html, junit.xml) in {r.experiment_dir}",
    ]
    return clean("\n".join(lines))


# ========================================================================= markdown

VERDICT_MARK = {"adopt": "✅", "reject": "❌", "inconclusive": "⚠️", "invalid": "⛔"}
AMBER_MARK = "🟠"
"""Shown instead of the green mark when only the point rule adopts (:attr:`DecisionResult.point_only_adopt`)."""


def verdict_word(d: DecisionResult) -> str:
    """The verdict in capitals, or the amber point-only label: never a plain ADOPT the interval rule does not back."""
    return d.label.upper() if d.point_only_adopt else d.verdict.upper()


def md_escape(text: str) -> str:
    """Make untrusted text inert in a GitHub Markdown table cell (GitHub renders inline HTML)."""
    text = clean(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("|", "\\|").replace("`", "\\`").replace("*", "\\*").replace("_", "\\_")
    text = text.replace("[", "\\[").replace("]", "\\]")
    return " ".join(text.split())


def md_code(text: str) -> str:
    """Untrusted text as an inline code span (no backticks inside; pipes escaped for tables)."""
    return "`" + " ".join(clean(text).replace("`", "'").replace("|", "\\|").split()) + "`"


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    aligns = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if c == "r" else ":---" for c in aligns]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _arm_cells(arm: ArmSummary, conf: int) -> list[str]:
    w, c = arm.wilson, arm.clustered.interval
    clustered = "n/a" if arm.clustered.mean is None else f"[{fmt.pct(max(0.0, c.low))}, {fmt.pct(min(1.0, c.high))}]"
    return [
        f"**{arm.arm}**",
        f"**{fmt.rate(arm)}** ({fmt.pct(arm.rate)})",
        f"[{fmt.pct(w.low)}, {fmt.pct(w.high)}]",
        clustered,
        str(arm.unknown),
        str(arm.truncated),
        str(arm.infra) + (f" (+{arm.infra_attempts - arm.infra} retried)" if arm.infra_attempts > arm.infra else ""),
        fmt.usd(arm.mean_cost_per_trial),
        fmt.usd(arm.cost_per_pass),
        fmt.num(arm.turns.median),
    ]


def markdown(r: ReportInput) -> str:
    """``report.md``: fits a GitHub step summary; every rate with its N, every reason."""
    a, d = r.analysis, r.decision
    conf = round(100 * a.confidence)
    limit = 1 + r.prereg.decision.cost_increase_max
    prov = run_provenance(r)
    first, last = run_dates(r)
    p = a.paired
    lines = [
        f"## {AMBER_MARK if d.point_only_adopt else VERDICT_MARK.get(d.verdict, '')} `{r.prereg.skill}`: "
        f"**{verdict_word(d)}** "
        f"({d.rule} rule, preregistered)",
        "",
        f"> {md_escape(headline(r))}",
        "",
    ]
    lines += [f"- `{x.code}` {md_escape(x.message)}" for x in deciding_reasons(d)]
    lines += [
        "",
        f"Experiment `{r.experiment_id}` · {a.n_tasks} tasks x {r.prereg.execution.runs_per_arm} runs per arm · "
        f"model {md_code(prov['model'])} ({md_escape(prov['resolved_model'])}) · "
        f"Claude Code {md_code(prov['cli_version'])} · {md_escape((last or 'n/a')[:16].replace('T', ' '))} UTC",
        "",
        "### Pass rates",
        "",
    ]
    lines += _md_table(
        ["arm", "passed", f"naive {conf}% (Wilson)", f"task-clustered {conf}% (t)", "unknown", "truncated",
         "infra", "$/trial", "$/pass", "turns (median)"],
        [_arm_cells(a.baseline, conf), _arm_cells(a.skill, conf)],
    )  # fmt: skip
    lines += [
        "",
        "Unknown (no judge verdict), truncated (deadline or budget) and infra trials are excluded from the "
        "denominators and counted here.",
        "",
        "### Effect and cost",
        "",
    ]
    rows = [
        ["paired difference (skill - baseline, per task)", f"**{fmt.pp(p.mean)}**",
         f"[{fmt.pp(p.interval.low)}, {fmt.pp(p.interval.high)}] (t, {p.df} df, {p.n} tasks)"],
        ["sign-flip test (exact)" if a.sign_flip.method == "exact" else "sign-flip test (Monte Carlo)",
         f"p = {fmt.p_value(a.sign_flip.p_value)}", f"tasks improved / worse / tied: {a.tasks_improved} / {a.tasks_worse} / "
         f"{a.tasks_tied}"],
        ["cost ratio (skill / baseline, per trial)", f"**{fmt.ratio(a.cost.ratio)}** ({fmt.cost_delta(a.cost.ratio)})",
         f"[{fmt.ratio(a.cost.interval.low)}, {fmt.ratio(a.cost.interval.high)}]; limit {fmt.ratio(limit)}"],
        ["smallest detectable effect (80% power)", fmt.pp(a.mde).lstrip("+"),
         f"from {'this run' if a.mde_source == 'pilot' else 'default variances'}"],
    ]  # fmt: skip
    if a.paired_table is not None:
        t = a.paired_table
        rows.append(["one run per arm: McNemar (exact)", f"p = {fmt.p_value(t.mcnemar_p)}",
                     f"Newcombe {fmt.pp(t.newcombe.difference)} [{fmt.pp(t.newcombe.interval.low)}, "
                     f"{fmt.pp(t.newcombe.interval.high)}]; discordant {t.skill_only} vs {t.baseline_only}"])  # fmt: skip
    lines += _md_table(["figure", "value", f"{conf}% interval / detail"], rows, align="lrl")
    lines += [
        "",
        "### Verdicts",
        "",
    ]
    lines += _md_table(
        ["rule", "verdict"],
        [
            [f"point (the article's){' · **preregistered**' if d.rule == 'point' else ''}", d.point_label],
            [f"interval{' · **preregistered**' if d.rule == 'interval' else ''}", d.interval_verdict],
            ["evidence from the paired interval", d.evidence],
            ["**decision**", f"**{d.label}**"],
        ],
        align="ll",
    )
    lines += ["", "### Every reason", ""]
    lines += _md_table(
        ["code", "kind", "reason"],
        [[f"`{x.code}`", x.kind, md_escape(x.message)] for x in d.reasons],
        align="lll",
    )
    lines += ["", "### Per task (largest gain first)", ""]
    task_rows = []
    task_flags = flags_by_task(r)
    for row in tasks_by_difference(a):
        task_rows.append(
            [
                f"`{row.task_id}`",
                fmt.rate_with_excluded(row.baseline, skipped=False),
                fmt.rate_with_excluded(row.skill, skipped=False),
                fmt.pp(row.difference),
                f"{fmt.usd(row.baseline.mean_cost)} / {fmt.usd(row.skill.mean_cost)}",
                md_escape(", ".join(task_flags.get(row.task_id, ()))) or "-",
            ]
        )
    for tid in r.skipped_tasks:
        task_rows.append([f"`{tid}`", "skipped", "skipped", "n/a", "n/a", md_escape(r.skip_reason(tid))])
    lines += _md_table(["task", "baseline", "skill", "difference", "$/trial (baseline / skill)", "flags"], task_rows,
                       align="lrrrrl")  # fmt: skip
    if r.flagged:
        lines += ["", f"### Flagged trials ({len(r.flagged)})", ""]
        frows = [
            [
                md_code(f.trial_id),
                f.arm,
                f.outcome,
                md_escape(", ".join(f.flags)),
                md_escape(", ".join(f.files[:5])) or "-",
            ]
            for f in flagged_trials(r)
        ]
        lines += _md_table(["trial", "arm", "outcome", "flags", "files changed"], frows, align="lllll")
    from harness.reporting.trials import markdown_section  # it imports this module

    lines += markdown_section(r)
    if r.notes:
        lines += ["", "### Notes", ""] + [f"- {md_escape(n)}" for n in r.notes]
    lines += skillreport.markdown_lines(r.final_records, r.prereg.decision.pass_rule)
    lines += [
        "",
        f"<sub>lock `{r.lock_hash[:16]}` · judge {md_code(prov['judge_model'])} · image "
        f"{md_code(prov['image_digest'])} (built on {md_code(r.base_image or 'n/a')}) · base {md_code(prov['base_sha'])} · "
        f"{md_escape((first or 'n/a')[:16].replace('T', ' '))} to {md_escape((last or 'n/a')[:16].replace('T', ' '))}"
        f" · spent {fmt.usd(r.spent_usd)} (agents and judges; the cost figures above are the agents' alone, "
        "as the decision compares them) · skill-harness</sub>",
        "",
    ]
    return "\n".join(lines)


def flags_by_task(r: ReportInput) -> dict[str, tuple[str, ...]]:
    """Per task, the distinct flags of its flagged trials as ``arm: flag`` (which arm did it matters)."""
    trial = {x.trial_id: x for x in r.records}
    out: dict[str, list[str]] = {}
    for tid, flags in r.flagged:
        rec = trial.get(tid)
        if rec is None:
            continue
        bucket = out.setdefault(rec.task_id, [])
        for f in flags:
            item = f"{rec.arm}: {f}"
            if item not in bucket:
                bucket.append(item)
    return {k: tuple(v) for k, v in out.items()}


# ============================================================================ junit


def junit_xml(r: ReportInput) -> str:
    """``junit.xml``: a ``decision`` testcase (fails unless adopt) and one testcase per task.

    A task's testcase fails when the skill arm passed a smaller share of its
    valid trials than the baseline on that task (the skill hurt there), is
    skipped when either arm has no valid trial (or the task is a TODO), and
    passes otherwise; its output lists every trial. An invalid comparison is a
    JUnit ``error`` rather than a ``failure``.
    """
    a, d = r.analysis, r.decision
    prov = run_provenance(r)
    cls = f"skill-harness.{r.prereg.skill}"
    first, _ = run_dates(r)
    suite = ET.Element("testsuite", name=f"skill {r.prereg.skill}", timestamp=(first or "")[:19])
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("skill", r.prereg.skill), ("lock_hash", r.lock_hash), ("rule", d.rule), ("verdict", d.verdict),
        ("baseline", fmt.rate(a.baseline)), ("skill_arm", fmt.rate(a.skill)),
        ("paired_difference", fmt.pp(a.paired.mean)), ("cost_ratio", fmt.ratio(a.cost.ratio)),
        ("model", prov["model"]), ("resolved_model", prov["resolved_model"]), ("cli_version", prov["cli_version"]),
    ):  # fmt: skip
        ET.SubElement(props, "property", name=name, value=clean(value))

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0

    dec = ET.SubElement(suite, "testcase", classname=cls, name="decision", time="0")
    counts["tests"] += 1
    detail = "\n".join(f"[{x.code}] ({x.kind}) {x.message}" for x in d.reasons)
    summary = f"{verdict_word(d)} ({d.rule} rule): " + "; ".join(f"[{x.code}] {x.message}" for x in deciding_reasons(d))
    if d.verdict == "invalid":
        el = ET.SubElement(dec, "error", type="invalid", message=clean(summary))
        el.text = clean(detail)
        counts["errors"] += 1
    elif d.verdict != "adopt":
        el = ET.SubElement(dec, "failure", type=d.verdict, message=clean(summary))
        el.text = clean(detail)
        counts["failures"] += 1
    ET.SubElement(dec, "system-out").text = clean(terminal_summary(r))

    trials_by_task: dict[str, list[TrialRecord]] = {}
    for rec in r.final_records:
        trials_by_task.setdefault(rec.task_id, []).append(rec)
    for t in a.tasks:
        trials = sorted(trials_by_task.get(t.task_id, []), key=lambda x: (x.arm, x.run_index))
        seconds = sum(sum(x.durations_s.values()) for x in trials)
        total_time += seconds
        case = ET.SubElement(suite, "testcase", classname=f"{cls}.tasks", name=t.task_id, time=f"{seconds:.3f}")
        counts["tests"] += 1
        rates = f"baseline {fmt.rate(t.baseline)}, skill {fmt.rate(t.skill)}"
        if t.difference is None:
            ET.SubElement(case, "skipped", message=f"no valid trial in both arms ({rates})")
            counts["skipped"] += 1
        elif t.difference < 0:
            ET.SubElement(case, "failure", type="skill_worse",
                          message=f"the skill arm did worse on this task: {rates} ({fmt.pp(t.difference)})")  # fmt: skip
            counts["failures"] += 1
        lines = [f"{rates}; difference {fmt.pp(t.difference)}"]
        for x in trials:
            flags = (x.patch.flags if x.patch else ()) + x.flags
            lines.append(
                f"{x.trial_id}: {outcome(x, r.prereg.decision.pass_rule)} (status {x.status}, "
                f"cost {fmt.usd(x.agent_cost_usd)} agent, {fmt.usd(x.total_cost_usd)} with judge, turns {x.agent.num_turns if x.agent else 'n/a'})"
                + (f" flags: {', '.join(flags)}" if flags else "")
            )
        ET.SubElement(case, "system-out").text = clean("\n".join(lines))
    for tid in r.skipped_tasks:
        case = ET.SubElement(suite, "testcase", classname=f"{cls}.tasks", name=tid, time="0")
        ET.SubElement(case, "skipped", message=f"{r.skip_reason(tid)}: not run")
        counts["tests"] += 1
        counts["skipped"] += 1

    for k, v in counts.items():
        suite.set(k, str(v))
    wall = wall_seconds(r)  # the suite's time is the experiment's wall time, not the sum of its trials
    suite.set("time", f"{wall if wall is not None else total_time:.3f}")
    root = ET.Element("testsuites", name=f"skill-harness {r.prereg.skill}", time=suite.get("time", "0"))
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(counts[k]))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# ==================================================================== decision.json


def decision_json(r: ReportInput) -> dict[str, Any]:
    a, d = r.analysis, r.decision
    prov = run_provenance(r)
    first, last = run_dates(r)
    return {
        "schema_version": 1,
        "skill": r.prereg.skill,
        "lock_hash": r.lock_hash,
        "experiment_id": r.experiment_id,
        "results_lines": len(r.records),
        "started_at": first,
        "finished_at": last,
        "model": prov["model"],
        "resolved_model": prov["resolved_model"],
        "cli_version": prov["cli_version"],
        "rule": d.rule,
        "verdict": d.verdict,
        "label": d.label,
        "point_only_adopt": d.point_only_adopt,
        "point_verdict": d.point_verdict,
        "interval_verdict": d.interval_verdict,
        "evidence": d.evidence,
        "reasons": [{"code": x.code, "kind": x.kind, "message": x.message} for x in d.reasons],
        "arms": {
            arm.arm: {
                "passes": arm.passes,
                "valid": arm.valid,
                "rate": fmt.rate(arm),
                "unknown": arm.unknown,
                "truncated": arm.truncated,
                "infra": arm.infra,
                "skipped": arm.skipped,
                "mean_cost_per_trial_usd": arm.mean_cost_per_trial,
                "cost_per_pass_usd": arm.cost_per_pass,
            }
            for arm in (a.baseline, a.skill)
        },
        "paired_difference": {
            "mean": a.paired.mean,
            "low": _finite(a.paired.interval.low),
            "high": _finite(a.paired.interval.high),
            "tasks": a.paired.n,
        },
        "sign_flip_p": a.sign_flip.p_value,
        "cost_ratio": {
            "ratio": _finite(a.cost.ratio),
            "low": _finite(a.cost.interval.low),
            "high": _finite(a.cost.interval.high),
        },
        "mde": _finite(a.mde),
        "spent_usd": r.spent_usd,
        "skipped_tasks": list(r.skipped_tasks),
        "flagged_trials": [{"trial": t, "flags": list(f)} for t, f in r.flagged],
        "identical_patch_reuse": samepatch.reuse_counts(r.records),
        "api_failures": {arm: dict(c) for arm, c in apihealth.failures_by_arm(r.records).items()},
        "skill_invocation": skillreport.summary(r.final_records, r.prereg.decision.pass_rule),
    }


def _finite(x: float | None) -> float | str | None:
    if x is None:
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


# ========================================================================== writing


def write_reports(root: Path, r: ReportInput, redact: Callable[[str], str] | None = None) -> dict[str, Path]:
    """Write decision.json, summary.txt, report.md, report.html and junit.xml atomically, redacted:
    by ``redact`` (the run's redactor, which knows its key), else by the key-shaped patterns alone
    (a re-render or merge, which knows no key)."""
    redact = redact or Redactor().text
    from harness.reporting import html as report_html

    rendered = {
        DECISION_JSON: dumps(decision_json(r)),
        SUMMARY_TXT: terminal_summary(r) + "\n",
        REPORT_MD: markdown(r),
        REPORT_HTML: report_html.render(r),
        JUNIT_XML: junit_xml(r),
    }
    paths: dict[str, Path] = {}
    for name, text in rendered.items():
        path = root / name
        try:
            atomic_write(path, redact(text).encode("utf-8"))
        except OSError as e:
            raise HarnessError(f"cannot write {path}: {e.strerror}") from None
        paths[name] = path
    return paths


# ============================================================================= gate


@dataclass(frozen=True)
class GateResult:
    skill: str
    verdict: str
    reasons: tuple[tuple[str, str, str], ...]
    """(code, kind, message) of every reason, in the decision's order."""
    source: str
    """``decision.json`` or ``recomputed from results.jsonl``."""
    experiment_dir: Path
    label: str = ""
    """The report's wording of the verdict (the amber point-only label when only the point rule adopts)."""

    @property
    def exit_code(self) -> int:
        return GATE_CODES.get(self.verdict, 3)

    @property
    def line(self) -> str:
        ordered = sorted(self.reasons, key=lambda x: x[1] == "note")
        why = "; ".join(f"[{code}] {message}" for code, _, message in ordered) or "no reasons recorded"
        word = self.label.upper() if self.label and self.label != self.verdict else self.verdict.upper()
        return clean(f"{word} (exit {self.exit_code}) {self.skill}: {why}")


def fresh_decision(root: Path, meta: ExperimentMeta, lines: int) -> dict[str, Any] | None:
    """decision.json when it was computed from exactly the current results under the same lock."""
    try:
        data = json.loads((root / DECISION_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("verdict") not in GATE_CODES
        or data.get("lock_hash") != meta.lock_hash
        or data.get("results_lines") != lines
        or not isinstance(data.get("reasons"), list)
    ):
        return None
    return data


def gate(root: Path) -> GateResult:
    """The experiment's verdict for CI, from decision.json if it is current, else recomputed (read-only).

    Raises :class:`ResultsUnavailable` (exit 3) when there is nothing to gate
    on: no experiment description, no readable results, or results that cannot
    be analysed (preregistration missing or re-locked).
    """
    try:
        meta = require_meta(root)
        lines = read_records(root)
    except HarnessError as e:
        raise ResultsUnavailable(e.message, hint=e.hint) from e
    data = fresh_decision(root, meta, len(lines.records))
    if data is not None:
        reasons = tuple(
            (str(x.get("code", "?")), str(x.get("kind", "?")), str(x.get("message", "")))
            for x in data["reasons"]
            if isinstance(x, dict)
        )
        return GateResult(str(data.get("skill", meta.skill or "?")), str(data["verdict"]), reasons,
                          DECISION_JSON, root, str(data.get("label") or ""))  # fmt: skip
    try:
        r = load_experiment(root)
    except HarnessError as e:
        raise ResultsUnavailable(
            f"{root}: decision.json is missing or stale and the decision cannot be recomputed: {e.message}",
            hint=e.hint,
        ) from None
    reasons = tuple((x.code, x.kind, x.message) for x in r.decision.reasons)
    return GateResult(r.prereg.skill, r.decision.verdict, reasons, f"recomputed from {RESULTS}", root, r.decision.label)
