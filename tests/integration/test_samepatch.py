"""Identical patches on the real engine: verify runs once per patch, the judge once only when preregistered."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.runnotes import reuse_counts
from harness.demo import DemoSetup
from harness.records import JudgeResult, TrialRecord, VerifyResult
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.integration.helpers import demo_task_scripts, latest, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _run(demo_setup: DemoSetup, engine: Engine, tmp_path: Path, name: str, reuse_judge: bool) -> dict[str, TrialRecord]:
    scripts = demo_task_scripts(demo_setup.root)
    scenario = {
        "seed": 5,
        "judge": {"mode": "follow_verify"},
        "tasks": {
            "fix-mean": {**scripts["fix-mean"], "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}}},
            "fix-slugify": {
                **scripts["fix-slugify"],
                "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 0}},
            },
        },
        "arms": {"skill": {"read_skill": False}},
    }
    prereg, scen = write_experiment(
        demo_setup.root,
        name,
        tasks=["fix-mean", "fix-slugify"],
        runs=2,
        scenario=scenario,
        extra={"judge": {"reuse_identical": reuse_judge}},
    )
    work = tmp_path / f"trials-{name}"
    work.mkdir(mode=0o700)
    return latest(run_experiment(engine, prereg, scen, tmp_path / f"out-{name}", work, jobs=2))


def _verify(r: TrialRecord) -> VerifyResult:
    assert r.verify is not None
    return r.verify


def _judge(r: TrialRecord) -> JudgeResult:
    assert r.judge is not None
    return r.judge


def test_identical_patches_share_verify_and_the_preregistered_judge(
    engine: Engine, images: ImageSet, demo_setup: DemoSetup, tmp_path: Path
) -> None:
    records = _run(demo_setup, engine, tmp_path, "reuse", reuse_judge=True)
    assert {r.status for r in records.values()} == {"completed"}, [(r.trial_id, r.error) for r in records.values()]
    by_patch: dict[tuple[str, str], list[TrialRecord]] = {}
    for r in records.values():
        assert r.patch is not None and r.verify is not None and r.judge is not None
        by_patch.setdefault((r.task_id, r.patch.sha256), []).append(r)
    assert max(len(g) for g in by_patch.values()) >= 2, "the scripted fixes repeat: some patches are identical"
    for group in by_patch.values():
        ran = [r for r in group if _verify(r).reused_from is None]
        assert len(ran) == 1, "one verify per distinct patch of a task"
        for r in group:
            assert _verify(r).exit_code == _verify(ran[0]).exit_code
            if _verify(r).reused_from is not None:
                assert _verify(r).reused_from == ran[0].trial_id
                assert r.durations_s["verify"] < ran[0].durations_s["verify"]
        judged = [r for r in group if _judge(r).reused_from is None]
        assert len(judged) == 1
        assert all(_judge(r).cost_usd == 0.0 for r in group if _judge(r).reused_from is not None)
        cost = _judge(judged[0]).cost_usd
        assert cost and cost > 0
    counts = reuse_counts(records.values())
    distinct = len(by_patch)
    assert counts == {"verify": 8 - distinct, "judge": 8 - distinct}


def test_without_the_preregistration_every_trial_is_judged(
    engine: Engine, images: ImageSet, demo_setup: DemoSetup, tmp_path: Path
) -> None:
    records = _run(demo_setup, engine, tmp_path, "noreuse", reuse_judge=False)
    assert {r.status for r in records.values()} == {"completed"}
    assert all(r.judge is not None and r.judge.reused_from is None for r in records.values())
    distinct = len({(r.task_id, r.patch.sha256) for r in records.values() if r.patch is not None})
    assert reuse_counts(records.values())["verify"] == 8 - distinct  # verify is shared by default
