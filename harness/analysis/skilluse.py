""" "Did it fire?" in the A/B reports: pass rates split by whether the skill was invoked.

Pure functions over the final records (each record's ``skill`` comes from the
gateway, see :mod:`harness.trial.installed`). A skill arm of the installed delivery that
never invoked its skill is a *silent bypass*: its pass rate measures the model
without the skill, whatever the arm is called.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.records import PassRule, TrialRecord, outcome

INVOKED_ORDER = ("yes", "no", "forced", "could_not_measure")


@dataclass(frozen=True)
class InvocationRow:
    arm: str
    invoked: str
    trials: int
    passed: int
    decided: int
    """Trials with a pass or fail outcome (unknown, truncated, infra and skipped are not)."""

    @property
    def rate_text(self) -> str:
        return f"{self.passed}/{self.decided}" if self.decided else "n/a"


def invocation_rows(records: Iterable[TrialRecord], rule: PassRule = "verify_and_judge") -> list[InvocationRow]:
    counts: dict[tuple[str, str], list[int]] = {}
    for r in records:
        if r.skill is None or not r.is_outcome:
            continue
        key = (r.arm, r.skill.invoked)
        c = counts.setdefault(key, [0, 0, 0])
        o = outcome(r, rule)
        c[0] += 1
        c[1] += o == "pass"
        c[2] += o in ("pass", "fail")
    return [
        InvocationRow(arm, inv, *counts[(arm, inv)])
        for arm in ("baseline", "skill")
        for inv in INVOKED_ORDER
        if (arm, inv) in counts
    ]


def silent_bypass(records: Iterable[TrialRecord]) -> str | None:
    """A warning when the installed skill arm ran trials and never once invoked its skill."""
    skill = [r for r in records if r.arm == "skill" and r.is_outcome and r.skill is not None]
    measured = [r for r in skill if r.skill is not None and r.skill.delivery == "installed"]
    if not measured:
        return None
    if any(r.skill is not None and r.skill.invoked == "yes" for r in measured):
        return None
    listed = sum(1 for r in measured if r.skill is not None and r.skill.listed)
    return (
        f"silent bypass: the skill arm never invoked its skill in {len(measured)} trial(s) "
        f"({listed} with the skill listed); its pass rate measures the model without the skill"
    )


def terminal_lines(records: Sequence[TrialRecord], rule: PassRule) -> list[str]:
    rows = invocation_rows(records, rule)
    if not rows or all(row.invoked == "no" and row.arm == "baseline" for row in rows):
        return []
    cells = "   ".join(
        f"{row.arm} {row.invoked.replace('_', ' ')}: {row.rate_text} pass ({row.trials})" for row in rows
    )
    lines = [f"skill invoked (from the gateway): {cells}"]
    warning = silent_bypass(records)
    if warning:
        lines.append(f"WARNING {warning}")
    return lines


def markdown_lines(records: Sequence[TrialRecord], rule: PassRule) -> list[str]:
    rows = invocation_rows(records, rule)
    if not rows:
        return []
    lines = ["", "### Did the skill fire?", "", "| arm | skill invoked | trials | pass rate |", "|:--|:--|--:|--:|"]
    lines += [f"| {row.arm} | {row.invoked.replace('_', ' ')} | {row.trials} | {row.rate_text} |" for row in rows]
    warning = silent_bypass(records)
    if warning:
        lines += ["", f"> ⚠️ **{warning}**"]
    return lines


def summary(records: Sequence[TrialRecord], rule: PassRule) -> dict[str, Any]:
    """For decision.json."""
    return {
        "by_invoked": [
            {"arm": r.arm, "invoked": r.invoked, "trials": r.trials, "passed": r.passed, "decided": r.decided}
            for r in invocation_rows(records, rule)
        ],
        "silent_bypass": silent_bypass(records),
    }
