"""The throughput bench's accounting (scripts/throughput.py, scripts/cpumeter.py): pure parts, synthetic input.

The bench itself runs on the real engine (``python3 scripts/bench.py --only throughput``); these tests hold
the arithmetic that turns the meter's readings into parts: a thread's CPU inside the window, which process
belongs to which part, the kernel's exit records as the meter parses them, and the per-trial table."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from scripts.cpumeter import TS_MIN_VERSION, Exit, parse_exits, parse_stat, parse_stat_started
from scripts.throughput import Parts, Processes, account, classify, cpu_items, request_kind

CID_A = "a" * 64
CID_OTHER = "b" * 64
CONTROLLER = 100
METER = 101
ROOT = "skilltrial-bench-1"
AGENT_CG = f"/{ROOT}/cpu-l0/hx-r-fix-mean-s0-a1/agent/{CID_A}"
T0, T1 = 1000.0, 1100.0  # the window, seconds since boot

# pid -> (comm, ppid, cgroup, container), all seen by the meter from T0 on and alive through the window: a
# controller with a host git child, the engine, one trial's agent container (docker-init -> timeout ->
# claude), its shim and a runc run, another user's container (shim, runc, docker-init, claude), dockerd's
# iptables, another user's process, a kernel thread. The tool processes (bash -> python3 under claude) lived
# between two looks: only their exit records know them (``_meter``).
PROCS: dict[int, tuple[str, int, str, str]] = {
    2: ("kthreadd", 0, "/", ""),
    30: ("kworker/0:1", 2, "/", ""),
    10: ("dockerd", 1, "/", ""),
    11: ("containerd", 10, "/", ""),
    12: ("iptables", 10, "/", ""),
    CONTROLLER: ("python3", 1, "/", ""),
    METER: ("python3", CONTROLLER, "/", ""),
    102: ("git", CONTROLLER, "/", ""),
    200: ("containerd-shim", 1, "/", CID_A),
    201: ("runc", 200, "/", ""),
    210: ("docker-init", 200, AGENT_CG, ""),
    211: ("timeout", 210, AGENT_CG, ""),
    212: ("claude", 211, AGENT_CG, ""),
    300: ("containerd-shim", 1, "/", CID_OTHER),
    301: ("runc", 300, "/", ""),
    310: ("docker-init", 300, f"/docker/{CID_OTHER}", ""),
    311: ("claude", 310, f"/docker/{CID_OTHER}", ""),  # another user's trial: not this run's CLI
    400: ("pytest", 1, "/", ""),
}
TOOLS = [  # tid, tgid, ppid, comm, cpu, t, elapsed: exits of processes the meter never saw
    [213, 213, 212, "bash", 0.2, 1050.0, 0.03],
    [214, 214, 213, "python3", 0.6, 1050.0, 0.02],
]


def _rows(procs: dict[int, tuple[str, int, str, str]]) -> list[list[Any]]:
    return [[pid, comm, ppid, cg, ct, T0, None] for pid, (comm, ppid, cg, ct) in procs.items()]


def _meter(
    exits: list[list[Any]],
    start: dict[str, list[int]] | None = None,
    end: dict[str, list[int]] | None = None,
    procs: list[list[Any]] | None = None,
) -> dict[str, Any]:
    return {
        "clk_tck": 100,
        "t": [T0, T1],
        "threads": [start or {}, end or {}],
        "exits": exits,
        "lost": 0,
        "procs": _rows(PROCS) if procs is None else procs,
        "machine": [[0] * 8, [1000, 0, 500, 9000, 0, 20, 30, 0]],  # 15.5 CPU-s busy
        "self": {"pid": METER, "cpu_s": 0.4},
    }


def _kind(data: dict[str, Any], pid: int, t: float = 1050.0) -> tuple[str, str]:
    chain = Processes(data).chain(pid, t)
    return classify(chain, controller=CONTROLLER, meter=METER, root=ROOT, ours={CID_A})


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
        (10, ("engine_shared", "")),
        (11, ("engine_shared", "")),
        (12, ("engine_shared", "")),
        (CONTROLLER, ("controller", "")),
        (102, ("controller_children", "")),
        (METER, ("meter", "")),
        (30, ("kernel", "")),
        (400, ("others", "")),
        (999, ("others", "")),  # never seen at all
    ],
)
def test_each_process_is_known_by_its_cgroup_its_parents_and_its_name(pid: int, expected: tuple[str, str]) -> None:
    assert _kind(_meter(TOOLS), pid) == expected


def test_a_pid_given_out_again_is_another_process() -> None:
    """pid_max is 32768: on a busy machine a pid comes back within minutes. An earlier process of another
    user with the tool's pid, gone before the tool was born, must not lend it its identity (and the other
    way round)."""
    procs = _rows({k: v for k, v in PROCS.items()})
    procs.append([214, "pytest", 400, "/", "", T0, 1020.0])  # another user's, gone at 1020
    data = _meter(TOOLS, procs=procs)
    assert _kind(data, 214, 1050.0) == ("cli_children", "agent")
    assert _kind(data, 214, 1010.0) == ("others", "")
    procs.append([213, "make", 1, "/", "", 1060.0, None])  # bash's pid, again, after it ended
    data = _meter(TOOLS, procs=procs)
    assert _kind(data, 214, 1050.0) == ("cli_children", "agent"), "its parent as it was when the tool was born"
    assert _kind(data, 213, 1090.0) == ("others", "")


def test_a_threads_cpu_is_what_it_spent_inside_the_window() -> None:
    start = {"10": [10, 500, 10], "11": [11, 100, 10], "212": [212, 0, 99000], "400": [400, 50, 10]}
    end = {"10": [10, 700, 10], "11": [11, 100, 10], "7": [7, 40, 99500]}  # 7: born in the window, alive
    exits = [
        [212, 212, 211, "claude", 3.5, 1060.0, 70.0],  # alive at the start with 0 ticks: 3.5 s inside
        [400, 400, 1, "pytest", 4.0, 1030.0, 1029.9],  # 0.5 s before the window: 3.5 inside
        [214, 214, 213, "python3", 0.25, 1050.0, 0.02],  # born and gone inside
        [5000, 212, 211, "HeapHelper", 0.1, 1060.0, 30.0],  # a thread of claude: counted to its process
        [10, 10, 1, "dockerd", 9.0, 1100.2, 1100.1],  # ended just after the window: its end value counts
    ]
    got: dict[int, float] = {}
    for pid, _t, cpu in cpu_items(_meter(exits, start, end)):
        got[pid] = got.get(pid, 0.0) + cpu
    assert got == pytest.approx({10: 2.0, 11: 0.0, 7: 0.4, 212: 3.6, 400: 3.5, 214: 0.25})


def test_a_thread_id_given_out_again_is_not_subtracted_from() -> None:
    start = {"214": [214, 300, 50]}  # another process's thread with this id, 3 s of CPU, started at 0.5 s
    exits = [[214, 214, 213, "python3", 0.25, 1050.0, 0.02]]
    assert [cpu for _, _, cpu in cpu_items(_meter(exits, start))] == [0.25]


def test_every_cpu_second_is_in_one_part_and_shared_ones_are_apportioned() -> None:
    start = {"10": [10, 0, 10], "30": [30, 0, 10]}
    end = {"10": [10, 100, 10], "30": [30, 50, 10]}  # dockerd 1.0 s, a kworker 0.5 s
    exits = [  # the processes the meter saw from T0 on lived since before it: elapsed > t - T0
        [212, 212, 211, "claude", 4.0, 1060.0, 80.0],
        *TOOLS,
        [210, 210, 200, "docker-init", 0.1, 1061.0, 80.0],
        [200, 200, 1, "containerd-shim", 0.3, 1062.0, 80.0],
        [201, 201, 200, "runc", 0.3, 1062.0, 80.0],
        [300, 300, 1, "containerd-shim", 0.4, 1062.0, 80.0],
        [301, 301, 300, "runc", 0.2, 1062.0, 80.0],
        [102, 102, CONTROLLER, "git", 0.5, 1062.0, 80.0],
        [400, 400, 1, "pytest", 3.0, 1062.0, 80.0],
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
    assert parts.runs["cli_children:agent"] == {"bash": 1, "python3": 1}


def test_per_trial_divides_by_the_trials() -> None:
    parts = Parts(trials=4, cli={"agent": 8.0, "judge": 4.0}, containers={"agent": 8.0, "judge": 4.0})
    assert parts.cli_floor() == 3.0
    assert dict(parts.per_trial())["total"] == 3.0


def _taskstats(
    tid: int, tgid: int, ppid: int, comm: bytes, utime_us: int, stime_us: int, version: int = 16, etime_us: int = 0
) -> bytes:
    stats = bytearray(560)
    struct.pack_into("Q", stats, 144, etime_us)
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
    one = _taskstats(5001, 5000, 42, b"claude", 1_250_000, 250_000, etime_us=7_000_000)
    two = _taskstats(5002, 5002, 5000, b"bash", 10_000, 20_000, etime_us=40_000)
    old = _taskstats(6000, 6000, 1, b"old", 1, 1, version=TS_MIN_VERSION - 1)  # no ac_tgid: skipped
    got = parse_exits(_message(one) + _message(two, old), 1234.5)
    assert got == [
        Exit(5001, 5000, 42, "claude", 1.5, 1234.5, 7.0),
        Exit(5002, 5002, 5000, "bash", 0.03, 1234.5, 0.04),
    ]


def test_a_proc_stat_line_with_spaces_and_parentheses_in_its_name() -> None:
    line = "1234 (a (b) c) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 8800 0 0\n"
    assert parse_stat(line) == ("a (b) c", 77, 300)
    assert parse_stat_started(line) == ("a (b) c", 77, 300, 8800)


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
