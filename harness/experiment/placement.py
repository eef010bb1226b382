"""Which engine of a pool each trial runs on (issue 29): pure placement, no Docker.

Both arms of a (task, run) pair run on the same engine, as shards keep them in one job: the pair's
difference then never mixes two machines' speed or kernel. The first arm of a pair to start chooses the
engine (the least loaded by its share of its capacity, free slot required); the other waits for a slot
there. Each engine holds at most its capacity of trials at once (:func:`harness.sandbox.pool.capacities`:
the one capacity model per engine, or set by hand), in this process: across controllers sharing an engine
nothing holds yet (issue 29 item 1's slots, not built).

:class:`Placement` is the bookkeeping, :class:`PoolRunner` wraps one trial runner per engine into the
``run_one(spec, attempt)`` the trial loop (:mod:`harness.experiment.loop`) drives, and names the engine in
each record (:class:`harness.records.EngineRef`). Unit tested with fakes (tests/unit/test_placement.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import NamedTuple

from harness.errors import Interrupted
from harness.plan import TrialSpec
from harness.records import EngineRef, TrialRecord


class PairKey(NamedTuple):
    task_id: str
    run_index: int


def pair_key(spec: TrialSpec) -> PairKey:
    return PairKey(spec.task.id, spec.run_index)


class Placement:
    """Engines by name with their capacities (in the pool's order); a trial takes a slot of its pair's engine."""

    def __init__(self, capacities: Mapping[str, int], stop: threading.Event | None = None) -> None:
        if not capacities or min(capacities.values()) < 1:
            raise ValueError("every engine of a placement holds at least one trial")
        self.capacities = dict(capacities)
        self.stop = stop or threading.Event()
        self._running = dict.fromkeys(capacities, 0)
        self._pairs: dict[PairKey, str] = {}
        self._cond = threading.Condition()

    @property
    def total(self) -> int:
        return sum(self.capacities.values())

    def engine_of(self, spec: TrialSpec) -> str | None:
        with self._cond:
            return self._pairs.get(pair_key(spec))

    def acquire(self, spec: TrialSpec) -> str:
        """A slot for ``spec`` on its pair's engine (chosen now when the pair has none): the engine's name.
        Waits while that engine is full; raises Interrupted when the run stops meanwhile."""
        key = pair_key(spec)
        with self._cond:
            while True:
                if self.stop.is_set():
                    raise Interrupted("interrupted while waiting for an engine")
                name = self._choose(key)
                if name is not None:
                    self._pairs[key] = name
                    self._running[name] += 1
                    return name
                self._cond.wait(0.5)

    def release(self, name: str) -> None:
        with self._cond:
            self._running[name] -= 1
            self._cond.notify_all()

    def _choose(self, key: PairKey) -> str | None:
        placed = self._pairs.get(key)
        if placed is not None:
            return placed if self._running[placed] < self.capacities[placed] else None
        free = [n for n, cap in self.capacities.items() if self._running[n] < cap]
        if not free:
            return None
        return min(free, key=lambda n: self._running[n] / self.capacities[n])  # ties: the pool's order


TrialRunner = Callable[[TrialSpec, int], TrialRecord]


class PoolRunner:
    """``run_one(spec, attempt)`` over a pool: the trial runs on its pair's engine (``runners[name]``) in one
    of that engine's slots, and its record names the engine (``refs[name]``)."""

    def __init__(self, placement: Placement, runners: Mapping[str, TrialRunner], refs: Mapping[str, EngineRef]) -> None:
        self.placement = placement
        self.runners = dict(runners)
        self.refs = dict(refs)

    def __call__(self, spec: TrialSpec, attempt: int) -> TrialRecord:
        name = self.placement.acquire(spec)
        try:
            record = self.runners[name](spec, attempt)
        finally:
            self.placement.release(name)
        return record.model_copy(update={"engine": self.refs[name]})
