"""A model matrix through the real pipeline: two executor models, each a complete A/B on the real engine, images,
Claude Code CLI and git against the scripted Messages API, which answers whatever model is asked and here lets
the skill help one model only (``models.<model>`` in the scenario). Small on purpose: 2 tasks x 1 run per arm
per model (8 trials)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.demo import DemoSetup
from harness.experiment.events import NullEvents
from harness.experiment.matrix import evaluate_matrix
from harness.experiment.options import RunOptions
from harness.results.matrix import model_dir
from harness.results.store import read_results
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import load_study
from harness.study.lock import lock
from tests.integration.helpers import demo_task_scripts, host_paths, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASKS = ["fix-mean", "fix-median"]
MODELS = ["sonnet", "opus"]


def test_a_two_model_matrix_decides_per_model_and_gates_the_combination(
    tmp_path: Path,
    engine: Engine,
    images: ImageSet,
    demo_setup: DemoSetup,
    work_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scripts = demo_task_scripts(demo_setup.root)
    scenario = {
        "seed": 5,
        "skill_marker": "careful-fixer-7c1e",
        "defaults": {"usage": {"input_tokens": 1000, "output_tokens": 100}},
        "arms": {"baseline": {"p_success": 0}, "skill": {"p_success": 0}},
        "models": {"sonnet": {"arms": {"skill": {"p_success": 1}}}},  # the skill helps sonnet only
        "tasks": {t: dict(scripts[t]) for t in TASKS},
    }
    prereg, scen = write_experiment(demo_setup.root, "models", tasks=TASKS, scenario=scenario,
                                    extra={"decision": {"rule": "point"}})  # fmt: skip
    data = yaml.safe_load(prereg.read_text())
    del data["execution"]["model"]
    data["execution"]["models"] = MODELS
    prereg.write_text(yaml.safe_dump(data, sort_keys=False))
    lock(prereg)

    out = tmp_path / "out"
    shown: list[str] = []
    options = RunOptions(out=out, jobs=2, scripted=scen, host_slots=2, paths=host_paths(work_root), preflight=False)
    lines = evaluate_matrix(load_study(prereg), options, lambda s: NullEvents(), shown.extend)

    for model in MODELS:
        sub = model_dir(out, model)
        decision = json.loads((sub / "decision.json").read_text())
        assert decision["model"] == model
        records = read_results(sub / "results.jsonl").records
        assert len(records) == 4 and {r.provenance.model for r in records} == {model}
        assert {r.status for r in records} == {"completed"}, [(r.trial_id, r.error) for r in records]
        assert json.loads((sub / "experiment.json").read_text())["model"] == model
    sonnet = json.loads((model_dir(out, "sonnet") / "decision.json").read_text())
    opus = json.loads((model_dir(out, "opus") / "decision.json").read_text())
    assert (sonnet["arms"]["skill"]["rate"], sonnet["arms"]["baseline"]["rate"]) == ("2/2", "0/2")
    assert (opus["arms"]["skill"]["rate"], opus["verdict"]) == ("0/2", "reject")
    assert sonnet["verdict"] == "inconclusive", "better, but two tasks can never adopt"

    md = (out / "models.md").read_text()
    assert "**REJECT**" in md and "rejected on opus" in md
    assert "> Helps on no model; not on opus (reject); unclear on sonnet (inconclusive)." in md
    assert "| `sonnet` | ⚠️ INCONCLUSIVE | 0/2 | 2/2 |" in md and "| `opus` | ❌ REJECT | 0/2 | 0/2 |" in md
    assert json.loads((out / "models.json").read_text())["exit_code"] == 1
    assert any(x.startswith("MATRIX DECISION (every, preregistered): REJECT") for x in lines)
    assert "=== model 2/2: opus ===" in shown

    capsys.readouterr()
    assert main(["gate", str(out)]) == 1
    assert "REJECT (exit 1) careful-fixer on 2 models (models rule every): rejected on opus" in capsys.readouterr().out
    assert main(["gate", str(model_dir(out, "sonnet"))]) == 2
