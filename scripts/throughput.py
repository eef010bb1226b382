"""Issue 27: what one trial costs the machine, part by part, and many trials at once.

``python3 scripts/bench.py --only throughput`` runs, on the machine's engine, against the scripted Messages API:

1. **CPU per trial, by part**, at model latency 0 over 8 trials of the careful-fixer design (``--jobs 1``),
   every CPU-second of the machine in the window accounted for: the two Claude Code processes (the agent's
   and the judge's ``claude``), the processes the agent's CLI starts (its tool calls), every role's
   container (gateway, agent, watch, collect, verify, judge) and the run's own (the scripted API), the
   engine (dockerd, containerd, the containers' shims and runc), the controller's Python (all its threads)
   and the host git it runs, the kernel's threads, and what no process was charged with;
2. **memory per concurrent trial**: the peak of one running trial (every container of it, one cgroup) with
   its share of the controller, and of 32 at once;
3. **32 at once, really**: 64 trials with 10 s model latency per turn (the agent's turns and the judge's)
   with ``--jobs 32``, against 8 of the same trials with ``--jobs 1`` scaled to 64, and the peak concurrency.

How each part is measured, and why it does not race the teardown:

- *Containers*: the bench's engine (:class:`MeteredEngine`) gives every container a cgroup parent of the
  bench's own, ``/<root>/<experiment>/<trial>/<role>/<container id>``. A container's own cgroup goes when
  the container does, but the parents stay, and cgroup v1's ``cpuacct.usage`` and
  ``memory.max_usage_in_bytes`` are hierarchical: a role's directory keeps the CPU of every container it
  held, a trial's directory the peak memory of all its containers together, whenever they were removed.
  Only the bench does this; the trial path is the one users run.
- *Processes*: a meter process (:mod:`scripts.cpumeter`) reads every thread's CPU at both ends of the window
  and the kernel's exit accounting (taskstats) for every thread that ends inside it, so a process is
  counted exactly whether it lived for an hour or for a millisecond (a tool call, a ``runc`` run), and by
  its parent chain and cgroup it is known as the agent's CLI, a child of it, a container's, the engine's,
  the controller's, or another user's.
- *Shared processes* (the engine's daemons, the kernel's threads, the time no process was charged with)
  also serve other users of a shared machine: they are apportioned by this run's share (the engine's by the
  share of per-container engine work, shims and runc, that was this run's; the kernel's by the share of all
  processes' CPU), and the whole machine's counters are printed beside them. On a quiet machine the shares
  are 1 and nothing is estimated.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.records import TrialRecord
from harness.sandbox import lifecycle
from harness.sandbox.engine import Engine
from harness.sandbox.labels import TRIAL, make_labels
from harness.sandbox.runtime import ContainerSpec, Limits
from scripts.cpumeter import parse_stat

if TYPE_CHECKING:
    from scripts.bench import Bench

RowText = tuple[str, str, str, str, str]
"""figure, measured, baseline (same run), ratio, target: one row of the bench's table"""

CGROUP_FS = Path("/sys/fs/cgroup")
METER = Path(__file__).resolve().parent / "cpumeter.py"
ROLES = ("gateway", "agent", "watch", "collect", "verify", "judge")
CLI_ROLES = ("agent", "judge")
ENGINE_NAMES = ("dockerd", "containerd", "containerd-shim", "runc", "docker-proxy")
SAFE = re.compile(r"[^A-Za-z0-9_.-]")
CONTAINER_ID = re.compile(r"/[0-9a-f]{64}$")
"""The last part of a container's own cgroup (cgroupfs driver): the container's id."""


# ------------------------------------------------------------------------------------------ the engine


class MeteredEngine(Engine):
    """The machine's engine as the bench uses it: every container under a cgroup parent of the bench's own
    (see the module docstring), the id of every container it made kept, every API request counted by kind."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = root
        self.experiment = "setup"
        self.containers: dict[str, tuple[str, str, str]] = {}
        """container id -> (experiment, trial or 'run', role)"""
        self.requests: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        api = self.client.api
        send = api.request

        def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.requests[(self.experiment, f"{method} {request_kind(url)}")] += 1
            return send(method, url, *args, **kwargs)

        api.request = counted  # type: ignore[method-assign,assignment]

    def place(self, spec: ContainerSpec) -> tuple[str, str]:
        """(trial or 'run', role) of a container from its name (``hx-<run>-<trial key>-<role>``) and labels."""
        stem, _, role = spec.name.rpartition("-")
        if TRIAL not in spec.labels:
            return "run", SAFE.sub("_", role or spec.name)
        return SAFE.sub("_", stem), SAFE.sub("_", role)

    def _create_kwargs(self, spec: ContainerSpec) -> dict[str, Any]:
        kwargs = super()._create_kwargs(spec)
        trial, role = self.place(spec)
        kwargs["cgroup_parent"] = f"/{self.root}/{self.experiment}/{trial}/{role}"
        return kwargs

    def create(self, spec: ContainerSpec, *, extra_networks: Sequence[str] = ()) -> str:
        cid = super().create(spec, extra_networks=extra_networks)
        with self._lock:
            self.containers[cid] = (self.experiment, *self.place(spec))
        return cid


if not callable(getattr(Engine, "_create_kwargs", None)):  # the seam the bench hooks; say so if it moves
    raise SystemExit("bench: Engine._create_kwargs is gone; scripts/throughput.py's MeteredEngine needs a new seam")


def request_kind(url: str) -> str:
    """An engine API path with the names and ids taken out: ``/containers/{}/json``."""
    path = re.sub(r"^[a-z+]+://[^/]+", "", url).split("?", 1)[0]
    parts = [p for p in path.split("/") if p and not re.fullmatch(r"v\d+\.\d+", p)]
    out: list[str] = []
    for i, part in enumerate(parts):
        named = i > 0 and parts[i - 1] in ("containers", "networks", "volumes", "images", "exec")
        out.append("{}" if named and part not in ("create", "prune", "json") else part)
    return "/" + "/".join(out)


# ------------------------------------------------------------------------------------------ the cgroups


def cgroup_usage(root: str, experiment: str) -> dict[str, dict[str, float]]:
    """trial ('run' for the run's own containers) -> role -> CPU-seconds of every container it held."""
    out: dict[str, dict[str, float]] = {}
    base = CGROUP_FS / "cpuacct" / root / experiment
    for trial in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []:
        for role in sorted(p for p in trial.iterdir() if p.is_dir()):
            usage = int((role / "cpuacct.usage").read_text()) / 1e9
            out.setdefault(trial.name, {})[role.name] = usage
    return out


def cgroup_peaks(root: str, experiment: str) -> tuple[int, dict[str, int]]:
    """(peak bytes of every container of the experiment together, trial -> peak bytes of its containers)."""
    base = CGROUP_FS / "memory" / root / experiment
    if not base.is_dir():
        return 0, {}
    whole = int((base / "memory.max_usage_in_bytes").read_text())
    trials = {
        p.name: int((p / "memory.max_usage_in_bytes").read_text())
        for p in base.iterdir()
        if p.is_dir() and p.name != "run"
    }
    return whole, trials


def remove_cgroups(root: str) -> None:
    """The bench's cgroup parents, in every hierarchy (runc made them; their containers are gone)."""
    for hierarchy in CGROUP_FS.iterdir():
        top = hierarchy / root
        if not top.is_dir():
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


# ------------------------------------------------------------------------------------------ the meter


class Meter:
    """The meter process around one measured window (:mod:`scripts.cpumeter`)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.data: dict[str, Any] = {}
        self._proc: subprocess.Popen[str] | None = None
        self.controller_cpu_s = 0.0
        self.controller_children_s = 0.0

    def __enter__(self) -> Meter:
        self._proc = subprocess.Popen(
            [sys.executable, str(METER), "--cgroup-root", self.root, "--controller", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stderr is not None
        line = self._proc.stderr.readline()
        if line.strip() != "ready":
            self._proc.kill()
            raise SystemExit(f"bench: the CPU meter did not start: {line}{self._proc.stderr.read()}")
        t = os.times()
        self._start = (t.user + t.system, t.children_user + t.children_system)
        return self

    def __exit__(self, *exc: object) -> None:
        t = os.times()
        self.controller_cpu_s = t.user + t.system - self._start[0]
        self.controller_children_s = t.children_user + t.children_system - self._start[1]
        assert self._proc is not None
        out, err = self._proc.communicate("stop\n", timeout=300)
        if self._proc.returncode != 0:
            raise SystemExit(f"bench: the CPU meter failed: {err}")
        self.data = json.loads(out)


# ------------------------------------------------------------------------------------------ the accounting


@dataclass
class Parts:
    """CPU-seconds of one measured window, by part (totals, not per trial)."""

    trials: int
    cli: dict[str, float] = field(default_factory=dict)
    """role -> its ``claude`` processes"""
    cli_children: dict[str, float] = field(default_factory=dict)
    """role -> the processes its CLI started (the agent's tool calls)"""
    containers: dict[str, float] = field(default_factory=dict)
    """role -> every container of that role (cgroup), the CLI and its children included; 'run': the run's"""
    controller: float = 0.0
    controller_children: float = 0.0
    engine_ours: float = 0.0
    """the shims and runc runs of this run's containers"""
    engine_shared: float = 0.0
    """dockerd, containerd, shims and runc runs not known to be another's: apportioned by ``engine_share``"""
    engine_others: float = 0.0
    engine_share: float = 1.0
    kernel: float = 0.0
    no_process: float = 0.0
    others: float = 0.0
    meter: float = 0.0
    machine: float = 0.0
    ours_share: float = 1.0
    in_containers: float = 0.0
    """the processes found in this run's containers (a check on the cgroups' totals)"""
    lost_exits: int = 0
    detail: dict[str, dict[str, float]] = field(default_factory=dict)
    """kind (as :func:`classify` names it, with ':role' for a container's) -> process name -> CPU-seconds"""
    runs: dict[str, Counter[str]] = field(default_factory=dict)
    """kind -> process name -> how many processes"""

    def per_trial(self) -> list[tuple[str, float]]:
        """(part, CPU-seconds per trial), every part of this run; the last line is the sum."""
        n = max(1, self.trials)
        rows = [
            ("the agent's Claude Code process (`claude`)", self.cli.get("agent", 0.0)),
            ("the judge's Claude Code process (`claude`)", self.cli.get("judge", 0.0)),
            (
                "the agent CLI's child processes (its tool calls: bash, python3, git ...)",
                self.cli_children.get("agent", 0.0),
            ),
            ("the judge CLI's child processes", self.cli_children.get("judge", 0.0)),
        ]
        for role in CLI_ROLES:
            rest = self.containers.get(role, 0.0) - self.cli.get(role, 0.0) - self.cli_children.get(role, 0.0)
            rows.append((f"{role} container, the rest (docker-init, timeout, runc's set-up inside it)", rest))
        for role in ("gateway", "watch", "collect", "verify"):
            rows.append((f"{role} container", self.containers.get(role, 0.0)))
        rows += [
            ("the run's own containers (scripted Messages API), shared by its trials", self.containers.get("run", 0.0)),
            ("controller: Python, all threads", self.controller),
            ("controller: its child processes (host git)", self.controller_children),
            ("engine: this run's containers' shims and runc runs", self.engine_ours),
            (
                f"engine: dockerd, containerd, unattributed shims and runc ({self.engine_share:.0%} of "
                f"{self.engine_shared:.1f} CPU-s: this run's share of the per-container engine work)",
                self.engine_shared * self.engine_share,
            ),
            (f"kernel threads ({self.ours_share:.0%} of {self.kernel:.1f} CPU-s)", self.kernel * self.ours_share),
            (
                f"unattributed: CPU time no process was charged with, interrupts ({self.ours_share:.0%} of "
                f"{self.no_process:.1f} CPU-s)",
                self.no_process * self.ours_share,
            ),
        ]
        total = sum(v for _, v in rows)
        return [(name, v / n) for name, v in rows] + [("total", total / n)]

    def cli_floor(self) -> float:
        """B: the two CLI processes, per trial."""
        return sum(self.cli.get(r, 0.0) for r in CLI_ROLES) / max(1, self.trials)


@dataclass
class Instance:
    """One process of the window: a pid from one start to its end (the kernel gives pids out again; on a busy
    machine with ``pid_max`` 32768, within minutes)."""

    pid: int
    comm: str
    ppid: int
    cgroup: str
    container: str
    first: float
    """When it was first seen (the meter's clock: seconds since boot); for one only its exit record knows,
    when it was born."""
    died: float | None


class Processes:
    """Every process of the window, by pid and time: the meter's looks, and the exit records of those that
    lived between two looks."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.by_pid: dict[int, list[Instance]] = {}
        for pid, comm, ppid, cgroup, container, first, died in data["procs"]:
            self._add(Instance(int(pid), str(comm), int(ppid), str(cgroup or ""), str(container or ""), first, died))
        for tid, tgid, ppid, comm, _cpu, t, elapsed in data["exits"]:
            if tid != tgid:
                continue
            seen = self.at(tgid, t, born=t - elapsed)
            if seen is not None:
                seen.comm = comm  # its name at exit is what it became (a fork seen before its exec)
            else:
                self._add(Instance(tgid, comm, ppid, "", "", t - elapsed, t))

    def _add(self, inst: Instance) -> None:
        self.by_pid.setdefault(inst.pid, []).append(inst)
        self.by_pid[inst.pid].sort(key=lambda i: i.first)

    def at(self, pid: int, t: float, born: float | None = None) -> Instance | None:
        """The process ``pid`` was at time ``t`` (born at ``born``, when known)."""
        for inst in reversed(self.by_pid.get(pid, [])):
            if inst.first > t + 0.1:
                continue
            if inst.died is not None and inst.died < t - 0.5:
                return None  # the latest one that started before t had ended by then
            if born is not None and inst.first < born - 0.1:
                return None  # seen before this one was born: an earlier process with the same pid
            return inst
        return None

    def chain(self, pid: int, t: float) -> list[Instance]:
        """The process ``pid`` was at ``t``, then its parent when it was first seen (or born), and so on."""
        out: list[Instance] = []
        inst = self.at(pid, t)
        while inst is not None and inst.pid not in (0, 1) and len(out) < 64 and inst not in out:
            out.append(inst)
            inst = self.at(inst.ppid, inst.first) or self.at(inst.ppid, t)
        return out


def cpu_items(data: Mapping[str, Any]) -> list[tuple[int, float, float]]:
    """(process id, when, CPU-seconds inside the window) of every thread: each thread's end value, or for a
    thread that ended its whole life's CPU from its exit record, less its value at the start when it was
    alive then (the same thread: the same start time)."""
    hz = float(data["clk_tck"])
    _t0, t1 = data["t"]
    start = {int(t): (int(g), v / hz, st / hz) for t, (g, v, st) in data["threads"][0].items()}
    end = {int(t): (int(g), v / hz, st / hz) for t, (g, v, st) in data["threads"][1].items()}
    out: list[tuple[int, float, float]] = []
    for tid, tgid, _ppid, _comm, cpu, t, elapsed in data["exits"]:
        born = t - elapsed
        last = end.get(tid)
        if last is not None and last[0] == tgid and abs(last[2] - born) < 0.1:
            continue  # it ended after the window: the end value counts
        before = start.get(tid)
        same = before is not None and before[0] == tgid and abs(before[2] - born) < 0.1
        out.append((tgid, min(t, t1), max(0.0, cpu - before[1] if same and before is not None else cpu)))
    for tid, (tgid, cpu, started) in end.items():
        before = start.get(tid)
        same = before is not None and before[0] == tgid and before[2] == started
        out.append((tgid, t1, max(0.0, cpu - before[1] if same and before is not None else cpu)))
    return out


def classify(chain: Sequence[Instance], *, controller: int, meter: int, root: str, ours: set[str]) -> tuple[str, str]:
    """(kind, role) of one process, given it and its ancestors (:meth:`Processes.chain`), by its own cgroup
    or the nearest one of its ancestors', its ancestors and its name:

    ``cli`` / ``cli_children`` / ``container``  in one of this run's containers (``/<root>/...``; role from
        the cgroup): a ``claude``, a process with a ``claude`` among its ancestors, any other;
    ``others``  in another container, or no part of this run (another user's test suite);
    ``engine_ours`` / ``engine_others``  a shim, or a process it started (runc, dockerd's hooks), of this
        run's containers / of another's;
    ``engine_shared``  dockerd, containerd (and what they start: iptables), a shim or runc of no known
        container;
    ``controller`` / ``controller_children``  the controller, a process it started (host git, mount);
    ``kernel``  a kernel thread; ``meter``  the meter itself."""
    if not chain:
        return "others", ""
    pid, comm = chain[0].pid, chain[0].comm
    if pid == meter:
        return "meter", ""
    if pid == controller:
        return "controller", ""
    in_container = next((i.cgroup for i in chain if CONTAINER_ID.search(i.cgroup)), "")
    if in_container.startswith(f"/{root}/"):
        parts = in_container.strip("/").split("/")
        role = parts[-2] if len(parts) >= 2 else ""
        if comm == "claude":
            return "cli", role
        under_cli = any(i.comm == "claude" for i in chain[1:])
        return ("cli_children" if under_cli else "container"), role
    if in_container:
        return "others", ""
    served = next((i.container for i in chain if i.container), "")
    if served:
        return ("engine_ours" if served in ours else "engine_others"), ""
    if any(i.comm in ENGINE_NAMES or i.comm.startswith(("runc", "containerd-shim")) for i in chain):
        return "engine_shared", ""
    if any(i.pid == controller for i in chain):
        return "controller_children", ""
    if pid == 2 or chain[0].ppid == 2:
        return "kernel", ""
    return "others", ""


def account(
    data: Mapping[str, Any],
    *,
    trials: int,
    cgroups: Mapping[str, Mapping[str, float]],
    ours: set[str],
    controller_cpu_s: float,
    controller: int,
    root: str,
) -> Parts:
    """Every CPU-second of the window, by part (see :class:`Parts`)."""
    parts = Parts(trials=trials, lost_exits=int(data.get("lost", 0)))
    parts.containers = {role: sum(r.get(role, 0.0) for t, r in cgroups.items() if t != "run") for role in ROLES}
    parts.containers["run"] = sum(cgroups.get("run", {}).values())  # the run's own, whatever their roles
    procs = Processes(data)
    meter = int(data["self"]["pid"])
    by_kind: dict[str, float] = {}
    counted: set[tuple[str, int, float]] = set()
    for pid, t, cpu in cpu_items(data):
        chain = procs.chain(pid, t)
        kind, role = classify(chain, controller=controller, meter=meter, root=root, ours=ours)
        if kind == "cli":
            parts.cli[role] = parts.cli.get(role, 0.0) + cpu
        elif kind == "cli_children":
            parts.cli_children[role] = parts.cli_children.get(role, 0.0) + cpu
        by_kind[kind] = by_kind.get(kind, 0.0) + cpu
        key = f"{kind}:{role}" if role else kind
        name = chain[0].comm if chain else "?"
        spent = parts.detail.setdefault(key, {})
        spent[name] = spent.get(name, 0.0) + cpu
        process = (key, pid, chain[0].first if chain else t)
        if process not in counted:  # a process, not each of its threads
            counted.add(process)
            parts.runs.setdefault(key, Counter())[name] += 1
    parts.in_containers = sum(by_kind.get(k, 0.0) for k in ("cli", "cli_children", "container"))
    parts.controller = controller_cpu_s
    parts.controller_children = by_kind.get("controller_children", 0.0)
    parts.engine_ours = by_kind.get("engine_ours", 0.0)
    parts.engine_shared = by_kind.get("engine_shared", 0.0)
    parts.engine_others = by_kind.get("engine_others", 0.0)
    per_container = parts.engine_ours + parts.engine_others
    parts.engine_share = parts.engine_ours / per_container if per_container > 0 else 1.0
    parts.kernel = by_kind.get("kernel", 0.0)
    parts.others = by_kind.get("others", 0.0)
    parts.meter = float(data["self"]["cpu_s"])
    hz = float(data["clk_tck"])
    m0, m1 = data["machine"]
    ticks = [b - a for a, b in zip(m0, m1, strict=True)]
    parts.machine = (ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]) / hz  # user nice system irq softirq
    accounted = sum(by_kind.values()) - by_kind.get("controller", 0.0) + controller_cpu_s
    parts.no_process = max(0.0, parts.machine - accounted)
    ours_user = (
        parts.in_containers
        + controller_cpu_s
        + parts.controller_children
        + parts.engine_ours
        + parts.engine_shared * parts.engine_share
    )
    everyone = ours_user + parts.others + parts.engine_others + parts.engine_shared * (1 - parts.engine_share)
    parts.ours_share = ours_user / everyone if everyone > 0 else 1.0
    return parts


def parts_table(parts: Parts, title: str) -> str:
    rows = parts.per_trial()
    total = rows[-1][1]
    lines = [f"| {title} | CPU-s per trial | share |", "| --- | --- | --- |"]
    for name, value in rows:
        bold = "**" if name == "total" else ""
        lines.append(f"| {bold}{name}{bold} | {bold}{value:.2f}{bold} | {value / total:.0%} |")
    n = max(1, parts.trials)
    check = parts.in_containers / max(1e-9, sum(v for k, v in parts.containers.items()))
    lines += [
        "",
        f"Window: {parts.machine:.1f} CPU-s on the whole machine ({parts.machine / n:.2f} per trial), of which "
        f"other users' processes {parts.others:.1f}, other containers' shims and runc {parts.engine_others:.1f}, "
        f"the meter itself {parts.meter:.1f} (left out); {parts.trials} trials. Processes found in this run's "
        f"containers: {check:.0%} of their cgroups' CPU. Exit records lost: {parts.lost_exits}.",
        "",
        "Inside the parts (CPU-s per trial, processes per trial):",
        "",
    ]
    for key, label in DETAIL:
        spent = parts.detail.get(key, {})
        runs = parts.runs.get(key, Counter())
        if spent:
            most = sorted(spent.items(), key=lambda kv: -kv[1])[:6]
            top = ", ".join(f"{name} {cpu / n:.2f} ({runs[name] / n:g})" for name, cpu in most)
            lines.append(f"- {label}: {top}")
    return "\n".join(lines)


DETAIL = (
    ("cli_children:agent", "the agent CLI's children"),
    ("container:agent", "the agent container's other processes"),
    ("container:gateway", "the gateway container"),
    ("container:collect", "the collect container"),
    ("container:verify", "the verify container"),
    ("container:judge", "the judge container's other processes"),
    ("engine_ours", "the engine, for this run's containers (exe: dockerd's binary run as runc's network hook)"),
    ("engine_shared", "the engine, shared"),
    ("controller_children", "the controller's children"),
)


# ------------------------------------------------------------------------------------------ the runs


def peak_concurrency(records: Sequence[TrialRecord]) -> int:
    """The most trials whose (started_at, finished_at) intervals overlap at one moment."""
    events = sorted(
        [(r.started_at, 1) for r in records if r.started_at and r.finished_at]
        + [(r.finished_at, -1) for r in records if r.started_at and r.finished_at],
        key=lambda e: (e[0], e[1]),
    )
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


@dataclass
class Measured:
    parts: Parts
    records: list[TrialRecord]
    wall_s: float
    peak_bytes: int
    trial_peaks: dict[str, int]
    memory_kib: Mapping[str, int]
    memory_start_kib: Mapping[str, int]
    agents_peak: int
    requests: Counter[str]


def measured_run(bench: Bench, engine: MeteredEngine, prereg: Path, *, jobs: int, out: str) -> Measured:
    """One experiment on the metered engine, inside one meter window."""
    engine.experiment = SAFE.sub("_", out)
    with Meter(engine.root) as meter:
        result, wall = bench.run(prereg, jobs=jobs, out=out, engine=engine)
    # the raw readings, for a second look at the attribution
    (bench.work / f"meter-{engine.experiment}.json").write_text(json.dumps(meter.data))
    cgroups = cgroup_usage(engine.root, engine.experiment)
    ours = {cid for cid, (exp, _, _) in engine.containers.items() if exp == engine.experiment}
    parts = account(
        meter.data,
        trials=len(result.records),
        cgroups=cgroups,
        ours=ours,
        controller_cpu_s=meter.controller_cpu_s,
        controller=os.getpid(),
        root=engine.root,
    )
    whole, trials = cgroup_peaks(engine.root, engine.experiment)
    requests = Counter({kind: n for (exp, kind), n in engine.requests.items() if exp == engine.experiment})
    return Measured(
        parts=parts,
        records=list(result.records),
        wall_s=wall,
        peak_bytes=whole,
        trial_peaks=trials,
        memory_kib=meter.data["peaks_kib"],
        memory_start_kib=meter.data["first_kib"],
        agents_peak=int(meter.data["agents_peak"]),
        requests=requests,
    )


# ------------------------------------------------------------------------------------------ engine unit costs


def engine_daemons_cpu() -> float:
    """CPU-seconds dockerd and containerd have spent so far: all their threads, and the children they waited
    for (dockerd's iptables runs and re-executions of itself, containerd's shim starts)."""
    hz = float(os.sysconf("SC_CLK_TCK"))
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name, _ppid, _ticks = parse_stat(text)
        if name in ("dockerd", "containerd"):
            fields = text[text.rindex(")") + 2 :].split()
            total += sum(int(f) for f in fields[11:15]) / hz  # utime stime cutime cstime
    return total


@dataclass(frozen=True)
class UnitCost:
    kind: str
    per_call_s: float
    calls: int
    background_s: float


@dataclass
class BenchContainers:
    """The bench's own throw-away containers and networks, one labelled run of them (``bench-<what>``): names
    that never repeat, the trial image's ``true`` or ``sleep``, hardened as the harness's own are (the
    engine's create), removed together by :meth:`remove`."""

    engine: Engine
    image: str
    what: str
    tag: str = field(default_factory=lambda: os.urandom(3).hex())
    serial: Iterator[int] = field(default_factory=lambda: iter(range(1 << 30)))

    @property
    def labels(self) -> dict[str, str]:
        return make_labels(f"bench-{self.what}", role="bench", ttl_s=900, purpose="bench")

    def name(self) -> str:
        return f"hx-bench-{self.what}-{self.tag}-{next(self.serial)}"

    def spec(self, command: tuple[str, ...] = ("true",), net: str = "none") -> ContainerSpec:
        return ContainerSpec(name=self.name(), image=self.image, command=command, labels=self.labels,
                             user="65534:65534", network=net, limits=Limits(memory="64m", pids=16))  # fmt: skip

    def life(self, net: str = "none") -> None:
        """One container's whole life as a trial's role has it: create, start, wait, inspect, logs, remove."""
        lifecycle.run(self.engine, self.spec(net=net), deadline_s=60)

    def network(self) -> str:
        name = self.name()
        self.engine.create_network(name, self.labels, internal=True)
        return name

    def resident(self, net: str = "none") -> str:
        """A container that stays up (``sleep``) for requests and execs to be measured on."""
        spec = self.spec(("sleep", "900"), net)
        self.engine.create(spec)
        self.engine.start(spec.name)
        return spec.name

    def remove(self) -> None:
        lifecycle.remove_labelled(self.engine, {"harness.run": f"bench-{self.what}"})


def engine_unit_costs(engine: MeteredEngine, image: str, *, repeat: int, rounds: int = 3) -> list[UnitCost]:
    """What dockerd and containerd spend per request of the kinds a trial makes most (issue 27 item 4: fewer
    engine round trips), in bursts (:func:`measure_bursts`). The shims, runc and dockerd's network hook a
    container start also costs are not in these: the parts table has them exactly."""
    engine.experiment = "unit-costs"
    bench = BenchContainers(engine, image, "units")

    def net_cycle() -> None:
        engine.remove_network(bench.network())

    try:
        sleeper, network = bench.resident(), bench.network()
        kinds: list[tuple[str, int, Callable[[], object]]] = [
            ("GET /containers/{}/json (inspect)", repeat * 20, lambda: engine.inspect(sleeper)),
            ("GET /containers/{}/logs", repeat * 10, lambda: engine.logs(sleeper, stdout=True, stderr=True)),
            ("GET /version (the least a request costs)", repeat * 20, lambda: engine.client.api.version()),
            ("a container's life on --network none: create, start, wait, inspect, logs, remove", repeat, bench.life),
            ("the same on a trial's internal network", repeat, lambda: bench.life(network)),
            ("a trial network's create and remove", repeat, net_cycle),
        ]  # fmt: skip
        return measure_bursts(kinds, engine_daemons_cpu, rounds=rounds)
    finally:
        bench.remove()


def measure_bursts(
    kinds: Sequence[tuple[str, int, Callable[[], object]]], meter: Callable[[], float], *, rounds: int
) -> list[UnitCost]:
    """Each kind's calls in a burst between two idle windows of 3 s, by ``meter`` (CPU-seconds spent so far),
    the background rate of those windows taken out (other users' work on a shared machine is that background,
    and it moves: each kind is measured ``rounds`` times and the median kept)."""

    def idle(seconds: float = 3.0) -> float:
        c0, t0 = meter(), time.monotonic()
        time.sleep(seconds)
        return (meter() - c0) / (time.monotonic() - t0)

    found: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for kind, calls, step in kinds:
            before = idle()
            c0, t0 = meter(), time.monotonic()
            for _ in range(calls):
                step()
            spent, took = meter() - c0, time.monotonic() - t0
            rate = (before + idle()) / 2
            found.setdefault(kind, []).append(((spent - rate * took) / calls, rate * took))
    return [
        UnitCost(
            kind, max(0.0, statistics.median(v for v, _ in found[kind])), calls * rounds, sum(b for _, b in found[kind])
        )
        for kind, calls, _ in kinds
    ]


def machine_cpu() -> float:
    """CPU-seconds the whole machine has spent (user, nice, system, irq, softirq), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(f) for f in fields]
    return (ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]) / os.sysconf("SC_CLK_TCK")


def judge_per_run_costs(engine: MeteredEngine, image: str, *, repeat: int, rounds: int = 3) -> list[UnitCost]:
    """Issue 27 item 4's first candidate, measured before it is built: what one verdict's container costs the
    whole machine today (a fresh container's life on the trial's network), against what a run's judge
    container taking verdicts one at a time would spend per verdict (``docker exec`` of one process, and the
    network connect and disconnect that reach the trial's gateway). Machine-wide CPU (runc, the shims and the
    controller's side included, which the daemons' unit costs leave out), the idle rate taken out as there;
    a quiet machine is needed for these to mean anything."""
    engine.experiment = "judge-per-run"
    bench = BenchContainers(engine, image, "judge")
    try:
        network = bench.network()
        resident = bench.resident(bench.network())  # where a run's judge would live

        def exec_one() -> None:
            code, _ = engine.exec_run(resident, ["true"])
            assert code == 0

        def connected_exec() -> None:
            engine.client.api.connect_container_to_network(resident, network)
            exec_one()
            engine.client.api.disconnect_container_from_network(resident, network)

        kinds: list[tuple[str, int, Callable[[], object]]] = [
            ("today: the judge's own container on the trial's network (create, start, wait, logs, remove)", repeat,
             lambda: bench.life(network)),
            ("a run's judge container: exec one process", repeat, exec_one),
            ("a run's judge container: connect to the trial's network, exec one process, disconnect", repeat,
             connected_exec),
        ]  # fmt: skip
        return measure_bursts(kinds, machine_cpu, rounds=rounds)
    finally:
        bench.remove()


def isolation_floor_costs(engine: MeteredEngine, image: str, *, repeat: int, rounds: int = 3) -> list[UnitCost]:
    """What the isolation alone costs a trial, against issue 27's R target: the containers and the network a
    trial must have fresh, each container running ``true`` and nothing else (no gateway, no CLI, no git), the
    whole machine's CPU per trial (engine, shims, runc, kernel and the controller's side of it), in bursts as
    :func:`judge_per_run_costs`. As built: the trial's network with three containers on it (gateway, agent,
    judge) and two without (collect, verify); with a judge per run, two on it."""
    engine.experiment = "isolation-floor"
    bench = BenchContainers(engine, image, "floor")

    def trial(on_network: int) -> Callable[[], None]:
        def containers() -> None:
            network = bench.network()
            for _ in range(on_network):
                bench.life(network)
            for _ in range(2):
                bench.life()
            engine.remove_network(network)

        return containers

    kinds: list[tuple[str, int, Callable[[], object]]] = [
        ("as built: a network, 3 containers on it (gateway, agent, judge), 2 without (collect, verify)", repeat,
         trial(3)),
        ("with a judge container per run: the network, 2 on it (gateway, agent), 2 without", repeat, trial(2)),
    ]  # fmt: skip
    try:
        return measure_bursts(kinds, machine_cpu, rounds=rounds)
    finally:
        bench.remove()


def isolation_floor_table(costs: Sequence[UnitCost], clis_s: float) -> str:
    lines = [
        "The isolation's own floor: a trial's fresh containers and network doing nothing (each container runs "
        "`true`), the whole machine's CPU per trial, against the two CLI processes of the latency-0 run (B):",
        "",
        "| a trial's containers, empty | machine CPU per trial (median of the rounds) | / B | calls (background taken out) |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {c.kind} | {c.per_call_s:.2f} CPU-s | {c.per_call_s / clis_s:.2f}x | {c.calls} ({c.background_s:.2f} CPU-s) |"
        for c in costs
    ]
    return "\n".join(lines)


def judge_per_run_table(costs: Sequence[UnitCost]) -> str:
    lines = [
        "A judge container per run, measured before building it (the whole machine's CPU per verdict's container "
        "work, the idle rate taken out; the judge's Claude Code process is the same either way):",
        "",
        "| per verdict | machine CPU (median of the rounds) | calls (background taken out) |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {c.kind} | {c.per_call_s * 1000:.0f} ms | {c.calls} ({c.background_s:.2f} CPU-s) |" for c in costs]
    return "\n".join(lines)


def unit_costs_table(costs: Sequence[UnitCost], requests: Counter[str], parts: Parts) -> str:
    lines = [
        "Engine daemons (dockerd + containerd, with the children they wait for: iptables, dockerd's re-executions, "
        "shim starts) per request, in bursts between idle windows, the background rate taken out:",
        "",
        "| request | dockerd + containerd per call (median of the rounds) | calls (background taken out) |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {c.kind} | {c.per_call_s * 1000:.1f} ms | {c.calls} ({c.background_s:.2f} CPU-s) |" for c in costs]
    unit = {c.kind.split(" (")[0].split(":")[0]: c.per_call_s for c in costs}
    n = max(1, parts.trials)
    creates = sum(v for k, v in requests.items() if k.endswith("/containers/create")) / n
    networks = sum(v for k, v in requests.items() if k.endswith("/networks/create")) / n
    total = sum(requests.values()) / n
    life = (
        unit.get("a container's life on --network none", 0) + unit.get("the same on a trial's internal network", 0)
    ) / 2
    estimate = (
        creates * life
        + max(0.0, total - 7 * creates) * unit.get("GET /version", 0)
        + networks * unit.get("a trial network's create and remove", 0)
    )
    lines += [
        "",
        f"By these unit costs a trial's {total:.0f} requests ({creates:.1f} containers, {networks:.1f} networks) cost "
        f"the daemons about {estimate:.2f} CPU-s; the parts table apportions "
        f"{parts.engine_shared * parts.engine_share / n:.2f} CPU-s per trial of dockerd, containerd and the "
        "unattributed shims and runc to this run (by its share of the per-container engine work). On a quiet "
        "engine the two agree; on a shared one they differ as much as other users' engine work is shaped "
        "unlike this run's (image builds, archive copies).",
    ]
    return "\n".join(lines)


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def measurable() -> str | None:
    """Why this machine cannot measure the throughput part (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (cgroup parents, the kernel's exit accounting)"
    if not (CGROUP_FS / "cpuacct").is_dir() or not (CGROUP_FS / "memory").is_dir():
        return "needs cgroup v1 (the cpuacct and memory hierarchies)"
    return None


def cpu_window(
    bench: Bench, engine: MeteredEngine, tasks: Sequence[str], log: Callable[[str], None]
) -> tuple[Measured, RowText]:
    """Item 1: CPU per trial by part at model latency 0, ``--jobs 1``, 2 trials a task (its tables go to
    ``bench.notes``). Alone (``--only cpu``) it is issue 27 item 4's A/B: run it in two checkouts in turn."""
    scen0 = bench.scenario(tasks, latency_ms=0, baseline_p=1, skills={"careful-fixer": 1})
    log(f"throughput: CPU per trial, {len(tasks) * 2} trials at model latency 0, --jobs 1 ...")
    cpu = measured_run(
        bench,
        engine,
        bench.experiment(skill="careful-fixer", tasks=tasks, runs=1, scenario=scen0),
        jobs=1,
        out="cpu-l0",
    )
    b = cpu.parts.cli_floor()
    total = cpu.parts.per_trial()[-1][1]
    a = total - b
    bench.notes.append(
        parts_table(cpu.parts, f"CPU per trial by part: latency 0, `--jobs 1`, {cpu.parts.trials} trials")
    )
    bench.notes.append(requests_table(cpu.requests, cpu.parts.trials))
    log(f"throughput: CPU per trial {total:.2f} CPU-s (CLIs {b:.2f})")
    row = (
        "harness CPU per trial (all but the two CLI processes), latency 0",
        f"{a:.2f} CPU-s",
        f"the two CLI processes: {b:.2f} CPU-s",
        f"{a / b:.2f}x",
        "<= 1.0x",
    )
    return cpu, row


def cpu_rows(bench: Bench, all_tasks: Sequence[str], log: Callable[[str], None]) -> list[RowText]:
    """The item-1 row alone, with its tables (``--only cpu``: about a minute)."""
    root = f"skilltrial-bench-{os.getpid()}"
    engine = MeteredEngine(root)
    try:
        _, row = cpu_window(bench, engine, list(all_tasks[:2] if bench.quick else all_tasks[:4]), log)
    finally:
        remove_cgroups(root)
    return [row]


def throughput_rows(bench: Bench, all_tasks: Sequence[str], log: Callable[[str], None]) -> list[RowText]:
    """The rows of items 1 to 3 (the tables of parts go to ``bench.notes``)."""
    root = f"skilltrial-bench-{os.getpid()}"
    engine = MeteredEngine(root)
    quick = bench.quick
    tasks = list(all_tasks[:2] if quick else all_tasks[:4])
    rows: list[RowText] = []
    try:
        cpu, row = cpu_window(bench, engine, tasks, log)
        rows.append(row)
        one = max(cpu.trial_peaks.values()) if cpu.trial_peaks else 0
        typical = statistics.median(cpu.trial_peaks.values()) if cpu.trial_peaks else 0
        log(f"throughput: one trial's peak memory {_mib(one)}")
        log("throughput: the engine daemons' CPU per request ...")
        units = engine_unit_costs(engine, bench.images.trial, repeat=4 if quick else 10)
        bench.notes.append(unit_costs_table(units, cpu.requests, cpu.parts))
        log("throughput: a judge container per run, per verdict ...")
        bench.notes.append(
            judge_per_run_table(judge_per_run_costs(engine, bench.images.trial, repeat=4 if quick else 10))
        )
        log("throughput: the isolation's own floor, a trial's containers doing nothing ...")
        floor = isolation_floor_costs(engine, bench.images.trial, repeat=2 if quick else 8)
        bench.notes.append(isolation_floor_table(floor, cpu.parts.cli_floor()))

        # 3. 10 s latency: --jobs 1 on 8 trials, --jobs 32 on 64
        latency = 2000 if quick else 10_000
        scen10 = bench.scenario(tasks, latency_ms=latency, baseline_p=1, skills={"careful-fixer": 1})
        base_runs, many_runs, jobs = (1, 2, 8) if quick else (1, 8, 32)
        log(f"throughput: --jobs 1, {len(tasks) * 2 * base_runs} trials at {latency / 1000:g} s latency per turn ...")
        single = bench.experiment(skill="careful-fixer", tasks=tasks, runs=base_runs, scenario=scen10)
        serial, serial_wall = bench.run(single, jobs=1, out="wall-j1", engine=engine)
        n_serial = len({r.trial_id for r in serial.records})
        log(f"throughput: --jobs {jobs}, {len(tasks) * 2 * many_runs} trials ...")
        many = measured_run(
            bench,
            engine,
            bench.experiment(skill="careful-fixer", tasks=tasks, runs=many_runs, scenario=scen10),
            jobs=jobs,
            out=f"wall-j{jobs}",
        )
        n_many = len({r.trial_id for r in many.records})
        scaled = serial_wall * n_many / n_serial
        concurrency = peak_concurrency(many.records)
        bench.notes.append(
            parts_table(
                many.parts, f"CPU per trial by part: {latency / 1000:g} s latency, `--jobs {jobs}`, {n_many} trials"
            )
        )
        bad = Counter(r.status for r in many.records if r.status != "completed")
        if bad:  # a retried attempt takes a slot twice: the wall time is not the design's
            log(f"throughput: --jobs {jobs}: {dict(bad)} attempts did not complete; the speed-up is not valid")
        rows.append(
            (
                f"{n_many} trials, {latency / 1000:g} s model latency per turn: --jobs {jobs} wall time",
                f"{many.wall_s:.0f} s",
                f"--jobs 1: {scaled:.0f} s ({n_serial} trials x {n_many // n_serial})",
                f"{scaled / many.wall_s:.1f}x faster",
                ">= 16x",
            )
        )
        rows.append(
            (
                f"peak concurrency of the --jobs {jobs} run",
                f"{concurrency} trials at once ({many.agents_peak} agent CLIs running at once)",
                f"{n_many} trials, {len(many.records)} attempts: "
                + (
                    ", ".join(f"{k} {v}" for k, v in sorted(bad.items())) + " not completed" if bad else "all completed"
                ),
                "",
                f"{jobs}",
            )
        )
        # 2. memory: one trial (all its containers + its share of the controller), and 32 at once
        grew = max(0, many.memory_kib.get("controller", 0) - many.memory_start_kib.get("controller", 0)) * 1024
        share = grew / max(1, concurrency)
        shims = many.memory_kib.get("shims", 0) * 1024
        engine_grew = max(0, many.memory_kib.get("engine", 0) - many.memory_start_kib.get("engine", 0)) * 1024
        rows.append(
            (
                "peak memory of one running trial (its containers' cgroups, page cache included) + its share of the controller",
                f"{_mib(one + share)} (median trial {_mib(typical + share)})",
                f"containers {_mib(one)}, controller {_mib(share)} (its growth at --jobs {jobs} / {concurrency})",
                "",
                "",
            )
        )
        all_at_once = many.peak_bytes + grew + shims + engine_grew
        rows.append(
            (
                f"peak memory of the --jobs {jobs} run ({concurrency} trials at once)",
                f"{all_at_once / (1 << 30):.2f} GiB",
                f"containers {_mib(many.peak_bytes)}, controller +{_mib(grew)}, their shims {_mib(shims)}, "
                f"dockerd + containerd +{_mib(engine_grew)}",
                f"{_mib(all_at_once / max(1, concurrency))} per trial",
                "32 within 12 GiB",
            )
        )
    finally:
        remove_cgroups(root)
    return rows


def requests_table(requests: Counter[str], trials: int) -> str:
    """Engine API requests per trial, by kind (the engine round trips of issue 27 item 4)."""
    total = sum(requests.values())
    lines = [
        f"Engine API requests: {total / max(1, trials):.1f} per trial ({total} for {trials} trials and the run), by kind:",
        "",
        "| request | per trial |",
        "| --- | --- |",
    ]
    lines += [f"| `{kind}` | {n / max(1, trials):.2f} |" for kind, n in requests.most_common()]
    return "\n".join(lines)
