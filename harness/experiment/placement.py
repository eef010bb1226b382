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

**An engine lost mid-run costs only its running trials.** A trial that ends as an infrastructure error
has its engine probed (``probe``: does it answer within seconds?); one that does not is marked down: no
trial is placed there again, the pairs placed there are placed anew, and it is probed again with backoff
(2 s doubling to a minute) until it answers, which is said (it does not rejoin the run: its run resources
went with it). Its trials' records stay as they ended (infrastructure errors) and each runs again at once on
another engine, outside ``max_infra_retries`` (the loss was the engine's, not the trial's). A pair left
half-finished there (one arm's final record from the lost engine, the other not) reruns whole on one engine:
the finished arm gets a superseding line (``infra_error``, flag ``superseded: ...``, no cost) and is handed
back to the loop (``resubmit``), so its earlier record is an earlier attempt and no trial has two final
records. A record that comes back from a lost engine after the loss (it finished as the engine went) is set
aside the same way when its pair moved. When every engine is down, the run stops with an InfraError.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from harness.errors import HarnessError, InfraError, Interrupted
from harness.plan import TrialSpec
from harness.records import EngineRef, TrialRecord
from harness.results.identity import Identity
from harness.sandbox.engineslots import EngineSlots


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
        self._down: set[str] = set()
        self._cond = threading.Condition()

    @property
    def total(self) -> int:
        return sum(self.capacities.values())

    def engine_of(self, spec: TrialSpec) -> str | None:
        with self._cond:
            return self._pairs.get(pair_key(spec))

    def is_down(self, name: str) -> bool:
        with self._cond:
            return name in self._down

    def mark_down(self, name: str) -> list[PairKey]:
        """No trial is placed on ``name`` again; the pairs placed there are placed anew (returned)."""
        with self._cond:
            self._down.add(name)
            moved = [key for key, placed in self._pairs.items() if placed == name]
            for key in moved:
                del self._pairs[key]
            self._cond.notify_all()
            return moved

    def acquire(self, spec: TrialSpec) -> str:
        """A slot for ``spec`` on its pair's engine (chosen now when the pair has none): the engine's name.
        Waits while that engine is full; raises Interrupted when the run stops meanwhile."""
        key = pair_key(spec)
        with self._cond:
            while True:
                if self.stop.is_set():
                    raise Interrupted("interrupted while waiting for an engine")
                if len(self._down) == len(self.capacities):
                    raise InfraError("every engine of the pool is down: " + ", ".join(sorted(self._down)))
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
        free = [n for n, cap in self.capacities.items() if self._running[n] < cap and n not in self._down]
        if not free:
            return None
        return min(free, key=lambda n: self._running[n] / self.capacities[n])  # ties: the pool's order


TrialRunner = Callable[[TrialSpec, int], TrialRecord]
PROBE_BACKOFF_S = (2.0, 60.0)
"""A lost engine is probed again after 2 s, then twice as long each time, at most a minute apart."""


class PoolRunner:
    """``run_one(spec, attempt)`` over a pool: the trial runs on its pair's engine (``runners[name]``) in one
    of that engine's slots, and its record names the engine (``refs[name]``); an engine lost meanwhile is
    handled as the module docstring says.

    ``probe(name)``: whether the engine answers (within seconds); ``on_down(name)``: told the moment an engine
    is marked down (the run makes every later call to it fail at once: :class:`harness.sandbox.pool.Fuse`);
    ``slots``: each engine's own slots (:mod:`harness.sandbox.engineslots`), held around each trial there for at
    most ``ttl_s(spec)``;
    ``append``: a result line, the moment it is
    decided (the loop's own); ``resubmit(spec, prior)``: hands a trial back to the loop to run again after
    ``prior`` (:meth:`harness.experiment.loop.TrialLoop.resubmit`); ``say``: a line for the person watching."""

    def __init__(
        self,
        placement: Placement,
        runners: Mapping[str, TrialRunner],
        refs: Mapping[str, EngineRef],
        *,
        probe: Callable[[str], bool] = lambda _name: True,
        on_down: Callable[[str], None] = lambda _name: None,
        slots: Mapping[str, EngineSlots] | None = None,
        ttl_s: Callable[[TrialSpec], float] = lambda _spec: 3600.0,
        say: Callable[[str], None] = lambda _text: None,
        backoff_s: tuple[float, float] = PROBE_BACKOFF_S,
    ) -> None:
        self.placement = placement
        self.runners = dict(runners)
        self.refs = dict(refs)
        self.probe = probe
        self.on_down = on_down
        self.slots = dict(slots or {})
        self.ttl_s = ttl_s
        self.say = say
        self.backoff_s = backoff_s
        self.append: Callable[[TrialRecord], None] = lambda _record: None
        self.resubmit: Callable[[TrialSpec, TrialRecord], None] = lambda _spec, _prior: None
        self._lock = threading.Lock()
        self._done: dict[PairKey, dict[str, tuple[TrialSpec, TrialRecord]]] = {}
        """The final records this run returned, by pair and trial id."""
        self._moved: set[PairKey] = set()
        """Pairs that were on a lost engine unfinished: what comes back from there for them is set aside."""
        self._closed = threading.Event()
        self.probers: list[threading.Thread] = []

    def attach(self, append: Callable[[TrialRecord], None], resubmit: Callable[[TrialSpec, TrialRecord], None]) -> None:
        """The loop's ``append`` and ``resubmit`` (it is made after this runner, which it drives)."""
        self.append, self.resubmit = append, resubmit

    def __call__(self, spec: TrialSpec, attempt: int) -> TrialRecord:
        for _ in range(len(self.runners) + 1):  # each pass loses an engine, or returns
            name = self.placement.acquire(spec)
            try:
                record = self._run_there(name, spec, attempt)
            finally:
                self.placement.release(name)
            if record is None:
                continue  # no slot on that engine: it was lost before the trial started
            if not self._set_aside(spec, name):
                if record.status != "infra_error":
                    with self._lock:
                        self._done.setdefault(pair_key(spec), {})[spec.trial_id] = (spec, record)
                return record
            self.append(record)  # what happened on the lost engine stays in the results
            if record.status != "infra_error":
                self.append(superseding(record, self.refs[name].name))
                attempt += 1
            attempt += 1
        raise InfraError(f"{spec.trial_id}: lost its engine {len(self.runners) + 1} times")

    def _run_there(self, name: str, spec: TrialSpec, attempt: int) -> TrialRecord | None:
        """The trial on engine ``name``, in one of that engine's own slots (``slots``: they hold across
        controllers); None when no slot could be taken because the engine went. The engine is probed after an
        infrastructure error before either slot is given back: no trial is placed on an engine that may be
        gone, and its slot's removal fails at once instead of waiting on it."""
        shared = self.slots.get(name)
        index: int | None = None
        if shared is not None:
            try:
                index = shared.acquire(self.ttl_s(spec))
            except Interrupted:
                raise
            except HarnessError as e:
                if self.placement.is_down(name) or not self.probe(name):
                    self._lost(name, e.message)  # once: a second call finds it down
                    return None
                raise
        try:
            record = self.runners[name](spec, attempt).model_copy(update={"engine": self.refs[name]})
            if record.status == "infra_error" and not self.placement.is_down(name) and not self.probe(name):
                self._lost(name, record.error or "no answer")
            return record
        finally:
            if shared is not None and index is not None:
                shared.release(index)

    def _set_aside(self, spec: TrialSpec, name: str) -> bool:
        """The trial ran on an engine since lost, and its pair moved (reruns whole elsewhere)."""
        with self._lock:
            return self.placement.is_down(name) and pair_key(spec) in self._moved

    def _lost(self, name: str, why: str) -> None:
        with self._lock:
            if self.placement.is_down(name):
                return
            moved = self.placement.mark_down(name)
            self.on_down(name)
            half: list[tuple[TrialSpec, TrialRecord]] = []
            for key in moved:
                done = self._done.get(key, {})
                if len(done) >= 2:
                    continue  # both arms finished there before it went: the pair stands
                self._moved.add(key)
                half += list(done.values())
                self._done.pop(key, None)
        self.say(
            f"engine {name} is down ({why}): its running trials are retried on the other engines; "
            f"{len(half)} half-finished pair(s) rerun whole"
        )
        for spec, record in half:
            marker = superseding(record, name)
            self.append(marker)
            self.resubmit(spec, marker)
        prober = threading.Thread(target=self._probe_again, args=(name,), daemon=True, name=f"probe-{name}")
        self.probers.append(prober)
        prober.start()

    def _probe_again(self, name: str) -> None:
        for wait in probe_waits(*self.backoff_s):
            if self._closed.wait(wait):
                return
            if self.probe(name):
                self.say(f"engine {name} answers again (it does not rejoin this run: its run resources went with it)")
                return

    def close(self) -> None:
        """Stop probing lost engines."""
        self._closed.set()
        for prober in self.probers:
            prober.join(5)


def probe_waits(first: float, most: float) -> Iterator[float]:
    """Seconds before each probe of a lost engine: ``first``, doubling, at most ``most`` (without end)."""
    wait = first
    while True:
        yield wait
        wait = min(wait * 2, most)


def superseding(record: TrialRecord, engine: str) -> TrialRecord:
    """The line that sets ``record`` aside: the next attempt, an infrastructure error with no cost, flagged
    ``superseded``: its pair reruns whole on one engine after ``engine`` was lost."""
    now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    why = f"superseded: the other arm of its pair was lost with engine {engine}; the pair reruns whole on one engine"
    whose = {key: getattr(record, key) for key in Identity.__annotations__}  # the identity a record carries
    return TrialRecord(
        **{**whose, "attempt": record.attempt + 1},
        schema_version=record.schema_version,
        status="infra_error",
        error=why,
        flags=(why,),
        started_at=now,
        finished_at=now,
        engine=record.engine,
    )
