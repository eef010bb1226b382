"""The summary of a model matrix: ``models.md``, ``models.json`` and the section ``skilltrial eval`` prints.

A matrix (``execution.models``) is one complete A/B per executor model, each with its own reports in
``<top>/models/<model>/``; this is the one table over them, so a skill that helps one model only is seen at
a glance. Per model: the verdict (the amber point-only label kept), both arms' pass rates with their N
(``7/10``, exclusions beside), the paired per-task difference with its interval, the cost ratio with its
interval and the judge-independence note; then the verdict of the preregistered rule over the models
(:mod:`harness.analysis.matrix`) and one line that says where the skill helps and where it does not.

:func:`matrix_report` builds the view (pure) from each model's analysed experiment
(:class:`~harness.reporting.model.ReportInput`, or why there is none); :func:`markdown`, :func:`json_data`
and :func:`terminal_lines` render it (pure; numbers by :mod:`harness.fmt`, untrusted text through
:mod:`~harness.reporting.escape`); :func:`write_matrix_reports` is the one writer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import fmt
from harness.analysis.matrix import RULE_TEXT, MatrixVerdict, ModelsRule, ModelVerdict, ModelVerdictWord, combine
from harness.analysis.reasons import ReasonCode
from harness.reporting.escape import clean, md_code, md_escape
from harness.reporting.gate import GATE_CODES
from harness.reporting.model import ReportInput, deciding_reasons, verdict_word
from harness.reporting.outputs import MATRIX_OUTPUTS, MODELS_JSON, MODELS_MD, publish
from harness.results.matrix import MODELS_DIR
from harness.study.config import model_dir_name

MARK = {"adopt": "✅", "reject": "❌", "inconclusive": "⚠️", "invalid": "⛔", "unavailable": "⛔"}
AMBER_MARK = "🟠"
"""As in report.md: a point-only adoption is never shown with the green mark."""


@dataclass(frozen=True)
class ModelResult:
    """One model's experiment of the matrix, analysed, or why it could not be."""

    model: str
    report: ReportInput | None
    error: str | None = None
    """Why there is no analysed experiment (it has not run, its results are unreadable)."""

    @property
    def directory(self) -> str:
        """Its experiment directory, relative to the top directory (``models/<name>``)."""
        return f"{MODELS_DIR}/{model_dir_name(self.model)}"

    @property
    def verdict(self) -> ModelVerdictWord:
        return self.report.decision.verdict if self.report is not None else "unavailable"

    @property
    def label(self) -> str:
        """The verdict as the model's own report words it (capitals; the amber point-only label)."""
        return verdict_word(self.report.decision) if self.report is not None else "NO RESULT"

    @property
    def point_only(self) -> bool:
        return self.report is not None and self.report.decision.point_only_adopt

    @property
    def judge_note(self) -> str | None:
        """The judge-independence note of this model's decision (same model, same family), else None."""
        if self.report is None:
            return None
        notes = [x.message for x in self.report.decision.reasons if x.code == ReasonCode.JUDGE_NOT_INDEPENDENT]
        return notes[0] if notes else None

    @property
    def judge_model(self) -> str:
        return self.report.prereg.execution.judge_model if self.report is not None else ""


@dataclass(frozen=True)
class MatrixReport:
    skill: str
    lock_hash: str
    rows: tuple[ModelResult, ...]
    """In the preregistration's order."""
    verdict: MatrixVerdict
    top: str
    """The top directory, as given."""

    @property
    def exit_code(self) -> int:
        return GATE_CODES.get(self.verdict.verdict, 3)

    @property
    def rule(self) -> ModelsRule:
        return self.verdict.rule


def matrix_report(
    skill: str, lock_hash: str, rule: ModelsRule, rows: Sequence[ModelResult], top: Path | str
) -> MatrixReport:
    """The summary's view: the rows and the verdict of the preregistered rule over them (pure)."""
    verdict = combine([ModelVerdict(r.model, r.verdict) for r in rows], rule)
    return MatrixReport(skill, lock_hash, tuple(rows), verdict, str(top))


# ============================================================================ shared wording


def where_line(rows: Sequence[ModelResult]) -> str:
    """One sentence: on which models the skill helps (adopt) and on which it does not."""
    groups: dict[str, list[str]] = {}
    for r in rows:
        name = f"{r.model} (point rule only)" if r.point_only else r.model
        groups.setdefault(r.verdict, []).append(name)
    helps = groups.get("adopt", [])
    if helps and len(helps) == len(rows):
        return f"Helps on every model: {', '.join(helps)}."
    parts = [f"helps on {', '.join(helps)} (adopt)" if helps else "helps on no model"]
    for verdict, words in (
        ("reject", "not on {} (reject)"),
        ("inconclusive", "unclear on {} (inconclusive)"),
        ("invalid", "no valid comparison on {} (invalid)"),
        ("unavailable", "no result yet on {}"),
    ):
        if groups.get(verdict):
            parts.append(words.format(", ".join(groups[verdict])))
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _rate(r: ModelResult, arm: str) -> str:
    return fmt.rate_with_excluded(r.report.analysis.arm(arm)) if r.report is not None else fmt.NA


def _difference(r: ModelResult) -> str:
    if r.report is None:
        return fmt.NA
    p = r.report.analysis.paired
    return f"{fmt.pp(p.mean)} {fmt.interval(p.interval)}"


def _cost(r: ModelResult) -> str:
    if r.report is None:
        return fmt.NA
    c = r.report.analysis.cost
    return f"{fmt.ratio(c.ratio)} {fmt.interval(c.interval, fmt.ratio)}"


def _judge(r: ModelResult) -> str:
    if r.report is None:
        return r.error or "no result"
    note = r.judge_note
    return f"{r.judge_model}: {note}" if note else f"{r.judge_model}: independent"


def _confidence(m: MatrixReport) -> int:
    levels = {round(100 * r.report.analysis.confidence) for r in m.rows if r.report is not None}
    return levels.pop() if len(levels) == 1 else 95


def _design(m: MatrixReport) -> str:
    designs = sorted(
        {f"{r.report.analysis.n_tasks} tasks x {r.report.prereg.execution.runs_per_arm} runs per arm"
         for r in m.rows if r.report is not None}
    )  # fmt: skip
    return "; ".join(designs) or "no results"


def headline(m: MatrixReport) -> str:
    return (
        f"{m.skill} on {len(m.rows)} models: {m.verdict.verdict.upper()} "
        f"(models rule {m.rule}: {RULE_TEXT[m.rule]}): {m.verdict.reason}"
    )


# ============================================================================ renderers


def markdown(m: MatrixReport) -> str:
    """``models.md``: the verdict over the models, the where-line, one row per model (fits a step summary)."""
    conf = _confidence(m)
    lines = [
        f"## {MARK.get(m.verdict.verdict, '')} `{md_escape(m.skill)}` on {len(m.rows)} models: "
        f"**{m.verdict.verdict.upper()}** (models rule `{m.rule}`: {RULE_TEXT[m.rule]}; preregistered)",
        "",
        f"> {md_escape(where_line(m.rows))}",
        "",
        f"- {md_escape(m.verdict.reason)}",
        "",
        f"| model | verdict | baseline | skill | paired difference ({conf}% CI) | cost ratio ({conf}% CI) | judge | report |",
        "| :--- | :--- | ---: | ---: | ---: | ---: | :--- | :--- |",
    ]
    for r in m.rows:
        mark = AMBER_MARK if r.point_only else MARK.get(r.verdict, "")
        link = f"[report]({r.directory}/report.md)" if r.report is not None else md_escape(r.error or "no result")
        lines.append(
            f"| {md_code(r.model)} | {mark} {md_escape(r.label)} | {md_escape(_rate(r, 'baseline'))} | "
            f"{md_escape(_rate(r, 'skill'))} | {md_escape(_difference(r))} | {md_escape(_cost(r))} | "
            f"{md_escape(_judge(r)) if r.report is not None else ''} | {link} |"
        )
    lines += ["", "Why, per model:", ""]
    for r in m.rows:
        why = deciding_reasons(r.report.decision)[:2] if r.report is not None else ()
        text = "; ".join(f"`{x.code}` {md_escape(x.message)}" for x in why) or md_escape(r.error or "no result")
        lines.append(f"- {md_code(r.model)}: {text}")
    lines += [
        "",
        f"Matrix `{m.lock_hash[:12]}` · {md_escape(_design(m))} · each model is a complete A/B with its own "
        f"decision in {md_code(f'{m.top}/models/<model>/')} · `skilltrial gate` on this directory exits "
        f"{m.exit_code}",
        "",
    ]
    return "\n".join(lines)


def json_data(m: MatrixReport) -> dict[str, Any]:
    """``models.json``: the verdict over the models and, per model, the figures the table shows (schema 1)."""
    models = []
    for r in m.rows:
        entry: dict[str, Any] = {
            "model": r.model,
            "directory": r.directory,
            "verdict": r.verdict,
            "label": r.label.lower(),
            "point_only_adopt": r.point_only,
            "judge_model": r.judge_model or None,
            "judge_note": r.judge_note,
            "error": r.error,
        }
        if r.report is not None:
            a = r.report.analysis
            entry.update(
                {
                    "rule": r.report.decision.rule,
                    "baseline": {"passes": a.baseline.passes, "valid": a.baseline.valid, "rate": fmt.rate(a.baseline)},
                    "skill": {"passes": a.skill.passes, "valid": a.skill.valid, "rate": fmt.rate(a.skill)},
                    "paired_difference": {"mean": a.paired.mean, "low": _finite(a.paired.interval.low),
                                          "high": _finite(a.paired.interval.high), "tasks": a.paired.n},
                    "cost_ratio": {"ratio": _finite(a.cost.ratio), "low": _finite(a.cost.interval.low),
                                   "high": _finite(a.cost.interval.high)},
                    "results_lines": len(r.report.records),
                }
            )  # fmt: skip
        models.append(entry)
    return {
        "schema_version": 1,
        "skill": m.skill,
        "lock_hash": m.lock_hash,
        "experiment_id": m.lock_hash[:12],
        "models_rule": m.rule,
        "verdict": m.verdict.verdict,
        "reason": m.verdict.reason,
        "exit_code": m.exit_code,
        "summary": where_line(m.rows),
        "models": models,
    }


def _finite(x: float | None) -> float | str | None:
    """JSON has no infinity: an unbounded interval's bound is written ``"inf"`` / ``"-inf"`` (as in decision.json)."""
    if x is None or math.isfinite(x):
        return x
    return None if math.isnan(x) else "inf" if x > 0 else "-inf"


def terminal_lines(m: MatrixReport) -> list[str]:
    """The section ``skilltrial eval`` prints after the per-model summaries: one aligned row per model."""
    conf = _confidence(m)
    header = ("model", "verdict", "baseline", "skill", f"paired difference ({conf}% CI)", f"cost ratio ({conf}% CI)",
              "judge")  # fmt: skip
    cells = [
        (r.model, r.label, _rate(r, "baseline"), _rate(r, "skill"), _difference(r), _cost(r), _judge(r)) for r in m.rows
    ]
    widths = [max(len(row[i]) for row in (header, *cells)) for i in range(len(header))]
    out = [f"models: {m.skill} on {len(m.rows)} models ({_design(m)}), models rule {m.rule}: {RULE_TEXT[m.rule]}"]
    for row in (header, *cells):
        out.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    out += [
        where_line(m.rows),
        f"MATRIX DECISION ({m.rule}, preregistered): {m.verdict.verdict.upper()}: {m.verdict.reason}",
        f"summary in {Path(m.top) / MODELS_MD} and {MODELS_JSON}; each model's reports in {Path(m.top) / 'models'}/<model>/   "
        f"[skilltrial gate {m.top} exits {m.exit_code}]",
    ]
    return [clean(x) for x in out]


# ============================================================================ the writer


def write_matrix_reports(root: Path, m: MatrixReport, redact: Callable[[str], str] | None = None) -> dict[str, Path]:
    """Write ``models.md`` and ``models.json`` into the top directory atomically, redacted, both or neither
    (:func:`harness.reporting.outputs.publish`; a model without a result is a row of the summary, not a refusal)."""

    def rendered() -> dict[str, str]:
        return {MODELS_MD: markdown(m), MODELS_JSON: json.dumps(json_data(m), indent=2, sort_keys=True) + "\n"}

    return publish(root, MATRIX_OUTPUTS, rendered, lambda _e: {}, redact)
