"""Library experiments without Docker: preregistration, design and plan, delivery, lock, pairing, audits."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness import __version__
from harness.analysis import contributions
from harness.analysis.masks import DesignError
from harness.errors import ConfigError, LockError
from harness.experiment import library_plan as library
from harness.host import gitops
from harness.plan import library_prefix, library_template_sha256, shard_of
from harness.records import (
    RESULTS,
    AgentResult,
    JudgeResult,
    MountedSkill,
    Provenance,
    TrialRecord,
    TrialStatus,
    VerifyResult,
)
from harness.sandbox.runtime import BindMount, ContainerSpec, Limits
from harness.study.config import library_skills, load_study, lock_path
from harness.study.lock import lock, skill_files, verify_lock
from harness.trial import delivery
from tests.factories import PROV, init_repo, provenance, trial_record, write_experiment_dir

SKILLS = ("alpha", "beta", "gamma")
TASKS = [{"id": f"t{i}", "prompt": f"Do task {i}.", "verify_cmd": "true"} for i in range(4)]


def _prereg(library_block: str, runs: int = 3, extra: str = "") -> str:
    return (
        "skill: lib\n"
        "tasks: tasks.json\n"
        f"library:\n{library_block}"
        f"execution:\n  runs_per_arm: {runs}\n  repo: repo\n  seed: 5\n{extra}"
    )


def make_library(
    root: Path,
    *,
    runs: int = 3,
    block: str = "  path: skills\n  masks: {balanced: true, seed: 3}\n  top_k: 2\n  selection: positive\n",
    skills: tuple[str, ...] = SKILLS,
    tasks: list[dict[str, Any]] | None = None,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "tasks.json").write_text(json.dumps({"tasks": tasks or TASKS}))
    for name in skills:
        (root / "skills" / name).mkdir(parents=True)
        (root / "skills" / name / "SKILL.md").write_text(f"# {name}\nmarker {name}\n")
    init_repo(root / "repo")
    prereg = root / "preregistration.yaml"
    prereg.write_text(_prereg(block, runs))
    return prereg


# ------------------------------------------------------------------- preregistration


def test_a_library_preregistration_loads_and_names_its_skills(tmp_path: Path) -> None:
    study = load_study(make_library(tmp_path))
    assert study.prereg.library is not None
    assert study.prereg.library.masks.inclusion_probability == 0.5
    assert library_skills(study) == SKILLS


def test_library_and_skill_ref_together_are_refused(tmp_path: Path) -> None:
    prereg = make_library(tmp_path)
    prereg.write_text("skill_ref: skills/alpha\n" + prereg.read_text())
    with pytest.raises(ConfigError) as e:
        load_study(prereg)
    assert e.value.field == "skill_ref"


def test_a_library_with_installed_delivery_is_refused(tmp_path: Path) -> None:
    """The masked arm names its skills in the prompt; the installed command line has no prefix, so its trials
    would run with skills mounted that they are never told about (and the mount audit would still pass)."""
    prereg = make_library(tmp_path)
    prereg.write_text(prereg.read_text() + "  delivery: installed\n")
    with pytest.raises(ConfigError) as e:
        load_study(prereg)
    assert e.value.field == "execution.delivery"
    assert "prompt delivery" in str(e.value)


def test_a_skill_folder_without_skill_md_is_named(tmp_path: Path) -> None:
    prereg = make_library(tmp_path)
    (tmp_path / "skills" / "delta").mkdir()
    with pytest.raises(ConfigError) as e:
        load_study(prereg)
    assert "delta" in str(e.value) and e.value.field == "library.path"


def test_components_must_include_the_primary_one(tmp_path: Path) -> None:
    prereg = make_library(tmp_path, block="  path: skills\n  components: [cost]\n")
    with pytest.raises(ConfigError) as e:
        load_study(prereg)
    assert e.value.field == "library.components"


# ----------------------------------------------------------------------- the design


def test_design_is_seeded_and_pairs_every_task_and_sample(tmp_path: Path) -> None:
    study = load_study(make_library(tmp_path))
    a, b = library.design(study), library.design(study)
    assert a == b
    assert [(p.task_id, p.sample) for p in a.pairs] == [(f"t{i}", s) for i in range(4) for s in range(3)]
    for p in a.pairs:
        assert p.skills == tuple(s for s, on in zip(SKILLS, p.mask, strict=True) if on)
    assert all(sum(col) == 6 for col in zip(*a.masks, strict=True))  # balanced: round(12 * 0.5)


def test_an_unidentifiable_design_is_refused_before_any_trial(tmp_path: Path) -> None:
    prereg = make_library(tmp_path, runs=1, tasks=TASKS[:2])  # 2 pairs for 3 skills
    study = load_study(prereg)
    with pytest.raises(DesignError, match="cannot identify 3 skills"):
        library.design(study)
    lines, ok = library.plan_lines(study)
    assert not ok and any("NOT IDENTIFIABLE" in x for x in lines)


def test_plan_lines_give_an_expected_se_per_coefficient(tmp_path: Path) -> None:
    lines, ok = library.plan_lines(load_study(make_library(tmp_path)), 0.5)
    assert ok
    text = "\n".join(lines)
    for name in SKILLS:
        assert name in text
    assert "condition number" in text and "2^3" in text


def test_plan_has_one_bare_and_one_masked_trial_per_pair_on_the_same_shard(tmp_path: Path) -> None:
    study = load_study(make_library(tmp_path))
    d = library.design(study)
    specs = library.plan_trials(d, seed=5)
    assert len(specs) == 2 * len(d.pairs)
    by_id = {s.trial_id: s for s in specs}
    for p in d.pairs:
        bare, masked = by_id[f"{p.task_id}.baseline.{p.sample}"], by_id[f"{p.task_id}.masked.{p.sample}"]
        assert bare.skills == () and bare.prompt == next(t for t in TASKS if t["id"] == p.task_id)["prompt"]
        assert masked.skills == tuple(sorted(p.skills))
        for n in (2, 3, 4):
            assert shard_of(bare, n) == shard_of(masked, n)


def test_the_masked_prompt_names_each_skill_in_a_stable_order() -> None:
    prefix = library_prefix(["gamma", "alpha"])
    assert prefix.index("/skills/alpha/SKILL.md") < prefix.index("/skills/gamma/SKILL.md")
    assert prefix == library_prefix(["alpha", "gamma"])
    assert "/skills/" not in library_prefix([])  # the all-zero mask: no skill named, still masked


# ------------------------------------------------------------------------- delivery


def test_mounted_skills_are_read_from_the_container_spec_with_content_hashes(tmp_path: Path) -> None:
    copies = {}
    for name in SKILLS:
        d = tmp_path / name
        d.mkdir()
        (d / "SKILL.md").write_text(f"body {name}\n")
        copies[name] = delivery.SkillCopy(f"hx-r-library-{name}", delivery.tree_sha256(d))
    mounts = delivery.mounts(["gamma", "alpha"], copies)
    assert [m.target for m in mounts] == ["/skills/alpha", "/skills/gamma"] and all(m.read_only for m in mounts)
    assert [m.volume for m in mounts] == ["hx-r-library-alpha", "hx-r-library-gamma"]
    spec = ContainerSpec(
        name="x",
        image="i",
        command=("true",),
        labels={},
        user="1:1",
        env={},
        mounts=(BindMount(tmp_path, "/workspace", read_only=False),),
        volumes=mounts,
        network="none",
        limits=Limits(),
    )
    got = delivery.mounted_skills(spec, copies)
    assert [s.name for s in got] == ["alpha", "gamma"], "what the spec mounts, not what the run holds"
    assert got[0].sha256 == library.files_sha256(skill_files(tmp_path / "alpha"))


# ----------------------------------------------------------------------------- lock


def test_the_lock_covers_the_estimator_and_the_masks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prereg = make_library(tmp_path)
    lock(prereg, library_entries=library.lock_entries)
    study = load_study(prereg)
    assert study.prereg.lock is not None
    assert {"library/estimator", "library/masks", "skill/alpha/SKILL.md"} <= set(study.prereg.lock.files)
    verify_lock(study, library.lock_entries)
    monkeypatch.setattr(contributions, "ESTIMATOR", "some-other-estimator/v2")
    with pytest.raises(LockError, match="library/estimator"):
        verify_lock(study, library.lock_entries)


def test_a_library_preregistration_is_not_locked_without_its_design(tmp_path: Path) -> None:
    """The library's lock entries come from layers above the lock, passed in: a caller that forgets them is
    refused, never given a lock that leaves out the masks and the estimator."""
    prereg = make_library(tmp_path)
    with pytest.raises(TypeError, match="library_entries"):
        lock(prereg)
    lock(prereg, library_entries=library.lock_entries)
    with pytest.raises(TypeError, match="library_entries"):
        verify_lock(load_study(prereg))


def test_a_changed_skill_file_breaks_the_lock(tmp_path: Path) -> None:
    prereg = make_library(tmp_path)
    lock(prereg, library_entries=library.lock_entries)
    (tmp_path / "skills" / "beta" / "SKILL.md").write_text("changed\n")
    with pytest.raises(LockError, match=re.escape("skill/beta/SKILL.md")):
        verify_lock(load_study(prereg), library.lock_entries)


def _bare_dir(root: Path, verdicts: dict[str, bool], prov: Provenance = PROV) -> Path:
    out = root / "baseline-run"
    out.mkdir()
    lines = []
    for tid, ok in verdicts.items():
        task, _, sample = tid.partition(".baseline.")
        lines.append(
            record(task, "baseline", int(sample), passed=ok).model_copy(update={"provenance": prov}).model_dump_json()
        )
    (out / RESULTS).write_text("\n".join(lines) + "\n")
    return out


def _library_provenance(repo: Path, **fields: Any) -> Provenance:
    """The provenance this harness gives a library run on ``repo``'s HEAD (``fields`` override)."""
    sha = gitops.resolve_commit(repo, "HEAD")
    base = {"base_sha": sha, "prompt_template_sha256": library_template_sha256(), "harness_version": __version__}
    return provenance(PROV, delivery="prompt", **{**base, **fields})


def _reusable_bare_dir(root: Path, prereg: Path, **prov: Any) -> Path:
    """Every planned bare trial of ``prereg`` (4 tasks x 3 samples), final and scorable, with the provenance
    this harness gives a library run of it (``prov`` overrides fields); ``baseline_from`` set to it."""
    out = _bare_dir(
        root,
        {f"t{i}.baseline.{s}": True for i in range(4) for s in range(3)},
        _library_provenance(root / "repo", **prov),
    )
    prereg.write_text(prereg.read_text().replace("  path: skills\n", "  path: skills\n  baseline_from: baseline-run\n"))
    return out


def test_a_baseline_of_another_base_commit_is_refused_at_lock_naming_both_commits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 item 6: lock accepted it, and eval refused 12 of 12 bare trials after the preflight with
    "not in the baseline (or its fingerprint or provenance differ)", exit 3."""
    from harness.cli import main

    prereg = make_library(tmp_path / "ok")
    _reusable_bare_dir(tmp_path / "ok", prereg)
    assert main(["lock", str(prereg)], env={}) == 0, capsys.readouterr().err  # positive control
    prereg = make_library(tmp_path / "other")
    _reusable_bare_dir(tmp_path / "other", prereg, base_sha="f604634" + "0" * 33)
    assert main(["lock", str(prereg)], env={}) == 4
    err = capsys.readouterr().err
    here = gitops.resolve_commit(tmp_path / "other" / "repo", "HEAD")
    assert "field 'library.baseline_from'" in err, err
    assert f"base commit f604634 -> {here[:7]}" in err, err
    assert "12 of 12" in err, err
    assert not lock_path(prereg).exists()


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("model", "opus", "model opus -> sonnet"),
        ("judge_model", "sonnet", "judge model sonnet -> haiku"),
        ("harness_version", "0.0.9", "harness version 0.0.9 -> "),
        ("prompt_template_sha256", "e" * 64, "prompt template eeeeeee -> "),
    ],
)
def test_every_field_lock_can_compare_is_named(tmp_path: Path, field: str, value: str, named: str) -> None:
    prereg = make_library(tmp_path)
    _reusable_bare_dir(tmp_path, prereg, **{field: value})
    with pytest.raises(ConfigError, match=re.escape(named)) as e:
        lock(prereg, library_entries=library.lock_entries)
    assert e.value.field == "library.baseline_from"


def test_a_changed_baseline_breaks_the_lock(tmp_path: Path) -> None:
    prereg = make_library(tmp_path)
    verdicts = {f"t{i}.baseline.{s}": True for i in range(4) for s in range(3)}
    prov = _library_provenance(tmp_path / "repo")
    base = _bare_dir(tmp_path, verdicts, prov)
    prereg.write_text(prereg.read_text().replace("  path: skills\n", "  path: skills\n  baseline_from: baseline-run\n"))
    lock(prereg, library_entries=library.lock_entries)
    study = load_study(prereg)
    assert study.prereg.lock is not None and "library/baseline" in study.prereg.lock.files
    verify_lock(study, library.lock_entries)
    verdicts["t2.baseline.1"] = False  # the baseline data changes after the lock
    (base / RESULTS).unlink()
    base.rmdir()
    _bare_dir(tmp_path, verdicts, prov)
    with pytest.raises(LockError, match="library/baseline"):
        verify_lock(load_study(prereg), library.lock_entries)


# ------------------------------------------------------------------ pairing and audits


def record(
    task: str,
    arm: Any,
    sample: int,
    *,
    passed: bool = True,
    status: TrialStatus = "completed",
    attempt: int = 1,
    skills: tuple[MountedSkill, ...] | None = (),
    cost: float = 0.01,
    turns: int = 3,
) -> TrialRecord:
    return trial_record(
        trial_id=f"{task}.{arm}.{sample}",
        task_id=task,
        arm=arm,
        run_index=sample,
        attempt=attempt,
        status=status,
        started_at="t",
        finished_at="t",
        durations_s={"agent": 10.0 + sample},
        agent=AgentResult(cost_usd=cost, num_turns=turns),
        verify=VerifyResult(exit_code=0 if passed else 1),
        judge=JudgeResult(verdict="pass" if passed else "fail"),
        skills_mounted=skills,
    )


def complete_records(study: Any, d: library.Design, effects: dict[str, float] | None = None) -> list[TrialRecord]:
    """Every planned pair with a bare and a masked record whose mounts match the mask."""
    hashes = library.skill_hashes(study)
    effects = effects or {"alpha": 1.0}
    out = []
    for p in d.pairs:
        bare_pass = False  # additive truth: the masked trial passes exactly when a helpful skill is in it
        masked_pass = any(effects.get(s, 0) > 0 for s in p.skills)
        mounted = tuple(MountedSkill(name=s, sha256=hashes[s]) for s in sorted(p.skills))
        out.append(record(p.task_id, "baseline", p.sample, passed=bare_pass))
        out.append(record(p.task_id, "masked", p.sample, passed=masked_pass, skills=mounted, turns=3 + len(p.skills)))
    return out


@pytest.fixture
def lib(tmp_path: Path) -> tuple[Any, library.Design]:
    study = load_study(make_library(tmp_path))
    return study, library.design(study)


def test_a_complete_library_run_is_analysed_and_selects(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    res = library.analyze(study, d, complete_records(study, d))
    assert set(res.fits) == {"pass", "verify", "judge", "cost", "turns", "duration"}
    beta = {e.skill: e.beta for e in res.fits["pass"].estimates}
    assert beta["alpha"] > 0 and res.selected[0] == "alpha"
    turns = {e.skill: e.beta for e in res.fits["turns"].estimates}
    assert all(turns[s] == pytest.approx(1.0) for s in SKILLS)  # each skill read is one more turn
    assert beta["alpha"] == pytest.approx(1.0) and beta["beta"] == pytest.approx(0.0, abs=1e-9)
    assert res.paired == len(d.pairs)


def test_a_retried_infra_failure_is_fine(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = complete_records(study, d)
    first = records[0]
    records.insert(0, first.model_copy(update={"status": "infra_error", "attempt": 1}))
    records[1] = first.model_copy(update={"attempt": 2})
    library.analyze(study, d, records)


def test_two_completed_records_for_one_episode_are_refused(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = complete_records(study, d)
    records.append(records[3].model_copy(update={"attempt": 2}))
    with pytest.raises(library.LibraryCheckError, match="2 completed records for one episode"):
        library.analyze(study, d, records)


def test_a_masked_record_without_its_bare_partner_is_an_error(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = [r for r in complete_records(study, d) if r.trial_id != "t1.baseline.2"]
    with pytest.raises(library.LibraryCheckError, match="t1/2: the masked trial has no bare partner"):
        library.analyze(study, d, records)


def test_a_bare_reused_from_another_sample_is_an_error(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = complete_records(study, d)
    i = next(i for i, r in enumerate(records) if r.trial_id == "t0.baseline.1")
    records[i] = records[i].model_copy(update={"run_index": 0})  # sample 0's bare standing in for sample 1
    with pytest.raises(
        library.LibraryCheckError, match=re.escape("t0.baseline.1: the record says task 't0', sample 0")
    ):
        library.analyze(study, d, records)


def test_an_unscorable_bare_trial_is_an_error(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = complete_records(study, d)
    i = next(i for i, r in enumerate(records) if r.trial_id == "t3.baseline.0")
    records[i] = records[i].model_copy(update={"judge": None, "verify": VerifyResult(exit_code=0)})  # unknown
    with pytest.raises(library.LibraryCheckError, match=re.escape("t3.baseline.0: the bare trial is not scorable")):
        library.analyze(study, d, records)


def test_different_provenance_is_an_error(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = complete_records(study, d)
    records[5] = records[5].model_copy(update={"provenance": PROV.model_copy(update={"model": "opus"})})
    with pytest.raises(library.LibraryCheckError, match="differ in model"):
        library.analyze(study, d, records)


def test_the_audit_catches_a_masked_trial_whose_skills_differ_from_its_mask(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = complete_records(study, d)
    i = next(i for i, r in enumerate(records) if r.arm == "masked" and r.skills_mounted)
    mounted = records[i].skills_mounted
    assert mounted is not None
    records[i] = records[i].model_copy(update={"skills_mounted": mounted[1:]})
    with pytest.raises(library.LibraryCheckError, match="audit of the injected skills failed"):
        library.analyze(study, d, records)


def test_the_audit_catches_a_mounted_copy_that_differs_from_the_locked_files(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = complete_records(study, d)
    i = next(i for i, r in enumerate(records) if r.arm == "masked" and r.skills_mounted)
    bad = tuple(MountedSkill(name=s.name, sha256="0" * 64) for s in records[i].skills_mounted or ())
    records[i] = records[i].model_copy(update={"skills_mounted": bad})
    with pytest.raises(library.LibraryCheckError, match="differs from the locked files"):
        library.analyze(study, d, records)


def test_a_bare_trial_with_skills_mounted_fails_the_audit(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = complete_records(study, d)
    hashes = library.skill_hashes(study)
    records[0] = records[0].model_copy(update={"skills_mounted": (MountedSkill(name="alpha", sha256=hashes["alpha"]),)})
    with pytest.raises(library.LibraryCheckError, match="its mask is \\[\\]"):
        library.analyze(study, d, records)


def test_an_incomplete_component_gives_no_selection(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = complete_records(study, d)
    records[2] = records[2].model_copy(update={"agent": AgentResult(cost_usd=0.01, num_turns=None)})
    with pytest.raises(library.LibraryCheckError, match="component 'turns' is not complete"):
        library.analyze(study, d, records)


def test_a_missing_pair_is_a_coverage_error(lib: tuple[Any, library.Design]) -> None:
    study, d = lib
    records = [r for r in complete_records(study, d) if not r.trial_id.startswith("t2.") or r.run_index != 1]
    with pytest.raises(library.LibraryCheckError, match="t2/1: neither trial has a record"):
        library.analyze(study, d, records)


def test_the_all_zero_mask_is_kept_as_an_observation(tmp_path: Path) -> None:
    # seed chosen so that the Bernoulli draw contains an all-zero mask
    study = None
    for seed in range(200):
        root = tmp_path / f"s{seed}"
        prereg = make_library(root, block=f"  path: skills\n  masks: {{seed: {seed}}}\n")
        study = load_study(prereg)
        try:
            d = library.design(study)
        except DesignError:
            continue
        if any(not any(m) for m in d.masks):
            break
    else:
        pytest.skip("no seed drew an all-zero mask")
    res = library.analyze(study, d, complete_records(study, d))
    assert res.fits["pass"].n == len(d.pairs)
    zero = [o for o in res.fits["pass"].observations if not any(o.mask)]
    assert zero and all(o.masked - o.bare == o.delta for o in zero)


def test_one_tasks_trials_in_consecutive_rounds_never_start_back_to_back(tmp_path: Path) -> None:
    study = load_study(make_library(tmp_path, runs=6))
    specs = library.plan_trials(library.design(study), seed=1)
    for a, b in zip(specs, specs[2:], strict=False):
        if a.round != b.round:
            assert a.task.id != b.task.id
    for a, b in itertools.pairwise(specs):
        if a.round != b.round:
            assert a.task.id != b.task.id


def test_harness_plan_prints_the_sizing_and_refuses_an_unidentifiable_design(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    assert main(["plan", str(make_library(tmp_path / "ok"))]) == 0
    out = capsys.readouterr().out
    assert "expected SE per coefficient" in out and "identifiable" in out
    bad = make_library(tmp_path / "bad", runs=1, tasks=TASKS[:2])
    assert main(["plan", str(bad)]) == 4
    assert "NOT IDENTIFIABLE" in capsys.readouterr().out


def test_plan_sizes_an_ab_preregistration_and_keeps_each_kinds_options_apart(
    tmp_path: Path, make_study: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An A/B preregistration gets the A/B sizing (tests/unit/test_ab_plan.py), not a library's; the options of
    one kind are refused by name on the other."""
    from harness.cli import main

    files = make_study()
    assert main(["plan", str(files.prereg)]) == 0
    assert "A/B sizing" in capsys.readouterr().out
    assert main(["plan", str(files.prereg), "--sigma-delta", "0.5"]) == 4
    assert "--sigma-delta" in capsys.readouterr().err
    assert main(["plan", str(make_library(tmp_path / "ok")), "--baseline-rate", "0.5"]) == 4
    assert "--baseline-rate" in capsys.readouterr().err


def _experiment_dir(tmp_path: Path, study: Any, records: list[TrialRecord]) -> Path:
    assert study.prereg.lock is not None
    meta = {"lock_hash": study.prereg.lock.sha256, "preregistration": str(study.prereg_path)}
    return write_experiment_dir(tmp_path / "exp", meta, records)


def library_dir(tmp_path: Path) -> tuple[Any, list[TrialRecord], Path]:
    """A locked library study under ``tmp_path/lib`` and a complete experiment directory of it (``tmp_path/exp``)."""
    prereg = make_library(tmp_path / "lib")
    lock(prereg, library_entries=library.lock_entries)
    study = load_study(prereg)
    records = complete_records(study, library.design(study))
    return study, records, _experiment_dir(tmp_path, study, records)


def test_harness_report_rerenders_a_library_directory_and_refuses_a_tampered_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    study, records, out = library_dir(tmp_path)
    prereg = study.prereg_path
    assert main(["report", str(out)]) == 0
    body = json.loads((out / "contributions.json").read_text())
    assert body["selection"]["selected"][0] == "alpha"
    assert contributions.recompute(body["components"]["pass"]) == tuple(
        s["beta"] for s in body["components"]["pass"]["skills"]
    )
    assert (out / "report.html").read_text().count("<svg") >= 1 and "alpha" in (out / "report.md").read_text()
    assert not (prereg.parent / "skills-ledger.yaml").exists()  # re-rendering never touches the ledger
    capsys.readouterr()
    i = next(i for i, r in enumerate(records) if r.arm == "masked" and r.skills_mounted)
    records[i] = records[i].model_copy(update={"skills_mounted": ()})
    (out / RESULTS).write_text("".join(r.model_dump_json() + "\n" for r in records))
    assert main(["report", str(out)]) == library.LibraryCheckError.exit_code
    assert "audit of the injected skills failed" in capsys.readouterr().err
    body = json.loads((out / "contributions.json").read_text())
    assert body["status"] == "refused" and body["selection"] is None


def test_a_reused_baseline_must_cover_the_plan_before_any_model_call(tmp_path: Path) -> None:
    from harness.experiment.library import LibraryExperiment
    from harness.experiment.options import RunOptions

    prereg = make_library(tmp_path)
    _bare_dir(tmp_path, {"t0.baseline.0": True})
    prereg.write_text(prereg.read_text().replace("  path: skills\n", "  path: skills\n  baseline_from: baseline-run\n"))
    study = load_study(prereg)
    d = library.design(study)
    exp = LibraryExperiment(study, None, RunOptions(out=tmp_path / "out", jobs=1), design=d)
    specs = exp.plan_specs()
    bare = [record(s.task.id, "baseline", s.run_index) for s in specs if s.arm == "baseline"]
    exp.preflight(specs, bare, PROV)  # positive control: every planned bare trial, final and scorable
    with pytest.raises(library.LibraryCheckError, match=re.escape("t3.baseline.2: not in the baseline")):
        exp.preflight(specs, [r for r in bare if r.trial_id != "t3.baseline.2"], PROV)
    unknown = [
        r.model_copy(update={"judge": None, "verify": None}) if r.trial_id == "t1.baseline.0" else r for r in bare
    ]
    with pytest.raises(library.LibraryCheckError, match=re.escape("t1.baseline.0: the bare trial is not final")):
        exp.preflight(specs, unknown, PROV)
    with pytest.raises(library.LibraryCheckError, match="provenance differs"):
        exp.preflight(specs, bare, PROV.model_copy(update={"cli_version": "2.2.0"}))


def test_eval_refuses_a_baseline_of_another_cli_version_before_any_container(tmp_path: Path) -> None:
    """What lock cannot see (the Claude Code version, the images) eval compares before the preflight or
    any trial starts a container: exit 4, the field and both values named (issue 24 item 6)."""
    import dataclasses

    from harness.experiment.library import LibraryExperiment
    from harness.experiment.options import RunOptions
    from harness.host.paths import HostPaths
    from harness.sandbox.images import CLAUDE_CODE_VERSION
    from tests.fakes import FakeRuntime

    prereg = make_library(tmp_path)
    _reusable_bare_dir(tmp_path, prereg, cli_version="2.0.1")
    lock(prereg, library_entries=library.lock_entries)  # lock does not know the CLI version
    study = load_study(prereg)
    paths = dataclasses.replace(HostPaths.from_env({}), work_root=tmp_path / "work", slots_dir=tmp_path / "slots")
    options = RunOptions(
        out=tmp_path / "out", jobs=1, paths=paths, reuse_from=(tmp_path / "baseline-run",), api_key="sk-ant-test-lib"
    )
    runtime = FakeRuntime(images=["debian:bookworm-slim"])  # the base image is there: nothing to debootstrap
    exp = LibraryExperiment(study, runtime, options, design=library.design(study))
    with pytest.raises(ConfigError) as e:
        exp.run()
    assert e.value.field == "library.baseline_from" and e.value.exit_code == 4
    assert f"12 of 12: Claude Code version 2.0.1 -> {CLAUDE_CODE_VERSION}" in str(e.value)
    started = [c for c in runtime.calls if c.method in ("create", "run", "start", "create_volume")]
    assert started == [], f"a container or volume was made before the refusal: {started[:3]}"


def test_reuse_outside_the_locked_baseline_from_is_refused(tmp_path: Path) -> None:
    from harness.experiment.library import evaluate_library
    from harness.experiment.options import RunOptions

    prereg = make_library(tmp_path)
    lock(prereg, library_entries=library.lock_entries)
    options = RunOptions(out=tmp_path / "out", jobs=1, reuse_from=(tmp_path / "elsewhere",))
    with pytest.raises(ConfigError) as e:
        evaluate_library(load_study(prereg), options)
    assert e.value.field == "library.baseline_from"


def test_library_shards_merge_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main
    from harness.plan import shard_of

    prereg = make_library(tmp_path / "lib")
    lock(prereg, library_entries=library.lock_entries)
    study = load_study(prereg)
    assert study.prereg.lock is not None
    d = library.design(study)
    prov = PROV.model_copy(update={"lock_hash": study.prereg.lock.sha256})
    records = [r.model_copy(update={"provenance": prov}) for r in complete_records(study, d)]
    specs = {s.trial_id: s for s in library.plan_trials(d, study.prereg.execution.seed)}
    dirs = []
    for i in (1, 2):
        meta = {"lock_hash": study.prereg.lock.sha256, "preregistration": str(prereg), "shard": f"{i}/2"}
        mine = [r for r in records if shard_of(specs[r.trial_id], 2) == i]
        dirs.append(write_experiment_dir(tmp_path / f"shard{i}", meta, mine))
    merged = tmp_path / "merged"
    assert main(["merge", str(merged), *map(str, dirs)]) == 0
    body = json.loads((merged / "contributions.json").read_text())
    assert body["selection"]["selected"][0] == "alpha" and body["components"]["pass"]["n"] == len(d.pairs)
    assert main(["merge", str(tmp_path / "half"), str(dirs[0])]) != 0  # one shard alone is incomplete
    assert "no final record" in capsys.readouterr().err
    from harness.results.merge import merge

    with pytest.raises(TypeError, match="library_plan"):  # the planner is passed in (it sits above results)
        merge(tmp_path / "unplanned", dirs)


# ------------------------------------------------------------------------------ splits (issue 28 item 3)

SPLIT_TASKS = [
    {"id": f"t{i}", "prompt": f"Do task {i}.", "verify_cmd": "true", "split": "val" if i < 4 else "test"}
    for i in range(6)
]


def _split_library(root: Path, split: str | None = "val") -> Any:
    prereg = make_library(root, tasks=SPLIT_TASKS)
    if split is not None:
        prereg.write_text(prereg.read_text() + f"split: {split}\n")
    return load_study(prereg)


def test_the_design_and_the_estimate_use_the_preregistered_split_only(tmp_path: Path) -> None:
    study = _split_library(tmp_path)
    d = library.design(study)
    assert {p.task_id for p in d.pairs} == {"t0", "t1", "t2", "t3"}
    assert {p.split for p in d.pairs} == {"val"}
    records = [r.model_copy(update={"split": "val"}) for r in complete_records(study, d)]
    res = library.analyze(study, d, records)  # positive control: pairs within the split
    assert res.paired == len(d.pairs) == 12
    # a trial of the held-out split in the results is not part of this estimate: refused, never folded in
    stray = record("t4", "baseline", 0).model_copy(update={"split": "test"})
    with pytest.raises(library.LibraryCheckError, match=re.escape("no planned (task, sample) pair t4/0")):
        library.analyze(study, d, [*records, stray])


def test_a_pair_across_splits_is_refused_naming_the_file_and_the_field(tmp_path: Path) -> None:
    study = _split_library(tmp_path)
    d = library.design(study)
    records = [r.model_copy(update={"split": "val"}) for r in complete_records(study, d)]
    i = next(i for i, r in enumerate(records) if r.trial_id == "t2.baseline.1")
    records[i] = records[i].model_copy(update={"split": "test"})
    with pytest.raises(library.LibraryCheckError) as e:
        library.analyze(study, d, records)
    msg = str(e.value)
    assert "a pair would cross splits" in msg
    assert "t2.baseline.1: the bare trial's field split is 'test' in results.jsonl" in msg
    assert "task 't2' is in split 'val' of tasks.json" in msg
    # a record of an older harness (no split) does not pair with a task that has one either
    records[i] = records[i].model_copy(update={"split": None})
    with pytest.raises(library.LibraryCheckError, match=re.escape("field split is None in results.jsonl")):
        library.analyze(study, d, records)


def test_a_reused_bare_trial_of_another_split_is_refused_before_any_model_call(tmp_path: Path) -> None:
    prereg = make_library(tmp_path, tasks=SPLIT_TASKS[:4])
    out = _reusable_bare_dir(tmp_path, prereg)
    lines = (out / RESULTS).read_text().splitlines()
    (out / RESULTS).write_text("".join(line.replace('"split":null', '"split":"val"') + "\n" for line in lines))
    lock(prereg, library_entries=library.lock_entries)  # positive control: every bare trial in split val
    lock_path(prereg).unlink()
    (out / RESULTS).write_text(
        "".join(
            line.replace('"split":null', '"split":"test"' if '"t1.baseline.2"' in line else '"split":"val"') + "\n"
            for line in lines
        )
    )
    with pytest.raises(ConfigError, match=re.escape("split 'test' there, 'val' here")) as e:
        lock(prereg, library_entries=library.lock_entries)
    assert e.value.field == "library.baseline_from"


def test_a_split_no_target_task_is_in_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("no target task of tasks.json is in split 'holdout'")) as e:
        _split_library(tmp_path, "holdout")
    assert e.value.field == "split"
    assert "'test', 'val'" in (e.value.hint or "")


def test_tasks_without_split_lock_as_before(tmp_path: Path) -> None:
    """A field added after the first locks counts only when set: an existing lock stays valid."""
    from harness.study.lock import lock_digest

    study = load_study(make_library(tmp_path / "a"))
    tasks = study.task_file.model_dump(mode="json")
    assert all(t["split"] is None for t in tasks["tasks"])
    files = lock_digest(study, "0" * 40, library_entries=lambda s, b: {}).files
    from harness.study.lock import canonical_json, sha256_hex

    for t in tasks["tasks"]:
        t.pop("split")
    assert files["tasks"] == sha256_hex(canonical_json(tasks))
