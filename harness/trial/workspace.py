"""One trial's workspace, made before any untrusted code exists on the run's base tree
(:mod:`harness.trial.basetrees`), as one object of its kind (docs/design.md#workspaces).

    <run>/<trial>/            0700
        workspace/            the agent's /workspace: an overlay mount (lower: the base's template, upper:
                              upper/) or, where overlay is not available, a copy of the template
        upper/ work/          overlay only: what the agent wrote, and overlayfs's scratch directory
        verify/ verify-upper/ verify-work/
                              overlay only: verify's tree (template + patch, made by collect)
        changes/              overlay only: the lists of what changed, made from upper/ by the controller
        out/                  what the collect container writes (patch, stats, scan)

``volume`` is the same overlay made by the engine instead of the controller, for an engine on another
machine (``DOCKER_HOST=ssh://`` or ``tcp://``), which sees none of this machine's paths; a local engine
uses it with ``HARNESS_WORKSPACE=volume``. Nothing of a trial's trees is then a path here:

    hx-<run>-<trial>-scratch  volume: upper/ work/ verify-upper/ verify-work/ out/ (one fill, owners set)
    hx-<run>-<trial>-ws       overlay volume: base + scratch/upper, the agent's /workspace
    hx-<run>-<trial>-vf       overlay volume: base + scratch/verify-upper, collect's /verify, then verify's

The engine's local volume driver mounts the overlays (``nosuid,nodev``) when a container uses them.
Collect lists the upper directory itself (the controller cannot walk it), the outputs come back as one
capped archive (:func:`read_out_archive`), and the workspace watchdog runs in the engine
(:class:`harness.trial.watchdog.EngineWatchdog`). Every volume carries the trial's labels: teardown and
``skilltrial gc`` find them like the trial's containers.

What differs by kind is one object, :class:`TrialWorkspace` (:class:`HostWorkspace` for overlay and copy,
:class:`VolumeWorkspace`), made by :func:`for_trial`: where the agent's and verify's trees are, how the
watchdog walks, how collect runs and how its outputs come back, and what teardown removes. The trial asks
it; it never asks which kind it has.

The agent never sees the user's .git: its repository is a new one holding only the base tree. After the
agent starts, the controller never reads or writes inside ``workspace/``: it only mounts it read-only into
the collect container, and walks ``upper/`` by ``lstat`` (never following a link, never opening a file) for
the watchdog and the change lists. Files it must read from ``out/`` are opened with ``O_NOFOLLOW`` and a
size cap. Teardown unmounts, then deletes the tree without following symlinks (:func:`remove_tree`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import subprocess
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from harness.errors import InfraError
from harness.host.trees import Seen, mount_overlay, remove_tree, walk_nofollow
from harness.sandbox import lifecycle, names, roles, volumes
from harness.sandbox.deadline import host_deadline_s
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import ContainerRuntime, DockerObject, ExitInfo, Gate, VolumeDir
from harness.trial import watchdog
from harness.trial.basetrees import BaseTree, BaseTrees, EngineSide, HostKind, WorkspaceKind, parse_user

OPAQUE_XATTR = "trusted.overlay.opaque"
CHANGE_LISTS = ("changed", "gone", "special", "nested")


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
    """A trial directory of this machine (an overlay or a copy workspace), whether or not it exists yet."""

    root: Path
    workspace: Path
    out: Path
    verify: Path
    upper: Path
    work: Path
    verify_upper: Path
    verify_work: Path
    changes: Path
    kind: HostKind = "copy"

    @classmethod
    def at(cls, root: Path, kind: HostKind = "copy") -> TrialDirs:
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


def prepare(base: BaseTree, root: Path, owner: tuple[int, int], kind: HostKind) -> TrialDirs:
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
    volumes_: TrialVolumes,
    labels: Mapping[str, str],
    owner: tuple[int, int],
    mountpoint: tuple[str, ...] = (),
) -> None:
    """A volume workspace on ``base`` (see the module docstring): the scratch volume, filled once with its
    directories (the upper ones owned by ``owner`` with the template root's mode, which the merged root
    takes), and the two overlay volumes over it. ``mountpoint``: directories to make in the workspace
    (the installed delivery's ``.claude/skills/<name>``, checked against the base: a file or symlink on
    the way is refused). Nothing of it is a path of this machine. What is made carries ``labels``:
    teardown removes it by name or label."""
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


COLLECT_DEADLINE_S = 300

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
    """collect's outputs from the archive of a volume workspace's ``out/`` (``lifecycle.run(archive=...)``): regular
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


# ----------------------------------------------------------------- one trial's workspace, by its kind


@dataclass(frozen=True)
class Place:
    """Where one trial's workspace containers (its watchdog in the engine, collect) run and what they carry:
    the engine, the hardening profile, the attempt's names and labels, and the run's start gate."""

    runtime: ContainerRuntime
    profile: roles.Profile
    names: TrialNames
    labels: Mapping[str, str]
    gate: Gate


class TrialWorkspace(Protocol):
    """One trial's workspace, of its kind: everything a trial does differently by where its trees are
    (directories of this machine, or volumes of the engine's). Named before it exists (:func:`for_trial`);
    :meth:`make` makes it on a base tree, and teardown removes :meth:`objects` by name and calls
    :meth:`remove`, on every path."""

    kind: WorkspaceKind

    def make(self, base: BaseTree, mountpoint: tuple[str, ...] = ()) -> None:
        """Make the workspace on ``base`` (with the empty directories ``mountpoint`` inside, where the installed
        delivery mounts its skill); on failure, what was made is removed again. Raises InfraError."""
        ...

    @property
    def agent_tree(self) -> Path | str:
        """The agent's /workspace: a directory of this machine, or a volume's name."""
        ...

    @property
    def verify_tree(self) -> Path | str:
        """Verify's /workspace (base + patch, made by collect): a directory, or a volume's name."""
        ...

    def watchdog(
        self, limit: watchdog.WorkspaceLimit, timeout_s: int, kill_agent: Callable[[watchdog.Trip], None]
    ) -> watchdog.Watchdog | watchdog.EngineWatchdog:
        """The bound on what the agent writes into it (walked here, or in the engine); a trip kills the agent."""
        ...

    def collect(self, protected: Sequence[str], patch_cap: int) -> tuple[ExitInfo, Mapping[str, bytes]]:
        """collect.sh in a ``--network none`` container: the patch, its stats and scans, and verify's tree.
        Returns its exit and its outputs (:data:`OUT_FILES`, read capped, links never followed)."""
        ...

    def objects(self) -> list[DockerObject]:
        """What of it the engine holds, by name (for a teardown that cannot list by label)."""
        ...

    def remove(self) -> None:
        """Remove what of it is on this machine. Idempotent; raises InfraError when something is left."""
        ...


def for_trial(bases: BaseTrees, root: Path, place: Place) -> TrialWorkspace:
    """The workspace of the run's kind for the trial whose directory is ``root`` (named, not made)."""
    if bases.kind == "volume":
        assert bases.side is not None
        return VolumeWorkspace(place, bases.side, root)
    return HostWorkspace(place, bases.kind, root)


class HostWorkspace:
    """An overlay (over the base's template) or a copy of it: directories of this machine, bind-mounted."""

    def __init__(self, place: Place, kind: Literal["overlay", "copy"], root: Path) -> None:
        self.place = place
        self.kind: WorkspaceKind = kind
        self.dirs = TrialDirs.at(root, kind)
        self._base: BaseTree | None = None

    def make(self, base: BaseTree, mountpoint: tuple[str, ...] = ()) -> None:
        self.dirs = prepare(base, self.dirs.root, parse_user(self.place.profile.user), self.dirs.kind)
        self._base = base
        if mountpoint:
            make_mountpoint(self.dirs.workspace, mountpoint)

    @property
    def agent_tree(self) -> Path:
        return self.dirs.workspace

    @property
    def verify_tree(self) -> Path:
        return self.dirs.verify

    def watchdog(
        self, limit: watchdog.WorkspaceLimit, timeout_s: int, kill_agent: Callable[[watchdog.Trip], None]
    ) -> watchdog.Watchdog:
        return watchdog.Watchdog(self.dirs.watched, limit, on_trip=kill_agent)

    def collect(self, protected: Sequence[str], patch_cap: int) -> tuple[ExitInfo, Mapping[str, bytes]]:
        assert self._base is not None, "collect before make"
        overlay = self.dirs.kind == "overlay"
        if overlay:  # what the agent wrote, from the overlay's upper directory (lstat only)
            write_changes(self.dirs)
        p = self.place
        run = lifecycle.run(
            p.runtime,
            roles.collect_spec(
                p.profile,
                name=p.names.container("collect"),
                labels=p.labels,
                base=self._base.checkout,
                workspace=self.dirs.workspace,
                out=self.dirs.out,
                verify_tree=self.dirs.verify,
                protected=protected,
                patch_cap=patch_cap,
                incremental=(self.dirs.changes, self._base.index) if overlay else None,
            ),
            deadline_s=COLLECT_DEADLINE_S,
            gate=p.gate,
        )
        caps = {name: cap or patch_cap + 1 for name, cap in OUT_FILES.items()}
        return run, {name: read_capped(self.dirs.out / name, cap) for name, cap in caps.items()}

    def objects(self) -> list[DockerObject]:
        return []

    def remove(self) -> None:
        remove(self.dirs)


class VolumeWorkspace:
    """Overlay volumes the engine makes and mounts (a remote engine, or ``HARNESS_WORKSPACE=volume``):
    nothing of the trial is a path of this machine, so its watchdog and its collect's listing run in the
    engine, and collect's outputs come back as one archive."""

    kind: WorkspaceKind = "volume"

    def __init__(self, place: Place, side: EngineSide, root: Path) -> None:
        self.place = place
        self.side = side
        self.volumes = TrialVolumes.of(place.names)
        self.root = root
        """The trial's directory, which a volume workspace never makes (nothing of it is here)."""
        self._base: BaseTree | None = None

    def make(self, base: BaseTree, mountpoint: tuple[str, ...] = ()) -> None:
        owner = parse_user(self.place.profile.user)
        prepare_volumes(self.side, base, self.volumes, self.place.labels, owner, mountpoint)
        self._base = base

    @property
    def agent_tree(self) -> str:
        return self.volumes.workspace

    @property
    def verify_tree(self) -> str:
        return self.volumes.verify

    def watchdog(
        self, limit: watchdog.WorkspaceLimit, timeout_s: int, kill_agent: Callable[[watchdog.Trip], None]
    ) -> watchdog.EngineWatchdog:
        assert self._base is not None, "a watchdog before make"
        p, depth = self.place, self._base.depth
        return watchdog.EngineWatchdog(
            p.runtime,
            roles.watch_spec(
                p.profile,
                name=p.names.container("watch"),
                labels=p.labels,
                scratch_volume=self.volumes.scratch,
                command=watchdog.engine_command(f"{roles.SCRATCH_MOUNT}/upper", limit, depth),
            ),
            limit,
            depth,
            kill_agent,
            deadline_s=host_deadline_s(timeout_s) + 60,
            gate=p.gate,
        )

    def collect(self, protected: Sequence[str], patch_cap: int) -> tuple[ExitInfo, Mapping[str, bytes]]:
        """Collect lists the upper directory itself; its outputs come back as one archive of ``out/``."""
        assert self._base is not None and self._base.volume is not None, "collect before make"
        p = self.place
        run = lifecycle.run(
            p.runtime,
            roles.collect_volume_spec(
                p.profile,
                name=p.names.container("collect"),
                labels=p.labels,
                base_volume=self._base.volume,
                workspace_volume=self.volumes.workspace,
                scratch_volume=self.volumes.scratch,
                verify_volume=self.volumes.verify,
                protected=protected,
                patch_cap=patch_cap,
            ),
            deadline_s=COLLECT_DEADLINE_S,
            gate=p.gate,
            archive=f"{roles.SCRATCH_MOUNT}/out",
            archive_cap=patch_cap + (10 << 20),
        )
        return run, read_out_archive(run.archive, patch_cap)

    def objects(self) -> list[DockerObject]:
        """Its volumes, and the filler of its scratch volume in case that outlived its fill."""
        return [DockerObject("container", names.filler(self.volumes.scratch)), *self.volumes.objects()]

    def remove(self) -> None:
        remove(TrialDirs.at(self.root))  # never made: nothing to do unless something else made it


def make_mountpoint(tree: Path, parts: Sequence[str]) -> None:
    """Make the directories ``parts`` (one inside the other) in a tree no container has started on yet: empty
    directories for a read-only mount. Refuses a symlink or a file on the way (the repository's content is
    data)."""
    path = tree
    for part in parts:
        path = path / part
        try:
            os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path, 0o755)
            continue
        if not os.path.isdir(path) or os.path.islink(path):
            raise InfraError(f"cannot mount the skill: {path} exists and is not a directory")
