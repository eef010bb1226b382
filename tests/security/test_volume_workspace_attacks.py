"""Attacks on volume workspaces (issue 15 item 7), from inside hardened containers on the test's engine.

A volume workspace is the host-overlay workspace of tests/security/test_workspace_attacks.py made by
the engine instead (:mod:`harness.trial.workspace`): every trial of a run stands on ONE base volume (the
overlays' lower layer), its writes land in its own scratch volume's ``upper/``, and its /workspace is
the local volume driver's ``type=overlay`` volume (``nosuid,nodev``). An agent that could write the base
volume would change every later trial's base; one that could reach another trial's volumes would leak
work between arms. So the same promises are held here, on whichever engine the session uses (``make
test`` runs this module on the local engine and again with ``--engine remote``): nothing below mounts a
path of the controller's or reads the engine's /var/lib/docker from here; everything is observed
through containers and the archive API.

- An agent-shaped container (:func:`harness.sandbox.roles.agent_spec` with the workspace volume, the
  trial image, the agent uid, ``--network none``, a probe in place of the CLI) rewrites and deletes
  every file of its /workspace, writes to the engine-host paths its mountinfo names (and those of the
  other trial's volumes), sets ``trusted.overlay.*`` xattrs, mounts and remounts, plants a setuid shell
  and a device, and looks for the other trial's data. Fresh containers then show the base volume and
  the other trial byte for byte unchanged. Positive controls: its own writes land (in its -ws volume
  and its scratch's ``upper/``), the same attack on a plain read-write volume of the base (also mounted
  at the base volume's engine-host path) rewrites it, the other trial's own write is seen by the same
  snapshot, mountinfo names the trial's own volumes and the base's path, a ``user.*`` xattr is set.
- The in-engine watchdog (:class:`harness.trial.watchdog.EngineWatchdog`) end to end: a scripted agent
  that writes more files (or bytes) than ``HARNESS_WORKSPACE_MAX_FILES`` (``HARNESS_WORKSPACE_MAX``)
  allows in a ``HARNESS_WORKSPACE=volume`` run is killed, its record says ``workspace_limit:`` and
  ``agent_error``, and nothing is left on the engine; the same agent under generous limits completes.
- What that watcher could not see: it runs as the agent's uid, so files written below a directory the
  agent made unreadable would escape both limits; such a directory is a trip of its own (``hidden``). The
  positive control: the same writes in a readable directory trip the file or byte limit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import secrets
import stat
import tarfile
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.sandbox import lifecycle, roles, volumes
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import PID, RUN, make_labels
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import ContainerSpec, VolumeMount
from harness.study.config import Resources
from harness.trial import watchdog, workspace
from harness.trial.basetrees import BaseTrees, EngineSide
from harness.trial.watchdog import WorkspaceLimit
from harness.trial.workspace import TrialVolumes
from tests.factories import init_repo
from tests.integration.helpers import latest, run_experiment, volume_probe_spec
from tests.security.helpers import HostileTask, Inspector, bash, kv, probes, write_hostile

pytestmark = [pytest.mark.docker]

BASE_FILES = {
    "README.md": "base\n",
    "src/app.py": "X = 1\n",
    "src/pkg/deep/mod.py": "Y = 2\n",
    "docs/guide.md": "guide\n",
}

DENIED = {"ENOENT", "EROFS", "EACCES", "EPERM"}
"""What a write through an engine-host path may answer (the path is not in the container at all, and
its root filesystem is read-only; never "ok")."""

PROBE = textwrap.dedent(
    r"""
    import ctypes, errno, json, os, shutil, stat, sys

    cfg = json.loads(sys.argv[1])
    W = "/workspace"
    out = {}

    def attempt(fn):
        try:
            fn()
            return "ok"
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))

    def mountinfo():
        return open("/proc/self/mountinfo").read().splitlines()

    def mount_of(lines, target):
        found = [line.split(" ") for line in lines if line.split(" ")[4] == target]
        if not found:
            return None
        f = found[-1]
        sep = f.index("-")
        return {"opts": f[5], "fstype": f[sep + 1], "source": f[sep + 2], "super": f[sep + 3]}

    # 1. rewrite every file of the workspace (its .git included), then delete all but README.md
    rewritten = 0
    for root, dirs, files in os.walk(W):
        for name in files:
            p = os.path.join(root, name)
            if os.path.islink(p):
                continue
            os.chmod(p, 0o644)  # pack files are 0444: their owner may still change that
            with open(p, "wb") as fh:
                fh.write(b"pwned\n")
            rewritten += 1
    out["rewritten"] = rewritten
    for name in os.listdir(W):
        if name != "README.md":
            p = os.path.join(W, name)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
    out["left"] = sorted(os.listdir(W))
    with open(os.path.join(W, "planted.txt"), "w") as fh:
        fh.write(cfg["token"] + "\n")

    # 2. the layers by the engine host's paths: those mountinfo names, and those the test names
    lines = mountinfo()
    ws = mount_of(lines, W)
    out["ws_mount"] = ws
    layers = {}
    for opt in (ws or {}).get("super", "").split(","):
        key, _, value = opt.partition("=")
        if key in ("lowerdir", "upperdir", "workdir"):
            layers[key] = value
    out["layers"] = layers
    paths = [*layers.values(), *cfg["paths"]]
    reached = {}
    for d in paths:
        reached[d] = {
            "stat": attempt(lambda: os.stat(d)),
            "rewrite": attempt(lambda: open(os.path.join(d, "README.md"), "w").write("pwned-by-path\n")),
            "create": attempt(lambda: open(os.path.join(d, "planted-by-path"), "w").write("x")),
        }
    out["reached"] = reached

    # 3. overlayfs's own xattrs (they need CAP_SYS_ADMIN); a user.* one is the probe's positive control
    os.mkdir(os.path.join(W, "op"))
    out["xattr"] = {
        "trusted.overlay.opaque": attempt(lambda: os.setxattr(W + "/op", "trusted.overlay.opaque", b"y")),
        "trusted.overlay.redirect": attempt(lambda: os.setxattr(W + "/op", "trusted.overlay.redirect", b"/")),
        "trusted.overlay.metacopy": attempt(lambda: os.setxattr(W + "/README.md", "trusted.overlay.metacopy", b"")),
        "user.probe": attempt(lambda: os.setxattr(W + "/planted.txt", "user.probe", b"1")),
    }

    # 4. mount and remount, by the syscall itself (no mount(8) refusing first for a non-root user)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]

    def syscall(fn, *args):
        def call():
            if fn(*args) != 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
        return attempt(call)

    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 1, 2, 4, 32, 4096
    lower = layers.get("lowerdir", "/nonexistent").encode()
    out["mount"] = {
        "remount_bind_suid": syscall(libc.mount, None, W.encode(), None, MS_REMOUNT | MS_BIND, None),
        "remount_super": syscall(libc.mount, b"overlay", W.encode(), b"overlay", MS_REMOUNT, b""),
        "mount_overlay": syscall(
            libc.mount, b"overlay", b"/tmp", b"overlay", 0,
            b"lowerdir=" + lower + b",upperdir=/tmp/u,workdir=/tmp/w",
        ),
        "bind": syscall(libc.mount, W.encode(), b"/tmp", None, MS_BIND, None),
        "umount": syscall(libc.umount2, W.encode(), 2),
    }
    out["ws_mount_after"] = mount_of(mountinfo(), W)

    # 5. a setuid copy of a shell, and a device node
    shutil.copy("/bin/sh", W + "/suid-sh")
    os.chmod(W + "/suid-sh", 0o4755)
    out["suid_mode"] = os.stat(W + "/suid-sh").st_mode
    out["mknod"] = attempt(lambda: os.mknod(W + "/null", stat.S_IFCHR | 0o666, os.makedev(1, 3)))

    # 6. the other trial: its volumes named in this mount table, its data anywhere in this filesystem
    lines = mountinfo()
    out["mountinfo_names"] = {v: any(v in line for line in lines) for v in cfg["volumes"]}
    hits = {cfg["token"]: [], cfg["other_token"]: []}
    for root, dirs, files in os.walk("/", onerror=lambda e: None):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev")]
        for name in files:
            p = os.path.join(root, name)
            try:
                if os.path.islink(p) or not stat.S_ISREG(os.lstat(p).st_mode):
                    continue
                with open(p, "rb") as fh:
                    data = fh.read(1 << 20)
            except OSError:
                continue
            for token in hits:
                if token.encode() in data:
                    hits[token].append(p)
    out["token_hits"] = hits
    print(json.dumps(out))
    """
)


@dataclasses.dataclass
class Rig:
    engine: Engine
    profile: roles.Profile
    run_id: str
    labels: dict[str, str]
    base_volume: str
    a: TrialVolumes
    b: TrialVolumes
    control: str
    count: int = 0

    def name(self, what: str) -> str:
        self.count += 1
        return f"hx-{self.run_id}-{what}-{self.count}"

    def container(self, what: str, command: tuple[str, ...], *mounts: VolumeMount) -> ContainerSpec:
        return volume_probe_spec(self.profile, self.name(what), self.labels, command, *mounts)

    def agent(self, what: str, workspace_volume: str, command: tuple[str, ...], *extra: VolumeMount) -> ContainerSpec:
        """The agent's own spec (:func:`roles.agent_spec`, the workspace a volume), a probe in place of the
        CLI, on ``--network none`` instead of a trial network (so no gateway, and no DNS upstream)."""
        spec = roles.agent_spec(
            self.profile,
            name=self.name(what),
            labels=self.labels,
            network="none",
            gateway_ip="127.0.0.1",
            workspace=workspace_volume,
            skill_volume=None,
            command=command,
        )
        assert not spec.mounts and spec.volumes == (VolumeMount(workspace_volume, "/workspace", read_only=False),)
        return dataclasses.replace(spec, dns=(), volumes=(*spec.volumes, *extra))

    def run(self, spec: ContainerSpec) -> tuple[int | None, str, str]:
        res = lifecycle.run(self.engine, spec, deadline_s=180)
        return res.exit_code, res.stdout.decode("utf-8", "replace"), res.stderr.decode("utf-8", "replace")

    def probe(self, what: str, workspace_volume: str, cfg: Mapping[str, Any], *extra: VolumeMount) -> dict[str, Any]:
        code, stdout, stderr = self.run(
            self.agent(what, workspace_volume, ("python3", "-c", PROBE, json.dumps(cfg)), *extra)
        )
        assert code == 0, stderr[-3000:]
        seen: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
        return seen

    def snapshot(self, **named: str) -> dict[str, dict[str, tuple[Any, ...]]]:
        """What a fresh container sees of each volume (mounted read-only at /v/<key>), through the
        archive API: key -> {path: (type, mode, uid, gid, mtime, link target, device, sha256 of content)}."""
        mounts = [VolumeMount(volume, f"/v/{key}", read_only=True) for key, volume in named.items()]
        run = lifecycle.run(self.engine, self.container("snap", ("true",), *mounts), deadline_s=180, archive="/v")
        assert run.archive is not None and not run.archive_truncated
        found: dict[str, dict[str, tuple[Any, ...]]] = {key: {} for key in named}
        with tarfile.open(fileobj=io.BytesIO(run.archive)) as tar:
            for m in tar.getmembers():
                parts = m.name.split("/", 2)  # v/<key>/<path>
                if len(parts) < 2 or parts[1] not in found:
                    continue
                fh = tar.extractfile(m) if m.isreg() else None
                digest = hashlib.sha256(fh.read()).hexdigest() if fh is not None else ""
                entry = (m.type, m.mode, m.uid, m.gid, m.mtime, m.linkname, m.devmajor, m.devminor, digest)
                found[parts[1]][parts[2] if len(parts) == 3 else "."] = entry
        for key, entries in found.items():
            assert "." in entries, f"the snapshot holds {key}"
        return found

    def content(self, volume: str, path: str) -> bytes:
        code, stdout, stderr = self.run(
            self.container("cat", ("cat", f"/v/{path}"), VolumeMount(volume, "/v", read_only=True))
        )
        assert code == 0, stderr
        return stdout.encode()


def _whiteout(entry: tuple[Any, ...]) -> bool:
    """A character device 0/0, or a hard link to one (the kernel may link every whiteout to one inode)."""
    kind, major, minor = entry[0], entry[6], entry[7]
    return (kind == tarfile.CHRTYPE and (major, minor) == (0, 0)) or kind == tarfile.LNKTYPE


def _settled(scratch: Mapping[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
    """A scratch volume's entries without the mtimes of overlayfs's work directories: the kernel empties
    ``work/work`` each time the overlay is mounted (the snapshots themselves mount it)."""
    return {p: (*e[:4], None, *e[5:]) if p.split("/")[0] in ("work", "verify-work") else e for p, e in scratch.items()}


@pytest.fixture(scope="module")
def attacked(engine: Engine, images: ImageSet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two trials on one base volume, as run_trial makes them; trial a attacks, then trial b, the base and
    a control volume are read back. Everything labelled with the run goes after."""
    tmp = tmp_path_factory.mktemp("volattack")
    repo = tmp / "repo"
    sha = init_repo(repo, BASE_FILES)
    run_id = "vwatk" + secrets.token_hex(3)
    users = roles.role_users(engine, os.getuid(), os.getgid())
    profile = roles.make_profile(Resources(), images.trial, images.sidecar, users, None)
    run_labels = make_labels(run_id, role="run", ttl_s=900)
    side = EngineSide(engine, images.sidecar, run_labels, run_id)
    run_root = tmp / "run"
    run_root.mkdir()
    bases = BaseTrees(repo, run_root, users.agent, kind="volume", side=side)
    try:
        base = bases.get(sha)
        assert base.volume is not None
        trials: dict[str, TrialVolumes] = {}
        for key in ("a", "b"):
            labels = make_labels(run_id, role="trial", trial_id=key, ttl_s=900)
            trials[key] = TrialVolumes.of(TrialNames(run_id, key))
            workspace.prepare_volumes(side, base, trials[key], labels, users.agent)
        a, b = trials["a"], trials["b"]
        assert not list(run_root.glob("[ab]")), "no trial path here"
        control = volumes.make(
            engine,
            f"hx-{run_id}-control",
            volumes.tar_tree(base.template, uid=users.agent[0], gid=users.agent[1]),
            image=images.sidecar,
            labels=run_labels,
        )
        rig = Rig(engine, profile, run_id, make_labels(run_id, role="trial", trial_id="probe", ttl_s=900),
                  base.volume, a, b, control)  # fmt: skip
        result: dict[str, Any] = {"rig": rig}
        # a volume's root is the engine's (root, 0755): its owner (root, with no capability at all) opens
        # it up, so the agent may add and delete entries there as it may in its workspace
        opener = rig.container("open", ("chmod", "0777", "/v"), VolumeMount(control, "/v", read_only=False))
        code, _out, err = rig.run(dataclasses.replace(opener, user="0:0"))
        assert code == 0, err

        pristine = rig.snapshot(base=base.volume, b_ws=b.workspace, b_scratch=b.scratch, control=control)
        other_token = "other-trial-" + secrets.token_hex(8)
        code, _out, err = rig.run(
            rig.agent("b-agent", b.workspace, ("sh", "-c", f"echo {other_token} > /workspace/b-secret.txt"))
        )
        assert code == 0, err
        before = rig.snapshot(base=base.volume, b_ws=b.workspace, b_scratch=b.scratch)
        result["pristine"], result["before"] = pristine, before

        host = {v: engine.volume_mountpoint(v) for v in (base.volume, *a, *b, control)}
        result["host"] = host
        token = "attacker-" + secrets.token_hex(8)
        result["token"], result["other_token"] = token, other_token
        cfg = {
            "token": token,
            "other_token": other_token,
            # the other trial's volumes by the engine host's paths, and the base's (mountinfo names it too)
            "paths": [host[b.workspace], f"{host[b.scratch]}/upper", host[b.scratch], host[base.volume]],
            "volumes": [*a, *b, base.volume],
        }
        result["attack"] = rig.probe("a-agent", a.workspace, cfg)
        result["after"] = rig.snapshot(
            base=base.volume, b_ws=b.workspace, b_scratch=b.scratch, a_ws=a.workspace, a_scratch=a.scratch
        )
        # the positive control: the same attack on a plain read-write volume of the base, which is also
        # mounted where the base volume lives on the engine's host (as if that path were reachable)
        result["control_attack"] = rig.probe(
            "control-agent",
            control,
            {**cfg, "paths": [host[base.volume]], "volumes": [control]},
            VolumeMount(control, host[base.volume], read_only=False),
        )
        result["control_after"] = rig.snapshot(control=control)["control"]
        yield result
    finally:
        lifecycle.remove_labelled(engine, {RUN: run_id})
        bases.close()
        assert not engine.labelled({RUN: run_id}), "nothing of the run is left on the engine"


def test_the_attack_ran_and_its_own_writes_land(attacked: dict[str, Any]) -> None:
    """Positive controls: the agent rewrote every base file and deleted them; a fresh container mounting
    its -ws volume sees exactly that, and its scratch volume's upper/ holds it (whiteouts included)."""
    seen, after = attacked["attack"], attacked["after"]
    base_files = [p for p, e in attacked["before"]["base"].items() if e[0] == tarfile.REGTYPE]
    assert seen["rewritten"] == len(base_files) > len(BASE_FILES), (seen["rewritten"], base_files)
    assert seen["left"] == ["README.md"], seen["left"]
    a_ws = after["a_ws"]
    assert {p for p in a_ws if "/" not in p} == {".", "README.md", "planted.txt", "op", "suid-sh"}, sorted(a_ws)
    rig: Rig = attacked["rig"]
    assert rig.content(rig.a.workspace, "README.md") == b"pwned\n"
    assert rig.content(rig.a.workspace, "planted.txt") == f"{attacked['token']}\n".encode()
    upper = {p.removeprefix("upper/"): e for p, e in after["a_scratch"].items() if p.startswith("upper/")}
    assert upper["planted.txt"][0] == tarfile.REGTYPE and upper["README.md"][0] == tarfile.REGTYPE, upper
    for gone in ("src", "docs", ".git"):
        assert _whiteout(upper[gone]), (gone, upper[gone])
    assert rig.content(rig.a.scratch, "upper/planted.txt") == f"{attacked['token']}\n".encode()


def test_the_base_volume_is_byte_for_byte_unchanged(attacked: dict[str, Any]) -> None:
    before, after = attacked["before"]["base"], attacked["after"]["base"]
    assert after == before
    assert attacked["pristine"]["base"] == before, "not even the other trial's write touched it"
    reached = attacked["attack"]["reached"]
    assert "planted-by-path" not in " ".join(after), "nothing written through the engine host's path"
    assert all(r["rewrite"] != "ok" and r["create"] != "ok" for r in reached.values()), reached


def test_the_other_trial_is_unchanged_and_out_of_reach(attacked: dict[str, Any]) -> None:
    before, after, seen = attacked["before"], attacked["after"], attacked["attack"]
    assert after["b_ws"] == before["b_ws"], "the other trial's workspace"
    assert _settled(after["b_scratch"]) == _settled(before["b_scratch"]), "the other trial's scratch (its upper layer)"
    # positive control: the same snapshot sees the other trial's own write (so it would have seen the attacker's)
    assert attacked["pristine"]["b_ws"] != before["b_ws"] and "b-secret.txt" in before["b_ws"]
    assert "upper/b-secret.txt" in before["b_scratch"]
    rig: Rig = attacked["rig"]
    assert seen["token_hits"][attacked["other_token"]] == [], "the other trial's data is nowhere in the container"
    assert seen["token_hits"][attacked["token"]] == ["/workspace/planted.txt"], "positive control: own data found"
    names = seen["mountinfo_names"]
    assert not any(names[v] for v in rig.b), ("the other trial's volumes are not mounted", names)
    # positive control: the mount table does name volumes, the attacker's own and the base
    assert names[rig.a.scratch] and names[rig.base_volume], names
    assert not names[rig.a.workspace], "an overlay volume is named by its layers, not its own name"
    host = attacked["host"]
    for path in (host[rig.b.workspace], f"{host[rig.b.scratch]}/upper", host[rig.b.scratch]):
        assert seen["reached"][path]["stat"] == "ENOENT", (path, seen["reached"][path])
        assert {seen["reached"][path]["rewrite"], seen["reached"][path]["create"]} <= DENIED, seen["reached"][path]


def test_the_layers_named_in_mountinfo_cannot_be_written(attacked: dict[str, Any]) -> None:
    seen, host, rig = attacked["attack"], attacked["host"], attacked["rig"]
    ws = seen["ws_mount"]
    assert ws is not None and ws["fstype"] == "overlay", ws
    layers = seen["layers"]
    # positive control: mountinfo names the engine host's paths of the layers, so these were the real targets
    assert layers == {
        "lowerdir": host[rig.base_volume],
        "upperdir": f"{host[rig.a.scratch]}/upper",
        "workdir": f"{host[rig.a.scratch]}/work",
    }, layers
    for path in layers.values():
        r = seen["reached"][path]
        assert r["stat"] == "ENOENT" and {r["rewrite"], r["create"]} <= DENIED, (path, r)
    # positive control: where that path IS reachable (a plain volume mounted there), the same probe writes
    ctl = attacked["control_attack"]["reached"][host[rig.base_volume]]
    assert ctl == {"stat": "ok", "rewrite": "ok", "create": "ok"}, ctl
    assert "planted-by-path" in attacked["control_after"]


def test_overlay_xattrs_mounts_and_devices_are_refused(attacked: dict[str, Any]) -> None:
    seen = attacked["attack"]
    xattr = seen["xattr"]
    assert xattr["user.probe"] == "ok", "positive control: the xattr probe works on this mount"
    for name in ("trusted.overlay.opaque", "trusted.overlay.redirect", "trusted.overlay.metacopy"):
        assert xattr[name] == "EPERM", (name, xattr)
    assert seen["mount"] == dict.fromkeys(seen["mount"], "EPERM"), seen["mount"]
    assert seen["ws_mount_after"] == seen["ws_mount"], "the workspace's mount is as it was"
    assert seen["mknod"] == "EPERM", seen["mknod"]
    assert "op" in attacked["after"]["a_ws"] and "null" not in attacked["after"]["a_ws"]


def test_the_workspace_is_nosuid_nodev(attacked: dict[str, Any]) -> None:
    """A setuid file can be made (the bit is on it: positive control), but the mount does not honour it."""
    seen = attacked["attack"]
    opts = seen["ws_mount"]["opts"].split(",")
    assert "nosuid" in opts and "nodev" in opts, seen["ws_mount"]
    assert seen["suid_mode"] & stat.S_ISUID, oct(seen["suid_mode"])
    suid = attacked["after"]["a_ws"]["suid-sh"]
    assert suid[1] & stat.S_ISUID, "the bit is on the file in the volume"
    # positive control: the check tells mounts apart (a plain volume is mounted without either option)
    plain = attacked["control_attack"]["ws_mount"]["opts"].split(",")
    assert "nosuid" not in plain and "nodev" not in plain, plain


def test_positive_control_a_plain_read_write_volume_of_the_base_is_rewritten(attacked: dict[str, Any]) -> None:
    """Without the overlay (the base's tree as a plain read-write volume), the same attack rewrites it:
    the base checks above can fail."""
    pristine, after = attacked["pristine"]["control"], attacked["control_after"]
    base = attacked["before"]["base"]
    assert {p: e[-1] for p, e in pristine.items()} == {p: e[-1] for p, e in base.items()}, "the same tree"
    assert after != pristine
    assert "src/app.py" not in after and after["README.md"][-1] != pristine["README.md"][-1]
    assert "planted.txt" in after


# ------------------------------------------------------------------ the in-engine watchdog, end to end

BOMB_FILES = "mkdir -p /workspace/many && cd /workspace/many && seq 1 1500 | xargs touch; echo made=yes; sleep 15"
BOMB_BYTES = "head -c 6M /dev/zero > /workspace/blob.bin; echo made=yes; sleep 15"
TIGHT = {"HARNESS_WORKSPACE_MAX_FILES": "500", "HARNESS_WORKSPACE_MAX": "2m"}
GENEROUS = {"HARNESS_WORKSPACE_MAX_FILES": "100000", "HARNESS_WORKSPACE_MAX": "1g"}


def _watched_run(
    sec_setup: Path, engine: Engine, tmp: Path, name: str, limits: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str], Inspector]:
    """A ``HARNESS_WORKSPACE=volume`` run of two bombs under ``limits``: the baseline records by task,
    each bomb's tool result by its name (logged only if the tool call returned), the containers seen."""
    tasks = [
        HostileTask(f"vw-files-{name}", baseline=[bash(BOMB_FILES, "files")]),
        HostileTask(f"vw-bytes-{name}", baseline=[bash(BOMB_BYTES, "bytes")]),
    ]
    prereg, scen = write_hostile(sec_setup, f"volwatch-{name}", tasks, budgets={"timeout_s": 90})
    work_root = tmp / "trials"
    work_root.mkdir(mode=0o700)
    env = {"HARNESS_WORKSPACE": "volume", **limits}
    ours = {PID: str(os.getpid())}  # this module's own attack rig may still be up: only what the run made counts
    already = {(o.kind, o.name) for o in engine.labelled(ours)}
    with Inspector(engine).running() as seen:
        result = run_experiment(engine, prereg, scen, tmp / "out", work_root, jobs=4, env=env)
    assert list(work_root.iterdir()) == [], "nothing of the run is left here"
    assert {(o.kind, o.name) for o in engine.labelled(ours)} <= already, "nothing of the run is left on the engine"
    records = {r.task_id: r for r in latest(result).values() if r.arm == "baseline"}
    returned = {name: out for (_task, arm, name), out in probes(tmp / "out").items() if arm == "baseline"}
    return records, returned, seen


def _watched(seen: Inspector, tasks: Iterable[str]) -> bool:
    """Each task's baseline trial had its in-engine watcher container (``hx-<run>-<task>-b0-a1-watch``)."""
    names = [str(d["Name"]) for d in seen.by_role("watch")]
    return all(any(f"-{task}-b0-" in n and n.endswith("-watch") for n in names) for task in tasks)


def test_the_in_engine_watchdog_stops_an_agent_over_its_limits(
    sec_setup: Path, engine: Engine, images: ImageSet, tmp_path: Path
) -> None:
    records, returned, seen = _watched_run(sec_setup, engine, tmp_path, "tight", TIGHT)
    reasons = {
        "vw-files-tight": "more than 500 files and directories added to the workspace",
        "vw-bytes-tight": f"more than {2 << 20} bytes added to the workspace",
    }
    for task, reason in reasons.items():
        r = records[task]
        assert r.workspace == "volume", "the run used volume workspaces (so the engine's watchdog)"
        assert r.status == "agent_error", (task, r.status, r.error, r.flags)
        assert [f for f in r.flags if f.startswith("workspace_")] == [f"workspace_limit: {reason}"], r.flags
        assert r.patch is not None and r.patch.rejected == f"workspace_limit: {reason}", r.patch
    assert returned == {}, ("each bomb was killed before its tool call returned", returned)
    assert _watched(seen, reasons), "by the in-engine watcher of each trial"


def test_positive_control_the_same_agent_under_generous_limits_completes(
    sec_setup: Path, engine: Engine, images: ImageSet, tmp_path: Path
) -> None:
    records, returned, seen = _watched_run(sec_setup, engine, tmp_path, "generous", GENEROUS)
    for task, files in (("vw-files-generous", 1500), ("vw-bytes-generous", 1)):
        r = records[task]
        assert r.workspace == "volume"
        assert r.status == "completed", (task, r.status, r.error, r.flags)
        assert not [f for f in r.flags if f.startswith("workspace_")], r.flags
        assert r.patch is not None and r.patch.rejected is None and r.patch.files_changed == files, r.patch
    assert {name: kv(out).get("made") for name, out in returned.items()} == {"files": "yes", "bytes": "yes"}, returned
    assert _watched(seen, ("vw-files-generous", "vw-bytes-generous")), "watched as well"


# ------------------------------------------------------------- what the in-engine watcher could not see

HIDE = "mkdir -p /workspace/h/in && cd /workspace/h/in && {chmod}seq 1 2000 | xargs touch && head -c 8M /dev/zero > big"
"""Files and bytes over both limits below, written from inside a directory whose parent the agent makes
unreadable first (``chmod 000``: its cwd keeps working, a walk by its uid cannot enter)."""


@pytest.mark.parametrize(
    "hide",
    [
        pytest.param(False, id="readable"),
        pytest.param(True, id="unreadable"),
    ],
)
def test_the_in_engine_watcher_counts_what_the_agent_hides(
    engine: Engine, images: ImageSet, tmp_path: Path, hide: bool
) -> None:
    """The harness's own watch container (:func:`roles.watch_spec`, :func:`watchdog.engine_command`) over a
    volume workspace the agent has written through its overlay. Readable: it trips (the positive control).
    Unreadable: the unreadable directory itself is the trip."""
    repo = tmp_path / "repo"
    sha = init_repo(repo, BASE_FILES)
    run_id = "vwhid" + secrets.token_hex(3)
    users = roles.role_users(engine, os.getuid(), os.getgid())
    profile = roles.make_profile(Resources(), images.trial, images.sidecar, users, None)
    labels = make_labels(run_id, role="trial", trial_id="hide", ttl_s=600)
    side = EngineSide(engine, images.sidecar, labels, run_id)
    run_root = tmp_path / "run"
    run_root.mkdir()
    bases = BaseTrees(repo, run_root, users.agent, kind="volume", side=side)
    try:
        base = bases.get(sha)
        vols = TrialVolumes.of(TrialNames(run_id, "t"))
        workspace.prepare_volumes(side, base, vols, labels, users.agent)
        rig = Rig(engine, profile, run_id, labels, base.volume or "", vols, vols, "")
        script = HIDE.format(chmod="chmod 000 /workspace/h && " if hide else "")
        code, _out, err = rig.run(rig.agent("agent", vols.workspace, ("sh", "-c", script)))
        assert code == 0, err
        limit = WorkspaceLimit(max_bytes=2 << 20, max_files=500, interval_s=0.5)
        upper = f"{roles.SCRATCH_MOUNT}/upper"
        watch = roles.watch_spec(
            profile,
            name=rig.name("watch"),
            labels=labels,
            scratch_volume=vols.scratch,
            command=watchdog.engine_command(upper, limit, base.depth),
        )
        run = lifecycle.run(engine, watch, deadline_s=6)  # a watcher that sees nothing over a limit polls until killed
        expected = (b"hidden",) if hide else (b"files", b"bytes")
        assert run.exit_code == 3 and run.stdout.strip() in expected, (run.exit_code, run.stdout)
    finally:
        lifecycle.remove_labelled(engine, {RUN: run_id})
        bases.close()
