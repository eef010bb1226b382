"""Every trial of an experiment with links to its artifacts, for report.md and report.html.

Artifacts are content-addressed (``artifacts/<sha[:2]>/<sha>``, see harness.results.store); the links are
relative to the experiment directory, where both reports are written, so they work in a browser,
in a CI artifact and in a copy of the directory.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness import fmt
from harness.records import outcome
from harness.reporting.report import ReportInput, md_code, md_escape

LINKED = (("patch.diff", "patch"), ("verify.log", "verify log"), ("transcript.jsonl", "transcript"))
"""The artifacts a reader opens for one trial, in this order: (artifact name, link text)."""


def artifact_path(digest: str) -> str:
    return f"artifacts/{digest[:2]}/{digest}"


@dataclass(frozen=True)
class TrialRow:
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


def markdown_section(r: ReportInput) -> list[str]:
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
