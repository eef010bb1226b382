"""Where the addresses of each harness network come from: a small subnet the harness picks itself, from a
private range of its own, so that any number of trials can run at once on any engine, unconfigured.

Why not the engine's pools: a stock engine hands each new bridge network a whole subnet from its default
address pools (172.17-31.0.0/16 and 192.168.0.0/16 in /20s: about 30 networks, fewer once other software
took some), and a trial needs a network of its own. 32 trials at once would fail on the 31st network with
"could not find an available, non-overlapping IPv4 address pool". Raising the pools means editing the
user's ``daemon.json`` and restarting their engine, which the harness must never do (and cannot, on a
remote engine or Docker Desktop). A network created with an explicit subnet takes nothing from those pools,
on every engine version, local or remote.

So every network the harness makes gets one ``/28`` (16 addresses: a trial network holds its gateway, its
agent and then its judge) from ``HARNESS_SUBNET_POOL`` (default :data:`DEFAULT_POOL`, 4096 of them), or as
many ``/28`` s together as its members need (a run's upstream network, which every gateway of the run
joins, takes a ``/22``: :data:`RUN_HOSTS`). A
subnet is used only when it overlaps none of the engine's networks (whoever made them) and none of this
host's routes but the default route (a VPN or a LAN the host reaches directly); when the pool is covered,
the error says by what and names the setting. ``HARNESS_SUBNET_POOL=engine`` gives the choice back to the
engine's pools. Nothing about isolation changes: the networks are still ``--internal`` bridges without an
IPv4 address of their own (``inhibit_ipv4``), which is what keeps a container from the host and from other
networks (tests/security/test_network.py); the subnet only decides which addresses the containers get.

Everything here is pure but :func:`host_routes`, which reads ``/proc/net/route``.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path

from harness.errors import ConfigError

ENV = "HARNESS_SUBNET_POOL"
DEFAULT_POOL = "10.213.0.0/16"
"""Private (RFC 1918), outside the engine's default pools, and outside the ranges the common cloud and
Kubernetes defaults use (10.0/16, 10.96/12, 10.244/16, 10.42/15, 10.128.0.0/20 steps); checked anyway."""
PREFIX = 28
RFC1918 = tuple(IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
ENGINE_POOLS = "engine"
TRIAL_HOSTS = 13
"""A trial's network: its gateway, its agent and then its judge (a /28 holds 13 containers)."""
RUN_HOSTS = 1021
"""A run's upstream network: every trial's gateway at once, the scripted API, the preflight (a /22)."""
ROUTES = Path("/proc/net/route")


@dataclass(frozen=True)
class SubnetPool:
    """The range every harness network takes its ``/prefix`` from; ``range`` None: the engine's own pools."""

    range: IPv4Network | None
    prefix: int = PREFIX

    def describe(self) -> str:
        if self.range is None:
            return f"the engine's default address pools ({ENV}={ENGINE_POOLS})"
        return f"/{self.prefix} subnets of {self.range} ({self.size()} networks; {ENV})"

    def size(self) -> int:
        return 0 if self.range is None else 1 << (self.prefix - self.range.prefixlen)


def pool_from_env(env: Mapping[str, str]) -> SubnetPool:
    """``HARNESS_SUBNET_POOL``: a private IPv4 range of at least one ``/28``, or ``engine``; unset: the default."""
    text = env.get(ENV, "").strip() or DEFAULT_POOL
    if text == ENGINE_POOLS:
        return SubnetPool(None)
    try:
        net = IPv4Network(text, strict=True)
    except ValueError as e:
        raise ConfigError(
            ENV, f"{text!r} is not an IPv4 range like {DEFAULT_POOL} ({e})", hint=f"or {ENV}={ENGINE_POOLS}"
        ) from None
    if not any(net.subnet_of(private) for private in RFC1918):
        raise ConfigError(ENV, f"{text} is not a private range (inside 10/8, 172.16/12 or 192.168/16)")
    if net.prefixlen > PREFIX:
        raise ConfigError(ENV, f"{text} is smaller than one /{PREFIX} network (16 addresses)")
    return SubnetPool(net)


def parse_routes(text: str) -> list[IPv4Network]:
    """The destinations of ``/proc/net/route`` (little-endian hex), the default route left out: a subnet
    behind the default route is no more reachable from a harness network than any other address."""
    out: list[IPv4Network] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            dest = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
            mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
            net = IPv4Network(f"{dest}/{mask}", strict=False)
        except ValueError:
            continue
        if net.prefixlen > 0:
            out.append(net)
    return out


def host_routes(path: Path = ROUTES) -> list[IPv4Network]:
    """This host's IPv4 routes (none where the file does not exist: not Linux, or no /proc)."""
    try:
        return parse_routes(path.read_text(encoding="ascii", errors="replace"))
    except OSError:
        return []


def engine_subnets(networks: Iterable[Mapping[str, object]]) -> list[tuple[str, IPv4Network]]:
    """(network name, IPv4 subnet) of every network in an engine's network list (``GET /networks``)."""
    out: list[tuple[str, IPv4Network]] = []
    for n in networks:
        ipam = n.get("IPAM")
        configs = ipam.get("Config") if isinstance(ipam, dict) else None
        for c in configs if isinstance(configs, list) else []:
            subnet = c.get("Subnet") if isinstance(c, dict) else None
            try:
                net = ipaddress.ip_network(str(subnet), strict=False)
            except ValueError:
                continue
            if isinstance(net, IPv4Network):
                out.append((str(n.get("Name", "")), net))
    return out


def prefix_for(pool: SubnetPool, hosts: int) -> int:
    """The longest prefix (at most the pool's ``/prefix``) whose subnet holds ``hosts`` containers beside the
    network's own address, its broadcast and the bridge's reserved gateway address."""
    prefix = pool.prefix
    while prefix > 0 and (1 << (32 - prefix)) - 3 < hosts:
        prefix -= 1
    return prefix


def candidates(pool: SubnetPool, key: str, prefix: int | None = None) -> Iterator[IPv4Network]:
    """Every ``/prefix`` (default the pool's) of the pool once, starting at a place the key (the network's
    name) picks: two processes making networks at the same moment rarely try the same subnet first."""
    assert pool.range is not None
    prefix = pool.prefix if prefix is None else prefix
    if prefix < pool.range.prefixlen:
        return
    count = 1 << (prefix - pool.range.prefixlen)
    start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count
    base = int(pool.range.network_address)
    step = 1 << (32 - prefix)
    for i in range(count):
        yield IPv4Network((base + ((start + i) % count) * step, prefix))


def choose(pool: SubnetPool, key: str, taken: Iterable[IPv4Network], prefix: int | None = None) -> IPv4Network | None:
    """The first candidate (:func:`candidates`) overlapping nothing in ``taken``; None when none is left."""
    blocked = sorted({t for t in taken if pool.range is not None and t.overlaps(pool.range)}, key=lambda t: t.prefixlen)
    for subnet in candidates(pool, key, prefix):
        if not any(subnet.overlaps(t) for t in blocked):
            return subnet
    return None


def gateway_address(subnet: IPv4Network) -> str:
    """The address the engine reserves for the bridge (the first host): with ``inhibit_ipv4`` the bridge
    never takes it, but naming it keeps ``docker network inspect`` showing where it would be."""
    return str(next(subnet.hosts()))


def conflicts(
    pool: SubnetPool, routes: Iterable[IPv4Network], networks: Iterable[tuple[str, IPv4Network]]
) -> list[str]:
    """What else uses addresses of the pool: a host route or a network of the engine, one line each
    (networks the harness made itself are the caller's to leave out)."""
    if pool.range is None:
        return []
    out = [f"route {r} on this host" for r in routes if r.overlaps(pool.range)]
    out += [f"network {name!r} ({net}) of the engine" for name, net in networks if net.overlaps(pool.range)]
    return out


def exhausted_message(pool: SubnetPool, in_use: int, foreign: list[str], prefix: int | None = None) -> str:
    """Why no subnet was free: the harness's own networks fill the pool, or something else covers it."""
    what = (
        f"no free /{pool.prefix if prefix is None else prefix} left in {pool.range}: {in_use} harness network(s) use it"
    )
    if foreign:
        what += "; also in it: " + "; ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
    return what
