"""Library experiments on the real engine: real CLI, real containers, real git, scripted model.

One 4-skill library run (4 tasks x 2 samples = 8 pairs, 16 trials; one skill helps, one hurts, one
only costs, one is neutral) is shared by the tests of this module; the audits are then attacked by
editing copies of its results, which needs no model call.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.analysis import contributions
from harness.demo import prepare_demo
from harness.errors import ConfigError, LockError
from harness.experiment import library_plan as library
from harness.experiment.library import CONTRIBUTIONS_JSON, evaluate_library
from harness.experiment.options import RunOptions
from harness.host import gitops
from harness.plan import ShardRef
from harness.records import RESULTS, MountedSkill, TrialRecord
from harness.results.store import read_results
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import load_study
from harness.study.lock import lock
from tests.integration.helpers import host_paths

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASKS = ["fix-mean", "fix-median", "fix-slugify", "add-word-count"]
TRUTH = {"helpful": 0.45, "harmful": -0.45, "costly": 0.0, "neutral": 0.0}


def _write_library(
    setup: Path, name: str, *, baseline_from: str | None = None, base_ref: str = "HEAD"
) -> tuple[Path, Path]:
    lib = setup / "library"
    prereg: dict[str, Any] = {
        "skill": f"library-{name}",
        "library": {
            "path": "skills",
            # mask seed 3 and scenario seed 11: for these 8 pairs the scripted draws give the helpful and
            # the harmful skill their true sign (checked offline; about 91% of all draws would)
            "masks": {"inclusion_probability": 0.5, "balanced": True, "seed": 3},
            "top_k": 2,
            "selection": "positive",
            **({"baseline_from": baseline_from} if baseline_from else {}),
        },
        "tasks": "../demo/tasks.json",
        "target_tasks": TASKS,
        "execution": {
            "runs_per_arm": 2,
            "model": "sonnet",
            "judge_model": "haiku",
            "repo": "../demo/repo",
            "base_ref": base_ref,
            "seed": 3,
            "allowed_tools": ["Bash", "Edit", "Read"],
            "max_infra_retries": 1,
            "budgets": {
                "per_trial_usd": 0.5,
                "judge_usd": 0.05,
                "timeout_s": 240,
                "verify_timeout_s": 60,
                "judge_timeout_s": 60,
            },
        },
    }
    path = lib / f"prereg-{name}.yaml"
    path.write_text(yaml.safe_dump(prereg, sort_keys=False))
    lock(path, library_entries=library.lock_entries)
    scenario = yaml.safe_load((lib / "scenario.yaml").read_text())
    scenario["seed"] = 11
    scenario["tasks"] = {t: v for t, v in scenario["tasks"].items() if t in TASKS}
    scen = lib / f"scenario-{name}.yaml"
    scen.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path, scen


def _options(out: Path, scenario: Path, work_root: Path, **kw: Any) -> RunOptions:
    return RunOptions(
        out=out,
        jobs=2,
        scripted=scenario,
        paths=host_paths(work_root),
        host_slots=2,
        **kw,
    )


@pytest.fixture(scope="module")
def library_run(tmp_path_factory: pytest.TempPathFactory, engine: Engine, images: ImageSet) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("library")
    setup = prepare_demo(root / "demo")
    work = root / "work"
    work.mkdir()
    prereg, scen = _write_library(setup.root, "first")
    out = root / "results-first"
    assert evaluate_library(load_study(prereg), _options(out, scen, work))
    return {"setup": setup.root, "prereg": prereg, "scenario": scen, "out": out, "work": work, "root": root}


def _body(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / CONTRIBUTIONS_JSON).read_text())
    return data


def test_a_four_skill_library_recovers_the_helpful_and_the_harmful_skill(library_run: dict[str, Any]) -> None:
    body = _body(library_run["out"])
    primary = body["components"]["pass"]
    beta = {s["skill"]: s for s in primary["skills"]}
    assert beta["helpful"]["beta"] > 0 > beta["harmful"]["beta"]
    assert body["selection"]["selected"][0] == "helpful" and "harmful" not in body["selection"]["selected"]
    assert primary["intercept"] == 0.0 and primary["n"] == 8 and primary["n_boot"] >= 2000
    assert body["design"]["trials_planned"] == 16 and body["design"]["factorial_trials"] == 16 * 8
    # costly only costs: the largest coefficient on cost, none of its own on pass
    cost = {s["skill"]: s["beta"] for s in body["components"]["cost"]["skills"]}
    assert max(cost, key=cost.__getitem__) == "costly"
    assert set(body["components"]) == {"pass", "verify", "judge", "cost", "turns", "duration"}
    report = (library_run["out"] / "report.md").read_text()
    assert "helpful" in report and "not proof" in report
    html = (library_run["out"] / "report.html").read_text()
    assert "<svg" in html and "http://" not in html.replace("http://www.w3.org", "")
    ledger = yaml.safe_load((library_run["prereg"].parent / "skills-ledger.yaml").read_text())
    run = ledger["libraries"]["library-first"]["runs"][-1]
    assert run["coefficients"]["helpful"]["beta"] == pytest.approx(beta["helpful"]["beta"], abs=1e-6)
    assert run["coefficients"]["helpful"]["ci_low"] <= run["coefficients"]["helpful"]["beta"]


def test_each_masked_container_had_exactly_its_masks_skills(library_run: dict[str, Any]) -> None:
    study = load_study(library_run["prereg"])
    design = library.design(study)
    hashes = library.skill_hashes(study)
    records = {r.trial_id: r for r in read_results(library_run["out"] / RESULTS).records if r.is_outcome}
    for pair in design.pairs:
        masked = records[f"{pair.task_id}.masked.{pair.sample}"]
        bare = records[f"{pair.task_id}.baseline.{pair.sample}"]
        assert [s.name for s in masked.skills_mounted or ()] == sorted(pair.skills)
        assert all(s.sha256 == hashes[s.name] for s in masked.skills_mounted or ())
        assert bare.skills_mounted == ()
    # the scripted model read every mounted skill and found its marker (what the CLI sent back)
    log = [
        json.loads(x) for x in (library_run["out"] / "scripted-api.log").read_text().splitlines() if x.startswith("{")
    ]
    reads = [e for e in log if e.get("event") == "skill_read"]
    assert reads and all(e["ok"] for e in reads)
    assert len(reads) == sum(len(p.skills) for p in design.pairs)


def test_contributions_json_recomputes_exactly_from_its_rows(library_run: dict[str, Any]) -> None:
    body = _body(library_run["out"])
    for comp in body["components"].values():
        beta = contributions.recompute(comp, tol=1e-12)
        assert beta == tuple(s["beta"] for s in comp["skills"])


def _copy_run(library_run: dict[str, Any], name: str) -> Path:
    dest: Path = library_run["root"] / name
    shutil.copytree(library_run["out"], dest)
    return dest


def _rewrite(results: Path, change: Any) -> None:
    records = read_results(results).records
    results.write_text("".join(change(r).model_dump_json() + "\n" for r in records))


def test_the_audit_catches_a_tampered_record(library_run: dict[str, Any]) -> None:
    out = _copy_run(library_run, "tampered")
    target = next(r.trial_id for r in read_results(out / RESULTS).records if r.arm == "masked" and r.skills_mounted)

    def tamper(r: TrialRecord) -> TrialRecord:
        if r.trial_id != target:
            return r
        extra = MountedSkill(name="zz-extra", sha256="0" * 64)
        return r.model_copy(update={"skills_mounted": (*(r.skills_mounted or ()), extra)})

    _rewrite(out / RESULTS, tamper)
    study = load_study(library_run["prereg"])
    with pytest.raises(library.LibraryCheckError, match="audit of the injected skills failed") as e:
        evaluate_library(study, _options(out, library_run["scenario"], library_run["work"]))
    assert target in str(e.value)
    body = _body(out)
    assert body["status"] == "refused" and body["selection"] is None
    # positive control: the untampered copy analyses fine
    assert _body(library_run["out"])["selection"]["selected"]


def test_a_duplicate_completed_episode_is_refused(library_run: dict[str, Any]) -> None:
    out = _copy_run(library_run, "duplicate")
    records = read_results(out / RESULTS).records
    dup = next(r for r in records if r.arm == "baseline" and r.is_outcome)
    with open(out / RESULTS, "a") as fh:
        fh.write(dup.model_copy(update={"attempt": dup.attempt + 1}).model_dump_json() + "\n")
    study = load_study(library_run["prereg"])
    with pytest.raises(library.LibraryCheckError, match=f"{dup.trial_id}: 2 completed records for one episode"):
        evaluate_library(study, _options(out, library_run["scenario"], library_run["work"]))
    assert _body(out)["selection"] is None


def test_a_baseline_of_another_base_commit_is_refused_at_lock_naming_both(library_run: dict[str, Any]) -> None:
    """Issue 24 item 6: lock accepted it; eval refused 8 of 12 bare trials after the preflight with "not in
    the baseline (or its fingerprint or provenance differ)", exit 3, and a hint to rerun."""
    repo = library_run["setup"] / "demo" / "repo"
    head = gitops.resolve_commit(repo, "HEAD")
    tree = gitops.git(["rev-parse", "HEAD^{tree}"], cwd=repo).strip()
    other = gitops.git(["commit-tree", tree, "-p", head, "-m", "another base"], cwd=repo).strip()  # HEAD stays
    with pytest.raises(ConfigError) as e:
        _write_library(library_run["setup"], "other-base", baseline_from=str(library_run["out"]), base_ref=other)
    assert e.value.field == "library.baseline_from" and e.value.exit_code == 4
    assert f"8 of 8: base commit {head[:7]} -> {other[:7]}" in str(e.value)
    assert not (library_run["setup"] / "library" / "prereg-other-base.yaml.lock").exists()


def test_a_reused_baseline_that_changed_refuses_to_resume(library_run: dict[str, Any]) -> None:
    base = _copy_run(library_run, "baseline-source")
    setup = library_run["setup"]
    prereg, scen = _write_library(setup, "second", baseline_from=str(base))
    study = load_study(prereg)
    out = library_run["root"] / "results-second"
    # run one shard of the second experiment: its bare trials are all reused, only masked ones run
    assert evaluate_library(study, _options(out, scen, library_run["work"], shard=ShardRef(1, 4)))
    records = read_results(out / RESULTS).records
    assert records and all(r.reused_from is not None for r in records if r.arm == "baseline")
    assert any(r.arm == "baseline" for r in records)

    # the baseline data changes under the locked experiment (a bare verdict flips): resuming is refused
    def flip(r: TrialRecord) -> TrialRecord:
        if r.trial_id == "fix-mean.baseline.0" and r.judge is not None:
            verdict = "fail" if r.judge.verdict == "pass" else "pass"
            return r.model_copy(update={"judge": r.judge.model_copy(update={"verdict": verdict})})
        return r

    _rewrite(base / RESULTS, flip)
    with pytest.raises(LockError, match="library/baseline"):
        evaluate_library(load_study(prereg), _options(out, scen, library_run["work"], shard=ShardRef(1, 4)))
    assert read_results(out / RESULTS).records == records  # nothing ran
