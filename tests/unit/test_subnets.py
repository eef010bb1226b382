"""Each harness network's subnet (harness.sandbox.subnets, Engine.create_network): pure choice, and the
engine's refusals handled (a fake docker API; no engine). The real engine: tests/integration/test_subnets.py."""

from __future__ import annotations

import types
from ipaddress import IPv4Network
from typing import Any

import docker
import pytest

from harness.errors import ConfigError, InfraError, PrerequisiteError
from harness.sandbox import subnets
from harness.sandbox.engine import Engine
from harness.sandbox.runtime import Endpoint

POOL = subnets.pool_from_env({})

# /proc/net/route of a host with a default route, docker0 and a VPN route over the whole default pool
ROUTES = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
tun0\t0000D50A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
"""


def test_the_default_pool_holds_thousands_of_networks_outside_the_engines_default_pools() -> None:
    assert POOL.range == IPv4Network(subnets.DEFAULT_POOL)
    assert POOL.size() == 4096, "a /16 in /28s"
    engine_defaults = [IPv4Network(f"172.{n}.0.0/16") for n in range(17, 32)] + [IPv4Network("192.168.0.0/16")]
    assert not any(POOL.range.overlaps(d) for d in engine_defaults)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("not-a-range", "not an IPv4 range"),
        ("10.213.0.1/16", "not an IPv4 range"),  # host bits set
        ("8.8.8.0/24", "not a private range"),
        ("127.0.0.0/8", "not a private range"),
        ("0.0.0.0/8", "not a private range"),
        ("10.213.0.0/29", "smaller than one /28"),
    ],
)
def test_a_bad_pool_is_refused_naming_the_setting(value: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error) as e:
        subnets.pool_from_env({subnets.ENV: value})
    assert subnets.ENV in str(e.value)


def test_the_setting_chooses_another_range_or_the_engines_pools() -> None:
    assert subnets.pool_from_env({subnets.ENV: "192.168.240.0/24"}).size() == 16
    assert subnets.pool_from_env({subnets.ENV: "engine"}).range is None


def test_routes_are_parsed_and_the_default_route_left_out() -> None:
    assert subnets.parse_routes(ROUTES) == [IPv4Network("172.17.0.0/16"), IPv4Network("10.213.0.0/16")]


def test_the_choice_overlaps_nothing_taken_and_starts_where_the_name_says() -> None:
    pool = subnets.pool_from_env({subnets.ENV: "10.9.0.0/26"})  # four /28s
    all4 = [IPv4Network(f"10.9.0.{i * 16}/28") for i in range(4)]
    first = subnets.choose(pool, "net-a", [])
    assert first in all4
    assert subnets.choose(pool, "net-a", []) == first, "the same name starts at the same place"
    starts = {subnets.choose(pool, f"net-{i}", []) for i in range(40)}
    assert len(starts) == 4, "names spread over the pool"
    assert subnets.choose(pool, "net-a", [IPv4Network("10.9.0.0/27")]) in all4[2:]
    assert subnets.choose(pool, "net-a", [IPv4Network("10.0.0.0/8")]) is None, "a route over the whole pool"
    assert subnets.choose(pool, "net-a", [IPv4Network("10.9.0.20/32")]) != all4[1]


def test_every_candidate_once_and_all_inside_the_pool() -> None:
    pool = subnets.pool_from_env({subnets.ENV: "172.16.4.0/24"})
    got = list(subnets.candidates(pool, "x"))
    assert len(got) == len(set(got)) == 16
    assert all(g.subnet_of(IPv4Network("172.16.4.0/24")) and g.prefixlen == 28 for g in got)
    assert subnets.gateway_address(IPv4Network("172.16.4.32/28")) == "172.16.4.33"


def test_a_network_for_many_members_takes_as_many_28s_as_it_needs() -> None:
    assert subnets.prefix_for(POOL, subnets.TRIAL_HOSTS) == 28
    assert subnets.prefix_for(POOL, 14) == 27, "14 containers do not fit a /28 (13 usable addresses)"
    assert subnets.prefix_for(POOL, subnets.RUN_HOSTS) == 22, "every gateway of a run, and the scripted API"
    wide = subnets.choose(POOL, "hx-run-up", [], subnets.prefix_for(POOL, subnets.RUN_HOSTS))
    assert wide is not None and wide.prefixlen == 22 and wide.subnet_of(IPv4Network(subnets.DEFAULT_POOL))
    assert wide.num_addresses - 3 >= subnets.RUN_HOSTS
    small = subnets.pool_from_env({subnets.ENV: "10.9.0.0/26"})
    assert subnets.choose(small, "x", [], 22) is None, "a pool smaller than the network asked for"


def test_engine_subnets_reads_ipv4_configs_only() -> None:
    listed: list[dict[str, Any]] = [
        {"Name": "bridge", "IPAM": {"Config": [{"Subnet": "172.17.0.0/16", "Gateway": "172.17.0.1"}]}},
        {"Name": "v6", "IPAM": {"Config": [{"Subnet": "fd00::/64"}]}},
        {"Name": "host", "IPAM": {"Config": []}},
        {"Name": "none", "IPAM": None},
    ]
    assert subnets.engine_subnets(listed) == [("bridge", IPv4Network("172.17.0.0/16"))]


# ------------------------------------------------------------------ Engine.create_network over a fake API


class FakeDocker:
    """The two calls create_network makes. ``steal``: subnets another process takes between our look
    (the list) and our create, as the engine reports it (a 403 "overlaps")."""

    def __init__(self, listed: list[dict[str, Any]] | None = None, steal: int = 0) -> None:
        self.listed = listed or []
        self.steal = steal
        self.created: list[tuple[str, str | None]] = []

    def create(self, name: str, **kwargs: Any) -> None:
        ipam = kwargs["ipam"]
        subnet = ipam["Config"][0]["Subnet"] if ipam else None
        if self.steal > 0:
            self.steal -= 1
            self.listed.append({"Name": f"other-{self.steal}", "IPAM": {"Config": [{"Subnet": subnet}]}})
            raise docker.errors.APIError("Pool overlaps with other one on this address space")
        assert kwargs["options"] == {"com.docker.network.bridge.inhibit_ipv4": "true"}
        assert kwargs["internal"] is True
        self.created.append((name, subnet))
        self.listed.append({"Name": name, "IPAM": {"Config": [{"Subnet": subnet}]}, "Labels": kwargs["labels"]})


def _engine(fake: FakeDocker, env: dict[str, str]) -> Engine:
    engine = Engine.__new__(Engine)
    engine.client = types.SimpleNamespace(  # type: ignore[assignment]
        api=types.SimpleNamespace(networks=lambda: list(fake.listed)),
        networks=types.SimpleNamespace(create=fake.create),
    )
    engine._endpoint = Endpoint(url="tcp://far:2375", remote=True)  # no host routes read
    engine._subnet_pool = subnets.pool_from_env(env)
    engine._subnet_lock = __import__("threading").Lock()
    engine._subnets_pending = set()
    return engine


OWNED = {"harness.owner": "skill-harness"}


def test_a_subnet_taken_between_look_and_create_is_replaced_by_the_next_free_one() -> None:
    fake = FakeDocker(steal=2)
    _engine(fake, {subnets.ENV: "10.9.0.0/26"}).create_network("n1", OWNED, internal=True)
    [(name, subnet)] = fake.created
    taken = [IPv4Network(n["IPAM"]["Config"][0]["Subnet"]) for n in fake.listed if n["Name"] != "n1"]
    assert name == "n1" and subnet is not None and len(taken) == 2
    assert not any(IPv4Network(subnet).overlaps(t) for t in taken)


def test_a_pool_covered_by_something_else_is_a_prerequisite_naming_it_and_the_setting() -> None:
    fake = FakeDocker([{"Name": "corp", "IPAM": {"Config": [{"Subnet": "10.9.0.0/24"}]}}])
    with pytest.raises(PrerequisiteError) as e:
        _engine(fake, {subnets.ENV: "10.9.0.0/26"}).create_network("n1", OWNED, internal=True)
    assert "network 'corp' (10.9.0.0/24)" in str(e.value) and subnets.ENV in str(e.value)
    assert fake.created == []


def test_a_pool_full_of_harness_networks_is_an_infra_error_pointing_at_gc() -> None:
    fake = FakeDocker()
    engine = _engine(fake, {subnets.ENV: "10.9.0.0/27"})  # two /28s
    engine.create_network("n1", OWNED, internal=True)
    engine.create_network("n2", OWNED, internal=True)
    with pytest.raises(InfraError) as e:
        engine.create_network("n3", OWNED, internal=True)
    assert "2 harness network(s)" in str(e.value) and "gc" in str(e.value)
    assert len({s for _, s in fake.created}) == 2


def test_a_runs_network_is_sized_for_every_gateway_of_the_run() -> None:
    fake = FakeDocker()
    _engine(fake, {}).create_network("up", OWNED, internal=True, hosts=subnets.RUN_HOSTS)
    [(_, subnet)] = fake.created
    assert subnet is not None and IPv4Network(subnet).prefixlen == 22


def test_the_engines_pools_on_request() -> None:
    fake = FakeDocker()
    _engine(fake, {subnets.ENV: "engine"}).create_network("n1", OWNED, internal=True)
    assert fake.created == [("n1", None)]
