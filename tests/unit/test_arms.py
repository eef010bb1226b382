"""``arms:`` (issue 28 items 1-2): versions of one skill against one baseline: the preregistration, the lock, the
per-variant studies and the base tree."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from harness.errors import ConfigError, LockError
from harness.host import gitops
from harness.study.basetree import survey
from harness.study.config import load_study
from harness.study.lock import copy_locked_skill, lock, verify_lock
from tests.factories import StudyFactory, StudyFiles, init_repo, run_git

ARMS_PREREG = """\
skill: tidy
tasks: tasks.json
arms:
  baseline: {baseline}
  versions:
    shipped: {{path: skill}}
    edited: {{path: skill-edited}}
{more}execution:
  runs_per_arm: 2
  repo: repo
"""


def arms_study(make_study: StudyFactory, baseline: str = "shipped", more: str = "", extra: str = "") -> StudyFiles:
    s = make_study(prereg=ARMS_PREREG.format(baseline=baseline, more=more) + extra)
    edited = s.root / "skill-edited"
    edited.mkdir()
    (edited / "SKILL.md").write_text("# Tidy\nAlways tidy up, and say what you tidied.\n")
    return s


def test_version_against_version_loads_with_one_variant(make_study: StudyFactory) -> None:
    study = load_study(arms_study(make_study).prereg)
    assert study.variants() == ("edited",)
    assert study.baseline_version == "shipped"
    one = study.for_variant("edited")
    assert one.skill_dir == (study.root / "skill-edited").resolve()
    assert one.version_dir("shipped") == (study.root / "skill").resolve()
    assert one.variant == "edited" and one.locked_prereg is study.locked_prereg


def test_a_bare_baseline_with_several_variants(make_study: StudyFactory) -> None:
    study = load_study(arms_study(make_study, baseline="bare").prereg)
    assert study.variants() == ("shipped", "edited")
    assert study.baseline_version is None
    with pytest.raises(ValueError, match="not a variant"):
        study.for_variant("bare")


@pytest.mark.parametrize(
    ("baseline", "more", "extra", "field", "words"),
    [
        ("nightly", "", "", "arms.baseline", "must be 'bare' or one of the versions"),
        ("shipped", "", "skill_ref: skill\n", "skill_ref", "each version names its folder"),
        ("bare", "    bare: {path: other}\n", "", "arms.versions.bare", "not 'bare'"),
        ("shipped", "    again: {path: skill}\n", "", "arms.versions.shipped.path", "named by another version"),
        (
            "bare",
            "",
            "decision:\n  rule: interval\n  early_stop: curtail\n",
            "decision.early_stop",
            "several variants",
        ),
    ],
)
def test_bad_arms_are_refused_naming_the_field(
    make_study: StudyFactory, baseline: str, more: str, extra: str, field: str, words: str
) -> None:
    s = arms_study(make_study, baseline=baseline, more=more, extra=extra)
    with pytest.raises(ConfigError, match=words) as e:
        load_study(s.prereg)
    assert e.value.field == field, e.value


def test_a_single_version_without_a_bare_baseline_is_refused(make_study: StudyFactory) -> None:
    s = make_study(
        prereg="skill: tidy\narms:\n  baseline: only\n  versions:\n    only: {path: skill}\nexecution:\n  repo: repo\n"
    )
    with pytest.raises(ConfigError, match="version against version names two") as e:
        load_study(s.prereg)
    assert e.value.field == "arms.versions"


def test_a_missing_version_folder_is_named(make_study: StudyFactory) -> None:
    s = make_study(prereg=ARMS_PREREG.format(baseline="shipped", more=""))
    with pytest.raises(ConfigError, match="does not exist") as e:
        load_study(s.prereg)
    assert e.value.field == "arms.versions.edited.path"


def test_the_lock_covers_every_version_and_every_variant_verifies_it(make_study: StudyFactory) -> None:
    s = arms_study(make_study)
    lock(s.prereg)
    study = load_study(s.prereg)
    block = verify_lock(study)
    assert {"version/shipped/SKILL.md", "version/edited/SKILL.md"} <= set(block.files)
    assert not any(k.startswith("skill/") for k in block.files)
    assert verify_lock(study.for_variant("edited")).sha256 == block.sha256
    # the baseline's version is as much under test as the variant's: editing it breaks the lock
    (s.root / "skill" / "SKILL.md").write_text("# Tidy\nchanged\n")
    with pytest.raises(LockError, match=re.escape("version/shipped/SKILL.md")):
        verify_lock(load_study(s.prereg).for_variant("edited"))


def test_a_variants_checked_copy_is_what_its_lock_check_reads(make_study: StudyFactory, tmp_path: Path) -> None:
    s = arms_study(make_study)
    lock(s.prereg)
    one = load_study(s.prereg).for_variant("edited")
    copy = copy_locked_skill(one, tmp_path / "copy")
    assert (copy / "SKILL.md").read_text().startswith("# Tidy\nAlways tidy up, and say")


def test_the_base_tree_leaves_out_every_version(make_study: StudyFactory) -> None:
    """Both folders live in the repository: neither arm may find the other's version in its tree."""
    s = arms_study(make_study)
    repo = s.root / "repo"
    init_repo(repo, {"README.md": "x\n", "a/SKILL.md": "# Tidy\nAlways tidy up.\n",
                     "b/SKILL.md": "# Tidy\nAlways tidy up, and say what you tidied.\n"})  # fmt: skip
    study = load_study(s.prereg)
    sha = gitops.resolve_commit(repo, "HEAD")
    found = survey(study, sha)
    assert {"a", "b"} <= set(found.excluded), found


def test_a_versioned_baseline_trial_gets_the_skill_arms_prompt() -> None:
    from harness.plan import BASELINE_PREFIX, SKILL_PREFIX, TrialSpec
    from harness.study.config import Task

    task = Task(id="t1", prompt="Fix it.", verify_cmd="true")
    bare = TrialSpec("t1.baseline.0", task, "baseline", 0, 0, 0)
    carried = TrialSpec("t1.baseline.0", task, "baseline", 0, 0, 0, baseline_version="shipped")
    skill = TrialSpec("t1.skill.0", task, "skill", 0, 0, 1)
    assert bare.prompt == BASELINE_PREFIX + "Fix it." and not bare.carries_skill
    assert carried.prompt == skill.prompt == SKILL_PREFIX + "Fix it." and carried.carries_skill


def test_installed_versions_must_be_listed_under_one_name(make_study: StudyFactory) -> None:
    s = arms_study(make_study, extra="  delivery: installed\n")
    lock(s.prereg)  # positive control: neither SKILL.md names itself, both are listed as 'tidy'
    (s.root / "skill-edited" / "SKILL.md").write_text("---\nname: tidier\ndescription: x\n---\nTidy.\n")
    with pytest.raises(ConfigError, match="version edited is listed as 'tidier'") as e:
        lock(s.prereg)
    assert e.value.field == "arms.versions.edited.path"


def test_a_versions_fingerprint_part_follows_its_files(make_study: StudyFactory) -> None:
    from harness.study.lock import locked_version_sha256

    s = arms_study(make_study)
    study = load_study(s.prereg)
    before = locked_version_sha256(study, "shipped")
    assert before != locked_version_sha256(study, "edited")
    (s.root / "skill" / "notes.md").write_text("more\n")
    assert locked_version_sha256(load_study(s.prereg), "shipped") != before


# ------------------------------------------------------------------ a version at a git ref


def ref_study(make_study: StudyFactory) -> StudyFiles:
    """The study's own folder is a repository: ``skill`` as of tag v1 (what ships) against ``skill`` now."""
    s = make_study(prereg=ARMS_PREREG.format(baseline="shipped", more="").replace(
        "shipped: {path: skill}", "shipped: {path: skill, ref: v1}").replace(
        "edited: {path: skill-edited}", "edited: {path: skill}"))  # fmt: skip
    (s.root / ".gitignore").write_text("repo/\n")
    run_git(s.root, "init", "-q")
    run_git(s.root, "add", "-A")
    run_git(s.root, "commit", "-q", "--no-verify", "-m", "v1")
    run_git(s.root, "tag", "v1")
    (s.root / "skill" / "SKILL.md").write_text("# Tidy\nAlways tidy up, and say what you tidied.\n")
    return s


def test_a_version_at_a_git_ref_is_read_from_git_and_locked_by_content(
    make_study: StudyFactory, tmp_path: Path
) -> None:
    from harness.study.lock import materialize, version_files

    s = ref_study(make_study)
    study = load_study(s.prereg)
    assert version_files(study, "shipped")["SKILL.md"] == b"# Tidy\nAlways tidy up.\n"
    assert version_files(study, "edited")["SKILL.md"].endswith(b"say what you tidied.\n")
    lock(s.prereg)
    study = load_study(s.prereg)
    verify_lock(study)
    # a run writes the ref's files once and checks them: what is mounted is what was locked
    run = materialize(study, tmp_path / "versions")
    assert run.version_dir("shipped") == (tmp_path / "versions" / "shipped").resolve()
    assert (run.version_dir("shipped") / "SKILL.md").read_text() == "# Tidy\nAlways tidy up.\n"
    assert verify_lock(run.for_variant("edited")).sha256 == verify_lock(study).sha256
    copy_locked_skill(run.for_variant("edited"), tmp_path / "copy")  # the variant's own copy checks too
    # the working tree's folder is not the shipped version: editing it changes only the edited version
    (s.root / "skill" / "notes.md").write_text("x\n")
    with pytest.raises(LockError, match=re.escape("version/edited/notes.md")):
        verify_lock(load_study(s.prereg))
    (s.root / "skill" / "notes.md").unlink()
    # the tag moved to other content: a changed experiment, named
    run_git(s.root, "add", "-A")
    run_git(s.root, "commit", "-q", "--no-verify", "-m", "v2")
    run_git(s.root, "tag", "-f", "v1")
    with pytest.raises(LockError, match=re.escape("version/shipped/SKILL.md")):
        verify_lock(load_study(s.prereg))


def test_a_ref_without_the_skill_or_with_a_link_is_refused_naming_the_field(make_study: StudyFactory) -> None:
    s = ref_study(make_study)
    text = s.prereg.read_text()
    s.prereg.write_text(text.replace("ref: v1", "ref: nosuch"))
    with pytest.raises(ConfigError, match="'nosuch' is not a commit") as e:
        lock(s.prereg)
    assert e.value.field == "arms.versions.shipped.ref"
    (s.root / "other").mkdir()
    (s.root / "other" / "README.md").write_text("no skill here\n")
    os.symlink("README.md", s.root / "other" / "link.md")
    run_git(s.root, "add", "-A")
    run_git(s.root, "commit", "-q", "--no-verify", "-m", "other")
    run_git(s.root, "tag", "v2")
    s.prereg.write_text(text.replace("{path: skill, ref: v1}", "{path: other, ref: v2}"))
    with pytest.raises(ConfigError, match=re.escape("other/link.md at v2 is a symbolic link")) as e:
        lock(s.prereg)
    assert e.value.field == "arms.versions.shipped.ref"
    os.unlink(s.root / "other" / "link.md")
    run_git(s.root, "add", "-A")
    run_git(s.root, "commit", "-q", "--no-verify", "-m", "no link")
    run_git(s.root, "tag", "-f", "v2")
    with pytest.raises(ConfigError, match=re.escape("other has no SKILL.md at v2")) as e:
        lock(s.prereg)
    assert e.value.field == "arms.versions.shipped.ref"


def test_a_ref_outside_any_repository_is_refused_naming_the_field(make_study: StudyFactory) -> None:
    """Found by the lock fuzz: a version at a ref whose folder is in no git repository stopped the lock with
    git's own error (exit 3), naming neither the file nor the field."""
    s = make_study(prereg=ARMS_PREREG.format(baseline="shipped", more="").replace(
        "shipped: {path: skill}", "shipped: {path: skill, ref: v1}").replace(
        "edited: {path: skill-edited}", "edited: {path: skill}"))  # fmt: skip
    assert gitops.git(["rev-parse", "--show-toplevel"], cwd=s.root, check=False) == "", "not in a repository"
    with pytest.raises(ConfigError, match="is not in a git repository") as e:
        lock(s.prereg)
    assert (e.value.field, e.value.path) == ("arms.versions.shipped.ref", str(s.prereg))


def test_versions_run_claude_code_only_for_now(make_study: StudyFactory) -> None:
    s = arms_study(make_study, extra="  agent: codex\n  model: gpt-6.2-sol\n")
    with pytest.raises(ConfigError, match="versions of a skill") as e:
        load_study(s.prereg)
    assert e.value.field == "execution.agent"
