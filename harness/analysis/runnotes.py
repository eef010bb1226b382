"""What the reports note beside the decision: pure reductions over every record of a run.

The API failures the gateway saw upstream, per arm and over every attempt (the rule for a failed answer
is :func:`harness.records.is_upstream_failure`, the one the trial's :mod:`harness.trial.apihealth` applies),
and how many trials took their verify result or judge verdict from a byte-identical earlier patch
(:mod:`harness.trial.samepatch` shares them; final attempts only). Neither enters the decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from harness.records import ARMS, TrialRecord, is_upstream_failure
from harness.results.attempts import latest_by_trial


def failures_by_arm(records: Iterable[TrialRecord]) -> dict[str, Counter[str]]:
    """Every failed upstream answer of every attempt (retries included), per arm: ``{arm: {"529": 3}}``."""
    out: dict[str, Counter[str]] = {arm: Counter() for arm in ARMS}
    for r in records:
        if r.gateway is not None:
            out[r.arm].update(o for o in r.gateway.upstream_statuses if is_upstream_failure(o))
    return out


def api_summary(records: Iterable[TrialRecord]) -> str | None:
    """One line for the report ("API failures seen upstream: baseline 529 x3; skill none"), None when there were none."""
    counts = failures_by_arm(records)
    if not any(counts.values()):
        return None
    parts = [
        f"{arm} " + (", ".join(f"{k} x{v}" for k, v in sorted(c.items())) if c else "none") for arm, c in counts.items()
    ]
    return "API failures the gateway saw upstream (every attempt): " + "; ".join(parts)


def api_notes(records: Iterable[TrialRecord]) -> list[str]:
    """What the report says about the API's health and pricing (per arm), where there is something to say."""
    notes: list[str] = []
    line = api_summary(records)
    if line:
        notes.append(line)
    return notes


def reuse_counts(records: Iterable[TrialRecord]) -> dict[str, int]:
    """How many trials' verify and judge results came from an identical earlier patch (final attempts)."""
    final = latest_by_trial(records).values()
    return {
        "verify": sum(1 for r in final if r.verify is not None and r.verify.reused_from is not None),
        "judge": sum(1 for r in final if r.judge is not None and r.judge.reused_from is not None),
    }


def reuse_notes(records: Iterable[TrialRecord]) -> list[str]:
    counts = reuse_counts(records)
    if not any(counts.values()):
        return []
    text = f"verify reused on byte-identical patches: {counts['verify']} trial(s)"
    if counts["judge"]:
        text += f"; judge verdict reused (judge.reuse_identical): {counts['judge']} trial(s), not paid again"
    return [text]
