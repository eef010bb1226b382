"""The preflight's pure parts: how a base outcome is classified, what its cache key covers, what is recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.experiment.preflight import (
    BaseOutcome,
    cannot_run_error,
    classify,
    preflight_fingerprint,
    write_record,
)
from harness.results.load import PREFLIGHT_JSON, preflight_skipped
from harness.study.config import Task


@pytest.mark.parametrize(
    ("exit_code", "timed_out", "output", "expected"),
    [
        (1, False, "FAILED (failures=1)", "fails"),
        (0, False, "OK", "passes"),
        (127, False, "sh: 1: pytest: not found", "cannot_run"),
        (126, False, "permission denied", "cannot_run"),
        (1, False, "/usr/bin/python3: No module named pytest", "cannot_run"),
        (2, False, "bash: make: command not found", "cannot_run"),
        (1, False, "ModuleNotFoundError: No module named 'numpy'", "cannot_run"),
        (124, False, "", "timeout"),
        (None, True, "", "timeout"),
        (0, False, "warning: something not found in cache, fine", "passes"),  # exit 0 is a pass
        (1, False, "AssertionError: key not found in result", "fails"),  # 'not found' mid-line is a test failure
    ],
)
def test_classify(exit_code: int | None, timed_out: bool, output: str, expected: str) -> None:
    assert classify(exit_code, timed_out, output) == expected


def test_fingerprint_covers_task_verify_cmd_base_and_image() -> None:
    task = Task(id="t", prompt="p", verify_cmd="make test")
    base = preflight_fingerprint(task, "a" * 40, "sha256:1")
    assert preflight_fingerprint(task, "a" * 40, "sha256:1") == base
    assert preflight_fingerprint(task.model_copy(update={"verify_cmd": "make check"}), "a" * 40, "sha256:1") != base
    assert preflight_fingerprint(task.model_copy(update={"id": "u"}), "a" * 40, "sha256:1") != base
    assert preflight_fingerprint(task, "b" * 40, "sha256:1") != base
    assert preflight_fingerprint(task, "a" * 40, "sha256:2") != base
    # the prompt is not what verify depends on
    assert preflight_fingerprint(task.model_copy(update={"prompt": "other"}), "a" * 40, "sha256:1") == base


def test_fingerprint_covers_what_the_base_tree_is_made_without() -> None:
    task = Task(id="t", prompt="p", verify_cmd="make test")
    whole = preflight_fingerprint(task, "a" * 40, "sha256:1")
    assert preflight_fingerprint(task, "a" * 40, "sha256:1", ()) == whole, "outcomes cached before stay valid"
    assert preflight_fingerprint(task, "a" * 40, "sha256:1", ["skills/tasks.json"]) != whole


def test_cannot_run_says_a_verify_may_need_a_path_the_lock_leaves_out() -> None:
    bad = BaseOutcome("t", "cannot_run", 2, 0.4, False, "f", "python3: can't open file 'skills/check.py'\n")
    text = str(cannot_run_error([bad], None, ["skills/my-skill", "skills/tasks.json"]))
    assert (
        "verify_cmd needs a file the lock leaves out of every trial's tree (skills/my-skill, skills/tasks.json)" in text
    )
    assert "execution.include_paths" in text
    assert "include_paths" not in str(cannot_run_error([bad], None)), "nothing left out: nothing to say"
    many = [f"a{i}" for i in range(8)] + ["skills/check.py"]
    assert "tree (skills/check.py, a0, a1, a2, a3, a4 and 3 more)" in str(cannot_run_error([bad], None, many))


def _outcome(task_id: str, outcome: str, exit_code: int | None = 1) -> BaseOutcome:
    return BaseOutcome(task_id, outcome, exit_code, 0.5, False, "f" * 64, "tail")  # type: ignore[arg-type]


def test_every_base_outcome_is_recorded_and_trivial_tasks_read_back(tmp_path: Path) -> None:
    write_record(tmp_path, [_outcome("a", "fails"), _outcome("b", "passes", 0), _outcome("c", "timeout", None)])
    data = json.loads((tmp_path / PREFLIGHT_JSON).read_text())
    assert set(data["tasks"]) == {"a", "b", "c"}
    assert data["tasks"]["a"]["exit_code"] == 1
    assert preflight_skipped(tmp_path) == {
        "b": "verify_cmd already passes at the base commit (preflight): nothing to fix"
    }
    assert preflight_skipped(tmp_path / "missing") == {}


def test_cannot_run_names_the_task_the_output_and_base_image() -> None:
    bad = BaseOutcome("t", "cannot_run", 127, 0.4, False, "f", "sh: 1: pytest: not found\n")
    text = str(cannot_run_error([bad], None))
    assert "t: exit 127: sh: 1: pytest: not found" in text
    assert "--base-image" in text
    assert "my-ci:1" in str(cannot_run_error([bad], "my-ci:1"))


def test_no_preflight_flag_on_eval_and_demo() -> None:
    from harness.cli import _parser

    assert _parser().parse_args(["eval", "p.yaml"]).preflight is True
    assert _parser().parse_args(["eval", "p.yaml", "--no-preflight"]).preflight is False
    assert _parser().parse_args(["demo", "--no-preflight"]).preflight is False
