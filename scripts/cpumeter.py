"""Who spent the machine's CPU while the bench ran: a meter process for ``scripts/bench.py --only throughput``.

    python3 scripts/cpumeter.py --cgroup-root skilltrial-bench-123 --controller 4567 > meter.json
    (writes "ready" on stderr once measuring; a line on stdin ends the window)

Linux, root, cgroup v1 (what the throughput part needs). It runs as a process of its own so that its own
work never lands in the controller's figures (its CPU is reported apart, and left out). What it records:

- the machine's CPU counters (``/proc/stat``) at both ends of the window;
- every thread's CPU (utime + stime, ``/proc/*/task/*/stat``) at both ends;
- every thread that ends inside the window, with the CPU of its whole life, its process, parent process and
  name, from the kernel's exit accounting (a taskstats listener on every CPU: exact, and nothing that ends
  between two looks is missed, which sampling ``/proc`` would miss: a tool call, a ``runc`` run);
- every 50 ms, the processes new since the last look: name, parent, start time, cgroup (so a process in a
  container is known by its container, one of the bench's or another's) and, for a ``containerd-shim``, the
  container it serves; and the ones that ended. A pid is one process from one start to its end: with
  ``pid_max`` 32768 a busy machine gives pids out again within minutes, so every record carries times
  (seconds since boot, the clock ``/proc``'s start times count in) and the analysis asks which process a
  pid was *then*;
- every 250 ms, the resident memory of the controller, of the shims of the bench's containers and of the
  engine (dockerd, containerd), keeping the peaks, and how many of the bench's agent containers run.

A thread's CPU inside the window is then its end value (or its exit value) minus its start value; the
analysis (:mod:`scripts.throughput`) sums them by process and names each process's part. Standard library
only: the bench starts it with the same interpreter.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import select
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

CGROUP_FS = "/sys/fs/cgroup"
SAMPLE_S = 0.05
MEMORY_S = 0.25
NETLINK_GENERIC = 16
SO_RCVBUFFORCE = 33
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
TASKSTATS_CMD_GET = 1
TASKSTATS_CMD_ATTR_REGISTER_CPUMASK = 3
TASKSTATS_TYPE_AGGR_PID = 4
TASKSTATS_TYPE_STATS = 3
NLM_F_REQUEST = 1
NLM_F_ACK = 4
# struct taskstats (linux/taskstats.h, version >= 13: ac_tgid): byte offsets of the fields read here
TS_COMM = slice(80, 112)
TS_PID_PPID = 128  # ac_pid (the thread), ac_ppid (the parent process), two u32
TS_ETIME = 144  # ac_etime: the thread's elapsed time, microseconds, u64
TS_UTIME_STIME = 152  # ac_utime, ac_stime: microseconds, two u64
TS_TGID = 368  # ac_tgid: u32
TS_MIN_VERSION = 13
CONTAINER_ID = re.compile(r"/([0-9a-f]{64})$")


def _nla(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("HH", size, kind) + payload + b"\0" * ((4 - size % 4) % 4)


def _attrs(data: bytes) -> list[tuple[int, bytes]]:
    out, i = [], 0
    while i + 4 <= len(data):
        size, kind = struct.unpack_from("HH", data, i)
        if size < 4:
            break
        out.append((kind & 0x3FFF, data[i + 4 : i + size]))
        i += (size + 3) & ~3
    return out


def _genl(family: int, cmd: int, attrs: bytes, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    payload = struct.pack("BBH", cmd, 1, 0) + attrs
    return struct.pack("IHHII", 16 + len(payload), family, flags, seq, 0) + payload


@dataclass(frozen=True)
class Exit:
    """One thread's end: its id, its process, the parent process, its name, the CPU of its whole life, when
    the meter received it (:func:`now`) and how long the thread had lived."""

    tid: int
    tgid: int
    ppid: int
    comm: str
    cpu_s: float
    t: float = 0.0
    elapsed_s: float = 0.0


def now() -> float:
    """The meter's clock: seconds since boot, the clock ``/proc/<pid>/stat``'s start times count in."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def parse_exits(message: bytes, t: float = 0.0) -> list[Exit]:
    """The per-thread records (``TASKSTATS_TYPE_AGGR_PID``) in one netlink read (several messages), received
    at ``t``."""
    out: list[Exit] = []
    off = 0
    while off + 20 <= len(message):
        size = struct.unpack_from("I", message, off)[0]
        if size < 20:
            break
        for kind, value in _attrs(message[off + 20 : off + size]):
            if kind != TASKSTATS_TYPE_AGGR_PID:
                continue
            stats = dict(_attrs(value)).get(TASKSTATS_TYPE_STATS)
            if stats is None or len(stats) < TS_TGID + 4:
                continue
            if struct.unpack_from("H", stats, 0)[0] < TS_MIN_VERSION:
                continue
            tid, ppid = struct.unpack_from("II", stats, TS_PID_PPID)
            utime, stime = struct.unpack_from("QQ", stats, TS_UTIME_STIME)
            tgid = struct.unpack_from("I", stats, TS_TGID)[0]
            elapsed = struct.unpack_from("Q", stats, TS_ETIME)[0]
            comm = stats[TS_COMM].split(b"\0")[0].decode(errors="replace")
            out.append(Exit(tid, tgid, ppid, comm, (utime + stime) / 1e6, t, elapsed / 1e6))
        off += (size + 3) & ~3
    return out


class ExitListener:
    """The kernel's exit accounting for every CPU (taskstats over generic netlink)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
        self.sock.bind((0, 0))
        self.sock.send(_genl(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, _nla(CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0"), 1))
        reply = self.sock.recv(65536)
        family = next((v for k, v in _attrs(reply[20:]) if k == CTRL_ATTR_FAMILY_ID), None)
        if family is None:
            raise SystemExit("cpumeter: the kernel has no taskstats (CONFIG_TASKSTATS)")
        self.family = struct.unpack("H", family[:2])[0]
        cpus = f"0-{(os.cpu_count() or 1) - 1}\0".encode()
        self.sock.send(
            _genl(
                self.family,
                TASKSTATS_CMD_GET,
                _nla(TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, cpus),
                2,
                NLM_F_REQUEST | NLM_F_ACK,
            )
        )
        self.exits: list[Exit] = []
        self.lost = 0

    def drain(self, timeout: float) -> None:
        """Read what is queued, waiting up to ``timeout`` for the first message."""
        wait = timeout
        while True:
            ready, _, _ = select.select([self.sock], [], [], wait)
            if not ready:
                return
            try:
                data = self.sock.recv(1 << 20)
            except OSError as e:
                if e.errno == errno.ENOBUFS:  # the queue overflowed: some exits are gone
                    self.lost += 1
                    continue
                raise
            self.exits.extend(parse_exits(data, now()))
            wait = 0


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def parse_stat(text: str) -> tuple[str, int, int]:
    """(name, parent pid, utime + stime in ticks) of a ``/proc/<pid>/stat`` or ``task/<tid>/stat`` line."""
    name, ppid, ticks, _ = parse_stat_started(text)
    return name, ppid, ticks


def parse_stat_started(text: str) -> tuple[str, int, int, int]:
    """:func:`parse_stat` and the start time (ticks since boot): a pid the kernel gave out again is a
    different process with another start time."""
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return name, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19])


def threads() -> dict[int, tuple[int, int, int]]:
    """tid -> (tgid, utime + stime ticks, start time ticks) of every thread on the machine now."""
    out: dict[int, tuple[int, int, int]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            text = _read(f"/proc/{pid}/task/{tid}/stat")
            if text:
                _, _, ticks, started = parse_stat_started(text)
                out[int(tid)] = (int(pid), ticks, started)
    return out


def machine() -> list[int]:
    """The ``cpu`` line of ``/proc/stat``: user nice system idle iowait irq softirq steal (ticks)."""
    text = _read("/proc/stat") or ""
    return [int(v) for v in text.splitlines()[0].split()[1:9]]


def rss_kib(pid: int) -> int:
    text = _read(f"/proc/{pid}/status") or ""
    m = re.search(r"^VmRSS:\s+(\d+)", text, re.M)
    return int(m.group(1)) if m else 0


@dataclass
class Proc:
    """One process (a pid from one start to its end: the kernel gives pids out again)."""

    pid: int
    comm: str
    ppid: int
    started: int
    """Start time, ticks since boot."""
    first: float
    """When the meter first saw it (:func:`now`)."""
    died: float | None = None
    """When the meter first missed it."""
    cgroup: str = ""
    """The cpuacct cgroup path ('/' for the root)."""
    container: str = ""
    """For a containerd-shim: the container it serves."""

    def row(self) -> list[Any]:
        return [self.pid, self.comm, self.ppid, self.cgroup, self.container, self.first, self.died]


@dataclass
class Sampler:
    cgroup_root: str
    controller: int
    alive: dict[int, Proc] = field(default_factory=dict)
    gone: list[Proc] = field(default_factory=list)
    peaks: dict[str, int] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)
    """The first memory sample (the window's start), for what grew."""
    agents_peak: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def look(self) -> None:
        """Every process new since the last look, again those seen first in the last half second (a
        container's first process joins the container's cgroup after it starts, and a fork takes the name
        of what it executes), and which ones ended."""
        t = now()
        listed = {int(n) for n in os.listdir("/proc") if n.isdigit()}
        for pid in [p for p in self.alive if p not in listed]:
            proc = self.alive.pop(pid)
            proc.died = t
            self.gone.append(proc)
        for pid in listed:
            known = self.alive.get(pid)
            if known is not None and t - known.first > 0.5:
                continue
            text = _read(f"/proc/{pid}/stat")
            if not text:
                continue
            comm, ppid, _, started = parse_stat_started(text)
            if known is not None and known.started != started:  # the pid was given out again in between
                known.died = t
                self.gone.append(known)
                known = None
            proc = known or Proc(pid, comm, ppid, started, t)
            proc.comm = comm
            cg = _read(f"/proc/{pid}/cgroup") or ""
            proc.cgroup = next((line.split(":", 2)[2] for line in cg.splitlines() if ":cpuacct" in line), "")
            if comm.startswith("containerd-shim"):
                cmd = (_read(f"/proc/{pid}/cmdline") or "").split("\0")
                if "-id" in cmd and cmd.index("-id") + 1 < len(cmd):
                    proc.container = cmd[cmd.index("-id") + 1]
            self.alive[pid] = proc

    def memory(self, ours: set[str]) -> None:
        """Resident memory now, the peaks kept: the controller, the bench's shims, dockerd + containerd."""
        procs = list(self.alive.values())
        shims = sum(rss_kib(p.pid) for p in procs if p.container and p.container in ours)
        engine = sum(rss_kib(p.pid) for p in procs if p.comm in ("dockerd", "containerd"))
        agents = {
            p.cgroup
            for p in procs
            if p.comm == "claude" and p.cgroup.startswith(f"/{self.cgroup_root}/") and "/agent/" in p.cgroup
        }
        for key, value in (("controller", rss_kib(self.controller)), ("shims", shims), ("engine", engine)):
            self.peaks[key] = max(self.peaks.get(key, 0), value)
            self.first.setdefault(key, value)
        self.agents_peak = max(self.agents_peak, len(agents))

    def ours(self) -> set[str]:
        out = set()
        for proc in (*self.alive.values(), *self.gone):
            m = CONTAINER_ID.search(proc.cgroup)
            if m and proc.cgroup.startswith(f"/{self.cgroup_root}/"):
                out.add(m.group(1))
        return out

    def run(self) -> None:
        last_memory = 0.0
        while not self.stop.wait(SAMPLE_S):
            self.look()
            if now() - last_memory >= MEMORY_S:
                self.memory(self.ours())
                last_memory = now()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cgroup-root", required=True, help="the bench's cgroup parent (no leading slash)")
    parser.add_argument("--controller", type=int, required=True, help="the controller's pid")
    args = parser.parse_args(argv)
    listener = ExitListener()
    sampler = Sampler(args.cgroup_root, args.controller)
    sampler.look()
    sampler.memory(set())
    t0 = now()
    start = {"machine": machine(), "threads": threads()}
    reader_stop = threading.Event()

    def read_exits() -> None:
        while not reader_stop.is_set():
            listener.drain(0.2)

    reader = threading.Thread(target=read_exits, daemon=True)
    reader.start()
    worker = threading.Thread(target=sampler.run, daemon=True)
    worker.start()
    print("ready", file=sys.stderr, flush=True)
    sys.stdin.readline()
    end = {"machine": machine(), "threads": threads()}
    t1 = now()
    sampler.stop.set()
    worker.join()
    sampler.look()
    time.sleep(0.3)  # exits of the last moment reach the socket
    reader_stop.set()
    reader.join()
    listener.drain(0.1)
    usage = os.times()
    out: dict[str, Any] = {
        "clk_tck": os.sysconf("SC_CLK_TCK"),
        "window_s": t1 - t0,
        "t": [t0, t1],
        "machine": [start["machine"], end["machine"]],
        "threads": [start["threads"], end["threads"]],
        "exits": [[e.tid, e.tgid, e.ppid, e.comm, e.cpu_s, e.t, e.elapsed_s] for e in listener.exits],
        "lost": listener.lost,
        "procs": [p.row() for p in (*sampler.gone, *sampler.alive.values())],
        "peaks_kib": sampler.peaks,
        "first_kib": sampler.first,
        "agents_peak": sampler.agents_peak,
        "self": {"pid": os.getpid(), "cpu_s": usage.user + usage.system},
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
