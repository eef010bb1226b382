"""Shared test setup.

Unit tests never touch Docker, the network or the host's git repositories: an
autouse guard makes ``docker.from_env`` raise unless the test is marked
``docker``. Integration tests (marker ``docker``) use the real engine, the real
images and the real Claude Code CLI; ``make test`` starts the engine and builds
the images first. ``--no-docker`` skips them (for a quick unit-only run).
After every docker test, no harness container, network, volume or worktree may be left.

``--engine remote`` runs the docker tests against a second engine that shares no filesystem with the
controller (docker-in-docker, :mod:`tests.remote.dind`), reached over TCP: ``DOCKER_HOST`` is set for
the session, so every ``Engine()`` the code under test makes talks to it too. A test that cannot work
there by design is marked ``local_engine`` and skipped, with its reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from harness import retry
from harness.demo import DemoSetup
from harness.sandbox import lifecycle
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.remote.dind import DindEngine, RemoteEngine

ROOT = Path(__file__).resolve().parent.parent


GIT_REDIRECTS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_PREFIX",
)
"""Variables a git hook sets for what it runs (the pre-commit and pre-push hooks run this suite). A test's
own ``git init SCRATCH`` would obey them and re-initialise the project's repository instead, as bare."""


def pytest_configure(config: pytest.Config) -> None:
    for name in GIT_REDIRECTS:
        os.environ.pop(name, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-docker", action="store_true", help="skip tests that need the Docker engine")
    parser.addoption(
        "--engine",
        choices=("local", "remote"),
        default="local",
        help="remote: run the docker tests against a docker-in-docker engine reached over TCP (tests/remote)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--engine") == "remote":
        for item in items:
            for mark in item.iter_markers("local_engine"):
                item.add_marker(pytest.mark.skip(reason=f"needs a local engine: {mark.args[0] if mark.args else ''}"))
    if not config.getoption("--no-docker"):
        return
    skip = pytest.mark.skip(reason="--no-docker")
    for item in items:
        if "docker" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """With ``--engine remote``, a test that fails only because a step needs a path of this machine in a
    container (``NeedsLocalEngine``: a test that bind-mounts a host tree on purpose, e.g. the host-overlay
    workspace attacks; no step of a run does any more) is reported as skipped with that message."""
    report = yield
    from harness.errors import NeedsLocalEngine

    if (
        item.config.getoption("--engine") == "remote"
        and call.excinfo is not None
        and call.excinfo.errisinstance(NeedsLocalEngine)
    ):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"needs a local engine: {call.excinfo.value}")
    return report


@pytest.fixture(autouse=True)
def _fast_retries() -> Iterator[None]:
    """Retry backoffs do not sleep in tests (a test that measures waits injects its own policy)."""
    previous = retry.set_default_wait(retry.NO_WAIT)
    yield
    retry.set_default_wait(previous)


@pytest.fixture(autouse=True)
def _no_docker_in_unit_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "docker" in request.keywords:
        return
    import docker

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("unit tests must not talk to the Docker engine; mark the test with @pytest.mark.docker")

    monkeypatch.setattr(docker, "from_env", refuse)
    monkeypatch.setattr(docker, "DockerClient", refuse)


# ----------------------------------------------------------------------- docker side


@pytest.fixture(scope="session")
def remote_engine() -> Iterator[RemoteEngine]:
    """The second engine (:mod:`tests.remote.dind`), with the machine's harness images loaded into it."""
    from harness.sandbox.engine import Engine
    from harness.sandbox.images import ImageBuilder
    from tests.remote import dind

    here = ImageBuilder(Engine()).ensure()
    with dind.remote_engine(here.runtime, [here.base, here.runtime, here.sidecar, here.trial]) as remote:
        yield remote


@pytest.fixture(scope="session")
def dind_pool() -> Iterator[list[DindEngine]]:
    """Three more engines (:func:`tests.remote.dind.dind_engines`): plain TCP, TCP with TLS and ssh, each with
    the machine's harness images loaded, made for the session and removed after (issue 29: a pool of engines)."""
    from harness.sandbox.engine import Engine
    from harness.sandbox.images import ImageBuilder
    from tests.remote import dind

    here = ImageBuilder(Engine()).ensure()
    with dind.dind_engines(here.runtime, [here.base, here.runtime, here.sidecar, here.trial]) as engines:
        yield engines


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    from harness.sandbox.engine import Engine

    if request.config.getoption("--engine") != "remote":
        yield Engine()
        return
    remote: RemoteEngine = request.getfixturevalue("remote_engine")
    before = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = remote.docker_host
    try:
        yield Engine({"DOCKER_HOST": remote.docker_host})
    finally:
        if before is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = before


@pytest.fixture(scope="session")
def images(engine: Engine) -> ImageSet:
    from harness.sandbox.images import ImageBuilder

    return ImageBuilder(engine).ensure()


def _worktrees(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.startswith("worktree ")]


def _ours_or_orphaned(labels: dict[str, str]) -> bool:
    from harness.sandbox.labels import HOST, PID, pid_alive

    if PID not in labels:
        return False  # not made by a run: e.g. a `docker run` of an image whose build stage carries the owner label
    try:
        pid = int(labels[PID])
    except ValueError:
        return True
    return pid == os.getpid() or labels.get(HOST) != socket.gethostname() or not pid_alive(pid)


@pytest.fixture(autouse=True)
def _nothing_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """A docker test must tear down every container, network, volume and worktree it made."""
    if "docker" not in request.keywords:
        yield
        return
    eng = request.getfixturevalue("engine")
    before = {(k, n) for k, n, _ in eng.labelled()}
    yield
    # Objects of another live process (a parallel test run on the same engine) are not this test's:
    # only this process's objects and those of dead owners (a subprocess the test killed) count.
    after = {(k, n) for k, n, lb in eng.labelled() if _ours_or_orphaned(lb)}
    leaked = sorted(after - before)
    if leaked:
        from harness.sandbox.runtime import DockerObject

        lifecycle.remove_objects(eng, [DockerObject(kind, name) for kind, name in leaked])
        pytest.fail(f"test left Docker objects behind: {leaked}")


@pytest.fixture
def demo_setup(tmp_path: Path) -> Iterator[DemoSetup]:
    """The embedded demo, prepared and locked in a fresh directory (repository included)."""
    from harness.demo import prepare_demo

    setup = prepare_demo(tmp_path / "demo")
    yield setup
    repo = setup.root / "demo" / "repo"
    leftover = _worktrees(repo)[1:]
    assert not leftover, f"worktrees left in the demo repository: {leftover}"


@pytest.fixture
def work_root(tmp_path: Path) -> Iterator[Path]:
    """Per-test trial directory root (instead of the shared /tmp/harness-<uid>)."""
    root = tmp_path / "trials"
    root.mkdir(mode=0o700)
    yield root
    left = [p for p in root.iterdir()] if root.exists() else []
    shutil.rmtree(root, ignore_errors=True)
    assert not left, f"trial directories left behind: {left}"


def running_as_root() -> bool:
    return os.geteuid() == 0
