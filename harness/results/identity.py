"""A result line's identity: which experiment it belongs to, which planned trial and attempt it is, and what
it ran on. Built here for every record a run writes: a trial's (:func:`harness.trial.trial.run_trial`), a
stopped trial's ``skipped`` one (:class:`harness.experiment.resume.SkippedRecords`), and a baseline trial
copied from another experiment (:meth:`RecordIdentity.adopt`, :mod:`harness.experiment.reuse`).

The baseline-fingerprint rule is here too (:meth:`RecordIdentity.fingerprint`): a baseline record carries
its task's fingerprint from birth, so a later experiment can reuse it; no other arm's record carries one.
A trial whose agent gets another arm's treatment (an A/A calibration's skill trials run as the baseline:
:attr:`harness.plan.TrialSpec.treatment`) is still recorded under its own arm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from harness.plan import TrialSpec
from harness.records import Arm, Provenance, ReusedFrom, TrialRecord


class Identity(TypedDict):
    """The fields of a :class:`~harness.records.TrialRecord` that say whose it is (``TrialRecord(**identity, ...)``)."""

    experiment_id: str
    trial_id: str
    task_id: str
    split: str | None
    arm: Arm
    run_index: int
    attempt: int
    provenance: Provenance
    shard: str | None
    baseline_fingerprint: str | None


@dataclass(frozen=True)
class RecordIdentity:
    """What every record of one run says it belongs to and ran on."""

    experiment_id: str
    """The lock hash's first 12 characters."""
    provenance: Provenance
    """The run's provenance, as known before any trial (a trial adds what it observes: the skill listing)."""
    shard: str | None = None
    baseline_fingerprints: Mapping[str, str] = field(default_factory=dict)
    """Task id -> the baseline fingerprint of this run's settings (:mod:`harness.experiment.reuse`)."""

    @classmethod
    def of_run(
        cls, provenance: Provenance, *, shard: str | None = None, baseline_fingerprints: Mapping[str, str] | None = None
    ) -> RecordIdentity:
        return cls(provenance.lock_hash[:12], provenance, shard, dict(baseline_fingerprints or {}))

    def fingerprint(self, spec: TrialSpec) -> str | None:
        """The baseline fingerprint a record of ``spec`` carries: its task's for a baseline trial, else none."""
        return self.baseline_fingerprints.get(spec.task.id) if spec.arm == "baseline" else None

    def of(self, spec: TrialSpec, attempt: int, *, observed: Mapping[str, str | None] | None = None) -> Identity:
        """The identity of attempt ``attempt`` of the planned trial ``spec``. ``observed``: provenance fields the
        trial itself observed (the installed delivery's skill listing and its check)."""
        provenance = self.provenance.model_copy(update=dict(observed)) if observed else self.provenance
        return Identity(
            experiment_id=self.experiment_id,
            trial_id=spec.trial_id,
            task_id=spec.task.id,
            split=spec.task.split,
            arm=spec.arm,
            run_index=spec.run_index,
            attempt=attempt,
            provenance=provenance,
            shard=self.shard,
            baseline_fingerprint=self.fingerprint(spec),
        )

    def adopt(self, record: TrialRecord, directory: str) -> TrialRecord:
        """A record of another experiment (in ``directory``), admitted into this one: under this run's experiment
        and lock, naming where it first ran; the trial, its attempt, fingerprint and observations are its own."""
        origin = record.reused_from or ReusedFrom(
            experiment_id=record.experiment_id, lock_hash=record.provenance.lock_hash, directory=directory
        )
        return record.model_copy(
            update={
                "experiment_id": self.experiment_id,
                "provenance": record.provenance.model_copy(update={"lock_hash": self.provenance.lock_hash}),
                "reused_from": origin,
            }
        )
