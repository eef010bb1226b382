"""Engine.remove_objects / gc: containers before networks, and one failure does not stop the rest."""

from __future__ import annotations

import socket

from harness.engine import Engine
from harness.errors import InfraError
from harness.labels import make_labels


class RecordingEngine(Engine):
    """An Engine whose Docker calls are replaced (no engine needed): removal order and failures."""

    def __init__(self, objects: list[tuple[str, str, dict[str, str]]], failing: set[str]) -> None:
        self.objects = objects
        self.failing = failing
        self.calls: list[str] = []

    def labelled(self, selector=None):  # type: ignore[no-untyped-def]
        return [o for o in self.objects if all(o[2].get(k) == v for k, v in (selector or {}).items())]

    def remove_container(self, name: str) -> None:
        self.calls.append(name)
        if name in self.failing:
            raise InfraError(f"removing container {name} failed: busy")

    def remove_network(self, name: str) -> None:
        self.calls.append(name)
        if name in self.failing:
            raise InfraError(f"removing network {name} failed: busy")


def test_removal_goes_on_past_a_failure_and_takes_containers_first() -> None:
    labels = make_labels("run1", role="trial", trial_id="t", ttl_s=3600)
    objects = [("network", "net", labels), ("container", "c1", labels), ("container", "c2", labels)]
    engine = RecordingEngine(objects, failing={"c1"})
    removed, errors = engine.remove_labelled({"harness.run": "run1"})
    assert engine.calls == ["c1", "c2", "net"]
    assert removed == [("container", "c2"), ("network", "net")]
    assert errors == ["removing container c1 failed: busy"]


def test_gc_reaps_every_orphan_even_when_one_cannot_go_yet() -> None:
    dead = make_labels("old", role="trial", trial_id="t", ttl_s=3600, pid=999_999_999, host=socket.gethostname())
    live = make_labels("mine", role="trial", trial_id="t", ttl_s=3600)
    objects = [("container", "a", dead), ("container", "b", dead), ("network", "n", dead), ("container", "x", live)]
    engine = RecordingEngine(objects, failing={"a"})
    reaped = engine.gc()
    assert [(k, n) for k, n, _ in reaped] == [("container", "b"), ("network", "n")]
    assert "x" not in engine.calls, "a live run's objects are not touched"
