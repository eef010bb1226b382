"""The throughput bench's accounting (scripts/throughput.py, scripts/cpumeter.py): pure parts, synthetic input.

The bench itself runs on the real engine (``python3 scripts/bench.py --only throughput``); these tests hold
the arithmetic that turns the meter's readings into parts: a thread's CPU inside the window, which process
belongs to which part, the kernel's exit records as the meter parses them, and the per-trial table."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from scripts.cpumeter import TS_MIN_VERSION, Exit, parse_exits, parse_stat
from scripts.throughput import Parts, account, classify, request_kind, thread_cpu

CID_A = "a" * 64
CID_OTHER = "b" * 64
CONTROLLER = 100
METER = 101
AGENT_CG = f"/skilltrial-bench-1/cpu-l0/hx-r-fix-mean-s0-a1/agent/{CID_A}"

# pid -> (comm, ppid, cgroup, container): a controller with a host git child, the engine, one trial's agent
# container (docker-init -> timeout -> claude -> bash -> python3), its shim and a runc run, another user's
# container shim and its runc, another user's process, a kernel thread
PROCS: dict[int, tuple[str, int, str, str]] = {
    1: ("init", 0, "", ""),
    2: ("kthreadd", 0, "", ""),
    30: ("kworker/0:1", 2, "", ""),
    10: ("dockerd", 1, "", ""),
    11: ("containerd", 10, "", ""),
    CONTROLLER: ("python3", 1, "", ""),
    METER: ("python3", CONTROLLER, "", ""),
    102: ("git", CONTROLLER, "", ""),
    200: ("containerd-shim", 1, "", CID_A),
    201: ("runc", 200, "", ""),
    210: ("docker-init", 200, AGENT_CG, ""),
    211: ("timeout", 210, AGENT_CG, ""),
    212: ("claude", 211, AGENT_CG, ""),
    213: ("bash", 212, "", ""),  # never seen by the sampler: known from its exit record
    214: ("python3", 213, "", ""),
    300: ("containerd-shim", 1, "", CID_OTHER),
    301: ("runc", 300, "", ""),
    310: ("docker-init", 300, f"/docker/{CID_OTHER}", ""),
    311: ("claude", 310, "", ""),  # another user's trial: not this run's CLI
    12: ("iptables", 10, "", ""),
    400: ("pytest", 1, "", ""),
}
ROOT = "skilltrial-bench-1"


def _procs() -> dict[int, dict[str, Any]]:
    return {p: {"comm": c, "ppid": pp, "cgroup": cg, "container": ct} for p, (c, pp, cg, ct) in PROCS.items()}


@pytest.mark.parametrize(
    ("pid", "expected"),
    [
        (212, ("cli", "agent")),
        (213, ("cli_children", "agent")),
        (214, ("cli_children", "agent")),
        (210, ("container", "agent")),
        (211, ("container", "agent")),
        (200, ("engine_ours", "")),
        (201, ("engine_ours", "")),
        (300, ("engine_others", "")),
        (301, ("engine_others", "")),
        (310, ("others", "")),
        (311, ("others", "")),
        (12, ("engine_shared", "")),
        (10, ("engine_shared", "")),
        (11, ("engine_shared", "")),
        (CONTROLLER, ("controller", "")),
        (102, ("controller_children", "")),
        (METER, ("meter", "")),
        (30, ("kernel", "")),
        (400, ("others", "")),
        (999, ("others", "")),  # never seen at all
    ],
)
def test_each_process_is_known_by_its_cgroup_its_parents_and_its_name(pid: int, expected: tuple[str, str]) -> None:
    assert classify(pid, _procs(), controller=CONTROLLER, meter=METER, root=ROOT, ours={CID_A}) == expected


def _meter(exits: list[list[Any]], start: dict[str, list[int]], end: dict[str, list[int]]) -> dict[str, Any]:
    procs = {str(p): v for p, v in _procs().items() if p not in (213, 214)}  # the tool processes: exits only
    return {
        "clk_tck": 100,
        "threads": [start, end],
        "exits": exits,
        "lost": 0,
        "procs": procs,
        "machine": [[0] * 8, [1000, 0, 500, 9000, 0, 20, 30, 0]],  # 15.5 CPU-s busy
        "self": {"pid": METER, "cpu_s": 0.4},
    }


def test_a_threads_cpu_is_what_it_spent_inside_the_window() -> None:
    start = {"10": [10, 500], "11": [11, 100], "212": [212, 0], "400": [400, 50]}
    end = {"10": [10, 700], "11": [11, 100]}
    exits = [
        [212, 212, 211, "claude", 3.5],  # alive at the start with 0 ticks: 3.5 s inside
        [400, 400, 1, "pytest", 4.0],  # 0.5 s before the window: 3.5 inside
        [214, 214, 213, "python3", 0.25],  # born and gone inside
        [5000, 212, 211, "HeapHelper", 0.1],  # a thread of claude: counted to its process
    ]
    got = thread_cpu(_meter(exits, start, end))
    assert got == pytest.approx({10: 2.0, 11: 0.0, 212: 3.6, 400: 3.5, 214: 0.25})


def test_every_cpu_second_is_in_one_part_and_shared_ones_are_apportioned() -> None:
    start = {"10": [10, 0], "30": [30, 0]}
    end = {"10": [10, 100], "30": [30, 50]}  # dockerd 1.0 s, a kworker 0.5 s
    exits = [
        [212, 212, 211, "claude", 4.0],
        [213, 213, 212, "bash", 0.2],
        [214, 214, 213, "python3", 0.6],
        [210, 210, 200, "docker-init", 0.1],
        [200, 200, 1, "containerd-shim", 0.3],
        [201, 201, 200, "runc", 0.3],
        [300, 300, 1, "containerd-shim", 0.4],
        [301, 301, 300, "runc", 0.2],
        [102, 102, CONTROLLER, "git", 0.5],
        [400, 400, 1, "pytest", 3.0],
    ]
    cgroups = {"hx-r-fix-mean-s0-a1": {"agent": 4.95, "gateway": 0.5}, "run": {"scripted": 0.3}}
    parts = account(
        _meter(exits, start, end),
        trials=1,
        cgroups=cgroups,
        ours={CID_A},
        controller_cpu_s=2.0,
        controller=CONTROLLER,
        root=ROOT,
    )
    assert parts.cli == {"agent": 4.0}
    assert parts.cli_children == {"agent": pytest.approx(0.8)}
    assert parts.containers["agent"] == 4.95 and parts.containers["gateway"] == 0.5 and parts.containers["run"] == 0.3
    assert parts.engine_ours == pytest.approx(0.6) and parts.engine_others == pytest.approx(0.6)
    assert parts.engine_share == pytest.approx(0.5), "half the per-container engine work was this run's"
    assert parts.engine_shared == pytest.approx(1.0)
    assert parts.machine == pytest.approx(15.5)
    # accounted: processes 4+0.2+0.6+0.1+0.3+0.3+0.4+0.2+0.5+3.0 + dockerd 1.0 + kworker 0.5, controller 2.0
    assert parts.no_process == pytest.approx(15.5 - 13.1)
    ours = 4.9 + 2.0 + 0.5 + 0.6 + 0.5  # containers' processes, controller, git, our engine, half of dockerd
    assert parts.ours_share == pytest.approx(ours / (ours + 3.0 + 0.6 + 0.5))
    rows = dict(parts.per_trial())
    assert rows["the agent's Claude Code process (`claude`)"] == 4.0
    assert parts.cli_floor() == 4.0
    assert rows["agent container, the rest (docker-init, timeout, runc's set-up inside it)"] == pytest.approx(0.15)
    assert rows["total"] == pytest.approx(sum(v for k, v in rows.items() if k != "total"))
    assert rows["total"] == pytest.approx(4.95 + 0.5 + 0.3 + 2.0 + 0.5 + 0.6 + 0.5 + (0.5 + 2.4) * parts.ours_share), (
        "the containers, the controller and its git, the engine (ours and our share), the kernel's share"
    )


def test_per_trial_divides_by_the_trials() -> None:
    parts = Parts(trials=4, cli={"agent": 8.0, "judge": 4.0}, containers={"agent": 8.0, "judge": 4.0})
    assert parts.cli_floor() == 3.0
    assert dict(parts.per_trial())["total"] == 3.0


def _taskstats(tid: int, tgid: int, ppid: int, comm: bytes, utime_us: int, stime_us: int, version: int = 16) -> bytes:
    stats = bytearray(560)
    struct.pack_into("H", stats, 0, version)
    stats[80 : 80 + len(comm)] = comm
    struct.pack_into("II", stats, 128, tid, ppid)
    struct.pack_into("QQ", stats, 152, utime_us, stime_us)
    struct.pack_into("I", stats, 368, tgid)
    return bytes(stats)


def _nla(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("HH", size, kind) + payload + b"\0" * ((4 - size % 4) % 4)


def _message(*records: bytes) -> bytes:
    body = b"".join(_nla(4, _nla(1, struct.pack("I", 7)) + _nla(3, r)) for r in records)
    payload = struct.pack("BBH", 3, 1, 0) + body
    return struct.pack("IHHII", 16 + len(payload), 31, 0, 0, 0) + payload


def test_the_kernels_exit_records_are_read_as_the_meter_reads_them() -> None:
    one = _taskstats(5001, 5000, 42, b"claude", 1_250_000, 250_000)
    two = _taskstats(5002, 5002, 5000, b"bash", 10_000, 20_000)
    old = _taskstats(6000, 6000, 1, b"old", 1, 1, version=TS_MIN_VERSION - 1)  # no ac_tgid: skipped
    got = parse_exits(_message(one) + _message(two, old))
    assert got == [Exit(5001, 5000, 42, "claude", 1.5), Exit(5002, 5002, 5000, "bash", 0.03)]


def test_a_proc_stat_line_with_spaces_and_parentheses_in_its_name() -> None:
    line = "1234 (a (b) c) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 0 0\n"
    assert parse_stat(line) == ("a (b) c", 77, 300)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http+docker://localhost/v1.41/containers/hx-r-k-agent/json", "/containers/{}/json"),
        ("http+docker://localhost/v1.41/containers/create?name=x", "/containers/create"),
        ("http+docker://localhost/v1.41/containers/abc/wait", "/containers/{}/wait"),
        ("http+docker://localhost/v1.41/networks/hx-net/connect", "/networks/{}/connect"),
        ("http+docker://localhost/v1.41/networks", "/networks"),
        ("http+docker://localhost/_ping", "/_ping"),
    ],
)
def test_engine_requests_are_counted_by_kind(url: str, kind: str) -> None:
    assert request_kind(url) == kind
