"""Crash safety on the real engine: SIGKILL mid-run, a torn line, rerun; infra failures retried and kept.

The killed controller is a real ``python -m harness eval --scripted ...``
subprocess; the rerun is the same command with ``--resume``. Nothing a killed
run left (containers, networks, trial directories, git worktrees) may survive
the rerun, and no completed trial may run twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.demo import DemoSetup
from harness.records import TrialRecord
from harness.reporting.model import analyze_records
from harness.results.store import read_results
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import load_study
from tests.integration.helpers import demo_task_scripts, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["fix-mean", "fix-slugify", "add-word-count"]


def _eval(
    prereg: Path, scenario: Path, out: Path, env: dict[str, str], log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "harness", "eval", str(prereg), "--scripted", str(scenario), "--out", str(out)]
    with open(log, "ab") as fh:
        return subprocess.Popen([*cmd, "--jobs", "2", *extra], cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def test_sigkill_mid_run_then_rerun_completes_without_running_anything_twice(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup
) -> None:
    scripts = demo_task_scripts(demo_setup.root)
    scenario = {
        "seed": 5,
        "skill_marker": "careful-fixer-7c1e",
        "defaults": {"latency_ms": 900, "usage": {"input_tokens": 1000, "output_tokens": 100}},
        "tasks": {t: {**scripts[t], "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}}} for t in TASKS},
    }
    prereg, scen = write_experiment(demo_setup.root, "killed", tasks=TASKS, scenario=scenario)
    out = tmp_path / "out"
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir)}  # the controller's trial directories go under here
    log = tmp_path / "eval.log"

    proc = _eval(prereg, scen, out, env, log)
    deadline = time.monotonic() + 240
    while len(_lines(out / "results.jsonl")) < 1:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "no trial finished in time"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    killed_at = time.time()

    before = (out / "results.jsonl").read_bytes()
    assert before.endswith(b"\n")
    done_before = {TrialRecord.model_validate_json(line).trial_id for line in before.splitlines()}
    left = [(k, n, lb) for k, n, lb in engine.labelled() if lb.get("harness.pid") == str(proc.pid)]
    assert any(lb.get("harness.role") == "scripted-api" for _, _, lb in left), "the kill must land mid-run"
    run_dirs = list((tmpdir / f"harness-{os.getuid()}").iterdir())
    assert run_dirs, "the killed run's trial directories are still there"
    torn = b'{"schema_version": 1, "experiment_id": "torn-by-a-crash'
    with open(out / "results.jsonl", "ab") as fh:
        fh.write(torn)  # what a crash in the middle of a write leaves

    rerun = _eval(prereg, scen, out, env, log, "--resume")
    assert rerun.wait(timeout=400) == 0, log.read_text()[-4000:]
    text = log.read_text()
    assert "repaired a torn last line" in text
    assert "left by an earlier, killed run" in text

    after = (out / "results.jsonl").read_bytes()
    assert after.startswith(before), "lines written before the crash are never rewritten"
    assert (out / "results.jsonl.torn-1").read_bytes() == torn
    records = read_results(out / "results.jsonl").records
    new = [TrialRecord.model_validate_json(line) for line in after[len(before) :].splitlines()]
    assert not {r.trial_id for r in new} & done_before, "a completed trial ran again"
    assert len(new) == 6 - len(done_before), "at most the running trials were lost, each run once more"
    assert all(r.started_at > time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(killed_at - 1)) for r in new)
    by_trial: dict[str, list[TrialRecord]] = {}
    for r in records:
        by_trial.setdefault(r.trial_id, []).append(r)
    assert len(by_trial) == 6 and all(len(v) == 1 and v[0].status == "completed" for v in by_trial.values())
    assert json.loads((out / "decision.json").read_text())["verdict"] in ("adopt", "reject", "inconclusive")
    assert list((tmpdir / f"harness-{os.getuid()}").iterdir()) == [], "the killed run's directories were swept"
    assert not [n for _, n, lb in engine.labelled() if lb.get("harness.pid") == str(proc.pid)]


def test_infra_failures_are_retried_with_every_attempt_kept(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    """The scripted model answers 500 (then 529) to every request of the first conversations: the CLI
    retries with backoff until its deadline, the gateway saw the API fail (a 400 would be the request's
    fault, not the API's), the harness retries."""
    scripts = demo_task_scripts(demo_setup.root)
    flaky = {"p_success": 1, "errors": [{"at_turn": 0, "status": 500, "conversations": 1}]}
    broken = {"p_success": 1, "errors": [{"at_turn": 0, "status": 529, "conversations": 1000}]}
    scenario = {
        "seed": 1,
        "skill_marker": "careful-fixer-7c1e",
        "tasks": {
            "fix-mean": {**scripts["fix-mean"], "arms": {"baseline": flaky, "skill": {"p_success": 1}}},
            "fix-slugify": {**scripts["fix-slugify"], "arms": {"baseline": {"p_success": 1}, "skill": broken}},
        },
    }
    prereg, scen = write_experiment(
        demo_setup.root,
        "infra",
        tasks=["fix-mean", "fix-slugify"],
        scenario=scenario,
        extra={"execution": {"max_infra_retries": 1}},
    )
    result = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=2)
    attempts: dict[str, list[tuple[int, str]]] = {}
    for r in result.records:
        attempts.setdefault(r.trial_id, []).append((r.attempt, r.status))
    assert attempts["fix-mean.baseline.0"] == [(1, "infra_error"), (2, "completed")]
    assert attempts["fix-slugify.skill.0"] == [(1, "infra_error"), (2, "infra_error")], "bounded: 1 retry"
    assert attempts["fix-mean.skill.0"] == [(1, "completed")]
    first = next(r for r in result.records if r.trial_id == "fix-mean.baseline.0" and r.attempt == 1)
    assert "last upstream answer was 500" in (first.error or ""), first.error
    data = analyze_records(
        load_study(prereg),
        result.records,
        lock_hash=result.lock_hash,
        experiment_dir=tmp_path / "out",
    )
    assert data.analysis.skill.infra == 1 and data.analysis.baseline.infra == 0
    assert data.decision.verdict != "invalid"

    # rerunning never repeats a final trial, not even the one whose retries are used up
    again = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=2)
    assert again.ran == 0 and len(again.records) == len(result.records)
