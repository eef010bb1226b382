"""A killed run's trial directories (and the gateway's key file in them) are found by gc whatever TMPDIR says."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.experiment.experiment import sweep_known_roots, sweep_work_root
from harness.host import workroots
from harness.host.workroots import OWNER_FILE


def _killed_run(root: Path) -> Path:
    """What a SIGKILLed controller leaves: a run directory owned by a dead pid, with the key file."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    run = root / "deadbeef"
    (run / "secrets").mkdir(parents=True)
    (run / "secrets" / "api-key").write_text("sk-ant-test")
    (run / OWNER_FILE).write_text(f"{int(proc.stdout)} {socket.gethostname()}\n")
    return run


def test_gc_under_another_tmpdir_still_removes_a_killed_runs_key_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = tmp_path / "registry"
    monkeypatch.setattr(workroots, "registry_path", lambda: registry)
    first, second = tmp_path / "tmp-a", tmp_path / "tmp-b"
    first.mkdir()
    second.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(first))
    root = workroots.default_work_root()
    root.mkdir(mode=0o700)
    workroots.remember(root)  # what Experiment._work_root does
    run = _killed_run(root)
    monkeypatch.setattr(tempfile, "tempdir", str(second))  # gc from a shell with another TMPDIR
    assert workroots.default_work_root() != root
    assert sweep_work_root(workroots.default_work_root()) == 0, "positive control: the default root misses it"
    assert run.exists()
    assert sweep_known_roots() == 1
    assert not run.exists()


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
