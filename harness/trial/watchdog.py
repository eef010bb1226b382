"""The workspace watchdog: a bound on the one thing no Docker flag bounds.

(A volume workspace, on the engine's machine, is watched from inside the engine instead:
:class:`EngineWatchdog`, below.)

``/workspace`` is a bind mount of a directory on the host's disk. ``--read-only``,
tmpfs ``size=``, ``--ulimit fsize`` and log ``max-size`` bound every other place
an agent can write, but nothing in the engine bounds a bind mount: an agent can
fill the host's disk (bytes or inodes) through it. While the agent container
runs, this watchdog walks the workspace every ``interval_s`` and kills the
container the moment the agent has added more than ``max_bytes`` (allocated
blocks, so sparse files count as what they use) or ``max_files`` entries to
what the workspace held before it started (:func:`census`: a base of any size
never trips them), nested deeper than ``max_depth`` (or the base's own depth),
or the host filesystem's free space falls below ``min_free_bytes``.

The walk never follows a symlink and never opens anything but directories:
each directory is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to its
parent's descriptor (``openat``), so an agent that swaps a directory for a
symlink mid-walk cannot point the controller outside the trial, and a FIFO or
socket is only ``lstat``-ed, never opened. The walk stops as soon as a limit is
crossed, so its cost is bounded by the limits themselves.

What it cannot do: overshoot between two polls is bounded by how fast the agent
writes for ``interval_s`` (plus one scan), so keep ``min_free_bytes`` well
above that; a controller that is not root cannot look into a directory the
agent made unreadable (the free-space floor still holds there).
"""

from __future__ import annotations

import contextlib
import os
import resource
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError
from harness.host.trees import walk_nofollow
from harness.sandbox import lifecycle
from harness.sandbox.runtime import ContainerRuntime, ContainerSpec, Gate
from harness.study.config import is_size, parse_size


@dataclass(frozen=True)
class WorkspaceLimit:
    max_bytes: int = 4 << 30
    max_files: int = 200_000
    max_depth: int = 100
    min_free_bytes: int = 512 << 20
    interval_s: float = 1.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkspaceLimit:
        """``HARNESS_WORKSPACE_MAX`` (size, e.g. 4g), ``HARNESS_WORKSPACE_MAX_FILES``,
        ``HARNESS_MIN_FREE_DISK`` (size): the run-time knobs (not part of the lock)."""
        d = cls()

        def size(name: str, default: int) -> int:
            value = env.get(name, "").strip()
            if not value:
                return default
            if not is_size(value):
                raise ConfigError(name, f"must be a size like 512m or 4g, got {value!r}")
            return parse_size(value)

        files = env.get("HARNESS_WORKSPACE_MAX_FILES", "").strip()
        if files and not (files.isdigit() and int(files) > 0):
            raise ConfigError("HARNESS_WORKSPACE_MAX_FILES", f"must be a whole number >= 1, got {files!r}")
        return cls(
            max_bytes=size("HARNESS_WORKSPACE_MAX", d.max_bytes),
            max_files=int(files) if files else d.max_files,
            min_free_bytes=size("HARNESS_MIN_FREE_DISK", d.min_free_bytes),
        )


@dataclass(frozen=True)
class Trip:
    reason: str
    agent_fault: bool
    """False when the host ran low on disk for a reason the workspace itself does not show."""


@dataclass(frozen=True)
class Usage:
    """What a tree holds: entries (files and directories), allocated bytes, deepest directory level."""

    files: int = 0
    bytes: int = 0
    depth: int = 0


def census(root: Path) -> Usage:
    """What ``root`` holds before the agent starts (the base and its snapshot repository): the limits
    count what the agent adds on top of it, so a repository of any size can be evaluated."""
    usage = _walk(root, None)
    return usage if isinstance(usage, Usage) else Usage()


def measure(root: Path, limit: WorkspaceLimit, base: Usage = Usage()) -> Trip | None:
    """Walk ``root`` without following symlinks; the first limit crossed, or None. ``base`` (the
    workspace before the agent ran, see :func:`census`) is not counted against the limits, and
    directories may nest as deep as the base's own do."""
    bounds = _Bounds(
        limit, base.files + limit.max_files, base.bytes + limit.max_bytes, max(limit.max_depth, base.depth)
    )
    found = _walk(root, bounds)
    return found if isinstance(found, Trip) else None


@dataclass(frozen=True)
class _Bounds:
    limit: WorkspaceLimit
    files: int
    bytes: int
    depth: int


def _walk(root: Path, bounds: _Bounds | None) -> Trip | Usage:
    """With ``bounds``, stops at the first one crossed (so its cost is bounded by them); without,
    counts everything (:func:`harness.host.trees.walk_nofollow`: no link followed, only directories
    opened)."""
    used = files = deepest = 0
    with contextlib.closing(walk_nofollow(root)) as entries:
        for seen in entries:
            files += 1
            if bounds is not None and files > bounds.files:
                return Trip(f"more than {bounds.limit.max_files} files and directories added to the workspace", True)
            used += seen.st.st_blocks * 512
            if bounds is not None and used > bounds.bytes:
                return Trip(f"more than {bounds.limit.max_bytes} bytes added to the workspace", True)
            if stat.S_ISDIR(seen.st.st_mode):
                deepest = max(deepest, seen.depth + 1)
                if bounds is not None and seen.depth + 1 > bounds.depth:
                    return Trip(f"directories nested deeper than {bounds.depth} in the workspace", True)
    return Usage(files, used, deepest)


def raise_fd_limit() -> None:
    """Deep trees cost the walk one descriptor per level: lift the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1 << 20), hard))


def free_bytes(root: Path) -> int | None:
    try:
        st = os.statvfs(root)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def check(root: Path, limit: WorkspaceLimit, base: Usage = Usage()) -> Trip | None:
    trip = measure(root, limit, base)
    if trip is not None:
        return trip
    free = free_bytes(root)
    if free is not None and free < limit.min_free_bytes:
        return Trip(f"the host filesystem holding the workspace has less than {limit.min_free_bytes} bytes free", False)
    return None


class Watchdog:
    """Polls one workspace in a daemon thread; on the first trip calls ``on_trip`` once and stops."""

    def __init__(self, root: Path, limit: WorkspaceLimit, on_trip: Callable[[Trip], None]) -> None:
        self.root = root
        self.limit = limit
        self.on_trip = on_trip
        self.tripped: Trip | None = None
        self.base = Usage()
        """What the workspace held when the watchdog was entered (before the agent started)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            raise_fd_limit()
            self._thread = threading.Thread(target=self._loop, name=f"watchdog-{self.root.name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        pause = self.limit.interval_s
        while not self._stop.wait(pause):
            t0 = time.monotonic()
            trip = check(self.root, self.limit, self.base)
            if trip is not None and not self._stop.is_set():
                self.tripped = trip
                self.on_trip(trip)
                return
            # a big tree is walked less often, so the watchdog never takes more than a third of a core
            pause = max(self.limit.interval_s, 2 * (time.monotonic() - t0))

    def __enter__(self) -> Watchdog:
        raise_fd_limit()
        self.base = census(self.root)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------- in the engine

WATCH_SCRIPT = r"""
set -u
U=$1
while :; do
  r=$(find "$U" -mindepth 1 -printf '%b %d %y %M\n' 2>/dev/null | awk -v f="$2" -v b="$3" -v d="$4" '
    { n++; u += $1 * 512; if ($3 == "d" && $2 > deep) deep = $2
      if ($3 == "d" && (substr($4, 2, 1) != "r" || substr($4, 4, 1) != "x")) { print "hidden"; exit }
      if (n > f) { print "files"; exit } if (u > b) { print "bytes"; exit } if (deep > d) { print "depth"; exit } }')
  case "$r" in files|bytes|depth|hidden) echo "$r"; exit 3;; esac
  free=$(df -P -k "$U" | awk 'NR == 2 { print $4 }')
  if [ -n "$free" ] && [ "$free" -lt "$5" ]; then echo free; exit 4; fi
  sleep "$6"
done
"""
"""The in-engine walk: ``find`` lists only what the agent wrote (the overlay's upper directory) by lstat,
``awk`` stops at the first bound crossed; then the engine's own free space. The walk runs as the agent's
uid, and everything in the upper directory is the agent's own: a directory its owner may not list or
enter was made so by the agent, and would hide what is below it from the count, so it is a trip of its
own (``hidden``). Exit 3: the agent crossed a bound (the reason on stdout); exit 4: the engine's disk ran
low."""


def engine_command(upper: str, limit: WorkspaceLimit, base_depth: int) -> tuple[str, ...]:
    """The in-engine watchdog's argv over ``upper`` (a path in its container)."""
    min_free_kib = -(-limit.min_free_bytes // 1024)
    depth = max(limit.max_depth, base_depth)
    interval = f"{max(limit.interval_s, 0.1):g}"
    args = (upper, str(limit.max_files), str(limit.max_bytes), str(depth), str(min_free_kib), interval)
    return ("sh", "-c", WATCH_SCRIPT, "watch", *args)


def _engine_trip(reason: str, limit: WorkspaceLimit, base_depth: int) -> Trip:
    texts = {
        "files": f"more than {limit.max_files} files and directories added to the workspace",
        "bytes": f"more than {limit.max_bytes} bytes added to the workspace",
        "depth": f"directories nested deeper than {max(limit.max_depth, base_depth)} in the workspace",
        "hidden": "a directory in the workspace that its owner cannot read or enter (its content would go uncounted)",
    }
    if reason in texts:
        return Trip(texts[reason], True)
    return Trip(f"the engine's filesystem holding the workspace has less than {limit.min_free_bytes} bytes free", False)


class EngineWatchdog:
    """The watchdog of a volume workspace (:mod:`harness.trial.workspace`), whose upper directory is on
    the engine's machine: a ``--network none`` container of the agent's uid mounts the scratch volume
    read-only and walks it (:data:`WATCH_SCRIPT`); when it exits with a trip, ``on_trip`` is called once.
    The same interface as :class:`Watchdog` (``with``, ``start``, ``tripped``).

    Started on its own thread once the agent runs; :meth:`stop` refuses its start when it has not started
    yet (so no watcher outlives the trial) and kills it otherwise. It walks as the agent's uid, so a
    directory the agent makes unreadable would hide its content from the count: such a directory is a
    trip of its own (see :data:`WATCH_SCRIPT`). ``error`` says why it could not watch (the trial records
    it as a flag)."""

    def __init__(
        self,
        runtime: ContainerRuntime,
        spec: ContainerSpec,
        limit: WorkspaceLimit,
        base_depth: int,
        on_trip: Callable[[Trip], None],
        *,
        deadline_s: float,
        gate: Gate | None = None,
    ) -> None:
        self.runtime = runtime
        self.spec = spec
        self.limit = limit
        self.base_depth = base_depth
        self.on_trip = on_trip
        self.deadline_s = deadline_s
        self.tripped: Trip | None = None
        self.error: str | None = None
        self._outer_gate = gate
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watchdog-{self.spec.name}", daemon=True)
            self._thread.start()

    @contextlib.contextmanager
    def _gate(self) -> Iterator[None]:
        with self._lock:
            if self._stopping.is_set():
                raise _Stopped
            if self._outer_gate is None:
                yield
            else:
                with self._outer_gate():
                    yield

    def _run(self) -> None:
        try:
            run = lifecycle.run(self.runtime, self.spec, deadline_s=self.deadline_s, output_cap=4096, gate=self._gate)
        except _Stopped:
            return
        except Exception as e:  # any failure: the trial goes on, and records that it was unwatched
            if not self._stopping.is_set():
                self.error = f"the workspace watchdog did not run: {e}"[:300]
            return
        if self._stopping.is_set():
            return
        if run.exit_code in (3, 4):
            self.tripped = _engine_trip(run.stdout.decode("utf-8", "replace").strip(), self.limit, self.base_depth)
            self.on_trip(self.tripped)
        else:
            self.error = f"the workspace watchdog stopped early (exit {run.exit_code}): {run.stderr[-200:]!r}"

    def stop(self) -> None:
        with self._lock:  # a start in progress finishes first, so the kill below reaches it
            self._stopping.set()
        if self._thread is not None:
            self.runtime.kill(self.spec.name)
            self._thread.join(timeout=60)

    def __enter__(self) -> EngineWatchdog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Stopped(Exception):
    """The watcher's start was refused: the agent had already finished."""
