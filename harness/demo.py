"""The embedded demo: ``examples/`` made into a real experiment setup, offline.

``skilltrial demo`` copies the example repository, tasks, preregistrations, skills
and scenario into a work directory, makes the repository a git repository of
its own (one commit), locks each preregistration, and evaluates each skill
against the scripted Messages API: real CLI, real containers, real git, real
verify, no network, no key, zero cost.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.errors import PrerequisiteError
from harness.host import gitops
from harness.sandbox.images import assets_root
from harness.study.lock import lock

DEMO_SKILLS = ("careful-fixer", "verbose-planner")
DEMO_INSTALLED = "careful-fixer-installed"
"""The same skill in the installed delivery (non-bare CLI, .claude/skills): does it fire, and does it help?"""
DEMO_CODEX = "careful-fixer-codex"
"""The installed A/B with the Codex CLI as the agent (``skilltrial demo --codex`` only: it builds the Codex image)."""


@dataclass(frozen=True)
class DemoSetup:
    root: Path
    preregistrations: dict[str, Path]
    scenario: Path
    library: Path | None = None
    """The library demo's preregistration (examples/library), run after the A/B demos."""
    library_scenario: Path | None = None
    codex: Path | None = None
    """The Codex A/B's preregistration (``skilltrial demo --codex``), run on the installed part's scenario."""


def prepare_demo(work: Path, *, examples: Path | None = None) -> DemoSetup:
    """(Re)create the demo work directory and lock its preregistrations. Idempotent."""
    src = examples or assets_root() / "examples"
    if not (src / "demo" / "tasks.json").is_file():
        raise PrerequisiteError(f"the demo files are missing under {src}", hint="reinstall the harness")
    work.mkdir(parents=True, exist_ok=True)
    setup_root = work / "setup"
    if setup_root.exists():
        gitops.git(["worktree", "prune"], cwd=setup_root / "demo" / "repo", check=False) if (
            setup_root / "demo" / "repo" / ".git"
        ).exists() else None
        shutil.rmtree(setup_root)
    shutil.copytree(src / "demo", setup_root / "demo", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(src / "skills", setup_root / "skills", ignore=shutil.ignore_patterns("__pycache__"))
    if (src / "library").is_dir():
        shutil.copytree(src / "library", setup_root / "library", ignore=shutil.ignore_patterns("__pycache__"))
    if (src / "triggers").is_dir():
        shutil.copytree(src / "triggers", setup_root / "triggers", ignore=shutil.ignore_patterns("__pycache__"))
    repo = setup_root / "demo" / "repo"
    gitops.git(["init", "--quiet", "--initial-branch=main", str(repo)])
    gitops.git(["add", "--all"], cwd=repo)
    gitops.git(["commit", "--quiet", "-m", "textkit: the demo repository"], cwd=repo)
    preregs = {}
    for skill in (*DEMO_SKILLS, DEMO_INSTALLED):
        path = setup_root / "demo" / f"preregistration-{skill}.yaml"
        if not path.is_file() and skill == DEMO_INSTALLED:
            continue
        lock(path)
        preregs[skill] = path
    codex = setup_root / "demo" / f"preregistration-{DEMO_CODEX}.yaml"
    if codex.is_file():
        lock(codex)
    library = setup_root / "library" / "preregistration.yaml"
    if library.is_file():
        from harness.experiment.library_plan import lock_entries  # numpy and scipy: only for the library demo

        lock(library, library_entries=lock_entries)
    return DemoSetup(
        setup_root,
        preregs,
        setup_root / "demo" / "scenario.yaml",
        library if library.is_file() else None,
        setup_root / "library" / "scenario.yaml",
        codex if codex.is_file() else None,
    )
