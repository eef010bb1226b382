"""A host-wide limit on concurrent trials, shared by every harness process of a user.

Two experiments (or two CI jobs on one self-hosted runner) must not together run
more trials than the machine can hold. Each running trial holds one of N slot
files under an ``flock``; the kernel releases the lock when the process dies,
so a killed controller never leaks a slot.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path


def default_slots(cpus: int | None = None, mem_bytes: int | None = None, per_trial_mem: int = 2 << 30) -> int:
    """Slots this machine can hold: agent containers are mostly waiting on the model, so up to
    4 per core, bounded by memory (each trial may use its full memory limit)."""
    cpus = cpus or os.cpu_count() or 1
    if mem_bytes is None:
        try:
            mem_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            mem_bytes = 4 << 30
    by_mem = max(1, int(mem_bytes * 0.75) // per_trial_mem)
    return max(1, min(cpus * 4, by_mem, 32))


class HostSlots:
    def __init__(self, count: int, directory: Path | None = None) -> None:
        self.count = max(1, count)
        self.dir = directory or Path(tempfile.gettempdir()) / f"harness-slots-{os.getuid()}"
        self.dir.mkdir(mode=0o700, exist_ok=True)
        self._local = threading.Lock()

    @contextlib.contextmanager
    def slot(self, stop: threading.Event | None = None) -> Iterator[int]:
        delay = 0.05
        while True:
            for i in range(self.count):
                fd = os.open(self.dir / f"slot-{i}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                try:
                    yield i
                finally:
                    os.close(fd)  # closing the descriptor drops the lock
                return
            if stop is not None and stop.is_set():
                raise InterruptedError("stopped while waiting for a host slot")
            time.sleep(delay)
            delay = min(1.0, delay * 1.5)
