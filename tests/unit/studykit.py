"""Helpers for unit tests: a complete study (preregistration, tasks, skill, tiny repo) in tmp_path.

Everything is built in the test's own temporary directory; git runs with no
global or system configuration so the host's settings cannot leak in.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

DEFAULT_TASKS: list[dict[str, Any]] = [
    {"id": "t1", "prompt": "Fix the off-by-one in range_sum.", "verify_cmd": "python -m pytest -q"},
    {"id": "t2", "prompt": "Add input validation to parse_date.", "verify_cmd": "make check"},
    {"id": "t3", "prompt": "TODO: write this task", "verify_cmd": ""},
]

DEFAULT_PREREG = """\
# Preregistration written by a careful person.
# These comments must survive `harness lock`.
skill: tidy
skill_ref: skill
tasks: tasks.json
target_tasks: all
expected_effect: fewer failed verifies
execution:
  runs_per_arm: 2
  model: sonnet
  judge_model: haiku
  repo: repo
"""


def git_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        {
            "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
        }
    )
    return env


def run_git(repo: Path, *args: str) -> bytes:
    """Run git in ``repo`` with a clean configuration; returns stdout bytes."""
    proc = subprocess.run(
        ["git", "-c", "user.name=x", "-c", "user.email=x", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        env=git_env(repo),
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, f"git {args} failed: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


def init_repo(path: Path, files: dict[str, str] | None = None) -> str:
    """A git repository at ``path`` with one commit of ``files``; returns the commit SHA."""
    path.mkdir(parents=True, exist_ok=True)
    run_git(path, "init", "-q")
    for rel, content in (files or {"README.md": "hello\n"}).items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    run_git(path, "add", "-A")
    run_git(path, "commit", "-q", "--no-verify", "-m", "base")
    return run_git(path, "rev-parse", "HEAD").decode().strip()


@dataclass
class StudyFiles:
    root: Path
    prereg: Path
    tasks: Path
    skill: Path
    repo: Path
    base_sha: str


StudyFactory = Callable[..., StudyFiles]


@pytest.fixture
def make_study(tmp_path: Path) -> StudyFactory:
    """Build a study directory; arguments override the prereg text, the tasks or the skill files."""
    counter = iter(range(1000))

    def build(
        prereg: str = DEFAULT_PREREG,
        tasks: Sequence[dict[str, Any]] | str | None = None,
        skill_files: dict[str, str] | None = None,
        with_repo: bool = True,
    ) -> StudyFiles:
        root = tmp_path / f"study{next(counter)}"
        root.mkdir()
        prereg_path = root / "preregistration.yaml"
        prereg_path.write_text(prereg)
        tasks_path = root / "tasks.json"
        if isinstance(tasks, str):
            tasks_path.write_text(tasks)
        else:
            tasks_path.write_text(json.dumps({"tasks": list(DEFAULT_TASKS if tasks is None else tasks)}, indent=2))
        skill = root / "skill"
        skill.mkdir()
        for rel, content in (skill_files or {"SKILL.md": "# Tidy\nAlways tidy up.\n"}).items():
            (skill / rel).parent.mkdir(parents=True, exist_ok=True)
            (skill / rel).write_text(content)
        repo = root / "repo"
        sha = init_repo(repo) if with_repo else ""
        return StudyFiles(root, prereg_path, tasks_path, skill, repo, sha)

    return build
