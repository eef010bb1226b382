"""`skilltrial init`: the files it writes load, lock only once real tasks exist, and are never overwritten."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.errors import ConfigError
from harness.study.config import load_preregistration, load_tasks
from harness.study.scaffold import init


def _skill(root: Path) -> Path:
    skill = root / "skills" / "my-fixer"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: my-fixer\ndescription: fixes\n---\nReproduce first.\n")
    return skill


def test_init_writes_loadable_commented_files_next_to_the_skill(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    skill = _skill(tmp_path)
    assert main(["init", str(skill)], env={}) == 0
    tasks_path, prereg_path = skill.parent / "tasks.json", skill.parent / "preregistration.yaml"
    assert not (skill / "tasks.json").exists(), "nothing is written into the skill (it would be part of it)"
    tasks = load_tasks(tasks_path)
    assert tasks.comment and any("verify_cmd" in line for line in tasks.comment)
    assert tasks.runnable == (), "template prompts carry TODO: nothing runs until the user writes tasks"
    prereg = load_preregistration(prereg_path)
    assert prereg.skill == "my-fixer"
    assert prereg.skill_ref is not None
    assert (prereg_path.parent / prereg.skill_ref).resolve() == skill.resolve()
    assert (prereg_path.parent / prereg.execution.repo).resolve() == tmp_path.resolve()
    assert prereg.decision.rule == "interval"
    assert prereg.execution.budgets.total_usd is not None
    assert prereg.execution.judge_model != prereg.execution.model
    assert "# " in prereg_path.read_text(), "the preregistration is commented"
    assert "skilltrial lock" in capsys.readouterr().out


def test_init_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    skill = _skill(tmp_path)
    (skill.parent / "preregistration.yaml").write_text("mine\n")
    assert main(["init", str(skill)], env={}) == 4
    assert "already exists; skilltrial init never overwrites" in capsys.readouterr().err
    assert (skill.parent / "preregistration.yaml").read_text() == "mine\n"
    assert not (skill.parent / "tasks.json").exists()
    made = init(skill, tmp_path / "eval")  # positive control: elsewhere it writes
    assert made.prereg.is_file() and yaml.safe_load(made.prereg.read_text())["skill"] == "my-fixer"
    assert json.loads(made.tasks.read_text())["tasks"]


def test_init_needs_a_skill_folder_and_never_writes_into_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no SKILL\.md"):
        init(tmp_path)
    skill = _skill(tmp_path)
    with pytest.raises(ConfigError, match="inside the skill folder"):
        init(skill, skill)
