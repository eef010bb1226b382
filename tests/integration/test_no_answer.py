"""A decision on every run, through the real pipeline (issue 24 item 3).

The scripted Messages API answers 400 to every request of one skill-arm trial (``conversations: 1``): the
real CLI gets no model answer, prints an error result that names no model, and the trial is an
``agent_error`` (a 400 is the request's fault, not the API's) whose ``resolved_model`` is None, while the
other skill trial completes with a model. That once crashed ``eval``, ``report`` and ``gate`` with a
TypeError; now each reaches a verdict, and every report and the gate tell the same one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.demo import DemoSetup
from harness.reporting import analyse_and_write
from harness.reporting.gate import GATE_CODES, gate
from harness.reporting.model import load_experiment
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.integration.helpers import demo_task_scripts, latest, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_trial_that_got_400_on_every_request_beside_one_that_completed_is_decided(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    scripts = demo_task_scripts(demo_setup.root)
    refused = {"p_success": 1, "errors": [{"at_turn": 0, "status": 400, "conversations": 1}]}
    scenario = {
        "seed": 1,
        "skill_marker": "careful-fixer-7c1e",
        "tasks": {"fix-mean": {**scripts["fix-mean"], "arms": {"baseline": {"p_success": 1}, "skill": refused}}},
    }
    prereg, scen = write_experiment(demo_setup.root, "no-answer", tasks=["fix-mean"], runs=2, scenario=scenario)
    out = tmp_path / "out"
    result = run_experiment(engine, prereg, scen, out, work_root, jobs=2)
    skill = [r for r in latest(result).values() if r.arm == "skill"]
    no_answer = [r for r in skill if r.status == "agent_error"]
    assert len(no_answer) == 1, [(r.trial_id, r.status, r.error) for r in skill]
    assert no_answer[0].gateway is not None and set(no_answer[0].gateway.upstream_statuses) == {"400"}
    assert no_answer[0].agent is not None and no_answer[0].agent.resolved_model is None
    answered = [r for r in skill if r.status == "completed"]
    assert answered and answered[0].agent is not None and answered[0].agent.resolved_model

    data, paths = analyse_and_write(out, lambda: load_experiment(out))  # what eval does after the run
    verdict = data.decision.verdict
    assert verdict in GATE_CODES and "PROVENANCE_MISMATCH" not in data.decision.codes
    assert json.loads(paths["decision.json"].read_text())["verdict"] == verdict
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.startswith(verdict.upper())
    assert gate(out).verdict == verdict and main(["gate", str(out)]) == GATE_CODES[verdict]
