"""What the reports note beside the decision: pure reductions over every record of a run.

The API failures the gateway saw upstream, per arm and over every attempt (the rule for a failed answer
is :func:`harness.records.is_upstream_failure`, the one the trial's :mod:`harness.trial.apihealth` applies),
with the trials and attempts they hit beside them (the CLI retries a failed request itself, so one trial
can account for many failed answers),
and how many trials took their verify result or judge verdict from a byte-identical earlier patch
(:mod:`harness.trial.samepatch` shares them; final attempts only). Neither enters the decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from harness.records import ARMS, TrialRecord
from harness.results.attempts import latest_by_trial


def failures_by_arm(records: Iterable[TrialRecord]) -> dict[str, Counter[str]]:
    """Every failed upstream answer of every attempt (the CLI's own retries included), per arm: ``{arm: {"529": 3}}``.
    Twelve 529s may be one trial whose CLI retried eleven times: :func:`failed_trials_by_arm` counts trials."""
    out: dict[str, Counter[str]] = {arm: Counter() for arm in ARMS}
    for r in records:
        if r.gateway is not None:
            out[r.arm].update(r.gateway.failed_answers)
    return out


def failed_trials_by_arm(records: Iterable[TrialRecord]) -> dict[str, dict[str, int]]:
    """Per arm, beside the failed answers: ``trials`` that got at least one (any attempt), ``attempts`` that
    got at least one, and of those the attempts the API failure ``ended`` (recorded as infrastructure errors
    whose last upstream answer failed: retried, never counted for or against the arm)."""
    out: dict[str, dict[str, int]] = {arm: {"trials": 0, "attempts": 0, "ended": 0} for arm in ARMS}
    trials: dict[str, set[str]] = {arm: set() for arm in ARMS}
    for r in records:
        if r.gateway is None or not r.gateway.failed_answers or r.arm not in out:
            continue
        trials[r.arm].add(r.trial_id)
        out[r.arm]["attempts"] += 1
        out[r.arm]["ended"] += r.status == "infra_error" and r.gateway.last_answer_failed
    for arm, ids in trials.items():
        out[arm]["trials"] = len(ids)
    return out


def api_summary(records: Iterable[TrialRecord]) -> str | None:
    """One line for the report ("API failures the gateway saw upstream: baseline 529 x3 in 1 trial (2 attempts,
    1 ended by them); skill none"), None when there were none."""
    records = list(records)
    counts = failures_by_arm(records)
    if not any(counts.values()):
        return None
    trials = failed_trials_by_arm(records)
    parts = []
    for arm, c in counts.items():
        if not c:
            parts.append(f"{arm} none")
            continue
        t = trials[arm]
        parts.append(
            f"{arm} " + ", ".join(f"{k} x{v}" for k, v in sorted(c.items()))
            + f" in {_n(t['trials'], 'trial')} ({_n(t['attempts'], 'attempt')}, {t['ended']} ended by them)"
        )  # fmt: skip
    return "API failures the gateway saw upstream (every attempt, the CLI's own retries included): " + "; ".join(parts)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


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
