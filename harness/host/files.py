"""Writing a file on the controller's machine so that no reader ever sees half of it.

:func:`atomic_write` is how every whole file the harness writes gets there (experiment.json, the lock
file, reports, artifacts, the ledger, caches); :func:`write_all` and :func:`fsync_dir` are its parts,
shared with the results log's appends (:mod:`harness.results.store`). No harness imports: the floor.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: Path, data: bytes) -> None:
    """tmp -> fsync -> rename -> fsync(dir): readers see the old or the new file, never half."""
    # unique per writer: concurrent trials of one process may store the same blob at the same time
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
