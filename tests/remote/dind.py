"""Docker engines that share no filesystem with the controller: docker-in-docker, for the tests.

``pytest --engine remote`` (``make test-remote``) runs the chosen suites against one of them (plain TCP)
instead of the machine's engine; :func:`dind_engines` makes several at once, each reached its own way
(the ``dind_pool`` fixture: three, for a pool of engines). They are made from scratch per session and
removed after:

    image      harness-test-dind:<hash>  (tests/remote/Dockerfile on the harness runtime image + Debian's
                                          docker.io and openssh-server; built by the machine's engine, so
                                          through its apt)
    network    harness-test-dind-<id>           (a plain bridge the test creates; the only way to the engines)
    volume     harness-test-dind-<id>-<mode>-data  (an inner engine's /var/lib/docker: overlay2 cannot stack
                                          on the outer engine's overlay root)
    container  harness-test-dind-<id>-<mode>    (every capability but CAP_SYS_RESOURCE, which this machine's
                                          engine does not hold, so ``--privileged`` cannot start; no
                                          seccomp or AppArmor filter, /proc unmasked)

Three ways in (``DIND_MODE``, tests/remote/entrypoint.sh):

    tcp   tcp://<ip>:2375, no TLS (an engine whose only address is on a network the test made)
    tls   tcp://<ip>:2376 with --tlsverify: a CA, a server certificate for <ip> and a client certificate,
          made here with openssl per session; the controller gets Docker's cert directory layout
    ssh   ssh://engine@<ip>: sshd in the container, an ed25519 host key and a client key made here with
          ssh-keygen per session, an ssh config naming both (``ssh -F``, so nothing of the user's ~/.ssh
          is read or written); the engine listens on its unix socket only, which the ssh tunnel forwards

The harness images are copied in over the images API by the product's own
:func:`harness.sandbox.images.sync_images` (``docker save`` from the machine's engine streamed into
``docker load`` on the inner one; ids stay the same, so ``ImageBuilder.ensure`` finds them and builds
nothing). Nothing the harness makes on an inner engine can touch the controller's paths: it has none.

Every object here carries the label ``harness.test=dind`` (not the harness owner label, so the leak check
and ``skilltrial gc`` never see it) and is removed by name at the end of the session.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors
import docker.types

from harness.errors import HarnessError
from harness.sandbox import images as image_sync
from harness.sandbox.engine import Engine, EngineAddress

HERE = Path(__file__).resolve().parent
LABELS = {"harness.test": "dind"}
BUILD_FILES = ("Dockerfile", "entrypoint.sh", "sshd_config")
Mode = Literal["tcp", "tls", "ssh"]
MODES: tuple[Mode, ...] = ("tcp", "tls", "ssh")
READY = "/harness-dind"


@dataclass(frozen=True)
class DindEngine:
    mode: Mode
    address: EngineAddress
    """How the controller reaches it (``Engine(address=...)``)."""
    container: str
    network: str
    ip: str
    seconds: dict[str, float] = field(default_factory=dict)
    """Set-up cost by step: build (the image, shared; about 0 when it exists), start, load."""

    @property
    def docker_host(self) -> str:
        """What DOCKER_HOST is set to for the tests that run against it (plain TCP and ssh; TLS also needs
        DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH)."""
        return self.address.url


RemoteEngine = DindEngine
"""The ``--engine remote`` engine: the plain-TCP one."""


def _tag(client: docker.DockerClient, runtime_image: str) -> str:
    runtime_id = str(client.images.get(runtime_image).id)
    digest = hashlib.sha256(runtime_id.encode())
    for name in BUILD_FILES:
        digest.update((HERE / name).read_bytes())
    return f"harness-test-dind:{digest.hexdigest()[:16]}"


def _build(client: docker.DockerClient, tag: str, runtime_image: str) -> None:
    with tempfile.TemporaryDirectory(prefix="hx-dind-build-") as tmp:
        for name in BUILD_FILES:
            shutil.copy2(HERE / name, Path(tmp) / name)
        client.images.build(
            path=tmp, tag=tag, buildargs={"RUNTIME_IMAGE": runtime_image}, labels=LABELS, rm=True, forcerm=True
        )


def _run(argv: Sequence[str]) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {proc.stderr[-500:]}")


class _Secrets:
    """The session's test CA, certificates and ssh keys, in a private directory removed at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._ca: tuple[Path, Path] | None = None
        self._ssh: tuple[Path, Path] | None = None

    def ca(self) -> tuple[Path, Path]:
        """(key, certificate) of the session's CA."""
        if self._ca is None:
            key, cert = self.root / "ca-key.pem", self.root / "ca.pem"
            _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                  str(cert), "-days", "2", "-subj", "/CN=skilltrial test engine CA"])  # fmt: skip
            self._ca = key, cert
        return self._ca

    def signed(self, stem: str, cn: str, ext: str) -> tuple[Path, Path]:
        ca_key, ca_cert = self.ca()
        key, csr, cert = (self.root / f"{stem}-key.pem", self.root / f"{stem}.csr", self.root / f"{stem}.pem")
        extfile = self.root / f"{stem}.ext"
        extfile.write_text(ext + "\n")
        _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
              "-subj", f"/CN={cn}"])  # fmt: skip
        _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
              "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(extfile)])  # fmt: skip
        return key, cert

    def tls_files(self, ip: str) -> tuple[dict[str, bytes], Path]:
        """The engine's files (CA, server certificate for ``ip``) and the client's cert directory."""
        _, ca_cert = self.ca()
        server_key, server_cert = self.signed(
            f"server-{ip}", ip, f"subjectAltName=IP:{ip}\nextendedKeyUsage=serverAuth"
        )
        client_key, client_cert = self.signed("client", "skilltrial", "extendedKeyUsage=clientAuth")
        client = self.root / "client-certs"
        client.mkdir(mode=0o700, exist_ok=True)
        for src, name in ((ca_cert, "ca.pem"), (client_cert, "cert.pem"), (client_key, "key.pem")):
            shutil.copy2(src, client / name)
        files = {"ca.pem": ca_cert.read_bytes(), "server-cert.pem": server_cert.read_bytes(),
                 "server-key.pem": server_key.read_bytes()}  # fmt: skip
        return files, client

    def ssh_files(self, ip: str) -> tuple[dict[str, bytes], Path]:
        """The engine's host key and authorized key, and an ssh config that trusts that host key only."""
        if self._ssh is None:
            host_key, client_key = self.root / "ssh_host_ed25519_key", self.root / "id_ed25519"
            for key in (host_key, client_key):
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "skilltrial-test", "-f", str(key)])
            self._ssh = host_key, client_key
        host_key, client_key = self._ssh
        known = self.root / "known_hosts"
        kind, public = host_key.with_suffix(".pub").read_text().split()[:2]
        with known.open("a") as f:
            f.write(f"{ip} {kind} {public}\n")
        config = self.root / "ssh_config"
        config.write_text(
            f"Host *\n  IdentityFile {client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
            "  StrictHostKeyChecking yes\n  GlobalKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        )
        config.chmod(0o600)
        files = {"ssh_host_ed25519_key": host_key.read_bytes(),
                 "authorized_keys": client_key.with_suffix(".pub").read_bytes()}  # fmt: skip
        return files, config


def _tar(files: dict[str, bytes]) -> bytes:
    """``files`` under /harness-dind, then ``ready`` last: the entrypoint starts once it exists."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        directory = tarfile.TarInfo(READY.lstrip("/"))
        directory.type, directory.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(directory)
        for name, data in [*files.items(), ("ready", b"")]:
            info = tarfile.TarInfo(f"{READY.lstrip('/')}/{name}")
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _wait_for_engine(address: EngineAddress, container: Any, timeout_s: float = 90) -> Engine:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        container.reload()
        if container.status != "running":
            raise RuntimeError(f"the inner engine exited: {container.logs(tail=30).decode(errors='replace')}")
        try:
            return Engine(address=address, timeout=900)
        except HarnessError as e:  # not up yet
            last = e
            time.sleep(0.5)
    raise RuntimeError(f"the inner engine did not answer at {address.url} within {timeout_s} s: {last}")


def _load(outer: Engine, inner: Engine, images: Sequence[str], container: Any, address: EngineAddress) -> Engine:
    """The images into ``inner`` through the product's own copy; retried (seen under load: the upload dropped,
    or the engine briefly unreachable). Returns the engine connection to go on with."""
    for attempt in range(3):
        try:
            image_sync.sync_images(outer, inner, images, name=address.url, reference_name="the machine's engine")
            return inner
        except HarnessError as e:
            container.reload()
            if attempt == 2 or container.status != "running":
                tail = container.logs(tail=30).decode(errors="replace")
                raise RuntimeError(f"{e}\ninner engine {container.status}; its last lines:\n{tail}") from e
            time.sleep(3)
            inner.close()
            inner = _wait_for_engine(address, container)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def dind_engines(
    runtime_image: str, images: Sequence[str], modes: Sequence[Mode] = MODES
) -> Iterator[list[DindEngine]]:
    """Start one inner engine per mode, load ``images`` into each, yield them; remove everything on every
    path. The engines start together and take their images side by side."""
    client = docker.from_env(timeout=900)
    ident = secrets.token_hex(4)
    network = f"harness-test-dind-{ident}"
    made: list[tuple[str, str]] = []  # (container, data volume)
    root = Path(tempfile.mkdtemp(prefix="hx-dind-secrets-"))
    keys = _Secrets(root)
    outer = Engine()
    try:
        t0 = time.monotonic()
        tag = _tag(client, runtime_image)
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            _build(client, tag, runtime_image)
        build_s = time.monotonic() - t0
        client.networks.create(network, driver="bridge", labels=LABELS)
        started: list[tuple[Mode, Any, EngineAddress, str, float]] = []
        for mode in modes:  # all started (and given their keys) before any is waited for
            t0 = time.monotonic()
            name, data = f"{network}-{mode}", f"{network}-{mode}-data"
            client.volumes.create(data, labels=LABELS)
            made.append((name, data))
            host_config = client.api.create_host_config(
                network_mode=network,
                cap_add=["ALL"],
                cap_drop=["SYS_RESOURCE"],
                security_opt=["seccomp=unconfined", "apparmor=unconfined"],
                mounts=[docker.types.Mount("/var/lib/docker", data, type="volume")],
            )
            host_config.update(MaskedPaths=[], ReadonlyPaths=[])  # the CLI's --security-opt systempaths=unconfined
            client.api.create_container(
                tag, name=name, labels=LABELS, host_config=host_config, detach=True, environment={"DIND_MODE": mode}
            )
            client.api.start(name)
            container = client.containers.get(name)
            ip = container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
            if mode == "tcp":
                address = EngineAddress(f"tcp://{ip}:2375", name=f"dind-{mode}")
            elif mode == "tls":
                files, cert_dir = keys.tls_files(ip)
                container.put_archive("/", _tar(files))
                address = EngineAddress(f"tcp://{ip}:2376", name=f"dind-{mode}", cert_path=cert_dir)
            else:
                files, config = keys.ssh_files(ip)
                container.put_archive("/", _tar(files))
                address = EngineAddress(f"ssh://engine@{ip}", name=f"dind-{mode}", ssh_config=config)
            started.append((mode, container, address, ip, time.monotonic() - t0))

        def ready(mode: Mode, container: Any, address: EngineAddress, ip: str, start_s: float) -> DindEngine:
            t0 = time.monotonic()
            inner = _wait_for_engine(address, container)
            try:
                start_s += time.monotonic() - t0
                t0 = time.monotonic()
                inner = _load(outer, inner, images, container, address)
                seconds = {"build": build_s, "start": start_s, "load": time.monotonic() - t0}
                return DindEngine(mode, address, container.name, network, ip, seconds)
            finally:
                inner.close()

        # the engines come up and take their images side by side: the loads are streams the two engines
        # pass along, so they overlap well even on two cores
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(started)) as pool:
            engines = list(pool.map(lambda args: ready(*args), started))
        yield engines
    finally:
        outer.close()
        _remove(client, made, network)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def remote_engine(runtime_image: str, images: Sequence[str]) -> Iterator[DindEngine]:
    """The plain-TCP inner engine alone (``--engine remote``), with ``images`` loaded."""
    with dind_engines(runtime_image, images, ("tcp",)) as (engine,):
        yield engine


def _remove(client: docker.DockerClient, made: Sequence[tuple[str, str]], network: str) -> None:
    """Each container (waiting out a removal already in progress) and its data volume, side by side, then
    the network."""

    def remove(name: str, data: str) -> None:
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_container(name, force=True, v=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                client.api.inspect_container(name)
            except docker.errors.NotFound:
                break
            time.sleep(0.5)
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_volume(data)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(made))) as pool:
        list(pool.map(lambda pair: remove(*pair), made))
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_network(network)
