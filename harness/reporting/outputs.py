"""What an experiment directory derives from its results, and the one way it is written.

Each kind of experiment renders a set of files from ``results.jsonl`` (:class:`OutputSet`): an A/B
experiment its decision and reports, a library experiment its contributions and reports, a model matrix its
summary, an A/A calibration its ``calibration.json``. Every file of a set tells the same story, on every
path, because only :func:`publish` writes one:

* an analysis that succeeds rewrites every file of the set;
* an analysis that is **refused** (a :class:`~harness.errors.HarnessError`: a record edited by hand, results
  that no longer fit their lock, no readable result) rewrites each file that can say so with the refusal
  and its cause, and removes the others (an A/B experiment's ``decision.json``: the gate then recomputes,
  and refuses with the same cause, exit 3), then raises;
* anything else (a bug, an interrupt) removes the set, then raises.

So after any run of ``eval``, ``report`` or ``merge`` each output either reflects the results as they now
are or is gone; none is left from before. A run also removes its set before it appends its first result
line (``derived`` of :class:`harness.results.store.ExperimentDir`), so a controller killed mid-run leaves no
report of results that have since grown. The refusal documents of an A/B experiment are here
(:func:`ab_refusal`); a library's are :mod:`harness.experiment.library`'s.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.host.files import remove_files, write_set
from harness.redact import Redactor
from harness.reporting.escape import clean, esc, md_escape

DECISION_JSON = "decision.json"
SUMMARY_TXT = "summary.txt"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
JUNIT_XML = "junit.xml"
CONTRIBUTIONS_JSON = "contributions.json"
MODELS_MD = "models.md"
MODELS_JSON = "models.json"
CALIBRATION_JSON = "calibration.json"


@dataclass(frozen=True)
class OutputSet:
    """The files one kind of experiment derives from its results: :func:`publish` writes all of them."""

    kind: str
    files: tuple[str, ...]


AB_OUTPUTS = OutputSet("A/B experiment", (DECISION_JSON, SUMMARY_TXT, REPORT_MD, REPORT_HTML, JUNIT_XML))
LIBRARY_OUTPUTS = OutputSet("library experiment", (CONTRIBUTIONS_JSON, SUMMARY_TXT, REPORT_MD, REPORT_HTML))
MATRIX_OUTPUTS = OutputSet("model matrix", (MODELS_MD, MODELS_JSON))
"""The matrix's top directory; each model's own directory holds an A/B experiment's set."""
CALIBRATION_OUTPUTS = OutputSet("A/A calibration", (CALIBRATION_JSON,))

Refusal = Callable[[HarnessError], Mapping[str, str]]
"""What each file of a set says when the analysis is refused (a file left out is removed)."""


def publish(
    root: Path,
    outputs: OutputSet,
    produce: Callable[[], Mapping[str, str]],
    refusal: Refusal,
    redact: Callable[[str], str] | None = None,
) -> dict[str, Path]:
    """Analyse and render with ``produce`` (name -> text) and write the whole set to ``root``; on a refusal
    write ``refusal(error)`` instead and re-raise; on any other exception remove the set and re-raise.
    Redacted by ``redact`` (the run's redactor, which knows its key), else by the key-shaped patterns alone."""
    redact = redact or Redactor().text
    try:
        rendered = produce()
    except HarnessError as e:
        if root.is_dir():  # no directory, no stale output to replace (a model of a matrix not run yet)
            write_set(root, outputs.files, refusal(e), redact)
        raise
    except BaseException:
        remove_files(root, outputs.files)
        raise
    return write_set(root, outputs.files, rendered, redact)


def retract(root: Path, outputs: OutputSet) -> list[Path]:
    """Remove every file of ``outputs`` from ``root`` (what is about to be stale); the paths removed."""
    return remove_files(root, outputs.files)


def refused_line(e: HarnessError) -> str:
    """The refusal in one line, with what to do when the error says."""
    return e.message + (f" ({e.hint})" if e.hint else "")


def ab_refusal(root: Path) -> Refusal:
    """An A/B experiment's set when its analysis is refused: every report says NO VERDICT and why;
    ``decision.json`` is removed (there is no verdict to record)."""

    def documents(e: HarnessError) -> dict[str, str]:
        why = refused_line(e)
        title = f"No verdict for {root.name}"
        return {
            SUMMARY_TXT: clean(f"NO VERDICT: the analysis of {root} was refused: {why}") + "\n",
            REPORT_MD: f"# {md_escape(title)}\n\nThe analysis was refused: {md_escape(why)}\n\n"
            "Nothing in this directory is a decision until `skilltrial report` succeeds on it.\n",
            REPORT_HTML: refusal_page(title, why),
            JUNIT_XML: _junit_refusal(root.name, why),
        }

    return documents


def refusal_page(title: str, why: str) -> str:
    """A self-contained HTML page that says the analysis was refused and why (no selection, no chart)."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}}
.refused{{background:#fff1f0;padding:.8rem;border-left:4px solid #cf222e}}</style></head><body>
<h1>{esc(title)}</h1>
<p class="refused"><strong>REFUSED</strong>: {esc(why)}</p>
<p>Nothing in this directory is a decision or a selection until the analysis succeeds on it.</p>
</body></html>
"""


def _junit_refusal(name: str, why: str) -> str:
    root = ET.Element("testsuites", name=f"skilltrial {name}", tests="1", failures="0", errors="1", skipped="0")
    suite = ET.SubElement(root, "testsuite", name=name, tests="1", failures="0", errors="1", skipped="0")
    case = ET.SubElement(suite, "testcase", classname=f"skilltrial.{name}", name="decision", time="0")
    ET.SubElement(case, "error", type="refused", message=clean(why)).text = clean(why)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
