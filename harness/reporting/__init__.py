"""Renderers and outcome records, read-only over results: terminal text, Markdown, HTML, JUnit,
decision.json, the CI gate, history, the skills ledger.

One module per output (:mod:`~harness.reporting.text`, :mod:`~harness.reporting.markdown`,
:mod:`~harness.reporting.html`, :mod:`~harness.reporting.junit`, :mod:`~harness.reporting.decision_json`),
each over :mod:`~harness.reporting.model` (the analysed experiment and the views they share),
:mod:`~harness.reporting.escape` and :mod:`harness.fmt`; :func:`write_reports` here renders them all.
Renderers never import each other (junit embeds the terminal summary and may import text) and never
import this package; :mod:`~harness.reporting.gate`, :mod:`~harness.reporting.history` and
:mod:`~harness.reporting.ledger` read results and decisions, never a renderer. A model matrix's summary
(:mod:`~harness.reporting.matrix`: its view over each model's analysed experiment, models.md, models.json
and the terminal section) reads the gate's exit codes, and nothing imports it but the experiment layer.

May import :mod:`harness.results`, :mod:`harness.analysis`, :mod:`harness.study`, :mod:`harness.fmt` and
the foundation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.reporting import html
from harness.reporting.decision_json import decision_json, dumps
from harness.reporting.junit import junit_xml
from harness.reporting.markdown import markdown
from harness.reporting.model import ReportInput
from harness.reporting.outputs import (
    AB_OUTPUTS,
    DECISION_JSON,
    JUNIT_XML,
    REPORT_HTML,
    REPORT_MD,
    SUMMARY_TXT,
    ab_refusal,
    publish,
)
from harness.reporting.text import terminal_summary
from harness.results.family import Membership, membership

__all__ = [
    "DECISION_JSON",
    "JUNIT_XML",
    "REPORT_FILES",
    "REPORT_HTML",
    "REPORT_MD",
    "SUMMARY_TXT",
    "analyse_and_write",
    "render_reports",
    "write_reports",
]

REPORT_FILES = (REPORT_MD, REPORT_HTML, JUNIT_XML)
"""The files a person or a CI system opens (decision.json and summary.txt are written beside them)."""


def render_reports(r: ReportInput, member: Membership | None = None) -> dict[str, str]:
    """decision.json, summary.txt, report.md, report.html and junit.xml of an analysed experiment (pure).
    ``member``: the experiment is one variant's comparison in a family; every report says that its verdict is
    the one before Holm's correction, and where the corrected one is (its junit.xml's decision is skipped)."""
    decision, summary, md = decision_json(r), terminal_summary(r), markdown(r)
    note = member_note(member) if member is not None else None
    if member is not None and note is not None:
        decision["family"] = {
            "variant": member.variant,
            "variants": list(member.variants),
            "holm_corrected": False,
            "family_dir": "../..",
            "family_decision": "../../decision.json",
        }
        summary += "\n" + note
        title, _, rest = md.partition("\n")
        md = f"{title}\n\n> {note}\n{rest}"
    return {
        DECISION_JSON: dumps(decision),
        SUMMARY_TXT: summary + "\n",
        REPORT_MD: md,
        REPORT_HTML: html.render(r, note),
        JUNIT_XML: junit_xml(r, note),
    }


def member_note(member: Membership) -> str:
    n = f"{len(member.variants)} variants" if member.variants else "several variants"
    return (
        f"NOTE: this is variant {member.variant}'s comparison in a family of {n}: its verdict here is before "
        "Holm's correction across them. The family's verdict and this variant's after the correction: "
        "`skilltrial gate` on this directory, or ../../decision.json."
    )


def write_reports(root: Path, r: ReportInput, redact: Callable[[str], str] | None = None) -> dict[str, Path]:
    """Write decision.json, summary.txt, report.md, report.html and junit.xml atomically, redacted:
    by ``redact`` (the run's redactor, which knows its key), else by the key-shaped patterns alone
    (a re-render or merge, which knows no key). All five or none (:func:`harness.reporting.outputs.publish`)."""
    return publish(root, AB_OUTPUTS, lambda: render_reports(r, membership(root)), ab_refusal(root), redact)


def analyse_and_write(
    root: Path, analyse: Callable[[], ReportInput], redact: Callable[[str], str] | None = None
) -> tuple[ReportInput, dict[str, Path]]:
    """Analyse with ``analyse`` and write every report into ``root``; when the analysis is refused (a
    :class:`~harness.errors.HarnessError`) the reports say NO VERDICT and why, decision.json is removed, and
    the error is raised (:func:`harness.reporting.outputs.publish`): no report is left from before."""
    analysed: list[ReportInput] = []

    def produce() -> dict[str, str]:
        analysed.append(analyse())
        return render_reports(analysed[0], membership(root))

    paths = publish(root, AB_OUTPUTS, produce, ab_refusal(root), redact)
    return analysed[0], paths
