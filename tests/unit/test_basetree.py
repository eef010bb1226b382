"""What `skilltrial lock` leaves out of the base tree, and what it warns about (issue 24 item 2).

The repositories here are small real git repositories (no Docker); the trials' trees on the real engine
are `tests/integration/test_base_tree.py`'s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness import cli
from harness.errors import ConfigError, LockError
from harness.host import gitops
from harness.study.basetree import describe, survey
from harness.study.config import load_study, lock_file_bytes, lock_path, read_lock_file
from harness.study.lock import BASE_TREE, lock, verify_lock
from tests.factories import StudyFactory, init_repo

SKILL_MD = "---\nname: my-skill\ndescription: careful fixes\n---\nReproduce the bug first.\n"
TASKS = json.dumps({"tasks": [{"id": "t1", "prompt": "Fix it.", "verify_cmd": "true", "pass_criteria": "SECRET"}]})
PREREG = """\
skill: my-skill
skill_ref: my-skill
tasks: tasks.json
execution:
  model: sonnet
  judge_model: haiku
  repo: ..
{extra}"""


def skill_repository(root: Path, files: dict[str, str] | None = None, extra: str = "") -> Path:
    """The README's flow: the skill, its tasks and preregistration in the skill's own repository
    (``skills/``, ``repo: ..``), committed. Returns the preregistration."""
    layout = {
        "README.md": "a normal file\n",
        "src/app.py": "print('hi')\n",
        "skills/my-skill/SKILL.md": SKILL_MD,
        "skills/my-skill/scripts/check.sh": "true\n",
        "skills/tasks.json": TASKS,
        "skills/preregistration.yaml": PREREG.format(extra=extra),
        **(files or {}),
    }
    init_repo(root, layout)
    return root / "skills" / "preregistration.yaml"


def survey_of(prereg: Path) -> tuple[dict[str, str], dict[str, str]]:
    study = load_study(prereg, read_lock=False)
    found = survey(study, gitops.resolve_commit(study.repo_path, "HEAD"))
    return found.excluded, found.visible


def test_the_readme_flow_leaves_out_the_skill_the_tasks_and_the_preregistration(tmp_path: Path) -> None:
    excluded, visible = survey_of(skill_repository(tmp_path / "r"))
    assert excluded == {
        "skills/my-skill": "the skill under test",
        "skills/preregistration.yaml": "the preregistration",
        "skills/tasks.json": "the tasks, with verify_cmd and pass_criteria",
    }
    assert visible == {}, "README.md and src/ are normal files: nothing to warn about"


def test_copies_of_the_skill_are_found_by_name_and_by_content(tmp_path: Path) -> None:
    prereg = skill_repository(
        tmp_path / "r",
        {
            "vendor/same-content/SKILL.md": SKILL_MD,  # the very file, elsewhere
            ".claude/skills/renamed-folder/SKILL.md": SKILL_MD.replace("careful", "other words"),  # same name
            "tools/my-skill/SKILL.md": "No front matter: listed under its folder's name.\n",
            "tools/other/SKILL.md": "---\nname: other\n---\nSomething else.\n",
        },
    )
    excluded, visible = survey_of(prereg)
    assert excluded["vendor/same-content"] == "a copy of the skill under test: the same SKILL.md"
    assert excluded[".claude/skills/renamed-folder"] == "a copy of the skill under test: SKILL.md name 'my-skill'"
    assert excluded["tools/my-skill"] == "a copy of the skill under test: SKILL.md name 'my-skill'"
    assert "tools/other" not in excluded
    # .claude held only the copy, which is left out: nothing of it is left to warn about
    assert visible == {"tools/other": "another skill, SKILL.md name 'other'"}


def test_instructions_and_claude_settings_are_warned_about_not_left_out(tmp_path: Path) -> None:
    prereg = skill_repository(
        tmp_path / "r",
        {"CLAUDE.md": "rules\n", "docs/AGENTS.md": "rules\n", ".claude/settings.json": "{}\n", "x/CLAUDE.local.md": ""},
    )
    excluded, visible = survey_of(prereg)
    assert set(excluded) == {"skills/my-skill", "skills/preregistration.yaml", "skills/tasks.json"}
    assert visible == {
        ".claude": "Claude Code project settings, skills, commands or agents",
        "CLAUDE.md": "instructions for agents",
        "docs/AGENTS.md": "instructions for agents",
        "x/CLAUDE.local.md": "instructions for agents",
    }
    lines = describe(excluded, visible)
    assert lines[0].startswith("left out of every trial's tree") and "skills/tasks.json (the tasks, with" in lines[0]
    assert lines[1].startswith("both arms see") and "CLAUDE.md (instructions for agents)" in lines[1]


def test_committed_ledger_lock_and_experiment_directories_are_the_experiments_own(tmp_path: Path) -> None:
    prereg = skill_repository(
        tmp_path / "r",
        {
            "skills/skills-ledger.yaml": "skills: {}\n",
            "skills/preregistration.yaml.lock": "{}\n",
            "skills/shelf/old/SKILL.md": "---\nname: old\n---\n",
            "harness-results/my-skill-abc/experiment.json": "{}\n",
            "harness-results/my-skill-abc/results.jsonl": "",
            "data/results.jsonl": "not an experiment: no experiment.json beside it\n",
        },
    )
    excluded, _ = survey_of(prereg)
    assert excluded["skills/skills-ledger.yaml"] == "the skills ledger"
    assert excluded["skills/preregistration.yaml.lock"] == "the preregistration's lock"
    assert excluded["skills/shelf"] == "the shelf of rejected skills"
    assert excluded["harness-results/my-skill-abc"].startswith("an experiment directory:")
    assert "data" not in excluded and "data/results.jsonl" not in excluded


def test_include_paths_keeps_a_named_path_in_and_lists_it_as_visible(tmp_path: Path) -> None:
    prereg = skill_repository(tmp_path / "r", extra="  include_paths: [skills/tasks.json]\n")
    excluded, visible = survey_of(prereg)
    assert "skills/tasks.json" not in excluded and "skills/my-skill" in excluded
    assert visible == {
        "skills/tasks.json": "kept in by execution.include_paths: the tasks, with verify_cmd and pass_criteria"
    }


def test_a_folder_above_keeps_everything_below_it_in(tmp_path: Path) -> None:
    prereg = skill_repository(tmp_path / "r", extra="  include_paths: [skills]\n")
    excluded, visible = survey_of(prereg)
    assert excluded == {}
    assert set(visible) == {"skills/my-skill", "skills/preregistration.yaml", "skills/tasks.json"}


@pytest.mark.parametrize(
    ("include", "words"),
    [
        ("README.md", "is not left out of the base tree, so keeping it in changes nothing"),
        ("skills/my-skill/SKILL.md", "is inside 'skills/my-skill', which is left out as a whole"),
    ],
)
def test_an_include_path_that_changes_nothing_or_splits_a_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], include: str, words: str
) -> None:
    prereg = skill_repository(tmp_path / "r", extra=f"  include_paths: [{include}]\n")
    assert cli.main(["lock", str(prereg)], env={}) == 4
    err = capsys.readouterr().err
    assert "preregistration.yaml: field 'execution.include_paths[0]'" in err and words in err, err
    assert not os.path.lexists(lock_path(prereg))


def test_a_repository_whose_top_is_the_skill_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    init_repo(repo, {"SKILL.md": SKILL_MD, "tools.py": ""})
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    (study_dir / "tasks.json").write_text(TASKS)
    prereg = study_dir / "preregistration.yaml"
    prereg.write_text(
        PREREG.format(extra="").replace("skill_ref: my-skill", "skill_ref: ../r").replace("..\n", "../r\n")
    )
    with pytest.raises(ConfigError, match=r"field 'execution.repo'.*is itself the skill under test"):
        lock(prereg)


def test_a_study_beside_its_repository_leaves_nothing_out(make_study: StudyFactory) -> None:
    """The demo's layout: the preregistration, tasks and skill are not in the repository under test."""
    files = make_study()
    lock(files.prereg)
    block = read_lock_file(files.prereg)
    assert block is not None and block.base_excluded == {} and block.base_visible == {}
    assert BASE_TREE not in block.files, "nothing found: the lock hashes what it did before"


def test_the_lock_records_and_hashes_what_it_leaves_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prereg = skill_repository(tmp_path / "r", {"CLAUDE.md": "rules\n"})
    assert cli.main(["lock", str(prereg)], env={}) == 0
    out, err = capsys.readouterr()
    assert "Left out of every trial's tree" in out and "skills/tasks.json" in out and "include_paths" in out
    assert "warning: both arms see these" in err and "CLAUDE.md" in err
    block = read_lock_file(prereg)
    assert block is not None and set(block.base_excluded) == {
        "skills/my-skill",
        "skills/preregistration.yaml",
        "skills/tasks.json",
    }
    assert BASE_TREE in block.files
    verify_lock(load_study(prereg))
    # an edit of what the lock leaves out is the lock itself edited, named by its field
    edited = block.model_copy(update={"base_excluded": {"skills/my-skill": "the skill under test"}})
    lock_path(prereg).write_bytes(lock_file_bytes(edited))
    with pytest.raises(LockError, match=r"field 'base_excluded'.*the lock itself was edited"):
        verify_lock(load_study(prereg))


def test_a_lock_made_before_the_survey_still_verifies(tmp_path: Path) -> None:
    """A lock without base_excluded (an earlier harness) verifies, and its run leaves nothing out."""
    prereg = skill_repository(tmp_path / "r")
    lock(prereg)
    block = read_lock_file(prereg)
    assert block is not None
    files = {k: v for k, v in block.files.items() if k != BASE_TREE}
    from harness.study.lock import lock_digest

    study = load_study(prereg, read_lock=False)
    digest, _ = lock_digest(study, block.base_sha)
    old = block.model_copy(update={"base_excluded": {}, "base_visible": {}, "files": files, "sha256": digest})
    lock_path(prereg).write_bytes(lock_file_bytes(old))
    assert verify_lock(load_study(prereg)).base_excluded == {}


def test_checkout_base_leaves_the_paths_out_and_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("must survive")
    repo = tmp_path / "r"
    sha = init_repo(repo, {"a/b.txt": "x", "a/c.txt": "y", "d.txt": "z"})
    os.symlink(outside, repo / "link")
    gitops.git(["add", "link"], cwd=repo)
    gitops.git(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "link"], cwd=repo)
    sha = gitops.resolve_commit(repo, "HEAD")
    base = tmp_path / "base"
    try:
        gitops.checkout_base(repo, base, sha, ["a/b.txt", "d.txt", "link/keep.txt", "missing/x"])
        assert sorted(p.name for p in base.iterdir() if p.name != ".git") == ["a", "link"]
        assert [p.name for p in (base / "a").iterdir()] == ["c.txt"]
        assert (outside / "keep.txt").read_text() == "must survive", "a path through a link is not touched"
    finally:
        gitops.remove_worktree(repo, base)


def test_the_report_notes_what_the_run_left_out_and_what_both_arms_saw(tmp_path: Path) -> None:
    from harness.reporting.model import base_tree_notes

    prereg = skill_repository(tmp_path / "r", {"CLAUDE.md": "rules\n"})
    lock(prereg)
    study = load_study(prereg)
    from_lock = base_tree_notes(study, None)
    assert len(from_lock) == 2
    assert "skills/tasks.json (the tasks, with verify_cmd and pass_criteria)" in from_lock[0]
    assert "CLAUDE.md (instructions for agents)" in from_lock[1]
    ran = base_tree_notes(study, ["skills/my-skill", "skills/scenario.yaml"])  # what the run recorded
    assert "skills/scenario.yaml (the scripted model's scenario)" in ran[0] and "skills/tasks.json" not in ran[0]


def test_a_scripted_runs_scenario_in_the_base_tree_is_left_out_too(tmp_path: Path) -> None:
    """The scenario is given to eval, not to lock: the run leaves it out when the base commit holds it."""
    from harness.experiment.experiment import Experiment
    from harness.experiment.options import RunOptions
    from tests.fakes import FakeRuntime

    prereg = skill_repository(tmp_path / "r", {"skills/scenario.yaml": "seed: 1\n"})
    lock(prereg)
    study = load_study(prereg)
    assert study.prereg.lock is not None
    messages: list[str] = []

    class Heard:
        def message(self, text: str) -> None:
            messages.append(text)

    scenario = tmp_path / "r" / "skills" / "scenario.yaml"
    run = Experiment(study, FakeRuntime(), RunOptions(out=tmp_path / "o", jobs=1, scripted=scenario), Heard())  # type: ignore[arg-type]
    assert run._base_excluded(study.prereg.lock) == (
        "skills/my-skill",
        "skills/preregistration.yaml",
        "skills/scenario.yaml",
        "skills/tasks.json",
    )
    assert messages == ["the scenario skills/scenario.yaml is in the base commit: no trial's tree holds it"]
    elsewhere = tmp_path / "scenario.yaml"
    elsewhere.write_text("seed: 1\n")
    run = Experiment(study, FakeRuntime(), RunOptions(out=tmp_path / "o", jobs=1, scripted=elsewhere))
    assert "scenario.yaml" not in " ".join(run._base_excluded(study.prereg.lock))
