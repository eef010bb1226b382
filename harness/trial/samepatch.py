"""Identical patches within one experiment: verify once, and (if preregistered) judge once.

Verify runs the task's command on base + patch with protected paths restored, in a fresh
``--network none`` container. When two trials of one task produce byte-identical patches, that
input is identical, so the first trial's verify result stands for the second: the key is the task,
its verify command, protected paths and timeout, the base commit, the verify image and the patch's
SHA-256. Only clean results are shared (an exit code, no timeout, no OOM kill); a result that may
say more about the machine than about the patch is never reused. The judge is a model and so
stochastic: its verdict is shared only when the preregistration asks (``judge.reuse_identical``),
only for pass or fail, and with the verify exit code in the key.

Trials run in threads: the first trial with a key computes, later ones with the same key wait for
it (one flight per key) instead of racing to compute the same thing. Every shared result names
the trial it came from (``reused_from``), and the reports count them
(:func:`harness.analysis.runnotes.reuse_counts`).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from harness.records import JudgeResult, Provenance, TrialRecord, VerifyResult
from harness.study.config import Task

T = TypeVar("T")


class Shared(NamedTuple, Generic[T]):
    value: T
    source: str | None
    """The trial the value came from; None when this call computed it."""


@dataclass
class _Flight(Generic[T]):
    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    source: str | None = None


class OnceByKey(Generic[T]):
    """Compute a value once per key; ``keep`` decides whether a computed value may be shared."""

    def __init__(self, keep: Callable[[T], bool]) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._flights: dict[Hashable, _Flight[T]] = {}

    def seed(self, key: Hashable, value: T, source: str) -> None:
        """A result already on record (a resumed experiment's earlier trials)."""
        if not self._keep(value):
            return
        with self._lock:
            if key not in self._flights:
                flight: _Flight[T] = _Flight(value=value, source=source)
                flight.done.set()
                self._flights[key] = flight

    def get(self, key: Hashable, trial_id: str, compute: Callable[[], T]) -> Shared[T]:
        """The value for ``key`` and the trial it came from (``None`` when this call computed it)."""
        while True:
            with self._lock:
                flight = self._flights.get(key)
                if flight is None:
                    flight = _Flight()
                    self._flights[key] = flight
                    mine = True
                else:
                    mine = False
            if mine:
                break
            flight.done.wait()
            if flight.value is not None and flight.source is not None:
                return Shared(flight.value, flight.source)
            # the computing trial failed or produced nothing shareable: it left; try to be the one
        try:
            value = compute()
        except BaseException:
            with self._lock:
                del self._flights[key]
            flight.done.set()
            raise
        with self._lock:
            if self._keep(value):
                flight.value, flight.source = value, trial_id
            else:
                del self._flights[key]
        flight.done.set()
        return Shared(value, None)


def verify_key(task: Task, base_sha: str, verify_image: str, patch_sha256: str, timeout_s: int) -> Hashable:
    return ("verify", task.id, task.verify_cmd, task.protected_paths, timeout_s, base_sha, verify_image, patch_sha256)


def judge_key(task: Task, verify_exit_code: int | None, judge_model: str, prompt: str) -> Hashable:
    """The judge's whole input: its prompt (task, criteria, exit code, diff, flags) and its model."""
    return (
        "judge",
        task.id,
        verify_exit_code,
        judge_model,
        hashlib.sha256(prompt.encode("utf-8", "replace")).hexdigest(),
    )


def verify_shareable(result: VerifyResult) -> bool:
    return (
        result.exit_code is not None
        and not result.timed_out
        and not result.oom_killed
        and result.skipped_reason is None
        and result.reused_from is None
    )


def judge_shareable(result: JudgeResult) -> bool:
    return result.verdict in ("pass", "fail") and result.error is None and result.reused_from is None


@dataclass
class SamePatch:
    """The experiment's caches (one per run; seeded from the directory's records on resume)."""

    judge_reuse: bool = False
    verify: OnceByKey[VerifyResult] = field(default_factory=lambda: OnceByKey(verify_shareable))
    judge: OnceByKey[JudgeResult] = field(default_factory=lambda: OnceByKey(judge_shareable))

    @classmethod
    def seeded(
        cls,
        records: Iterable[TrialRecord],
        tasks: Iterable[Task],
        provenance: Provenance,
        *,
        verify_image: str,
        verify_timeout_s: int,
        judge_reuse: bool = False,
    ) -> SamePatch:
        """A run's caches, seeded with the verify results its directory already holds: those of this run's
        tasks, recorded on its provenance (as the run knew it before any trial: :meth:`Provenance.of_run`)."""
        same = cls(judge_reuse=judge_reuse)
        by_id = {t.id: t for t in tasks}
        for rec in records:
            task = by_id.get(rec.task_id)
            if task is None or rec.patch is None or rec.verify is None or rec.provenance.of_run() != provenance:
                continue
            key = verify_key(task, provenance.base_sha, verify_image, rec.patch.sha256, verify_timeout_s)
            same.verify.seed(key, rec.verify, rec.trial_id)
        return same
