"""The cumulative budget and the preregistered early stop on the real pipeline, with exact scripted costs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.analysis.reasons import ReasonCode
from harness.demo import DemoSetup
from harness.plan import plan_trials
from harness.reporting import write_reports
from harness.reporting.gate import gate
from harness.reporting.model import analyze_records
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import load_study
from tests.integration.helpers import demo_task_scripts, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASKS = ["fix-mean", "fix-slugify"]
USAGE = {"input_tokens": 1000, "output_tokens": 100}
JUDGE_USAGE = {"input_tokens": 800, "output_tokens": 60}
# The scripted model's exact usage at the CLI's prices for the sonnet and haiku aliases
AGENT_TURN_USD = (1000 * 2.0 + 100 * 10.0) / 1e6
JUDGE_USD = (800 * 0.1 + 60 * 0.5) / 1e6


def _scenario(setup_root: Path, baseline: float, skill: float, tasks: list[str] = TASKS) -> dict[str, Any]:
    scripts = demo_task_scripts(setup_root)
    return {
        "seed": 4,
        "skill_marker": "careful-fixer-7c1e",
        "defaults": {"usage": USAGE},
        "judge": {"mode": "follow_verify", "usage": JUDGE_USAGE},
        "tasks": {
            t: {**scripts[t], "arms": {"baseline": {"p_success": baseline}, "skill": {"p_success": skill}}}
            for t in tasks
        },
    }


def _turns(setup_root: Path, task: str, arm: str) -> int:
    steps = len(demo_task_scripts(setup_root)[task]["success"])
    return steps + 1 + (1 if arm == "skill" else 0)  # the final answer; the skill arm first reads SKILL.md


def test_the_cumulative_budget_stops_new_trials_at_the_exact_dollar(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    prereg, scen = write_experiment(
        demo_setup.root,
        "budget",
        tasks=TASKS,
        runs=2,
        scenario=_scenario(demo_setup.root, 1, 1),
        extra={"execution": {"budgets": {"total_usd": 0.025}}},
    )
    study = load_study(prereg)
    specs = plan_trials(study.target_tasks(), 2, study.prereg.execution.seed)
    expected = [_turns(demo_setup.root, s.task.id, s.arm) * AGENT_TURN_USD + JUDGE_USD for s in specs]
    cum, k = 0.0, 0
    while cum < 0.025:
        cum += expected[k]
        k += 1
    assert 1 < k < len(specs), "the cap must fall inside the plan"

    result = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=1)
    ran = [r for r in result.records if r.status != "skipped"]
    skipped = [r for r in result.records if r.status == "skipped"]
    assert [r.trial_id for r in ran] == [s.trial_id for s in specs[:k]]
    for rec, usd in zip(ran, expected, strict=False):
        assert rec.agent is not None and rec.gateway is not None
        assert rec.total_cost_usd == pytest.approx(usd, abs=1e-12), "scripted costs are exact"
        assert rec.agent.cost_usd == pytest.approx(rec.gateway.cost_usd, abs=1e-12)
    assert [r.trial_id for r in skipped] == [s.trial_id for s in specs[k:]]
    assert {r.stopped_by for r in skipped} == {"budget"}
    assert result.budget_stopped and not result.early_stopped

    data = analyze_records(study, result.records, lock_hash=result.lock_hash, experiment_dir=tmp_path / "out")
    assert data.decision.verdict == "inconclusive"
    assert ReasonCode.BUDGET_STOPPED in {r.code for r in data.decision.reasons}
    assert data.spent_usd == pytest.approx(sum(expected[:k]), abs=1e-12)
    write_reports(tmp_path / "out", data)
    assert gate(tmp_path / "out").exit_code == 2

    again = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=1)
    assert again.ran == 0 and len(again.records) == len(result.records), "a budget stop is final on rerun"


def test_preregistered_early_stop_skips_trials_that_cannot_change_the_verdict(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    prereg, scen = write_experiment(
        demo_setup.root,
        "early",
        tasks=TASKS,
        runs=3,
        scenario=_scenario(demo_setup.root, 1, 0),  # the skill breaks every task
        # Curtailment serves the point rule; with the default caps one remaining trial ending missing or
        # infra could still trip a gate in this small design, so the caps are preregistered looser here.
        extra={
            "decision": {"rule": "point", "early_stop": "curtail", "max_missing_share": 0.5, "max_infra_imbalance": 1.0}
        },
    )
    study = load_study(prereg)
    result = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=2)
    skipped = [r for r in result.records if r.status == "skipped"]
    assert skipped, "curtailment must stop this run early"
    assert {r.stopped_by for r in skipped} == {"early_stop"}
    assert all("verdict is reject" in (r.error or "") for r in skipped)
    assert result.early_stopped and not result.budget_stopped
    data = analyze_records(study, result.records, lock_hash=result.lock_hash, experiment_dir=tmp_path / "out")
    codes = {r.code for r in data.decision.reasons}
    assert data.decision.verdict == "reject"
    assert ReasonCode.EARLY_STOPPED in codes and not codes & {
        ReasonCode.INCOMPLETE,
        ReasonCode.UNBALANCED,
        ReasonCode.EARLY_STOP_UNSUPPORTED,
        ReasonCode.BUDGET_STOPPED,
    }
    write_reports(tmp_path / "out", data)
    assert gate(tmp_path / "out").exit_code == 1


def test_a_group_sequential_look_rejects_a_harmful_skill_after_the_first_round(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    """Every scripted demo task, a skill that breaks each one against a baseline that solves it, Pocock's looks
    after every round and no futility stop: the first look's repeated interval already lies below the minimum
    worthwhile gain, the loop stops, and every report says which look decided. (Six tasks cannot adopt at an
    interim look of either design: the exact sign-flip p is at least 2/64, above every interim look's level.)"""
    every = list(demo_task_scripts(demo_setup.root))
    prereg, scen = write_experiment(
        demo_setup.root,
        "sequential",
        tasks=every,
        runs=3,
        scenario=_scenario(demo_setup.root, 1, 0, every),
        extra={"decision": {"futility_stop": False, "sequential": {"spending": "pocock"}}},
    )
    study = load_study(prereg)
    result = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=2)
    ran = [r for r in result.records if r.status != "skipped"]
    skipped = [r for r in result.records if r.status == "skipped"]
    first = 2 * len(every)
    assert len([r for r in ran if r.run_index == 0]) == first
    assert skipped and {r.stopped_by for r in skipped} == {"early_stop"}
    assert all("group-sequential design" in (r.error or "") and "look 1 of 3" in (r.error or "") for r in skipped)
    assert len(ran) < 2 * first, "beyond round 1 only the trials running when the look decided"
    data = analyze_records(study, result.records, lock_hash=result.lock_hash, experiment_dir=tmp_path / "out")
    seq = data.decision.sequential
    assert data.decision.verdict == "reject" and seq is not None and seq.stopped_early and seq.look.number == 1
    assert seq.analysed_trials == first and seq.later_trials == len(ran) - first
    assert seq.paired.interval.high < 0.05
    assert (
        ReasonCode.BOUNDARY_CROSSED in data.decision.codes
        and ReasonCode.EARLY_STOP_UNSUPPORTED not in data.decision.codes
    )
    write_reports(tmp_path / "out", data)
    assert gate(tmp_path / "out").exit_code == 1
    for name in ("report.md", "report.html", "junit.xml"):
        text = (tmp_path / "out" / name).read_text()
        assert "look 1 of 3" in text and "repeated 95% interval" in text, name
