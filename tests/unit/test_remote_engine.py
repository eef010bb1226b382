"""Where the engine is (DOCKER_HOST), and what a remote one refuses, without an engine.

The same run against a real second engine is ``make test-remote`` (tests/remote)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.errors import NeedsLocalEngine
from harness.sandbox.doctor import remote_notes
from harness.sandbox.engine import Engine, endpoint_of
from harness.sandbox.runtime import BindMount, ContainerSpec, Endpoint, VolumeMount


@pytest.mark.parametrize(
    ("docker_host", "remote"),
    [
        ("", False),
        ("unix:///var/run/docker.sock", False),
        ("unix:///run/user/1000/docker.sock", False),
        ("tcp://10.0.0.5:2375", True),
        ("tcp://127.0.0.1:2375", False),  # Docker Desktop's tcp endpoint, a local socket proxy
        ("tcp://localhost:2375", False),
        ("tcp://[::1]:2375", False),
        ("tcp://127.example.org:2375", True),  # a name, not a loopback address
        ("ssh://builder@ci-host", True),
        ("https://engine.example:2376", True),
    ],
)
def test_docker_host_decides_local_or_remote(docker_host: str, remote: bool) -> None:
    where = endpoint_of({"DOCKER_HOST": docker_host} if docker_host else {})
    assert where.remote is remote
    assert where.url == (docker_host or "unix:///var/run/docker.sock")
    assert ("remote" in where.describe()) is remote


def test_a_loopback_tunnel_to_another_machine_is_declared_remote() -> None:
    """``ssh -L 2375:...`` makes a remote engine look like a local port: the user says so."""
    assert endpoint_of({"DOCKER_HOST": "tcp://127.0.0.1:2375", "HARNESS_ENGINE_REMOTE": "1"}).remote is True
    assert endpoint_of({"DOCKER_HOST": "tcp://127.0.0.1:2375", "HARNESS_ENGINE_REMOTE": "0"}).remote is False


def _engine_at(url: str) -> Engine:
    engine = Engine.__new__(Engine)  # no client: the refusal comes before any call
    engine._endpoint = endpoint_of({"DOCKER_HOST": url})
    return engine


SPEC = ContainerSpec(
    name="hx-r-agent",
    image="trial",
    command=("true",),
    labels={},
    user="1:1",
    mounts=(BindMount(Path("/tmp/run/ws"), "/workspace", read_only=False),),
    volumes=(VolumeMount("hx-r-skill", "/skill"),),
)


def test_a_remote_engine_refuses_a_bind_mount_naming_the_path() -> None:
    with pytest.raises(NeedsLocalEngine, match=r"/tmp/run/ws at /workspace.*tcp://10\.0\.0\.5:2375 is remote"):
        _engine_at("tcp://10.0.0.5:2375")._create_kwargs(SPEC)


def test_volumes_are_fine_remotely_and_binds_locally() -> None:
    remote = _engine_at("tcp://10.0.0.5:2375")._create_kwargs(ContainerSpec(**{**SPEC.__dict__, "mounts": ()}))
    assert [m["Type"] for m in remote["mounts"]] == ["volume"]
    local = _engine_at("unix:///var/run/docker.sock")._create_kwargs(SPEC)
    assert sorted(m["Type"] for m in local["mounts"]) == ["bind", "volume"]
    assert _engine_at("tcp://10.0.0.5:2375").free_disk_bytes() is None, "no local path stands for its data root"


def test_doctor_says_what_it_cannot_check_remotely() -> None:
    note = remote_notes()
    assert note.level == "warn" and "free disk" in note.detail and "uids" in note.detail
    assert Endpoint("tcp://h:2375", remote=True).describe() == "tcp://h:2375 (remote: no bind mounts)"


def test_a_runs_engine_keeps_a_connection_for_what_each_of_its_trials_holds(
    make_study: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each running trial holds engine connections (its gateway's followed log, its agent's wait, a volume
    workspace's watchdog): a run's engine keeps that many for its jobs, and docker-py's 10 for a small run.
    (That the pool then holds them: tests/integration/test_concurrency.py, on a tcp:// engine.)"""
    from harness.experiment.experiment import Experiment
    from harness.experiment.options import RunOptions
    from harness.sandbox.engine import connections_for
    from harness.study.config import load_study
    from tests.fakes import FakeRuntime

    made: list[dict[str, Any]] = []

    def engine(env: Any, **kwargs: Any) -> FakeRuntime:
        made.append(kwargs)
        return FakeRuntime()

    monkeypatch.setattr("harness.experiment.experiment.Engine", engine)
    study = load_study(make_study().prereg)
    assert Experiment(study, None, RunOptions(jobs=32, out=tmp_path / "o")).engine is not None
    assert made == [{"max_connections": connections_for(32)}] and connections_for(32) >= 3 * 32
    assert connections_for(1) == connections_for(2) == 10, "a small run: docker-py's own"
