"""``junit.xml``: the decision as a test report CI systems already know how to show.

One ``decision`` testcase (a failure unless the verdict is adopt, an error when the comparison is
invalid; its output is the terminal summary) and one testcase per task, listing every trial.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness import fmt
from harness.records import TrialRecord, outcome
from harness.reporting.escape import clean
from harness.reporting.model import ReportInput, deciding_reasons, run_dates, run_provenance, verdict_word, wall_seconds
from harness.reporting.text import terminal_summary


def junit_xml(r: ReportInput, note: str | None = None) -> str:
    """``junit.xml``: a ``decision`` testcase (fails unless adopt) and one testcase per task.

    ``note``: the experiment is a family's variant, whose verdict is before Holm's correction: its ``decision``
    testcase is skipped with the note (the family's junit.xml decides), never passed or failed on its own.

    A task's testcase fails when the skill arm passed a smaller share of its
    valid trials than the baseline on that task (the skill hurt there), is
    skipped when either arm has no valid trial (or the task is a TODO), and
    passes otherwise; its output lists every trial. An invalid comparison is a
    JUnit ``error`` rather than a ``failure``.
    """
    a, d = r.analysis, r.decision
    prov = run_provenance(r)
    cls = f"skilltrial.{r.prereg.skill}"
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
    if note is not None:
        ET.SubElement(props, "property", name="holm_corrected", value="false")
        ET.SubElement(dec, "skipped", message=clean(f"{summary} -- {note}"))
        counts["skipped"] += 1
    elif d.verdict == "invalid":
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
    root = ET.Element("testsuites", name=f"skilltrial {r.prereg.skill}", time=suite.get("time", "0"))
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(counts[k]))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
