"""Host-side directories of one trial, made before any untrusted code exists, and the run's base trees
they stand on (docs/design.md#workspaces).

A trial's cost must not grow with the size of the user's repository (issue 17). So the pristine base of
each base commit is made once per run (:class:`BaseTrees`), and each trial gets a copy-on-write view of
it where the machine allows one:

    <run>/base-<sha12>/
        checkout/             git worktree of the user's repo at the base SHA (collect's read-only /base),
                              without the lock's ``base_excluded`` (the experiment's own files, copies
                              of the skill under test): every tree below is made from it
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
probe (:func:`overlay_available`) decides once per process, and every record says which one ran.

``volume`` is the same overlay made by the engine instead of the controller, for an engine on another
machine (``DOCKER_HOST=ssh://`` or ``tcp://``), which sees none of this machine's paths; a local engine
uses it with ``HARNESS_WORKSPACE=volume``. Nothing of a trial's trees is then a path here:

    hx-<run>-base-<sha12>     volume: the template, filled once per run through the archive API
    hx-<run>-<trial>-scratch  volume: upper/ work/ verify-upper/ verify-work/ out/ (one fill, owners set)
    hx-<run>-<trial>-ws       overlay volume: base + scratch/upper, the agent's /workspace
    hx-<run>-<trial>-vf       overlay volume: base + scratch/verify-upper, collect's /verify, then verify's

The engine's local volume driver mounts the overlays (``nosuid,nodev``) when a container uses them.
Collect lists the upper directory itself (the controller cannot walk it), the outputs come back as one
capped archive (:func:`read_out_archive`), and the workspace watchdog runs in the engine
(:class:`harness.trial.watchdog.EngineWatchdog`). Every volume carries the trial's labels: teardown and
``skilltrial gc`` find them like the trial's containers. The agent
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
import io
import os
import stat
import subprocess
import tarfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple, get_args

from harness.errors import ConfigError, InfraError
from harness.host import gitops, workroots
from harness.host.trees import Seen, mount_overlay, overlay_available, remove_tree, walk_nofollow
from harness.sandbox import names, volumes
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import ContainerRuntime, DockerObject, VolumeDir
from harness.trial.watchdog import census

WorkspaceKind = Literal["overlay", "copy", "volume"]
KIND_VARIABLE = "HARNESS_WORKSPACE"
"""Forces a workspace kind (``overlay``, ``copy`` or ``volume``); unset: chosen by the engine and the probe."""

OPAQUE_XATTR = "trusted.overlay.opaque"
CHANGE_LISTS = ("changed", "gone", "special", "nested")


def kind_from_env(env: Mapping[str, str]) -> WorkspaceKind | None:
    """:data:`KIND_VARIABLE`, checked; None when it is unset or empty."""
    value = env.get(KIND_VARIABLE, "").strip()
    if not value:
        return None
    for kind in get_args(WorkspaceKind):
        if value == kind:
            return kind  # type: ignore[no-any-return]
    raise ConfigError(KIND_VARIABLE, f"must be one of overlay, copy, volume; got {value!r}")


@dataclass(frozen=True)
class EngineSide:
    """Where volume workspaces live: the engine, the image of the never-started containers that fill
    volumes (:func:`harness.sandbox.volumes.fill`), the run's labels and its id (the base volumes are the
    run's objects: :mod:`harness.sandbox.names`)."""

    runtime: ContainerRuntime
    image: str
    labels: Mapping[str, str]
    run_id: str


@dataclass(frozen=True)
class BaseTree:
    """One base commit's trees, made once per run (see the module docstring)."""

    checkout: Path
    template: Path
    index: Path
    """The template's own repository (``template/.git``): its index and objects are the base."""
    volume: str | None = None
    """Volume workspaces: the template in a volume of the engine (the overlays' lower layer, collect's /base)."""
    depth: int = 0
    """Volume workspaces: the template's deepest directory level (the in-engine watchdog's depth floor)."""


class TrialVolumes(NamedTuple):
    """A volume workspace's volumes (see the module docstring), named before any exists: teardown
    removes them by name on every path."""

    scratch: str
    workspace: str
    verify: str

    @classmethod
    def of(cls, trial: TrialNames) -> TrialVolumes:
        return cls(trial.scratch_volume, trial.workspace_volume, trial.verify_volume)

    def objects(self) -> list[DockerObject]:
        """Overlays first: nothing mounts them once the trial's containers are gone."""
        return [DockerObject("volume", v) for v in (self.workspace, self.verify, self.scratch)]


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
    volumes: TrialVolumes | None = None
    """Volume workspaces only: then none of the paths above exists."""

    @classmethod
    def at(cls, root: Path, kind: WorkspaceKind = "copy", volumes: TrialVolumes | None = None) -> TrialDirs:
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
            volumes,
        )

    @property
    def watched(self) -> Path:
        """What the watchdog walks: only what the agent wrote (overlay), or the whole copy."""
        return self.upper if self.kind == "overlay" else self.workspace

    @property
    def workspace_tree(self) -> Path | str:
        """The agent's /workspace: a directory of this machine, or a volume's name."""
        return self.volumes.workspace if self.volumes is not None else self.workspace

    @property
    def verify_tree(self) -> Path | str:
        """Verify's /workspace (base + patch, made by collect): a directory, or a volume's name."""
        return self.volumes.verify if self.volumes is not None else self.verify


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
        self,
        repo: Path,
        run_root: Path,
        owner: tuple[int, int] | None = None,
        kind: WorkspaceKind | None = None,
        side: EngineSide | None = None,
        leave_out: Sequence[str] = (),
    ) -> None:
        self.repo = repo
        self.run_root = run_root
        self.leave_out = tuple(leave_out)
        """Paths of the base commit no tree of the run holds (the lock's ``base_excluded``; see
        :func:`harness.host.gitops.checkout_base`, the one place they are left out)."""
        self.owner = owner or container_user()
        self.side = side
        """The engine of volume workspaces (None: only the controller's directories are possible)."""
        if kind == "volume" and side is None:
            raise ValueError("volume workspaces need the engine they live on")
        self._kind = kind
        self._lock = threading.Lock()
        self._trees: dict[str, BaseTree] = {}
        self._building: dict[str, threading.Lock] = {}

    @property
    def kind(self) -> WorkspaceKind:
        """Forced, else ``volume`` on a remote engine (it sees none of this machine's paths), else
        ``overlay`` where the probe allows one, else ``copy``."""
        if self._kind is None:
            if self.side is not None and self.side.runtime.endpoint().remote:
                self._kind = "volume"
            else:
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
            # the one pristine base: the template, the volume and collect's /base are all made from it
            workroots.note_repository(self.run_root, self.repo)  # a gc after a kill prunes its registration
            gitops.checkout_base(self.repo, tree.checkout, sha, self.leave_out)
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
            if self.kind == "volume":
                tree = self._to_volume(tree, sha)
        except (OSError, subprocess.CalledProcessError) as e:
            self._remove(tree)
            detail = e.stderr.decode("utf-8", "replace")[-300:] if isinstance(e, subprocess.CalledProcessError) else e
            raise InfraError(f"preparing the base tree of {sha[:12]} failed: {detail}") from e
        except BaseException:
            self._remove(tree)
            raise
        return tree

    def _to_volume(self, tree: BaseTree, sha: str) -> BaseTree:
        """The template, copied once into a volume of the engine (one archive stream)."""
        assert self.side is not None
        volume = names.run_object(self.side.run_id, f"base-{sha[:12]}")
        uid, gid = self.owner
        volumes.make(
            self.side.runtime,
            volume,
            volumes.tar_tree(tree.template, uid=uid, gid=gid),
            image=self.side.image,
            labels=self.side.labels,
        )
        volumes.probe_overlay(self.side.runtime, volume, image=self.side.image, labels=self.side.labels)
        return BaseTree(tree.checkout, tree.template, tree.index, volume, census(tree.template).depth)

    def _remove(self, tree: BaseTree) -> None:
        if tree.volume is not None and self.side is not None:
            self.side.runtime.remove_objects([DockerObject("volume", tree.volume)])
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
        raise InfraError(
            f"trial directory {root} already exists (a leftover of a killed run? `skilltrial gc`)"
        ) from None
    except (OSError, subprocess.CalledProcessError) as e:
        remove(dirs)
        raise InfraError(f"preparing {root} failed: {e}") from e
    except BaseException:
        remove(dirs)
        raise
    return dirs


def prepare_volumes(
    side: EngineSide,
    base: BaseTree,
    root: Path,
    volumes_: TrialVolumes,
    labels: Mapping[str, str],
    owner: tuple[int, int],
    mountpoint: tuple[str, ...] = (),
) -> TrialDirs:
    """A volume workspace on ``base`` (see the module docstring): the scratch volume, filled once with its
    directories (the upper ones owned by ``owner`` with the template root's mode, which the merged root
    takes), and the two overlay volumes over it. ``mountpoint``: directories to make in the workspace
    (the installed delivery's ``.claude/skills/<name>``, checked against the base: a file or symlink on
    the way is refused). ``root``: the trial's directory, which a volume workspace never makes. What is
    made carries ``labels``: teardown removes it by name or label."""
    if base.volume is None:
        raise InfraError("a volume workspace needs its base tree in a volume")
    uid, gid = owner
    top = stat.S_IMODE(os.stat(base.template).st_mode)
    entries = [
        volumes.Entry("upper", None, top, uid, gid),
        volumes.Entry("work", None, 0o700),
        volumes.Entry("verify-upper", None, top, uid, gid),
        volumes.Entry("verify-work", None, 0o700),
        volumes.Entry("out", None, 0o755, uid, gid),
    ]
    here = base.template
    for depth, part in enumerate(mountpoint, start=1):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise InfraError(
                f"cannot mount the skill: {'/'.join(mountpoint[:depth])} exists in the base and is not a directory"
            )
        entries.append(volumes.Entry("/".join(("upper", *mountpoint[:depth])), None, 0o755, uid, gid))
    side.runtime.create_volume(volumes_.scratch, labels)
    volumes.fill(side.runtime, volumes_.scratch, volumes.tar_entries(entries), image=side.image, labels=labels)
    for overlay, upper, work in (
        (volumes_.workspace, "upper", "work"),
        (volumes_.verify, "verify-upper", "verify-work"),
    ):
        side.runtime.create_overlay_volume(
            overlay,
            labels,
            lower=VolumeDir(base.volume),
            upper=VolumeDir(volumes_.scratch, upper),
            work=VolumeDir(volumes_.scratch, work),
        )
    return TrialDirs.at(root, "volume", volumes_)  # ``root`` is never made: nothing of the trial is here


OUT_FILES = {
    "status": 4096,
    "patch.diff": 0,
    "raw": 4 << 20,
    "numstat": 4 << 20,
    "special": 65536,
    "nested": 65536,
    "links": 65536,
}
"""collect's outputs the controller reads, and the cap of each (0: the caller's patch cap)."""


def read_out_archive(tar: bytes | None, patch_cap: int) -> dict[str, bytes]:
    """collect's outputs from the archive of a volume workspace's ``out/`` (``run(archive=...)``): regular
    files of :data:`OUT_FILES` only, each capped; links, directories and anything else are ignored, and a
    cut archive yields the members that arrived whole."""
    found: dict[str, bytes] = {}
    if not tar:
        return found
    try:
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as archive:
            for member in archive:
                name = member.name.removeprefix("./").removeprefix("out/")
                if name not in OUT_FILES or not member.isreg() or name in found:
                    continue
                fh = archive.extractfile(member)
                if fh is None:
                    continue
                found[name] = fh.read(OUT_FILES[name] or patch_cap + 1)
    except (tarfile.TarError, EOFError, OSError):
        pass  # a cut archive: what arrived whole is kept
    return found


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
