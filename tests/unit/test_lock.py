"""harness.study.lock: freezing a preregistration, and noticing every change to what it covers."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from harness.errors import ConfigError, LockError
from harness.study.config import load_study, lock_path
from harness.study.lock import lock, lock_digest, skill_files, strip_lock_block, verify_lock
from tests.factories import DEFAULT_PREREG, StudyFactory, StudyFiles, init_repo, run_git

NOW = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.UTC)


@pytest.fixture
def locked(make_study: StudyFactory) -> StudyFiles:
    s = make_study()
    lock(s.prereg, now=NOW)
    return s


def lock_block(path: Path) -> dict[str, object]:
    """The lock ``skilltrial lock`` wrote beside the preregistration."""
    data = json.loads(lock_path(path).read_text())
    assert isinstance(data, dict)
    return data


def test_lock_writes_block(make_study: StudyFactory) -> None:
    s = make_study()
    digest, base = lock(s.prereg, now=NOW)
    assert base == s.base_sha
    block = lock_block(s.prereg)
    assert block["locked_at"] == "2026-03-04T05:06:07Z"
    assert block["sha256"] == digest
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert block["base_sha"] == s.base_sha
    files = block["files"]
    assert isinstance(files, dict)
    assert {"preregistration", "tasks", "analysis", "skill/SKILL.md"} <= set(files)
    # the parsed model sees the same block
    study = load_study(s.prereg)
    assert study.prereg.lock is not None
    assert study.prereg.lock.sha256 == digest
    assert study.prereg.lock.base_sha == s.base_sha


def test_verify_passes_right_after_lock(locked: StudyFiles) -> None:
    study = load_study(locked.prereg)
    assert verify_lock(study).sha256 == lock_block(locked.prereg)["sha256"]


def test_lock_is_deterministic_for_the_same_inputs(make_study: StudyFactory) -> None:
    s = make_study()
    d1, _ = lock(s.prereg, now=NOW)
    d2, _ = lock(s.prereg, now=NOW + dt.timedelta(days=1))
    assert d1 == d2  # the time is recorded, not hashed


def test_unlocked_preregistration_refused(make_study: StudyFactory) -> None:
    s = make_study()
    with pytest.raises(LockError) as info:
        verify_lock(load_study(s.prereg))
    assert "not locked" in str(info.value)
    assert "skilltrial lock" in str(info.value)
    assert info.value.exit_code == 4


def changed_names(s: StudyFiles) -> str:
    with pytest.raises(LockError) as info:
        verify_lock(load_study(s.prereg))
    msg = str(info.value)
    assert "changed since lock" in msg
    return msg


def test_editing_the_preregistration_is_noticed(locked: StudyFiles) -> None:
    text = locked.prereg.read_text().replace("runs_per_arm: 2", "runs_per_arm: 5")
    locked.prereg.write_text(text)
    msg = changed_names(locked)
    assert "preregistration" in msg
    assert "tasks" not in msg.split("changed since lock:")[1].split("\n")[0]


def test_editing_the_decision_rule_names_analysis(locked: StudyFiles) -> None:
    text = locked.prereg.read_text().replace("expected_effect:", "decision:\n  rule: point\nexpected_effect:")
    locked.prereg.write_text(text)
    msg = changed_names(locked)
    assert "analysis" in msg and "preregistration" in msg


def test_editing_tasks_is_noticed(locked: StudyFiles) -> None:
    data = json.loads(locked.tasks.read_text())
    data["tasks"][0]["verify_cmd"] = "true"
    locked.tasks.write_text(json.dumps(data))
    msg = changed_names(locked)
    assert "tasks" in msg
    assert "skill/" not in msg


def test_editing_a_skill_file_is_noticed(locked: StudyFiles) -> None:
    (locked.skill / "SKILL.md").write_text("# Tidy\nAlways tidy up. And also something else.\n")
    msg = changed_names(locked)
    assert "skill/SKILL.md" in msg


def test_adding_a_skill_file_is_noticed(locked: StudyFiles) -> None:
    (locked.skill / "scripts").mkdir()
    (locked.skill / "scripts" / "helper.sh").write_text("echo hi\n")
    msg = changed_names(locked)
    assert "skill/scripts/helper.sh" in msg


def test_removing_a_skill_file_is_noticed(make_study: StudyFactory) -> None:
    s = make_study(skill_files={"SKILL.md": "# s\n", "extra.md": "more\n"})
    lock(s.prereg, now=NOW)
    (s.skill / "extra.md").unlink()
    assert "skill/extra.md" in changed_names(s)


def test_changed_base_sha_in_block_is_noticed(locked: StudyFiles) -> None:
    path = lock_path(locked.prereg)
    path.write_text(path.read_text().replace(locked.base_sha, "f" * 40))
    with pytest.raises(LockError, match="base commit"):
        verify_lock(load_study(locked.prereg))


def test_tampered_hash_is_noticed_precisely(locked: StudyFiles) -> None:
    digest = lock_block(locked.prereg)["sha256"]
    assert isinstance(digest, str)
    path = lock_path(locked.prereg)
    path.write_text(path.read_text().replace(digest, "ab" * 32))
    with pytest.raises(LockError) as info:
        verify_lock(load_study(locked.prereg))
    msg = str(info.value)
    assert f"{path}: field 'sha256'" in msg
    assert "abababababababab" in msg and digest[:16] in msg
    assert "the lock itself was edited or corrupted" in msg


def test_a_lock_hash_that_is_not_a_sha256_names_the_field(locked: StudyFiles) -> None:
    path = lock_path(locked.prereg)
    digest = lock_block(locked.prereg)["sha256"]
    assert isinstance(digest, str)
    path.write_text(path.read_text().replace(digest, digest + "\\n"))
    with pytest.raises(ConfigError) as info:
        load_study(locked.prereg)
    assert info.value.field == "sha256"
    assert str(path) in str(info.value)


def test_new_commit_in_repo_does_not_break_lock(locked: StudyFiles) -> None:
    """The base commit is pinned by SHA: moving HEAD does not change the experiment."""
    (locked.repo / "new.txt").write_text("x")
    run_git(locked.repo, "add", "-A")
    run_git(locked.repo, "commit", "-q", "-m", "more")
    verify_lock(load_study(locked.prereg))


def test_relocking_replaces_the_lock(locked: StudyFiles) -> None:
    old = lock_block(locked.prereg)["sha256"]
    locked.prereg.write_text(locked.prereg.read_text().replace("runs_per_arm: 2", "runs_per_arm: 3"))
    with pytest.raises(LockError):
        verify_lock(load_study(locked.prereg))
    digest, _ = lock(locked.prereg, now=NOW)
    assert digest != old
    assert "\nlock:" not in locked.prereg.read_text()
    assert lock_block(locked.prereg)["sha256"] == digest
    verify_lock(load_study(locked.prereg))


def test_locking_many_times_is_stable(make_study: StudyFactory) -> None:
    s = make_study()
    lock(s.prereg, now=NOW)
    first = s.prereg.read_bytes()
    for _ in range(3):
        lock(s.prereg, now=NOW)
    assert s.prereg.read_bytes() == first


def test_comments_above_the_block_survive(locked: StudyFiles) -> None:
    text = locked.prereg.read_text()
    assert text.startswith("# Preregistration written by a careful person.\n# These comments must survive")
    assert "expected_effect: fewer failed verifies" in text
    lock(locked.prereg, now=NOW)
    assert locked.prereg.read_text().startswith(DEFAULT_PREREG)


def test_no_temporary_files_left(locked: StudyFiles) -> None:
    assert sorted(p.name for p in locked.root.iterdir()) == [
        "preregistration.yaml",
        "preregistration.yaml.lock",
        "repo",
        "skill",
        "tasks.json",
    ]


def test_symlink_inside_skill_folder_refused(make_study: StudyFactory, tmp_path: Path) -> None:
    s = make_study()
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    (s.skill / "key").symlink_to(secret)
    before = s.prereg.read_bytes()
    with pytest.raises(ConfigError) as info:
        lock(s.prereg, now=NOW)
    assert "symlink" in str(info.value)
    assert info.value.field == "skill_ref"
    assert s.prereg.read_bytes() == before


def test_symlinked_directory_inside_skill_folder_refused(make_study: StudyFactory, tmp_path: Path) -> None:
    s = make_study()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_text("x")
    (s.skill / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="symlink"):
        skill_files(s.skill)


def test_symlink_added_after_lock_refused(locked: StudyFiles, tmp_path: Path) -> None:
    (locked.skill / "evil").symlink_to("/etc/passwd")
    with pytest.raises(ConfigError, match="symlink"):
        verify_lock(load_study(locked.prereg))


def test_skill_files_skips_git_and_pycache(make_study: StudyFactory) -> None:
    s = make_study(skill_files={"SKILL.md": "x", ".git/HEAD": "ref", "__pycache__/a.pyc": "b", "sub/b.md": "c"})
    assert sorted(skill_files(s.skill)) == ["SKILL.md", "sub/b.md"]


def test_skill_file_too_large_refused(make_study: StudyFactory) -> None:
    s = make_study()
    (s.skill / "big.bin").write_bytes(b"x" * ((1 << 20) + 1))
    with pytest.raises(ConfigError, match="larger than"):
        skill_files(s.skill)


def test_fifo_in_skill_folder_refused(make_study: StudyFactory) -> None:
    s = make_study()
    os.mkfifo(s.skill / "pipe")
    with pytest.raises(ConfigError, match="not a regular file"):
        skill_files(s.skill)


def test_lock_with_unknown_base_ref_names_the_field(make_study: StudyFactory) -> None:
    s = make_study(prereg=DEFAULT_PREREG + "  base_ref: no-such-branch\n")
    before = s.prereg.read_bytes()
    with pytest.raises(ConfigError) as info:
        lock(s.prereg, now=NOW)
    assert info.value.field == "execution.base_ref"
    assert s.prereg.read_bytes() == before


def test_lock_without_a_repository(make_study: StudyFactory) -> None:
    s = make_study(with_repo=False)
    with pytest.raises(ConfigError) as info:
        lock(s.prereg, now=NOW)
    assert info.value.field == "execution.repo"


def test_fingerprint_covers_base_sha(make_study: StudyFactory) -> None:
    study = load_study(make_study().prereg)
    a, files_a = lock_digest(study, "a" * 40)
    b, files_b = lock_digest(study, "b" * 40)
    assert a != b
    assert files_a == files_b


def test_strip_lock_block_keeps_keys_after_the_block() -> None:
    text = "skill: x\nlock:\n  sha256: abc\n  files:\n    a: b\n\nshelf: s\n"
    assert strip_lock_block(text) == "skill: x\nshelf: s\n"
    assert strip_lock_block("skill: x") == "skill: x\n"


def test_a_preregistration_inside_the_skill_folder_can_be_locked_and_verified(tmp_path: Path) -> None:
    """`make eval SKILL=dir` looks for dir/preregistration.yaml: locking must not invalidate itself."""
    from harness.study.config import load_study
    from harness.study.lock import lock, verify_lock

    init_repo(tmp_path / "repo")
    skill = tmp_path / "skill"
    skill.mkdir()
    (skill / "SKILL.md").write_text("be careful\n")
    (skill / "tasks.json").write_text('{"tasks": [{"id": "t", "prompt": "p", "verify_cmd": "true"}]}')
    prereg = skill / "preregistration.yaml"
    prereg.write_text("skill: s\nskill_ref: .\nexecution:\n  repo: ../repo\n")
    lock(prereg)
    study = load_study(prereg)
    assert verify_lock(study)
    (skill / "SKILL.md").write_text("changed\n")
    with pytest.raises(LockError, match=r"skill/SKILL\.md"):
        verify_lock(load_study(prereg))
