"""One toolchain: the pre-commit hooks, ``make check`` and CI run the same commands over the same files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _makefile() -> str:
    return (ROOT / "Makefile").read_text()


def _variable(name: str) -> str:
    match = re.search(rf"^{name} :?= (.*)$", _makefile(), re.M)
    assert match, name
    return match.group(1).strip()


def _recipe(target: str) -> tuple[list[str], list[str]]:
    """The target's prerequisites and its commands, with the Makefile's variables expanded."""
    lines = _makefile().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    prerequisites = lines[start].split(":", 1)[1].split("##")[0].split()
    commands = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        command = line.strip().removeprefix("@")
        for var, value in (("BIN", ".venv/bin"), ("LINT_PATHS", _variable("LINT_PATHS")), ("PYTEST_ARGS", "")):
            command = command.replace(f"$({var})", value)
        commands.append(command.strip())
    return prerequisites, commands


def _hooks() -> dict[str, dict[str, object]]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    (repo,) = config["repos"]
    assert repo["repo"] == "local", "local hooks only: pre-commit must fetch nothing"
    return {hook["id"]: hook for hook in repo["hooks"]}


def test_the_hooks_run_the_makefiles_lint_typecheck_and_unit_test_commands() -> None:
    hooks = _hooks()
    assert [hooks["ruff-check"]["entry"], hooks["ruff-format"]["entry"]] == _recipe("lint")[1]
    assert [hooks["mypy"]["entry"]] == _recipe("typecheck")[1]
    assert [hooks["unit-tests"]["entry"]] == _recipe("test-unit")[1]
    assert hooks["unit-tests"].get("stages") == ["pre-push"]
    assert all(hook["language"] == "system" and hook["pass_filenames"] is False for hook in hooks.values())


def test_make_check_is_lint_typecheck_and_unit_tests_and_ci_runs_it_first() -> None:
    """Then the README's two commands in the README's order (issue 24 item 11): the demo's output is there
    when the tests run, as on a user's clone."""
    assert _recipe("check")[0] == ["lint", "typecheck", "test-unit"]
    assert _variable("LINT_PATHS").split() == ["harness", "tests", "scripts"]
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("make ")]
    readme = (ROOT / "README.md").read_text()
    two = readme[readme.index("## Two commands") :]
    assert two.index("make demo") < two.index("make test")
    assert steps == ["make check", "make docs", "make demo", "make test"]


def test_mypy_checks_the_package_with_its_sidecars_the_tests_and_the_scripts() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["strict"] is True
    assert mypy["files"] == ["harness", "tests", "scripts"]
    assert "exclude" not in mypy


def _bare(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "config", "core.bare"], capture_output=True, text=True
    ).stdout.strip()


def test_the_suite_run_from_a_git_hook_leaves_the_projects_repository_alone(tmp_path: Path) -> None:
    """A git hook runs the suite with GIT_DIR set (``make hooks``); in a linked worktree a test's own
    ``git init SCRATCH`` then re-initialised the project's repository as bare (seen: the checkout stopped
    working)."""
    project, worktree = tmp_path / "project", tmp_path / "worktree"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(["git", "-C", str(project), "commit", "-q", "--allow-empty", "-m", "a"], check=True)
    subprocess.run(["git", "-C", str(project), "worktree", "add", "-q", str(worktree)], check=True)
    gitdir = project / ".git" / "worktrees" / "worktree"
    hook_env = {**os.environ, "GIT_DIR": str(gitdir), "GIT_INDEX_FILE": str(gitdir / "index")}
    # the positive control: plain `git init` of another directory under the hook's environment
    subprocess.run(["git", "init", "-q", str(tmp_path / "elsewhere")], env=hook_env, check=True)
    assert _bare(project) == "true", "the hazard: the project's repository became bare"
    subprocess.run(["git", "-C", str(project), "config", "core.bare", "false"], check=True)
    # the suite under the same environment: its scratch repositories are its own
    test = "tests/unit/test_scaffold.py::test_init_writes_loadable_commented_files_next_to_the_skill"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-docker", test],
        cwd=ROOT,
        env=hook_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert _bare(project) == "false"
