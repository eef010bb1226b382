"""From nothing to a decision (issue 23 item 6): a fresh machine installs skilltrial from a wheelhouse and
decides, measured.

The machine is a container of the debootstrap base image with only Debian's python3, pipx and git
(tests/install/Dockerfile), running as an ordinary user. ``make wheelhouse`` (part of ``make test``) built
the wheel, the sdist and every dependency's wheel into ``wheelhouse/`` at set-up time; the container
installs from it with ``--no-index``, so this test reaches no package index. The engine is reached the way
``make test-remote`` reaches one: docker-in-docker over TCP on a network the test owns
(:mod:`tests.remote.dind`, with the machine's images loaded, so tags and ids are the same). Not the host's
socket mounted in: that hands the fresh machine root over this one, and an engine on a unix socket counts
as local, whose bind mounts would name paths only the container has. The container then runs, as a user
would: ``pipx install``, ``skilltrial --version`` (the tags must be the ones the engine holds),
``skilltrial demo --quick``, and a new repository through ``init``, ``lock``, a scripted ``eval`` and
``gate``. The seconds of each step are printed; the README quotes them.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import docker.types
import pytest
from docker.models.containers import Container

from harness.sandbox.engine import Engine
from harness.sandbox.images import DEFAULT_EXTRA_CA, ImageBuilder, ImageSet
from tests.remote.dind import RemoteEngine

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.local_engine("builds the fresh machine on the machine's engine and starts its own remote engine"),
]

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "install"
WHEELHOUSE = ROOT / "wheelhouse"
LABELS = {"harness.test": "install"}


def _wheel() -> Path:
    wheels = sorted(WHEELHOUSE.glob("skilltrial-*.whl"))
    if not wheels:
        pytest.fail("no wheelhouse/skilltrial-*.whl: run `make wheelhouse` (make test does) before this test")
    (wheel,) = wheels
    with zipfile.ZipFile(wheel) as z:  # a wheel of other sources would test something else
        for rel in ("harness/cli.py", "harness/study/config.py", "harness/sandbox/images.py"):
            assert z.read(rel) == (ROOT / rel).read_bytes(), f"{wheel.name} is stale ({rel}): run `make wheelhouse`"
    return wheel


def _fresh_image(client: docker.DockerClient, base: str) -> str:
    """tests/install/Dockerfile on the harness base image, tagged by a hash of both (built once)."""
    base_id = str(client.images.get(base).id)
    tag = "harness-test-fresh:" + hashlib.sha256(base_id.encode() + (HERE / "Dockerfile").read_bytes()).hexdigest()[:16]
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        client.images.build(path=str(HERE), tag=tag, buildargs={"BASE_IMAGE": base}, labels=LABELS, rm=True,
                            forcerm=True)  # fmt: skip
    return tag


@pytest.fixture
def machine(remote_engine: RemoteEngine, images: ImageSet) -> Iterator[Container]:
    client = docker.from_env(timeout=900)
    name = f"harness-test-fresh-{secrets.token_hex(4)}"
    container = client.containers.run(
        _fresh_image(client, images.base),
        ["sleep", "infinity"],
        name=name,
        detach=True,
        labels=LABELS,
        network=remote_engine.network,  # the only way to the engine
        environment={"DOCKER_HOST": remote_engine.docker_host, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/wheelhouse"},
        mounts=[docker.types.Mount("/wheelhouse", str(WHEELHOUSE), type="bind", read_only=True),
                docker.types.Mount("/install", str(HERE), type="bind", read_only=True),
                # this machine's CA bundle, as a machine behind the same TLS-intercepting proxy has it: the
                # image tags hash the extra CA (images.DEFAULT_EXTRA_CA), so the loaded images are the ones
                docker.types.Mount(str(DEFAULT_EXTRA_CA), str(DEFAULT_EXTRA_CA), type="bind", read_only=True)],
    )  # fmt: skip
    try:
        yield container
    finally:
        container.remove(force=True)


def _run(container: Container, command: str, workdir: str = "/home/user",
         first: str | None = None) -> tuple[str, float, float | None]:  # fmt: skip
    """Output, seconds, and seconds until ``first`` appeared in the output (None: not asked or not seen)."""
    assert container.client is not None
    api = container.client.api
    t0 = time.monotonic()
    exec_id = api.exec_create(container.id, ["sh", "-c", command + " 2>&1"], workdir=workdir)["Id"]
    out, seen = b"", None
    for chunk in api.exec_start(exec_id, stream=True):
        out += chunk
        if first is not None and seen is None and first.encode() in out:
            seen = time.monotonic() - t0
    code = api.exec_inspect(exec_id)["ExitCode"]
    text = out.decode(errors="replace")
    assert code == 0, f"`{command}` exited {code}:\n{text[-4000:]}"
    return text, time.monotonic() - t0, seen


def test_a_fresh_machine_installs_from_the_wheelhouse_and_decides(
    machine: Container, engine: Engine, remote_engine: RemoteEngine
) -> None:
    wheel = _wheel()
    seconds: dict[str, float] = {}
    out, seconds["pipx install"], _ = _run(machine, f"pipx install /wheelhouse/{wheel.name}")
    assert "skilltrial" in out

    version, _, _ = _run(machine, "skilltrial --version")
    tags = {role: tag for role, (tag, _) in ImageBuilder(engine).planned().items()}
    for role, tag in tags.items():
        assert tag in version, f"--version in the fresh machine names the {role} image {tag}:\n{version}"

    out, seconds["demo --quick"], first = _run(machine, "skilltrial demo --quick --out demo --jobs 2", first="gate: ")
    assert first is not None and out.count("gate: ") == 2, out[-3000:]
    seconds["install to first decision"] = seconds["pipx install"] + first
    for skill in ("careful-fixer", "verbose-planner"):
        decision, _, _ = _run(machine, f"cat demo/results-{skill}/decision.json")
        assert json.loads(decision)["verdict"] in ("adopt", "reject", "inconclusive")

    _run(machine, "mkdir proj")
    _, seconds["new repository: init and lock"], _ = _run(machine, "sh /install/new_repo.sh", workdir="/home/user/proj")
    out, seconds["new repository: scripted eval"], _ = _run(
        machine, "skilltrial eval skills/preregistration.yaml --scripted scenario.yaml --out results --jobs 2",
        workdir="/home/user/proj",
    )  # fmt: skip
    gate, _, _ = _run(machine, "skilltrial gate results; echo exit=$?", workdir="/home/user/proj")
    assert "exit=" in gate and gate.rsplit("exit=", 1)[1].strip() in ("0", "1", "2"), gate
    decision = json.loads(_run(machine, "cat results/decision.json", workdir="/home/user/proj")[0])
    assert decision["verdict"] in ("adopt", "reject", "inconclusive")
    counts, _, _ = _run(machine, "wc -l < results/results.jsonl", workdir="/home/user/proj")
    assert int(counts.strip()) == 4, "1 task x 2 runs x 2 arms, each a record"
    print("fresh machine (" + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())
          + f"; remote engine set-up {sum(remote_engine.seconds.values()):.0f} s, not counted)")  # fmt: skip
