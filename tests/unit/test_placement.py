"""Placing trials on a pool of engines without Docker (issue 29): both arms of a pair on one engine, at most
each engine's capacity at once, the least loaded engine for a new pair, every record naming its engine; the
pool's per-engine notes in the report; the engines a run used, recorded for ``skilltrial gc``."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.analysis.runnotes import engine_notes
from harness.errors import ConfigError, Interrupted
from harness.experiment.placement import Placement, PoolRunner, pair_key
from harness.plan import TrialSpec, plan_trials
from harness.records import EngineRef, TrialRecord
from harness.sandbox.engine import EngineAddress
from harness.sandbox.pool import EnginePool, PoolEngine, capacities, remember_engines, remembered_engines
from tests.factories import TASKS, make_record
from tests.fakes import FakeRuntime
from tests.unit.test_experiment_loop import make_loop


def _ref(name: str) -> EngineRef:
    return EngineRef(name=name, engine_id=f"id-{name}", server_version="20.10", kernel="5.15", runtime="runc")


class Busy:
    """A fake trial runner per engine: takes a while, counts trials at once on its engine."""

    def __init__(self, name: str, seconds: float = 0.02) -> None:
        self.name, self.seconds = name, seconds
        self.active = self.peak = 0
        self.ran: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, spec: TrialSpec, attempt: int) -> TrialRecord:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.ran.append(spec.trial_id)
        time.sleep(self.seconds)
        with self.lock:
            self.active -= 1
        return make_record(spec, attempt)


def test_both_arms_of_each_pair_run_on_one_engine_within_each_engines_capacity() -> None:
    specs = plan_trials(TASKS, 3, seed=2)
    caps = {"a": 2, "b": 1, "c": 3}
    runners = {name: Busy(name) for name in caps}
    placement = Placement(caps)
    loop, log = make_loop(PoolRunner(placement, runners, {n: _ref(n) for n in caps}), jobs=placement.total)
    out = loop.run(specs)
    assert out.ran == len(specs) and Counter(r.trial_id for r in log.lines) == Counter(s.trial_id for s in specs)
    by_pair: dict[object, set[str]] = {}
    for r in log.lines:
        assert r.engine is not None
        by_pair.setdefault((r.task_id, r.run_index), set()).add(r.engine.name)
        assert r.trial_id in runners[r.engine.name].ran, "the record names the engine that ran it"
    assert all(len(names) == 1 for names in by_pair.values()), by_pair
    for name, runner in runners.items():
        assert 1 <= runner.peak <= caps[name], (name, runner.peak)
    assert len({r.engine.name for r in log.lines if r.engine}) == 3, "every engine was used"


def test_a_new_pair_goes_to_the_least_loaded_engine_and_its_second_arm_waits_for_that_engine() -> None:
    specs = plan_trials(TASKS[:2], 1, seed=1)
    pair = [s for s in specs if pair_key(s) == pair_key(specs[0])]
    other = next(s for s in specs if pair_key(s) != pair_key(specs[0]))
    placement = Placement({"a": 1, "b": 2})
    assert placement.acquire(pair[0]) == "a"  # both empty: the pool's order
    assert placement.acquire(other) == "b"  # a is full
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(placement.acquire(pair[1])))
    waiter.start()
    time.sleep(0.2)
    assert got == [], "b has a free slot, but the pair is on a"
    placement.release("a")
    waiter.join(5)
    assert got == ["a"]


def test_waiting_for_an_engine_ends_when_the_run_stops() -> None:
    specs = plan_trials(TASKS[:1], 1, seed=1)
    stop = threading.Event()
    placement = Placement({"a": 1}, stop)
    placement.acquire(specs[0])
    stop.set()
    with pytest.raises(Interrupted):
        placement.acquire(specs[1])


def test_the_report_notes_trials_per_engine_and_warns_when_arms_are_unbalanced() -> None:
    specs = plan_trials(TASKS[:2], 1, seed=1)
    records = [make_record(s, 1, passed=s.arm == "skill").model_copy(update={"engine": _ref("a")}) for s in specs]
    notes = engine_notes(records, "verify_and_judge")
    assert notes == ["trials per engine (final attempts with an outcome): a: baseline 0/2 passed, skill 2/2 passed"]
    moved = [r.model_copy(update={"engine": _ref("b")}) if r.arm == "skill" and r.task_id == TASKS[0].id else r
             for r in records]  # fmt: skip
    warned = engine_notes(moved, "verify_and_judge")
    assert warned[1].startswith("warning: arms unbalanced across engines (a ran 2 baseline and 1 skill; b ran")
    assert engine_notes([make_record(specs[0], 1)], "verify_and_judge") == [], "one engine: nothing to say"


def test_capacities_come_from_each_engines_cpus_and_memory_or_by_hand() -> None:
    small, big = FakeRuntime(), FakeRuntime()
    small.engine_info = dataclasses.replace(small.engine_info, cpus=2, memory_bytes=8 << 30)
    big.engine_info = dataclasses.replace(big.engine_info, cpus=16, memory_bytes=64 << 30)
    pool = EnginePool([PoolEngine(EngineAddress("tcp://a:1", name="a"), small),
                       PoolEngine(EngineAddress("tcp://b:1", name="b"), big)])  # fmt: skip
    found = capacities(pool, trial_limits_bytes=2 << 30)
    assert found["a"].trials < found["b"].trials and "memory" in found["a"].why
    assert {n: c.trials for n, c in capacities(pool, trial_limits_bytes=2 << 30, by_hand=3).items()} == {"a": 3, "b": 3}


def test_one_engine_reached_by_two_urls_is_refused() -> None:
    one = FakeRuntime()
    one.engine_info = dataclasses.replace(one.engine_info, engine_id="ABCD")
    pool = EnginePool([PoolEngine(EngineAddress("tcp://a:1", name="a"), one),
                       PoolEngine(EngineAddress("unix:///x.sock", name="b"), one)])  # fmt: skip
    with pytest.raises(ConfigError, match="a and b are one engine"):
        pool.check_distinct()


def test_the_engines_a_run_used_are_recorded_for_gc(tmp_path: Path) -> None:
    record = tmp_path / "engines"
    a = EngineAddress("tcp://10.0.0.1:2376", name="a", cert_path=tmp_path / "certs")
    b = EngineAddress("ssh://ci@build-2", ssh_config=tmp_path / "ssh_config")
    remember_engines([a, b], record)
    remember_engines([a], record)
    with record.open("a") as f:
        f.write("not json\n")
    assert remembered_engines(record) == [a, b]
    assert remembered_engines(tmp_path / "missing") == []
