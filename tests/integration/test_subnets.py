"""Many trial networks at once on the real engine, none from its default address pools (issue 27 item 3).

A stock engine's default pools hold about 30 bridge networks; a run of 32 trials needs 33. Each harness
network instead takes a /28 of the harness's own range (harness.sandbox.subnets), so 40 at once fit on an
engine nobody reconfigured. Isolation of those networks (internal, no IPv4 on the bridge) is attacked from
inside containers in tests/security/test_network.py, which runs on the same networks.
"""

from __future__ import annotations

import os
import secrets
import threading
from ipaddress import IPv4Network

import docker
import pytest

from harness.errors import InfraError, PrerequisiteError
from harness.sandbox import subnets
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import ContainerSpec, Limits

pytestmark = [pytest.mark.docker]

AT_ONCE = 40


def _labels() -> dict[str, str]:
    return make_labels("subnets", role="test", ttl_s=600, purpose="test")


def test_more_networks_than_the_default_pools_hold_are_made_at_once(engine: Engine) -> None:
    tag = secrets.token_hex(3)
    names = [f"hx-subnets-{tag}-{i}" for i in range(AT_ONCE)]
    errors: list[BaseException] = []

    def make(name: str) -> None:
        try:
            engine.create_network(name, _labels(), internal=True)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=make, args=(n,)) for n in names]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        made = [engine.client.api.inspect_network(n) for n in names]
    finally:
        for n in names:
            try:
                engine.remove_network(n)
            except Exception:
                pass
    pool = IPv4Network(subnets.DEFAULT_POOL)
    nets = [IPv4Network(m["IPAM"]["Config"][0]["Subnet"]) for m in made]
    assert all(n.prefixlen == 28 and n.subnet_of(pool) for n in nets), nets
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :]), "40 distinct subnets"
    assert all(m["Internal"] for m in made), "still --internal"
    assert all(m["Options"].get("com.docker.network.bridge.inhibit_ipv4") == "true" for m in made)
    others = [
        IPv4Network(c["Subnet"])
        for n in engine.client.api.networks()
        if n["Name"] not in names
        for c in (n.get("IPAM") or {}).get("Config") or []
        if "." in c.get("Subnet", "")
    ]
    assert not any(a.overlaps(b) for a in nets for b in others), "no overlap with the engine's other networks"


def test_a_runs_network_holds_more_containers_than_a_trials(engine: Engine, images: ImageSet) -> None:
    """Every gateway of a run joins the run's upstream network: 32 trials at once need 33 addresses there,
    more than a /28 has (the first --jobs 32 bench run failed so: "no available IPv4 addresses on this
    network's address pools"). 14 containers on a network made for a run's members; the control: the
    same 14 do not fit a trial's network."""
    tag = secrets.token_hex(3)
    run_net, trial_net = f"hx-subnets-{tag}-run", f"hx-subnets-{tag}-trial"
    engine.create_network(run_net, _labels(), internal=True, hosts=subnets.RUN_HOSTS)
    engine.create_network(trial_net, _labels(), internal=True)
    names: list[str] = []
    refused: list[str] = []
    try:
        started = {run_net: 0, trial_net: 0}
        for net in (run_net, trial_net):
            for i in range(14):
                name = f"{net}-{i}"
                names.append(name)
                engine.create(
                    ContainerSpec(
                        name=name, image=images.sidecar, command=("sleep", "120"), labels=_labels(),
                        user="65534:65534", network=net, limits=Limits(memory="32m", pids=8),
                    )
                )  # fmt: skip
                try:
                    engine.start(name)
                except InfraError as e:
                    refused.append(str(e))
                    break
                started[net] += 1
        assert started == {run_net: 14, trial_net: 13}, started
        assert len(refused) == 1 and "no available IPv4 addresses" in refused[0], refused
    finally:
        for name in names:
            engine.remove_container(name)
        engine.remove_network(run_net)
        engine.remove_network(trial_net)


def test_a_range_someone_else_uses_is_refused_naming_it_and_the_setting() -> None:
    """A network that is not the harness's covers the whole (one-subnet) range: a clear error, nothing
    made; positive control: once it is gone the same range works."""
    octet = 200 + secrets.randbelow(50)
    pool = f"10.215.{octet}.0/28"
    engine = Engine({**os.environ, subnets.ENV: pool})
    client = docker.from_env()
    foreign = f"hx-subnets-foreign-{secrets.token_hex(3)}"
    ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=pool)])
    net_id = client.api.create_network(foreign, internal=True, ipam=ipam, labels={"harness.test": "subnets"})["Id"]
    name = f"hx-subnets-{secrets.token_hex(3)}"
    try:
        with pytest.raises(PrerequisiteError) as e:
            engine.create_network(name, _labels(), internal=True)
        assert foreign in str(e.value) and subnets.ENV in str(e.value)
        assert not client.api.networks(names=[name])
    finally:
        client.api.remove_network(net_id)
    engine.create_network(name, _labels(), internal=True)
    try:
        assert engine.client.api.inspect_network(name)["IPAM"]["Config"][0]["Subnet"] == pool
    finally:
        engine.remove_network(name)
