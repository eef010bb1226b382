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


def listed_name(records: Iterable[TrialRecord]) -> str | None:
    """The name the installed skill was listed under (SKILL.md's front matter name), from the skill arm."""
    for r in records:
        if r.arm == "skill" and r.skill is not None and r.skill.delivery == "installed" and r.skill.name:
            return r.skill.name
    return None


def side_requests(records: Iterable[TrialRecord]) -> dict[str, int]:
    """Per arm, the requests through the gateway the CLI did not send (never counted as the skill firing)."""
    out: dict[str, int] = {}
    for r in records:
        if r.gateway is not None and r.gateway.side_requests:
            out[r.arm] = out.get(r.arm, 0) + r.gateway.side_requests
    return out


def _side_text(records: Sequence[TrialRecord]) -> str | None:
    side = side_requests(records)
    if not side:
        return None
    arms = ", ".join(f"{arm} {n}" for arm, n in sorted(side.items()))
    return f"side requests (sent beside the CLI; metered, never counted as the skill firing): {arms}"


def terminal_lines(records: Sequence[TrialRecord], rule: PassRule) -> list[str]:
    rows = invocation_rows(records, rule)
    side = _side_text(records)
    if not rows or all(row.invoked == "no" and row.arm == "baseline" for row in rows):
        return [side] if side else []
    cells = "   ".join(
        f"{row.arm} {row.invoked.replace('_', ' ')}: {row.rate_text} pass ({row.trials})" for row in rows
    )
    name = listed_name(records)
    listed = f", listed as {name!r}" if name else ""
    lines = [f"skill invoked (from the gateway{listed}): {cells}"]
    if side:
        lines.append(side)
    warning = silent_bypass(records)
    if warning:
        lines.append(f"WARNING {warning}")
    return lines


def markdown_lines(records: Sequence[TrialRecord], rule: PassRule) -> list[str]:
    rows = invocation_rows(records, rule)
    if not rows:
        return []
    lines = ["", "### Did the skill fire?", ""]
    name = listed_name(records)
    if name:  # a plain name (harness.study.skillname.NAME): safe in a code span
        lines += [f"The CLI listed the skill as `{name}`.", ""]
    lines += ["| arm | skill invoked | trials | pass rate |", "|:--|:--|--:|--:|"]
    lines += [f"| {row.arm} | {row.invoked.replace('_', ' ')} | {row.trials} | {row.rate_text} |" for row in rows]
    side = _side_text(records)
    if side:
        lines += ["", side[0].upper() + side[1:] + "."]
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
        "listed_name": listed_name(records),
        "side_requests": side_requests(records),
    }
