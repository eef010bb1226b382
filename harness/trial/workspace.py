"""Host-side directories of one trial, made before any untrusted code exists.

    <run>/<trial>/            0700, outside the user's repository
        base/                 git worktree of the user's repo at the base SHA: the
                              pristine, controller-owned base (mounted read-only only)
        workspace/            a copy of base with a fresh one-commit .git: the agent's /workspace
        out/                  what the collect container writes (patch, stats, scan)
        verify/               base + patch, protected paths restored: verify's /workspace

The agent never sees the user's .git: its repository is a new one holding only
the base tree (no refs, objects, hooks, config or history of the user's repo).
After the agent starts, the controller never reads or writes inside
``workspace/``: it only mounts it read-only into the collect container. Files it
must read from ``out/`` are opened with ``O_NOFOLLOW`` and a size cap.
Teardown removes the worktree with ``--force --force`` (so git never runs
``status`` in attacker-written content) and deletes the tree without following
symlinks.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InfraError
from harness.host import gitops
from harness.host.trees import remove_tree


@dataclass(frozen=True)
class TrialDirs:
    root: Path
    base: Path
    workspace: Path
    out: Path
    verify: Path

    @classmethod
    def at(cls, root: Path) -> TrialDirs:
        """The layout of a trial directory (whether or not it exists yet)."""
        return cls(root, root / "base", root / "workspace", root / "out", root / "verify")


def container_user() -> tuple[int, int]:
    """The default owner of a trial's directories: the host user's own, or 1000 when the controller
    is root. A run passes its own choice to :func:`prepare` (see :mod:`harness.sandbox.uids`)."""
    uid, gid = os.getuid(), os.getgid()
    return (1000, 1000) if uid == 0 else (uid, gid)


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _copy_base(base: Path, dest: Path) -> None:
    """Copy the pristine base (trusted content) without its worktree .git file."""
    shutil.copytree(base, dest, symlinks=True, ignore=lambda d, names: [".git"] if Path(d) == base else [])


def parse_user(user: str) -> tuple[int, int]:
    """``"uid:gid"`` (a profile's user) as numbers."""
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def prepare(repo: Path, base_sha: str, root: Path, owner: tuple[int, int] | None = None) -> TrialDirs:
    """Create every directory of a trial. On failure, whatever was made is removed again.
    ``owner`` is the uid:gid the untrusted containers run as (default :func:`container_user`)."""
    dirs = TrialDirs.at(root)
    uid, gid = owner or container_user()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=False)
        gitops.add_worktree(repo, dirs.base, base_sha)
        _copy_base(dirs.base, dirs.workspace)
        gitops.init_snapshot_repo(dirs.workspace)
        agent_config = str(dirs.workspace / ".git" / "config")
        gitops.git(["config", "--file", agent_config, "user.name", "agent"])
        gitops.git(["config", "--file", agent_config, "user.email", "agent@sandbox"])
        dirs.out.mkdir(mode=0o755)
        dirs.verify.mkdir(mode=0o755)
        if os.getuid() == 0:
            for path in (dirs.workspace, dirs.out, dirs.verify):
                _chown_tree(path, uid, gid)
    except FileExistsError:
        raise InfraError(f"trial directory {root} already exists (a leftover of a killed run? `harness gc`)") from None
    except OSError as e:
        remove(repo, dirs)
        raise InfraError(f"preparing {root} failed: {e}") from e
    except BaseException:
        remove(repo, dirs)
        raise
    return dirs


def remove(repo: Path, dirs: TrialDirs) -> None:
    """Idempotent teardown: worktree first (so git's admin entry goes), then the whole tree."""
    if dirs.root.exists():
        gitops.remove_worktree(repo, dirs.base)
        remove_tree(dirs.root)
    if dirs.root.exists():
        raise InfraError(f"could not remove {dirs.root}")


def read_capped(path: Path, cap: int) -> bytes:
    """Read a file the collect container wrote: no symlinks, no FIFOs, regular files only, capped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ELOOP):
            return b""
        raise InfraError(f"reading {path.name} failed: {e.strerror}") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        chunks: list[bytes] = []
        left = cap
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
