"""The container runtime interface: what a trial and a run need from a container engine, and the typed
values it speaks. No implementation here, and no ``import docker``.

Two Protocols, split by resource the way docker-py splits its API client:

    ContainerRuntime  containers (create, start, wait with a deadline, kill, logs, output and their live stream,
                      is_running, container_ip), networks, volumes (plain and overlay, their mountpoints)
                      and archives in and out of them, the harness's labelled objects and the removal of
                      one, engine info
    ImageStore        local images: look up, list, tag, build, import, pull, remove, save and load
    Runtime           both, and closing the connection: what an experiment run needs

These are primitives. What is made of them is written once, over any runtime, in
:mod:`harness.sandbox.lifecycle`: a container's whole run (create, gate, start, wait, logs, archive, remove)
and the removal of many objects. :class:`harness.sandbox.engine.Engine` implements the primitives over
docker-py (and applies the hardening profile to every container it creates); ``tests.fakes.FakeRuntime``
implements them in memory. One contract suite, ``tests/contract/test_runtime.py``, holds both, and the
composites over both, to what these docstrings promise.

What a method raises is part of its contract:

    InfraError         the runtime broke: the engine did not answer, a call failed, its connection dropped.
                       Above this layer it becomes an ``infra_error`` trial (excluded, retried), never a
                       verdict against an arm.
    PrerequisiteError  something that must exist before a run is missing (an image): fix it and run again.
    (the gate's own)   a run's start gate may refuse to start a container (``Interrupted`` when the run
                       is stopping); the run removes the container and lets it through.

A container that exits non-zero, is killed by the OOM killer or overruns its deadline is a *result*
(:class:`ExitInfo`), never an exception.

Volumes and archives (what lets a trial's workspace, extraction and verify do without a bind mount of a
controller path): named volumes carrying the harness's labels, overlay volumes whose lower and upper
directories are other volumes' directories (:meth:`ContainerRuntime.create_overlay_volume`), each
volume's ``Mountpoint`` on the engine's host, and tar archives copied into and out of a container's volume
mounts (``put_archive`` / ``get_archive``, and a run's ``archive``), so content crosses to a remote
engine as one stream. Not here: a container's filesystem diff and a commit of it (on engine 20.10
``docker diff`` is O(files in the image), see issue 17).

Where the engine is (:meth:`ContainerRuntime.endpoint`): an engine on another machine
(``DOCKER_HOST=tcp://...`` or ``ssh://...``) sees none of the controller's paths, so a
:class:`BindMount` is what only a local engine can give; a remote one refuses it with
``NeedsLocalEngine`` (a ``PrerequisiteError``) naming the path, before anything is created: a step that
needs one stops the run rather than being retried as an infrastructure error. Everything a run gives its
containers is therefore a volume filled through ``put_archive`` (:mod:`harness.sandbox.volumes`).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from harness.sandbox.subnets import TRIAL_HOSTS

# ------------------------------------------------------------------ values


@dataclass(frozen=True)
class Limits:
    memory: str = "2g"
    cpus: float = 1.0
    pids: int = 512
    nofile: int = 4096
    fsize_bytes: int = 1 << 30
    tmpfs_size: str = "512m"


@dataclass(frozen=True)
class BindMount:
    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class VolumeMount:
    """A named volume at ``target``. Never copies the image's content at ``target`` into the volume
    (``nocopy``): a volume holds only what the harness put there."""

    volume: str
    target: str
    read_only: bool = True


class VolumeDir(NamedTuple):
    """A directory inside a named volume: ``subdir`` relative to the volume's root ('' for the root)."""

    volume: str
    subdir: str = ""


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    image: str
    command: tuple[str, ...]
    labels: Mapping[str, str]
    user: str
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[BindMount, ...] = ()
    volumes: tuple[VolumeMount, ...] = ()
    """Named volumes (the harness's own), mounted after the bind mounts."""
    network: str = "none"
    """'none' (a network namespace of the container's own with only its loopback, and no engine network
    sandbox) or the name of a network the harness created."""
    limits: Limits = Limits()
    tmpfs: tuple[str, ...] = ("/tmp",)
    """tmpfs mount points (sized by limits.tmpfs_size, owned by the container user)."""
    workdir: str | None = None
    runtime: str | None = None
    log_max_size: str = "10m"
    stop_timeout: int = 5
    dns: tuple[str, ...] = ()
    """Upstream servers of Docker's embedded resolver. Engines before 26.0 forward names the
    embedded resolver does not know to the host's resolvers (CVE-2024-29018 when they are on
    loopback); pointing this at a peer that serves no DNS makes every foreign name fail."""


@dataclass(frozen=True)
class ExitInfo:
    exit_code: int | None
    timed_out: bool
    oom_killed: bool
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    seconds: float
    archive: bytes | None = None
    """``lifecycle.run(archive=PATH)``: a tar of PATH taken after the container exited (None when PATH was not asked
    for, or is missing); at most the cap's bytes (then ``archive_truncated``)."""
    archive_truncated: bool = False


@dataclass(frozen=True)
class EngineInfo:
    server_version: str
    api_version: str
    cgroup_version: str
    cgroup_driver: str
    runtimes: tuple[str, ...]
    security_options: tuple[str, ...]
    docker_root: str
    storage_driver: str
    os: str
    runc_version: str
    rootless: bool
    cpus: int = 0
    """The engine's machine: cores (``docker info`` NCPU; 0 when it does not say)."""
    memory_bytes: int = 0
    """The engine's machine: memory (``docker info`` MemTotal; 0 when it does not say)."""
    kernel: str = ""
    """The engine's kernel (``docker info`` KernelVersion)."""
    engine_id: str = ""
    """The engine's own id (``docker info`` ID): the same engine reached by two URLs has one."""


@dataclass(frozen=True)
class Endpoint:
    """Where the engine is, as the controller reaches it."""

    url: str
    """``DOCKER_HOST`` as given (``unix:///var/run/docker.sock`` when unset)."""
    remote: bool
    """The engine may be on another machine (tcp://, ssh://, http(s)://): it shares no path with the
    controller, so nothing may depend on bind-mounting one."""

    def describe(self) -> str:
        return f"{self.url} ({'remote: no bind mounts' if self.remote else 'local'})"


ObjectKind = Literal["container", "network", "volume"]

_NO_LABELS: Mapping[str, str] = types.MappingProxyType({})


class DockerObject(NamedTuple):
    """A container, network or volume the harness made, as listed by :meth:`ContainerRuntime.labelled`.

    A named tuple, so code that unpacks ``kind, name, labels`` keeps working; read the fields by name.
    ``labels`` may be left empty when an object is named for removal only."""

    kind: ObjectKind
    name: str
    labels: Mapping[str, str] = _NO_LABELS


class Removal(NamedTuple):
    """What :func:`harness.sandbox.lifecycle.remove_objects` removed, and one error text per object it could not."""

    removed: list[DockerObject]
    errors: list[str]


class Waited(NamedTuple):
    """How a container's run ended (:meth:`ContainerRuntime.wait`)."""

    exit_code: int | None
    """Its exit code (None when it ``timed_out``)."""
    timed_out: bool
    """The wait's deadline passed first and the container was killed."""
    oom_killed: bool = False
    """The kernel's OOM killer ended it."""
    ran_s: float = 0.0
    """How long it ran, from its start to its exit as the engine recorded them (not the wait's own time)."""


class Archive(NamedTuple):
    """A tar copied out of a container (:meth:`ContainerRuntime.get_archive`), at most the cap's bytes."""

    data: bytes
    truncated: bool
    """Cut at the cap."""


class Logs(NamedTuple):
    """A container's output, capped: the tail is kept (a CLI's result comes last)."""

    data: bytes
    truncated: bool


class LogStream(Protocol):
    """A container's stdout as it is written (:meth:`ContainerRuntime.follow_logs`)."""

    def __iter__(self) -> Iterator[bytes]:
        """Chunks of output in order (not split at lines), from the container's start; ends when the container
        exits or is removed, or once :meth:`close` was called. Raises InfraError when the engine fails."""
        ...

    def close(self) -> None:
        """End the stream (from any thread); an iteration in progress ends. Never raises."""
        ...


class DanglingImage(NamedTuple):
    image_id: str
    size: int


Gate = Callable[[], contextlib.AbstractContextManager[None]]
"""Entered around a container's start; raising refuses the start (see :class:`harness.trial.trial.StartGate`)."""


# --------------------------------------------------------------- interfaces


class ContainerRuntime(Protocol):
    """Containers, networks and the harness's labelled objects on one container engine.

    Every container is created hardened (the implementation applies the profile; no caller can leave
    a flag out) and carries the spec's labels; names are the caller's and unique per engine."""

    def info(self) -> EngineInfo:
        """The engine's version, runtimes and security options. Raises InfraError."""
        ...

    def endpoint(self) -> Endpoint:
        """Where the engine is (never raises: it is what the runtime was made with)."""
        ...

    def create(self, spec: ContainerSpec, *, extra_networks: Sequence[str] = ()) -> str:
        """Create (not start) a container, attached to ``spec.network`` and ``extra_networks``; returns its id.

        Raises PrerequisiteError when the image is not present, InfraError for anything else, after
        removing what was made (a container is never left half set up). Never retried: not idempotent."""
        ...

    def start(self, name: str) -> None:
        """Start a created container. Raises InfraError."""
        ...

    def wait(self, name: str, deadline_s: float) -> Waited:
        """Wait for the container to exit; when ``deadline_s`` passes first, kill it and report
        ``timed_out``. Says how its run ended: the exit code, an OOM kill, how long it ran. Raises InfraError
        when the container is gone or the engine stops answering before the deadline (a dropped connection
        is the environment's failure, not an overrun)."""
        ...

    def kill(self, name: str) -> None:
        """SIGKILL the container. Never raises: a container that is gone or not running needs no kill."""
        ...

    def logs(self, name: str, *, stdout: bool = True, stderr: bool = False, cap: int = 4 << 20) -> Logs:
        """The container's output so far, at most ``cap`` bytes (the tail). Raises InfraError."""
        ...

    def output(self, name: str, *, stdout_cap: int, stderr_cap: int) -> tuple[Logs, Logs]:
        """The container's stdout and its stderr so far, apart, each at most its cap (the tail), read at once
        (what :func:`harness.sandbox.lifecycle.run` returns: one engine request, not one per stream). Raises
        InfraError."""
        ...

    def follow_logs(self, name: str) -> LogStream:
        """The container's stdout, live (what :meth:`logs` returns, and then each new chunk the moment it is
        written), until it exits or the stream is closed. Raises InfraError when it cannot be opened."""
        ...

    def is_running(self, name: str) -> bool:
        """Whether the container runs now; False when it cannot be told (gone, or the engine does not answer)."""
        ...

    def container_ip(self, name: str, network: str) -> str:
        """The container's IPv4 address on ``network``. Raises InfraError when it has none there."""
        ...

    def create_network(
        self, name: str, labels: Mapping[str, str], *, internal: bool, isolated: bool = True, hosts: int = TRIAL_HOSTS
    ) -> None:
        """A bridge network. ``internal``: no route out; ``isolated``: the bridge has no host address, so
        members cannot reach services on the host's 0.0.0.0; ``hosts``: the most containers it holds at once
        (a trial's network: 13, its default; a run's network every gateway joins: more). Raises InfraError;
        PrerequisiteError when no address range is left that nothing else uses."""
        ...

    def create_volume(self, name: str, labels: Mapping[str, str]) -> None:
        """An empty named volume on the engine's local driver. Raises InfraError (a name in use included)."""
        ...

    def create_overlay_volume(
        self, name: str, labels: Mapping[str, str], *, lower: VolumeDir, upper: VolumeDir, work: VolumeDir
    ) -> None:
        """A volume that mounts as an overlay: ``lower`` read-only beneath, every write going to ``upper``
        (``work`` is the kernel's scratch directory, on the same filesystem as ``upper``). The three are
        directories of existing volumes; they must exist before a container mounts this one. Mounted when
        a container using it starts, unmounted when the last one stops. Raises InfraError."""
        ...

    def volume_mountpoint(self, name: str) -> str:
        """Where the volume's content lives on the engine's host (``Mountpoint``): a path on the engine's
        machine, which this process can read only when the engine is local. Raises InfraError."""
        ...

    def put_archive(self, name: str, path: str, data: bytes | Iterable[bytes]) -> None:
        """Unpack a tar (bytes, or a stream of chunks) at ``path`` of a created or stopped container:
        ``path`` is an existing directory inside one of its volume mounts (the root filesystem is
        read-only). Owners and modes are the tar's. Raises InfraError."""
        ...

    def get_archive(self, name: str, path: str, *, cap: int) -> Archive | None:
        """A tar of ``path`` (inside a volume mount) of a created or stopped container, at most ``cap``
        bytes, and whether it was cut there; None when ``path`` does not exist. Raises InfraError."""
        ...

    def labelled(self, selector: Mapping[str, str] | None = None) -> list[DockerObject]:
        """Every container, then every network, then every volume carrying the harness owner label and
        every label of ``selector``, with all its labels. Raises InfraError when the engine cannot list them."""
        ...

    def remove(self, obj: DockerObject) -> None:
        """Remove one container (force: a running one is killed first, with its anonymous volumes), network
        or volume, and make sure it is gone. Idempotent: one already gone is removed. Raises InfraError (a
        network a container is attached to, or a volume a container uses, cannot go: remove those first)."""
        ...


class ImageStore(Protocol):
    """The engine's local images. Refs are tags (``repo:tag``) or ids (``sha256:...``)."""

    def image_id(self, ref: str) -> str | None:
        """The image's id, or None when it is not present. Raises InfraError."""
        ...

    def image_size(self, ref: str) -> int:
        """Bytes on disk. Raises InfraError (a missing image included)."""
        ...

    def image_tags(self, repositories: Sequence[str]) -> list[str]:
        """Every local tag whose repository is one of ``repositories``, sorted. Raises InfraError."""
        ...

    def dangling_images(self, label: str) -> list[DanglingImage]:
        """Every untagged image carrying ``label`` (a build's intermediate stages). Raises InfraError."""
        ...

    def remove_image(self, ref: str) -> bool:
        """Untag (and delete, when nothing else uses it) an image. False when a container uses it; True
        when it is gone (or was). Raises InfraError."""
        ...

    def try_pull(self, ref: str) -> bool:
        """Pull from a registry; False when none answers or it has no such image (air-gapped hosts)."""
        ...

    def build(
        self,
        context: Path,
        *,
        dockerfile: str,
        tag: str,
        buildargs: Mapping[str, str],
        labels: Mapping[str, str],
        on_line: Callable[[str], None] | None = None,
    ) -> str:
        """Build ``context/dockerfile`` as ``tag``; returns the image id. Build output goes to ``on_line``.
        Raises InfraError (a failing build step included, with the last lines as its hint)."""
        ...

    def import_rootfs(self, tarball: Path, *, tag: str, changes: Sequence[str] = ()) -> str:
        """Import a root filesystem tarball as ``tag``; returns the image id. Raises InfraError."""
        ...

    def tag(self, image: str, tag: str) -> None:
        """Give ``image`` the tag ``tag``. Raises InfraError."""
        ...

    def save_images(self, refs: Sequence[str]) -> Iterator[bytes]:
        """Every image of ``refs`` with its tags, as one archive stream (``docker save``): what
        :meth:`load_images` of another engine takes, giving it the same image ids. Raises InfraError (a
        missing image included), also while the stream is read."""
        ...

    def load_images(self, data: Iterable[bytes]) -> list[str]:
        """Load an archive of :meth:`save_images` (``docker load``): its images keep their ids and tags.
        Returns the tags (or ids) loaded. Raises InfraError."""
        ...


class Runtime(ContainerRuntime, ImageStore, Protocol):
    """A container runtime with its image store: what an experiment run needs."""

    def close(self) -> None:
        """Let go of the engine (its connection; an ssh engine's tunnel). Idempotent; never raises."""
        ...
