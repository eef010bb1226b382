"""Network attacks from inside agent containers: the trial's gateway is the only way out.

Two trials run at once (the two arms of one task); each agent learns its own
address and its gateway's, starts a listener, and (through the scripted API's
``{{probe:...}}`` hand-over) gets the other trial's addresses to attack. It also
attacks a canary container on a network the test made, a listener the test
binds to the host's 0.0.0.0, and DNS. Positive controls: each agent reaches its
own listener and its own gateway, before and again after the other trial's attack
(its last step waits for that attack's report, so "blocked" never means "already
torn down"); a container on a plain ``--internal`` network
(without ``inhibit_ipv4``) reaches the same host listener; a container on the
canary's network reaches the canary.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.sandbox import lifecycle
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import ContainerSpec, Limits
from tests.integration.helpers import latest, run_experiment
from tests.security.helpers import HostileTask, bash, probes, write_hostile

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CONNECT = r"""
import json, socket, struct, sys
def tcp(host, port):
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            s.sendall(b"HEAD /api/hello HTTP/1.0\r\n\r\n")
            return "open:" + s.recv(32).decode(errors="replace").split("\r\n")[0]
    except Exception as e:
        return "blocked:" + type(e).__name__
def resolve(name):
    try:
        return "resolved:" + socket.gethostbyname(name)
    except Exception as e:
        return "failed:" + type(e).__name__
def reverse(ip):
    try:
        return socket.gethostbyaddr(ip)[0]
    except Exception as e:
        return ""
"""

SELF = r"""
setsid nohup python3 -c 'import http.server as h; h.HTTPServer(("0.0.0.0", 9000), h.BaseHTTPRequestHandler).serve_forever()' >/dev/null 2>&1 &
sleep 0.5
python3 - <<'EOF'
import json, os, socket, urllib.parse
gw = urllib.parse.urlsplit(os.environ["ANTHROPIC_BASE_URL"]).hostname
print(json.dumps({"ip": socket.gethostbyname(socket.gethostname()), "gw": gw}))
EOF
"""


def attack_script(peer_probe: str, canary_ip: str, host_port: int, name: str) -> str:
    return (
        f"PEER='{{{{probe:{peer_probe}}}}}'\n"
        "python3 - \"$PEER\" <<'EOF'\n"
        + CONNECT
        + rf"""
import os, urllib.parse
peer = json.loads(sys.argv[1].strip().splitlines()[-1])
own_gw = urllib.parse.urlsplit(os.environ["ANTHROPIC_BASE_URL"]).hostname
own_ip = socket.gethostbyname(socket.gethostname())
bridge = None
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] != "00000000":
        ip = bytearray(bytes.fromhex(f[1])[::-1])
        ip[3] += 1
        bridge = socket.inet_ntoa(bytes(ip))
gw_name = reverse(own_gw)
out = {{
    "own_listener": tcp(own_ip, 9000),
    "own_gateway": tcp(own_gw, 8080),
    "peer_listener": tcp(peer["ip"], 9000),
    "peer_gateway": tcp(peer["gw"], 8080),
    "canary": tcp({canary_ip!r}, 8000),
    "host_via_bridge": tcp(bridge, {host_port}),
    "bridge": bridge,
    "dns_foreign": resolve("hx-probe-{name}.invalid"),
    "dns_gateway_name": gw_name,
    "dns_gateway": resolve(gw_name) if gw_name else "no-name",
    "ipv6": open("/proc/net/if_inet6").read().strip(),
    "default_route_gateway": [l.split()[2] for l in open("/proc/net/route").read().splitlines()[1:]
                              if l.split()[1] == "00000000"],
}}
print(json.dumps(out))
EOF
"""
    )


def alive_script(peer_attack_probe: str) -> str:
    """Held back by the scripted API until the other trial's attack has reported: this trial's own
    listener and gateway, checked after that attack, show they were up while it ran."""
    return (
        "cat > /tmp/peer-attack <<'HX_PEER_ATTACK'\n"
        f"{{{{probe:{peer_attack_probe}}}}}\n"
        "HX_PEER_ATTACK\n"
        "python3 - <<'EOF'\n"
        + CONNECT
        + """
import os, urllib.parse
own_gw = urllib.parse.urlsplit(os.environ["ANTHROPIC_BASE_URL"]).hostname
own_ip = socket.gethostbyname(socket.gethostname())
print(json.dumps({
    "peer_attack_seen": "peer_listener" in open("/tmp/peer-attack").read(),
    "own_listener": tcp(own_ip, 9000),
    "own_gateway": tcp(own_gw, 8080),
}))
EOF
"""
    )


@pytest.fixture(scope="module")
def host_listener() -> Iterator[int]:
    """A service on the host bound to 0.0.0.0 (what a developer's local dev server looks like)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 0))
    srv.listen(16)
    srv.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.sendall(b"HOST-LISTENER\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    srv.close()
    thread.join(timeout=5)


def _labels() -> dict[str, str]:
    return make_labels("sec-net", role="canary", ttl_s=900, purpose="test")


def _probe_container(engine: Engine, image: str, network: str, code: str) -> str:
    """Run a python snippet in a hardened container on ``network`` and return its stdout."""
    spec = ContainerSpec(
        name=f"hxsec-probe-{secrets.token_hex(4)}",
        image=image,
        command=("python3", "-c", CONNECT + code),
        labels=_labels(),
        user="1000:1000",
        network=network,
        limits=Limits(memory="256m", pids=64),
    )
    return lifecycle.run(engine, spec, deadline_s=60).stdout.decode(errors="replace")


@pytest.fixture(scope="module")
def canary(engine: Engine, images: ImageSet) -> Iterator[dict[str, str]]:
    net = f"hxsec-canary-{secrets.token_hex(3)}"
    name = f"{net}-srv"
    engine.create_network(net, _labels(), internal=True)
    try:
        spec = ContainerSpec(
            name=name,
            image=images.sidecar,
            command=("python3", "-m", "http.server", "8000", "--directory", "/tmp"),
            labels=_labels(),
            user="65534:65534",
            network=net,
            limits=Limits(memory="128m", pids=32),
        )
        engine.create(spec)
        engine.start(name)
        yield {"network": net, "ip": engine.container_ip(name, net)}
    finally:
        engine.remove_container(name)
        engine.remove_network(net)


@pytest.fixture(scope="module")
def network_attack(
    sec_setup: Path,
    engine: Engine,
    images: ImageSet,
    canary: dict[str, str],
    host_listener: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    return run_network_attack(sec_setup, engine, canary, host_listener, tmp_path_factory)


def run_network_attack(
    sec_setup: Path,
    engine: Engine,
    canary: dict[str, str],
    host_listener: int,
    tmp_path_factory: pytest.TempPathFactory,
    delivery: str = "prompt",
) -> dict[str, Any]:
    """Both arms attack each other, in the prompt delivery or the installed one (non-bare CLI)."""
    tmp = tmp_path_factory.mktemp("net")
    task = HostileTask(
        "net-probe",
        baseline=[
            bash(SELF, "self_baseline"),
            bash(attack_script("self_skill", canary["ip"], host_listener, "b"), "attack_baseline"),
            bash(alive_script("attack_skill"), "alive_baseline"),
        ],
        skill=[
            bash(SELF, "self_skill"),
            bash(attack_script("self_baseline", canary["ip"], host_listener, "s"), "attack_skill"),
            bash(alive_script("attack_baseline"), "alive_skill"),
        ],
    )
    prereg, scen = write_hostile(
        sec_setup,
        "network",
        [task],
        scenario_extra={"probe_wait_s": 90},
        budgets={"timeout_s": 240} if delivery == "installed" else None,
        execution_extra={"delivery": delivery},
    )
    work_root = tmp / "trials"
    work_root.mkdir(mode=0o700)
    result = run_experiment(engine, prereg, scen, tmp / "out", work_root, jobs=2)
    found = probes(tmp / "out")
    answers, alive = {}, {}
    for arm in ("baseline", "skill"):
        raw = found.get(("net-probe", arm, f"attack_{arm}"), "")
        answers[arm] = json.loads(raw.strip().splitlines()[-1]) if raw.strip() else {}
        raw = found.get(("net-probe", arm, f"alive_{arm}"), "")
        alive[arm] = json.loads(raw.strip().splitlines()[-1]) if raw.strip() else {}
    return {"result": result, "answers": answers, "alive": alive, "found": found}


def test_both_trials_ran_concurrently_and_completed(network_attack: dict[str, Any]) -> None:
    records = latest(network_attack["result"])
    assert {r.status for r in records.values()} == {"completed"}, [(r.trial_id, r.error) for r in records.values()]
    assert set(network_attack["answers"]) == {"baseline", "skill"} and all(network_attack["answers"].values())
    assert set(network_attack["alive"]) == {"baseline", "skill"} and all(network_attack["alive"].values())


@pytest.mark.parametrize("arm", ["baseline", "skill"])
def test_the_agent_reaches_its_gateway_and_nothing_else(network_attack: dict[str, Any], arm: str) -> None:
    a: dict[str, Any] = network_attack["answers"][arm]
    # positive controls: the probe can connect (its own listener, its own gateway)
    assert a["own_listener"].startswith("open:"), a
    assert a["own_gateway"].startswith("open:HTTP/1.1 200"), a
    # ... and the peer's listener and gateway were up while this attack ran: the peer checked them
    # after it (its last step waited for this attack's report)
    peer = network_attack["alive"]["skill" if arm == "baseline" else "baseline"]
    assert peer["peer_attack_seen"] is True, peer
    assert peer["own_listener"].startswith("open:"), peer
    assert peer["own_gateway"].startswith("open:HTTP/1.1 200"), peer
    # the other trial's agent and gateway, a canary on another network, the host's 0.0.0.0
    for target in ("peer_listener", "peer_gateway", "canary", "host_via_bridge"):
        assert a[target].startswith("blocked:"), (target, a)
    assert a["ipv6"] == "", "no IPv6 on the agent's network"


@pytest.mark.parametrize("arm", ["baseline", "skill"])
def test_dns_resolves_nothing_foreign(network_attack: dict[str, Any], arm: str) -> None:
    a = network_attack["answers"][arm]
    assert a["dns_gateway_name"], "positive control: the embedded resolver answers for the trial's own gateway"
    assert a["dns_gateway"].startswith("resolved:"), a
    assert a["dns_foreign"].startswith("failed:"), a


@pytest.mark.local_engine("the listener is on the controller's machine, which is not a remote engine's host")
def test_positive_control_a_plain_internal_network_reaches_the_host(
    engine: Engine, images: ImageSet, host_listener: int
) -> None:
    """Engine 20.10: --internal alone lets a container reach a service on the host's 0.0.0.0
    through the bridge address; the harness's networks (inhibit_ipv4) do not."""
    results = {}
    for isolated in (False, True):
        net = f"hxsec-plain-{secrets.token_hex(3)}"
        engine.create_network(net, _labels(), internal=True, isolated=isolated)
        try:
            ipam = engine.client.api.inspect_network(net)["IPAM"]["Config"][0]
            gw = ipam.get("Gateway") or ipam["Subnet"].rsplit(".", 1)[0] + ".1"
            results[isolated] = _probe_container(
                engine, images.trial, net, f"print(tcp({gw!r}, {host_listener}))"
            ).strip()
        finally:
            engine.remove_network(net)
    assert results[False].startswith("open:HOST-LISTENER"), results
    assert results[True].startswith("blocked:"), results


def test_positive_control_the_canary_answers_on_its_own_network(
    engine: Engine, images: ImageSet, canary: dict[str, str]
) -> None:
    out = _probe_container(engine, images.trial, canary["network"], f"print(tcp({canary['ip']!r}, 8000))")
    assert out.strip().startswith("open:"), out


NO_NETWORK_PROBE = r"""
import threading
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
def answer():
    conn, _ = srv.accept(); conn.recv(64); conn.sendall(b"LOOPBACK\r\n"); conn.close()
threading.Thread(target=answer, daemon=True).start()
print(json.dumps({
    "interfaces": sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]),
    "routes": open("/proc/net/route").read().splitlines()[1:],
    "loopback": tcp("127.0.0.1", port),
    "canary": tcp(CANARY, 8000),
    "ipv6": open("/proc/net/if_inet6").read().strip(),
}))
"""


def test_a_no_network_container_has_its_loopback_and_nothing_else(
    engine: Engine, images: ImageSet, canary: dict[str, str]
) -> None:
    """Collect, verify and the engine watchdog run on ``network="none"``, which the engine makes with no
    network sandbox at all (issue 27: it saves dockerd's two re-executions per start). Attacked from inside:
    no interface but loopback, no route, the canary (up: the positive control above reaches it on its own
    network) out of reach; and a task's tests that serve on 127.0.0.1 still work."""
    name = f"hxsec-none-{secrets.token_hex(4)}"
    spec = ContainerSpec(
        name=name,
        image=images.trial,
        command=("python3", "-c", CONNECT + f"CANARY = {canary['ip']!r}\n" + NO_NETWORK_PROBE),
        labels=_labels(),
        user="1000:1000",
        network="none",
        limits=Limits(memory="256m", pids=64),
    )
    engine.create(spec)
    try:
        config = engine.client.api.inspect_container(name)
        engine.start(name)
        engine.wait(name, 60)
        out = engine.output(name, stdout_cap=65536, stderr_cap=65536)[0].data.decode(errors="replace")
    finally:
        engine.remove_container(name)
    assert config["Config"].get("NetworkDisabled") is True, "the cut holds: no network sandbox for this container"
    assert config["HostConfig"]["NetworkMode"] == "none"
    a = json.loads(out.strip().splitlines()[-1])
    assert a["interfaces"] == ["lo"], a
    assert a["routes"] == [], a
    assert a["loopback"] == "open:LOOPBACK", a  # positive control: the probe's connect works where it may
    assert a["canary"].startswith("blocked:"), a
    assert a["ipv6"] in ("", "00000000000000000000000000000001 01 80 10 80       lo"), a
