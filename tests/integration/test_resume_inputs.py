"""Resume refuses a directory whose trial inputs changed (real engine, images, CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.demo import DemoSetup
from harness.errors import ResumeError
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.integration.helpers import demo_task_scripts, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_changed_scenario_refuses_to_resume_and_names_what_changed(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup
) -> None:
    scripts = demo_task_scripts(demo_setup.root)
    scenario: dict[str, Any] = {
        "seed": 3,
        "skill_marker": "careful-fixer-7c1e",
        "tasks": {
            "fix-mean": {**scripts["fix-mean"], "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}}}
        },
    }
    prereg, scen = write_experiment(demo_setup.root, "inputs", tasks=["fix-mean"], scenario=scenario)
    out = tmp_path / "out"
    first = run_experiment(engine, prereg, scen, out, tmp_path / "work", jobs=2)
    assert first.ran == 2
    recorded = json.loads((out / "experiment.json").read_text())["trial_inputs"]
    assert recorded["trial_image"] == images.trial_id
    assert recorded["upstream"] == "scripted"

    # the same inputs resume (nothing left to run)
    again = run_experiment(engine, prereg, scen, out, tmp_path / "work", jobs=2)
    assert again.ran == 0

    # the user edits the scenario (the model's behaviour): the stale verdicts must not be repeated
    scenario["tasks"]["fix-mean"]["arms"]["baseline"]["p_success"] = 0
    scen.write_text(yaml.safe_dump(scenario, sort_keys=False))
    lines = (out / "results.jsonl").read_bytes()
    with pytest.raises(ResumeError) as err:
        run_experiment(engine, prereg, scen, out, tmp_path / "work", jobs=2)
    assert "was started with other trial inputs (scenario_sha256:" in str(err.value)
    assert "another --out directory" in str(err.value)
    assert (out / "results.jsonl").read_bytes() == lines, "a refused resume writes nothing"
