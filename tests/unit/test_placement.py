"""Placing trials on a pool of engines without Docker (issue 29): both arms of a pair on one engine, at most
each engine's capacity at once, the least loaded engine for a new pair, every record naming its engine; the
pool's per-engine notes in the report; the engines a run used, recorded for ``skilltrial gc``."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.analysis.runnotes import engine_notes
from harness.errors import ConfigError, InfraError, Interrupted
from harness.experiment.placement import Placement, PoolRunner, pair_key, probe_waits, superseding
from harness.plan import TrialSpec, plan_trials
from harness.records import EngineRef, TrialRecord
from harness.sandbox.engine import EngineAddress
from harness.sandbox.engineslots import HOLDER, EngineSlots, slot_name
from harness.sandbox.labels import make_labels
from harness.sandbox.pool import EnginePool, Fuse, PoolEngine, capacities, remember_engines, remembered_engines
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


class Dies:
    """Engine ``a`` finishes the first trial it runs, then goes down under the second (an infra error)."""

    def __init__(self) -> None:
        self.dead = False
        self.ran: list[str] = []

    def __call__(self, spec: TrialSpec, attempt: int) -> TrialRecord:
        self.ran.append(spec.trial_id)
        if len(self.ran) == 1:
            return make_record(spec, attempt)
        self.dead = True
        return make_record(spec, attempt, status="infra_error")


def _lossy_run(dies: Dies, *, retries: int = 0) -> tuple[list[TrialRecord], list[str], PoolRunner]:
    specs = plan_trials(TASKS[:1], 1, seed=1)
    said: list[str] = []
    runner = PoolRunner(
        Placement({"a": 1, "b": 1}),
        {"a": dies, "b": Busy("b")},
        {n: _ref(n) for n in "ab"},
        probe=lambda name: not (name == "a" and dies.dead),
        say=said.append,
        backoff_s=(0.01, 0.05),
    )
    loop, log = make_loop(runner, jobs=2, retries=retries)
    runner.attach(loop.append, loop.resubmit)
    try:
        loop.run(specs)
    finally:
        runner.close()
    return log.lines, said, runner


def test_an_engine_lost_mid_run_reruns_its_trial_and_the_half_finished_pair_whole_on_another() -> None:
    dies = Dies()
    lines, said, _ = _lossy_run(dies)
    first, second = dies.ran
    by_trial: dict[str, list[TrialRecord]] = {}
    for r in lines:
        by_trial.setdefault(r.trial_id, []).append(r)
    assert [(r.attempt, r.status, r.engine and r.engine.name) for r in by_trial[second]] == [
        (1, "infra_error", "a"),
        (2, "completed", "b"),
    ], "retried at once on the other engine, outside max_infra_retries (0 here)"
    assert [(r.attempt, r.status, r.engine and r.engine.name) for r in by_trial[first]] == [
        (1, "completed", "a"),
        (2, "infra_error", "a"),
        (3, "completed", "b"),
    ], "the arm that finished on the lost engine is superseded and reruns beside its pair"
    assert by_trial[first][1].flags[0].startswith("superseded: the other arm of its pair was lost with engine a")
    assert by_trial[first][1].total_cost_usd == 0
    finals = {r.trial_id: r for r in lines}  # the last line of each trial is its highest attempt
    assert all(r.status == "completed" and r.engine and r.engine.name == "b" for r in finals.values())
    assert any("engine a is down" in s and "1 half-finished pair(s) rerun whole" in s for s in said), said


def test_a_lost_engine_is_probed_again_with_backoff_until_it_answers() -> None:
    dies = Dies()
    probes: list[float] = []
    said: list[str] = []

    def probe(name: str) -> bool:
        probes.append(time.monotonic())
        return len(probes) > 4

    runner = PoolRunner(
        Placement({"a": 1}), {"a": dies}, {"a": _ref("a")}, say=said.append, backoff_s=(0.01, 0.02), probe=probe
    )
    runner._lost("a", "connection refused")
    runner.probers[0].join(5)
    runner.close()
    assert len(probes) == 5
    assert list(itertools.islice(probe_waits(2, 60), 7)) == [2, 4, 8, 16, 32, 60, 60]
    assert said[-1].startswith("engine a answers again (it does not rejoin this run")


def test_when_every_engine_is_down_the_run_stops_with_an_infra_error() -> None:
    specs = plan_trials(TASKS[:1], 1, seed=1)
    placement = Placement({"a": 1})
    placement.mark_down("a")
    with pytest.raises(InfraError, match="every engine of the pool is down: a"):
        placement.acquire(specs[0])


def test_a_blown_fuse_makes_every_later_call_to_a_lost_engine_fail_at_once() -> None:
    inner = FakeRuntime()
    fuse = Fuse(inner, "a")
    fuse.runtime.create_network("hx-n", {}, internal=True)
    assert "hx-n" in inner.networks
    fuse.blow()
    with pytest.raises(InfraError, match="engine a is down"):
        fuse.runtime.labelled()
    assert [c.method for c in inner.calls] == ["create_network"], "the lost engine is not called again"


def test_engine_slots_hold_across_controllers_and_a_dead_holders_slot_is_taken_back() -> None:
    engine = FakeRuntime()
    first, second = (EngineSlots(engine, 1, run_id=r) for r in ("run1", "run2"))
    index = first.acquire(600)
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(second.acquire(600)))
    waiter.start()
    time.sleep(1.2)
    assert got == [], "the one slot is held by the other controller"
    first.release(index)
    waiter.join(5)
    assert got == [0]
    second.release(0)
    dead = {**make_labels("run3", role="engine-slot", ttl_s=600, pid=999_999_999, purpose="slot"), HOLDER: "x"}
    engine.create_volume(slot_name(0), dead)  # a killed controller's slot on this host
    assert second.acquire(600) == 0
    assert [o.labels[HOLDER] != "x" for o in engine.labelled()] == [True]


def test_a_trial_that_cannot_take_a_slot_on_a_lost_engine_runs_on_another() -> None:
    class Gone(EngineSlots):
        def acquire(self, ttl_s: float) -> int:
            raise InfraError("listing harness objects failed: connection refused")

    specs = plan_trials(TASKS[:1], 1, seed=1)
    held = EngineSlots(FakeRuntime(), 1, run_id="run1")
    runner = PoolRunner(
        Placement({"a": 1, "b": 1}), {"a": Busy("a"), "b": Busy("b")}, {n: _ref(n) for n in "ab"},
        probe=lambda name: name != "a", slots={"a": Gone(FakeRuntime(), 1, run_id="run1"), "b": held},
    )  # fmt: skip
    loop, log = make_loop(runner, jobs=2)
    runner.attach(loop.append, loop.resubmit)
    loop.run(specs)
    runner.close()
    assert [(r.status, r.engine and r.engine.name) for r in log.lines] == [("completed", "b")] * 2
    assert held.runtime.labelled() == [], "b's slot given back after each trial"


def test_a_record_set_aside_before_the_loop_saw_it_finish_is_never_a_final() -> None:
    """The race of a pool run: the other arm's engine goes down and the placement sets this arm's finished
    record aside (a superseding line, the trial handed back) after the record was written but before the loop
    took it from its finished future. The loop must not then make the set-aside record the trial's final one:
    the early stop would count an outcome the results no longer hold."""
    specs = plan_trials(TASKS[:1], 1, seed=1)
    target = specs[0]
    seen: list[list[tuple[str, int, str]]] = []

    def early_stop(finals: list[TrialRecord]) -> str | None:
        seen.append([(r.trial_id, r.attempt, r.status) for r in finals])
        return None

    loop, log = make_loop(lambda spec, attempt: make_record(spec, attempt), jobs=1, early_stop=early_stop)
    append = loop.append

    def append_then_set_aside(record: TrialRecord) -> None:
        append(record)
        if record.trial_id == target.trial_id and record.attempt == 1:  # the placement, on another thread
            marker = superseding(record, "a")
            append(marker)
            loop.resubmit(target, marker)

    loop.append = append_then_set_aside  # type: ignore[method-assign]
    loop.run(specs)
    assert [(r.attempt, r.status) for r in log.lines if r.trial_id == target.trial_id] == [
        (1, "completed"),
        (2, "infra_error"),
        (3, "completed"),
    ]
    assert loop.final[target.trial_id].attempt == 3, "the rerun after the superseding line is the final"
    assert seen and all((target.trial_id, 1, "completed") not in finals for finals in seen), seen
