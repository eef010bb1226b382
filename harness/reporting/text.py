"""``summary.txt`` and what ``skilltrial eval`` prints: the whole decision in one terminal screen.

Every rate with its N and its exclusions, the paired difference with its interval, the cost ratio
with its limit, both rules' verdicts and every reason, then the preregistered decision.
"""

from __future__ import annotations

from harness import fmt
from harness.analysis import skilluse as skillreport
from harness.reporting.escape import clean
from harness.reporting.model import (
    ReportInput,
    next_experiment_text,
    paired_label,
    sequential_lines,
    verdict_word,
)


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
        f"paired difference (skill - baseline, per task): {fmt.pp(p.mean)}  {paired_label(r)} [{fmt.pp(p.interval.low)}, "
        f"{fmt.pp(p.interval.high)}] (t, {max(p.n - 1, 0)} df)   sign-flip p = " + fmt.p_value(a.sign_flip.p_value),
        f"tasks improved / worse / tied: {a.tasks_improved} / {a.tasks_worse} / {a.tasks_tied}   "
        f"smallest detectable effect: {fmt.pp(a.mde).lstrip('+')}",
        f"cost ratio skill/baseline: {fmt.ratio(a.cost.ratio)}  {conf}% CI [{fmt.ratio(a.cost.interval.low)}, "
        f"{fmt.ratio(a.cost.interval.high)}]   limit {fmt.ratio(1 + r.prereg.decision.cost_increase_max)}",
    ]
    lines += list(sequential_lines(r))
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
            + "; ".join(f"{t.trial_id} [{', '.join(t.flags)}]" for t in r.flagged[:6])
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
        *(f"next: {text}" for text in (next_experiment_text(r),) if text),
        f"spent {fmt.usd(r.spent_usd)} (agents and judges)   results and reports (report.md, report.html, junit.xml) in {r.experiment_dir}",
    ]
    return clean("\n".join(lines))
