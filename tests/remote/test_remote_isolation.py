"""The run-level isolation promises on an engine that shares no filesystem with the controller.

Runs on both engines (``make test`` runs it once more with ``--engine remote``): the gateway's key and
the skill copy reach their containers only as volumes filled through the archive API, so these hold on
a remote engine exactly as on the local one. Each container here is made from the harness's own role
specs (:mod:`harness.sandbox.roles`), hardened by the Engine; an agent-shaped container runs a probe in
place of the CLI:

- the key file is ``0400``, owned by the gateway's uid, in a volume mounted in the gateway only, and
  the gateway reads it (positive control: it listens);
- the agent (the trial image, the agent uid, on the trial's internal network) finds the key nowhere in
  its filesystem, cannot write to its read-only skill copy (which it can read: positive control), and
  reaches its gateway but not the upstream side;
- nothing is left on the engine afterwards (the conftest leak check, volumes included).

- a whole A/B trial runs there: its workspace, extraction and verify trees are volumes the engine makes
  (volume workspaces, :mod:`harness.trial.workspace`), not paths of the controller.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import tarfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from harness.sandbox import lifecycle, roles, volumes
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import RUN, make_labels
from harness.sandbox.runtime import ContainerSpec
from harness.study.config import Resources
from harness.trial import gateway, installed
from tests.integration.helpers import demo_task_scripts, run_experiment, write_experiment

pytestmark = [pytest.mark.docker]

SKILL = "careful-fixer"
PROBE = r"""
import json, os, socket, sys
out = {}
hits = []
for root, dirs, files in os.walk("/", onerror=lambda e: None):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev")]
    for f in files:
        p = os.path.join(root, f)
        try:
            with open(p, "rb") as fh:
                if sys.argv[1].encode() in fh.read(1 << 20):
                    hits.append(p)
        except OSError:
            pass
out["key_found_at"] = hits
out["run_harness_exists"] = os.path.exists("/run/harness")
skill = "/workspace/.claude/skills/SKILL_NAME"
out["skill_readable"] = open(skill + "/SKILL.md").read().startswith("# careful")
try:
    open(skill + "/planted.md", "w").write("x")
    out["skill_write"] = "written"
except OSError as e:
    out["skill_write"] = type(e).__name__ + ":" + str(e.errno)
def tcp(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "open"
    except OSError as e:
        return "blocked:" + type(e).__name__
out["gateway"] = tcp(sys.argv[2], 8080)
out["upstream_peer"] = tcp(sys.argv[3], 8080)
print(json.dumps(out))
""".replace("SKILL_NAME", SKILL)


@pytest.fixture
def run(engine: Engine, images: ImageSet) -> Iterator[dict[str, str]]:
    """A run's key and skill volumes, made as RunResources makes them; everything labelled goes after."""
    run_id = "rm" + secrets.token_hex(4)
    labels = make_labels(run_id, role="run", ttl_s=900)
    users = roles.role_users(engine, os.getuid(), os.getgid())
    key = "sk-ant-test-remote-" + secrets.token_hex(12)
    skill = volumes.tar_entries([volumes.Entry("SKILL.md", b"# careful\n", 0o444)])
    try:
        yield {
            "run_id": run_id,
            "key": key,
            "key_volume": volumes.make(
                engine, f"hx-{run_id}-key", roles.key_tar(key, users.sidecar), image=images.sidecar, labels=labels
            ),
            "skill_volume": volumes.make(engine, f"hx-{run_id}-skill", skill, image=images.sidecar, labels=labels),
            "sidecar_uid": str(users.sidecar[0]),
        }
    finally:
        lifecycle.remove_labelled(engine, {RUN: run_id})


def test_the_key_and_the_skill_copy_hold_on_this_engine(engine: Engine, images: ImageSet, run: dict[str, str]) -> None:
    run_id = run["run_id"]
    labels = make_labels(run_id, role="trial", trial_id="t", ttl_s=900)
    users = roles.role_users(engine, os.getuid(), os.getgid())
    profile = roles.make_profile(Resources(), images.trial, images.sidecar, users, None)
    up, net = f"hx-{run_id}-up", f"hx-{run_id}-t-net"
    engine.create_network(up, labels, internal=True)
    engine.create_network(net, labels, internal=True)
    gw = roles.gateway_spec(
        profile,
        name=f"hx-{run_id}-t-gateway",
        labels=labels,
        upstream_network=up,
        upstream="http://nowhere.invalid:8080",
        key_volume=run["key_volume"],
        budget_usd=0.1,
    )
    engine.create(gw, extra_networks=[net])
    engine.start(gw.name)
    gateway.wait_listening(engine, gw.name)  # positive control: it read its key
    archive = engine.get_archive(gw.name, roles.GATEWAY_KEY_PATH, cap=65536)
    assert archive is not None
    key_tar = archive.data
    with tarfile.open(fileobj=io.BytesIO(key_tar)) as tar:
        (member,) = tar.getmembers()
        assert (member.mode & 0o7777, member.uid) == (0o400, int(run["sidecar_uid"])), "the gateway's alone"
    gateway_ip = engine.container_ip(gw.name, net)
    upstream_ip = engine.container_ip(gw.name, up)
    agent: ContainerSpec = roles.trigger_agent_spec(
        profile,
        name=f"hx-{run_id}-t-agent",
        labels=labels,
        network=net,
        gateway_ip=gateway_ip,
        skill_volume=run["skill_volume"],
        skill_target=installed.skill_target(SKILL),
        command=("python3", "-c", PROBE, run["key"], gateway_ip, upstream_ip),
    )
    assert all(v.read_only for v in agent.volumes) and not agent.mounts
    res = lifecycle.run(engine, replace(agent, env={**agent.env, "HOME": "/home/agent"}), deadline_s=120)
    assert res.exit_code == 0, res.stderr[-2000:]
    seen = json.loads(res.stdout.decode().strip().splitlines()[-1])
    assert seen["key_found_at"] == [] and not seen["run_harness_exists"], seen
    assert seen["skill_readable"], "positive control: the skill copy is there"
    assert seen["skill_write"] in ("OSError:30", "PermissionError:13"), seen  # EROFS (or EACCES first)
    assert seen["gateway"] == "open", "positive control: its one peer"
    assert seen["upstream_peer"].startswith("blocked"), seen
    assert run["key"].encode() not in res.stdout + res.stderr


def test_a_whole_trial_runs_on_this_engine_without_a_path_of_the_controller(
    engine: Engine, images: ImageSet, tmp_path: Path
) -> None:
    """A whole A/B trial (workspace, agent, extraction, verify, judge) on an engine that shares no path
    with the controller: a remote engine picks volume workspaces by itself (a local one is told to, so
    the same path is tested on both); the fixed task passes verify, and nothing of the trial is a
    directory of the controller's or is left on the engine (the conftest leak check)."""
    from harness.demo import prepare_demo

    setup = prepare_demo(tmp_path / "demo")
    scripts = demo_task_scripts(setup.root)
    scenario = {"seed": 1, "tasks": {"fix-mean": {**scripts["fix-mean"], "arms": {"baseline": {"p_success": 1}}}}}
    prereg, scen = write_experiment(setup.root, "remote", tasks=["fix-mean"], scenario=scenario)
    work_root = tmp_path / "trials"
    work_root.mkdir(mode=0o700)
    env = {} if engine.endpoint().remote else {"HARNESS_WORKSPACE": "volume"}
    result = run_experiment(engine, prereg, scen, tmp_path / "out", work_root, jobs=1, env=env)
    (baseline,) = [r for r in result.records if r.arm == "baseline"]
    assert baseline.workspace == "volume", baseline.workspace
    assert baseline.status == "completed", baseline.error
    assert baseline.verify is not None and baseline.verify.exit_code == 0, baseline.verify
    assert baseline.patch is not None and baseline.patch.files_changed == 1 and baseline.patch.rejected is None
    assert not [f for f in baseline.flags if f.startswith("workspace_")], baseline.flags
    assert not list(work_root.glob("*/*/workspace")), "no trial directory was made on the controller"
