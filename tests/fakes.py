"""FakeRuntime: an in-memory :class:`harness.sandbox.runtime.Runtime` for unit tests (no Docker).

It implements the runtime's primitives only; a container's whole run and the removal of many objects are
:mod:`harness.sandbox.lifecycle`'s, over this runtime as over the Docker engine. It keeps the contract the
engine keeps (``tests/contract/test_runtime.py`` runs one suite against both): a wait past its deadline
kills and gives ``timed_out``, the run time is the container's own (simulated with ``Outcome.seconds``),
output is capped with its tail kept, ``labelled`` lists the owner-labelled objects with their labels, a
missing image is a ``PrerequisiteError``, and a broken engine call is an ``InfraError``, never a timeout.

What a container does is scripted by its role (the ``harness.role`` label) or its name: a
:data:`Behaviour` is an :class:`Outcome`, or a callable given the spec and the runtime that returns one.
It runs when the container starts, as Python on the host, and its effects go where a real container's
go: through the spec's bind mounts (:func:`host_path`) and volumes (:meth:`FakeRuntime.mount_path`; an
overlay volume's writes land in its upper directory, :meth:`FakeRuntime.merged` is what a reader sees), and
into its own log or a peer's
(:meth:`FakeRuntime.append_log`). :func:`trial_behaviours` scripts a whole successful trial; its
:func:`collect` extracts the patch with host git the way ``harness/sidecars/collect.sh`` does, on bind mounts
or on a volume workspace (``COLLECT_UPPER``: the merged volumes read, the outputs written into the scratch
volume's ``out/``, verify's overlay made base + patch through its upper directory).

Modelled: containers (created, running, exited), networks and their members (a network with a member
cannot be removed), volumes (host directories; overlays as lower + upper, ``.wh.NAME`` files for
deletions; one in use cannot be removed; a container whose overlay's lower, upper or work directory is
missing does not start, as the mount fails), archives in and out of a container's mounts, labels and the owner filter, deadlines (simulated run time, or real time held until
a kill), kills (exit 137), capped logs and their live stream, images (tags, untagged build stages, in use by a container), the engine
probe (its ``cat`` of the token through its bind mount: this engine sees the controller's files), a
fault at any call (:meth:`FakeRuntime.fail`; a create may fail after making its container), and a record
of every call (:attr:`FakeRuntime.calls`).
Not modelled: hardening, isolation, processes. Nothing here proves the sandbox holds; the Docker suites do.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import math
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from harness.errors import InfraError, NeedsLocalEngine, PrerequisiteError
from harness.sandbox.engineview import PROBE_ROLE, TOKEN_FILE
from harness.sandbox.labels import OWNER, OWNER_VALUE, ROLE, TRIAL
from harness.sandbox.runtime import (
    Archive,
    ContainerSpec,
    DanglingImage,
    DockerObject,
    Endpoint,
    EngineInfo,
    Logs,
    Runtime,
    VolumeDir,
    Waited,
)
from harness.sandbox.subnets import TRIAL_HOSTS
from harness.sidecars import gatewaylog

KILLED = 137
"""The exit code of a container killed with SIGKILL (``docker kill``)."""


@dataclass(frozen=True)
class Outcome:
    """What one container does once started."""

    exit_code: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    seconds: float | None = None
    """Simulated run time, reported in ``ExitInfo.seconds``: past the deadline the wait times out at once
    (no real waiting; for real time, use ``hold_s``)."""
    hold_s: float = 0.0
    """Real seconds the container keeps running before it exits (``math.inf``: until killed); a kill cuts it short."""
    oom_killed: bool = False


Behaviour = Outcome | Callable[[ContainerSpec, "FakeRuntime"], Outcome]
SERVICE = Outcome(hold_s=math.inf)
"""A container that runs until it is killed or removed (a sidecar)."""


class _FollowedLogs:
    """A fake container's stdout as it is written: every stdout chunk, then each one appended later, until
    the container exits or is removed, or the stream is closed."""

    def __init__(self, runtime: FakeRuntime, name: str) -> None:
        self._runtime = runtime
        self._name = name
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        while not self._closed.is_set():
            with self._runtime._lock:
                c = self._runtime.containers.get(self._name)
                if c is not None:
                    self._runtime._refresh(c)
                chunks = [data for stream, data in c.chunks if stream == "stdout"] if c is not None else []
                over = c is None or c.state == "exited"
            for chunk in chunks[sent:]:
                if chunk:
                    yield chunk
            sent = len(chunks)
            if over:
                return
            self._closed.wait(0.01)

    def close(self) -> None:
        self._closed.set()


class Call(NamedTuple):
    method: str
    target: str
    """The container, network or image the call was about ('' for none)."""


@dataclass
class _Fault:
    method: str
    target: str | None
    error: BaseException
    times: int | None
    after: bool = False


@dataclass
class FakeContainer:
    spec: ContainerSpec
    id: str
    networks: list[str]
    state: Literal["created", "running", "exited"] = "created"
    outcome: Outcome = Outcome()
    started_at: float = 0.0
    finished_at: float | None = None
    exit_code: int | None = None
    killed: threading.Event = field(default_factory=threading.Event)
    chunks: list[tuple[Literal["stdout", "stderr"], bytes]] = field(default_factory=list)

    @property
    def role(self) -> str:
        return self.spec.labels.get(ROLE, "")


@dataclass
class FakeVolume:
    """A volume is a host directory. An overlay volume has none of its own: a container writes into its
    upper directory, and :meth:`FakeRuntime.merged` shows lower + upper, where a file ``.wh.NAME`` in the
    upper hides NAME below (the image-layer convention; the kernel's whiteouts are device nodes)."""

    name: str
    labels: dict[str, str]
    path: Path
    overlay: tuple[VolumeDir, VolumeDir, VolumeDir] | None = None
    meta: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """Relative path -> (uid, gid, mode) each archive entry asked for (the fake does not chown), which
    :meth:`FakeRuntime.get_archive` gives back as the engine would."""


WHITEOUT = ".wh."


@dataclass
class FakeNetwork:
    name: str
    labels: dict[str, str]
    internal: bool
    index: int


def host_path(spec: ContainerSpec, target: str) -> Path:
    """The host directory a container sees at ``target`` (its bind mount's source)."""
    for m in spec.mounts:
        if m.target == target:
            return m.source
    raise AssertionError(f"{spec.name} has no mount at {target}")


def read_probe_token(spec: ContainerSpec, _rt: FakeRuntime) -> Outcome:
    """The engine probe's ``cat`` (:mod:`harness.sandbox.engineview`), through its bind mount."""
    token = host_path(spec, "/workspace") / TOKEN_FILE
    if not token.is_file():
        return Outcome(exit_code=1, stderr=f"cat: /workspace/{TOKEN_FILE}: No such file or directory\n".encode())
    return Outcome(stdout=token.read_bytes())


def _same_entry(a: Path, b: Path) -> bool:
    """Two non-directory entries alike for a reader: same type, mode and content (or link target)."""
    if not (b.exists() or b.is_symlink()):
        return False
    sa, sb = os.lstat(a), os.lstat(b)
    if stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode) or stat.S_IMODE(sa.st_mode) != stat.S_IMODE(sb.st_mode):
        return False
    if stat.S_ISLNK(sa.st_mode):
        return os.readlink(a) == os.readlink(b)
    return stat.S_ISREG(sa.st_mode) and a.read_bytes() == b.read_bytes()


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _write_through(upper: Path, now: Path, desired: Path) -> None:
    """Write into ``upper`` what turns the merged view ``now`` into ``desired`` (see :func:`_overlay_copy`)."""
    here = set(os.listdir(now)) if now.is_dir() and not now.is_symlink() else set()
    wanted = set(os.listdir(desired))
    for name in sorted(here - wanted):
        upper.mkdir(parents=True, exist_ok=True)
        _clear(upper / name)
        (upper / f"{WHITEOUT}{name}").write_bytes(b"")
    for name in sorted(wanted):
        want, seen, up = desired / name, now / name, upper / name
        if want.is_dir() and not want.is_symlink():
            if seen.is_dir() and not seen.is_symlink():
                _write_through(up, seen, want)
                continue
            upper.mkdir(parents=True, exist_ok=True)
            _clear(up)
            shutil.copytree(want, up, symlinks=True)
        elif not _same_entry(want, seen):
            upper.mkdir(parents=True, exist_ok=True)
            _clear(up)
            shutil.copy2(want, up, follow_symlinks=False)


def _overlay_copy(src: Path, dest: Path) -> None:
    """Lay the upper ``src`` over ``dest``: ``.wh.NAME`` removes NAME, everything else is copied over."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        for name in [*dirnames, *filenames]:
            target = dest / rel / name
            if name.startswith(WHITEOUT):
                gone = dest / rel / name[len(WHITEOUT) :]
                if gone.is_dir() and not gone.is_symlink():
                    shutil.rmtree(gone)
                elif gone.exists() or gone.is_symlink():
                    gone.unlink()
                continue
            source = Path(dirpath) / name
            if source.is_symlink() or not source.is_dir():
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                elif target.exists() or target.is_symlink():
                    target.unlink()
                shutil.copy2(source, target, follow_symlinks=False)
            elif not target.is_dir() or target.is_symlink():
                if target.exists() or target.is_symlink():
                    target.unlink()
                target.mkdir()


class FakeRuntime:
    """See the module docstring. Thread-safe: trials, watchdogs and a stop's kill sweep may call it at once."""

    def __init__(
        self,
        behaviours: Mapping[str, Behaviour] | None = None,
        *,
        images: Mapping[str, str] | Iterable[str] = (),
        registry: Iterable[str] = (),
        info: EngineInfo | None = None,
        remote: bool = False,
    ) -> None:
        """``behaviours``: by container name or role; ``images``: tag -> id, or tags (ids made up);
        ``registry``: what :meth:`try_pull` can fetch (default: nothing, an air-gapped host);
        ``remote``: an engine on another machine, which refuses bind mounts as the Docker engine does."""
        self.remote = remote
        self.behaviours: dict[str, Behaviour] = dict(behaviours or {})
        self.containers: dict[str, FakeContainer] = {}
        self.networks: dict[str, FakeNetwork] = {}
        self.volumes: dict[str, FakeVolume] = {}
        self._volume_root: Path | None = None
        self.tags: dict[str, str] = {}
        self.image_meta: dict[str, tuple[dict[str, str], int]] = {}
        """image id -> (labels, size)"""
        self.registry = set(registry)
        self.engine_info = info or EngineInfo(
            server_version="fake",
            api_version="1.41",
            cgroup_version="2",
            cgroup_driver="systemd",
            runtimes=("runc",),
            security_options=("name=seccomp,profile=builtin",),
            docker_root="/var/lib/docker",
            storage_driver="overlay2",
            os="FakeOS",
            runc_version="1.1.12",
            rootless=False,
        )
        self.calls: list[Call] = []
        self.closed = False
        self._faults: list[_Fault] = []
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        pairs = images.items() if isinstance(images, Mapping) else ((tag, None) for tag in images)
        for tag, image_id in pairs:
            self.add_image(tag, image_id)

    # ------------------------------------------------------------- scripting
    def fail(
        self,
        method: str,
        target: str | None = None,
        error: BaseException | None = None,
        *,
        times: int | None = 1,
        after: bool = False,
    ) -> None:
        """Make ``method`` raise ``error`` (default an InfraError) for ``target`` (a name, a role, an
        image ref; None: any), ``times`` times (None: every time). ``method="*"``: every call (a
        tripwire for code that must not touch the engine at all).

        ``after`` (``create`` only): the call takes effect and then raises, as when the daemon made the
        container but its answer was lost and :meth:`Engine.create <harness.sandbox.engine.Engine.create>`'s
        own clean-up could not remove it: a failed create that leaves its container behind."""
        if after and method != "create":
            raise ValueError("after=True is modelled for create only")
        error = error or InfraError(f"{method} {target or ''} failed: the fake engine was told to fail")
        with self._lock:
            self._faults.append(_Fault(method, target, error, times, after))

    def behave(self, key: str, behaviour: Behaviour) -> None:
        """Script the containers named or with the role ``key``."""
        self.behaviours[key] = behaviour

    def add_image(self, tag: str, image_id: str | None = None, *, labels: Mapping[str, str] | None = None) -> str:
        image_id = image_id or "sha256:" + hashlib.sha256(tag.encode()).hexdigest()
        with self._lock:
            self.tags[tag] = image_id
            self.image_meta.setdefault(image_id, (dict(labels or {}), 1 << 20))
        return image_id

    def add_build_stage(self, image_id: str, labels: Mapping[str, str], size: int) -> None:
        """An untagged image (a build's intermediate stage)."""
        with self._lock:
            self.image_meta[image_id] = (dict(labels), size)

    def append_log(self, name: str, data: bytes, stream: Literal["stdout", "stderr"] = "stdout") -> None:
        """What a running container prints after it started (a sidecar's request log)."""
        with self._lock:
            self._get(name).chunks.append((stream, data))

    def peer(self, spec: ContainerSpec, role: str) -> str:
        """The name of the container of the same trial with ``role`` (the agent's gateway)."""
        trial = spec.labels.get(TRIAL)
        with self._lock:
            for c in self.containers.values():
                if c.role == role and c.spec.labels.get(TRIAL) == trial:
                    return c.spec.name
        raise AssertionError(f"no {role} container next to {spec.name}")

    # ------------------------------------------------------------ inspection
    def left(self) -> list[DockerObject]:
        """Every container, network and volume still there, labelled or not."""
        with self._lock:
            return (
                [DockerObject("container", n, dict(c.spec.labels)) for n, c in self.containers.items()]
                + [DockerObject("network", n, dict(net.labels)) for n, net in self.networks.items()]
                + [DockerObject("volume", n, dict(v.labels)) for n, v in self.volumes.items()]
            )

    def mount_path(self, spec: ContainerSpec, target: str) -> Path:
        """The host directory where a container's writes at ``target`` land: a bind mount's source, a
        volume's directory, or an overlay volume's upper directory."""
        for m in spec.mounts:
            if m.target == target:
                return m.source
        for v in spec.volumes:
            if v.target == target:
                return self._writable_dir(v.volume)
        raise AssertionError(f"{spec.name} has no mount at {target}")

    def merged(self, volume: str, dest: Path) -> Path:
        """What a container sees of ``volume``: copied into ``dest`` (lower + upper for an overlay)."""
        with self._lock:
            vol = self.volumes[volume]
        if vol.overlay is None:
            shutil.copytree(vol.path, dest, symlinks=True)
            return dest
        lower, _upper, _work = vol.overlay
        shutil.copytree(self._dir(lower), dest, symlinks=True)
        _overlay_copy(self._writable_dir(volume), dest)
        return dest

    def _dir(self, d: VolumeDir) -> Path:
        with self._lock:
            vol = self.volumes.get(d.volume)
            if vol is None:
                raise InfraError(f"volume {d.volume} vanished: no such volume")
        return vol.path / d.subdir if d.subdir else vol.path

    def _writable_dir(self, volume: str) -> Path:
        with self._lock:
            vol = self.volumes.get(volume)
            if vol is None:
                raise InfraError(f"no such volume: {volume}")
        if vol.overlay is None:
            return vol.path
        upper = self._dir(vol.overlay[1])
        if not upper.is_dir():
            raise InfraError(f"mounting {volume} failed: its upper directory {vol.overlay[1]} does not exist")
        return upper

    def _container_dir(self, name: str, path: str) -> Path:
        """The host directory behind ``path`` in a container (inside one of its volume or bind mounts)."""
        return self.path_in(self._get(name).spec, path)

    def path_in(self, spec: ContainerSpec, path: str) -> Path:
        """The host path where a container's writes at ``path`` (inside one of its bind or volume mounts,
        the innermost) land: under a bind mount's source, a volume's directory or an overlay's upper."""
        mounts = [(m.target, m.source) for m in spec.mounts]
        mounts += [(v.target, self._writable_dir(v.volume)) for v in spec.volumes]
        for target, source in sorted(mounts, key=lambda m: -len(m[0])):
            if path == target or path.startswith(target.rstrip("/") + "/"):
                return source / path[len(target) :].lstrip("/")
        raise InfraError(
            f"copying into {spec.name}:{path} failed: not inside a volume (the root filesystem is read-only)"
        )

    def view(self, spec: ContainerSpec, target: str, dest: Path) -> Path:
        """What a container sees at the mount ``target``: a bind mount's source itself, or the volume
        (lower + upper for an overlay) copied into ``dest``."""
        for m in spec.mounts:
            if m.target == target:
                return m.source
        for v in spec.volumes:
            if v.target == target:
                return self.merged(v.volume, dest)
        raise AssertionError(f"{spec.name} has no mount at {target}")

    def write_merged(self, volume: str, desired: Path) -> None:
        """Make what a container sees of the overlay ``volume`` equal to the tree ``desired``, writing only
        into its upper directory, where a container's writes land: what differs from the merged view is
        copied up, what is gone gets a ``.wh.NAME`` whiteout."""
        with self._lock:
            vol = self.volumes[volume]
        if vol.overlay is None:
            raise AssertionError(f"{volume} is not an overlay volume")
        with tempfile.TemporaryDirectory(prefix="fake-merged-") as tmp:
            _write_through(self._writable_dir(volume), self.merged(volume, Path(tmp) / "now"), desired)

    def _mountable(self, spec: ContainerSpec) -> None:
        """The engine mounts a container's volumes when it starts it: an overlay whose directories are gone
        cannot be mounted (the local driver's ``mount`` fails), and the container does not start."""
        for v in spec.volumes:
            with self._lock:
                vol = self.volumes.get(v.volume)
            if vol is None:
                raise InfraError(f"starting container {spec.name} failed: volume {v.volume} not found")
            for d in vol.overlay or ():
                if not self._dir(d).is_dir():
                    raise InfraError(
                        f"starting container {spec.name} failed: error while mounting volume {v.volume}: "
                        f"{d.volume}/{d.subdir or ''}: no such file or directory"
                    )

    def targets(self, method: str) -> list[str]:
        """The targets of every call to ``method``, in order."""
        return [c.target for c in self.calls if c.method == method]

    # --------------------------------------------------------------- internals
    def _call(self, method: str, target: str = "", role: str = "") -> None:
        with self._lock:
            self.calls.append(Call(method, target))
            self._raise_fault(method, target, role, after=False)

    def _raise_fault(self, method: str, target: str, role: str, *, after: bool) -> None:
        with self._lock:
            for fault in self._faults:
                if (
                    fault.method in (method, "*")
                    and fault.after == after
                    and fault.target in (None, target, role)
                    and fault.times != 0
                ):
                    if fault.times is not None:
                        fault.times -= 1
                    raise fault.error

    def _get(self, name: str) -> FakeContainer:
        c = self.containers.get(name)
        if c is None:
            raise InfraError(f"container {name} vanished: no such container")
        return c

    def _role(self, name: str) -> str:
        c = self.containers.get(name)
        return c.role if c is not None else ""

    def _refresh(self, c: FakeContainer) -> None:
        """A running container whose hold is over has exited."""
        if c.state == "running" and time.monotonic() - c.started_at >= c.outcome.hold_s:
            c.state, c.exit_code = "exited", c.outcome.exit_code
            c.finished_at = c.started_at + c.outcome.hold_s

    @staticmethod
    def _killed(c: FakeContainer) -> None:
        c.state, c.exit_code, c.finished_at = "exited", KILLED, time.monotonic()
        c.killed.set()

    def _behaviour(self, spec: ContainerSpec) -> Behaviour:
        for key in (spec.name, spec.labels.get(ROLE, "")):
            if key in self.behaviours:
                return self.behaviours[key]
        if spec.labels.get(ROLE) == PROBE_ROLE:
            return read_probe_token  # the engine sees the controller's files (a test scripts a blind one)
        return Outcome()

    def _resolve_image(self, ref: str) -> str | None:
        if ref in self.tags:
            return self.tags[ref]
        return ref if ref in self.image_meta else None

    # -------------------------------------------------------- ContainerRuntime
    def info(self) -> EngineInfo:
        self._call("info")
        return self.engine_info

    def endpoint(self) -> Endpoint:
        return Endpoint("tcp://fake:2375" if self.remote else "unix:///fake/docker.sock", remote=self.remote)

    def volume_file(self, volume: str, rel: str) -> tuple[bytes, tuple[int, int, int]]:
        """A file an archive put into ``volume``: its bytes and the (uid, gid, mode) its entry asked for."""
        with self._lock:
            v = self.volumes[volume]
            return (v.path / rel).read_bytes(), v.meta[rel]

    def create(self, spec: ContainerSpec, *, extra_networks: Sequence[str] = ()) -> str:
        self._call("create", spec.name, spec.labels.get(ROLE, ""))
        with self._lock:
            if self._resolve_image(spec.image) is None:
                raise PrerequisiteError(f"image {spec.image} is not present", hint="run `skilltrial images build`")
            if spec.name in self.containers:
                raise InfraError(f"creating container {spec.name} failed: the name is already in use")
            if self.remote and spec.mounts:
                raise NeedsLocalEngine(f"container {spec.name} needs the controller's path {spec.mounts[0].source}")
            nets = [n for n in (spec.network, *extra_networks) if n != "none"]
            missing = [n for n in nets if n not in self.networks]
            if missing:
                raise InfraError(f"creating container {spec.name} failed: network {missing[0]} not found")
            gone = [v.volume for v in spec.volumes if v.volume not in self.volumes]
            if gone:
                raise InfraError(f"creating container {spec.name} failed: volume {gone[0]} not found")
            container_id = f"{next(self._ids):064x}"
            self.containers[spec.name] = FakeContainer(spec, container_id, nets)
            self._raise_fault("create", spec.name, spec.labels.get(ROLE, ""), after=True)
        return container_id

    def start(self, name: str) -> None:
        self._call("start", name, self._role(name))
        with self._lock:
            c = self._get(name)
            if c.state != "created":
                return
            behaviour = self._behaviour(c.spec)
        self._mountable(c.spec)
        outcome = behaviour(c.spec, self) if callable(behaviour) else behaviour
        with self._lock:
            c.outcome, c.state, c.started_at = outcome, "running", time.monotonic()
            c.chunks.extend([("stdout", outcome.stdout), ("stderr", outcome.stderr)])
            self._refresh(c)

    def wait(self, name: str, deadline_s: float) -> Waited:
        self._call("wait", name, self._role(name))
        with self._lock:
            c = self._get(name)
            if c.state == "created":
                raise InfraError(f"waiting for container {name} failed: it was never started")
            self._refresh(c)
            outcome = c.outcome
            left = outcome.hold_s - (time.monotonic() - c.started_at)
        if not c.killed.is_set():  # a kill by someone else is a result
            if outcome.seconds is not None and outcome.seconds > deadline_s:  # a simulated overrun: at once
                self.kill(name)
                return Waited(None, timed_out=True, oom_killed=outcome.oom_killed, ran_s=deadline_s)
            running = c.state == "running" and left > 0
            if running and not c.killed.wait(min(left, deadline_s)) and left > deadline_s:
                self.kill(name)
                return Waited(None, timed_out=True, oom_killed=outcome.oom_killed, ran_s=self._ran_s(c))
        with self._lock:
            self._refresh(c)
            ran = outcome.seconds if outcome.seconds is not None else self._ran_s(c)
            return Waited(c.exit_code, timed_out=False, oom_killed=outcome.oom_killed, ran_s=ran)

    @staticmethod
    def _ran_s(c: FakeContainer) -> float:
        """From its start to its exit (now, while it runs): real time, or the simulated ``Outcome.seconds``."""
        return (c.finished_at or time.monotonic()) - c.started_at

    def kill(self, name: str) -> None:
        with contextlib.suppress(Exception):  # never raises, like the engine's
            self._call("kill", name, self._role(name))
        with self._lock:
            c = self.containers.get(name)
            if c is None:
                return
            self._refresh(c)
            if c.state == "running":
                self._killed(c)

    def logs(self, name: str, *, stdout: bool = True, stderr: bool = False, cap: int = 4 << 20) -> Logs:
        self._call("logs", name, self._role(name))
        with self._lock:
            c = self._get(name)
            wanted = {"stdout"} if stdout else set()
            if stderr:
                wanted.add("stderr")
            data = b"".join(chunk for stream, chunk in c.chunks if stream in wanted)
        if len(data) > cap:
            return Logs(data[-cap:], truncated=True)
        return Logs(data, truncated=False)

    def output(self, name: str, *, stdout_cap: int, stderr_cap: int) -> tuple[Logs, Logs]:
        self._call("output", name, self._role(name))
        with self._lock:
            c = self._get(name)
            out = b"".join(chunk for stream, chunk in c.chunks if stream == "stdout")
            err = b"".join(chunk for stream, chunk in c.chunks if stream == "stderr")
        return (
            Logs(out[-stdout_cap:], truncated=True) if len(out) > stdout_cap else Logs(out, truncated=False),
            Logs(err[-stderr_cap:], truncated=True) if len(err) > stderr_cap else Logs(err, truncated=False),
        )

    def follow_logs(self, name: str) -> _FollowedLogs:
        self._call("follow_logs", name, self._role(name))
        with self._lock:
            self._get(name)
        return _FollowedLogs(self, name)

    def is_running(self, name: str) -> bool:
        try:
            self._call("is_running", name, self._role(name))
        except InfraError:
            return False
        with self._lock:
            c = self.containers.get(name)
            if c is None:
                return False
            self._refresh(c)
            return c.state == "running"

    def container_ip(self, name: str, network: str) -> str:
        self._call("container_ip", name, self._role(name))
        with self._lock:
            c = self._get(name)
            if network not in c.networks or c.state != "running":
                raise InfraError(f"container {name} has no address on network {network}")
            members = [n for n, other in self.containers.items() if network in other.networks]
            return f"10.89.{self.networks[network].index}.{members.index(name) + 2}"

    def create_network(
        self, name: str, labels: Mapping[str, str], *, internal: bool, isolated: bool = True, hosts: int = TRIAL_HOSTS
    ) -> None:
        self._call("create_network", name)
        with self._lock:
            if name in self.networks:
                raise InfraError(f"creating network {name} failed: network with name {name} already exists")
            self.networks[name] = FakeNetwork(name, dict(labels), internal, next(self._ids) % 250)

    def labelled(self, selector: Mapping[str, str] | None = None) -> list[DockerObject]:
        self._call("labelled")
        wanted = {OWNER: OWNER_VALUE, **(selector or {})}

        def match(labels: Mapping[str, str]) -> bool:
            return all(labels.get(k) == v for k, v in wanted.items())

        with self._lock:
            return (
                [
                    DockerObject("container", n, dict(c.spec.labels))
                    for n, c in self.containers.items()
                    if match(c.spec.labels)
                ]
                + [
                    DockerObject("network", n, dict(net.labels))
                    for n, net in self.networks.items()
                    if match(net.labels)
                ]
                + [
                    DockerObject("volume", n, dict(v.labels))
                    for n, v in sorted(self.volumes.items())
                    if match(v.labels)
                ]
            )

    def remove_container(self, name: str) -> None:
        """Force-remove (a running container is killed first); a missing one is fine."""
        self._call("remove_container", name, self._role(name))
        with self._lock:
            c = self.containers.pop(name, None)
            if c is not None:
                self._refresh(c)
                if c.state == "running":
                    self._killed(c)
                c.killed.set()

    def remove_network(self, name: str) -> None:
        """A network with a member cannot go; a missing one is fine."""
        self._call("remove_network", name)
        with self._lock:
            members = [n for n, c in self.containers.items() if name in c.networks]
            if members:
                raise InfraError(f"removing network {name!r} failed: it has active endpoints ({', '.join(members)})")
            self.networks.pop(name, None)

    # ------------------------------------------------------------------ volumes
    def _new_volume_dir(self, name: str) -> Path:
        if self._volume_root is None:
            self._volume_root = Path(tempfile.mkdtemp(prefix="fake-volumes-"))
        path = self._volume_root / name / "_data"
        path.mkdir(parents=True)
        return path

    def create_volume(self, name: str, labels: Mapping[str, str]) -> None:
        self._call("create_volume", name)
        with self._lock:
            if name in self.volumes:  # as the engine does: the volume stays as it is, its first labels kept
                return
            self.volumes[name] = FakeVolume(name, dict(labels), self._new_volume_dir(name))

    def create_overlay_volume(
        self, name: str, labels: Mapping[str, str], *, lower: VolumeDir, upper: VolumeDir, work: VolumeDir
    ) -> None:
        self._call("create_overlay_volume", name)
        with self._lock:
            if name in self.volumes:
                raise InfraError(f"creating overlay volume {name} failed: a volume named {name} already exists")
            for d in (lower, upper, work):
                if d.volume not in self.volumes:
                    raise InfraError(f"creating overlay volume {name} failed: no such volume: {d.volume}")
            self.volumes[name] = FakeVolume(name, dict(labels), self._new_volume_dir(name), (lower, upper, work))

    def volume_mountpoint(self, name: str) -> str:
        self._call("volume_mountpoint", name)
        with self._lock:
            vol = self.volumes.get(name)
            if vol is None:
                raise InfraError(f"inspecting volume {name} failed: no such volume")
            return str(vol.path)

    def remove_volume(self, name: str) -> None:
        """A volume a container uses cannot go; a missing one is fine."""
        self._call("remove_volume", name)
        with self._lock:
            users = [n for n, c in self.containers.items() if any(v.volume == name for v in c.spec.volumes)]
            if users:
                raise InfraError(f"removing volume {name} failed: volume is in use - [{', '.join(users)}]")
            vol = self.volumes.pop(name, None)
        if vol is not None:
            shutil.rmtree(vol.path.parent, ignore_errors=True)

    def put_archive(self, name: str, path: str, data: bytes | Iterable[bytes]) -> None:
        self._call("put_archive", name, self._role(name))
        with self._lock:
            dest = self._container_dir(name, path)
        if not dest.is_dir():
            raise InfraError(f"copying into {name}:{path} failed: no such directory")
        vol, inner, read_only = self._volume_at(name, path)
        if read_only:
            raise InfraError(f"copying into {name}:{path} failed: mounted volume is marked read-only")
        blob = data if isinstance(data, bytes) else b"".join(data)
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:") as tf:
            tf.extractall(dest, filter="data")  # owners are not kept: the tests run as anyone
            if vol is not None:  # ... but remembered, and given back by get_archive
                for m in tf.getmembers():
                    vol.meta[f"{inner}/{m.name}".strip("/").removeprefix("./")] = (m.uid, m.gid, m.mode & 0o7777)

    def _volume_at(self, name: str, path: str) -> tuple[FakeVolume | None, str, bool]:
        """The plain volume mounted over ``path`` in the container (None for a bind mount or an overlay),
        the path inside it, and whether that mount is read-only."""
        with self._lock:
            for v in sorted(self._get(name).spec.volumes, key=lambda v: -len(v.target)):
                if path == v.target or path.startswith(v.target.rstrip("/") + "/"):
                    vol = self.volumes[v.volume]
                    return (vol if vol.overlay is None else None), path[len(v.target) :].strip("/"), v.read_only
        return None, "", False

    def get_archive(self, name: str, path: str, *, cap: int) -> Archive | None:
        self._call("get_archive", name, self._role(name))
        with self._lock:
            src = self._container_dir(name, path)
        if not (src.exists() or src.is_symlink()):
            return None
        vol, inner, _ = self._volume_at(name, path)

        def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            rel = f"{inner}/{info.name.partition('/')[2]}".strip("/")
            if vol is not None and rel in vol.meta:
                info.uid, info.gid, info.mode = vol.meta[rel]
            return info

        bio = io.BytesIO()
        with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tf:
            tf.add(src, arcname=path.rstrip("/").rsplit("/", 1)[-1] or ".", filter=owned)  # named as inside
        data = bio.getvalue()
        return Archive(data[:cap], True) if len(data) > cap else Archive(data, False)

    def remove(self, obj: DockerObject) -> None:
        {"container": self.remove_container, "network": self.remove_network, "volume": self.remove_volume}[obj.kind](
            obj.name
        )

    # ------------------------------------------------------------- ImageStore
    def image_id(self, ref: str) -> str | None:
        self._call("image_id", ref)
        with self._lock:
            return self._resolve_image(ref)

    def image_size(self, ref: str) -> int:
        self._call("image_size", ref)
        with self._lock:
            image = self._resolve_image(ref)
            if image is None:
                raise InfraError(f"inspecting image {ref} failed: no such image")
            return self.image_meta[image][1]

    def image_tags(self, repositories: Sequence[str]) -> list[str]:
        self._call("image_tags")
        with self._lock:
            return sorted(t for t in self.tags if t.rsplit(":", 1)[0] in repositories)

    def dangling_images(self, label: str) -> list[DanglingImage]:
        self._call("dangling_images", label)
        with self._lock:
            tagged = set(self.tags.values())
            return [
                DanglingImage(i, size)
                for i, (labels, size) in self.image_meta.items()
                if i not in tagged and label in labels
            ]

    def remove_image(self, ref: str) -> bool:
        self._call("remove_image", ref)
        with self._lock:
            image = self._resolve_image(ref)
            if image is None:
                return True
            if any(self._resolve_image(c.spec.image) == image for c in self.containers.values()):
                return False
            if ref in self.tags:
                del self.tags[ref]
            if ref not in self.tags and image not in self.tags.values():
                self.image_meta.pop(image, None)
            return True

    def try_pull(self, ref: str) -> bool:
        self._call("try_pull", ref)
        if ref not in self.registry:
            return False
        self.add_image(ref)
        return True

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
        self._call("build", tag)
        if on_line is not None:
            on_line(f"Successfully built {tag} (fake)")
        return self.add_image(tag, labels=labels)

    def import_rootfs(self, tarball: Path, *, tag: str, changes: Sequence[str] = ()) -> str:
        self._call("import_rootfs", tag)
        return self.add_image(tag)

    def tag(self, image: str, tag: str) -> None:
        self._call("tag", tag)
        with self._lock:
            resolved = self._resolve_image(image)
            if resolved is None:
                raise InfraError(f"tagging {image} as {tag} failed: no such image")
            self.tags[tag] = resolved

    def save_images(self, refs: Sequence[str]) -> Iterator[bytes]:
        """The fake's archive: each ref's image id and its tags, as JSON (no layers)."""
        self._call("save_images", ",".join(refs))
        with self._lock:
            saved: dict[str, list[str]] = {}
            for ref in refs:
                image = self._resolve_image(ref)
                if image is None:
                    raise InfraError(f"saving images failed: no such image: {ref}")
                named = saved.setdefault(image, [])
                if ref != image and ref not in named:  # saved by tag: the tag goes with it (by id: none)
                    named.append(ref)
            data = json.dumps({"images": saved}).encode()
        return iter([data[:10], data[10:]])

    def load_images(self, data: Iterable[bytes]) -> list[str]:
        self._call("load_images")
        try:
            saved = json.loads(b"".join(data))["images"]
        except (ValueError, KeyError, TypeError) as e:
            raise InfraError(f"loading images failed: not an archive of save_images: {e}") from e
        loaded: list[str] = []
        with self._lock:
            for image, tags in saved.items():
                self.image_meta.setdefault(image, ({}, 1 << 20))
                for tag in tags:
                    self.tags[tag] = image
                loaded += tags or [image]
        return loaded

    def close(self) -> None:
        self.closed = True


_: type[Runtime] = FakeRuntime  # the fake implements the whole interface (mypy checks this line)


# =========================================================== a trial's roles


def listening() -> bytes:
    """The line a sidecar prints once it serves (what :func:`harness.trial.gateway.wait_listening` polls for)."""
    return gatewaylog.dump(gatewaylog.Listening(port=8080)).encode() + b"\n"


GATEWAY = Outcome(stdout=listening(), hold_s=math.inf)


def forwarded(
    cost_usd: float = 0.01, *, status: int = 200, retry_after: str | None = None, stream: bool = False
) -> gatewaylog.Forwarded:
    """One gateway log event: a request forwarded upstream and metered."""
    return gatewaylog.Forwarded(
        path="/v1/messages",
        status=status,
        model="claude-sonnet-5-5",
        stream=stream,
        usage=gatewaylog.Usage(input_tokens=100, output_tokens=50),
        cost_usd=cost_usd,
        broken=False,
        complete=True,
        retry_after=retry_after,
    )


def refused(reason: str, *, method: str = "POST", path: str = "/v1/messages") -> gatewaylog.Refused:
    """One gateway log event: a request the gateway refused."""
    return gatewaylog.Refused(method=method, path=path, reason=reason)


def gateway_log(runtime: FakeRuntime, spec: ContainerSpec, *events: gatewaylog.GatewayEvent) -> None:
    """Events the trial's gateway logs while the container ``spec`` talks to it."""
    data = b"".join(gatewaylog.dump(e).encode() + b"\n" for e in events)
    runtime.append_log(runtime.peer(spec, "gateway"), data)


def cli_result(**fields: Any) -> bytes:
    """The Claude Code CLI's stdout: one init line and its result object (``--output-format stream-json``)."""
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "num_turns": 3,
        "total_cost_usd": 0.01,
        "duration_ms": 1200,
        "result": "Done.",
        "session_id": "s-1",
        **fields,
    }
    return json.dumps({"type": "system", "subtype": "init"}).encode() + b"\n" + json.dumps(result).encode() + b"\n"


def agent(
    edits: Mapping[str, str] | None = None, *, result: Mapping[str, Any] | None = None, cost_usd: float = 0.01
) -> Callable[[ContainerSpec, FakeRuntime], Outcome]:
    """An agent that writes ``edits`` (path -> text) into its /workspace (a bind mount, or a volume: an
    overlay's upper directory), is metered once by its gateway, and prints a successful CLI result
    (overridden by ``result``)."""

    def behaviour(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        ws = runtime.mount_path(spec, "/workspace")
        for rel, text in (edits if edits is not None else {"README.md": "edited by the agent\n"}).items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text)
        gateway_log(runtime, spec, forwarded(cost_usd))
        return Outcome(stdout=cli_result(total_cost_usd=cost_usd, **(result or {})), seconds=12.0)

    return behaviour


def judge(verdict: str = "pass", reason: str = "meets the criteria") -> Callable[[ContainerSpec, FakeRuntime], Outcome]:
    """A judge that answers with structured output (``verdict=''``: it never calls StructuredOutput)."""

    def behaviour(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        gateway_log(runtime, spec, forwarded(0.002))
        structured = {"structured_output": {"verdict": verdict, "reason": reason}} if verdict else {}
        return Outcome(stdout=cli_result(total_cost_usd=0.002, **structured), seconds=3.0)

    return behaviour


def _git(args: Sequence[str], git_dir: Path, *, cwd: Path | None = None) -> bytes:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(git_dir.parent),
        "GIT_DIR": str(git_dir),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
    }
    hardening = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.autocrlf=false"]
    identity = ["-c", "user.name=harness", "-c", "user.email=harness@localhost", "-c", "commit.gpgSign=false"]
    proc = subprocess.run(
        ["git", *hardening, *identity, *args], cwd=cwd, env=env, capture_output=True, check=True, timeout=60
    )
    return proc.stdout


def collect(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
    """``harness/sidecars/collect.sh`` with host git, on the spec's mounts: the patch base -> workspace and
    its stats into /out, base + patch with protected paths restored into /verify, "ok" into /out/status.
    (The real script also scans for special files and nested repositories; here both lists are empty.)

    A volume workspace's collect (``COLLECT_UPPER`` set, :func:`harness.sandbox.roles.collect_volume_spec`)
    reads the merged /base and /workspace volumes, writes its outputs into ``COLLECT_OUT`` (the scratch
    volume's ``out/``) and makes verify's overlay base + patch through its upper directory; where the real
    script would stop (no upper directory to list, no base repository, no ``out/``), so does this."""
    protected = spec.command[4:]  # sh -c SCRIPT collect PROTECTED...
    cap = int(spec.env.get("COLLECT_PATCH_CAP", "8388608"))
    if "COLLECT_UPPER" in spec.env:
        return _collect_volumes(spec, runtime, protected, cap)
    base, ws = host_path(spec, "/base"), host_path(spec, "/workspace")
    out, verify = host_path(spec, "/out"), host_path(spec, "/verify")
    return _extract(base, ws, out, verify, protected, cap, verify_is_base="COLLECT_CHANGES" in spec.env)


def _collect_volumes(spec: ContainerSpec, runtime: FakeRuntime, protected: Sequence[str], cap: int) -> Outcome:
    out_at = spec.env.get("COLLECT_OUT", "/out")
    out = runtime.path_in(spec, out_at)
    writable = {v.target for v in spec.volumes if not v.read_only} | {m.target for m in spec.mounts if not m.read_only}
    if not out.is_dir() or not any(out_at == t or out_at.startswith(t + "/") for t in writable):
        # `fail` cannot even write its status: the controller finds none
        return Outcome(exit_code=3, stderr=f"sh: cannot create {out_at}/status: not a writable directory\n".encode())

    def fail(status: str) -> Outcome:
        (out / "status").write_text(status + "\n")
        return Outcome(exit_code=3, seconds=1.0)

    if not runtime.path_in(spec, spec.env["COLLECT_UPPER"]).is_dir():
        return fail("listing what the agent wrote failed (unreadable?)")
    if "/verify" not in writable:
        return fail("clearing the verify tree's .git failed")
    with tempfile.TemporaryDirectory(prefix="fake-collect-view-") as tmp:
        base = runtime.view(spec, "/base", Path(tmp) / "base")
        basegit = spec.env.get("COLLECT_BASEGIT", "/basegit")
        if not basegit.startswith("/base/") or not (base / basegit.removeprefix("/base/") / "index").is_file():
            return fail("copying the base index failed")
        ws = runtime.view(spec, "/workspace", Path(tmp) / "workspace")
        verify = runtime.view(spec, "/verify", Path(tmp) / "verify")
        outcome = _extract(base, ws, out, verify, protected, cap, verify_is_base=True)
        (volume,) = [v.volume for v in spec.volumes if v.target == "/verify"]
        runtime.write_merged(volume, verify)
    return outcome


def _extract(
    base: Path, ws: Path, out: Path, verify: Path, protected: Sequence[str], cap: int, *, verify_is_base: bool
) -> Outcome:
    """collect.sh's work on host directories. ``verify_is_base``: verify's tree is an overlay of the
    template already (its .git included), else an empty directory the base is copied into."""
    with tempfile.TemporaryDirectory(prefix="fake-collect-") as tmp:
        git_dir = Path(tmp) / "x.git"
        _git(["init", "-q", "--bare", str(git_dir)], git_dir)
        _git([f"--work-tree={base}", "add", "-A", "--force"], git_dir)
        _git([f"--work-tree={base}", "commit", "-q", "--no-verify", "--allow-empty", "-m", "base"], git_dir)
        _git([f"--work-tree={ws}", "add", "-A"], git_dir)
        diff = ["diff", "--cached", "--no-renames"]
        patch = _git(
            [*diff, "--binary", "--full-index", "--no-ext-diff", "--no-textconv", "--no-color", "HEAD"], git_dir
        )
        (out / "patch.diff").write_bytes(patch[: cap + 1])
        (out / "numstat").write_bytes(_git([*diff, "--numstat", "-z", "HEAD"], git_dir))
        (out / "raw").write_bytes(_git([*diff, "--raw", "-z", "--full-index", "HEAD"], git_dir))
    (out / "special").write_bytes(b"")
    (out / "nested").write_bytes(b"")
    if len(patch) > cap:
        (out / "status").write_text(f"patch larger than {cap} bytes\n")
        return Outcome(seconds=1.0)
    if verify_is_base:  # an overlay's verify tree is base already (with the agent's .git)
        shutil.rmtree(verify / ".git")
    else:
        shutil.copytree(
            base, verify, symlinks=True, dirs_exist_ok=True, ignore=lambda d, n: [".git"] if d == str(base) else []
        )
    if patch:
        subprocess.run(
            [
                "git",
                "-c",
                "core.hooksPath=/dev/null",
                "apply",
                "--binary",
                "--whitespace=nowarn",
                str(out / "patch.diff"),
            ],
            cwd=verify,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(out), "GIT_CONFIG_NOSYSTEM": "1"},
            capture_output=True,
            check=True,
        )
    for rel in protected:
        target, original = verify / rel, base / rel
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        if original.is_dir():
            shutil.copytree(original, target, symlinks=True)
        elif original.exists():
            shutil.copy2(original, target)
    (out / "status").write_text("ok\n")
    return Outcome(seconds=1.0)


WATCH = SERVICE
"""The in-engine workspace watchdog of a volume trial (role ``watch``): it watches until it is killed (the
trial stops it when the agent is done). Script ``Outcome(exit_code=3, stdout=b"files\\n")`` for a trip."""


def trial_behaviours(**overrides: Behaviour) -> dict[str, Behaviour]:
    """Every role of a trial that passes: a listening gateway, an agent that edits README.md, a workspace
    watchdog that never trips (volume workspaces), collect, a verify that exits 0 and a judge that says
    pass. ``overrides`` replace roles by name."""
    roles: dict[str, Behaviour] = {
        "gateway": GATEWAY,
        "agent": agent(),
        "watch": WATCH,
        "collect": collect,
        "verify": Outcome(exit_code=0, stdout=b"1 passed\n", seconds=2.0),
        "judge": judge(),
    }
    roles.update(overrides)
    return roles
