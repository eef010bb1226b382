"""Host-wide coordination between every harness process of a user: a limit on concurrent
trials, and named exclusive locks (image builds, worktree changes to one repository).

Two experiments (or two CI jobs on one self-hosted runner) must not together run
more trials than the machine can hold. Each running trial holds one of N slot
files under an ``flock``; the kernel releases the lock when the descriptor is
closed or the process dies, so a killed controller never leaks a slot. ``flock``
locks belong to the open file description, so threads of one process exclude
each other exactly like separate processes do.

The slot and lock directories are fixed per user (``/tmp/harness-slots-<uid>``, or
``HARNESS_SLOTS_DIR``; ``/tmp/harness-locks-<uid>``), not derived from ``TMPDIR``: CI
runners often give each job its own ``TMPDIR``, and the limit and the locks must hold
across them (:mod:`harness.host.paths` states the rule). Every process uses
slots ``0..N-1`` of its own N, so processes that agree on N (the same machine
and resources, or ``HARNESS_HOST_SLOTS``) share exactly N slots; with
different N the host-wide total is the largest of them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from harness.errors import ConfigError
from harness.host.capacity import Capacity, capacity
from harness.host.paths import shared_dir

POLL_MAX_S = 0.25


def machine_memory() -> int:
    """This machine's memory in bytes (4 GiB when the system will not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 4 << 30


def machine_capacity(per_trial_mem: int, cpus: int | None = None, mem_bytes: int | None = None) -> Capacity:
    """What this machine can hold (:func:`harness.host.capacity.capacity`), ``per_trial_mem`` being the
    memory limits one trial holds at one moment."""
    return capacity(
        cpus=cpus or os.cpu_count() or 1,
        mem_bytes=mem_bytes if mem_bytes is not None else machine_memory(),
        trial_limits_bytes=per_trial_mem,
    )


def default_slots(cpus: int | None = None, mem_bytes: int | None = None, per_trial_mem: int = 2 << 30) -> int:
    """Slots this machine can hold: the capacity model's trials (CPU and memory per trial, measured)."""
    return machine_capacity(per_trial_mem, cpus, mem_bytes).trials


def slot_count(env: Mapping[str, str], *, per_trial_mem: int) -> int:
    """The host-wide limit: ``HARNESS_HOST_SLOTS`` when set, else :func:`default_slots`."""
    value = env.get("HARNESS_HOST_SLOTS", "").strip()
    if not value:
        return default_slots(per_trial_mem=per_trial_mem)
    if not value.isdigit() or int(value) < 1:
        raise ConfigError("HARNESS_HOST_SLOTS", f"must be a whole number >= 1, got {value!r}")
    return int(value)


class HostSlots:
    def __init__(self, count: int, directory: Path) -> None:
        """``count`` slots in ``directory`` (:attr:`harness.host.paths.HostPaths.slots_dir`)."""
        self.count = max(1, count)
        self.dir = directory
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def try_acquire(self) -> tuple[int, int] | None:
        """(slot index, locked descriptor) of a free slot, or None when all are taken."""
        for i in range(self.count):
            fd = os.open(self.dir / f"slot-{i}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return i, fd
        return None

    def in_use(self) -> int:
        """How many of this instance's slots are held right now (by any process)."""
        taken = 0
        for i in range(self.count):
            fd = os.open(self.dir / f"slot-{i}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                taken += 1
            finally:
                os.close(fd)
        return taken

    @contextlib.contextmanager
    def slot(self, stop: threading.Event | None = None) -> Iterator[int]:
        """Hold one slot for the body. Waits (polling) while all are taken; raises
        ``InterruptedError`` when ``stop`` is set while waiting."""
        delay = 0.02
        while True:
            got = self.try_acquire()
            if got is not None:
                index, fd = got
                try:
                    yield index
                finally:
                    os.close(fd)  # closing the descriptor drops the lock
                return
            if stop is not None:
                if stop.wait(delay):
                    raise InterruptedError("stopped while waiting for a host slot")
            else:
                time.sleep(delay)
            delay = min(POLL_MAX_S, delay * 1.5)


@contextlib.contextmanager
def host_lock(name: str, lock_dir: Path | None = None) -> Iterator[None]:
    """Exclusive across this user's processes and threads while held (``name`` is a file name).

    ``lock_dir`` defaults to the user's shared one (:attr:`~harness.host.paths.HostPaths.locks_dir`),
    which no environment variable moves, so every caller agrees on it without being handed it.
    Each caller opens its own descriptor, so threads of one process exclude each other too;
    the kernel drops the lock when a killed holder's descriptor closes."""
    lock_dir = lock_dir or shared_dir("locks")
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(lock_dir / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
