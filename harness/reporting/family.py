"""A family of variants' reports (``arms:``): the Holm-corrected verdict over variant-vs-baseline comparisons.

Each variant is a complete paired A/B against the shared baseline with its own reports in
``<top>/variants/<name>/`` (its verdict there is the comparison's on its own); the top directory gets the
family's set, the same five names as an A/B experiment's (:data:`FAMILY_OUTPUTS`), in the family's shape:

* ``decision.json`` (``"kind": "family"``): the family's verdict, the version it adopts, alpha and the
  correction, and per variant its own verdict, raw and Holm-adjusted p-values, corrected verdict and figures;
* ``summary.txt``, ``report.md``, ``report.html``: the same table for people;
* ``junit.xml``: a ``decision`` testcase for the family and one per variant (a failure unless its corrected
  verdict is adopt).

:func:`family_report` builds the view (pure) from each variant's analysed experiment
(:class:`~harness.reporting.model.ReportInput`, or why there is none) with :func:`harness.analysis.family.decide_family`;
the renderers are pure (numbers by :mod:`harness.fmt`, untrusted text through :mod:`~harness.reporting.escape`);
:func:`write_family_reports` is the one writer.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import fmt
from harness.analysis.family import Comparison, FamilyResult, MemberVerdict, decide_family
from harness.analysis.reasons import Reason
from harness.errors import HarnessError
from harness.reporting.escape import clean, esc, md_code, md_escape
from harness.reporting.gate import GATE_CODES
from harness.reporting.model import ReportInput, deciding_reasons, verdict_word
from harness.reporting.outputs import (
    DECISION_JSON,
    JUNIT_XML,
    REPORT_HTML,
    REPORT_MD,
    SUMMARY_TXT,
    OutputSet,
    publish,
    refusal_page,
    refused_line,
)
from harness.results.family import VARIANTS_DIR
from harness.study.config import BARE

FAMILY_OUTPUTS = OutputSet("family of variants", (DECISION_JSON, SUMMARY_TXT, REPORT_MD, REPORT_HTML, JUNIT_XML))
"""The family's top directory; each variant's own directory holds an A/B experiment's set."""
MARK = {"adopt": "✅", "reject": "❌", "inconclusive": "⚠️", "invalid": "⛔", "unavailable": "⛔"}


@dataclass(frozen=True)
class VariantResult:
    """One variant's comparison with the baseline, analysed, or why it could not be."""

    variant: str
    report: ReportInput | None
    error: str | None = None

    @property
    def directory(self) -> str:
        return f"{VARIANTS_DIR}/{self.variant}"


@dataclass(frozen=True)
class FamilyReport:
    skill: str
    lock_hash: str
    baseline: str
    """``bare`` or the version the baseline carries."""
    rows: tuple[VariantResult, ...]
    """In the preregistration's order."""
    result: FamilyResult | None
    """None when a variant has no analysed experiment: the family has no verdict then."""
    confidence: float
    top: str

    @property
    def verdict(self) -> str:
        return self.result.verdict if self.result is not None else "unavailable"

    @property
    def exit_code(self) -> int:
        return GATE_CODES.get(self.verdict, 3)

    @property
    def adopted(self) -> str | None:
        return self.result.adopted if self.result is not None else None

    @property
    def reason(self) -> str:
        """One sentence: which version won, or why none did."""
        r = self.result
        if r is None:
            missing = [f"{x.variant} ({x.error or 'no result'})" for x in self.rows if x.report is None]
            return f"no verdict: {', '.join(missing)} has no analysed comparison"
        against = "the bare baseline" if self.baseline == BARE else f"version {self.baseline}"
        if r.adopted is not None:
            m = r.member(r.adopted)
            return (f"adopt version {r.adopted}: the largest gain over {against} ({fmt.pp(m.gain)}), "
                    f"Holm-adjusted p = {fmt.p_value(m.p_holm)} <= {r.alpha:g}")  # fmt: skip
        if r.verdict == "reject":
            return f"every variant is rejected against {against}"
        if r.verdict == "invalid":
            return "a comparison is invalid: " + "; ".join(x.message for x in r.reasons if x.kind == "invalid")
        why = [x.message for x in r.reasons if x.kind == "inconclusive"]
        best = f"the best estimate is {r.best}" if r.best else "no variant stands out"
        return f"no version is adopted over {against}: {best}" + (f"; {'; '.join(why)}" if why else "")

    def member(self, variant: str) -> MemberVerdict | None:
        return self.result.member(variant) if self.result is not None else None


def family_report(
    skill: str, lock_hash: str, baseline: str, rows: Sequence[VariantResult], confidence: float, top: Path | str
) -> FamilyReport:
    """The family's view: each comparison as analysed, then Holm's correction and the family verdict (pure)."""
    result = None
    if rows and all(r.report is not None for r in rows):
        comparisons = [Comparison(r.variant, r.report.analysis, r.report.decision) for r in rows if r.report]
        result = decide_family(comparisons, confidence)
    return FamilyReport(skill, lock_hash, baseline, tuple(rows), result, confidence, str(top))


# ============================================================================ shared wording


def _against(f: FamilyReport) -> str:
    return "bare baseline" if f.baseline == BARE else f"baseline version {f.baseline}"


def headline(f: FamilyReport) -> str:
    return (
        f"{f.skill}: {len(f.rows)} variant(s) against the {_against(f)}: {f.verdict.upper()} "
        f"(Holm-corrected, alpha {1 - f.confidence:.3g}): {f.reason}"
    )


def _cells(f: FamilyReport, r: VariantResult) -> dict[str, str]:
    m = f.member(r.variant)
    if r.report is None:
        return {"own": "NO RESULT", "verdict": "unavailable", "baseline": fmt.NA, "variant": fmt.NA,
                "gain": fmt.NA, "p": fmt.NA, "p_holm": fmt.NA, "cost": fmt.NA}  # fmt: skip
    a = r.report.analysis
    return {
        "own": verdict_word(r.report.decision),
        "verdict": m.verdict if m is not None else "unavailable",
        "baseline": fmt.rate_with_excluded(a.baseline),
        "variant": fmt.rate_with_excluded(a.skill),
        "gain": f"{fmt.pp(a.paired.mean)} {fmt.interval(a.paired.interval)}",
        "p": fmt.p_value(m.p_value) if m is not None else fmt.NA,
        "p_holm": fmt.p_value(m.p_holm) if m is not None else fmt.NA,
        "cost": f"{fmt.ratio(a.cost.ratio)} {fmt.interval(a.cost.interval, fmt.ratio)}",
    }


def _conf(f: FamilyReport) -> str:
    return f"{round(100 * f.confidence, 2):g}%"


def _family_reasons(f: FamilyReport) -> tuple[Reason, ...]:
    return f.result.reasons if f.result is not None else ()


def gate_lines(f: FamilyReport) -> list[str]:
    """What ``skilltrial gate`` prints for a family: the verdict line, then one line per variant."""
    out = [f"{f.verdict.upper()} (exit {f.exit_code}) {f.skill}: {f.reason}"]
    for r in f.rows:
        c = _cells(f, r)
        why = r.error if r.report is None else f"alone {c['own']}, gain {c['gain']}, Holm p {c['p_holm']}"
        out.append(f"  {r.variant}: {c['verdict'].upper()} ({why})")
    return [clean(x) for x in out]


def member_gate_lines(f: FamilyReport, variant: str) -> tuple[list[str], int]:
    """What ``skilltrial gate`` prints for one variant's directory inside a family, and its exit code: the
    variant's verdict after Holm's correction, never its uncorrected one (a CI job gating a variant's own
    directory would otherwise adopt what the family's correction does not), then the family's lines."""
    m = f.member(variant)
    verdict = m.verdict if m is not None else "unavailable"
    code = GATE_CODES.get(verdict, 3)
    why = (f"alone {m.own_verdict}, Holm p {fmt.p_value(m.p_holm)} across {len(f.rows)} variants"
           if m is not None else "the family has no verdict")  # fmt: skip
    head = (f"{verdict.upper()} (exit {code}) {f.skill} variant {variant}, in the family at {f.top}: {why}; "
            f"the family's verdict: {f.verdict.upper()}")  # fmt: skip
    return [clean(head), *gate_lines(f)[1:]], code


# ============================================================================ renderers


def terminal_lines(f: FamilyReport) -> list[str]:
    """``summary.txt`` and what ``skilltrial eval`` prints after the per-variant summaries."""
    header = ("variant", "alone", "in the family", "baseline", "variant arm", f"paired gain ({_conf(f)} CI)", "p",
              "Holm p", "cost ratio")  # fmt: skip
    keys = ("own", "verdict", "baseline", "variant", "gain", "p", "p_holm", "cost")
    rows = [(r.variant, *(_cells(f, r)[k] for k in keys)) for r in f.rows]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    out = [f"family: {f.skill}, {len(f.rows)} variant(s) against the {_against(f)}, Holm's correction across them"]
    for row in (header, *rows):
        out.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    out += [f"  [{x.code}] {x.message}" for x in _family_reasons(f)]
    out += [
        f"FAMILY DECISION: {f.verdict.upper()}: {f.reason}",
        f"reports in {Path(f.top)}; each comparison's own in {Path(f.top) / VARIANTS_DIR}/<variant>/   "
        f"[skilltrial gate {f.top} exits {f.exit_code}]",
    ]
    return [clean(x) for x in out]


def markdown(f: FamilyReport) -> str:
    """``report.md``: the family's verdict, the Holm table, why, and where each comparison's report is."""
    lines = [
        f"## {MARK.get(f.verdict, '')} `{md_escape(f.skill)}`: {len(f.rows)} variant(s) against the "
        f"{md_escape(_against(f))}: **{f.verdict.upper()}**",
        "",
        f"> {md_escape(f.reason)}",
        "",
        f"| variant | alone | in the family | baseline | variant arm | paired gain ({_conf(f)} CI) | p | Holm p | "
        "cost ratio | report |",
        "| :--- | :--- | :--- | ---: | ---: | ---: | ---: | ---: | ---: | :--- |",
    ]
    for r in f.rows:
        c = _cells(f, r)
        link = f"[report]({r.directory}/report.md)" if r.report is not None else md_escape(r.error or "no result")
        lines.append(
            f"| {md_code(r.variant)} | {md_escape(c['own'])} | {MARK.get(c['verdict'], '')} {c['verdict'].upper()} | "
            f"{md_escape(c['baseline'])} | {md_escape(c['variant'])} | {md_escape(c['gain'])} | {c['p']} | "
            f"{c['p_holm']} | {md_escape(c['cost'])} | {link} |"
        )
    reasons = _family_reasons(f)
    if reasons:
        lines += ["", "Why:", "", *(f"- `{x.code}` {md_escape(x.message)}" for x in reasons)]
    lines += ["", "Each comparison, on its own:", ""]
    for r in f.rows:
        why = deciding_reasons(r.report.decision)[:2] if r.report is not None else ()
        text = "; ".join(f"`{x.code}` {md_escape(x.message)}" for x in why) or md_escape(r.error or "no result")
        lines.append(f"- {md_code(r.variant)}: {text}")
    lines += [
        "",
        f"Family `{f.lock_hash[:12]}` · the baseline ran once and every variant's comparison reuses its trials · a "
        f"variant is adopted only when its Holm-adjusted p <= {1 - f.confidence:.3g} and it has the largest gain "
        f"(docs/statistics.md#several-variants-holm) · `skilltrial gate` on this directory exits {f.exit_code}",
        "",
    ]
    return "\n".join(lines)


def _finite(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return None if math.isnan(x) else "inf" if x > 0 else "-inf"


def decision_data(f: FamilyReport) -> dict[str, Any]:
    """``decision.json`` of a family (schema 1, ``"kind": "family"``)."""
    variants = []
    for r in f.rows:
        m = f.member(r.variant)
        entry: dict[str, Any] = {"variant": r.variant, "directory": r.directory, "error": r.error}
        if r.report is not None:
            a, d = r.report.analysis, r.report.decision
            entry.update(
                {
                    "own_verdict": d.verdict,
                    "verdict": m.verdict if m is not None else "unavailable",
                    "p_value": _finite(m.p_value) if m is not None else None,
                    "p_holm": _finite(m.p_holm) if m is not None else None,
                    "baseline": {"passes": a.baseline.passes, "valid": a.baseline.valid, "rate": fmt.rate(a.baseline)},
                    "variant_arm": {"passes": a.skill.passes, "valid": a.skill.valid, "rate": fmt.rate(a.skill)},
                    "paired_difference": {"mean": a.paired.mean, "low": _finite(a.paired.interval.low),
                                          "high": _finite(a.paired.interval.high), "tasks": a.paired.n},
                    "cost_ratio": {"ratio": _finite(a.cost.ratio), "low": _finite(a.cost.interval.low),
                                   "high": _finite(a.cost.interval.high)},
                    "reasons": [{"code": x.code, "kind": x.kind, "message": x.message}
                                for x in (*d.reasons, *(m.reasons if m is not None else ()))],
                    "results_lines": len(r.report.records),
                    "lock_hash": r.report.lock_hash,
                }
            )  # fmt: skip
        variants.append(entry)
    res = f.result
    return {
        "schema_version": 1,
        "kind": "family",
        "skill": f.skill,
        "lock_hash": f.lock_hash,
        "experiment_id": f.lock_hash[:12],
        "baseline": f.baseline,
        "verdict": f.verdict,
        "adopted": f.adopted,
        "best": res.best if res is not None else None,
        "correction": "holm",
        "alpha": res.alpha if res is not None else round(1 - f.confidence, 12),
        "reason": f.reason,
        "reasons": [{"code": x.code, "kind": x.kind, "message": x.message} for x in _family_reasons(f)],
        "exit_code": f.exit_code,
        "variants": variants,
    }


def junit_xml(f: FamilyReport) -> str:
    """``junit.xml``: a ``decision`` testcase for the family (fails unless adopt; an error when invalid or
    without a verdict) and one per variant (fails unless its Holm-corrected verdict is adopt)."""
    cls = f"skilltrial.{f.skill}"
    suite = ET.Element("testsuite", name=f"skill {f.skill} variants")
    props = ET.SubElement(suite, "properties")
    for name, value in (("skill", f.skill), ("lock_hash", f.lock_hash), ("baseline", f.baseline),
                        ("verdict", f.verdict), ("adopted", f.adopted or ""), ("correction", "holm")):  # fmt: skip
        ET.SubElement(props, "property", name=name, value=clean(value))
    counts = {"tests": 0, "failures": 0, "errors": 0}

    def case(name: str, verdict: str, message: str, out: str) -> None:
        el = ET.SubElement(suite, "testcase", classname=cls, name=name, time="0")
        counts["tests"] += 1
        if verdict in ("invalid", "unavailable"):
            ET.SubElement(el, "error", type=verdict, message=clean(message)).text = clean(message)
            counts["errors"] += 1
        elif verdict != "adopt":
            ET.SubElement(el, "failure", type=verdict, message=clean(message)).text = clean(message)
            counts["failures"] += 1
        ET.SubElement(el, "system-out").text = clean(out)

    case("decision", f.verdict, f"{f.verdict.upper()}: {f.reason}", "\n".join(terminal_lines(f)))
    for r in f.rows:
        c = _cells(f, r)
        m = f.member(r.variant)
        why = "; ".join(x.message for x in m.reasons) if m is not None and m.reasons else f"alone: {c['own']}"
        case(f"variant {r.variant}", c["verdict"], f"{c['verdict'].upper()}: {why}",
             f"gain {c['gain']}, p {c['p']}, Holm p {c['p_holm']}, cost {c['cost']}")  # fmt: skip
    for k, v in counts.items():
        suite.set(k, str(v))
    suite.set("skipped", "0")
    root = ET.Element("testsuites", {"name": f"skilltrial {f.skill}", **{k: str(v) for k, v in counts.items()}})
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def html(f: FamilyReport) -> str:
    """``report.html``: self-contained, the same table as report.md."""
    head = ("variant", "alone", "in the family", "baseline", "variant arm", f"paired gain ({_conf(f)} CI)", "p",
            "Holm p", "cost ratio")  # fmt: skip
    keys = ("own", "verdict", "baseline", "variant", "gain", "p", "p_holm", "cost")
    body = []
    for r in f.rows:
        c = _cells(f, r)
        link = f'<a href="{esc(r.directory)}/report.html">{esc(r.variant)}</a>' if r.report else esc(r.variant)
        body.append("<tr><td>" + link + "</td>" + "".join(f"<td>{esc(c[k])}</td>" for k in keys) + "</tr>")
    reasons = "".join(f"<li><code>{esc(x.code)}</code> {esc(x.message)}</li>" for x in _family_reasons(f))
    colour = {"adopt": "#1a7f37", "reject": "#cf222e", "inconclusive": "#9a6700"}.get(f.verdict, "#6e7781")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(f.skill)}: variants</title>
<style>body{{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem}}
table{{border-collapse:collapse}}td,th{{border-bottom:1px solid #d0d7de;padding:.3rem .6rem;text-align:left}}
.verdict{{border-left:6px solid {colour};padding:.6rem 1rem;background:#f6f8fa}}</style></head><body>
<h1>{esc(f.skill)}: {len(f.rows)} variant(s) against the {esc(_against(f))}</h1>
<p class="verdict"><strong>{esc(f.verdict.upper())}</strong>: {esc(f.reason)}</p>
<table><thead><tr>{"".join(f"<th>{esc(h)}</th>" for h in head)}</tr></thead><tbody>{"".join(body)}</tbody></table>
{f"<ul>{reasons}</ul>" if reasons else ""}
<p>Holm's correction across the variants; a variant is adopted only when its adjusted p &lt;= {1 - f.confidence:.3g}
and it has the largest gain. Family <code>{esc(f.lock_hash[:12])}</code>; <code>skilltrial gate</code> exits
{f.exit_code}.</p>
</body></html>
"""


def render(f: FamilyReport) -> dict[str, str]:
    return {
        DECISION_JSON: json.dumps(decision_data(f), indent=2, sort_keys=True) + "\n",
        SUMMARY_TXT: "\n".join(terminal_lines(f)) + "\n",
        REPORT_MD: markdown(f),
        REPORT_HTML: html(f),
        JUNIT_XML: junit_xml(f),
    }


def write_family_reports(root: Path, f: FamilyReport, redact: Callable[[str], str] | None = None) -> dict[str, Path]:
    """Write the family's set into the top directory atomically, redacted (a variant without a result is a row,
    and the family then has no verdict: exit 3)."""

    def refusal(e: HarnessError) -> dict[str, str]:
        why = refused_line(e)
        return {SUMMARY_TXT: f"NO VERDICT: {clean(why)}\n", REPORT_HTML: refusal_page(f"No verdict for {f.skill}", why)}

    return publish(root, FAMILY_OUTPUTS, lambda: render(f), refusal, redact)
