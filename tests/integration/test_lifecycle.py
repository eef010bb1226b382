"""Lifecycle of a real ``python -m harness eval --scripted ...`` process under signals.

SIGINT and SIGTERM during a run tear everything down (containers, networks, trial
directories, worktrees) and leave ``results.jsonl`` valid. After SIGKILL the objects
are left (the positive control: the test sees them), and both ``skilltrial gc`` and the
next start remove them. Every Docker object carries the run, trial, owner pid and
expiry labels.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from harness.demo import DemoSetup
from harness.results.store import read_results
from harness.sandbox import labels as L
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.runtime import DockerObject
from tests.integration.helpers import write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.gettempdir()) / f"harness-{os.getuid()}"


def _scenario() -> dict[str, Any]:
    slow = [{"tool": "Bash", "input": {"command": "sleep 90", "description": "wait"}}]
    return {
        "tasks": {"fix-mean": {"success": slow, "failure": slow}},
        "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1, "read_skill": False}},
    }


@pytest.fixture
def slow_experiment(demo_setup: DemoSetup) -> tuple[Path, Path]:
    return write_experiment(demo_setup.root, "slow", tasks=["fix-mean"], scenario=_scenario())


def _start(prereg: Path, scenario: Path, out: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    env["PYTHONPATH"] = str(ROOT)
    argv = [sys.executable, "-m", "harness", "eval", str(prereg), "--scripted", str(scenario)]
    return subprocess.Popen(
        [*argv, "--out", str(out), "--jobs", "2"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _objects(engine: Engine, pid: int) -> list[DockerObject]:
    return engine.labelled({L.PID: str(pid)})


def _wait_for_agents(
    engine: Engine, proc: subprocess.Popen[bytes], count: int = 2, timeout_s: float = 120
) -> list[DockerObject]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read().decode(errors="replace") if proc.stdout else ""
        objs = _objects(engine, proc.pid)
        if sum(1 for kind, _n, lb in objs if kind == "container" and lb.get(L.ROLE) == "agent") >= count:
            return objs
        time.sleep(0.3)
    proc.kill()
    raise AssertionError("the agents never started")


def _finish(proc: subprocess.Popen[bytes], timeout_s: float = 90) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError("the controller did not stop in time: " + out.decode(errors="replace")[-2000:]) from None
    return proc.returncode, out.decode(errors="replace")


def _assert_labelled(objs: list[DockerObject], pid: int) -> str:
    runs = set()
    for kind, name, lb in objs:
        for key in (L.OWNER, L.RUN, L.PID, L.HOST, L.EXPIRES):
            assert lb.get(key), (kind, name, key)
        assert lb[L.PID] == str(pid) and float(lb[L.EXPIRES]) > time.time()
        if kind == "container" and lb.get(L.ROLE) not in ("scripted-api",):
            assert lb.get(L.TRIAL), (name, lb)
        runs.add(lb[L.RUN])
    assert len(runs) == 1
    return runs.pop()


def _worktrees(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.startswith("worktree ")]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_tears_everything_down_and_results_stay_valid(
    engine: Engine,
    images: ImageSet,
    demo_setup: DemoSetup,
    slow_experiment: tuple[Path, Path],
    tmp_path: Path,
    signum: int,
) -> None:
    prereg, scenario = slow_experiment
    proc = _start(prereg, scenario, tmp_path / "out")
    objs = _wait_for_agents(engine, proc)
    run_id = _assert_labelled(objs, proc.pid)
    assert (WORK / run_id).is_dir(), "positive control: the run's trial directories exist while it runs"
    assert len(_worktrees(demo_setup.root / "demo" / "repo")) > 1
    t0 = time.monotonic()
    proc.send_signal(signum)
    code, out = _finish(proc)
    assert code == 130, out[-2000:]
    assert time.monotonic() - t0 < 60
    assert _objects(engine, proc.pid) == []
    assert not (WORK / run_id).exists()
    assert len(_worktrees(demo_setup.root / "demo" / "repo")) == 1
    report = read_results(tmp_path / "out" / "results.jsonl")
    assert report.bad_lines == [] and not report.torn_tail


def test_after_sigkill_gc_and_the_next_start_remove_what_was_left(
    engine: Engine, images: ImageSet, demo_setup: DemoSetup, slow_experiment: tuple[Path, Path], tmp_path: Path
) -> None:
    prereg, scenario = slow_experiment
    repo = demo_setup.root / "demo" / "repo"

    # 1. SIGKILL, then `skilltrial gc`
    first = _start(prereg, scenario, tmp_path / "out1")
    run1 = _assert_labelled(_wait_for_agents(engine, first), first.pid)
    first.kill()
    first.wait(timeout=30)
    left = _objects(engine, first.pid)
    assert any(k == "container" for k, _n, _l in left) and any(k == "network" for k, _n, _l in left)
    # positive control: the killed run left its trial directory, the volume holding the gateway's key and
    # its base tree's worktree registered in the user's repository
    assert (WORK / run1).is_dir() and any(k == "volume" and n.endswith("-key") for k, n, _l in left), left
    assert len(_worktrees(repo)) > 1
    gc = subprocess.run([sys.executable, "-m", "harness", "gc"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert gc.returncode == 0, gc.stderr
    assert _objects(engine, first.pid) == [], gc.stdout
    assert not (WORK / run1).exists(), "gc also removes the killed run's trial directories"
    assert len(_worktrees(repo)) == 1, ("and their worktree registrations", _worktrees(repo))

    # 2. SIGKILL, then the next start reaps it (containers, networks, trial directories, worktrees)
    second = _start(prereg, scenario, tmp_path / "out2")
    run2 = _assert_labelled(_wait_for_agents(engine, second), second.pid)
    second.kill()
    second.wait(timeout=30)
    assert _objects(engine, second.pid) and (WORK / run2).is_dir()  # positive control: left behind
    third = _start(prereg, scenario, tmp_path / "out3")
    try:
        _wait_for_agents(engine, third)
        assert _objects(engine, second.pid) == []
        assert not (WORK / run2).exists() and not (WORK / run1).exists()
    finally:
        third.send_signal(signal.SIGINT)
        code, out = _finish(third)
    assert code == 130, out[-2000:]
    assert _objects(engine, third.pid) == []
    assert len(_worktrees(repo)) == 1, _worktrees(repo)
