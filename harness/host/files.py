"""Writing a file on the controller's machine so that no reader ever sees half of it.

:func:`atomic_write` is how every whole file the harness writes gets there (experiment.json, the lock
file, reports, artifacts, the ledger, caches); :func:`write_all` and :func:`fsync_dir` are its parts,
shared with the results log's appends (:mod:`harness.results.store`). :func:`write_set` writes a set of
derived documents (the reports) whole: each file rewritten or removed, never left stale (:func:`write_files`
and :func:`remove_files` are its halves); :func:`read_json_document` reads one JSON description
(experiment.json, matrix.json), each with errors that name the file. Only :mod:`harness.errors` below it: the floor.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from harness.errors import ConfigError, HarnessError


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


def write_files(root: Path, rendered: Mapping[str, str], redact: Callable[[str], str]) -> dict[str, Path]:
    """Each ``name -> text`` of ``rendered`` written to ``root/name`` atomically, redacted; the paths
    written. A :class:`HarnessError` naming the file when one cannot be written."""
    paths: dict[str, Path] = {}
    for name, text in rendered.items():
        path = root / name
        try:
            atomic_write(path, redact(text).encode("utf-8"))
        except OSError as e:
            raise HarnessError(f"cannot write {path}: {e.strerror}") from e
        paths[name] = path
    return paths


def remove_files(root: Path, names: Iterable[str]) -> list[Path]:
    """Remove ``root/name`` for each name that exists; the paths removed. A :class:`HarnessError` naming the
    file when one cannot be removed (a stale output must not stay behind silently)."""
    removed = []
    for name in names:
        path = root / name
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise HarnessError(f"cannot remove {path}: {e.strerror}") from e
        removed.append(path)
    if removed:
        fsync_dir(root)
    return removed


def write_set(
    root: Path, names: Collection[str], rendered: Mapping[str, str], redact: Callable[[str], str]
) -> dict[str, Path]:
    """The one way a set of derived files is written: every file of ``names`` is either rewritten from
    ``rendered`` (atomically, redacted) or removed, never left as it was. The old ones go first, so a crash
    part-way leaves files that are new or gone, none from before. Returns the paths written."""
    stray = sorted(set(rendered) - set(names))
    if stray:
        raise ValueError(f"{', '.join(stray)}: not in the set of files written to {root}")
    remove_files(root, names)
    return write_files(root, rendered, redact)


def read_regular(path: Path) -> bytes:
    """The bytes of ``path``, which must be a regular file (a symbolic link to one is followed). Anything else
    raises :class:`OSError` at once: a directory, and a FIFO or a device, which would block the reader or
    never end (``/dev/zero``). For the files of a results directory, which anyone may have replaced."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO's open does not wait for a writer
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
            raise OSError(code, "Is a directory" if code == errno.EISDIR else "not a regular file", str(path))
        os.set_blocking(fd, True)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json_document(path: Path) -> object | None:
    """The JSON value in ``path``, or None when there is no such file; a :class:`ConfigError` naming the
    file when it cannot be read or is not JSON (what the value must be is the caller's to check)."""
    try:
        text = read_regular(path).decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(path, f"cannot be read ({e.strerror})") from e
    except UnicodeDecodeError as e:  # a ValueError, not an OSError
        raise ConfigError(path, f"is not UTF-8 text (byte {e.start})") from e
    try:
        value: object = json.loads(text)
    except ValueError as e:
        raise ConfigError(path, f"cannot be read as JSON ({e})") from e
    return value
