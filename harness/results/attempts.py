"""What an experiment's result lines say about how its run went (pure, no I/O).

Shared by the experiment loop, the progress display, ``skilltrial merge`` and the
analysis: the final attempt of each trial, whether the run was stopped (by the
cumulative budget or the preregistered early stop), what it spent, and the
per-trial cost cap that bounds what a trial not yet run could cost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from harness.errors import HarnessError
from harness.records import TrialRecord
from harness.study.config import Preregistration


class DuplicateAttemptError(HarnessError):
    """Two records claim the same attempt of one trial: which one counts cannot be settled by file order."""

    exit_code = 4


def check_unique_attempts(records: Iterable[TrialRecord], source: object = "results") -> None:
    """Raise :class:`DuplicateAttemptError` when two records share a trial id and an attempt number.

    The log is append-only and every attempt gets the next number, so a repeated (trial, attempt)
    means a forged, duplicated or wrongly merged line; letting the later line win would let whoever
    appends last choose the outcome."""
    seen: dict[tuple[str, int], TrialRecord] = {}
    for rec in records:
        key = (rec.trial_id, rec.attempt)
        prev = seen.get(key)
        if prev is not None:
            same = "identical records" if prev == rec else f"statuses {prev.status} and {rec.status}"
            raise DuplicateAttemptError(
                f"{source}: trial {rec.trial_id} has two records with attempt {rec.attempt} ({same}); "
                "refusing to pick one by file order",
                hint="remove the forged or duplicated line (or rerun the experiment into a fresh directory)",
            )
        seen[key] = rec


class FinalAttempts(NamedTuple):
    finals: list[TrialRecord]
    """The last attempt of every trial id, in first-seen order."""
    superseded: dict[str, list[TrialRecord]]
    """Trial id -> its earlier attempts (trials attempted once are not keys)."""


def final_attempts(records: Iterable[TrialRecord]) -> FinalAttempts:
    """The last attempt of every trial id, in first-seen order, and the superseded attempts per trial.

    Two records with the same trial id and attempt number are refused
    (:class:`DuplicateAttemptError`), never settled by file order. Trial ids are
    unique within an experiment: merge refuses shards that share one."""
    records = list(records)
    check_unique_attempts(records)
    last: dict[str, TrialRecord] = {}
    earlier: dict[str, list[TrialRecord]] = defaultdict(list)
    for rec in records:
        prev = last.get(rec.trial_id)
        if prev is None or rec.attempt >= prev.attempt:
            if prev is not None:
                earlier[rec.trial_id].append(prev)
            last[rec.trial_id] = rec
        else:
            earlier[rec.trial_id].append(rec)
    return FinalAttempts(list(last.values()), dict(earlier))


def latest_by_trial(records: Iterable[TrialRecord]) -> dict[str, TrialRecord]:
    """The last attempt of each trial id (see :func:`final_attempts`)."""
    return {r.trial_id: r for r in final_attempts(records).finals}


def is_final(record: TrialRecord, max_retries: int) -> bool:
    """A trial is done when its last attempt is not an infra failure, or retries are used up."""
    return record.status != "infra_error" or record.attempt > max_retries


def spent_usd(records: Iterable[TrialRecord]) -> float:
    """What this experiment spent: every attempt, reused baseline trials excluded (spent elsewhere)."""
    return sum(r.total_cost_usd for r in records if r.reused_from is None)


class Stops(NamedTuple):
    budget: bool
    """A trial was skipped because the cumulative budget ran out."""
    early: bool
    """A trial was skipped by the preregistered early stop."""


def stops(records: Sequence[TrialRecord]) -> Stops:
    """Whether the run was stopped by the budget and by the early stop, from the skipped final attempts.

    A skipped record without ``stopped_by`` (written before the field existed)
    counts as a budget stop, as it did then.
    """
    finals = latest_by_trial(records).values()
    budget = any(r.status == "skipped" and r.stopped_by in ("budget", None) for r in finals)
    early = any(r.status == "skipped" and r.stopped_by == "early_stop" for r in finals)
    return Stops(budget, early)


def max_cost_per_trial(prereg: Preregistration) -> float:
    """The per-trial cost cap the gateway enforces (the agent and the judge share it).

    The gateway refuses requests once the metered cost reaches the cap, so one
    response in flight can still overshoot it by that response's cost.
    """
    b = prereg.execution.budgets
    return b.per_trial_usd + b.judge_usd
