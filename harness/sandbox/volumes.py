"""Files the controller gives a container without a path the engine must see: a volume, filled through
the engine's archive API, so the same run works on a local engine and on one on another machine (and
:func:`probe_overlay`, which checks that the engine can mount the overlay volumes of volume workspaces).

    create_volume -> a created, never started container that mounts it read-write -> put_archive
    into the mountpoint -> that container removed -> the volume mounted where a role needs it

The tar is made here, in memory or in a temporary file, from what the controller holds (bytes, or a
directory it made), with the owner and mode each entry must have in the container: the engine unpacks
as root and keeps both, so a key file can be ``0400`` and owned by the gateway's uid alone, and a skill
copy root-owned, which a read-only mount then keeps out of the agent's reach twice. The volume's own
root directory is the engine's (``root``, ``0755``): the tar's ``.`` entry is not applied.

Links in a directory are packed as links, never followed; sockets, FIFOs and devices are left out.
Nothing here reads anything back: what the controller reads from a container comes through its logs or
:meth:`~harness.sandbox.runtime.ContainerRuntime.get_archive`, capped, at the caller.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from harness.errors import HarnessError, PrerequisiteError
from harness.sandbox import lifecycle, names
from harness.sandbox.labels import ROLE
from harness.sandbox.runtime import ContainerRuntime, ContainerSpec, DockerObject, Limits, VolumeDir, VolumeMount
from harness.sandbox.uids import FREE_RANGE_END

FILL_MOUNT = "/fill"
FILLER_USER = f"{FREE_RANGE_END}:{FREE_RANGE_END}"
"""The filler never starts, but no container of a run names a host account as its user (not even
``nobody``): the top of the range :mod:`harness.sandbox.uids` picks the roles' ids from."""
SPOOL = 8 << 20
"""A tree's tar is kept in memory up to this size, then in a temporary file."""


@dataclass(frozen=True)
class Entry:
    """One file (``data``) or directory (``data`` None) of a volume, as the container sees it."""

    name: str
    data: bytes | None
    mode: int
    uid: int = 0
    gid: int = 0


def _info(name: str, *, mode: int, uid: int, gid: int, kind: bytes = tarfile.REGTYPE, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.size = kind, mode, uid, gid, size
    info.uname = info.gname = ""  # numeric ids only: the container's names are not the controller's
    info.mtime = 0
    return info


def tar_entries(entries: Iterable[Entry]) -> bytes:
    """A tar of ``entries`` (PAX: the high uids of :mod:`harness.sandbox.uids` do not fit ustar)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            if e.data is None:
                tar.addfile(_info(e.name, mode=e.mode, uid=e.uid, gid=e.gid, kind=tarfile.DIRTYPE))
            else:
                info = _info(e.name, mode=e.mode, uid=e.uid, gid=e.gid, size=len(e.data))
                tar.addfile(info, io.BytesIO(e.data))
    return buf.getvalue()


def tar_tree(
    root: Path, *, uid: int = 0, gid: int = 0, skip_top: Iterable[str] = (), keep_modes: bool = True
) -> BinaryIO:
    """A tar of the tree under ``root`` (its entries relative to it), every entry owned by ``uid:gid``.

    ``keep_modes``: permission bits as on the controller, setuid, setgid and sticky bits cleared; else
    ``0755`` for directories and executables and ``0644`` for other files. Links are packed as links;
    other special files are left out. ``skip_top`` names entries of ``root`` itself to leave out
    (``.git``). Returns a file object at offset 0 (in memory while small)."""
    skip = set(skip_top)
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL)  # noqa: SIM115 (returned open, the caller closes it)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            here = Path(dirpath)
            if here == root:
                dirnames[:] = [d for d in dirnames if d not in skip]
                filenames = [f for f in filenames if f not in skip]
            dirnames.sort()
            for name in sorted([*dirnames, *filenames]):
                path = here / name
                rel = path.relative_to(root).as_posix()
                st = os.lstat(path)
                perm = stat.S_IMODE(st.st_mode) & 0o777
                if stat.S_ISLNK(st.st_mode):
                    info = _info(rel, mode=0o777, uid=uid, gid=gid, kind=tarfile.SYMTYPE)
                    info.linkname = os.readlink(path)
                    tar.addfile(info)
                elif stat.S_ISDIR(st.st_mode):
                    mode = perm if keep_modes else 0o755
                    tar.addfile(_info(rel, mode=mode, uid=uid, gid=gid, kind=tarfile.DIRTYPE))
                elif stat.S_ISREG(st.st_mode):
                    mode = perm if keep_modes else (0o755 if perm & 0o111 else 0o644)
                    with open(path, "rb") as fh:
                        tar.addfile(_info(rel, mode=mode, uid=uid, gid=gid, size=st.st_size), fh)
    out.seek(0)
    return out  # type: ignore[return-value]


def fill(
    runtime: ContainerRuntime,
    volume: str,
    data: bytes | BinaryIO,
    *,
    image: str,
    labels: Mapping[str, str],
    path: str = "",
) -> None:
    """Unpack the tar ``data`` into ``volume`` (at ``path`` inside it) through a created, never started
    container that mounts it read-write, which is removed on every path. Raises InfraError (and
    PrerequisiteError when ``image`` is missing)."""
    spec = ContainerSpec(
        name=names.filler(volume),
        image=image,
        command=("true",),
        labels={**labels, ROLE: "volume-fill"},
        user=FILLER_USER,
        volumes=(VolumeMount(volume, FILL_MOUNT, read_only=False),),
        limits=Limits(memory="64m", cpus=0.1, pids=8, tmpfs_size="1m"),
    )
    runtime.create(spec)
    try:
        runtime.put_archive(spec.name, f"{FILL_MOUNT}/{path}".rstrip("/"), data)
    finally:
        lifecycle.remove_objects(runtime, [DockerObject("container", spec.name)])


def make(
    runtime: ContainerRuntime,
    volume: str,
    data: bytes | BinaryIO,
    *,
    image: str,
    labels: Mapping[str, str],
) -> str:
    """A new volume carrying ``labels``, filled with the tar ``data`` (a file object is closed after);
    returns its name. What it made is found by its labels (the run's teardown and ``skilltrial gc`` remove
    it), on any path."""
    try:
        runtime.create_volume(volume, labels)
        fill(runtime, volume, data, image=image, labels=labels)
    finally:
        if not isinstance(data, bytes):
            data.close()
    return volume


def probe_overlay(runtime: ContainerRuntime, lower: str, *, image: str, labels: Mapping[str, str]) -> None:
    """Check once, before any trial, that the engine mounts an overlay volume over ``lower`` (the local
    driver's ``type=overlay``): a started container (``true``) mounts one over a scratch volume. An engine
    that cannot (its volumes directory on overlayfs itself, a driver without overlay) stops the run here
    with a PrerequisiteError, instead of failing every trial as an infrastructure error. Everything the
    probe made is removed on every path."""
    scratch = name = names.derived(lower, "overlay-probe")
    overlay = names.derived(lower, "overlay-probe-ws")
    made = [DockerObject("container", name), DockerObject("volume", overlay), DockerObject("volume", scratch)]
    spec = ContainerSpec(
        name=name,
        image=image,
        command=("true",),
        labels={**labels, ROLE: "volume-fill"},
        user=FILLER_USER,
        volumes=(VolumeMount(overlay, "/probe", read_only=True),),
        limits=Limits(memory="64m", cpus=0.1, pids=8, tmpfs_size="1m"),
    )
    try:
        runtime.create_volume(scratch, labels)
        fill(
            runtime,
            scratch,
            tar_entries([Entry("upper", None, 0o755), Entry("work", None, 0o700)]),
            image=image,
            labels=labels,
        )
        runtime.create_overlay_volume(
            overlay, labels, lower=VolumeDir(lower), upper=VolumeDir(scratch, "upper"), work=VolumeDir(scratch, "work")
        )
        run = lifecycle.run(runtime, spec, deadline_s=60)
        if run.exit_code != 0:
            raise PrerequisiteError(f"the overlay volume probe exited {run.exit_code}: {run.stderr[-300:]!r}")
    except PrerequisiteError:
        raise
    except HarnessError as e:
        raise PrerequisiteError(
            f"this engine cannot mount an overlay volume (volume workspaces need one): {e}",
            hint="a volume workspace needs a Linux engine whose volumes directory accepts overlayfs as its "
            "upper layer (not on overlayfs itself); on a local engine, unset HARNESS_WORKSPACE",
        ) from e
    finally:
        lifecycle.remove_objects(runtime, made)
