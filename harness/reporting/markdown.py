"""``report.md``: the decision sized for a GitHub step summary, every rate with its N, every reason.

Top to bottom, one helper per section: the verdict and its deciding reasons, pass rates, effect and
cost, both rules' verdicts, every reason, the per-task table, flagged trials, every trial with its
artifacts, notes, skill use, and the provenance footer. Untrusted text goes through
:func:`~harness.reporting.escape.md_escape` or :func:`~harness.reporting.escape.md_code`: GitHub
renders inline HTML.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness import fmt
from harness.analysis import skilluse as skillreport
from harness.analysis.estimates import ArmSummary
from harness.reporting.escape import md_code, md_escape
from harness.reporting.model import (
    ReportInput,
    deciding_reasons,
    flags_by_task,
    headline,
    next_experiment_text,
    run_dates,
    run_provenance,
    sequential_lines,
    tasks_by_difference,
    trial_rows,
    verdict_word,
)

VERDICT_MARK = {"adopt": "✅", "reject": "❌", "inconclusive": "⚠️", "invalid": "⛔"}
AMBER_MARK = "🟠"
"""Shown instead of the green mark when only the point rule adopts (:attr:`DecisionResult.point_only_adopt`)."""


def markdown(r: ReportInput) -> str:
    """``report.md``: fits a GitHub step summary; every rate with its N, every reason."""
    lines = [
        *_header(r),
        *_pass_rates(r),
        *_effect(r),
        *_verdicts(r),
        *_reasons(r),
        *_tasks(r),
        *_flagged(r),
        *_trials(r),
        *_notes(r),
        *skillreport.markdown_lines(r.final_records, r.prereg.decision.pass_rule),
        *_footer(r),
    ]
    return "\n".join(lines)


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    aligns = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if c == "r" else ":---" for c in aligns]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _header(r: ReportInput) -> list[str]:
    """The verdict, the headline figures, the deciding reasons and what ran."""
    a, d = r.analysis, r.decision
    prov = run_provenance(r)
    _, last = run_dates(r)
    return [
        f"## {AMBER_MARK if d.point_only_adopt else VERDICT_MARK.get(d.verdict, '')} `{r.prereg.skill}`: "
        f"**{verdict_word(d)}** "
        f"({d.rule} rule, preregistered)",
        "",
        f"> {md_escape(headline(r))}",
        "",
        *(f"- `{x.code}` {md_escape(x.message)}" for x in deciding_reasons(d)),
        *(f"\n**Next:** {md_escape(text)}" for text in (next_experiment_text(r),) if text),
        "",
        f"Experiment `{r.experiment_id}` · {a.n_tasks} tasks x {r.prereg.execution.runs_per_arm} runs per arm · "
        f"model {md_code(prov['model'])} ({md_escape(prov['resolved_model'])}) · "
        f"{md_escape(prov['agent'] if prov['agent'] != 'n/a' else 'agent')} {md_code(prov['cli_version'])} · {md_escape((last or 'n/a')[:16].replace('T', ' '))} UTC",
    ]


def _arm_cells(arm: ArmSummary) -> list[str]:
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


def _pass_rates(r: ReportInput) -> list[str]:
    a = r.analysis
    conf = round(100 * a.confidence)
    return [
        "",
        "### Pass rates",
        "",
        *_table(
            ["arm", "passed", f"naive {conf}% (Wilson)", f"task-clustered {conf}% (t)", "unknown", "truncated",
             "infra", "$/trial", "$/pass", "turns (median)"],
            [_arm_cells(a.baseline), _arm_cells(a.skill)],
        ),
        "",
        "Unknown (no judge verdict), truncated (deadline or budget) and infra trials are excluded from the "
        "denominators and counted here.",
    ]  # fmt: skip


def _effect(r: ReportInput) -> list[str]:
    """The paired difference, the sign-flip test, the cost ratio and the MDE (McNemar with one run per arm)."""
    a = r.analysis
    conf = round(100 * a.confidence)
    limit = 1 + r.prereg.decision.cost_increase_max
    p = a.paired
    rows = [
        [f"paired difference (skill - baseline, per task){' (unadjusted)' if r.decision.sequential else ''}",
         f"**{fmt.pp(p.mean)}**",
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
    return [
        "",
        "### Effect and cost",
        "",
        *_table(["figure", "value", f"{conf}% interval / detail"], rows, align="lrl"),
        *_sequential(r),
    ]


def _sequential(r: ReportInput) -> list[str]:
    """The group-sequential design and the look that decided (nothing for the fixed design)."""
    lines = sequential_lines(r)
    if not lines:
        return []
    return ["", "### Group-sequential design", "", *(f"- {md_escape(x[:1].upper() + x[1:])}" for x in lines)]


def _verdicts(r: ReportInput) -> list[str]:
    d = r.decision
    rows = [
        [f"point (the article's){' · **preregistered**' if d.rule == 'point' else ''}", d.point_label],
        [f"interval{' · **preregistered**' if d.rule == 'interval' else ''}", d.interval_verdict],
        ["evidence from the paired interval", d.evidence],
        ["**decision**", f"**{d.label}**"],
    ]
    return ["", "### Verdicts", "", *_table(["rule", "verdict"], rows, align="ll")]


def _reasons(r: ReportInput) -> list[str]:
    rows = [[f"`{x.code}`", x.kind, md_escape(x.message)] for x in r.decision.reasons]
    return ["", "### Every reason", "", *_table(["code", "kind", "reason"], rows, align="lll")]


def _tasks(r: ReportInput) -> list[str]:
    """One row per task, largest gain first, then the skipped tasks with their reason."""
    task_flags = flags_by_task(r)
    rows = [
        [
            f"`{row.task_id}`",
            fmt.rate_with_excluded(row.baseline, skipped=False),
            fmt.rate_with_excluded(row.skill, skipped=False),
            fmt.pp(row.difference),
            f"{fmt.usd(row.baseline.mean_cost)} / {fmt.usd(row.skill.mean_cost)}",
            md_escape(", ".join(task_flags.get(row.task_id, ()))) or "-",
        ]
        for row in tasks_by_difference(r.analysis)
    ]
    rows += [[f"`{tid}`", "skipped", "skipped", "n/a", "n/a", md_escape(r.skip_reason(tid))] for tid in r.skipped_tasks]
    header = ["task", "baseline", "skill", "difference", "$/trial (baseline / skill)", "flags"]
    return ["", "### Per task (largest gain first)", "", *_table(header, rows, align="lrrrrl")]


def _flagged(r: ReportInput) -> list[str]:
    if not r.flagged:
        return []
    rows = [
        [md_code(f.trial_id), f.arm, f.outcome, md_escape(", ".join(f.flags)), md_escape(", ".join(f.files[:5])) or "-"]
        for f in r.flagged
    ]
    header = ["trial", "arm", "outcome", "flags", "files changed"]
    return ["", f"### Flagged trials ({len(r.flagged)})", "", *_table(header, rows, align="lllll")]


def _trials(r: ReportInput) -> list[str]:
    """Every trial with links to its patch, verify log and transcript."""
    rows = trial_rows(r)
    if not rows:
        return []
    out = [
        "",
        f"### Every trial ({len(rows)})",
        "",
        "| trial | arm | outcome | status | $ agent | $ with judge | artifacts |",
        "| :--- | :--- | :--- | :--- | ---: | ---: | :--- |",
    ]
    for t in rows:
        links = " · ".join(f"[{text}]({path})" for text, path in t.links) or "-"
        out.append(
            f"| {md_code(t.trial_id)} | {t.arm} | {t.outcome} | {md_escape(t.status)} | {t.agent_cost} | "
            f"{t.total_cost} | {links} |"
        )
    return out


def _notes(r: ReportInput) -> list[str]:
    if not r.notes:
        return []
    return ["", "### Notes", "", *(f"- {md_escape(n)}" for n in r.notes)]


def _footer(r: ReportInput) -> list[str]:
    """Lock, judge, image, base commit, dates and spend: the provenance a reviewer checks."""
    prov = run_provenance(r)
    first, last = run_dates(r)
    return [
        "",
        f"<sub>lock `{r.lock_hash[:16]}` · judge {md_code(prov['judge_model'])} · image "
        f"{md_code(prov['image_digest'])} (built on {md_code(r.base_image or 'n/a')}) · base {md_code(prov['base_sha'])} · "
        f"{md_escape((first or 'n/a')[:16].replace('T', ' '))} to {md_escape((last or 'n/a')[:16].replace('T', ' '))}"
        f" · spent {fmt.usd(r.spent_usd)} (agents and judges; the cost figures above are the agents' alone, "
        "as the decision compares them) · skilltrial</sub>",
        "",
    ]
