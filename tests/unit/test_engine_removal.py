"""Engine.remove_objects / gc: containers before networks, and one failure does not stop the rest."""

from __future__ import annotations

import socket
import types
from collections.abc import Mapping

import docker

from harness.errors import InfraError
from harness.sandbox.engine import Engine
from harness.sandbox.labels import make_labels


class RecordingEngine(Engine):
    """An Engine whose Docker calls are replaced (no engine needed): removal order and failures."""

    def __init__(self, objects: list[tuple[str, str, dict[str, str]]], failing: set[str]) -> None:
        self.objects = objects
        self.failing = failing
        self.calls: list[str] = []

    def labelled(self, selector: Mapping[str, str] | None = None) -> list[tuple[str, str, dict[str, str]]]:
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


class FakeNetworkAPI:
    """The Docker API's network calls: names ending in a newline cannot be addressed (404), ids can;
    ``sticky`` ids survive removal (an engine that says yes and keeps the network)."""

    def __init__(self, networks: dict[str, str], sticky: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.networks = dict(networks)  # id -> name
        self.sticky = sticky
        self.calls: list[str] = []

    def remove_network(self, ref: str) -> None:
        self.calls.append(ref)
        if ref in self.networks:
            if ref not in self.sticky:
                del self.networks[ref]
            return
        match = [i for i, n in self.networks.items() if n == ref and not ref.endswith("\n")]
        if not match:
            raise docker.errors.NotFound("page not found")
        del self.networks[match[0]]

    def networks_list(self) -> list[dict[str, str]]:
        return [{"Id": i, "Name": n} for i, n in self.networks.items()]

    def inspect_network(self, ref: str) -> dict[str, str]:
        if ref not in self.networks:
            raise docker.errors.NotFound("no such network")
        return {"Id": ref, "Name": self.networks[ref]}


def fake_engine(api: FakeNetworkAPI) -> Engine:
    engine = Engine.__new__(Engine)
    client = types.SimpleNamespace(api=types.SimpleNamespace(
        remove_network=api.remove_network, networks=api.networks_list, inspect_network=api.inspect_network))  # fmt: skip
    engine.client = client  # type: ignore[assignment]
    return engine


def test_a_network_the_api_cannot_name_is_removed_by_id() -> None:
    api = FakeNetworkAPI({"id-newline": "harness-t1\n", "id-other": "other"})
    removed, errors = fake_engine(api).remove_objects([("network", "harness-t1\n")])
    assert errors == []
    assert removed == [("network", "harness-t1\n")]
    assert api.networks == {"id-other": "other"}
    assert api.calls == ["harness-t1\n", "id-newline"]


def test_a_network_still_there_after_removal_is_an_error_not_success() -> None:
    api = FakeNetworkAPI({"id-newline": "harness-t1\n"}, sticky={"id-newline"})
    removed, errors = fake_engine(api).remove_objects([("network", "harness-t1\n")])
    assert removed == []
    assert len(errors) == 1 and "still there" in errors[0]


def test_an_ordinary_network_is_removed_by_name_once() -> None:
    api = FakeNetworkAPI({"id-a": "harness-a"})
    fake_engine(api).remove_network("harness-a")
    assert api.networks == {}
    assert api.calls == ["harness-a"]
