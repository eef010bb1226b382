"""A killed run's trial directories (and the gateway's key file in them) are found by gc whatever TMPDIR says."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.errors import PrerequisiteError
from harness.host import gitops, workroots
from harness.host import paths as host_paths
from harness.host.paths import HostPaths
from harness.host.workroots import OWNER_FILE
from harness.sandbox import pool
from harness.sandbox.engine import EngineAddress
from harness.sandbox.labels import PID, make_labels
from harness.sandbox.reaper import sweep_known_roots, sweep_work_root
from tests.factories import init_repo
from tests.fakes import FakeRuntime


def _killed_run(root: Path) -> Path:
    """What a SIGKILLed controller leaves: a run directory owned by a dead pid, with the key file."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    run = root / "deadbeef"
    (run / "secrets").mkdir(parents=True)
    (run / "secrets" / "api-key").write_text("sk-ant-test")
    (run / OWNER_FILE).write_text(f"{int(proc.stdout)} {socket.gethostname()}\n")
    return run


@pytest.fixture
def two_tmpdirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], dict[str, str]]:
    """The run's environment and gc's, with different TMPDIRs; the shared places in this test's own /tmp."""
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr(host_paths, "SHARED_ROOT", shared)
    first, second = tmp_path / "tmp-a", tmp_path / "tmp-b"
    first.mkdir()
    second.mkdir()
    return {"TMPDIR": str(first)}, {"TMPDIR": str(second)}


def test_gc_under_another_tmpdir_still_removes_a_killed_runs_key_file(
    two_tmpdirs: tuple[dict[str, str], dict[str, str]],
) -> None:
    run_env, gc_env = two_tmpdirs
    run_paths = HostPaths.from_env(run_env)
    root = workroots.prepare(run_paths)  # what every run does before it makes its directory
    run = _killed_run(root)
    gc_paths = HostPaths.from_env(gc_env)  # gc from a shell with another TMPDIR
    assert gc_paths.work_root != root and gc_paths.work_roots == run_paths.work_roots
    assert sweep_work_root(gc_paths.work_root) == 0, "positive control: gc's own default root misses it"
    assert run.exists()
    assert sweep_known_roots(gc_paths) == 1
    assert not run.exists()


def test_harness_gc_under_another_tmpdir_removes_a_killed_runs_trial_directories(
    two_tmpdirs: tuple[dict[str, str], dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_env, gc_env = two_tmpdirs
    root = workroots.prepare(HostPaths.from_env(run_env))
    run = _killed_run(root)
    (run / "fix-mean.baseline.0" / "workspace").mkdir(parents=True)  # a trial's agent-written tree
    alive = root / "cafe"  # a live run's directory stays
    alive.mkdir()
    (alive / OWNER_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")
    monkeypatch.setattr(cli, "_engine", lambda env: FakeRuntime())
    monkeypatch.setattr(pool, "remembered_engines", lambda registry: [])  # this user's pool runs are not this test's
    assert cli.main(["gc"], env={**gc_env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}) == 0
    out = capsys.readouterr().out
    assert "removed 1 trial directory tree(s) of killed runs" in out, out
    assert not run.exists() and alive.exists()


def test_gc_reaches_every_engine_a_pool_run_recorded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Orphans of a killed run on each engine the run recorded; an engine that does not answer is said."""
    remote = FakeRuntime()
    labels = make_labels("dead0001", role="trial", ttl_s=3600)
    remote.create_network("hx-dead0001-t-net", {**labels, PID: "999999999"}, internal=True)
    reached = EngineAddress("tcp://10.1.2.3:2376", name="build-1")
    down = EngineAddress("ssh://ci@build-2", name="build-2")

    def connect(address: EngineAddress) -> FakeRuntime:
        if address is down:
            raise PrerequisiteError("ssh: connection refused")
        return remote

    monkeypatch.setattr(cli, "_engine", lambda env: FakeRuntime())
    monkeypatch.setattr(cli, "_engine_at", connect)
    monkeypatch.setattr(pool, "remembered_engines", lambda registry: [reached, down])
    assert cli.main(["gc"], env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}) == 0
    out = capsys.readouterr().out
    assert "engine build-1: removed network hx-dead0001-t-net" in out, out
    assert "engine build-2 (ssh://ci@build-2): not reached: ssh: connection refused" in out, out
    assert remote.networks == {}


def test_remember_records_a_root_once(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    workroots.remember(root, registry)
    workroots.remember(root, registry)
    assert registry.read_text().splitlines() == [str(root)]
    assert registry.stat().st_mode & 0o777 == 0o600
    assert workroots.known(tmp_path / "default", registry) == [tmp_path / "default", root]


def test_a_registry_that_is_not_ours_or_is_writable_by_others_is_ignored(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    registry = tmp_path / "registry"
    registry.write_text(f"{root}\n")
    os.chmod(registry, 0o600)
    assert workroots.known(tmp_path / "d", registry) == [tmp_path / "d", root]  # positive control
    os.chmod(registry, 0o666)
    assert workroots.known(tmp_path / "d", registry) == [tmp_path / "d"]
    os.chmod(registry, 0o600)
    link = tmp_path / "link"
    link.symlink_to(registry)
    assert workroots.known(tmp_path / "d", link) == [tmp_path / "d"]
    workroots.remember(tmp_path, link)  # never written through a link
    assert registry.read_text() == f"{root}\n"


def test_a_recorded_root_writable_by_others_is_not_swept(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    shared = tmp_path / "shared"
    shared.mkdir()
    workroots.remember(shared, registry)
    os.chmod(shared, 0o777)
    assert workroots.known(tmp_path / "d", registry) == [tmp_path / "d"]


def _worktrees(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.startswith("worktree ")]


def test_sweeping_a_killed_runs_directory_prunes_its_worktrees_in_the_noted_repository(tmp_path: Path) -> None:
    """Issue 24 item 10: `skilltrial gc` after a killed run also drops the worktree registration it left in
    the user's repository (before, only the next eval in that repository pruned it)."""
    repo = tmp_path / "user-repo"
    sha = init_repo(repo, {"README.md": "hi\n"})
    root = tmp_path / "work"
    root.mkdir()
    # positive control: a run directory that noted nothing (main's) leaves its registration behind
    unnoted = _killed_run(root)
    gitops.add_worktree(repo, unnoted / "base" / "checkout", sha)
    assert sweep_work_root(root) == 1 and not unnoted.exists()
    assert len(_worktrees(repo)) == 2, "registered, its tree gone"
    gitops.prune_worktrees(repo)
    noted = _killed_run(root)
    workroots.note_repository(noted, repo)
    workroots.note_repository(noted, repo)  # once
    assert workroots.noted_repositories(noted) == [repo.resolve()]
    gitops.add_worktree(repo, noted / "base" / "checkout", sha)
    assert len(_worktrees(repo)) == 2
    assert sweep_work_root(root) == 1 and not noted.exists()
    assert len(_worktrees(repo)) == 1, _worktrees(repo)


def test_a_noted_repository_that_is_gone_or_a_relative_line_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    run = _killed_run(root)
    (run / workroots.REPOSITORIES_FILE).write_text(f"relative/repo\n{tmp_path / 'gone'}\n")
    assert workroots.noted_repositories(run) == [tmp_path / "gone"]
    assert sweep_work_root(root) == 1 and not run.exists()
