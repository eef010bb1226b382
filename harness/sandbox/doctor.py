"""``skilltrial doctor``: can this machine run trials safely, and what should the user know?

Checks are gathered from the engine and the host, then judged by pure functions
(``judge_versions``) that unit tests feed with fake version strings.

The first line names the engine (``DOCKER_HOST``) and whether it is remote. On a remote engine the
checks that look at this machine instead of the engine's say so rather than pass silently: the free
disk under the engine's data root cannot be measured from here, and the container uids are chosen
against this machine's accounts, not the engine host's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.errors import HarnessError
from harness.host.capacity import capacity
from harness.host.paths import HostPaths
from harness.host.slots import machine_capacity, machine_memory
from harness.host.trees import overlay_available
from harness.sandbox import engineview, images, lifecycle, names, pool, roles, subnets, uids, volumes
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageBuilder, ImageOptions
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import (
    ContainerRuntime,
    ContainerSpec,
    DockerObject,
    EngineInfo,
    ImageStore,
    Limits,
    Runtime,
    VolumeMount,
)
from harness.study.config import Resources

Level = Literal["ok", "warn", "fail", "info"]

# (component, minimum version, why)
MINIMUMS = (
    (
        "engine",
        (28, 3, 3),
        "Docker < 28.3.3: firewalld reloads can drop network isolation (CVE-2025-54388/54410); "
        "gateway mode 'isolated' needs 28.x (the harness uses inhibit_ipv4 instead)",
    ),
    (
        "engine",
        (26, 0, 0),
        "Docker < 26.0: the embedded DNS resolver may forward names from internal networks "
        "(CVE-2024-29018; the harness points agent containers' DNS at their gateway, which serves none)",
    ),
    ("runc", (1, 2, 8), "runc < 1.2.8: mount-race container escapes (CVE-2025-31133, -52565, -52881)"),
    ("runc", (1, 1, 12), "runc < 1.1.12: 'Leaky Vessels' fd leak escape (CVE-2024-21626)"),
    ("git", (2, 39, 4), "git < 2.39.4: clone/hook vulnerabilities (CVE-2024-32002/-32004/-32465)"),
    ("git", (2, 43, 7), "git < 2.43.7 (unless your distribution backported the fixes): CVE-2025-48384 family"),
)


@dataclass(frozen=True)
class Check:
    level: Level
    name: str
    detail: str


def parse_version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def judge_versions(versions: dict[str, str]) -> list[Check]:
    """Known-CVE warnings for the engine, runc and git versions given."""
    out: list[Check] = []
    for component, minimum, why in MINIMUMS:
        raw = versions.get(component, "")
        parsed = parse_version(raw)
        if parsed is None:
            continue
        if parsed < minimum:
            out.append(Check("warn", f"{component} {raw}", why))
    return out


def git_version() -> str:
    try:
        out = subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.strip().removeprefix("git version ")


def gvisor_check(engine: Engine, image: str | None) -> Check:
    runtimes = engine.info().runtimes
    if "runsc" not in runtimes:
        return Check(
            "info",
            "gVisor (runsc)",
            "not installed; `--runtime runsc` is unavailable here "
            "(recommended on laptops and persistent self-hosted runners)",
        )
    if image is None:
        return Check("warn", "gVisor (runsc)", "registered, but no image to test it with (build images first)")
    spec = ContainerSpec(
        name=names.doctor("runsc"),
        image=image,
        command=("true",),
        user="65534:65534",
        labels=make_labels("doctor", role="doctor", ttl_s=120, purpose="doctor"),
        limits=Limits(memory="128m", pids=32),
        runtime="runsc",
    )
    try:
        result = lifecycle.run(engine, spec, deadline_s=60)
    except HarnessError as e:
        return Check("warn", "gVisor (runsc)", f"registered but a test container failed: {e}")
    if result.exit_code == 0:
        return Check("ok", "gVisor (runsc)", "works: `skilltrial eval --runtime runsc` adds a userspace kernel")
    return Check("warn", "gVisor (runsc)", f"registered but `true` exited {result.exit_code}")


def uid_check(security_options: tuple[str, ...]) -> Check:
    """Which uids the roles run as (issue 14: none may be a host account's)."""
    try:
        users = uids.role_users(euid=os.getuid(), egid=os.getgid(), security_options=security_options)
    except ValueError as e:
        return Check("fail", "container uids", str(e))
    return Check("ok", "container uids", users.describe())


def workspace_check(work_root: Path, *, remote: bool = False, forced: str | None = None) -> Check:
    """Which workspaces trials get here (issue 17, issue 15 item 7): overlays, whose cost follows the
    agent's changes, or copies, whose cost follows the repository's size, both directories of this
    machine; or, on a remote engine (or ``forced``), overlay volumes the engine makes."""
    if forced == "volume" or (forced is None and remote):
        why = "HARNESS_WORKSPACE=volume" if forced else "the engine is remote"
        return Check(
            "ok",
            "workspaces",
            f"volume ({why}): each trial an overlay volume on one base volume per run, made by the engine",
        )
    scratch = work_root if work_root.is_dir() else Path(tempfile.gettempdir())
    if forced == "copy":
        return Check("info", "workspaces", "copy of the base tree per trial (HARNESS_WORKSPACE=copy)")
    if overlay_available(scratch):
        return Check(
            "ok", "workspaces", f"overlay: each trial a copy-on-write view of one base tree per run ({scratch})"
        )
    if forced == "overlay":
        return Check("fail", "workspaces", f"HARNESS_WORKSPACE=overlay, but {scratch} cannot hold an overlay here")
    why = "the controller is not root" if os.geteuid() != 0 else f"the filesystem of {scratch} refuses an overlay"
    return Check(
        "info", "workspaces", f"copy of the base tree per trial ({why}): a trial's cost grows with the repository"
    )


def engine_view_check(
    engine: ContainerRuntime, work_root: Path, image: str | None, *, remote: bool = False, forced: str | None = None
) -> Check:
    """Whether the engine sees the files this controller writes for its trials (issue 24): the probe every
    run makes before its first trial (:mod:`harness.sandbox.engineview`), made here in the work root."""
    name = "engine sees this machine's files"
    if forced == "volume" or (forced is None and remote):
        return Check("ok", name, "not needed: volume workspaces are made by the engine")
    if image is None:
        return Check("info", name, "not checked without a sidecar image (build images first); every run checks it")
    scratch = work_root if work_root.is_dir() else Path(tempfile.gettempdir())
    try:
        engineview.probe(
            engine,
            scratch / f"doctor-engine-probe-{os.getpid()}",
            overlay=forced != "copy" and overlay_available(scratch),
            image=image,
            user="65534:65534",
            labels=make_labels("doctor", role="doctor", ttl_s=120, purpose="doctor"),
            name=names.doctor(f"engine-probe-{os.getpid()}"),
        )
    except engineview.EngineCannotSee as e:
        return Check("fail", name, str(e))
    except HarnessError as e:
        return Check("warn", name, f"the probe could not run: {e}")
    return Check("ok", name, f"a token written under {scratch} is there inside a container")


def capacity_check(info: EngineInfo, *, remote: bool, env: Mapping[str, str]) -> Check:
    """How many trials this machine can run at once, and why (:mod:`harness.host.capacity`), at the default
    per-trial limits; what ``HARNESS_HOST_SLOTS`` overrides. A remote engine is judged by its own machine."""
    limits = roles.trial_memory_limits(Resources())
    if remote and info.cpus and info.memory_bytes:
        found = capacity(cpus=info.cpus, mem_bytes=info.memory_bytes, trial_limits_bytes=limits)
        where = f"the engine's machine ({info.cpus} cores, {info.memory_bytes / (1 << 30):.1f} GiB)"
        note = "; the default --jobs still follows this machine's cores and memory"
    else:
        found = machine_capacity(limits)
        where = f"this machine ({os.cpu_count() or 1} cores, {machine_memory() / (1 << 30):.1f} GiB)"
        note = ""
    override = env.get("HARNESS_HOST_SLOTS", "").strip()
    if override:
        note += f"; HARNESS_HOST_SLOTS={override} sets the limit instead"
    return Check(
        "info",
        "capacity",
        f"{where}, default limits (agent {Resources().memory}): {found.describe()}{note}. "
        "A lower execution.resources.memory fits more trials.",
    )


def subnet_check(engine: Engine) -> Check:
    """Where trial networks take their addresses (:mod:`harness.sandbox.subnets`), and what else is there."""
    try:
        pool, foreign = engine.subnet_conflicts()
    except HarnessError as e:
        return Check("warn", "trial networks", f"cannot list the engine's networks: {e}")
    if pool.range is None:
        return Check("info", "trial networks", f"{pool.describe()}: about 30 networks, so about 30 trials at once")
    if not foreign:
        return Check("ok", "trial networks", f"{pool.describe()}; nothing else uses that range")
    return Check(
        "warn",
        "trial networks",
        f"{pool.describe()}; also there: {'; '.join(foreign[:5])}: its subnets are skipped (set {subnets.ENV} "
        "to a range nothing uses)",
    )


def remote_notes() -> Check:
    """What doctor cannot check on a remote engine, said instead of skipped."""
    return Check(
        "warn",
        "remote engine",
        "the engine's free disk is not checked here (its data root is on another machine; each trial's "
        "watchdog checks it in the engine), and the container uids were chosen against this machine's "
        "accounts, not the engine host's",
    )


def gather(engine: Engine, options: ImageOptions, *, workspace_kind: str | None = None) -> list[Check]:
    """Every check, in the order doctor prints them. ``workspace_kind``: ``HARNESS_WORKSPACE``, if set."""
    checks: list[Check] = []
    where = engine.endpoint()
    checks.append(Check("info", "engine endpoint", where.describe()))
    info = engine.info()
    checks.append(Check("ok", "engine", f"Docker {info.server_version} (API {info.api_version}), {info.os}"))
    cg = info.cgroup_version or "?"
    checks.append(
        Check(
            "ok" if cg == "2" else "warn",
            "cgroups",
            f"v{cg} ({info.cgroup_driver})"
            + ("" if cg == "2" else ": limits work, but rootless engines need v2 for cpu/memory limits"),
        )
    )
    seccomp = any("seccomp" in s for s in info.security_options)
    checks.append(
        Check(
            "ok" if seccomp else "fail",
            "seccomp",
            "default profile active" if seccomp else "not enabled: containers lack syscall filtering",
        )
    )
    lsm = [s for s in info.security_options if "apparmor" in s or "selinux" in s]
    checks.append(
        Check(
            "ok" if lsm else "warn",
            "LSM",
            "AppArmor/SELinux profile active"
            if lsm
            else "no AppArmor or SELinux on this engine: containers rely on capabilities, seccomp and "
            "namespaces only (consider --runtime runsc)",
        )
    )
    if info.rootless:
        checks.append(Check("info", "rootless", "rootless engine: an escape lands in an unprivileged user"))
    checks.append(uid_check(info.security_options))
    if where.remote:
        checks.append(remote_notes())
    free = engine.free_disk_bytes()
    if free is not None:
        gib = free / (1 << 30)
        checks.append(Check("ok" if gib >= 5 else "warn", "free disk", f"{gib:.1f} GiB under {info.docker_root}"))
    git = git_version()
    checks.append(Check("ok" if git else "fail", "git", git or "not installed"))
    checks.append(workspace_check(HostPaths.from_env(os.environ).work_root, remote=where.remote, forced=workspace_kind))
    checks.append(capacity_check(info, remote=where.remote, env=os.environ))
    checks.append(subnet_check(engine))
    checks.extend(judge_versions({"engine": info.server_version, "runc": info.runc_version, "git": git}))
    checks.append(
        Check(
            "ok" if shutil.which("debootstrap") else "info",
            "debootstrap",
            "present (base image without a registry)"
            if shutil.which("debootstrap")
            else "absent: a base image must come from a registry or `docker load`",
        )
    )
    trial_image = None
    for role, (tag, present) in ImageBuilder(engine, options).planned().items():
        state = "present" if present else "will be built on first use"
        checks.append(Check("ok" if present else "info", f"image {role}", f"{tag} ({state})"))
        if role == "sidecar" and present:
            trial_image = tag
    work_root = HostPaths.from_env(os.environ).work_root
    checks.append(engine_view_check(engine, work_root, trial_image, remote=where.remote, forced=workspace_kind))
    checks.append(gvisor_check(engine, trial_image))
    return checks


# ------------------------------------------------------------------ several engines


@dataclass(frozen=True)
class EngineReport:
    """What ``skilltrial doctor`` found on one engine of a pool (``--engine``, ``--engines-file``)."""

    name: str
    url: str
    checks: tuple[Check, ...]


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def free_disk_in_engine(runtime: ContainerRuntime, image: str, *, prefix: str) -> int:
    """Free bytes under the engine's volumes, measured inside the engine (a container with a fresh volume
    mounted runs ``statvfs`` on it): works for a remote engine, whose data root is not a path here."""
    labels = make_labels("doctor", role="doctor", ttl_s=120, purpose="doctor")
    volume, name = f"{prefix}disk-probe", f"{prefix}disk-probe"
    spec = ContainerSpec(
        name=name,
        image=image,
        command=("python3", "-c", "import os; s = os.statvfs('/probe'); print(s.f_bavail * s.f_frsize)"),
        user="65534:65534",
        labels=labels,
        volumes=(VolumeMount(volume, "/probe", read_only=True),),
        limits=Limits(memory="64m", cpus=0.5, pids=16, tmpfs_size="1m"),
    )
    try:
        runtime.create_volume(volume, labels)
        result = lifecycle.run(runtime, spec, deadline_s=60)
    finally:
        lifecycle.remove_objects(runtime, [DockerObject("container", name), DockerObject("volume", volume)])
    if result.exit_code != 0:
        raise HarnessError(f"the disk probe exited {result.exit_code}: {result.stderr[-200:]!r}")
    return int(result.stdout.strip())


def overlay_check(runtime: ContainerRuntime, image: str, *, prefix: str) -> Check:
    """Whether the engine mounts the overlay volumes volume workspaces are made of (the probe a run makes)."""
    labels = make_labels("doctor", role="doctor", ttl_s=120, purpose="doctor")
    lower = f"{prefix}overlay-lower"
    try:
        runtime.create_volume(lower, labels)
        volumes.probe_overlay(runtime, lower, image=image, labels=labels)
    except HarnessError as e:
        return Check("fail", "overlay volumes", str(e).splitlines()[0])
    finally:
        lifecycle.remove_objects(runtime, [DockerObject("volume", lower)])
    return Check("ok", "overlay volumes", "a container mounted one (volume workspaces work here)")


def _image_check(runtime: ImageStore, expected: Mapping[str, str], reference: str) -> Check:
    missing, other = images.differing(expected, runtime)
    if other:
        ref, image, found = other[0]
        return Check(
            "fail",
            "images",
            f"refused: {ref} is {found[:19]} here and {image[:19]} on {reference} (and {len(other) - 1} more); "
            "a run would not use this engine",
        )
    if missing:
        return Check(
            "info", "images", f"{len(missing)} of {len(expected)} missing: copied from {reference} when needed"
        )
    return Check("ok", "images", f"the same ids as {reference} ({len(expected)} images)")


def engine_checks(
    engine: Runtime, *, expected: Mapping[str, str], reference: str, probe_image: str | None, prefix: str
) -> list[Check]:
    """One engine of a pool: version and kernel, cgroups, runtimes, its machine, free disk, the overlay
    probe, and whether it holds the reference's images (``expected``: ref -> id; empty on the reference)."""
    info = engine.info()
    where = engine.endpoint()
    checks = [
        Check("ok", "reachable", where.describe()),
        Check(
            "ok", "version", f"Docker {info.server_version} (API {info.api_version}), {info.os}, kernel {info.kernel}"
        ),
    ]
    cg = info.cgroup_version or "?"
    checks.append(Check("ok" if cg == "2" else "warn", "cgroups", f"v{cg} ({info.cgroup_driver})"))
    seccomp = any("seccomp" in s for s in info.security_options)
    checks.append(Check("ok" if seccomp else "fail", "seccomp", "default profile active" if seccomp else "not enabled"))
    gvisor = "runsc" in info.runtimes
    checks.append(
        Check(
            "ok", "runtimes", ", ".join(info.runtimes) + ("" if gvisor else " (no gVisor: --runtime runsc unavailable)")
        )
    )
    checks.append(Check("info", "machine", f"{info.cpus or '?'} CPUs, {_gib(info.memory_bytes)} memory"))
    if info.cpus and info.memory_bytes:  # the same model as this machine's default --jobs, per engine
        limits = roles.trial_memory_limits(Resources())
        found = capacity(cpus=info.cpus, mem_bytes=info.memory_bytes, trial_limits_bytes=limits)
        checks.append(Check("info", "capacity", f"default limits (agent {Resources().memory}): {found.describe()}"))
    checks.extend(judge_versions({"engine": info.server_version, "runc": info.runc_version}))
    if probe_image is None:
        checks.append(Check("info", "free disk", "not measured: no image to measure it with yet"))
        checks.append(Check("info", "overlay volumes", "not probed: no image to probe with yet"))
    else:
        try:
            free = free_disk_in_engine(engine, probe_image, prefix=prefix)
            checks.append(Check("ok" if free >= 5 << 30 else "warn", "free disk", f"{_gib(free)} under its volumes"))
        except HarnessError as e:
            checks.append(Check("warn", "free disk", f"not measured: {e}"))
        checks.append(overlay_check(engine, probe_image, prefix=prefix))
    if expected:
        checks.append(_image_check(engine, expected, reference))
    return checks


def pool_checks(opened: Sequence[pool.Opened], options: ImageOptions) -> list[EngineReport]:
    """Every engine of a pool, the reference (the first) first; an engine that does not answer is one failed
    check, and the others are still checked. The images compared are the reference's current set (what a run
    copies); the probes run in each engine's own sidecar image, when it has one."""
    reports: list[EngineReport] = []
    reference_name = opened[0].address.label if opened else ""
    reference = opened[0].engine if opened else None
    expected: dict[str, str] = {}
    if reference is not None:
        planned = ImageBuilder(reference.runtime, options).planned()
        expected = {
            tag: image
            for role, (tag, _) in planned.items()
            if role in images.RUN_ROLES and (image := reference.runtime.image_id(tag))
        }
    for i, o in enumerate(opened):
        name = o.address.label
        if o.engine is None:
            why = str(o.error).splitlines()[0] if o.error is not None else "not opened"
            reports.append(EngineReport(name, o.address.url, (Check("fail", "reachable", why),)))
            continue
        try:
            own = ImageBuilder(o.engine.runtime, options).planned().get("sidecar")
            found = engine_checks(
                o.engine.runtime,
                expected={} if i == 0 else expected,
                reference=reference_name,
                probe_image=own[0] if own is not None and own[1] else None,
                prefix=names.doctor(f"{os.getpid()}-{i}-"),
            )
        except HarnessError as e:
            found = [Check("fail", "reachable", f"answered, then failed: {e}")]
        if i == 0:
            found.insert(0, Check("info", "role", "reference engine: images are built here and copied to the others"))
        elif reference is None:
            found.append(
                Check("warn", "images", f"not compared: the reference engine {reference_name} does not answer")
            )
        reports.append(EngineReport(name, o.address.url, tuple(found)))
    return reports
