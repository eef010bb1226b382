"""What the reports note beside the decision: pure reductions over every record of a run.

The API failures the gateway saw upstream, per arm and over every attempt (the rule for a failed answer
is :func:`harness.records.is_upstream_failure`, the one the trial's :mod:`harness.trial.apihealth` applies),
with the trials and attempts they hit beside them (the CLI retries a failed request itself, so one trial
can account for many failed answers),
how many trials took their verify result or judge verdict from a byte-identical earlier patch
(:mod:`harness.trial.samepatch` shares them; final attempts only), and in a run on several engines the
trials and pass rates per engine, with a warning when an engine ran more of one arm than of the other (each
pair runs on one engine, so only a pair cut short leaves them unequal). None enters the decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from harness.records import ARMS, PassRule, TrialRecord, outcome
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


def engine_counts(records: Iterable[TrialRecord], pass_rule: PassRule) -> dict[str, dict[str, tuple[int, int]]]:
    """Per engine and arm, over the final attempts that ran to an outcome: (trials, passed). Empty when no
    record names an engine (a run on one engine)."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for r in latest_by_trial(records).values():
        if r.engine is None or not r.is_outcome:
            continue
        trials, passed = out.setdefault(r.engine.name, {}).get(r.arm, (0, 0))
        out[r.engine.name][r.arm] = (trials + 1, passed + (outcome(r, pass_rule) == "pass"))
    return out


def engine_notes(records: Iterable[TrialRecord], pass_rule: PassRule) -> list[str]:
    """ "trials per engine: a: baseline 2/3 passed, skill 3/3 passed; b: ..." and a warning per engine whose
    arms ran unequal numbers of trials."""
    counts = engine_counts(records, pass_rule)
    if not counts:
        return []
    parts, unbalanced = [], []
    for name in sorted(counts):
        by_arm = counts[name]
        parts.append(
            f"{name}: "
            + ", ".join(f"{arm} {by_arm.get(arm, (0, 0))[1]}/{by_arm.get(arm, (0, 0))[0]} passed" for arm in ARMS)
        )
        trials = {arm: by_arm.get(arm, (0, 0))[0] for arm in ARMS}
        if len(set(trials.values())) > 1:
            unbalanced.append(f"{name} ran " + " and ".join(f"{n} {arm}" for arm, n in trials.items()))
    notes = ["trials per engine (final attempts with an outcome): " + "; ".join(parts)]
    if unbalanced:
        notes.append(
            "warning: arms unbalanced across engines (" + "; ".join(unbalanced) + "): an engine's speed or kernel "
            "may weigh on one arm more than on the other"
        )
    return notes
