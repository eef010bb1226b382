"""The attack suite against the non-bare CLI of the installed delivery.

The same hostile experiments as ``test_sandbox.py`` and ``test_network.py`` (their
fixtures' bodies, run with ``execution.delivery: installed``), and their
delivery-independent tests imported here, so they run against these fixtures: the
container's hardening seen from inside and in ``docker inspect``, the network (each
agent reaches its own gateway and nothing else, DNS), the key (only in the gateway,
never in results, artifacts or logs). The mounts differ by design: the skill arm has
the skill read-only at ``/workspace/.claude/skills/careful-fixer`` instead of ``/skill``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.integration.helpers import latest
from tests.security.helpers import kv
from tests.security.test_network import (  # noqa: F401  (fixtures and tests run here against the installed delivery)
    canary,
    host_listener,
    run_network_attack,
    test_dns_resolves_nothing_foreign,
    test_the_agent_reaches_its_gateway_and_nothing_else,
)
from tests.security.test_sandbox import (  # noqa: F401
    _probe,
    run_attacked,
    test_agent_is_unprivileged_from_inside,
    test_gateway_forwards_only_the_messages_api_and_records_every_refusal,
    test_only_workspace_tmp_home_and_the_private_ipc_mounts_are_writable,
    test_privilege_escalation_attempts_fail,
    test_the_gateway_replaced_every_client_key_with_the_real_one,
    test_the_host_environment_is_not_passed_through,
    test_the_key_is_in_the_gateway_and_nowhere_in_the_agent,
    test_the_key_never_reaches_results_artifacts_or_logs,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TARGET = "/workspace/.claude/skills/careful-fixer"


@pytest.fixture(scope="module")
def attacked(
    sec_setup: Path, engine: Engine, images: ImageSet, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    return run_attacked(sec_setup, engine, images, tmp_path_factory, delivery="installed")


@pytest.fixture(scope="module")
def network_attack(
    sec_setup: Path,
    engine: Engine,
    images: ImageSet,
    canary: dict[str, str],  # noqa: F811  (the imported fixtures, requested by name)
    host_listener: int,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    return run_network_attack(sec_setup, engine, canary, host_listener, tmp_path_factory, delivery="installed")


def test_every_trial_ran_the_non_bare_cli(attacked: dict[str, Any], network_attack: dict[str, Any]) -> None:
    for result in (attacked["result"], network_attack["result"]):
        for r in latest(result).values():
            assert r.status == "completed", (r.trial_id, r.status, r.error)
            assert r.provenance.delivery == "installed" and r.skill is not None and r.skill.delivery == "installed"
            assert r.skill.listed is (r.arm == "skill"), (r.trial_id, r.skill)
    for data in attacked["inspector"].by_role("agent"):
        argv = data["Config"]["Cmd"]
        assert "claude" in argv and "--bare" not in argv, argv
        assert argv[argv.index("--setting-sources") + 1] == "project" and "--strict-mcp-config" in argv


@pytest.mark.parametrize("arm", ["baseline", "skill"])
def test_mounts_are_the_workspace_and_in_the_skill_arm_the_read_only_skill(attacked: dict[str, Any], arm: str) -> None:
    mounts: dict[str, tuple[str, set[str]]] = {}
    for line in _probe(attacked, "sec-container", "mounts", arm).splitlines():
        parts = line.split()
        if len(parts) >= 4:
            mounts[parts[1]] = (parts[2], set(parts[3].split(",")))
    docker_managed = {"/etc/resolv.conf", "/etc/hostname", "/etc/hosts", "/usr/sbin/docker-init"}
    own = {m for m in mounts if not m.startswith(("/proc", "/sys", "/dev")) and m != "/" and m not in docker_managed}
    assert own == {"/tmp", "/home/agent", "/workspace"} | ({TARGET} if arm == "skill" else set()), sorted(own)
    assert "ro" in mounts["/"][1] and "rw" in mounts["/workspace"][1]
    if arm == "skill":
        assert "ro" in mounts[TARGET][1]
    for data in attacked["inspector"].by_role("agent"):
        hc, arm_of = data["HostConfig"], data["Config"]["Labels"]["harness.trial"].split(".")[-2]
        assert hc["CapDrop"] == ["ALL"] and hc["ReadonlyRootfs"] is True and hc["SecurityOpt"] == ["no-new-privileges"]
        dests = {m["Destination"]: m["RW"] for m in data["Mounts"]}
        assert dests == ({"/workspace": True, TARGET: False} if arm_of == "skill" else {"/workspace": True}), dests
        for m in data["Mounts"]:
            if m["Destination"] == TARGET:
                # a copy in a volume of this run (filled through the archive API), never the user's directory
                assert m["Type"] == "volume" and m["Name"].startswith("hx-"), m


@pytest.mark.parametrize("arm", ["baseline", "skill"])
def test_no_docker_socket_and_only_the_clis_own_socket(attacked: dict[str, Any], arm: str) -> None:
    """Without --bare the CLI binds its own IPC socket under /tmp/cc-socks (the container's private
    tmpfs); nothing else is a socket, and no engine socket is reachable."""
    seen = kv(_probe(attacked, "sec-container", "sockets", arm))
    assert seen["control_socket"] == "found", "positive control: the probe detects a socket that exists"
    assert seen["docker_sock"] == "0"
    sockets = seen["sockets"].split()
    assert all(s.startswith("/tmp/cc-socks/") and s.endswith(".sock") for s in sockets), sockets
