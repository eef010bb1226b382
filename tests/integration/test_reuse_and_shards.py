"""Baseline reuse across skills and sharded runs merged, on the real pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.reasons import ReasonCode
from harness.cli import main
from harness.demo import DemoSetup
from harness.plan import ShardRef
from harness.reporting.gate import gate
from harness.reporting.model import analyze_records
from harness.results.store import read_results
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import load_study
from tests.integration.helpers import demo_task_scripts, latest, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASKS = ["fix-mean", "fix-median"]


def _scenario(setup_root: Path) -> dict[str, Any]:
    scripts = demo_task_scripts(setup_root)
    return {
        "seed": 9,
        "defaults": {"usage": {"input_tokens": 1000, "output_tokens": 100}},
        "arms": {"baseline": {"p_success": 0.5}},
        "skills": {
            "careful-fixer": {"marker": "careful-fixer-7c1e", "p_success": 1},
            "verbose-planner": {"marker": "verbose-planner-2b9d", "p_success": 1},
        },
        "tasks": {t: dict(scripts[t]) for t in TASKS},
    }


def _scripted_arms(out: Path) -> list[str]:
    lines = (out / "scripted-api.log").read_text().splitlines()
    events = [json.loads(x) for x in lines if x.startswith("{")]
    return [e["arm"] for e in events if e.get("event") == "reply" and "arm" in e]  # judge replies have no arm


def test_a_second_skill_reuses_the_first_skills_baseline(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    scen = _scenario(demo_setup.root)
    first, scen_a = write_experiment(demo_setup.root, "first", tasks=TASKS, runs=2, scenario=scen)
    a = run_experiment(engine, first, scen_a, tmp_path / "a", work_root, jobs=4)
    assert all(r.baseline_fingerprint for r in a.records if r.arm == "baseline")

    second, scen_b = write_experiment(
        demo_setup.root, "second", tasks=TASKS, runs=2, skill="verbose-planner", scenario=scen
    )
    b = run_experiment(engine, second, scen_b, tmp_path / "b", work_root, jobs=4, reuse_from=(tmp_path,))
    assert b.reused == 4 and b.ran == 4
    baseline = [r for r in b.records if r.arm == "baseline"]
    assert len(baseline) == 4 and all(r.reused_from is not None for r in baseline)
    assert {r.reused_from.experiment_id for r in baseline if r.reused_from} == {a.lock_hash[:12]}
    assert {r.provenance.lock_hash for r in b.records} == {b.lock_hash}
    by_id = latest(a)
    for r in baseline:
        orig = by_id[r.trial_id]
        assert (r.status, r.agent_cost_usd, r.verify, r.judge) == (
            orig.status,
            orig.agent_cost_usd,
            orig.verify,
            orig.judge,
        )
        for digest in r.artifacts.values():
            assert (tmp_path / "b" / "artifacts" / digest[:2] / digest).is_file()
    assert set(_scripted_arms(tmp_path / "b")) == {"skill"}, "no baseline conversation was sampled again"

    study_b = load_study(second)
    data = analyze_records(study_b, b.records, lock_hash=b.lock_hash, experiment_dir=tmp_path / "b")
    assert data.decision.verdict != "invalid"
    assert ReasonCode.PROVENANCE_MISMATCH not in {r.code for r in data.decision.reasons}
    assert data.spent_usd == pytest.approx(sum(r.total_cost_usd for r in b.records if r.arm == "skill"), abs=1e-12)

    # the same comparison with one reused trial from another image is invalid, not quietly accepted
    tampered = [
        r.model_copy(update={"provenance": r.provenance.model_copy(update={"image_digest": "sha256:other"})})
        if r.trial_id == baseline[0].trial_id
        else r
        for r in b.records
    ]
    bad = analyze_records(study_b, tampered, lock_hash=b.lock_hash, experiment_dir=tmp_path / "b")
    assert bad.decision.verdict == "invalid"

    # a baseline-relevant setting changed (the agent's deadline): nothing is reused, the baseline is sampled
    third, scen_c = write_experiment(
        demo_setup.root,
        "third",
        tasks=TASKS,
        runs=1,
        skill="verbose-planner",
        scenario=scen,
        extra={"execution": {"budgets": {"timeout_s": 119}}},
    )
    c = run_experiment(engine, third, scen_c, tmp_path / "c", work_root, jobs=4, reuse_from=(tmp_path / "a",))
    assert c.reused == 0 and c.ran == 4, "both arms of both tasks ran"
    assert all(r.reused_from is None for r in c.records)


def test_shards_run_apart_and_merge_into_one_gated_experiment(
    tmp_path: Path,
    engine: Engine,
    images: ImageSet,
    demo_setup: DemoSetup,
    work_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prereg, scen = write_experiment(demo_setup.root, "sharded", tasks=TASKS, scenario=_scenario(demo_setup.root))
    dirs = []
    for i in (1, 2):
        out = tmp_path / f"shard{i}"
        result = run_experiment(engine, prereg, scen, out, work_root, jobs=2, shard=ShardRef(i, 2))
        assert result.ran == 2 and {r.shard for r in result.records} == {f"{i}/2"}
        dirs.append(out)
    assert main(["merge", str(tmp_path / "merged"), *map(str, dirs)]) == 0
    merged = read_results(tmp_path / "merged" / "results.jsonl").records
    assert sorted(r.trial_id for r in merged) == sorted(f"{t}.{a}.0" for t in TASKS for a in ("baseline", "skill"))
    assert gate(tmp_path / "merged").exit_code in (0, 1, 2)
    assert "merged 2 shard(s), 4 result line(s)" in capsys.readouterr().out
    assert main(["merge", str(tmp_path / "half"), str(dirs[0])]) == 4, "a missing shard is refused"
