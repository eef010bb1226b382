"""Resource attacks from inside agent containers: each ends as a recorded outcome, in time.

One experiment runs every attack as the baseline arm of its own task (the skill
arm of each task ends at once) next to a benign task that must still pass
verify: fork bomb, memory bomb, filling the workspace (bytes, inodes, depth),
filling the tmpfs, a file over the size limit, flooding stdout, an infinite
loop, a process that ignores SIGTERM, a frozen in-container timer, and a faked
timeout. Every bomb is self-limiting or bounded by the trial's deadline.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.trial.watchdog import WorkspaceLimit
from tests.integration.helpers import latest, run_experiment
from tests.security.helpers import HostileTask, Inspector, bash, kv, mean_task, probes, write_hostile

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DEADLINE_S = 20
HOST_BACKSTOP_S = DEADLINE_S + 10 + 20  # timeout -k grace, then the controller's docker kill

FORK_PROBE = r"""
python3 - <<'EOF'
import os, time
pids, err = [], None
for i in range(5000):
    try:
        pid = os.fork()
    except OSError as e:
        err = type(e).__name__
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    pids.append(pid)
evidence = f"forked={len(pids)}\nerror={err}\npids_max=" + open("/sys/fs/cgroup/pids/pids.max").read().strip()
# also in the workspace: with every pid taken, the CLI itself may abort before it can send this output
# back to the model, but the patch still carries the file
with open("/workspace/fork-evidence.txt", "w") as fh:
    fh.write(evidence + "\n")
print(evidence)
for p in pids:
    os.kill(p, 9)
for p in pids:
    os.waitpid(p, 0)
EOF
"""

MEMORY_BOMB = r"""
python3 - <<'EOF'
chunks = []
for i in range(48):              # 3 GiB in 64 MiB chunks, every page touched; the limit is 1 GiB
    chunks.append(bytearray(64 << 20))
print("bomb=" + "survived")
EOF
echo "exit=$?"
"""

TMPFS = r"""
head -c 200M /dev/zero > /tmp/fill 2>/dev/null; echo "tmp_rc=$?"
echo "tmp_kb=$(du -sk /tmp/fill | cut -f1)"
head -c 200M /dev/zero > /home/agent/fill 2>/dev/null; echo "home_rc=$?"
echo "home_kb=$(du -sk /home/agent/fill | cut -f1)"
rm -f /tmp/fill /home/agent/fill
python3 - <<'EOF'
import errno
def write(path, size):
    try:
        with open(path, "wb") as fh:
            fh.write(b"\0" * size)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print("fsize_16m=" + write("/workspace/ok-16m.bin", 16 << 20))
print("fsize_40m=" + write("/workspace/big-40m.bin", 40 << 20))
EOF
rm -f /workspace/ok-16m.bin /workspace/big-40m.bin
"""

FLOOD = r"""
{ timeout 4 yes FLOODFLOODFLOODFLOODFLOODFLOODFLOODFLOODFLOODFLOODFLOODFLOOD; echo $? > /tmp/flood-rc; } |
  tee /proc/1/fd/1 | wc -c > /tmp/flood-bytes
echo "flood_rc=$(cat /tmp/flood-rc)"
echo "flood_bytes=$(cat /tmp/flood-bytes)"
"""

STOP_TIMER = r"""
for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = timeout ] && kill -STOP "${p#/proc/}"; done
sleep 600
"""

FAKE_TIMEOUT = r"""
for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = timeout ] && kill -ALRM "${p#/proc/}"; done
sleep 30
"""

IGNORE_TERM = r"""
setsid python3 -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)' &
python3 -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'
"""


DEEP = r"""
python3 -c "
import os
os.chdir('/workspace')
for _ in range(1200):
    os.mkdir('d')
    os.chdir('d')
open('bottom.txt', 'w').write('deep')
print('depth=1200')
"
sleep 60
"""


def _task(task_id: str, steps: list[dict[str, Any]], **kw: Any) -> HostileTask:
    return HostileTask(task_id, baseline=steps, **kw)


@pytest.fixture(scope="module")
def bombed(
    sec_setup: Path, engine: Engine, images: ImageSet, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("res")
    tasks = [
        mean_task(sec_setup, "res-benign"),
        _task(
            "res-fork",
            [bash(FORK_PROBE, "fork"), bash(":(){ :|:& };: ; sleep 120", "bomb")],
            timeout_s=DEADLINE_S,
        ),
        _task("res-memory", [bash(MEMORY_BOMB, "memory")]),
        _task(
            "res-disk", [bash("for i in $(seq 1 40); do head -c 20M /dev/zero > /workspace/fill-$i; done; sleep 60")]
        ),
        _task(
            "res-inodes",
            [bash("mkdir -p /workspace/many && cd /workspace/many && seq 1 30000 | xargs touch; sleep 60")],
        ),
        _task("res-deep", [bash(DEEP)]),
        _task("res-tmpfs", [bash(TMPFS, "tmpfs")]),
        _task("res-bigpatch", [bash("head -c 9M /dev/urandom > /workspace/blob.bin; echo written=yes", "bigpatch")]),
        _task("res-flood", [bash(FLOOD, "flood")]),
        _task("res-loop", [bash("while :; do :; done")], timeout_s=DEADLINE_S),
        _task("res-ignore-term", [bash(IGNORE_TERM)], timeout_s=DEADLINE_S),
        _task("res-stop-timer", [bash(STOP_TIMER)], timeout_s=DEADLINE_S),
        _task("res-fake-timeout", [bash(FAKE_TIMEOUT)], timeout_s=DEADLINE_S),
    ]
    prereg, scen = write_hostile(
        sec_setup,
        "resources",
        tasks,
        resources={"memory": "1g", "tmpfs_size": "64m", "max_file_size": "32m"},
        budgets={"timeout_s": 60, "verify_timeout_s": 30},
    )
    work_root = tmp / "trials"
    work_root.mkdir(mode=0o700)
    log_sizes: dict[str, int] = {}

    def watch_log(name: str, _data: dict[str, Any]) -> None:
        for _ in range(1500):
            try:
                info = engine.inspect(name)
            except Exception:
                return
            path = info.get("LogPath") or ""
            if path and os.path.exists(path):
                log_sizes[name] = max(log_sizes.get(name, 0), os.path.getsize(path))
            if info.get("State", {}).get("Status") in ("exited", "dead"):
                return
            time.sleep(0.2)

    limit = WorkspaceLimit(max_bytes=200 << 20, max_files=5000, interval_s=0.5)
    t0 = time.monotonic()
    with Inspector(engine, hooks={"agent": watch_log}).running():
        result = run_experiment(engine, prereg, scen, tmp / "out", work_root, jobs=4, workspace_limit=limit)
    took = time.monotonic() - t0
    host_fork = subprocess.run(["true"], timeout=10).returncode
    return {
        "result": result,
        "records": latest(result),
        "probes": probes(tmp / "out"),
        "out": tmp / "out",
        "took": took,
        "work_root": work_root,
        "log_sizes": log_sizes,
        "host_fork": host_fork,
    }


def _rec(bombed: dict[str, Any], task: str) -> Any:
    return bombed["records"][f"{task}.baseline.0"]


def _probe(bombed: dict[str, Any], task: str, name: str) -> dict[str, str]:
    key = (task, "baseline", name)
    assert key in bombed["probes"], sorted(bombed["probes"])
    return kv(bombed["probes"][key])


def test_the_concurrent_benign_trials_are_unaffected(bombed: dict[str, Any]) -> None:
    for arm in ("baseline", "skill"):
        r = bombed["records"][f"res-benign.{arm}.0"]
        assert r.status == "completed" and r.verify is not None and r.verify.exit_code == 0, (r.status, r.error)
    assert bombed["host_fork"] == 0
    assert list(bombed["work_root"].iterdir()) == [], "every trial directory was removed (deep trees included)"


def test_every_attack_ends_as_a_recorded_outcome_within_its_deadline(bombed: dict[str, Any]) -> None:
    for r in bombed["records"].values():
        assert r.status != "infra_error", (r.trial_id, r.error)
        assert r.durations_s["agent"] < HOST_BACKSTOP_S + 15, (r.trial_id, r.durations_s)
        assert "teardown_incomplete" not in " ".join(r.flags), (r.trial_id, r.flags)


def _fork_evidence(bombed: dict[str, Any]) -> dict[str, str]:
    """The probe's tool result when the CLI survived to send it on, else the file it left in the patch."""
    key = ("res-fork", "baseline", "fork")
    if key in bombed["probes"]:
        return kv(bombed["probes"][key])
    r = _rec(bombed, "res-fork")
    assert r.patch is not None, r
    diff = (bombed["out"] / "artifacts" / r.patch.sha256[:2] / r.patch.sha256).read_text()
    assert "fork-evidence.txt" in diff, "the probe left no evidence at all"
    return kv("\n".join(line[1:] for line in diff.splitlines() if line.startswith("+") and "=" in line))


def test_fork_bomb_hits_the_pids_limit_then_the_deadline(bombed: dict[str, Any]) -> None:
    seen = _fork_evidence(bombed)
    assert seen["error"] == "BlockingIOError" and int(seen["forked"]) < int(seen["pids_max"]) == 512, seen
    # the CLI itself cannot start threads or processes any more: it aborts, or the deadline ends it
    r = _rec(bombed, "res-fork")
    assert r.status in ("timeout", "agent_error") and r.durations_s["agent"] < DEADLINE_S + 10 + 15, r


def test_memory_bomb_is_oom_killed_and_recorded(bombed: dict[str, Any]) -> None:
    seen = _probe(bombed, "res-memory", "memory")
    assert "bomb=survived" not in bombed["probes"][("res-memory", "baseline", "memory")]
    assert seen["exit"] == "137", seen
    r = _rec(bombed, "res-memory")
    assert r.oom_killed and r.status == "agent_error", (r.status, r.oom_killed)


@pytest.mark.parametrize(
    ("task", "reason"),
    [
        ("res-disk", f"more than {200 << 20} bytes added to the workspace"),
        ("res-inodes", "more than 5000 files and directories added to the workspace"),
        ("res-deep", "directories nested deeper than 100 in the workspace"),
    ],
)
def test_filling_the_workspace_trips_the_watchdog(bombed: dict[str, Any], task: str, reason: str) -> None:
    """Each attack trips the limit it aims at (so each limit is shown to work on its own)."""
    r = _rec(bombed, task)
    assert r.status == "agent_error", (r.status, r.error)
    assert [f for f in r.flags if f.startswith("workspace_limit")] == [f"workspace_limit: {reason}"], r.flags
    assert r.patch is not None and r.patch.rejected and r.patch.rejected.startswith("workspace_limit")
    assert r.verify is not None and r.verify.skipped_reason


def test_tmpfs_and_file_size_limits_hold(bombed: dict[str, Any]) -> None:
    seen = _probe(bombed, "res-tmpfs", "tmpfs")
    assert seen["tmp_rc"] != "0" and int(seen["tmp_kb"]) <= 64 * 1024, seen
    assert seen["home_rc"] != "0" and int(seen["home_kb"]) <= 64 * 1024, seen
    assert seen["fsize_16m"] == "ok", "positive control: a file under the limit is written"
    assert seen["fsize_40m"] == "EFBIG", seen
    assert _rec(bombed, "res-tmpfs").status == "completed"


def test_an_output_flood_is_capped(bombed: dict[str, Any], engine: Engine) -> None:
    if engine.endpoint().remote:
        pytest.skip("measures the json-file log on the engine's disk: a remote engine's is on another machine")
    seen = _probe(bombed, "res-flood", "flood")
    assert seen["flood_rc"] == "124", seen  # the flood really ran for its 4 s
    r = _rec(bombed, "res-flood")
    assert r.status in ("completed", "agent_error"), (r.status, r.error)
    flood_logs = [size for name, size in bombed["log_sizes"].items() if "res-flood" in name]
    assert flood_logs and max(flood_logs) <= 11 << 20, bombed["log_sizes"]
    agent_json = bombed["result"].experiment_dir.artifacts.get(r.artifacts["agent.json"])
    assert len(agent_json) <= 4 << 20
    # positive controls: more went to the container's stdout than either bound above allows (in the
    # json-file log each line is about twice its size), and the log file watched above did grow
    # with it, to near the 10 MB at which it is rotated
    assert int(seen["flood_bytes"]) > 11 << 20, seen
    assert max(flood_logs) > 4 << 20, bombed["log_sizes"]


@pytest.mark.parametrize("task", ["res-loop", "res-ignore-term"])
def test_a_busy_or_unkillable_agent_times_out_at_the_deadline(bombed: dict[str, Any], task: str) -> None:
    r = _rec(bombed, task)
    assert r.status == "timeout", (r.status, r.error, r.flags)
    assert DEADLINE_S <= r.durations_s["agent"] < DEADLINE_S + 10 + 15, r.durations_s


def test_a_frozen_in_container_timer_is_backed_by_the_host_deadline(bombed: dict[str, Any]) -> None:
    r = _rec(bombed, "res-stop-timer")
    assert r.status == "timeout", (r.status, r.error)
    assert HOST_BACKSTOP_S - 1 <= r.durations_s["agent"] < HOST_BACKSTOP_S + 15, r.durations_s


def test_a_faked_timeout_is_an_agent_error_not_a_truncated_trial(bombed: dict[str, Any]) -> None:
    """SIGALRM makes `timeout` exit 124 at once; a trial counted as 'timeout' would be excluded
    from the pass rate, so a skill could hide its failures this way."""
    r = _rec(bombed, "res-fake-timeout")
    assert r.status == "agent_error", (r.status, r.flags)
    assert any(f.startswith("self_terminated") for f in r.flags), r.flags
    assert r.durations_s["agent"] < DEADLINE_S


def test_a_huge_patch_is_rejected_not_applied(bombed: dict[str, Any]) -> None:
    assert _probe(bombed, "res-bigpatch", "bigpatch")["written"] == "yes"
    r = _rec(bombed, "res-bigpatch")
    assert r.patch is not None and r.patch.rejected and r.patch.rejected.startswith("too_large"), r.patch
    assert r.verify is not None and r.verify.exit_code is None and r.verify.skipped_reason
    # positive control: the benign trial's patch (same pipeline, small) is applied and verified
    assert _rec(bombed, "res-benign").patch.rejected is None
