"""The whole trial pipeline on the real engine, images, Claude Code CLI and git.

One small experiment (4 tasks x 2 arms x 1 run) against the scripted Messages
API covers: the skill arm demonstrably reading /skill/SKILL.md, verify pass and
fail, judge pass / fail / unknown, an agent that edits and commits, an agent
that edits the tests (flagged, and verify runs on restored tests), exact cost
agreement between the CLI and the gateway, and the gateway replacing the
placeholder key. A second experiment is the negative control for the skill
check: a skill without the marker is reported as not read.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from harness.demo import DemoSetup
from harness.experiment.experiment import ExperimentResult
from harness.records import outcome
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.roles import PLACEHOLDER_KEY
from tests.integration.helpers import demo_task_scripts, latest, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def pipeline(
    tmp_path_factory: pytest.TempPathFactory, engine: Engine, images: ImageSet
) -> tuple[DemoSetup, ExperimentResult, Path, Path]:
    from harness.demo import prepare_demo

    tmp = tmp_path_factory.mktemp("pipeline")
    setup = prepare_demo(tmp / "demo")
    scripts = demo_task_scripts(setup.root)
    scenario = {
        "seed": 3,
        "skill_marker": "careful-fixer-7c1e",
        "defaults": {"usage": {"input_tokens": 2000, "output_tokens": 100}},
        "judge": {"mode": "follow_verify", "usage": {"input_tokens": 900, "output_tokens": 40}},
        "tasks": {
            "fix-mean": {**scripts["fix-mean"], "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}}},
            "fix-slugify": {
                **scripts["fix-slugify"],
                "arms": {"baseline": {"p_success": 0}, "skill": {"p_success": 0}},
            },
            "add-word-count": {
                **scripts["add-word-count"],
                "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}},
                "judge": {"mode": "no_structured_output"},
            },
            "fix-median": {**scripts["fix-median"], "arms": {"baseline": {"p_success": 0}, "skill": {"p_success": 0}}},
        },
    }
    prereg, scen = write_experiment(
        setup.root, "pipeline", tasks=["fix-mean", "fix-slugify", "add-word-count", "fix-median"], scenario=scenario
    )
    work_root = tmp / "trials"
    work_root.mkdir(mode=0o700)
    result = run_experiment(engine, prereg, scen, tmp / "out", work_root)
    return setup, result, tmp / "out", work_root


def test_every_trial_completed_and_nothing_is_left_on_the_host(
    pipeline: tuple[DemoSetup, ExperimentResult, Path, Path],
) -> None:
    setup, result, _out, work_root = pipeline
    records = latest(result)
    assert len(records) == 8
    assert {r.status for r in records.values()} == {"completed"}, [(r.trial_id, r.error) for r in records.values()]
    assert list(work_root.iterdir()) == [], "trial directories must be removed"
    worktrees = subprocess.run(
        ["git", "-C", str(setup.root / "demo" / "repo"), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(worktrees) == 1, worktrees


def test_skill_arm_read_the_skill_file_and_baseline_did_not(
    pipeline: tuple[DemoSetup, ExperimentResult, Path, Path],
) -> None:
    _setup, result, _out, _ = pipeline
    for r in latest(result).values():
        assert r.agent is not None
        if r.arm == "skill":
            assert "[skill file read: yes]" in r.agent.result_excerpt, r.agent.result_excerpt
        else:
            assert "[skill file read" not in r.agent.result_excerpt


def test_verify_pass_and_fail_both_observed(pipeline: tuple[DemoSetup, ExperimentResult, Path, Path]) -> None:
    _setup, result, _out, _ = pipeline
    codes = {(r.task_id, r.arm): r.verify.exit_code for r in latest(result).values() if r.verify}
    for arm in ("baseline", "skill"):
        assert codes[("fix-mean", arm)] == 0
        assert codes[("add-word-count", arm)] == 0
        assert codes[("fix-slugify", arm)] == 1
        assert codes[("fix-median", arm)] == 1


def test_judge_pass_fail_and_unknown_all_observed(pipeline: tuple[DemoSetup, ExperimentResult, Path, Path]) -> None:
    _setup, result, _out, _ = pipeline
    verdicts = {(r.task_id, r.arm): r.judge.verdict for r in latest(result).values() if r.judge}
    outcomes = {(r.task_id, r.arm): outcome(r) for r in latest(result).values()}
    for arm in ("baseline", "skill"):
        assert verdicts[("fix-mean", arm)] == "pass"
        assert verdicts[("fix-slugify", arm)] == "fail"
        assert verdicts[("add-word-count", arm)] == "unknown"  # the model never called StructuredOutput
        assert outcomes[("fix-mean", arm)] == "pass"
        assert outcomes[("add-word-count", arm)] == "unknown"
        assert outcomes[("fix-slugify", arm)] == "fail"


def test_an_agent_that_commits_still_yields_the_patch_against_base(
    pipeline: tuple[DemoSetup, ExperimentResult, Path, Path],
) -> None:
    _setup, result, out, _ = pipeline
    rec = latest(result)["add-word-count.baseline.0"]
    assert rec.patch is not None and rec.patch.files == ("textkit/text.py",)
    diff = (out / "artifacts" / rec.patch.sha256[:2] / rec.patch.sha256).read_text()
    assert "+    return len(text.split())" in diff
    assert '-    raise NotImplementedError("word_count is not written yet")' in diff


def test_editing_the_tests_is_flagged_and_verify_runs_on_restored_tests(
    pipeline: tuple[DemoSetup, ExperimentResult, Path, Path],
) -> None:
    _setup, result, _out, _ = pipeline
    rec = latest(result)["fix-median.skill.0"]
    assert rec.patch is not None
    assert "edits_tests" in rec.patch.flags and "edits_protected:tests" in rec.patch.flags
    assert rec.verify is not None and rec.verify.exit_code == 1, "the edited test must not make verify pass"


def test_cli_cost_and_gateway_meter_agree_exactly(pipeline: tuple[DemoSetup, ExperimentResult, Path, Path]) -> None:
    _setup, result, _out, _ = pipeline
    for r in latest(result).values():
        assert r.agent is not None and r.gateway is not None
        assert r.agent.cost_usd == pytest.approx(r.gateway.cost_usd, abs=1e-9)
        assert r.gateway.refused == ()
        assert r.agent.cost_usd is not None and r.agent.cost_usd > 0


def test_gateway_replaced_the_placeholder_key(pipeline: tuple[DemoSetup, ExperimentResult, Path, Path]) -> None:
    _setup, _result, out, _ = pipeline
    events = [json.loads(line) for line in (out / "scripted-api.log").read_text().splitlines() if line.startswith("{")]
    requests = [e for e in events if e.get("event") == "request"]
    assert requests, "the scripted API saw no request"
    placeholder = hashlib.sha256(PLACEHOLDER_KEY.encode()).hexdigest()
    seen = {e["key_sha256"] for e in requests}
    assert len(seen) == 1 and placeholder not in seen
    assert not any(e["has_authorization"] for e in requests)


def test_phase_durations_are_recorded(pipeline: tuple[DemoSetup, ExperimentResult, Path, Path]) -> None:
    _setup, result, _out, _ = pipeline
    for r in latest(result).values():
        assert set(r.durations_s) == {"workspace", "gateway", "agent", "extract", "verify", "judge", "teardown"}


def test_a_skill_without_the_marker_is_reported_as_not_read(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    """Negative control for the skill check: it can fail."""
    fake = demo_setup.root / "skills" / "impostor"
    fake.mkdir()
    (fake / "SKILL.md").write_text("---\nname: impostor\n---\nThis file does not carry the marker.\n")
    scripts = demo_task_scripts(demo_setup.root)
    scenario = {
        "skill_marker": "careful-fixer-7c1e",
        "tasks": {
            "fix-mean": {**scripts["fix-mean"], "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}}}
        },
    }
    prereg, scen = write_experiment(
        demo_setup.root,
        "impostor",
        tasks=["fix-mean"],
        skill="impostor",
        skill_ref="../skills/impostor",
        scenario=scenario,
    )
    result = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=2)
    skill = latest(result)["fix-mean.skill.0"]
    assert skill.agent is not None and "[skill file read: no]" in skill.agent.result_excerpt
    assert skill.verify is not None and skill.verify.exit_code == 1, "a skill that was not read forces the failure path"
    baseline = latest(result)["fix-mean.baseline.0"]
    assert baseline.verify is not None and baseline.verify.exit_code == 0
