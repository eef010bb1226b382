"""What each container of a trial is: image, command, mounts, network, environment.

One function per role. The hardening every container gets (user, capabilities,
seccomp, read-only root, limits, init, logs) is applied by
:class:`harness.sandbox.engine.Engine` itself; this module decides only what differs
between roles. Nothing from the host environment is passed through: each role's
environment is written out here in full.

Roles and their only mounts:

    agent         /workspace (rw, the trial's copy)  /skill (ro, a copy; skill arm only)
    collect       /base (ro)  /workspace (ro)  /out (rw, fresh)  /verify (rw, fresh)   --network none
                  (volume workspaces: /base, /workspace (ro)  /trial (rw: scratch)  /verify (rw))
    watch         /trial (ro: a volume workspace's scratch; the in-engine watchdog)    --network none
    verify        /workspace (rw, base + patch, protected paths restored)               --network none
    judge         none
    gateway       /run/harness/key (ro volume: the key, 0400, the gateway's uid)  /run/harness/route (ro
                  volume: the extra CA; real runs with --upstream-ca only)
    scripted API  /etc/scripted (ro volume: the scenario)

Every mount but the trial's trees is a volume the run filled through the archive API
(:mod:`harness.sandbox.volumes`), never a path of the controller's: the skill copies (``/skill``,
``/skills/<name>``, ``/workspace/.claude/skills/<name>``) as well. The trees (workspace, collect's,
verify's) are directories of the controller's on a local engine and volumes on a remote one
(:mod:`harness.trial.workspace`): a role's tree is a ``Path`` (bind mount) or a ``str`` (volume name).

The agent and the judge are on the trial's internal network, and their DNS
upstream is their gateway (which serves no DNS): Docker's embedded resolver
answers for the trial's own containers and fails every other name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from harness.errors import HarnessError, PrerequisiteError
from harness.sandbox import uids, volumes
from harness.sandbox.deadline import deadline_argv
from harness.sandbox.labels import ROLE
from harness.sandbox.runtime import BindMount, ContainerRuntime, ContainerSpec, Limits, VolumeMount
from harness.study.config import Resources, parse_size

KEY_MOUNT = "/run/harness/key"
"""Where the gateway's key volume is mounted (its only file is the key)."""
GATEWAY_KEY_PATH = f"{KEY_MOUNT}/api-key"
SCENARIO_MOUNT = "/etc/scripted"
SCRATCH_MOUNT = "/trial"
"""Where collect and the in-engine watchdog mount a volume workspace's scratch volume."""
GATEWAY_PORT = 8080
SCRIPTED_PORT = 8080
PLACEHOLDER_KEY = "placeholder-the-gateway-injects-the-real-key"
"""The only credential an agent container ever holds."""


def key_tar(key: str, owner: tuple[int, int]) -> bytes:
    """The key volume's content: the key, readable by the gateway's uid (``owner``) and no one else."""
    return volumes.tar_entries([volumes.Entry("api-key", key.encode(), 0o400, *owner)])


def scenario_tar(scenario: bytes) -> bytes:
    """The scripted API's volume: the compiled scenario, root's, world-readable (it holds no secret)."""
    return volumes.tar_entries([volumes.Entry("scenario.json", scenario, 0o444)])


def collect_script() -> str:
    return resources.files("harness.sidecars").joinpath("collect.sh").read_text(encoding="utf-8")


GATEWAY_LIMITS = Limits(memory="256m", cpus=0.5, pids=64, tmpfs_size="16m")
WATCH_LIMITS = Limits(memory="128m", cpus=0.5, pids=32, tmpfs_size="1m")


def trial_memory_limits(resources: Resources) -> int:
    """The memory limits one trial holds at one moment: its agent's (the preregistered limit), its
    gateway's and its workspace watchdog's; collect, verify and the judge run only after the agent."""
    return parse_size(resources.memory) + parse_size(GATEWAY_LIMITS.memory) + parse_size(WATCH_LIMITS.memory)


@dataclass(frozen=True)
class Profile:
    """Settings shared by every container of one experiment run."""

    trial_image: str
    sidecar_image: str
    limits: Limits
    user: str
    """uid:gid the untrusted containers run as (the host user's; with a root controller an id no
    host account uses, see :mod:`harness.sandbox.uids`)."""
    sidecar_user: str
    runtime: str | None = None
    codex_image: str | None = None
    """The Codex CLI's image (``harness-codex:<hash>``), when the run's agent is Codex (issue 30)."""


def role_users(engine: ContainerRuntime, euid: int, egid: int) -> uids.RoleUsers:
    """The uids the run's roles use: ids no host account uses (issue 14), or the engine's remapping."""
    try:
        options = engine.info().security_options
    except HarnessError:  # no engine info: no remapping assumed, so host-unused ids are picked
        options = ()
    try:
        return uids.role_users(euid=euid, egid=egid, security_options=options)
    except ValueError as e:
        raise PrerequisiteError(f"no uid for the containers: {e}", hint="see `skilltrial doctor`") from None


def make_profile(
    resources: Resources, trial_image: str, sidecar_image: str, users: uids.RoleUsers, runtime: str | None
) -> Profile:
    """The hardening profile of every container of one run: A/B trials, preflight, trigger runs."""
    (uid, gid), (suid, sgid) = users.agent, users.sidecar
    return Profile(
        trial_image=trial_image,
        sidecar_image=sidecar_image,
        limits=Limits(
            memory=resources.memory,
            cpus=resources.cpus,
            pids=resources.pids,
            nofile=resources.nofile,
            fsize_bytes=parse_size(resources.max_file_size),
            tmpfs_size=resources.tmpfs_size,
        ),
        user=f"{uid}:{gid}",
        sidecar_user=f"{suid}:{sgid}",
        runtime=runtime,
    )


def claude_env(gateway_ip: str) -> dict[str, str]:
    """The complete environment of a CLI container: nothing is inherited from the host."""
    return {
        "HOME": "/home/agent",
        "CLAUDE_CONFIG_DIR": "/home/agent/.claude",
        "ANTHROPIC_BASE_URL": f"http://{gateway_ip}:{GATEWAY_PORT}",
        "ANTHROPIC_API_KEY": PLACEHOLDER_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
    }


def tree_mount(
    tree: Path | str, target: str, *, read_only: bool
) -> tuple[tuple[BindMount, ...], tuple[VolumeMount, ...]]:
    """A trial tree at ``target``: a directory of the controller's (bind mount: local engines only) or a
    volume's name. Returns (bind mounts, volume mounts), one of them empty."""
    if isinstance(tree, str):
        return (), (VolumeMount(tree, target, read_only=read_only),)
    return (BindMount(tree, target, read_only=read_only),), ()


def _claude_spec(
    p: Profile,
    *,
    name: str,
    labels: Mapping[str, str],
    network: str,
    gateway_ip: str,
    command: Sequence[str],
    mounts: tuple[BindMount, ...],
    workdir: str,
    volumes: tuple[VolumeMount, ...] = (),
    image: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ContainerSpec:
    """A container running a coding agent's CLI (Claude Code unless ``image`` and ``env`` say another's): its
    only peer is the gateway, which is also its DNS upstream (and serves none, so no name outside the trial
    resolves)."""
    return ContainerSpec(
        name=name,
        image=image or p.trial_image,
        command=tuple(command),
        labels=labels,
        user=p.user,
        env=dict(env) if env is not None else claude_env(gateway_ip),
        mounts=mounts,
        volumes=volumes,
        network=network,
        limits=p.limits,
        tmpfs=("/tmp", "/home/agent"),
        workdir=workdir,
        runtime=p.runtime,
        dns=(gateway_ip,),
    )


def agent_spec(
    p: Profile,
    *,
    name: str,
    labels: Mapping[str, str],
    network: str,
    gateway_ip: str,
    workspace: Path | str,
    skill_volume: str | None,
    command: Sequence[str],
    skill_mounts: Sequence[VolumeMount] = (),
    skill_target: str = "/skill",
    image: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ContainerSpec:
    """``skill_volume``: the run's read-only skill copy (skill arm only). ``skill_mounts``: a library
    experiment's masked arm, read-only copies under /skills/ (harness.trial.delivery).
    ``skill_target``: where the read-only skill copy is mounted (the installed delivery mounts it
    at ``/workspace/.claude/skills/<name>``, see :mod:`harness.trial.installed`). ``image``, ``env``: the
    agent's (:mod:`harness.trial.agents`; default Claude Code's)."""
    binds, trees = tree_mount(workspace, "/workspace", read_only=False)
    skills = [VolumeMount(skill_volume, skill_target, read_only=True)] if skill_volume is not None else []
    skills.extend(skill_mounts)
    return _claude_spec(
        p,
        name=name,
        labels={**labels, ROLE: "agent"},
        network=network,
        gateway_ip=gateway_ip,
        command=command,
        mounts=binds,
        volumes=(*trees, *skills),
        workdir="/workspace",
        image=image,
        env=env,
    )


def trigger_agent_spec(
    p: Profile,
    *,
    name: str,
    labels: Mapping[str, str],
    network: str,
    gateway_ip: str,
    skill_volume: str,
    skill_target: str,
    command: Sequence[str],
) -> ContainerSpec:
    """A trigger run's agent (:mod:`harness.experiment.triggers`): the installed skill arm on an empty
    ``/workspace`` tmpfs of the container user (nothing is extracted from it, so it needs no volume and
    is bounded by the tmpfs size), with the skill's read-only volume mounted inside it."""
    spec = _claude_spec(
        p,
        name=name,
        labels={**labels, ROLE: "agent"},
        network=network,
        gateway_ip=gateway_ip,
        command=command,
        mounts=(),
        volumes=(VolumeMount(skill_volume, skill_target, read_only=True),),
        workdir="/workspace",
    )
    return dataclasses.replace(spec, tmpfs=(*spec.tmpfs, "/workspace"))


def collect_spec(
    p: Profile,
    *,
    name: str,
    labels: Mapping[str, str],
    base: Path,
    workspace: Path,
    out: Path,
    verify_tree: Path,
    protected: Sequence[str],
    patch_cap: int,
    incremental: tuple[Path, Path] | None = None,
) -> ContainerSpec:
    """``incremental``: (the controller's change lists, the base index) of an overlay workspace, for
    collect.sh's incremental mode; None for the full one."""
    env: dict[str, str] = {}
    extra: tuple[BindMount, ...] = ()
    if incremental is not None:
        env["COLLECT_CHANGES"] = "/changes"
        extra = (
            BindMount(incremental[0], "/changes", read_only=True),
            BindMount(incremental[1], "/basegit", read_only=True),
        )
    binds = (
        BindMount(base, "/base", read_only=True),
        BindMount(workspace, "/workspace", read_only=True),
        BindMount(out, "/out", read_only=False),
        BindMount(verify_tree, "/verify", read_only=False),
        *extra,
    )
    return _collect(p, name=name, labels=labels, protected=protected, patch_cap=patch_cap, env=env, binds=binds)


def collect_volume_spec(
    p: Profile,
    *,
    name: str,
    labels: Mapping[str, str],
    base_volume: str,
    workspace_volume: str,
    scratch_volume: str,
    verify_volume: str,
    protected: Sequence[str],
    patch_cap: int,
) -> ContainerSpec:
    """collect.sh on a volume workspace (:mod:`harness.trial.workspace`): it lists the overlay's upper
    directory itself and writes its outputs into the scratch volume's ``out/``, which the controller
    copies out as one archive after it exited."""
    env = {
        "COLLECT_UPPER": f"{SCRATCH_MOUNT}/upper",
        "COLLECT_OUT": f"{SCRATCH_MOUNT}/out",
        "COLLECT_BASEGIT": "/base/.git",
    }
    trees = (
        VolumeMount(base_volume, "/base", read_only=True),
        VolumeMount(workspace_volume, "/workspace", read_only=True),
        VolumeMount(scratch_volume, SCRATCH_MOUNT, read_only=False),
        VolumeMount(verify_volume, "/verify", read_only=False),
    )
    return _collect(p, name=name, labels=labels, protected=protected, patch_cap=patch_cap, env=env, trees=trees)


def _collect(
    p: Profile,
    *,
    name: str,
    labels: Mapping[str, str],
    protected: Sequence[str],
    patch_cap: int,
    env: Mapping[str, str],
    binds: tuple[BindMount, ...] = (),
    trees: tuple[VolumeMount, ...] = (),
) -> ContainerSpec:
    """collect.sh in a fresh ``--network none`` container of the agent's uid, on the given trees."""
    return ContainerSpec(
        name=name,
        image=p.trial_image,
        command=("sh", "-c", collect_script(), "collect", *protected),
        labels={**labels, ROLE: "collect"},
        user=p.user,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "COLLECT_PATCH_CAP": str(patch_cap), "LANG": "C.UTF-8", **env},
        mounts=binds,
        volumes=trees,
        network="none",
        limits=p.limits,
        tmpfs=("/tmp",),
        workdir="/",
        runtime=p.runtime,
    )


def watch_spec(
    p: Profile, *, name: str, labels: Mapping[str, str], scratch_volume: str, command: Sequence[str]
) -> ContainerSpec:
    """The in-engine workspace watchdog of a volume workspace (:class:`harness.trial.watchdog.EngineWatchdog`):
    the agent's uid, the scratch volume read-only, no network, a small share of the machine."""
    return ContainerSpec(
        name=name,
        image=p.trial_image,
        command=tuple(command),
        labels={**labels, ROLE: "watch"},
        user=p.user,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"},
        volumes=(VolumeMount(scratch_volume, SCRATCH_MOUNT, read_only=True),),
        network="none",
        limits=WATCH_LIMITS,
        tmpfs=("/tmp",),
        workdir="/",
        runtime=p.runtime,
    )


def verify_spec(
    p: Profile, *, name: str, labels: Mapping[str, str], verify_tree: Path | str, verify_cmd: str, timeout_s: int
) -> ContainerSpec:
    """``verify_tree``: a directory of the controller's, or the name of a volume (the preflight's, a
    volume workspace's)."""
    binds, trees = tree_mount(verify_tree, "/workspace", read_only=False)
    return ContainerSpec(
        name=name,
        image=p.trial_image,
        command=(*deadline_argv(timeout_s), "sh", "-c", verify_cmd),
        labels={**labels, ROLE: "verify"},
        user=p.user,
        env={
            "HOME": "/home/agent",
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "CI": "1",
        },
        mounts=binds,
        volumes=trees,
        network="none",
        limits=p.limits,
        tmpfs=("/tmp", "/home/agent"),
        workdir="/workspace",
        runtime=p.runtime,
    )


def judge_spec(
    p: Profile, *, name: str, labels: Mapping[str, str], network: str, gateway_ip: str, command: Sequence[str]
) -> ContainerSpec:
    """No mounts at all: the judge sees only its prompt."""
    return _claude_spec(
        p,
        name=name,
        labels={**labels, ROLE: "judge"},
        network=network,
        gateway_ip=gateway_ip,
        command=command,
        mounts=(),
        workdir="/tmp",
    )


def gateway_spec(
    p: Profile,
    *,
    name: str,
    labels: Mapping[str, str],
    upstream_network: str,
    upstream: str,
    key_volume: str,
    budget_usd: float,
    route_env: Mapping[str, str] | None = None,
    route_volumes: tuple[VolumeMount, ...] = (),
) -> ContainerSpec:
    """``key_volume``: the run's key volume (:data:`KEY_MOUNT`). ``route_env`` / ``route_volumes``: the real
    run's upstream route (proxy, extra CA), see :mod:`harness.experiment.upstream`; they reach the
    gateway only, never the agent."""
    env = {
        "GATEWAY_KEY_FILE": GATEWAY_KEY_PATH,
        "GATEWAY_BUDGET_USD": f"{budget_usd:g}",
        "GATEWAY_PORT": str(GATEWAY_PORT),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "SSL_CERT_FILE": "/etc/harness/ca-bundle.crt",
        **(route_env or {}),
        "GATEWAY_UPSTREAM": upstream,
    }
    return ContainerSpec(
        name=name,
        image=p.sidecar_image,
        command=("python3", "/opt/harness/gateway.py"),
        labels={**labels, ROLE: "gateway"},
        user=p.sidecar_user,
        env=env,
        volumes=(VolumeMount(key_volume, KEY_MOUNT, read_only=True), *route_volumes),
        network=upstream_network,
        limits=GATEWAY_LIMITS,
        tmpfs=("/tmp",),
        workdir="/tmp",
    )


def scripted_api_spec(
    p: Profile, *, name: str, labels: Mapping[str, str], network: str, scenario_volume: str
) -> ContainerSpec:
    """``scenario_volume``: holds ``scenario.json`` (:func:`scenario_tar`); its audit log is its stdout."""
    return ContainerSpec(
        name=name,
        image=p.sidecar_image,
        command=("python3", "/opt/harness/scripted_api.py", f"{SCENARIO_MOUNT}/scenario.json", str(SCRIPTED_PORT)),
        labels={**labels, ROLE: "scripted-api"},
        user=p.sidecar_user,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        volumes=(VolumeMount(scenario_volume, SCENARIO_MOUNT, read_only=True),),
        network=network,
        limits=Limits(memory="512m", cpus=1.0, pids=256, tmpfs_size="16m"),
        tmpfs=("/tmp",),
        workdir="/tmp",
    )
