"""Concurrency on the real engine: phases of different trials overlap; a DOCKER_HOST engine works."""

from __future__ import annotations

import itertools
import logging
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness.demo import DemoSetup
from harness.experiment.events import NullEvents
from harness.plan import TrialSpec
from harness.records import TrialRecord
from harness.sandbox import lifecycle
from harness.sandbox.engine import Engine, connections_for
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import RUN, make_labels
from harness.sandbox.runtime import ContainerSpec, Limits
from tests.integration.helpers import demo_task_scripts, latest, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class Timeline(NullEvents):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.marks: list[tuple[float, str, str]] = []

    def phase(self, trial_id: str, phase: str) -> None:
        with self.lock:
            self.marks.append((time.monotonic(), trial_id, phase))

    def trial_finished(self, spec: TrialSpec, record: TrialRecord, spent_usd: float) -> None:
        with self.lock:
            self.marks.append((time.monotonic(), spec.trial_id, "done"))

    def intervals(self) -> list[tuple[str, str, float, float]]:
        out = []
        by_trial: dict[str, list[tuple[float, str]]] = {}
        for t, tid, phase in sorted(self.marks):
            by_trial.setdefault(tid, []).append((t, phase))
        for tid, marks in by_trial.items():
            for (t0, phase), (t1, _) in itertools.pairwise(marks):
                out.append((tid, phase, t0, t1))
        return out


def _scenario(setup_root: Path, tasks: list[str], latency: dict[str, int]) -> dict[str, Any]:
    scripts = demo_task_scripts(setup_root)
    return {
        "seed": 2,
        "skill_marker": "careful-fixer-7c1e",
        "judge": {"latency_ms": 0},
        "tasks": {
            t: {
                **scripts[t],
                "arms": {
                    "baseline": {"p_success": 1, "latency_ms": latency.get(t, 0)},
                    "skill": {"p_success": 1, "latency_ms": latency.get(t, 0)},
                },
            }
            for t in tasks
        },
    }


def test_one_trials_verify_and_judge_run_while_another_agent_works(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    tasks = ["fix-mean", "fix-slugify"]
    prereg, scen = write_experiment(
        demo_setup.root, "overlap", tasks=tasks, scenario=_scenario(demo_setup.root, tasks, {"fix-slugify": 2500})
    )
    timeline = Timeline()
    result = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=4, events=timeline)
    assert {r.status for r in latest(result).values()} == {"completed"}
    spans = timeline.intervals()
    agents = [(tid, t0, t1) for tid, phase, t0, t1 in spans if phase == "agent"]
    late = [(tid, phase, t0, t1) for tid, phase, t0, t1 in spans if phase in ("extract", "verify", "judge")]
    overlaps = {
        (tid, phase, other)
        for tid, phase, t0, t1 in late
        for other, a0, a1 in agents
        if other != tid and t0 < a1 and a0 < t1
    }
    assert any(phase == "judge" for _, phase, _ in overlaps), f"no judge ran during another agent: {spans}"
    assert any(phase == "verify" for _, phase, _ in overlaps)
    starts = sorted(t0 for _, phase, t0, _ in spans if phase == "workspace")
    assert starts[-1] - starts[0] < 5.0, "with --jobs 4 all four trials start together"


# ----------------------------------------------------------------------------- DOCKER_HOST


class LoopbackDockerProxy:
    """tcp://127.0.0.1:<port> -> the local engine's unix socket: a 'remote' engine on loopback only."""

    def __init__(self, socket_path: str = "/var/run/docker.sock") -> None:
        self.socket_path = socket_path
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.server.settimeout(0.5)
        while not self.closed.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.socket_path)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed.set()
        self.server.close()
        self.thread.join(timeout=5)


def _small_experiment(setup_root: Path, name: str) -> tuple[Path, Path]:
    return write_experiment(setup_root, name, tasks=["fix-mean"], scenario=_scenario(setup_root, ["fix-mean"], {}))


def test_docker_host_given_explicitly_is_the_engine_used(
    tmp_path: Path, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    eng = Engine({"DOCKER_HOST": "unix:///var/run/docker.sock"})
    prereg, scen = _small_experiment(demo_setup.root, "dockerhost")
    result = run_experiment(eng, prereg, scen, tmp_path / "out", work_root, jobs=2)
    assert {r.status for r in latest(result).values()} == {"completed"}


def test_a_tcp_docker_host_on_loopback_runs_the_whole_pipeline(
    tmp_path: Path, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    proxy = LoopbackDockerProxy()
    try:
        eng = Engine({"DOCKER_HOST": f"tcp://127.0.0.1:{proxy.port}"})
        assert eng.info().server_version
        prereg, scen = _small_experiment(demo_setup.root, "tcphost")
        result = run_experiment(eng, prereg, scen, tmp_path / "out", work_root, jobs=2)
        assert {r.status for r in latest(result).values()} == {"completed"}
        assert proxy.connections > 0, "every engine call went through the tcp endpoint"
    finally:
        proxy.close()


def test_an_unreachable_docker_host_is_a_prerequisite_error() -> None:
    from harness.errors import PrerequisiteError

    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with pytest.raises(PrerequisiteError, match="no Docker engine answers"):
        Engine({"DOCKER_HOST": f"tcp://127.0.0.1:{port}"}, timeout=3)


# ------------------------------------------------------------------ the client's connection pool

HELD_TRIALS = 6
"""Trials at once, each holding a followed log and a wait: 12 connections, past docker-py's pool of 10."""


def _hold_like_trials(eng: Engine, images: ImageSet, caplog: pytest.LogCaptureFixture) -> list[str]:
    """What ``HELD_TRIALS`` running trials hold of the engine at once (each its gateway's followed log and its
    agent's wait) and a short call each meanwhile; returns urllib3's warnings of a full pool."""
    run_id = "pool" + secrets.token_hex(3)
    names = [f"hx-{run_id}-{i}" for i in range(HELD_TRIALS)]
    try:
        for name in names:
            eng.create(
                ContainerSpec(
                    name=name,
                    image=images.sidecar,
                    command=("sh", "-c", "echo up; sleep 6"),
                    labels=make_labels(run_id, role="pool", ttl_s=120, purpose="test"),
                    user="65534:65534",
                    limits=Limits(memory="64m", pids=16, tmpfs_size="1m"),
                )
            )
            eng.start(name)
        streams = [eng.follow_logs(name) for name in names]
        held = [threading.Thread(target=lambda s=s: list(s)) for s in streams]
        held += [threading.Thread(target=eng.wait, args=(name, 30)) for name in names]
        with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
            for t in held:
                t.start()
            time.sleep(1)  # every stream and wait is open now
            for name in names:
                eng.logs(name)
            for t in held:
                t.join(30)
    finally:
        lifecycle.remove_labelled(eng, {RUN: run_id})
    return [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()]


def test_an_engine_sized_for_its_runs_trials_keeps_their_connections(
    images: ImageSet, caplog: pytest.LogCaptureFixture
) -> None:
    """Each running trial holds engine connections for long stretches. Past the client's pool docker-py does
    not wait: it opens another connection and discards it after the call (on tcp://, a connection, and on
    TLS a handshake, per call). A run's engine keeps :func:`connections_for` its jobs.
    (Over a unix socket docker-py pools per URL, and over ssh:// opens a process per request: there the
    size does not matter, and this test speaks tcp:// on loopback.)"""
    proxy = LoopbackDockerProxy()
    try:
        host = {"DOCKER_HOST": f"tcp://127.0.0.1:{proxy.port}"}
        assert _hold_like_trials(Engine(host), images, caplog), "positive control: docker-py's pool of 10 overflows"
        caplog.clear()
        assert _hold_like_trials(Engine(host, max_connections=connections_for(HELD_TRIALS)), images, caplog) == []
    finally:
        proxy.close()
