"""A/A calibration on the real pipeline: the skill arm runs exactly as the baseline (real CLI, scripted model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.demo import DemoSetup
from harness.experiment import calibrate
from harness.results.attempts import latest_by_trial
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import load_study
from tests.integration.helpers import demo_task_scripts, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASKS = ["fix-mean", "fix-slugify"]


def test_calibrate_runs_the_baseline_against_itself(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    scripts = demo_task_scripts(demo_setup.root)
    # A skill arm that really ran as the skill would fail every task (p = 0) and read SKILL.md first:
    # both would show in its records (the positive control is built into the scenario).
    scenario = {
        "seed": 3,
        "skill_marker": "careful-fixer-7c1e",
        "judge": {"mode": "follow_verify"},
        "tasks": {t: {**scripts[t], "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 0}}} for t in TASKS},
    }
    prereg, scen = write_experiment(demo_setup.root, "calibrate-decide", tasks=TASKS, runs=1, scenario=scenario)
    result = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=2, aa=True)
    finals = latest_by_trial(result.records)
    assert {r.arm for r in finals.values()} == {"baseline", "skill"}
    by_arm = {arm: [r for r in finals.values() if r.arm == arm] for arm in ("baseline", "skill")}
    for arm, recs in by_arm.items():
        assert len(recs) == 2, arm
        assert all(r.status == "completed" and r.verify is not None and r.verify.exit_code == 0 for r in recs), [
            (r.status, r.error, r.verify) for r in recs
        ]
    turns = {
        arm: sorted((r.task_id, r.agent.num_turns if r.agent else None) for r in recs) for arm, recs in by_arm.items()
    }
    assert turns["skill"] == turns["baseline"], "the A/A arm must not read SKILL.md"
    summary = calibrate.summarize(load_study(prereg), result.records, resamples=20)
    assert summary["judge"]["agreement"] == 1.0 and summary["drift"]["mean"] == 0.0
    assert summary["rules"]["interval"]["adopt"] == 0.0
