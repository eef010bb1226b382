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

from harness.host.files import write_files
from harness.redact import Redactor
from harness.reporting import html
from harness.reporting.decision_json import DECISION_JSON, decision_json, dumps
from harness.reporting.junit import junit_xml
from harness.reporting.markdown import markdown
from harness.reporting.model import ReportInput
from harness.reporting.text import terminal_summary

__all__ = ["DECISION_JSON", "JUNIT_XML", "REPORT_FILES", "REPORT_HTML", "REPORT_MD", "SUMMARY_TXT", "write_reports"]

SUMMARY_TXT = "summary.txt"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
JUNIT_XML = "junit.xml"
REPORT_FILES = (REPORT_MD, REPORT_HTML, JUNIT_XML)
"""The files a person or a CI system opens (decision.json and summary.txt are written beside them)."""


def write_reports(root: Path, r: ReportInput, redact: Callable[[str], str] | None = None) -> dict[str, Path]:
    """Write decision.json, summary.txt, report.md, report.html and junit.xml atomically, redacted:
    by ``redact`` (the run's redactor, which knows its key), else by the key-shaped patterns alone
    (a re-render or merge, which knows no key)."""
    redact = redact or Redactor().text
    rendered = {
        DECISION_JSON: dumps(decision_json(r)),
        SUMMARY_TXT: terminal_summary(r) + "\n",
        REPORT_MD: markdown(r),
        REPORT_HTML: html.render(r),
        JUNIT_XML: junit_xml(r),
    }
    return write_files(root, rendered, redact)
