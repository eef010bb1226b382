"""Every place trial directories have lived, recorded where a later ``skilltrial gc`` finds it.

Trial directories hold agent-written trees and the gateway's key file. They live under the
work root (:attr:`harness.host.paths.HostPaths.work_root`: ``$TMPDIR/harness-<uid>`` of the run).
``TMPDIR`` differs between shells, CI jobs and cron entries, so a killed run's directories could
sit where the next ``skilltrial gc`` never looks, key file included. Each run therefore records its
work root in a per-user file at a fixed place (:attr:`~harness.host.paths.HostPaths.work_roots`,
``/tmp/harness-work-roots-<uid>``, like the host slots), and gc and every start sweep all the
roots recorded there (:mod:`harness.sandbox.reaper`).

The record is in a world-writable directory, so it is trusted only when it is a regular file of
ours (not a link) and not writable by others, and a recorded root only when it is a directory of
ours; the sweep itself removes only run directories whose owner file names a dead controller on
this host, and never follows links. A run directory also names the repositories whose worktrees it
holds (:data:`REPOSITORIES_FILE`), so the sweep prunes their registrations too.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from harness.host.paths import HostPaths

OWNER_FILE = "owner"
"""In every run directory: ``<pid> <host>`` of its controller (a dead one's directory is swept)."""
REPOSITORIES_FILE = "repositories"
"""In a run directory that holds git worktrees of the user's repositories (the base trees, the
preflight's tree): each repository, one per line, written before its worktree is added. A sweep that
removes the directory of a killed run prunes their worktree registrations (``.git/worktrees/<name>``),
which would otherwise name a tree that is gone until a run in that repository pruned them."""


def _ours(st: os.stat_result, kind: int) -> bool:
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.getuid() and not st.st_mode & 0o022


def prepare(paths: HostPaths) -> Path:
    """The work root, made (0700) and recorded: what every run does before it makes a directory there."""
    root = paths.work_root
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    remember(root, paths.work_roots)
    return root


def remember(root: Path, registry: Path) -> None:
    """Record ``root`` (once). A registry that is not ours is left alone: gc then sees only the default."""
    remember_line(str(root.resolve()), registry)


def remember_line(line: str, registry: Path) -> None:
    """Record one line in a per-user registry (once): work roots here, the engines runs used
    (:func:`harness.sandbox.pool.remember_engines`)."""
    if "\n" in line:
        return
    try:
        fd = os.open(registry, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    try:
        if not _ours(os.fstat(fd), stat.S_IFREG):
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "r", encoding="utf-8", errors="replace") as f:
            f.seek(0)
            if line in f.read().splitlines():
                return
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def recorded_lines(registry: Path) -> list[str]:
    """The lines of a per-user registry, when it is a regular file of ours (else none)."""
    try:
        fd = os.open(registry, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return []
    try:
        if not _ours(os.fstat(fd), stat.S_IFREG):
            return []
        with os.fdopen(os.dup(fd), "r", encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20).splitlines()
    finally:
        os.close(fd)


def known(default: Path, registry: Path) -> list[Path]:
    """The default work root and every recorded one that is still a directory of ours."""
    roots = [default]
    for text in recorded_lines(registry):
        path = Path(text)
        if not path.is_absolute() or path in roots:
            continue
        try:
            if _ours(path.lstat(), stat.S_IFDIR):
                roots.append(path)
        except OSError:
            continue
    return roots


def note_repository(run_dir: Path, repo: Path) -> None:
    """Record, in ``run_dir`` (ours), that a worktree of ``repo`` is about to be added under it (once)."""
    line = str(repo.resolve())
    if "\n" in line:
        return
    noted = run_dir / REPOSITORIES_FILE
    if Path(line) in noted_repositories(run_dir):
        return
    fd = os.open(noted, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def noted_repositories(run_dir: Path) -> list[Path]:
    """The repositories ``run_dir`` noted (absolute paths; none when it noted nothing or is unreadable)."""
    try:
        fd = os.open(run_dir / REPOSITORIES_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return []
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as f:
        lines = f.read(1 << 20).splitlines()
    return [Path(line) for line in dict.fromkeys(lines) if line.startswith("/")]
