"""``skilltrial confirm`` without Docker (issue 28 item 3): the selection recomputed from a library run, the
derived preregistration written and locked before any trial, the held-out check, reruns and refusals."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.errors import ConfigError, HarnessError
from harness.experiment import confirm
from harness.experiment import library_plan as library
from harness.experiment.options import RunOptions
from harness.study.config import load_study, lock_path
from harness.study.lock import lock, verify_lock
from tests.factories import write_experiment_dir
from tests.unit.test_library import complete_records, make_library

SPLIT_TASKS = [
    {"id": f"t{i}", "prompt": f"Do task {i}.", "verify_cmd": "true", "split": "val" if i < 4 else "test"}
    for i in range(6)
]


def library_run(tmp_path: Path, split: str | None = "val", effects: dict[str, float] | None = None) -> tuple[Any, Path]:
    """A locked library study (4 val tasks, 2 test tasks) and a complete run of it in ``tmp_path/exp``."""
    prereg = make_library(tmp_path / "lib", tasks=SPLIT_TASKS)
    if split is not None:
        prereg.write_text(prereg.read_text() + f"split: {split}\n")
    lock(prereg, library_entries=library.lock_entries)
    study = load_study(prereg)
    splits = {t["id"]: t["split"] for t in SPLIT_TASKS}
    records = [
        r.model_copy(update={"split": splits[r.task_id]})
        for r in complete_records(study, library.design(study), effects)
    ]
    assert study.prereg.lock is not None
    meta = {"lock_hash": study.prereg.lock.sha256, "preregistration": str(study.prereg_path)}
    return study, write_experiment_dir(tmp_path / "exp", meta, records)


def test_the_selection_is_recomputed_and_the_derived_preregistration_locked_before_any_trial(tmp_path: Path) -> None:
    lib, run = library_run(tmp_path)
    study, selected, lock_hash = confirm.selected_set(run)
    assert selected == ("alpha",) and lock_hash == lib.prereg.lock.sha256
    derived = confirm.write_and_lock(study, selected, lock_hash, "test", run)
    assert derived.prereg_path.name == "preregistration-confirm-test.yaml"
    assert lock_path(derived.prereg_path).is_file()
    verify_lock(derived)
    sel = derived.prereg.selection
    assert sel is not None and sel.skills == ("alpha",) and sel.library_lock == lock_hash
    assert derived.prereg.split == "test" and [t.id for t in derived.target_tasks()] == ["t4", "t5"]
    assert derived.prereg.skill == "lib-confirm" and derived.prereg.on_rejection == "keep"
    # the lock covers the library's skills: editing one after the lock is a changed experiment
    assert any(k.startswith("skill/alpha/") for k in derived.prereg.lock.files)  # type: ignore[union-attr]
    # a rerun finds the same preregistration, locked, and resumes it
    again = confirm.write_and_lock(study, selected, lock_hash, "test", run)
    assert again.prereg.lock == derived.prereg.lock


def test_a_split_the_estimate_used_is_not_held_out(tmp_path: Path) -> None:
    lib, run = library_run(tmp_path)
    study, selected, lock_hash = confirm.selected_set(run)
    with pytest.raises(ConfigError, match=re.escape("split 'val' holds task(s) the library's estimate used")) as e:
        confirm.write_and_lock(study, selected, lock_hash, "val", run)
    assert str(e.value).startswith("--split: ")
    assert not list(lib.root.glob("*-confirm-*")), "a refused confirmation leaves no preregistration behind"


def test_a_library_without_a_split_has_nothing_held_out(tmp_path: Path) -> None:
    _, run = library_run(tmp_path, split=None)
    study, selected, lock_hash = confirm.selected_set(run)
    with pytest.raises(ConfigError, match="not held out"):
        confirm.write_and_lock(study, selected, lock_hash, "test", run)


def test_nothing_selected_is_nothing_to_confirm(tmp_path: Path) -> None:
    _, run = library_run(tmp_path, effects={"alpha": 0.0})
    with pytest.raises(HarnessError, match="selected no skill"):
        confirm.selected_set(run)


def test_another_confirmation_under_the_same_name_is_refused(tmp_path: Path) -> None:
    _lib, run = library_run(tmp_path)
    study, selected, lock_hash = confirm.selected_set(run)
    path = confirm.write_and_lock(study, selected, lock_hash, "test", run).prereg_path
    with pytest.raises(ConfigError, match="confirms another library run") as e:
        confirm.write_and_lock(study, ("alpha", "beta"), lock_hash, "test", run)
    assert e.value.field == "selection"
    assert yaml.safe_load(path.read_text())["selection"]["skills"] == ["alpha"]


def test_a_selection_preregistration_is_checked_like_any_input(tmp_path: Path) -> None:
    _lib, run = library_run(tmp_path)
    study, selected, lock_hash = confirm.selected_set(run)
    path = confirm.write_and_lock(study, selected, lock_hash, "test", run).prereg_path
    data = yaml.safe_load(path.read_text())
    data["selection"]["skills"] = ["alpha", "nosuch"]
    bad = path.with_name("bad.yaml")
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="does not exist") as e:
        load_study(bad)
    assert e.value.field == "selection.skills[1]"
    data["selection"]["skills"] = ["alpha"]
    data["skill_ref"] = "skills/alpha"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as e2:
        load_study(bad)
    assert e2.value.field == "skill_ref"


def test_the_plan_gives_the_skill_arm_the_whole_set_as_a_masked_arm(tmp_path: Path) -> None:
    from harness.experiment.experiment import Experiment
    from harness.plan import LIBRARY_PREFIX_HEAD, library_template_sha256

    lib, run = library_run(tmp_path)
    study, selected, lock_hash = confirm.selected_set(run)
    derived = confirm.write_and_lock(study, selected, lock_hash, "test", run)
    exp = Experiment(derived, None, RunOptions(out=tmp_path / "out", jobs=1))
    specs = exp.plan_specs()
    skill = [s for s in specs if s.arm == "skill"]
    assert skill and all(s.treated_as == "masked" and s.skills == ("alpha",) for s in skill)
    assert all(s.prompt.startswith(LIBRARY_PREFIX_HEAD) and "/skills/alpha/SKILL.md" in s.prompt for s in skill)
    assert all(s.prompt == s.task.prompt for s in specs if s.arm == "baseline")
    assert exp.prompt_template_sha256() == library_template_sha256()
    import shutil

    shutil.copytree(lib.skill_dir, tmp_path / "runroot" / "skill")  # stands for the run's checked copy
    copies = exp.library_copies(tmp_path / "runroot")  # only the selected skills, from that copy
    assert set(copies) == {"alpha"} and (copies["alpha"] / "SKILL.md").read_text().startswith("# alpha")
