"""One experiment on three engines at once (issue 29 items 2 to 4): the docker-in-docker engines of ``dind_pool``
(plain TCP, TLS with a test CA, ssh with a test key) run one scripted experiment together through
``Experiment`` with ``RunOptions.engines``, the real CLI, images and git. Each trial runs once, both arms of
a pair on one engine, every record names its engine, nothing is left on any engine, and the verdict equals a
one-engine run of the same scenario on the machine's engine. Then one engine is killed mid-run: its running
trial becomes an infrastructure error and reruns elsewhere, the pair it left half-finished reruns whole on
one engine (the finished arm's record superseded), and every trial ends with one final record.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from harness.demo import prepare_demo
from harness.experiment.events import NullEvents
from harness.experiment.experiment import Experiment
from harness.experiment.options import RunOptions
from harness.plan import TrialSpec, trial_id
from harness.records import Arm, TrialRecord
from harness.reporting.model import analyze_records
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.pool import remembered_engines
from harness.study.config import load_study
from tests.integration.helpers import demo_task_scripts, host_paths, latest, run_experiment, write_experiment
from tests.remote.dind import DindEngine

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.local_engine("makes its own docker-in-docker engines on the machine's engine"),
]


class Said(NullEvents):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def _nothing_left_on(engines: list[DindEngine], work_root: Path) -> None:
    for e in engines:
        inner = Engine(address=e.address)
        try:
            assert inner.labelled() == [], f"{e.mode}: the run left objects behind"
        finally:
            inner.close()
    assert list(work_root.iterdir()) == []


def _scenario(scripts: dict[str, Any]) -> dict[str, Any]:
    return {
        "seed": 5,
        "skill_marker": "careful-fixer-7c1e",
        "defaults": {"usage": {"input_tokens": 2000, "output_tokens": 100}},
        "judge": {"mode": "follow_verify", "usage": {"input_tokens": 900, "output_tokens": 40}},
        "tasks": {
            "fix-mean": {**scripts["fix-mean"], "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}}},
            "fix-slugify": {
                **scripts["fix-slugify"],
                "arms": {"baseline": {"p_success": 0}, "skill": {"p_success": 1}},
            },
        },
    }


def test_three_engines_run_one_experiment_and_decide_as_one_engine_does(
    tmp_path: Path, dind_pool: list[DindEngine], engine: Engine, images: ImageSet
) -> None:
    setup = prepare_demo(tmp_path / "demo")
    prereg, scenario = write_experiment(
        setup.root, "pool", tasks=["fix-mean", "fix-slugify"], runs=2,
        scenario=_scenario(demo_task_scripts(setup.root)),
    )  # fmt: skip
    study = load_study(prereg)
    work_root = tmp_path / "trials"
    work_root.mkdir(mode=0o700)
    paths = dataclasses.replace(host_paths(work_root), engines=tmp_path / "engines-record")
    options = RunOptions(
        out=tmp_path / "pool-out",
        jobs=0,
        scripted=scenario,
        paths=paths,
        preflight=False,
        engines=tuple(e.address for e in dind_pool),
        engine_slots=2,
    )
    said = Said()
    t0 = time.monotonic()
    pooled = Experiment(study, None, options, said).run()
    messages = said.lines
    pool_s = time.monotonic() - t0
    t0 = time.monotonic()
    single = run_experiment(engine, prereg, scenario, tmp_path / "one-out", work_root, jobs=4)
    one_s = time.monotonic() - t0
    print(f"pool of 3 engines: {pool_s:.1f} s; the machine's engine alone: {one_s:.1f} s")

    final = latest(pooled)
    assert len(final) == 8 and sorted(r.trial_id for r in pooled.records) == sorted(final), "each trial once"
    assert {r.status for r in final.values()} == {"completed"}, [(r.trial_id, r.error) for r in final.values()]
    names = {e.address.name for e in dind_pool}
    engines_of_pair: dict[tuple[str, int], set[str]] = {}
    for r in final.values():
        assert r.engine is not None and r.engine.name in names and r.engine.engine_id and r.engine.kernel
        assert r.workspace == "volume"
        engines_of_pair.setdefault((r.task_id, r.run_index), set()).add(r.engine.name)
    assert all(len(e) == 1 for e in engines_of_pair.values()), engines_of_pair
    assert len(set().union(*engines_of_pair.values())) >= 2, "the trials were spread over the engines"
    for e in dind_pool:
        assert any(f"engine {e.address.name}: 2 trial(s) at once (set by hand)" in m for m in messages), messages

    data = analyze_records(study, pooled.records, lock_hash=pooled.lock_hash, experiment_dir=tmp_path / "pool-out")
    alone = analyze_records(study, single.records, lock_hash=single.lock_hash, experiment_dir=tmp_path / "one-out")
    assert data.decision.verdict == alone.decision.verdict
    assert data.analysis.skill.passes == alone.analysis.skill.passes
    assert data.analysis.baseline.passes == alone.analysis.baseline.passes
    assert any(n.startswith("trials per engine") for n in data.notes), data.notes
    assert not any(n.startswith("warning: arms unbalanced") for n in data.notes), data.notes
    assert not any("trials per engine" in n for n in alone.notes), "a one-engine run has no engine section"

    _nothing_left_on(dind_pool, work_root)
    assert {a.url for a in remembered_engines(paths.engines)} == {e.address.url for e in dind_pool}


def test_two_controllers_sharing_one_engine_hold_its_slots_together(
    tmp_path: Path, dind_pool: list[DindEngine]
) -> None:
    """Two runs at once on the plain-TCP engine, each allowed one trial there at a time: the engine's own
    slots (volumes on it) keep their four trials one after another."""
    shared = next(e for e in dind_pool if e.mode == "tcp")
    setup = prepare_demo(tmp_path / "demo")
    one_task = _scenario(demo_task_scripts(setup.root))
    del one_task["tasks"]["fix-slugify"]
    prereg, scenario = write_experiment(setup.root, "two", tasks=["fix-mean"], scenario=one_task)
    study = load_study(prereg)
    results: dict[str, Any] = {}

    def controller(which: str) -> None:
        work_root = tmp_path / f"trials-{which}"
        work_root.mkdir(mode=0o700)
        options = RunOptions(
            out=tmp_path / f"out-{which}", jobs=0, scripted=scenario, preflight=False, engine_slots=1,
            paths=dataclasses.replace(host_paths(work_root), engines=tmp_path / "engines-record"),
            engines=(shared.address,),
        )  # fmt: skip
        try:
            results[which] = Experiment(study, None, options).run()
        except BaseException as e:
            results[which] = e

    t0 = time.monotonic()
    threads = [threading.Thread(target=controller, args=(w,)) for w in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    print(f"two controllers, one slot on one engine: {time.monotonic() - t0:.1f} s")
    records = []
    for which in ("a", "b"):
        result = results[which]
        assert not isinstance(result, BaseException), result
        final = latest(result)
        assert {r.status for r in final.values()} == {"completed"}, [(r.trial_id, r.error) for r in final.values()]
        records += list(final.values())
    spans = sorted((r.started_at, r.finished_at) for r in records)
    assert len(spans) == 4
    for (_, finished), (started, _) in itertools.pairwise(spans):
        assert started >= finished, f"two trials on the engine at once across controllers: {spans}"
    inner = Engine(address=shared.address)
    try:
        assert inner.labelled() == [], "every slot given back"
    finally:
        inner.close()


class KillOnce(Said):
    """Kills ``victim``'s container (SIGKILL to its dockerd, PID 1) once a trial has finished there and the
    other arm of that pair has started there: a half-finished pair and a running trial are lost together."""

    def __init__(self, victim: DindEngine) -> None:
        super().__init__()
        self.victim = victim
        self.started: set[str] = set()
        self.armed: str | None = None
        self.killed_at: float | None = None
        self._lock = threading.Lock()

    def phase(self, trial_id: str, phase: str) -> None:
        with self._lock:
            self.started.add(trial_id)
            if trial_id == self.armed and phase == "agent":
                self._kill()

    def trial_finished(self, spec: TrialSpec, record: TrialRecord, spent_usd: float) -> None:
        with self._lock:
            if record.engine is None or record.engine.name != self.victim.address.name or self.armed is not None:
                return
            other: Arm = "skill" if spec.arm == "baseline" else "baseline"
            self.armed = trial_id(spec.task.id, other, spec.run_index)
            if self.armed in self.started:
                self._kill()

    def _kill(self) -> None:
        if self.killed_at is None:
            self.killed_at = time.monotonic()
            docker.from_env().api.kill(self.victim.container)


def test_an_engine_killed_mid_run_costs_only_its_running_trials(
    tmp_path: Path, dind_pool: list[DindEngine], engine: Engine
) -> None:
    """Last in this file: it kills one of the session's engines (the fixture removes it at the end)."""
    setup = prepare_demo(tmp_path / "demo")
    scenario = _scenario(demo_task_scripts(setup.root))
    scenario["defaults"]["latency_ms"] = 1500  # each agent turn takes a while: the kill lands mid-trial
    scenario["tasks"]["add-word-count"] = {
        **demo_task_scripts(setup.root)["add-word-count"],
        "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}},
    }
    prereg, scenario_path = write_experiment(
        setup.root, "kill", tasks=["fix-mean", "fix-slugify", "add-word-count"], scenario=scenario
    )
    study = load_study(prereg)
    work_root = tmp_path / "trials"
    work_root.mkdir(mode=0o700)
    victim = next(e for e in dind_pool if e.mode == "tls")
    events = KillOnce(victim)
    options = RunOptions(
        out=tmp_path / "out", jobs=0, scripted=scenario_path, preflight=False, engine_slots=1,
        paths=dataclasses.replace(host_paths(work_root), engines=tmp_path / "engines-record"),
        engines=tuple(e.address for e in dind_pool),
    )  # fmt: skip
    t0 = time.monotonic()
    result = Experiment(study, None, options, events).run()
    print(f"three engines, one killed: {time.monotonic() - t0:.1f} s")
    assert events.killed_at is not None, "the kill happened"
    lost = victim.address.name

    final = latest(result)  # refuses two records of one attempt; one final record per trial
    assert len(final) == 6
    assert {r.status for r in final.values()} == {"completed"}, [(r.trial_id, r.error) for r in final.values()]
    for r in final.values():
        assert r.engine is not None and r.engine.name != lost, r.trial_id
    by_pair: dict[tuple[str, int], set[str]] = {}
    for r in final.values():
        assert r.engine is not None
        by_pair.setdefault((r.task_id, r.run_index), set()).add(r.engine.name)
    assert all(len(e) == 1 for e in by_pair.values()), by_pair

    on_lost = [r for r in result.records if r.engine is not None and r.engine.name == lost]
    lost_running = [r for r in on_lost if r.status == "infra_error" and not r.flags]
    superseded = [r for r in result.records if any(f.startswith("superseded:") for f in r.flags)]
    assert lost_running, "the trial running there became an infrastructure error"
    assert len(superseded) == 1, "the arm that had finished there is set aside by one line"
    leftover = superseded[0]
    earlier = [r for r in result.records if r.trial_id == leftover.trial_id]
    assert [r.attempt for r in earlier] == [1, 2, 3]
    assert earlier[0].status == "completed" and earlier[0].engine is not None and earlier[0].engine.name == lost
    assert leftover.attempt == 2 and leftover.total_cost_usd == 0
    assert any(f"engine {lost} is down" in m for m in events.lines), events.lines

    data = analyze_records(study, result.records, lock_hash=result.lock_hash, experiment_dir=tmp_path / "out")
    assert (data.analysis.baseline.passes, data.analysis.skill.passes) == (2, 3)
    assert (
        data.decision.verdict
        == analyze_records(
            study, list(final.values()), lock_hash=result.lock_hash, experiment_dir=tmp_path / "out"
        ).decision.verdict
    )
    _nothing_left_on([e for e in dind_pool if e is not victim], work_root)
