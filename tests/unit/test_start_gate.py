"""StartGate: no container starts once a stop is under way, and a stop waits for starts in flight.

The engine below is the real :class:`~harness.sandbox.engine.Engine` with its Docker calls replaced, under
:func:`harness.sandbox.lifecycle.run`, whose order of create, gate, start and remove is what is under test
(it is the one order every runtime runs a container in).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from harness.errors import Interrupted
from harness.sandbox import lifecycle
from harness.sandbox.engine import Engine
from harness.sandbox.runtime import ContainerSpec, Waited
from harness.trial.trial import StartGate


def test_a_start_after_the_stop_is_refused() -> None:
    stop = threading.Event()
    gate = StartGate(stop)
    with gate.starting():
        pass  # allowed before the stop
    gate.close()
    assert stop.is_set()
    with pytest.raises(Interrupted), gate.starting():
        raise AssertionError("the container must not start")


def test_the_stop_waits_for_a_start_in_flight() -> None:
    """The race behind the flaky signal test: the kill sweep must not run while a start is half done."""
    gate = StartGate(threading.Event())
    inside, release, closed = threading.Event(), threading.Event(), threading.Event()

    def start() -> None:
        with gate.starting():
            inside.set()
            release.wait(10)

    def stop() -> None:
        gate.close()
        closed.set()

    starter = threading.Thread(target=start)
    starter.start()
    assert inside.wait(10)
    stopper = threading.Thread(target=stop)
    stopper.start()
    assert not closed.wait(0.2), "close() returned while a start was in flight"
    release.set()
    assert closed.wait(10)
    starter.join(10)
    stopper.join(10)


class _SlowCreateEngine(Engine):
    """The engine's primitives with the Docker calls replaced: create blocks until released, so a stop can
    land exactly between create and start (the flaky test's window)."""

    def __init__(self) -> None:  # no Docker client: every call a run makes is replaced below
        self.created, self.release = threading.Event(), threading.Event()
        self.calls: list[str] = []

    def create(self, spec: ContainerSpec, *, extra_networks: Sequence[str] = ()) -> str:
        self.calls.append("create")
        self.created.set()
        self.release.wait(10)
        return "id"

    def start(self, name: str) -> None:
        self.calls.append("start")

    def remove_container(self, name: str) -> None:
        self.calls.append("remove")

    def wait(self, name: str, deadline_s: float) -> Waited:
        raise AssertionError("ran to its deadline")


def _run_in_window(gated: bool) -> list[str]:
    engine = _SlowCreateEngine()
    gate = StartGate(threading.Event())
    spec = ContainerSpec(name="agent", image="i", command=("true",), labels={}, user="1:1")
    errors: list[BaseException] = []

    def trial() -> None:
        try:
            lifecycle.run(engine, spec, deadline_s=60, gate=gate.starting if gated else None)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=trial)
    t.start()
    assert engine.created.wait(10)
    gate.close()  # the signal: stop, then the sweep kills what is running (nothing has started yet)
    engine.release.set()
    t.join(10)
    assert len(errors) == 1
    if gated:
        assert isinstance(errors[0], Interrupted)
    return engine.calls


def test_a_container_created_before_the_stop_never_starts_after_it() -> None:
    assert _run_in_window(gated=True) == ["create", "remove"]


def test_positive_control_without_the_gate_it_starts_after_the_sweep() -> None:
    assert _run_in_window(gated=False) == ["create", "start", "remove"]
