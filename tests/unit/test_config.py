"""harness.study.config: every kind of bad input becomes one ConfigError naming the file and the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.errors import ConfigError, HarnessError
from harness.study.config import (
    Execution,
    Task,
    load_preregistration,
    load_study,
    load_tasks,
    parse_preregistration,
    parse_tasks,
)
from tests.factories import DEFAULT_PREREG, StudyFactory


def config_error(fn: Callable[..., object], *args: object) -> ConfigError:
    """Call ``fn`` and return the single ConfigError it raises (no chained cause)."""
    with pytest.raises(ConfigError) as info:
        fn(*args)
    err = info.value
    # one error: nothing chained that would print as "During handling of the above exception..."
    assert err.__cause__ is None
    assert err.__context__ is None or err.__suppress_context__
    assert err.exit_code == 4
    assert isinstance(err, HarnessError)
    return err


# ------------------------------------------------------------------------------ tasks.json


def test_valid_tasks_file_parses_and_separates_todo(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(
        json.dumps(
            {
                "tasks": [
                    {"id": "a", "prompt": "do a", "verify_cmd": "true", "protected_paths": ["tests", "src/x.py"]},
                    {"id": "b", "prompt": "TODO later"},
                ]
            }
        )
    )
    tf = load_tasks(path)
    assert [t.id for t in tf.runnable] == ["a"]
    assert [t.id for t in tf.skipped] == ["b"]
    assert tf.by_id()["a"].protected_paths == ("tests", "src/x.py")
    assert tf.tasks[1].is_todo and not tf.tasks[0].is_todo


def test_malformed_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text('{\n  "tasks": [\n    {"id": "a",}\n  ]\n}\n')
    err = config_error(load_tasks, path)
    assert str(path) in str(err)
    assert "malformed JSON" in str(err)
    assert "line 3" in str(err) and "column" in str(err)


def test_tasks_top_level_not_an_object(tmp_path: Path) -> None:
    err = config_error(parse_tasks, tmp_path / "t.json", "[1, 2]")
    assert err.field == "(top level)"
    assert "t.json" in str(err)


@pytest.mark.parametrize(
    ("task", "field", "words"),
    [
        ({"id": "a", "prompt": "x", "verify_cmd": "true", "verfy": "typo"}, "tasks[0].verfy", "unknown field"),
        ({"id": "a", "verify_cmd": "true"}, "tasks[0].prompt", "required field is missing"),
        ({"id": "a", "prompt": "x"}, "tasks[0].verify_cmd", "empty verify_cmd"),
        ({"id": "a", "prompt": "x", "verify_cmd": "   "}, "tasks[0].verify_cmd", "empty verify_cmd"),
        ({"id": "bad id!", "prompt": "x", "verify_cmd": "true"}, "tasks[0].id", "letters, digits"),
        ({"id": "a", "prompt": "x", "verify_cmd": "true", "timeout_s": 0}, "tasks[0].timeout_s", "greater than"),
    ],
)
def test_bad_task_field_is_named(tmp_path: Path, task: dict[str, object], field: str, words: str) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"tasks": [task]}))
    err = config_error(load_tasks, path)
    assert err.field == field
    assert err.path == str(path)
    assert f"{path}: field '{field}'" in str(err)
    assert words in str(err)


def test_verify_cmd_empty_on_second_task_points_at_index(tmp_path: Path) -> None:
    tasks = [
        {"id": "a", "prompt": "x", "verify_cmd": "true"},
        {"id": "b", "prompt": "TODO: fine without verify"},
        {"id": "c", "prompt": "real task", "verify_cmd": ""},
    ]
    err = config_error(parse_tasks, tmp_path / "tasks.json", json.dumps({"tasks": tasks}))
    assert err.field == "tasks[2].verify_cmd"
    assert "'c'" in str(err)


def test_duplicate_task_ids(tmp_path: Path) -> None:
    tasks = [
        {"id": "a", "prompt": "x", "verify_cmd": "true"},
        {"id": "b", "prompt": "y", "verify_cmd": "true"},
        {"id": "a", "prompt": "z", "verify_cmd": "true"},
    ]
    err = config_error(parse_tasks, tmp_path / "tasks.json", json.dumps({"tasks": tasks}))
    assert err.field == "tasks[2].id"
    assert "duplicate" in str(err)


def test_no_tasks_at_all(tmp_path: Path) -> None:
    err = config_error(parse_tasks, tmp_path / "tasks.json", '{"tasks": []}')
    assert err.field == "tasks"


@pytest.mark.parametrize("bad", ["../secret", "/etc/passwd", ".git/config", ".git", "a/../../b", ""])
def test_bad_protected_paths(tmp_path: Path, bad: str) -> None:
    tasks = [{"id": "a", "prompt": "x", "verify_cmd": "true", "protected_paths": ["tests", bad]}]
    err = config_error(parse_tasks, tmp_path / "tasks.json", json.dumps({"tasks": tasks}))
    assert err.field == "tasks[0].protected_paths"
    assert "relative path" in str(err)


def test_good_protected_paths_accepted() -> None:
    t = Task(id="a", prompt="x", verify_cmd="true", protected_paths=("tests/", "src/a.py", "docs/.gitkeep"))
    assert t.protected_paths[0] == "tests/"


def test_several_problems_are_counted_in_one_error(tmp_path: Path) -> None:
    tasks = [{"id": "a", "prompt": "x", "verify_cmd": "true", "foo": 1, "bar": 2}]
    err = config_error(parse_tasks, tmp_path / "tasks.json", json.dumps({"tasks": tasks}))
    assert "and 1 more problem" in str(err)


def test_task_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_bytes(b'{"tasks": "\xff\xfe"}')
    err = config_error(load_tasks, path)
    assert "UTF-8" in str(err)


def test_task_file_is_a_directory(tmp_path: Path) -> None:
    err = config_error(load_tasks, tmp_path)
    assert "directory" in str(err)


# ------------------------------------------------------------------------ preregistration


def test_minimal_preregistration_defaults(tmp_path: Path) -> None:
    p = parse_preregistration(tmp_path / "p.yaml", "skill: tidy\nskill_ref: skill\n")
    assert p.target_tasks == "all"
    assert p.execution.model != p.execution.judge_model
    assert p.decision.rule == "interval"
    assert p.lock is None


def test_malformed_yaml_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "preregistration.yaml"
    path.write_text("skill: tidy\nskill_ref: [skill\nexecution:\n  runs_per_arm: 2\n")
    err = config_error(load_preregistration, path)
    assert str(path) in str(err)
    assert "malformed YAML" in str(err)
    assert "line" in str(err) and "column" in str(err)


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    err = config_error(parse_preregistration, tmp_path / "p.yaml", "- a\n- b\n")
    assert err.field == "(top level)"
    err = config_error(parse_preregistration, tmp_path / "p.yaml", "")
    assert err.field == "(top level)"


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("skill: tidy\nskill_ref: s\nexecution:\n  modle: opus\n", "execution.modle", "unknown field"),
        ("skill: tidy\nskill_ref: s\nskil_ref: s\n", "skil_ref", "unknown field"),
        ("skill: tidy\n", "skill_ref", "required field is missing"),
        ("skill_ref: s\n", "skill", "required field is missing"),
        ("skill: tidy\nskill_ref: s\nexecution:\n  runs_per_arm: 0\n", "execution.runs_per_arm", "greater than"),
        ("skill: tidy\nskill_ref: s\ndecision:\n  rule: vibes\n", "decision.rule", "'point'"),
        ("skill: tidy\nskill_ref: s\nexecution:\n  budgets:\n    per_trial_usd: -1\n",
         "execution.budgets.per_trial_usd", "greater than"),
        ("skill: tidy\nskill_ref: s\nexecution:\n  resources:\n    memory: lots\n",
         "execution.resources.memory", "size"),
        ("skill: tidy\nskill_ref: s\nexecution:\n  allowed_tools: ['rm -rf']\n",
         "execution.allowed_tools", "tool name"),
        ("skill: 'a skill'\nskill_ref: s\n", "skill", "short name"),
    ],
)  # fmt: skip
def test_bad_preregistration_field_is_named(tmp_path: Path, text: str, field: str, words: str) -> None:
    path = tmp_path / "preregistration.yaml"
    path.write_text(text)
    err = config_error(load_preregistration, path)
    assert err.field == field
    assert f"{path}: field '{field}'" in str(err)
    assert words in str(err)


def test_judge_model_equal_to_model_names_the_nested_field(tmp_path: Path) -> None:
    path = tmp_path / "preregistration.yaml"
    path.write_text("skill: tidy\nskill_ref: s\nexecution:\n  model: sonnet\n  judge_model: sonnet\n")
    err = config_error(load_preregistration, path)
    assert err.field == "execution.judge_model"
    assert str(path) in str(err)
    assert "must differ from model" in str(err)


def test_execution_validator_alone_names_judge_model() -> None:
    with pytest.raises(ValueError, match="must differ"):
        Execution(model="haiku", judge_model="haiku")


def test_missing_preregistration_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    err = config_error(load_study, path)
    assert str(path) in str(err)
    assert "file not found" in str(err)


def test_models_are_frozen(tmp_path: Path) -> None:
    p = parse_preregistration(tmp_path / "p.yaml", "skill: tidy\nskill_ref: s\n")
    with pytest.raises(ValueError, match="frozen"):
        p.skill = "other"  # type: ignore[misc]


# ------------------------------------------------------------------------------- the study


def test_study_resolves_paths_and_skips_todo(make_study: StudyFactory) -> None:
    s = make_study()
    study = load_study(s.prereg)
    assert study.skill_dir == s.skill.resolve()
    assert study.tasks_path == s.tasks.resolve()
    assert study.repo_path == s.repo.resolve()
    assert [t.id for t in study.target_tasks()] == ["t1", "t2"]
    assert [t.id for t in study.skipped_tasks()] == ["t3"]


def test_study_with_explicit_targets_reports_only_targeted_skips(make_study: StudyFactory) -> None:
    prereg = DEFAULT_PREREG.replace("target_tasks: all", "target_tasks: [t2, t3]")
    study = load_study(make_study(prereg=prereg).prereg)
    assert [t.id for t in study.target_tasks()] == ["t2"]
    assert [t.id for t in study.skipped_tasks()] == ["t3"]

    prereg = DEFAULT_PREREG.replace("target_tasks: all", "target_tasks: [t1]")
    study = load_study(make_study(prereg=prereg).prereg)
    assert [t.id for t in study.target_tasks()] == ["t1"]
    assert study.skipped_tasks() == ()


def test_target_task_that_does_not_exist(make_study: StudyFactory) -> None:
    prereg = DEFAULT_PREREG.replace("target_tasks: all", "target_tasks: [t1, t9]")
    s = make_study(prereg=prereg)
    err = config_error(load_study, s.prereg)
    assert err.field == "target_tasks[1]"
    assert err.path == str(s.prereg.resolve())
    assert "'t9'" in str(err)
    assert "t1" in str(err) and "t2" in str(err)  # the hint lists known tasks


def test_only_todo_tasks_targeted(make_study: StudyFactory) -> None:
    prereg = DEFAULT_PREREG.replace("target_tasks: all", "target_tasks: [t3]")
    err = config_error(load_study, make_study(prereg=prereg).prereg)
    assert err.field == "target_tasks"
    assert "no runnable task" in str(err)


def test_tasks_file_errors_name_the_tasks_file(make_study: StudyFactory) -> None:
    s = make_study(tasks='{"tasks": [')
    err = config_error(load_study, s.prereg)
    assert err.path == str(s.tasks.resolve())
    assert "malformed JSON" in str(err)


def test_missing_tasks_file(make_study: StudyFactory) -> None:
    s = make_study()
    s.tasks.unlink()
    err = config_error(load_study, s.prereg)
    assert "tasks.json" in str(err) and "file not found" in str(err)


def test_skill_folder_missing(make_study: StudyFactory) -> None:
    s = make_study(prereg=DEFAULT_PREREG.replace("skill_ref: skill", "skill_ref: elsewhere"))
    err = config_error(load_study, s.prereg)
    assert err.field == "skill_ref"
    assert "does not exist" in str(err)


def test_skill_folder_without_skill_md(make_study: StudyFactory) -> None:
    s = make_study(skill_files={"README.md": "not a skill"})
    err = config_error(load_study, s.prereg)
    assert err.field == "skill_ref"
    assert "SKILL.md" in str(err)


def test_skill_md_symlink_refused(make_study: StudyFactory, tmp_path: Path) -> None:
    s = make_study(skill_files={"notes.md": "x"})
    outside = tmp_path / "outside.md"
    outside.write_text("# secret")
    (s.skill / "SKILL.md").symlink_to(outside)
    err = config_error(load_study, s.prereg)
    assert err.field == "skill_ref"


def test_target_task_listed_twice(make_study: StudyFactory) -> None:
    prereg = DEFAULT_PREREG.replace("target_tasks: all", "target_tasks: [t1, t2, t1]")
    err = config_error(load_study, make_study(prereg=prereg).prereg)
    assert err.field == "target_tasks[2]"
    assert "twice" in str(err)
