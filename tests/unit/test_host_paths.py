"""HostPaths: the environment is read once, and only the work root follows TMPDIR."""

from __future__ import annotations

import os
from pathlib import Path

from harness.host import gitops
from harness.host.paths import HostPaths, shared_dir, temp_dir
from harness.host.slots import host_lock


def test_what_processes_share_does_not_follow_tmpdir_and_the_work_root_does(tmp_path: Path) -> None:
    """CI runners give jobs their own TMPDIR; slots, locks and the work-roots record must still be shared."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    first, second = HostPaths.from_env({"TMPDIR": str(a)}), HostPaths.from_env({"TMPDIR": str(b)})
    assert (first.slots_dir, first.locks_dir, first.work_roots) == (
        second.slots_dir,
        second.locks_dir,
        second.work_roots,
    )
    assert first.work_roots == Path("/tmp") / f"harness-work-roots-{os.getuid()}"
    assert first.work_root == a / f"harness-{os.getuid()}" and second.work_root == b / f"harness-{os.getuid()}"
    assert HostPaths.from_env({"HARNESS_SLOTS_DIR": "/x/y"}).slots_dir == Path("/x/y")


def test_the_temporary_directory_is_chosen_like_gettempdir_but_from_the_given_environment(tmp_path: Path) -> None:
    assert temp_dir({"TMPDIR": str(tmp_path)}) == tmp_path
    assert temp_dir({"TMPDIR": str(tmp_path / "missing"), "TMP": str(tmp_path)}) == tmp_path
    assert temp_dir({}) == Path("/tmp")


def test_host_locks_default_to_the_shared_directory(tmp_path: Path) -> None:
    with host_lock("test-host-paths", tmp_path / "locks"):
        assert (tmp_path / "locks" / "test-host-paths.lock").is_file()
    assert shared_dir("locks") == HostPaths.from_env({"TMPDIR": str(tmp_path)}).locks_dir


def test_git_env_is_built_from_the_environment_it_is_given() -> None:
    base = {"PATH": "/opt/bin", "HOME": "/home/me", "GIT_DIR": "/elsewhere", "TMPDIR": "/t", "SECRET": "x"}
    env = gitops.git_env(base, {"GIT_DIR": "/mine"})
    assert env["PATH"] == "/opt/bin" and env["TMPDIR"] == "/t" and env["GIT_DIR"] == "/mine"
    assert env["HOME"] == "/nonexistent" and "SECRET" not in env
    assert gitops.git_env({})["PATH"] == "/usr/local/bin:/usr/bin:/bin" and "GIT_DIR" not in gitops.git_env(base)
