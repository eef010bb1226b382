"""A second Docker engine that shares no filesystem with the controller: docker-in-docker, for the tests.

``pytest --engine remote`` (``make test-remote``) runs the chosen suites against it instead of the
machine's engine. It is made once per session, from scratch, and removed after:

    image      harness-test-dind:<hash>  (tests/remote/Dockerfile on the harness runtime image + Debian's
                                          docker.io; built by the machine's engine, so through its apt)
    network    harness-test-dind-<id>           (a plain bridge the test creates; the only way to the engine)
    volume     harness-test-dind-<id>-data       (the inner engine's /var/lib/docker: overlay2 cannot stack on
                                          the outer engine's overlay root)
    container  harness-test-dind-<id>           (every capability but CAP_SYS_RESOURCE, which this machine's
                                          engine does not hold, so ``--privileged`` cannot start; no
                                          seccomp or AppArmor filter, /proc unmasked; dockerd on
                                          tcp://<ip>:2375)

The controller reaches it as ``DOCKER_HOST=tcp://<container ip>:2375`` on that network only. The harness
images are copied in over the images API (``docker save`` from the machine's engine piped into ``docker
load`` on the inner one; ids stay the same, so ``ImageBuilder.ensure`` finds them and builds nothing).
Nothing the harness makes on the inner engine can touch the controller's paths: it has none of them.

Every object here carries the label ``harness.test=dind`` (not the harness owner label, so the leak
check and ``skilltrial gc`` never see it) and is removed by name at the end of the session.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types

HERE = Path(__file__).resolve().parent
LABELS = {"harness.test": "dind"}
PORT = 2375


@dataclass(frozen=True)
class RemoteEngine:
    docker_host: str
    """``tcp://<ip>:2375``: what DOCKER_HOST is set to for the tests that run against it."""
    container: str
    network: str
    seconds: dict[str, float]
    """Set-up cost by step: build (about 0 when the image exists), start, load."""


def _tag(client: docker.DockerClient, runtime_image: str) -> str:
    runtime_id = str(client.images.get(runtime_image).id)
    digest = hashlib.sha256(runtime_id.encode())
    for name in ("Dockerfile", "entrypoint.sh"):
        digest.update((HERE / name).read_bytes())
    return f"harness-test-dind:{digest.hexdigest()[:16]}"


def _build(client: docker.DockerClient, tag: str, runtime_image: str) -> None:
    with tempfile.TemporaryDirectory(prefix="hx-dind-build-") as tmp:
        for name in ("Dockerfile", "entrypoint.sh"):
            shutil.copy2(HERE / name, Path(tmp) / name)
        client.images.build(
            path=tmp, tag=tag, buildargs={"RUNTIME_IMAGE": runtime_image}, labels=LABELS, rm=True, forcerm=True
        )


def _wait_for_engine(url: str, container: Any, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        container.reload()
        if container.status != "running":
            raise RuntimeError(f"the inner engine exited: {container.logs(tail=30).decode(errors='replace')}")
        try:
            docker.DockerClient(base_url=url, timeout=5).ping()
            return
        except Exception as e:  # not up yet
            last = e
            time.sleep(0.5)
    raise RuntimeError(f"the inner engine did not answer at {url} within {timeout_s} s: {last}")


def _load(url: str, tags: Sequence[str]) -> None:
    """One ``docker save`` of every tag (shared layers once) into ``docker load`` on the inner engine."""
    save = subprocess.Popen(["docker", "save", *tags], stdout=subprocess.PIPE)
    try:
        load = subprocess.run(
            ["docker", "-H", url, "load", "-q"], stdin=save.stdout, capture_output=True, text=True, timeout=900
        )
    finally:
        assert save.stdout is not None
        save.stdout.close()
        save.wait(timeout=60)
    if save.returncode != 0 or load.returncode != 0:
        raise RuntimeError(f"loading the images into the inner engine failed: {load.stderr[-800:]}")


@contextlib.contextmanager
def remote_engine(runtime_image: str, images: Sequence[str]) -> Iterator[RemoteEngine]:
    """Start the inner engine, load ``images`` into it, yield it; remove everything on every path."""
    client = docker.from_env(timeout=900)
    ident = secrets.token_hex(4)
    name, network, data = f"harness-test-dind-{ident}", f"harness-test-dind-{ident}", f"harness-test-dind-{ident}-data"
    seconds: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        tag = _tag(client, runtime_image)
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            _build(client, tag, runtime_image)
        seconds["build"] = time.monotonic() - t0
        t0 = time.monotonic()
        client.networks.create(network, driver="bridge", labels=LABELS)
        client.volumes.create(data, labels=LABELS)
        host_config = client.api.create_host_config(
            network_mode=network,
            cap_add=["ALL"],
            cap_drop=["SYS_RESOURCE"],
            security_opt=["seccomp=unconfined", "apparmor=unconfined"],
            mounts=[docker.types.Mount("/var/lib/docker", data, type="volume")],
        )
        host_config.update(MaskedPaths=[], ReadonlyPaths=[])  # the CLI's --security-opt systempaths=unconfined
        client.api.create_container(tag, name=name, labels=LABELS, host_config=host_config, detach=True)
        client.api.start(name)
        container = client.containers.get(name)
        ip = container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
        url = f"tcp://{ip}:{PORT}"
        _wait_for_engine(url, container)
        seconds["start"] = time.monotonic() - t0
        t0 = time.monotonic()
        for attempt in range(3):  # seen under load: the upload dropped, or the engine briefly unreachable
            try:
                _load(url, images)
                break
            except RuntimeError as e:
                container.reload()
                if attempt == 2 or container.status != "running":
                    tail = container.logs(tail=30).decode(errors="replace")
                    raise RuntimeError(f"{e}\ninner engine {container.status}; its last lines:\n{tail}") from e
                time.sleep(3)
                _wait_for_engine(url, container)
        seconds["load"] = time.monotonic() - t0
        yield RemoteEngine(url, name, network, seconds)
    finally:
        _remove(client, name, data, network)


def _remove(client: docker.DockerClient, name: str, data: str, network: str) -> None:
    """The container (waiting out a removal already in progress), then its volume and network."""
    with contextlib.suppress(docker.errors.APIError):
        client.api.remove_container(name, force=True, v=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            client.api.inspect_container(name)
        except docker.errors.NotFound:
            break
        time.sleep(0.5)
    for remove, target in ((client.api.remove_volume, data), (client.api.remove_network, network)):
        with contextlib.suppress(docker.errors.NotFound):
            remove(target)
