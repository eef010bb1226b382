"""Host-side directories of one trial, made before any untrusted code exists, and the run's base trees
they stand on (docs/design.md#workspaces).

A trial's cost must not grow with the size of the user's repository (issue 17). So the pristine base of
each base commit is made once per run (:class:`BaseTrees`), and each trial gets a copy-on-write view of
it where the machine allows one:

    <run>/base-<sha12>/
        checkout/             git worktree of the user's repo at the base SHA (collect's read-only /base)
        template/             its tree with a fresh one-commit .git, owned by the agent's uid: what
                              every trial's /workspace starts as; that .git's index and objects are
                              also what collect diffs against (the base is hashed once)
    <run>/<trial>/            0700
        workspace/            the agent's /workspace: an overlay mount (lower: template, upper: upper/)
                              or, where overlay is not available, a copy of template
        upper/ work/          overlay only: what the agent wrote, and overlayfs's scratch directory
        verify/ verify-upper/ verify-work/
                              overlay only: verify's tree (template + patch, made by collect)
        changes/              overlay only: the lists of what changed, made from upper/ by the controller
        out/                  what the collect container writes (patch, stats, scan)

``overlay`` needs a controller that may mount (root) and a filesystem overlayfs accepts as upper; the
probe (:func:`overlay_available`) decides once per process, and every record says which one ran. The agent
never sees the user's .git: its repository is a new one holding only the base tree. After the agent starts,
the controller never reads or writes inside ``workspace/``: it only mounts it read-only into the collect
container, and walks ``upper/`` by ``lstat`` (never following a link, never opening a file) for the
watchdog and the change lists. Files it must read from ``out/`` are opened with ``O_NOFOLLOW`` and a size
cap. The shared trees are only ever mounted read-only or as an overlay's lower layer, which no trial can
write. Teardown unmounts, then deletes the tree without following symlinks (:func:`remove_tree`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.errors import InfraError
from harness.host import gitops
from harness.host.trees import Seen, mount_overlay, overlay_available, remove_tree, walk_nofollow

WorkspaceKind = Literal["overlay", "copy"]

OPAQUE_XATTR = "trusted.overlay.opaque"
CHANGE_LISTS = ("changed", "gone", "special", "nested")


@dataclass(frozen=True)
class BaseTree:
    """One base commit's trees, made once per run (see the module docstring)."""

    checkout: Path
    template: Path
    index: Path
    """The template's own repository (``template/.git``): its index and objects are the base."""


@dataclass(frozen=True)
class TrialDirs:
    root: Path
    workspace: Path
    out: Path
    verify: Path
    upper: Path
    work: Path
    verify_upper: Path
    verify_work: Path
    changes: Path
    kind: WorkspaceKind = "copy"

    @classmethod
    def at(cls, root: Path, kind: WorkspaceKind = "copy") -> TrialDirs:
        """The layout of a trial directory (whether or not it exists yet)."""
        return cls(
            root,
            root / "workspace",
            root / "out",
            root / "verify",
            root / "upper",
            root / "work",
            root / "verify-upper",
            root / "verify-work",
            root / "changes",
            kind,
        )

    @property
    def watched(self) -> Path:
        """What the watchdog walks: only what the agent wrote (overlay), or the whole copy."""
        return self.upper if self.kind == "overlay" else self.workspace


def container_user() -> tuple[int, int]:
    """The default owner of a trial's directories: the host user's own, or 1000 when the controller
    is root. A run passes its own choice (see :mod:`harness.sandbox.uids`)."""
    uid, gid = os.getuid(), os.getgid()
    return (1000, 1000) if uid == 0 else (uid, gid)


def parse_user(user: str) -> tuple[int, int]:
    """``"uid:gid"`` (a profile's user) as numbers."""
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, name), uid, gid)


_COLLECT_CONFIG = (
    "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.attributesFile=/dev/null",
    "-c", "core.excludesFile=/dev/null", "-c", "core.autocrlf=false", "-c", "core.safecrlf=false",
    "-c", "core.symlinks=true", "-c", "core.quotePath=true", "-c", "gc.auto=0", "-c", "user.name=harness",
    "-c", "user.email=harness@localhost", "-c", "commit.gpgSign=false", "-c", "core.bigFileThreshold=1m",
)  # fmt: skip
"""The options collect.sh's ``G`` passes to git: the template's repository is made under the same ones,
so its index is the base exactly as collect's full mode adds it, and collect's incremental mode starts
from it (mounted read-only at ``/basegit``: the lower layer, which no agent write reaches)."""


class BaseTrees:
    """The base trees of one run, each made on first use (thread-safe) and removed by :meth:`close`.

    ``owner`` is the uid:gid the untrusted containers run as; ``kind`` forces a workspace kind (tests),
    else overlay where :func:`overlay_available` says so."""

    def __init__(
        self, repo: Path, run_root: Path, owner: tuple[int, int] | None = None, kind: WorkspaceKind | None = None
    ) -> None:
        self.repo = repo
        self.run_root = run_root
        self.owner = owner or container_user()
        self._kind = kind
        self._lock = threading.Lock()
        self._trees: dict[str, BaseTree] = {}
        self._building: dict[str, threading.Lock] = {}

    @property
    def kind(self) -> WorkspaceKind:
        if self._kind is None:
            self._kind = "overlay" if overlay_available(self.run_root) else "copy"
        return self._kind

    def get(self, sha: str) -> BaseTree:
        with self._lock:
            if sha in self._trees:
                return self._trees[sha]
            building = self._building.setdefault(sha, threading.Lock())
        with building:
            with self._lock:
                if sha in self._trees:
                    return self._trees[sha]
            tree = self._build(sha)
            with self._lock:
                self._trees[sha] = tree
            return tree

    def _build(self, sha: str) -> BaseTree:
        root = self.run_root / f"base-{sha[:12]}"
        tree = BaseTree(root / "checkout", root / "template", root / "template" / ".git")
        try:
            root.mkdir(mode=0o700)
            gitops.add_worktree(self.repo, tree.checkout, sha)
            tree.template.mkdir(mode=0o755)
            subprocess.run(  # the trusted checkout's tree, without its worktree .git file
                ["cp", "-a", "--reflink=auto", "--", *_entries(tree.checkout), str(tree.template)],
                check=True,
                capture_output=True,
            )
            gitops.init_snapshot_repo(tree.template, _COLLECT_CONFIG)
            # one pack instead of a loose object per file: collect's `rm -rf /verify/.git` on the overlay
            # writes a whiteout per entry, and the agent's git, teardown and the copy fallback walk them
            gitops.git(["repack", "-a", "-d", "-q", "--window=0"], cwd=tree.template, env=_git_dir(tree.template))
            agent_config = str(tree.template / ".git" / "config")
            gitops.git(["config", "--file", agent_config, "user.name", "agent"])
            gitops.git(["config", "--file", agent_config, "user.email", "agent@sandbox"])
            if os.getuid() == 0:
                _chown_tree(tree.template, *self.owner)
        except (OSError, subprocess.CalledProcessError) as e:
            self._remove(tree)
            detail = e.stderr.decode("utf-8", "replace")[-300:] if isinstance(e, subprocess.CalledProcessError) else e
            raise InfraError(f"preparing the base tree of {sha[:12]} failed: {detail}") from e
        except BaseException:
            self._remove(tree)
            raise
        return tree

    def _remove(self, tree: BaseTree) -> None:
        if tree.checkout.exists():
            gitops.remove_worktree(self.repo, tree.checkout)
        remove_tree(tree.checkout.parent)

    def close(self) -> None:
        """Remove every base tree (worktree admin entry in the user's repo included). Idempotent."""
        with self._lock:
            trees, self._trees = list(self._trees.values()), {}
        for tree in trees:
            self._remove(tree)


def _git_dir(tree: Path) -> dict[str, str]:
    return {"GIT_DIR": str(tree / ".git"), "GIT_WORK_TREE": str(tree)}


def _entries(directory: Path) -> list[str]:
    return [str(directory / name) for name in sorted(os.listdir(directory)) if name != ".git"]


def prepare(base: BaseTree, root: Path, owner: tuple[int, int], kind: WorkspaceKind) -> TrialDirs:
    """Create every directory of a trial on ``base``. On failure, whatever was made is removed again.
    ``owner`` is the uid:gid the untrusted containers run as."""
    dirs = TrialDirs.at(root, kind)
    uid, gid = owner
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=False)
        made = [dirs.out]
        if kind == "overlay":
            made += [dirs.upper, dirs.work, dirs.workspace, dirs.verify_upper, dirs.verify_work, dirs.verify]
            made.append(dirs.changes)
        for path in made:
            path.mkdir(mode=0o755)
        if kind == "overlay":
            top = os.stat(base.template)  # the merged root takes the upper root's owner and mode
            for upper in (dirs.upper, dirs.verify_upper):
                os.chmod(upper, stat.S_IMODE(top.st_mode))
                os.chown(upper, top.st_uid, top.st_gid)
            mount_overlay(base.template, dirs.upper, dirs.work, dirs.workspace)
            mount_overlay(base.template, dirs.verify_upper, dirs.verify_work, dirs.verify)
        else:
            subprocess.run(
                ["cp", "-a", "--reflink=auto", "--", str(base.template), str(dirs.workspace)],
                check=True,
                capture_output=True,
            )
            dirs.verify.mkdir(mode=0o755)
        if os.getuid() == 0:
            for path in (dirs.out, *(() if kind == "overlay" else (dirs.verify,))):
                os.lchown(path, uid, gid)
    except FileExistsError:
        raise InfraError(f"trial directory {root} already exists (a leftover of a killed run? `harness gc`)") from None
    except (OSError, subprocess.CalledProcessError) as e:
        remove(dirs)
        raise InfraError(f"preparing {root} failed: {e}") from e
    except BaseException:
        remove(dirs)
        raise
    return dirs


def remove(dirs: TrialDirs) -> None:
    """Idempotent teardown: the overlay mounts are detached, then the whole tree goes."""
    remove_tree(dirs.root)
    if dirs.root.exists():
        raise InfraError(f"could not remove {dirs.root}")


# ----------------------------------------------------------------- what the agent changed


@dataclass(frozen=True)
class Changes:
    """NUL-separated lists for collect.sh's incremental mode (paths relative to the workspace's top)."""

    changed: bytes
    """Files, links and other non-directories the agent created or modified (not under the top .git)."""
    gone: bytes
    """Paths the agent deleted (whiteouts) and directories it replaced (opaque): their base entries
    that are missing from the workspace are deletions."""
    special: bytes
    """FIFOs, sockets, devices, setuid/setgid files: ``/workspace/<path>`` (collect.sh's format)."""
    nested: bytes
    """``.git`` entries below the top: ``/workspace/<path>/.git`` (collect.sh's format)."""


def changes(upper: Path, cap: int = 65536) -> Changes:
    """Walk the overlay's upper directory (what the agent wrote) without following a link or opening
    anything but directories, and sort it into :class:`Changes`. Its size is bounded by the watchdog."""
    changed: list[bytes] = []
    gone: list[bytes] = []
    special: list[bytes] = []
    nested: list[bytes] = []

    def descend(seen: Seen) -> bool:  # a nested repository is left out of the diff, as collect.sh does
        return not (seen.name == b".git" and seen.depth > 0)

    with contextlib.closing(walk_nofollow(upper, descend)) as entries:
        for seen in entries:
            rel, mode = seen.rel, seen.st.st_mode
            if not descend(seen):
                nested.append(b"/workspace/" + rel)
                continue
            under_git = rel == b".git" or rel.startswith(b".git/")
            if stat.S_ISCHR(mode) and seen.st.st_rdev == 0:
                if not under_git:
                    gone.append(rel)  # a whiteout: the base entry at rel was deleted
                continue
            if not under_git and (
                stat.S_ISFIFO(mode)
                or stat.S_ISSOCK(mode)
                or stat.S_ISBLK(mode)
                or stat.S_ISCHR(mode)
                or (stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID))
            ):
                special.append(b"/workspace/" + rel)
            if stat.S_ISDIR(mode):
                if not under_git and _opaque(seen.dir_fd, seen.name):
                    gone.append(rel)  # removed and made again: the base entries below it are gone
            elif not under_git:
                changed.append(rel)
    return Changes(
        b"".join(p + b"\0" for p in sorted(changed)),
        b"".join(p + b"\0" for p in sorted(gone)),
        b"".join(p + b"\0" for p in sorted(special))[:cap],
        b"".join(p + b"\0" for p in sorted(nested))[:cap],
    )


def write_changes(dirs: TrialDirs) -> Changes:
    """The change lists of an overlay trial, written to ``changes/`` for the collect container."""
    found = changes(dirs.upper)
    for name in CHANGE_LISTS:
        (dirs.changes / name).write_bytes(getattr(found, name))
    return found


def _opaque(fd: int, name: bytes) -> bool:
    try:
        return os.getxattr(f"/proc/self/fd/{fd}/".encode() + name, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


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
