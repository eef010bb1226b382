"""Resuming an experiment directory: whether it may be continued, and what of its plan is left.

A directory is continued only under the lock, shard and model (scripted or real) it was started
with, and only when every line of its ``results.jsonl`` carries that lock; the trial inputs are
checked separately (:mod:`harness.experiment.trialinputs`). What is left to run is every planned
trial whose last attempt is not final (:func:`harness.results.attempts.is_final`): never started, or
an infrastructure failure with retries left. A trial a stop keeps from running gets a ``skipped``
record from :class:`SkippedRecords`. Everything here is pure; the experiment reads and writes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ResumeError
from harness.plan import TrialSpec
from harness.records import StopReason, TrialRecord
from harness.results.attempts import is_final, latest_by_trial
from harness.results.identity import RecordIdentity
from harness.results.meta import ExperimentMeta, Mode


def check_resumable(meta: ExperimentMeta, root: Path, *, lock_hash: str, shard: str | None, mode: Mode) -> None:
    """Refuse to continue a directory another lock, shard or model started (``meta``: its experiment.json)."""
    if meta.lock_hash != lock_hash:
        raise ResumeError(
            f"{root} holds experiment {meta.lock_hash[:12]}, not this preregistration's lock {lock_hash[:12]}",
            hint="a changed preregistration is a new experiment: use another --out directory",
        )
    if meta.shard != shard:
        raise ResumeError(f"{root} was run as shard {meta.shard}, not {shard}")
    if (meta.mode or mode) != mode:
        raise ResumeError(
            f"{root} was run against the {meta.mode} model, not the {mode} one",
            hint="scripted and real trials never share an experiment: use another --out directory",
        )


def check_records(records: Sequence[TrialRecord], root: Path, lock_hash: str) -> None:
    """Refuse a results log holding lines of another lock."""
    foreign = [r for r in records if r.provenance.lock_hash != lock_hash]
    if foreign:
        raise ResumeError(f"{root}/results.jsonl holds {len(foreign)} line(s) of another lock")


@dataclass(frozen=True)
class Remaining:
    """What a plan still needs, given the records a directory already holds."""

    latest: Mapping[str, TrialRecord]
    """The last attempt of every trial with a record."""
    todo: tuple[TrialSpec, ...]
    """Planned trials without a final record, in plan order."""
    finals: tuple[TrialRecord, ...]
    """Every final last attempt (what the loop starts from)."""

    @property
    def retries(self) -> int:
        """Trials of ``todo`` that retry an infrastructure failure (the rest never started)."""
        return sum(1 for s in self.todo if s.trial_id in self.latest)

    def note(self, planned: int) -> str | None:
        """The line that says a run resumes (None when nothing was recorded or nothing is left)."""
        if not self.latest or not self.todo:
            return None
        n = self.retries
        retried = f" ({n} retr{'y' if n == 1 else 'ies'} of infrastructure failures)" if n else ""
        return (
            f"resuming: {planned - len(self.todo)} of {planned} trial(s) have a final record; "
            f"{len(self.todo)} to run{retried}"
        )


def plan_remaining(specs: Sequence[TrialSpec], records: Sequence[TrialRecord], max_infra_retries: int) -> Remaining:
    latest = latest_by_trial(records)
    todo = tuple(s for s in specs if s.trial_id not in latest or not is_final(latest[s.trial_id], max_infra_retries))
    finals = tuple(r for r in latest.values() if is_final(r, max_infra_retries))
    return Remaining(latest=latest, todo=todo, finals=finals)


@dataclass(frozen=True)
class SkippedRecords:
    """Makes the ``skipped`` record of a planned trial that a stop kept from running (the loop's
    :data:`~harness.experiment.loop.SkippedFactory`)."""

    identity: RecordIdentity

    def __call__(self, spec: TrialSpec, attempt: int, kind: StopReason, why: str) -> TrialRecord:
        now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        return TrialRecord(
            **self.identity.of(spec, attempt),
            status="skipped",
            error=why,
            started_at=now,
            finished_at=now,
            stopped_by=kind,
        )
