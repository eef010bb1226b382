"""Reaping orphans by label, and Engine.remove_network's by-id fallback (a fake docker API; no engine).

Removal order and going on past a failure are part of the runtime contract (tests/contract/test_runtime.py)."""

from __future__ import annotations

import socket
import types

import docker

from harness.sandbox import lifecycle
from harness.sandbox.engine import Engine
from harness.sandbox.labels import make_labels, reap_orphans
from harness.sandbox.runtime import ContainerSpec, DockerObject
from tests.fakes import FakeRuntime


def test_gc_reaps_every_orphan_even_when_one_cannot_go_yet() -> None:
    """reap_orphans over the runtime interface (the removal order itself is in tests/contract)."""
    dead = make_labels("old", role="trial", trial_id="t", ttl_s=3600, pid=999_999_999, host=socket.gethostname())
    live = make_labels("mine", role="trial", trial_id="t", ttl_s=3600)
    expired = make_labels("late", role="trial", trial_id="t", ttl_s=-1)
    rt = FakeRuntime(images=["img"])
    rt.create_network("n", dead, internal=True)
    for name, labels in (("a", dead), ("b", dead), ("x", live), ("e", expired)):
        rt.create(ContainerSpec(name=name, image="img", command=("true",), labels=labels, user="1:1"))
    rt.fail("remove_container", "a")
    reaped = reap_orphans(rt)
    assert [(r.target.kind, r.target.name) for r in reaped] == [
        ("container", "b"),
        ("container", "e"),
        ("network", "n"),
    ]
    assert [r.reason for r in reaped] == ["owner pid 999999999 is gone", "expired", "owner pid 999999999 is gone"]
    assert "x" not in rt.targets("remove_container"), "a live run's objects are not touched"
    assert sorted(o.name for o in rt.left()) == ["a", "x"], "what could not go is left for the next pass"


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
    removed, errors = lifecycle.remove_objects(fake_engine(api), [DockerObject("network", "harness-t1\n")])
    assert errors == []
    assert removed == [DockerObject("network", "harness-t1\n")]
    assert api.networks == {"id-other": "other"}
    assert api.calls == ["harness-t1\n", "id-newline"]


def test_a_network_still_there_after_removal_is_an_error_not_success() -> None:
    api = FakeNetworkAPI({"id-newline": "harness-t1\n"}, sticky={"id-newline"})
    removed, errors = lifecycle.remove_objects(fake_engine(api), [DockerObject("network", "harness-t1\n")])
    assert removed == []
    assert len(errors) == 1 and "still there" in errors[0]


def test_an_ordinary_network_is_removed_by_name_once() -> None:
    api = FakeNetworkAPI({"id-a": "harness-a"})
    fake_engine(api).remove_network("harness-a")
    assert api.networks == {}
    assert api.calls == ["harness-a"]
