"""The Docker engine boundary: the only module that imports ``docker``.

:class:`Engine` implements :class:`harness.sandbox.runtime.Runtime` (containers, networks,
labelled objects, images) over one docker-py client. Everything above this module sees
the runtime's typed specs and results and harness errors; docker-py and requests
exceptions are translated here (``raise InfraError(...) from e``). The container hardening
profile is applied here, to every container the harness starts, so no caller
can forget a flag:

    non-root user, --cap-drop ALL, no-new-privileges, default seccomp,
    read-only rootfs with sized tmpfs, pids / memory (= swap) / cpu / nofile /
    fsize limits, --init, capped json-file logs, no published ports, no docker
    socket, only the mounts the spec names, restart policy "no".

Where the engine is comes from an :class:`EngineAddress` (a pool's engine, :mod:`harness.sandbox.pool`) or
from ``DOCKER_HOST`` with Docker's TLS variables (:func:`address_from_env`); ``ssh://`` goes through one ssh
tunnel per engine (:mod:`harness.sandbox.sshtunnel`). A unix socket or a loopback tcp:// address is local
(:func:`endpoint_of`), anything else (ssh://, tcp:// elsewhere) may be another machine, which shares no path
with the controller. A remote engine
refuses every :class:`~harness.sandbox.runtime.BindMount` with a ``NeedsLocalEngine`` error that names the
path (the engine would otherwise bind its own directory of that name, or fail obscurely), and
:meth:`Engine.free_disk_bytes` reports nothing for it.

Deadlines are enforced twice: inside the container by the caller's command
(``timeout -k``) and here, on the host, by ``kill`` when ``wait`` overruns.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import math
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.tls
import requests.adapters
import requests.exceptions
import urllib3.exceptions
from docker.models.containers import _create_container_args  # type: ignore[attr-defined]
from docker.types import IPAMConfig, IPAMPool, LogConfig, Mount, Ulimit

from harness.errors import InfraError, NeedsLocalEngine, PrerequisiteError
from harness.retry import call_with_retry
from harness.sandbox import labels as L
from harness.sandbox import subnets
from harness.sandbox.runtime import (
    Archive,
    ContainerSpec,
    DanglingImage,
    DockerObject,
    Endpoint,
    EngineInfo,
    Logs,
    LogStream,
    VolumeDir,
    Waited,
)
from harness.sandbox.sshtunnel import SshTunnel

DOCKER_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)
MIN_API_VERSION = "1.24"
"""The oldest engine API docker-py speaks (engine 1.12): enough to ask an engine for its own."""
IMAGE_STREAM_TIMEOUT_S = 900
"""Seconds an image save or load may go without a byte (the engine unpacks layers as they arrive)."""
SUBNET_ATTEMPTS = 8
"""Subnets a network's creation tries when others keep taking the free-looking one first."""


class _SubnetTaken(Exception):
    """Internal: the engine refused a subnet as overlapping (another process took it since the look)."""


def _transient(e: BaseException) -> bool:
    if isinstance(e, docker.errors.NotFound):
        return False
    if isinstance(e, docker.errors.APIError):
        return e.status_code is not None and e.status_code >= 500
    return isinstance(e, requests.exceptions.ConnectionError | requests.exceptions.Timeout)


def _read_timed_out(e: BaseException) -> bool:
    """Whether a wait ended because its own deadline passed (and not because the engine went away).

    requests raises ``ReadTimeout`` when the deadline passes before the response headers, and
    ``ConnectionError`` wrapping urllib3's ``ReadTimeoutError`` when it passes while reading the body
    (the engine answers ``/wait`` headers at once). Any other ``ConnectionError`` is a lost engine.
    """
    if isinstance(e, requests.exceptions.ReadTimeout):
        return True
    if not isinstance(e, requests.exceptions.ConnectionError):
        return False
    return any(
        isinstance(a, urllib3.exceptions.ReadTimeoutError)
        or isinstance(getattr(a, "reason", None), urllib3.exceptions.ReadTimeoutError)
        for a in e.args
    )


def ran_s(state: Mapping[str, Any]) -> float | None:
    """How long a container ran, from its start to its exit as the engine recorded them (``State`` of an
    inspect); None when it does not say (never started, not exited, an unreadable time)."""
    try:
        started = dt.datetime.fromisoformat(str(state["StartedAt"]))
        finished = dt.datetime.fromisoformat(str(state["FinishedAt"]))
    except (KeyError, ValueError):
        return None
    seconds = (finished - started).total_seconds()
    return seconds if seconds >= 0 else None  # FinishedAt is the year 1 until the container exits


def frames(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """(stream, payload) of each frame of the engine's multiplexed log stream (a container without a TTY), in
    order: a frame is one byte of stream (1 stdout, 2 stderr), three zeros, a big-endian length, then that many
    bytes. A frame cut short at the end gives what arrived."""
    at = 0
    while len(raw) - at >= 8:
        length = int.from_bytes(raw[at + 4 : at + 8], "big")
        yield raw[at], raw[at + 8 : at + 8 + length]
        at += 8 + length


def _tail(data: bytes, cap: int) -> Logs:
    return Logs(data[-cap:], truncated=True) if len(data) > cap else Logs(data, truncated=False)


def _is_loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def endpoint_of(env: Mapping[str, str]) -> Endpoint:
    """Where ``DOCKER_HOST`` points (unset: the default local socket). A unix socket, an npipe and a
    tcp:// address on loopback (Docker Desktop's ``tcp://localhost:2375``, a local socket proxy) are
    local; anything else (ssh://, tcp:// to another address) is remote. A loopback port can also be a
    tunnel to another machine (``ssh -L``): ``HARNESS_ENGINE_REMOTE=1`` says so, and the run then
    treats the engine as remote."""
    url = env.get("DOCKER_HOST", "").strip() or "unix:///var/run/docker.sock"
    parts = urllib.parse.urlsplit(url)
    local = parts.scheme in ("unix", "npipe") or (
        parts.scheme in ("tcp", "http", "https") and _is_loopback(parts.hostname)
    )
    forced = env.get("HARNESS_ENGINE_REMOTE", "").strip().lower() in ("1", "true", "yes")
    return Endpoint(url=url, remote=forced or not local)


DEFAULT_CONNECTIONS = 10
"""docker-py's own: the connections its client keeps open for reuse."""
CONNECTIONS_PER_TRIAL = 3
"""Engine connections one running trial holds for long stretches: its gateway's followed log
(:meth:`Engine.follow_logs`), the agent's wait, and a volume workspace's in-engine watchdog's wait."""


def connections_for(jobs: int) -> int:
    """The connections an engine keeps open for ``jobs`` trials at once. Past that docker-py does not wait: it
    opens one more connection and discards it after the call (over tcp://, a connection and with TLS a
    handshake per call), so a run of more than a few trials would pay that on most of its calls. A few more
    than the trials hold, for the short calls made meanwhile (logs, inspect, removal by the reaper)."""
    return max(DEFAULT_CONNECTIONS, CONNECTIONS_PER_TRIAL * jobs + 4)


def _size_http_pools(api: Any, connections: int) -> None:
    """docker-py passes its pool size to its unix-socket transport only (which pools per request URL); over
    tcp:// (TLS or not) it keeps requests' default of 10. Mount adapters of the size asked for there (TLS
    settings are the session's, not the adapter's, so they stay as docker-py set them)."""
    for prefix in ("http://", "https://"):
        if prefix in api.adapters:
            api.mount(prefix, requests.adapters.HTTPAdapter(pool_maxsize=connections))


@dataclass(frozen=True)
class EngineAddress:
    """How to reach one engine: its URL and what the connection needs beside it."""

    url: str
    """``unix:///path``, ``tcp://host:port`` or ``ssh://[user@]host[:port][/socket]``."""
    name: str = ""
    """What reports call it (default: the URL's host, or ``local`` for a unix socket)."""
    cert_path: Path | None = None
    """tcp:// with TLS: a directory holding ``ca.pem``, ``cert.pem`` and ``key.pem`` (Docker's layout)."""
    tls_verify: bool = True
    """Verify the engine's certificate against ``ca.pem`` (Docker's ``DOCKER_TLS_VERIFY``)."""
    ssh_config: Path | None = None
    """ssh://: an ssh config file to use instead of the user's (``ssh -F``)."""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = urllib.parse.urlsplit(self.url)
        return "local" if parts.scheme in ("unix", "npipe") else (parts.hostname or self.url)


def address_from_env(env: Mapping[str, str], url: str | None = None) -> EngineAddress:
    """``url`` (default ``DOCKER_HOST``, else the local socket) with Docker's TLS conventions: TLS when
    ``DOCKER_TLS_VERIFY`` is set (verifying the engine) or ``DOCKER_CERT_PATH`` is (client certificate
    only); the files are ``ca.pem``, ``cert.pem`` and ``key.pem`` in ``DOCKER_CERT_PATH`` (default
    ``~/.docker``). They apply to a ``tcp://`` URL only."""
    url = (url or env.get("DOCKER_HOST", "")).strip() or "unix:///var/run/docker.sock"
    verify = bool(env.get("DOCKER_TLS_VERIFY", "").strip())
    cert_dir = env.get("DOCKER_CERT_PATH", "").strip()
    if not url.startswith("tcp://") or not (verify or cert_dir):
        return EngineAddress(url)
    home = env.get("HOME", "").strip() or os.path.expanduser("~")
    return EngineAddress(url, cert_path=Path(cert_dir or os.path.join(home, ".docker")), tls_verify=verify)


def _tls_config(address: EngineAddress) -> docker.tls.TLSConfig | None:
    if address.cert_path is None:
        return None
    files = {name: address.cert_path / name for name in ("ca.pem", "cert.pem", "key.pem")}
    needed = ("ca.pem", "cert.pem", "key.pem") if address.tls_verify else ("cert.pem", "key.pem")
    missing = [name for name in needed if not files[name].is_file()]
    if missing:
        raise PrerequisiteError(
            f"engine {address.url}: TLS needs {', '.join(missing)} in {address.cert_path}",
            hint="Docker's layout: ca.pem (the engine's CA), cert.pem and key.pem (this client's)",
        )
    try:
        return docker.tls.TLSConfig(
            client_cert=(str(files["cert.pem"]), str(files["key.pem"])),
            ca_cert=str(files["ca.pem"]) if address.tls_verify else None,
            verify=address.tls_verify,
        )
    except docker.errors.TLSParameterError as e:
        raise PrerequisiteError(f"engine {address.url}: bad TLS files in {address.cert_path}: {e}") from e


def _docker_client(
    url: str, timeout: int, tls: docker.tls.TLSConfig | None, connections: int = DEFAULT_CONNECTIONS
) -> docker.DockerClient:
    if tls is None:
        client = docker.DockerClient(base_url=url, timeout=timeout, max_pool_size=connections)
        _size_http_pools(client.api, connections)
        return client
    # requests puts REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE (set wherever a proxy intercepts TLS, as here) in place
    # of the CA docker-py gives it, and every verification of the engine fails; the engine's CA must decide,
    # from the first request on (the API version docker-py asks for while it constructs a client included)
    probe = docker.APIClient(base_url=url, timeout=timeout, tls=tls, version=MIN_API_VERSION)
    probe.trust_env = False
    try:
        version = str(probe.version(api_version=False)["ApiVersion"])
    finally:
        probe.close()
    client = docker.DockerClient(base_url=url, timeout=timeout, tls=tls, version=version, max_pool_size=connections)
    client.api.trust_env = False
    _size_http_pools(client.api, connections)
    return client


def _uid_gid(user: str) -> tuple[str, str]:
    uid, _, gid = user.partition(":")
    return uid, gid or uid


class Engine:
    """A thin, typed wrapper over one docker-py client: a :class:`harness.sandbox.runtime.Runtime`.

    Beyond the interface it offers what only diagnostics and the Docker tests use: ``inspect``,
    ``exec_run``, ``free_disk_bytes``, and removal of one container or network by name."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        timeout: int = 120,
        address: EngineAddress | None = None,
        max_connections: int = DEFAULT_CONNECTIONS,
    ) -> None:
        """Connect to ``address``, or else to the engine ``env`` names (``DOCKER_HOST``, with Docker's TLS
        variables: :func:`address_from_env`). Raises PrerequisiteError when it does not answer.
        ``max_connections``: how many engine connections the client keeps open for reuse
        (:func:`connections_for` a run's jobs)."""
        environ = env if env is not None else os.environ
        address = address or address_from_env(environ)
        self.address = address
        self._endpoint = endpoint_of({**environ, "DOCKER_HOST": address.url})
        self._tunnel: SshTunnel | None = None
        self._subnet_pool = subnets.pool_from_env(environ)
        self._subnet_lock = threading.Lock()
        self._subnets_pending: set[IPv4Network] = set()
        try:
            if address.url.startswith("ssh://"):
                self._tunnel = SshTunnel(address.url, ssh_config=address.ssh_config)
                self.client = docker.DockerClient(
                    base_url=f"unix://{self._tunnel.socket}", timeout=timeout, max_pool_size=max_connections
                )
            else:
                self.client = _docker_client(address.url, timeout, _tls_config(address), max_connections)
            self.client.ping()
        except PrerequisiteError:
            self.close()
            raise
        except DOCKER_ERRORS as e:
            self.close()
            raise PrerequisiteError(
                f"no Docker engine answers at {address.url} ({type(e).__name__}: {str(e)[:200]})",
                hint="start one (`make engine` installs docker.io and starts dockerd when run as root on Debian), "
                "or point DOCKER_HOST at a reachable engine",
            ) from e

    def close(self) -> None:
        """Close the connection (and an ssh tunnel's process); idempotent."""
        client = getattr(self, "client", None)
        if client is not None:
            with contextlib.suppress(*DOCKER_ERRORS, OSError):
                client.close()
        tunnel = getattr(self, "_tunnel", None)
        if tunnel is not None:
            tunnel.close()

    # ------------------------------------------------------------------ info
    def info(self) -> EngineInfo:
        try:
            info = self.client.info()
            version = self.client.version()
        except DOCKER_ERRORS as e:
            raise InfraError(f"docker info failed: {e}") from e
        runc = next((c.get("Version", "") for c in version.get("Components", []) if c.get("Name") == "runc"), "")
        return EngineInfo(
            server_version=str(version.get("Version", "")),
            api_version=str(version.get("ApiVersion", "")),
            cgroup_version=str(info.get("CgroupVersion", "")),
            cgroup_driver=str(info.get("CgroupDriver", "")),
            runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
            security_options=tuple(info.get("SecurityOptions") or ()),
            docker_root=str(info.get("DockerRootDir", "")),
            storage_driver=str(info.get("Driver", "")),
            os=str(info.get("OperatingSystem", "")),
            runc_version=str(runc),
            rootless=any("rootless" in s for s in info.get("SecurityOptions") or ()),
            cpus=int(info.get("NCPU") or 0),
            memory_bytes=int(info.get("MemTotal") or 0),
            kernel=str(info.get("KernelVersion", "")),
            engine_id=str(info.get("ID", "")),
        )

    def endpoint(self) -> Endpoint:
        return self._endpoint

    # -------------------------------------------------------------- containers
    def _refuse_binds_if_remote(self, spec: ContainerSpec) -> None:
        if self._endpoint.remote and spec.mounts:
            m = spec.mounts[0]
            raise NeedsLocalEngine(
                f"container {spec.name} needs the controller's path {m.source} at {m.target}, and the engine "
                f"at {self._endpoint.url} is remote: it cannot bind-mount a path of this machine",
                hint="this step does not work on a remote engine yet; run it against a local engine "
                "(unset DOCKER_HOST, or point it at unix:///var/run/docker.sock)",
            )

    def _create_kwargs(self, spec: ContainerSpec) -> dict[str, Any]:
        self._refuse_binds_if_remote(spec)
        uid, gid = _uid_gid(spec.user)
        lim = spec.limits
        tmpfs = {
            target: f"rw,nosuid,nodev,size={lim.tmpfs_size},uid={uid},gid={gid},mode=0700" for target in spec.tmpfs
        }
        kwargs: dict[str, Any] = {
            "image": spec.image,
            "command": list(spec.command),
            "name": spec.name,
            "labels": dict(spec.labels),
            "user": spec.user,
            "environment": dict(spec.env),
            "mounts": [
                *(
                    Mount(target=m.target, source=str(m.source), type="bind", read_only=m.read_only)
                    for m in spec.mounts
                ),
                *(
                    Mount(target=v.target, source=v.volume, type="volume", read_only=v.read_only, no_copy=True)
                    for v in spec.volumes
                ),
            ],
            "working_dir": spec.workdir,
            "detach": True,
            "stdin_open": False,
            "tty": False,
            "init": True,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": tmpfs,
            "mem_limit": lim.memory,
            "memswap_limit": lim.memory,
            "nano_cpus": int(lim.cpus * 1e9),
            "pids_limit": lim.pids,
            "ulimits": [
                Ulimit(name="nofile", soft=lim.nofile, hard=lim.nofile),
                Ulimit(name="fsize", soft=lim.fsize_bytes, hard=lim.fsize_bytes),
                Ulimit(name="core", soft=0, hard=0),
            ],
            "shm_size": "64m",
            "log_config": LogConfig(type="json-file", config={"max-size": spec.log_max_size, "max-file": "1"}),
            "restart_policy": {"Name": "no"},
            "stop_signal": "SIGTERM",
            "hostname": "sandbox",
            "ipc_mode": "private",
            "privileged": False,
        }
        if spec.dns:
            kwargs["dns"] = list(spec.dns)
        if spec.network == "none":
            # No libnetwork sandbox at all (Config.NetworkDisabled), not merely "none" mode: the container still
            # gets a fresh network namespace of its own and runc brings its loopback up, but dockerd skips the
            # sandbox and does not re-execute itself twice per start (libnetwork-setkey as runc's prestart hook,
            # set-ipv6 in the new namespace: about 80 ms of CPU per container, issue 27 item 4)
            kwargs["network_mode"] = "none"
            kwargs["network_disabled"] = True
        else:
            kwargs["network"] = spec.network
        if spec.runtime:
            kwargs["runtime"] = spec.runtime
        return kwargs

    def create(self, spec: ContainerSpec, *, extra_networks: Sequence[str] = ()) -> str:
        """Create (not start) a hardened container; returns its id. Never retried (not idempotent)."""
        kwargs = self._create_kwargs(spec)
        kwargs["version"] = self.client.api.api_version
        container_id: str | None = None
        try:
            # the API client's calls, not docker-py's models: a model inspects the container after its create
            # and again before each call on it (an engine round trip each, issue 27 item 4)
            container_id = str(self.client.api.create_container(**_create_container_args(kwargs))["Id"])
            for net in extra_networks:
                # a created container's connect succeeds on engine 20.10 when the network does not exist (it
                # would fail at its start): look the network up first, so the create is what fails
                self.client.api.inspect_network(net)
                self.client.api.connect_container_to_network(container_id, net)
        except docker.errors.ImageNotFound as e:
            raise PrerequisiteError(f"image {spec.image} is not present", hint="run `skilltrial images build`") from e
        except DOCKER_ERRORS as e:
            if container_id is not None:  # made, then a network failed: remove what this call made, by its id
                self.remove_container(container_id)
            elif not (isinstance(e, docker.errors.APIError) and e.status_code == 409):
                # the create may have been made before its answer was lost; a 409 (the name is taken) means
                # the container of that name is another's, and is left alone
                self.remove_container(spec.name)
            raise InfraError(f"creating container {spec.name} failed: {e}") from e
        return container_id

    def start(self, name: str) -> None:
        try:
            self.client.api.start(name)
        except DOCKER_ERRORS as e:
            raise InfraError(f"starting container {name} failed: {e}") from e

    def wait(self, name: str, deadline_s: float) -> Waited:
        """Wait for exit; on overrun kill the container. Then read how it ended (OOM, its run time) from its
        state."""
        t0 = time.monotonic()
        try:
            result = self.client.api.wait(name, timeout=max(1, math.ceil(deadline_s)))
            exit_code, timed_out = int(result.get("StatusCode", -1)), False
        except DOCKER_ERRORS as e:
            if not _read_timed_out(e):
                # A dropped engine connection is the environment's failure, not the agent's overrun.
                raise InfraError(f"waiting for container {name} failed: {e}") from e
            self.kill(name)
            with contextlib.suppress(*DOCKER_ERRORS):
                self.client.api.wait(name, timeout=30)
            exit_code, timed_out = None, True
        state = self.inspect(name).get("State", {})
        ran = ran_s(state)
        return Waited(
            exit_code,
            timed_out,
            oom_killed=bool(state.get("OOMKilled")),
            ran_s=ran if ran is not None else time.monotonic() - t0,
        )

    def kill(self, name: str) -> None:
        with contextlib.suppress(*DOCKER_ERRORS):
            self.client.api.kill(name)

    def inspect(self, name: str) -> dict[str, Any]:
        try:
            return dict(call_with_retry(self.client.api.inspect_container, _transient, name))
        except DOCKER_ERRORS as e:
            raise InfraError(f"inspecting container {name} failed: {e}") from e

    def logs(self, name: str, *, stdout: bool = True, stderr: bool = False, cap: int = 4 << 20) -> Logs:
        """Container output up to ``cap`` bytes; the tail is what is kept when capped (the result is last)."""
        return _tail(b"".join(data for _, data in self._frames(name, stdout=stdout, stderr=stderr)), cap)

    def output(self, name: str, *, stdout_cap: int, stderr_cap: int) -> tuple[Logs, Logs]:
        read = list(self._frames(name, stdout=True, stderr=True))
        out = b"".join(data for stream, data in read if stream != 2)
        err = b"".join(data for stream, data in read if stream == 2)
        return _tail(out, stdout_cap), _tail(err, stderr_cap)

    def _frames(self, name: str, *, stdout: bool, stderr: bool) -> Iterator[tuple[int, bytes]]:
        """The container's log in one request. docker-py's ``logs`` inspects the container before each read to
        learn whether it has a TTY; a harness container never has one (``tty=False`` above), so its log is
        always the engine's multiplexed frames (issue 27 item 4: a trial read its logs 16 times)."""
        api = self.client.api
        params: dict[str, int | str] = {
            "stdout": int(stdout),
            "stderr": int(stderr),
            "timestamps": 0,
            "follow": 0,
            "tail": "all",
        }
        url = f"{api.base_url}/v{api.api_version}/containers/{urllib.parse.quote(name, safe='')}/logs"
        try:
            response = api.get(url, params=params, timeout=api.timeout)
            raw = bytes(response.content)
        except DOCKER_ERRORS as e:
            raise InfraError(f"reading logs of {name} failed: {e}") from e
        if response.status_code != 200:
            raise InfraError(f"reading logs of {name} failed: {response.status_code} {response.text[:300]}")
        return frames(raw)

    def follow_logs(self, name: str) -> LogStream:
        """The container's stdout as it is written (docker's ``logs --follow``: a stream without a read
        timeout, which ends when the container exits)."""
        try:
            stream = self.client.api.logs(name, stdout=True, stderr=False, stream=True, follow=True)
        except DOCKER_ERRORS as e:
            raise InfraError(f"following the logs of {name} failed: {e}") from e
        return _FollowedLogs(name, stream)

    def remove_container(self, name: str) -> None:
        """Force-remove; idempotent (a missing container is fine)."""
        try:
            call_with_retry(self.client.api.remove_container, _transient, name, force=True, v=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as e:
            if e.status_code == 409 and "already in progress" in str(e):
                return
            raise InfraError(f"removing container {name} failed: {e}") from e
        except DOCKER_ERRORS as e:
            raise InfraError(f"removing container {name} failed: {e}") from e

    def container_ip(self, name: str, network: str) -> str:
        nets = self.inspect(name).get("NetworkSettings", {}).get("Networks", {})
        ip = str((nets.get(network) or {}).get("IPAddress") or "")
        if not ip:
            raise InfraError(f"container {name} has no address on network {network}")
        return ip

    def is_running(self, name: str) -> bool:
        try:
            return bool(self.inspect(name).get("State", {}).get("Running"))
        except InfraError:
            return False

    def exec_run(self, name: str, argv: Sequence[str], *, user: str | None = None) -> tuple[int, bytes]:
        """Run a command in a running container (controller-side probes only, never agent input)."""
        try:
            res = self.client.containers.get(name).exec_run(list(argv), user=user or "", demux=False)
        except DOCKER_ERRORS as e:
            raise InfraError(f"exec in {name} failed: {e}") from e
        output = res.output if isinstance(res.output, bytes) else b""
        return int(res.exit_code if res.exit_code is not None else -1), output

    # ---------------------------------------------------------------- networks
    def create_network(
        self,
        name: str,
        labels: Mapping[str, str],
        *,
        internal: bool,
        isolated: bool = True,
        hosts: int = subnets.TRIAL_HOSTS,
    ) -> None:
        """A user-defined bridge on a subnet of the harness's own range big enough for ``hosts`` containers
        (:mod:`harness.sandbox.subnets`: the engine's default pools hold only about 30 networks).
        ``isolated`` gives the bridge no IPv4 address, so containers on an internal network cannot reach
        services bound to the host's 0.0.0.0 through the gateway (a plain --internal network does not stop
        that on engine 20.10).

        Another process can take the chosen subnet between the look and the create; the engine then refuses
        it as overlapping and the next free one is tried. Raises ``PrerequisiteError`` when nothing of the
        range is free and none of it is the harness's (something else covers it: choose another range),
        ``InfraError`` otherwise."""
        options = {"com.docker.network.bridge.inhibit_ipv4": "true"} if isolated else {}
        if self._subnet_pool.range is None:
            self._create_network(name, labels, internal=internal, options=options, subnet=None)
            return
        tried: set[IPv4Network] = set()
        for _ in range(SUBNET_ATTEMPTS):
            subnet = self._reserve_subnet(name, tried, subnets.prefix_for(self._subnet_pool, hosts))
            try:
                self._create_network(name, labels, internal=internal, options=options, subnet=subnet)
                return
            except _SubnetTaken:
                tried.add(subnet)
            finally:
                with self._subnet_lock:
                    self._subnets_pending.discard(subnet)
        raise InfraError(
            f"creating network {name} failed: {SUBNET_ATTEMPTS} free-looking subnets were taken by others "
            "before it could use them",
            hint="many networks are being made at once: try again",
        )

    def subnet_conflicts(self) -> tuple[subnets.SubnetPool, list[str]]:
        """The range harness networks take their subnets from, and what else uses addresses of it (a host
        route of a local engine, a network of the engine that is not the harness's): ``skilltrial doctor``."""
        try:
            listed = self.client.api.networks()
        except DOCKER_ERRORS as e:
            raise InfraError(f"listing networks failed: {e}") from e
        foreign = subnets.engine_subnets(n for n in listed if (n.get("Labels") or {}).get(L.OWNER) != L.OWNER_VALUE)
        routes = [] if self._endpoint.remote else subnets.host_routes()
        return self._subnet_pool, subnets.conflicts(self._subnet_pool, routes, foreign)

    def _reserve_subnet(self, name: str, tried: set[IPv4Network], prefix: int) -> IPv4Network:
        """A subnet of the pool overlapping no network of the engine, no host route (local engine), nothing
        another thread of this process is creating right now and nothing already ``tried``."""
        pool = self._subnet_pool
        try:
            listed = self.client.api.networks()
        except DOCKER_ERRORS as e:
            raise InfraError(f"listing networks to choose a subnet for {name} failed: {e}") from e
        networks = subnets.engine_subnets(listed)
        routes = [] if self._endpoint.remote else subnets.host_routes()
        with self._subnet_lock:
            taken = [net for _, net in networks] + routes + [*self._subnets_pending, *tried]
            subnet = subnets.choose(pool, name, taken, prefix)
            if subnet is not None:
                self._subnets_pending.add(subnet)
                return subnet
        ours = {str(n.get("Name")) for n in listed if (n.get("Labels") or {}).get(L.OWNER) == L.OWNER_VALUE}
        foreign = subnets.conflicts(pool, routes, [(n, net) for n, net in networks if n not in ours])
        mine = sum(1 for n, net in networks if n in ours and pool.range is not None and net.overlaps(pool.range))
        message = f"creating network {name} failed: " + subnets.exhausted_message(pool, mine, foreign, prefix)
        if mine == 0:
            raise PrerequisiteError(
                message,
                hint=f"set {subnets.ENV} to a private range nothing here uses (e.g. 10.214.0.0/16), "
                f"or {subnets.ENV}={subnets.ENGINE_POOLS} to use the engine's pools",
            )
        raise InfraError(message, hint="too many networks exist: run `skilltrial gc`, or lower --jobs")

    def _create_network(
        self,
        name: str,
        labels: Mapping[str, str],
        *,
        internal: bool,
        options: Mapping[str, str],
        subnet: IPv4Network | None,
    ) -> None:
        ipam = None
        if subnet is not None:
            pool = IPAMPool(subnet=str(subnet), gateway=subnets.gateway_address(subnet))
            ipam = IPAMConfig(pool_configs=[pool])
        try:
            self.client.networks.create(
                name,
                driver="bridge",
                internal=internal,
                labels=dict(labels),
                options=dict(options),
                ipam=ipam,
                check_duplicate=True,
                enable_ipv6=False,
            )
        except DOCKER_ERRORS as e:
            if subnet is not None and "overlap" in str(e):
                raise _SubnetTaken from e
            hint = None
            if "address pools" in str(e) or "overlap" in str(e):
                hint = "too many networks exist: run `skilltrial gc`, or lower --jobs"
            raise InfraError(f"creating network {name} failed: {e}", hint=hint) from e

    def remove_network(self, name: str) -> None:
        """Remove the network named ``name`` and make sure it is gone. NotFound by name is not taken
        as done: a name the API cannot address (one ending in a newline answers 404 "page not found")
        would stay forever while gc reported success. What is left is removed by id, then checked."""
        try:
            call_with_retry(self.client.api.remove_network, _transient, name)
        except docker.errors.NotFound:
            pass
        except DOCKER_ERRORS as e:
            raise InfraError(f"removing network {name!r} failed: {e}") from e
        self._remove_networks_by_id(name)

    def _remove_networks_by_id(self, name: str) -> None:
        try:
            left = [str(n["Id"]) for n in self.client.api.networks() if n.get("Name") == name]
        except DOCKER_ERRORS as e:
            raise InfraError(f"listing networks to check that {name!r} is gone failed: {e}") from e
        for net_id in left:
            try:
                self.client.api.remove_network(net_id)
            except docker.errors.NotFound:
                pass
            except DOCKER_ERRORS as e:
                raise InfraError(f"removing network {name!r} ({net_id[:12]}) failed: {e}") from e
            try:
                self.client.api.inspect_network(net_id)
            except docker.errors.NotFound:
                continue
            except DOCKER_ERRORS as e:
                raise InfraError(f"checking that network {name!r} ({net_id[:12]}) is gone failed: {e}") from e
            raise InfraError(f"network {name!r} ({net_id[:12]}) is still there after its removal")

    # ----------------------------------------------------------------- volumes
    def create_volume(self, name: str, labels: Mapping[str, str]) -> None:
        try:
            self.client.api.create_volume(name, driver="local", labels=dict(labels))
        except DOCKER_ERRORS as e:
            raise InfraError(f"creating volume {name} failed: {e}") from e

    def create_overlay_volume(
        self, name: str, labels: Mapping[str, str], *, lower: VolumeDir, upper: VolumeDir, work: VolumeDir
    ) -> None:
        """The local driver's ``type=overlay`` volume over other volumes' directories: their
        ``Mountpoint``s are paths on the engine's host, so this works for a remote engine too."""

        def path(d: VolumeDir) -> str:
            root = self.volume_mountpoint(d.volume)
            text = f"{root}/{d.subdir}".rstrip("/") if d.subdir else root
            if any(c in text for c in ",:\n"):  # the mount options' separators: never in a path we pass
                raise InfraError(f"volume path {text!r} cannot be an overlay option")
            return text

        # nosuid,nodev: nothing written through it becomes setuid or a device on the engine's host (the
        # local driver parses mount flags out of "o", as mount(8) does)
        opts = f"lowerdir={path(lower)},upperdir={path(upper)},workdir={path(work)},nosuid,nodev"
        try:
            self.client.api.create_volume(
                name,
                driver="local",
                driver_opts={"type": "overlay", "device": "overlay", "o": opts},
                labels=dict(labels),
            )
        except DOCKER_ERRORS as e:
            raise InfraError(f"creating overlay volume {name} failed: {e}") from e

    def volume_mountpoint(self, name: str) -> str:
        try:
            return str(call_with_retry(self.client.api.inspect_volume, _transient, name)["Mountpoint"])
        except DOCKER_ERRORS as e:
            raise InfraError(f"inspecting volume {name} failed: {e}") from e

    def remove_volume(self, name: str) -> None:
        """Remove; idempotent. A volume a container still uses is an InfraError."""
        try:
            call_with_retry(self.client.api.remove_volume, _transient, name)
        except docker.errors.NotFound:
            return
        except DOCKER_ERRORS as e:
            raise InfraError(f"removing volume {name} failed: {e}") from e

    def put_archive(self, name: str, path: str, data: bytes | Iterable[bytes]) -> None:
        try:
            ok = self.client.api.put_archive(name, path, data)
        except DOCKER_ERRORS as e:
            raise InfraError(f"copying into {name}:{path} failed: {e}") from e
        if not ok:
            raise InfraError(f"copying into {name}:{path} failed")

    def get_archive(self, name: str, path: str, *, cap: int) -> Archive | None:
        chunks: list[bytes] = []
        size = 0
        try:
            stream, _stat = self.client.api.get_archive(name, path, chunk_size=1 << 20)
            with contextlib.closing(stream):
                for chunk in stream:
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > cap:
                        break
        except docker.errors.NotFound:
            return None
        except DOCKER_ERRORS as e:
            raise InfraError(f"copying {name}:{path} out failed: {e}") from e
        data = b"".join(chunks)
        return Archive(data[:cap], True) if size > cap else Archive(data, False)

    # ------------------------------------------------------------ labelled objects
    def labelled(self, selector: Mapping[str, str] | None = None) -> list[DockerObject]:
        """Every container, network and volume carrying the harness owner label (and the selector's labels)."""
        filters = [f"{L.OWNER}={L.OWNER_VALUE}"] + [f"{k}={v}" for k, v in (selector or {}).items()]
        out: list[DockerObject] = []
        try:
            for c in self.client.api.containers(all=True, filters={"label": filters}):
                name = (c.get("Names") or ["/" + c["Id"]])[0].lstrip("/")
                out.append(DockerObject("container", name, dict(c.get("Labels") or {})))
            for n in self.client.api.networks(filters={"label": filters}):
                out.append(DockerObject("network", str(n["Name"]), dict(n.get("Labels") or {})))
            volumes = self.client.api.volumes(filters={"label": filters}).get("Volumes") or []
            for v in sorted(volumes, key=lambda v: str(v["Name"])):
                out.append(DockerObject("volume", str(v["Name"]), dict(v.get("Labels") or {})))
        except DOCKER_ERRORS as e:
            raise InfraError(f"listing harness objects failed: {e}") from e
        return out

    def remove(self, obj: DockerObject) -> None:
        if obj.kind == "container":
            self.remove_container(obj.name)
        elif obj.kind == "volume":
            self.remove_volume(obj.name)
        else:
            self.remove_network(obj.name)

    # ------------------------------------------------------------------ images
    def image_id(self, ref: str) -> str | None:
        try:
            return str(self.client.api.inspect_image(ref)["Id"])  # type: ignore[no-untyped-call]
        except docker.errors.ImageNotFound:
            return None
        except DOCKER_ERRORS as e:
            raise InfraError(f"inspecting image {ref} failed: {e}") from e

    def image_size(self, ref: str) -> int:
        try:
            return int(self.client.api.inspect_image(ref).get("Size", 0))  # type: ignore[no-untyped-call]
        except DOCKER_ERRORS as e:
            raise InfraError(f"inspecting image {ref} failed: {e}") from e

    def image_tags(self, repositories: Sequence[str]) -> list[str]:
        """Every local tag whose repository is one of ``repositories``."""
        try:
            images = self.client.api.images()
        except DOCKER_ERRORS as e:
            raise InfraError(f"listing images failed: {e}") from e
        return sorted(
            tag for image in images for tag in image.get("RepoTags") or () if tag.rsplit(":", 1)[0] in repositories
        )

    def dangling_images(self, label: str) -> list[DanglingImage]:
        """(id, size) of every untagged image carrying ``label`` (a build's intermediate stages)."""
        try:
            images = self.client.api.images(filters={"dangling": True, "label": label})
        except DOCKER_ERRORS as e:
            raise InfraError(f"listing images failed: {e}") from e
        return [DanglingImage(str(image["Id"]), int(image.get("Size") or 0)) for image in images]

    def remove_image(self, ref: str) -> bool:
        """Untag (and delete, when nothing else uses it) an image, by tag or id. False when it is in use."""
        try:
            self.client.api.remove_image(ref)
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError as e:
            if e.status_code == 409:
                return False
            raise InfraError(f"removing image {ref} failed: {e}") from e
        except DOCKER_ERRORS as e:
            raise InfraError(f"removing image {ref} failed: {e}") from e
        return True

    def try_pull(self, ref: str) -> bool:
        try:
            self.client.api.pull(ref)
        except DOCKER_ERRORS:
            return False
        return self.image_id(ref) is not None

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
        """Classic builder (engine 20.10 has no buildx by default). Returns the image id."""
        tail: list[str] = []
        try:
            stream = self.client.api.build(
                path=str(context),
                dockerfile=dockerfile,
                tag=tag,
                buildargs=dict(buildargs),
                labels=dict(labels),
                rm=True,
                forcerm=True,
                decode=True,
                network_mode="bridge",
            )
            for chunk in stream:
                if "error" in chunk:
                    raise InfraError(
                        f"building {tag} failed: {str(chunk['error']).strip()}",
                        hint="the last build lines were:\n" + "".join(tail[-15:]),
                    )
                line = str(chunk.get("stream", ""))
                if line:
                    tail.append(line)
                    if on_line is not None:
                        on_line(line.rstrip("\n"))
        except DOCKER_ERRORS as e:
            raise InfraError(f"building {tag} failed: {e}") from e
        image = self.image_id(tag)
        if image is None:
            raise InfraError(f"building {tag} produced no image", hint="".join(tail[-15:]))
        return image

    def import_rootfs(self, tarball: Path, *, tag: str, changes: Sequence[str] = ()) -> str:
        repo, _, version = tag.rpartition(":")
        try:
            self.client.api.import_image_from_file(str(tarball), repository=repo, tag=version, changes=list(changes))
        except DOCKER_ERRORS as e:
            raise InfraError(f"importing {tarball} as {tag} failed: {e}") from e
        image = self.image_id(tag)
        if image is None:
            raise InfraError(f"importing {tag} produced no image")
        return image

    def tag(self, image: str, tag: str) -> None:
        repo, _, version = tag.rpartition(":")
        try:
            self.client.api.tag(image, repo, version)
        except DOCKER_ERRORS as e:
            raise InfraError(f"tagging {image} as {tag} failed: {e}") from e

    def save_images(self, refs: Sequence[str], *, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """``docker save`` of ``refs`` as one tar stream (layers two images share are in it once)."""
        api = self.client.api
        try:
            response = api.get(
                f"{api.base_url}/v{api.api_version}/images/get",
                params={"names": list(refs)},
                stream=True,
                timeout=IMAGE_STREAM_TIMEOUT_S,
            )
            if response.status_code != 200:
                raise InfraError(
                    f"saving images {', '.join(refs)} failed: {response.status_code} {response.text[:300]}"
                )
        except DOCKER_ERRORS as e:
            raise InfraError(f"saving images {', '.join(refs)} failed: {e}") from e
        return self._image_chunks(response, refs, chunk_size)

    @staticmethod
    def _image_chunks(response: Any, refs: Sequence[str], chunk_size: int) -> Iterator[bytes]:
        try:
            with contextlib.closing(response):
                yield from response.iter_content(chunk_size)
        except (*DOCKER_ERRORS, urllib3.exceptions.HTTPError, OSError) as e:
            raise InfraError(f"saving images {', '.join(refs)} failed mid-stream: {e}") from e

    def load_images(self, data: Iterable[bytes]) -> list[str]:
        """``docker load`` of a tar stream; returns what the engine says it loaded (tags, else ids)."""
        api = self.client.api
        try:
            response = api.post(
                f"{api.base_url}/v{api.api_version}/images/load",
                data=iter(data),
                params={"quiet": "1"},
                headers={"Content-Type": "application/x-tar"},
                timeout=IMAGE_STREAM_TIMEOUT_S,
            )
            body = response.text
        except InfraError:
            raise
        except DOCKER_ERRORS as e:
            raise InfraError(f"loading images failed: {e}") from e
        if response.status_code != 200:
            raise InfraError(f"loading images failed: {response.status_code} {body[:300]}")
        loaded: list[str] = []
        for line in body.splitlines():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if message.get("error"):
                raise InfraError(f"loading images failed: {message['error']}")
            stream = str(message.get("stream", "")).strip()
            for prefix in ("Loaded image: ", "Loaded image ID: "):
                if stream.startswith(prefix):
                    loaded.append(stream.removeprefix(prefix))
        return loaded

    def free_disk_bytes(self) -> int | None:
        """Free space under the engine's data root (None for a remote engine: its data root is a path on
        another machine, and the controller's directory of that name says nothing about it)."""
        import shutil

        if self._endpoint.remote:
            return None
        root = self.info().docker_root
        try:
            return shutil.disk_usage(root).free
        except OSError:
            return None


class _FollowedLogs:
    """:class:`~harness.sandbox.runtime.LogStream` over docker-py's cancellable log stream."""

    def __init__(self, name: str, stream: Any) -> None:
        self._name = name
        self._stream = stream
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._stream:
                if self._closed.is_set():
                    return
                yield chunk.encode() if isinstance(chunk, str) else bytes(chunk)
        except (*DOCKER_ERRORS, urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            if self._closed.is_set():  # closing the socket under the reader ends it this way
                return
            raise InfraError(f"following the logs of {self._name} failed: {e}") from e

    def close(self) -> None:
        self._closed.set()
        try:
            self._stream.close()
        except (*DOCKER_ERRORS, OSError, AttributeError):
            pass  # an ssh:// engine's stream cannot be cancelled: it ends when the container goes
