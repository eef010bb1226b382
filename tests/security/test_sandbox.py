"""Attacks on the container, the secrets, the gateway and the host repository, from inside trials.

One hostile experiment (3 tasks x 2 arms) runs every probe through the real CLI in
the real hardened containers; a watcher inspects every container the harness
starts while it exists. Each negative assertion has a positive control next to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError, LockError
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.roles import GATEWAY_KEY_PATH, KEY_MOUNT, PLACEHOLDER_KEY, claude_env
from harness.sandbox.runtime import ContainerSpec
from harness.study.config import load_study
from harness.study.lock import lock, verify_lock
from tests.integration.helpers import latest, run_experiment
from tests.security.helpers import (
    HostileTask,
    Inspector,
    bash,
    control_run,
    files_containing,
    kv,
    probes,
    scripted_events,
    write_hostile,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IDENTITY = r"""
echo uid=$(id -u); echo gid=$(id -g); echo groups="$(id -G)"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t' | sed 's/:/=/'
echo pid1="$(tr '\0' ' ' < /proc/1/cmdline)"
echo nofile=$(ulimit -n); echo fsize=$(ulimit -f); echo core=$(ulimit -c)
for f in memory/memory.limit_in_bytes memory/memory.memsw.limit_in_bytes pids/pids.max cpu/cpu.cfs_quota_us; do
  echo "$f=$(cat /sys/fs/cgroup/$f 2>&1)"
done
echo "env_key=$(printenv ANTHROPIC_API_KEY)"
echo "env_names=$(tr '\0' '\n' < /proc/1/environ | cut -d= -f1 | sort | tr '\n' ' ')"
"""

WRITES = r"""
for d in / /etc /usr /usr/local/bin /bin /var /var/tmp /root /opt /skill /home /run /dev /dev/shm /dev/mqueue \
         /tmp /home/agent /workspace; do
  if touch "$d/.hx-probe" 2>/dev/null; then echo "$d=ok"; rm -f "$d/.hx-probe"; else echo "$d=denied"; fi
done
"""

MOUNTS = "cat /proc/self/mounts"

PRIVESC = r"""
python3 - <<'EOF'
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def t(name, f):
    # each attempt in its own child, so one that succeeds (entering a new user namespace drops every
    # capability over this mount namespace) cannot change the outcome of the next
    pid = os.fork()
    if pid == 0:
        try:
            f()
        except BaseException:
            os._exit(1)
        os._exit(0)
    print(f"{name}=" + ("allowed" if os.waitpid(pid, 0)[1] == 0 else "denied"), flush=True)
def sys(ret):
    if ret != 0:
        raise OSError(ctypes.get_errno(), "failed")
open("/tmp/c", "w").close()
t("setuid0", lambda: os.setuid(0))
t("chown_root", lambda: os.chown("/tmp/c", 0, 0))
t("mknod", lambda: os.mknod("/tmp/n", 0o600 | 0o020000, os.makedev(1, 3)))
t("raw_socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
t("unshare_userns", lambda: sys(libc.unshare(0x10000000)))
t("mount_tmpfs", lambda: sys(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
EOF
echo setuid_files="$(find / \( -path /proc -o -path /sys \) -prune -o -type f -perm /6000 -print 2>/dev/null | tr '\n' ' ')"
"""

SOCKETS = r"""
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("/tmp/control.sock")'
echo control_socket=$( [ -S /tmp/control.sock ] && echo found || echo missing )
# -xtype, not -type: find may take -type from the directory entry, and a socket bind-mounted over an
# overlayfs file keeps that file's entry type (a regular file); -xtype looks at the mounted inode
echo sockets="$(find / \( -path /proc -o -path /sys \) -prune -o -xtype s -print 2>/dev/null | grep -v '^/tmp/control.sock$' | tr '\n' ' ')"
echo docker_sock=$(ls /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock 2>/dev/null | wc -l)
"""

SECRETS = r"""
printf 'sk-ant-%s-control-0000\n' test > /tmp/control-key
echo key_files="$(grep -rlsaE -D skip --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 'sk-ant-tes[t]-' / 2>/dev/null | sort | tr '\n' ' ')"
echo key_proc="$(grep -lsaE 'sk-ant-tes[t]-' /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\n' ' ')"
echo sentinel_env=$(env | grep -c 'HXSENTINE[L]')
echo sentinel_proc="$(grep -lsaE 'HXSENTINE[L]' /proc/[0-9]*/environ 2>/dev/null | tr '\n' ' ')"
"""

GATEWAY = r"""
python3 - <<'EOF'
import http.client, json, os, socket, urllib.parse
base = urllib.parse.urlsplit(os.environ["ANTHROPIC_BASE_URL"])
def req(method, path, body=None):
    c = http.client.HTTPConnection(base.hostname, base.port, timeout=10)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={
            "content-type": "application/json", "anthropic-version": "2023-06-01",
            "x-api-key": "sk-attacker-own-key-0123456789", "authorization": "Bearer sk-attacker-own-key-0123456789"})
        r = c.getresponse(); r.read(); return r.status
    except Exception as e:
        return type(e).__name__
    finally:
        c.close()
def raw(data):
    s = socket.create_connection((base.hostname, base.port), timeout=5)
    try:
        s.sendall(data)
        return s.recv(64).split(b"\r\n")[0].decode()
    except Exception as e:
        return type(e).__name__
    finally:
        s.close()
msg = {"model": "claude-sonnet-5-5", "max_tokens": 16, "messages": [{"role": "user", "content": "gateway probe"}]}
out = {
  "refused_get_models": req("GET", "/v1/models"),
  "refused_complete": req("POST", "/v1/complete", msg),
  "refused_files": req("POST", "/v1/files", {}),
  "refused_batches": req("POST", "/v1/messages/batches", msg),
  "refused_traversal": req("POST", "/v1/messages/../models", msg),
  "refused_absolute": req("POST", "http://example.invalid/v1/messages", msg),
  "refused_web_search": req("POST", "/v1/messages", {**msg, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
  "refused_web_fetch": req("POST", "/v1/messages", {**msg, "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}),
  "refused_code_execution": req("POST", "/v1/messages", {**msg, "tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}),
  "refused_mcp": req("POST", "/v1/messages", {**msg, "mcp_servers": [{"type": "url", "url": "https://example.invalid/mcp", "name": "x"}]}),
  "refused_container": req("POST", "/v1/messages", {**msg, "container": "c"}),
  "refused_connect": raw(b"CONNECT example.invalid:443 HTTP/1.1\r\nHost: example.invalid:443\r\n\r\n"),
  "refused_negative_length": raw(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"),
  "refused_chunked": raw(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
  "allowed_count_tokens": req("POST", "/v1/messages/count_tokens", msg),
  "allowed_messages": req("POST", "/v1/messages", msg),
  "allowed_custom_tool": req("POST", "/v1/messages", {**msg, "tools": [{"name": "mine", "input_schema": {"type": "object"}}]}),
}
print(json.dumps(out))
EOF
"""

HISTORY = r"""
echo commits=$(git -C /workspace rev-list --all | wc -l)
echo objects=$(git -C /workspace cat-file --batch-all-objects --batch-check | wc -l)
echo history_secret=$(grep -rlsa HISTORY-SECRET /workspace 2>/dev/null | wc -l)
echo gitdir="$(git -C /workspace rev-parse --absolute-git-dir)"
echo worktrees=$(ls /workspace/.git/worktrees 2>/dev/null | wc -l)
"""


def plant_script(repo: str, markers: str) -> str:
    """Git payloads that would each leave a marker in ``markers`` if git ran them on the host."""
    m = shlex.quote(markers)
    return rf"""
set -u
cd {shlex.quote(repo)}
M={m}
git config core.fsmonitor "touch $M/fsmonitor; true"
git config filter.evil.clean "sh -c 'touch $M/filter-clean; cat'"
git config filter.evil.smudge "sh -c 'touch $M/filter-smudge; cat'"
git config filter.evil.required true
git config diff.evil.textconv "sh -c 'touch $M/textconv; cat' -"
git config diff.external "sh -c 'touch $M/diff-external'"
git config core.pager "sh -c 'touch $M/pager; cat'"
mkdir -p .git/hooks .git/info
for h in pre-commit post-commit post-checkout post-index-change reference-transaction pre-auto-gc; do
  printf '#!/bin/sh\ntouch "%s/hook-%s"\n' "$M" "$h" > ".git/hooks/$h"; chmod +x ".git/hooks/$h"
done
printf '* filter=evil diff=evil\n' > .gitattributes
printf '* filter=evil diff=evil\n' > .git/info/attributes
mkdir -p nested && git -C nested init -q && git -C nested config core.fsmonitor "touch $M/nested-fsmonitor; true"
echo "planted=yes"
"""


def links_script(host_secret: str, host_dir: str) -> str:
    return rf"""
cd /workspace
ln -s {shlex.quote(host_secret)} ln-host-secret
ln -s {shlex.quote(host_dir)} ln-host-dir
ln -s /etc/passwd ln-passwd
ln -s ../../../../../../../../etc ln-up
mkfifo fifo && ln -s fifo ln-fifo && mkfifo textkit/fifo.py && mkfifo .git/fifo
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("/workspace/sock")'
echo "# touched by the hostile agent" >> textkit/__init__.py
echo specials=$(find /workspace \( -type p -o -type s -o -type l \) | wc -l)
"""


@pytest.fixture(scope="module")
def attacked(
    sec_setup: Path, engine: Engine, images: ImageSet, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    return run_attacked(sec_setup, engine, images, tmp_path_factory)


def run_attacked(
    sec_setup: Path,
    engine: Engine,
    images: ImageSet,
    tmp_path_factory: pytest.TempPathFactory,
    delivery: str = "prompt",
) -> dict[str, Any]:
    """The hostile experiment, in the prompt delivery (``--bare``) or the installed one (non-bare CLI,
    see tests/security/test_installed_sandbox.py)."""
    tmp = tmp_path_factory.mktemp("attacked")
    repo = sec_setup / "demo" / "repo"
    # the user's history holds a secret that the base commit no longer has
    (repo / "HISTORY-SECRET.txt").write_text("HISTORY-SECRET " + secrets.token_hex(8))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "add a secret"], check=True)
    subprocess.run(["git", "-C", str(repo), "rm", "-q", "HISTORY-SECRET.txt"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "remove it"], check=True)

    markers = tmp / "markers"
    markers.mkdir()
    host_secret = tmp / "host-secret.txt"
    host_secret.write_text("host secret " + secrets.token_hex(8))
    host_dir = tmp / "host-dir"
    host_dir.mkdir()
    (host_dir / "keep.txt").write_text("keep")

    probe_steps = [
        bash(IDENTITY, "identity"),
        bash(WRITES, "writes"),
        bash(MOUNTS, "mounts"),
        bash(PRIVESC, "privesc"),
        bash(SOCKETS, "sockets"),
        bash(SECRETS, "secrets"),
        bash("cat /skill/SKILL.md >/dev/null 2>&1 && echo skill_read=ok || echo skill_read=absent", "skill"),
    ]
    tasks = [
        HostileTask("sec-container", baseline=probe_steps, skill=probe_steps, read_skill=True),
        HostileTask("sec-gateway", baseline=[bash(GATEWAY, "gateway")]),
        HostileTask(
            "sec-repo",
            baseline=[
                bash(HISTORY, "history"),
                bash(plant_script("/workspace", str(markers)), "plant"),
                bash(links_script(str(host_secret), str(host_dir)), "links"),
                bash("git status --short >/dev/null 2>&1; git add -A >/dev/null 2>&1; echo ran=yes", "agent_git"),
            ],
        ),
    ]
    # the non-bare CLI sends ~50 kB per request and starts slower: a longer deadline on a loaded host
    prereg, scen = write_hostile(
        sec_setup,
        "attacked",
        tasks,
        budgets={"timeout_s": 240} if delivery == "installed" else None,
        execution_extra={"delivery": delivery},
    )
    work_root = tmp / "trials"
    work_root.mkdir(mode=0o700)
    repo_before = tree_digest(repo)
    key = "sk-ant-test-" + secrets.token_urlsafe(24)
    sentinel = "HXSENTINEL_" + secrets.token_hex(4)
    gateway_view: dict[str, str] = {}
    gateway_addresses: dict[str, dict[str, str]] = {}

    def gateway_hook(name: str, _data: dict[str, Any]) -> None:
        for _ in range(100):
            if engine.is_running(name):
                break
            import time

            time.sleep(0.1)
        code, out = engine.exec_run(name, ["cat", GATEWAY_KEY_PATH])
        gateway_view[name] = out.decode(errors="replace") if code == 0 else f"exit {code}"
        networks = engine.inspect(name)["NetworkSettings"]["Networks"]
        gateway_addresses[name] = {net: v["IPAddress"] for net, v in networks.items() if v.get("IPAddress")}

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(sentinel, "host-environment-must-not-leak")
        with Inspector(engine, hooks={"gateway": gateway_hook}).running() as inspector:
            result = run_experiment(
                engine, prereg, scen, tmp / "out", work_root, jobs=3, scripted_key=key, env=dict(os.environ)
            )
    return {
        "result": result,
        "out": tmp / "out",
        "work_root": work_root,
        "inspector": inspector,
        "key": key,
        "sentinel": sentinel,
        "gateway_view": gateway_view,
        "gateway_addresses": gateway_addresses,
        "repo": repo,
        "repo_before": repo_before,
        "markers": markers,
        "host_secret": host_secret,
        "host_dir": host_dir,
        "images": images,
        "image_env": engine.client.api.inspect_image(images.trial)["Config"]["Env"] or [],  # type: ignore[no-untyped-call]
        "tmp": tmp,
    }


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under root (the .git directory included): type, mode and content hash."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = f"link {os.readlink(path)}"
            elif path.is_file():
                out[rel] = f"file {oct(st.st_mode)} {hashlib.sha256(path.read_bytes()).hexdigest()}"
            elif path.is_dir():
                out[rel] = f"dir {oct(st.st_mode)}"
            else:
                out[rel] = f"other {oct(st.st_mode)}"
    return out


def _probe(attacked: dict[str, Any], task: str, name: str, arm: str = "baseline") -> str:
    found = probes(attacked["out"])
    assert (task, arm, name) in found, f"probe {name} of {task}/{arm} never reported: {sorted(found)}"
    return found[(task, arm, name)]


def test_every_hostile_trial_completed_and_was_recorded(attacked: dict[str, Any]) -> None:
    records = latest(attacked["result"])
    assert len(records) == 6
    for r in records.values():
        assert r.status == "completed", (r.trial_id, r.status, r.error)
    assert not attacked["inspector"].errors, attacked["inspector"].errors


# ------------------------------------------------------------------ container


@pytest.mark.parametrize("arm", ["baseline", "skill"])
def test_agent_is_unprivileged_from_inside(attacked: dict[str, Any], arm: str) -> None:
    seen = kv(_probe(attacked, "sec-container", "identity", arm))
    assert seen["uid"] != "0" and seen["gid"] != "0" and "0" not in seen["groups"].split()
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(seen[cap], 16) == 0, (cap, seen[cap])
    assert seen["NoNewPrivs"] == "1"
    assert seen["Seccomp"] == "2", "the default seccomp filter must be active"
    assert "docker-init" in seen["pid1"], "--init: tini is PID 1 and reaps zombies"
    assert seen["nofile"] == "4096" and seen["core"] == "0"
    assert int(seen["fsize"]) * 512 == 1 << 30 or int(seen["fsize"]) * 1024 == 1 << 30
    assert int(seen["memory/memory.limit_in_bytes"]) == 2 << 30
    assert seen["memory/memory.memsw.limit_in_bytes"] == seen["memory/memory.limit_in_bytes"], "no swap"
    assert seen["pids/pids.max"] == "512"
    assert seen["cpu/cpu.cfs_quota_us"] == "100000"
    assert seen["env_key"] == PLACEHOLDER_KEY
    # the container's environment (PID 1's): what the harness set, plus the image's own ENV lines
    image_env = {e.split("=", 1)[0] for e in attacked["image_env"]} | {"HOSTNAME"}
    assert set(seen["env_names"].split()) == set(claude_env("x")) | image_env, seen["env_names"]


def test_positive_control_the_identity_probe_sees_privileges_where_they_exist(attacked: dict[str, Any]) -> None:
    """The same probe in a plain container (root, default capabilities) reports them."""
    proc = control_run(attacked["images"].trial, ["sh", "-c", IDENTITY], extra=["--user", "0:0"])
    seen = kv(proc.stdout)
    assert seen["uid"] == "0"
    assert int(seen["CapEff"], 16) != 0 and int(seen["CapBnd"], 16) != 0
    assert seen["NoNewPrivs"] == "0"
    assert "docker-init" not in seen["pid1"]


@pytest.mark.parametrize("arm", ["baseline", "skill"])
def test_only_workspace_tmp_home_and_the_private_ipc_mounts_are_writable(attacked: dict[str, Any], arm: str) -> None:
    seen = kv(_probe(attacked, "sec-container", "writes", arm))
    writable = {d for d, v in seen.items() if v == "ok"}
    # the positive controls are in this set; /dev/shm and /dev/mqueue are the engine's own mounts of
    # the container's private IPC namespace (bounded: a 64 MB tmpfs, the kernel's queue limits)
    assert writable == {"/tmp", "/home/agent", "/workspace", "/dev/shm", "/dev/mqueue"}, seen
    assert seen["/var/tmp"] == "denied" and seen["/dev"] == "denied", seen
    mounts = {}
    for line in _probe(attacked, "sec-container", "mounts", arm).splitlines():
        parts = line.split()
        if len(parts) >= 4:
            mounts[parts[1]] = (parts[2], set(parts[3].split(",")))
    assert mounts["/dev/shm"][0] == "tmpfs" and {"nosuid", "nodev", "noexec", "size=65536k"} <= mounts["/dev/shm"][1]
    assert mounts["/dev/mqueue"][0] == "mqueue" and {"nosuid", "nodev", "noexec"} <= mounts["/dev/mqueue"][1]


@pytest.mark.parametrize("arm", ["baseline", "skill"])
def test_mounts_seen_from_inside_are_exactly_the_intended_ones(attacked: dict[str, Any], arm: str) -> None:
    mounts: dict[str, tuple[str, set[str]]] = {}
    for line in _probe(attacked, "sec-container", "mounts", arm).splitlines():
        parts = line.split()
        if len(parts) >= 4:
            mounts[parts[1]] = (parts[2], set(parts[3].split(",")))
    docker_managed = {"/etc/resolv.conf", "/etc/hostname", "/etc/hosts", "/usr/sbin/docker-init"}
    own = {m for m in mounts if not m.startswith(("/proc", "/sys", "/dev")) and m != "/" and m not in docker_managed}
    expected = {"/tmp", "/home/agent", "/workspace"} | ({"/skill"} if arm == "skill" else set())
    assert own == expected, sorted(mounts)
    assert "ro" in mounts["/"][1], "read-only root filesystem"
    for tmpfs in ("/tmp", "/home/agent"):
        fstype, opts = mounts[tmpfs]
        assert fstype == "tmpfs" and {"nosuid", "nodev", "size=524288k"} <= opts, (tmpfs, opts)
    assert "rw" in mounts["/workspace"][1]
    if arm == "skill":
        assert "ro" in mounts["/skill"][1]
    assert not any("docker.sock" in m for m in mounts)


@pytest.mark.parametrize("arm", ["baseline", "skill"])
def test_privilege_escalation_attempts_fail(attacked: dict[str, Any], arm: str) -> None:
    seen = kv(_probe(attacked, "sec-container", "privesc", arm))
    for attempt in ("setuid0", "chown_root", "mknod", "raw_socket", "unshare_userns", "mount_tmpfs"):
        assert seen[attempt] == "denied", (attempt, seen)
    assert seen["setuid_files"] == "", "setuid/setgid binaries in the image"


def test_positive_control_privileged_operations_succeed_in_a_plain_root_container(attacked: dict[str, Any]) -> None:
    """A plain root container: its default capabilities allow the first four attempts, and the
    probe finds a setuid file that exists."""
    plant = "cp /bin/true /tmp/hx-suid && chmod 4755 /tmp/hx-suid && "
    proc = control_run(attacked["images"].trial, ["sh", "-c", plant + PRIVESC], extra=["--user", "0:0"])
    seen = kv(proc.stdout)
    for attempt in ("setuid0", "chown_root", "mknod", "raw_socket"):
        assert seen[attempt] == "allowed", (attempt, seen, proc.stderr)
    assert seen["setuid_files"] == "/tmp/hx-suid", seen


def test_positive_control_namespaces_and_mounts_succeed_with_sys_admin_and_no_seccomp(attacked: dict[str, Any]) -> None:
    """A new user namespace and a mount are denied even to a plain root container (default seccomp,
    no CAP_SYS_ADMIN); with both lifted the same probe reports them allowed."""
    unconfined = [
        "--cap-add",
        "SYS_ADMIN",
        "--security-opt",
        "seccomp=unconfined",
        "--security-opt",
        "apparmor=unconfined",
    ]
    proc = control_run(attacked["images"].trial, ["sh", "-c", PRIVESC], extra=["--user", "0:0", *unconfined])
    seen = kv(proc.stdout)
    for attempt in ("unshare_userns", "mount_tmpfs"):
        assert seen[attempt] == "allowed", (attempt, seen, proc.stderr)


@pytest.mark.parametrize("arm", ["baseline", "skill"])
def test_no_docker_socket_and_no_foreign_sockets(attacked: dict[str, Any], arm: str) -> None:
    seen = kv(_probe(attacked, "sec-container", "sockets", arm))
    assert seen["control_socket"] == "found", "positive control: the probe detects a socket that exists"
    assert seen["docker_sock"] == "0"
    assert seen["sockets"] == "", seen["sockets"]


def test_positive_control_the_socket_probe_finds_a_mounted_docker_socket(
    attacked: dict[str, Any], tmp_path: Path, engine: Engine
) -> None:
    """A unix socket bind-mounted where the engine's would be is reported by the same probe."""
    if engine.endpoint().remote:
        pytest.skip("bind-mounts a socket of this machine: a remote engine would mount its own path of that name")
    path = tmp_path / "fake-docker.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        extra = ["-v", f"{path}:/var/run/docker.sock"]
        seen = kv(control_run(attacked["images"].trial, ["sh", "-c", SOCKETS], extra=extra).stdout)
    assert seen["control_socket"] == "found", seen
    assert seen["docker_sock"] == "2", seen  # /var/run is /run: both names reach the one socket
    assert "/run/docker.sock" in seen["sockets"].split(), seen


def test_the_skill_is_a_read_only_copy_and_only_in_the_skill_arm(attacked: dict[str, Any]) -> None:
    assert kv(_probe(attacked, "sec-container", "skill", "skill"))["skill_read"] == "ok"  # positive control
    assert kv(_probe(attacked, "sec-container", "skill", "baseline"))["skill_read"] == "absent"
    agents = attacked["inspector"].by_role("agent")
    arms = {data["Config"]["Labels"]["harness.trial"].split(".")[-2] for data in agents}
    assert arms == {"baseline", "skill"}, arms
    for data in agents:
        skill_mounts = [m for m in data["Mounts"] if m["Destination"] == "/skill"]
        if data["Config"]["Labels"]["harness.trial"].split(".")[-2] == "baseline":
            assert skill_mounts == [], skill_mounts
            continue
        assert len(skill_mounts) == 1, data["Mounts"]
        assert skill_mounts[0]["RW"] is False
        # a copy in a volume of this run (filled through the archive API), never the user's directory
        assert skill_mounts[0]["Type"] == "volume" and skill_mounts[0]["Name"].startswith("hx-"), skill_mounts


def test_docker_inspect_shows_the_hardening_on_every_container(attacked: dict[str, Any]) -> None:
    inspector = attacked["inspector"]
    roles = {d["Config"]["Labels"].get("harness.role") for d in inspector.seen.values()}
    assert {"agent", "collect", "verify", "judge", "gateway", "scripted-api"} <= roles, roles
    gateway_ips = {net: ip for addresses in attacked["gateway_addresses"].values() for net, ip in addresses.items()}
    for name, data in inspector.seen.items():
        hc, cfg = data["HostConfig"], data["Config"]
        role = cfg["Labels"]["harness.role"]
        assert hc["CapDrop"] == ["ALL"] and not hc["CapAdd"], name
        assert hc["SecurityOpt"] == ["no-new-privileges"], name
        assert hc["ReadonlyRootfs"] is True and hc["Privileged"] is False, name
        assert hc["Init"] is True, name
        assert hc["Memory"] > 0 and hc["MemorySwap"] == hc["Memory"], name
        assert hc["NanoCpus"] > 0 and hc["PidsLimit"] > 0, name
        assert {u["Name"] for u in hc["Ulimits"]} == {"nofile", "fsize", "core"}, name
        assert hc["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "1"}}, name
        assert not hc["PortBindings"] and hc["PublishAllPorts"] is False, name
        assert not hc.get("Binds") and not hc.get("Devices") and not hc.get("VolumesFrom"), name
        assert hc["IpcMode"] == "private" and hc["PidMode"] == "" and hc["UsernsMode"] == "", name
        assert hc["RestartPolicy"]["Name"] == "no", name
        assert all(opt.split(",")[0] == "rw" and "size=" in opt for opt in (hc["Tmpfs"] or {}).values()), name
        assert cfg["User"] and not cfg["User"].startswith("0"), name
        for m in data["Mounts"]:
            # a trial directory of the controller's (bind) or a volume of this run, never the engine's socket
            assert m["Type"] in ("bind", "volume") and "docker.sock" not in m["Source"], (name, m)
            if m["Type"] == "volume":
                assert m["Name"].startswith("hx-"), (name, m)
            else:
                assert m["Source"].startswith(str(attacked["work_root"])), (name, m)
        if role in ("agent", "judge"):
            # the only DNS upstream is the trial's own gateway, at its address on this trial's network
            assert hc["NetworkMode"].startswith("hx-"), name
            assert hc["Dns"] == [gateway_ips[hc["NetworkMode"]]], (name, hc["Dns"], gateway_ips)
        if role in ("collect", "verify"):
            assert hc["NetworkMode"] == "none" and cfg.get("NetworkDisabled") is True, name
        if role == "agent":
            dests = {m["Destination"]: m["RW"] for m in data["Mounts"]}
            assert dests in ({"/workspace": True}, {"/workspace": True, "/skill": False}), dests
        if role == "gateway":
            assert [(m["Destination"], m["RW"]) for m in data["Mounts"]] == [(KEY_MOUNT, False)]


def test_positive_control_the_inspect_assertions_can_fail(attacked: dict[str, Any], engine: Engine) -> None:
    """A spec the engine hardens is the only kind: the kwargs carry every flag the assertions check."""
    spec = ContainerSpec(name="x", image="i", command=("true",), labels={}, user="1000:1000")
    kwargs = engine._create_kwargs(spec)
    assert kwargs["cap_drop"] == ["ALL"] and kwargs["read_only"] is True and kwargs["init"] is True
    # and a container made without the engine has none of it
    out = subprocess.run(
        ["docker", "create", "--label", "harness.purpose=control", attacked["images"].trial, "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        hc = json.loads(subprocess.run(["docker", "inspect", out], capture_output=True, text=True).stdout)[0][
            "HostConfig"
        ]
        assert not hc["CapDrop"] and not hc["ReadonlyRootfs"] and not hc.get("Init") and not hc["SecurityOpt"]
    finally:
        subprocess.run(["docker", "rm", "-f", out], capture_output=True)


# -------------------------------------------------------------------- secrets


def test_the_key_is_in_the_gateway_and_nowhere_in_the_agent(attacked: dict[str, Any]) -> None:
    key = attacked["key"]
    assert attacked["gateway_view"], "the gateway was never seen running"
    assert all(v.strip() == key for v in attacked["gateway_view"].values()), "positive control: the gateway holds it"
    for arm in ("baseline", "skill"):
        seen = kv(_probe(attacked, "sec-container", "secrets", arm))
        assert seen["key_files"] == "/tmp/control-key", "positive control found, nothing else: " + seen["key_files"]
        assert seen["key_proc"] == "", seen["key_proc"]
    for name, data in attacked["inspector"].seen.items():
        assert key not in json.dumps(data), f"the key is visible in docker inspect of {name}"
    # positive control: the same probe finds a key that is in a process's environment
    control_key = "ANTHROPIC_API_KEY=sk-ant-test-control-" + secrets.token_hex(8)
    proc = control_run(attacked["images"].trial, ["sh", "-c", SECRETS], extra=["-e", control_key])
    assert "/proc/1/environ" in kv(proc.stdout)["key_proc"].split(), proc.stdout


def test_the_key_never_reaches_results_artifacts_or_logs(attacked: dict[str, Any]) -> None:
    key = attacked["key"].encode()
    out: Path = attacked["out"]
    assert (out / "results.jsonl").stat().st_size > 0 and (out / "scripted-api.log").stat().st_size > 0
    assert files_containing(out, key) == []
    assert files_containing(attacked["work_root"], key) == []
    # positive control: the search finds the key where it is planted
    plant = attacked["tmp"] / "planted"
    plant.mkdir(exist_ok=True)
    (plant / "x").write_bytes(b"..." + key + b"...")
    assert files_containing(plant, key) == [str(plant / "x")]


def test_the_gateway_replaced_every_client_key_with_the_real_one(attacked: dict[str, Any]) -> None:
    """The agent sent its own x-api-key and Authorization: upstream saw only the real key."""
    requests = [e for e in scripted_events(attacked["out"]) if e.get("event") == "request"]
    assert requests
    real = hashlib.sha256(attacked["key"].encode()).hexdigest()
    assert {e["key_sha256"] for e in requests} == {real}
    assert not any(e["has_authorization"] for e in requests)


def test_the_host_environment_is_not_passed_through(attacked: dict[str, Any]) -> None:
    sentinel = attacked["sentinel"]
    for arm in ("baseline", "skill"):
        seen = kv(_probe(attacked, "sec-container", "secrets", arm))
        assert seen["sentinel_env"] == "0" and seen["sentinel_proc"] == ""
    for name, data in attacked["inspector"].seen.items():
        assert not any(sentinel in e for e in data["Config"]["Env"] or []), name
    # positive control: the same probe sees a variable that is passed
    proc = control_run(attacked["images"].trial, ["sh", "-c", SECRETS], extra=["-e", f"{sentinel}=x"])
    assert kv(proc.stdout)["sentinel_env"] == "1"
    assert "/proc/1/environ" in kv(proc.stdout)["sentinel_proc"].split(), proc.stdout


# -------------------------------------------------------------------- gateway


def test_gateway_forwards_only_the_messages_api_and_records_every_refusal(attacked: dict[str, Any]) -> None:
    answers = json.loads(_probe(attacked, "sec-gateway", "gateway").strip().splitlines()[-1])
    for name, status in answers.items():
        code = int(status.split()[1]) if isinstance(status, str) and status.startswith("HTTP/") else status
        if name.startswith("allowed_"):
            assert code == 200, (name, status)  # positive controls: the same client gets through
        else:
            assert code in (400, 403, 413), (name, status)
    record = latest(attacked["result"])["sec-gateway.baseline.0"]
    assert record.gateway is not None
    refused = [a for a in answers if a.startswith("refused_")]
    assert len(record.gateway.refused) == len(refused), record.gateway.refused
    assert any("mcp_servers" in r for r in record.gateway.refused)
    assert any("web_search" in r for r in record.gateway.refused)
    assert any("code_execution" in r for r in record.gateway.refused)
    assert any("CONNECT" in r for r in record.gateway.refused)
    assert any("cost_mismatch" in f for f in record.flags), "API calls the CLI did not make are visible"
    # an ordinary trial has no refusals (the CLI itself stays within the policy)
    gateway = latest(attacked["result"])["sec-container.baseline.0"].gateway
    assert gateway is not None and gateway.refused == ()


# ------------------------------------------------------------ host repository


def test_the_agent_sees_a_one_commit_repository_without_the_users_history(attacked: dict[str, Any]) -> None:
    seen = kv(_probe(attacked, "sec-repo", "history"))
    assert seen["commits"] == "1" and seen["history_secret"] == "0" and seen["worktrees"] == "0"
    assert seen["gitdir"] == "/workspace/.git"
    # positive control: the user's repository does have the history and the secret in it
    repo = attacked["repo"]
    log = subprocess.run(["git", "-C", str(repo), "rev-list", "--all"], capture_output=True, text=True).stdout
    assert len(log.split()) >= 3
    blob = subprocess.run(
        ["git", "-C", str(repo), "log", "--all", "-p", "--", "HISTORY-SECRET.txt"], capture_output=True, text=True
    ).stdout
    assert "HISTORY-SECRET" in blob


def test_the_users_repository_is_byte_for_byte_unchanged(attacked: dict[str, Any]) -> None:
    assert kv(_probe(attacked, "sec-repo", "plant"))["planted"] == "yes"
    after = tree_digest(attacked["repo"])
    before = attacked["repo_before"]
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [], changed


def test_positive_control_the_tree_digest_sees_a_change_inside_git(attacked: dict[str, Any], tmp_path: Path) -> None:
    """One edit to .git/config, one mode change, one new hook: each changes the digest."""
    copy = tmp_path / "repo"
    shutil.copytree(attacked["repo"], copy, symlinks=True)
    before = tree_digest(copy)
    assert before == tree_digest(attacked["repo"]), "the digest does not depend on where the tree is"
    os.utime(copy / ".git" / "config")  # a touch alone changes no byte: not a change
    assert tree_digest(copy) == before
    (copy / ".git" / "hooks").mkdir(exist_ok=True)
    edits: dict[str, Callable[[], object]] = {
        ".git/config": lambda: (copy / ".git" / "config").write_text(
            (copy / ".git" / "config").read_text() + "[core]\n\tfsmonitor = true\n"
        ),
        ".git/HEAD": lambda: os.chmod(copy / ".git" / "HEAD", 0o755),
        ".git/hooks/pre-commit": lambda: (copy / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n"),
    }
    for rel, edit in edits.items():
        prior = tree_digest(copy)
        edit()
        now = tree_digest(copy)
        assert sorted(k for k in set(prior) | set(now) if prior.get(k) != now.get(k)) == [rel], rel


def test_planted_git_payloads_never_run_on_the_host(attacked: dict[str, Any]) -> None:
    assert kv(_probe(attacked, "sec-repo", "agent_git"))["ran"] == "yes"
    assert sorted(os.listdir(attacked["markers"])) == []
    record = latest(attacked["result"])["sec-repo.baseline.0"]
    assert record.patch is not None and "edits_git_metadata" in record.patch.flags  # .gitattributes in the patch
    assert record.patch.rejected, "a patch with a nested repository and escaping symlinks is never applied"


def test_positive_control_the_planted_payloads_fire_when_host_git_runs_in_that_tree(tmp_path: Path) -> None:
    repo = tmp_path / "scratch"
    markers = tmp_path / "markers"
    markers.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("a\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "a"], check=True, env=env)
    subprocess.run(["sh", "-c", plant_script(str(repo), str(markers))], check=True, capture_output=True)
    (repo / "a.txt").write_text("b\n")
    for args in (["status"], ["add", "-A"], ["diff", "--cached"], ["commit", "-qm", "b"]):
        subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=env, timeout=30)
    fired = set(os.listdir(markers))
    assert {"fsmonitor", "filter-clean", "hook-pre-commit"} <= fired, fired


def test_symlinks_fifos_and_sockets_do_not_lead_the_controller_outside_the_trial(attacked: dict[str, Any]) -> None:
    assert int(kv(_probe(attacked, "sec-repo", "links"))["specials"]) >= 9  # positive control: they were made
    assert attacked["host_secret"].read_text().startswith("host secret ")
    assert (attacked["host_dir"] / "keep.txt").read_text() == "keep"
    record = latest(attacked["result"])["sec-repo.baseline.0"]
    assert record.patch is not None
    assert {"fifo", "sock", "textkit/fifo.py"} <= set(record.patch.special_files), record.patch.special_files
    assert "symlink:ln-host-secret" in record.patch.flags and record.patch.rejected, record.patch
    diff = attacked["result"].experiment_dir.artifacts.get(record.patch.sha256)
    assert attacked["host_secret"].read_bytes() not in diff
    assert list(attacked["work_root"].iterdir()) == [], "every trial directory was removed"


def test_a_skill_folder_with_a_symlink_to_a_host_secret_is_refused(sec_setup: Path, tmp_path: Path) -> None:
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    skill = sec_setup / "skills" / "sneaky"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: sneaky\n---\nA skill.\n")
    prereg = sec_setup / "demo" / "prereg-sneaky.yaml"
    prereg.write_text(
        "skill: sneaky\nskill_ref: ../skills/sneaky\ntarget_tasks: [fix-mean]\n"
        "execution: {repo: repo, runs_per_arm: 1}\n"
    )
    lock(prereg)  # positive control: without the symlink the folder locks
    (skill / "notes.md").symlink_to(secret)
    with pytest.raises(ConfigError, match="symlink"):
        verify_lock(load_study(prereg))
    with pytest.raises((ConfigError, LockError), match="symlink"):
        lock(prereg)
