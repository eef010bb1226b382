"""A trigger study's outputs: ``triggers.json``, ``triggers.md`` and the lines ``skilltrial triggers`` prints.

All three render one :class:`~harness.analysis.triggers.TriggerAnalysis`; written together, by
:func:`harness.reporting.outputs.publish` (:data:`TRIGGER_OUTPUTS`), into the study's output directory.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from harness import fmt
from harness.analysis.triggers import RateEstimate, TriggerAnalysis
from harness.reporting.outputs import OutputSet

TRIGGERS_JSON = "triggers.json"
TRIGGERS_MD = "triggers.md"
TRIGGER_OUTPUTS = OutputSet("trigger study", (TRIGGERS_JSON, TRIGGERS_MD))


def render(a: TriggerAnalysis) -> dict[str, str]:
    """Every file of the set: name -> text."""
    return {TRIGGERS_JSON: triggers_json(a), TRIGGERS_MD: markdown(a)}


def triggers_json(a: TriggerAnalysis) -> str:
    """The analysis as JSON, keys sorted; an estimate names why it could not measure only when it could not."""
    return json.dumps(dataclasses.asdict(a, dict_factory=_without_unset_reason), indent=2, sort_keys=True) + "\n"


def _without_unset_reason(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    return {k: v for k, v in items if not (k == "could_not_measure" and v is None)}


def _bound(x: float | None) -> str:
    """A bound of a difference of rates, in whole points (a difference of rates lies in [-100, +100])."""
    return fmt.pp(None if x is None else max(-1.0, min(1.0, x)), 0)


def _est(e: RateEstimate) -> str:
    if e.rate is None:
        return f"could not measure ({e.could_not_measure or ''})"
    return f"{fmt.pct(e.rate)} ({e.k}/{e.n}, {e.queries} queries) [{fmt.pct(e.low)}, {fmt.pct(e.high)}]"


def summary_lines(a: TriggerAnalysis) -> list[str]:
    """What ``skilltrial triggers`` prints at the end."""
    conf = round(100 * a.confidence)
    lines = [
        f"trigger accuracy of skill {a.skill}: {a.runs_per_query} run(s) per query, "
        f"{conf}% intervals clustered by query"
    ]
    for v, d in a.variants.items():
        lines.append(f"  {v}: recall {_est(d.recall)}   false triggers {_est(d.false_trigger_rate)}")
        if d.could_not_measure:
            lines.append(f"  {v}: {d.could_not_measure} of {d.runs} run(s) could not be measured")
    return lines + ["  " + x for x in comparison_lines(a)]


def comparison_lines(a: TriggerAnalysis) -> list[str]:
    lines: list[str] = []
    for c in a.comparisons:
        for kind, x in (("recall", c.recall), ("false trigger rate", c.false_trigger_rate)):
            if x.difference is None:
                continue
            lines.append(
                f"{c.variant} - {c.reference} {kind}: {fmt.pp(x.difference, 0)} "
                f"[{_bound(x.low)}, {_bound(x.high)}] over {x.queries} queries, sign-flip p = "
                + fmt.p_value(x.sign_flip_p)
            )
    return lines


def markdown(a: TriggerAnalysis) -> str:
    conf = round(100 * a.confidence)
    lines = [
        f"## Trigger accuracy: `{a.skill}`",
        "",
        f"{a.runs_per_query} run(s) per query; {conf}% intervals clustered by query.",
        "",
    ]
    lines += ["| variant | recall | false-trigger rate | could not measure |", "|:--|:--|:--|--:|"]
    for v, d in a.variants.items():
        lines.append(f"| {v} | {_est(d.recall)} | {_est(d.false_trigger_rate)} | {d.could_not_measure}/{d.runs} |")
    lines += [
        "",
        "### Per query",
        "",
        "| query | should trigger | " + " | ".join(a.variants) + " |",
        "|:--|:--|" + "--:|" * len(a.variants),
    ]
    queries = next(iter(a.variants.values())).queries
    for i, row in enumerate(queries):
        cells = []
        for d in a.variants.values():
            q = d.queries[i]
            cells.append(
                f"{q.triggered}/{q.measured}" + (f" (+{q.could_not_measure} n/m)" if q.could_not_measure else "")
            )
        label = "yes" if row.should_trigger else ("no (near miss)" if row.near_miss else "no")
        lines.append(f"| `{row.query}` | {label} | " + " | ".join(cells) + " |")
    if a.comparisons:
        lines += ["", "### Side by side (paired by query)", ""]
        lines += [f"- {x}" for x in comparison_lines(a)]
    return "\n".join(lines) + "\n"
