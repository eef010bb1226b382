"""Removing a directory tree an agent may have written, on the host, without following links.

Used for trial directories, run directories and the sweep of a killed run's leftovers: the tree may
hold symlinks to anywhere, chmod 000 directories and nesting deep enough to exhaust Python's
recursion limit; none of that may make the removal touch anything outside it or stop halfway. The
overlay mounts of trial workspaces (:func:`mount_overlay`, probed by :func:`overlay_available`) live here
too, since removing a tree begins by detaching them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path


def _make_writable(func: object, path: str, exc: object) -> None:
    """rmtree error handler: an agent may leave chmod 000 directories behind."""
    parent = os.path.dirname(path)
    with contextlib.suppress(OSError):
        os.chmod(parent, stat.S_IRWXU)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
            shutil.rmtree(path, onerror=_ignore)
        else:
            os.unlink(path)


def _ignore(func: object, path: str, exc: object) -> None:
    return


def remove_tree(path: Path) -> None:
    """Delete an agent-written tree: never following symlinks, whatever its depth or permissions.

    ``shutil.rmtree`` walks by file descriptor on Linux (symlinks are unlinked, never
    followed) but recurses once per level: an agent that nests directories a thousand
    deep makes it raise ``RecursionError``. Then GNU ``rm -rf`` (fts, no recursion limit,
    never follows symlinks, stays on one filesystem) finishes the job. Overlay mounts below ``path``
    (trial workspaces) are detached first: removing through one would only write whiteouts."""
    unmount_below(path)
    try:
        shutil.rmtree(path, onerror=_make_writable)
    except FileNotFoundError:
        return
    except (RecursionError, OSError):
        pass
    if not os.path.lexists(path):
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", str(path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=600,
            check=False,
        )


# ---------------------------------------------------------------- walking a tree the agent wrote

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Seen:
    """One entry of :func:`walk_nofollow`."""

    rel: bytes
    """Its path below the walk's root."""
    name: bytes
    st: os.stat_result
    """Its ``lstat``: a link is a link, never what it points to."""
    depth: int
    """0 for the root's own entries."""
    dir_fd: int
    """The directory holding it, open while the walk is paused at this entry."""


def walk_nofollow(root: Path, descend: Callable[[Seen], bool] = lambda _seen: True) -> Generator[Seen, None, None]:
    """Every entry below ``root``, depth first, never following a link and never opening anything but a
    directory: each directory is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's
    descriptor (``openat``), so an agent that swaps a directory for a symlink mid-walk cannot point the
    controller outside the tree, and a FIFO or socket is only ``lstat``-ed. One descriptor per level is
    held (:func:`harness.trial.watchdog.raise_fd_limit` lifts the limit for deep trees); a directory is
    entered only when ``descend`` says so. Entries that vanish mid-walk are skipped. Stopping early
    (closing the iterator) closes every descriptor. The watchdog and the overlay's change lists walk
    with it."""
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return
    stack: list[tuple[int, bytes, list[bytes], int]] = [(top, b"", _names(top), 0)]
    try:
        while stack:
            fd, prefix, names, depth = stack[-1]
            if not names:
                stack.pop()
                os.close(fd)
                continue
            name = names.pop()
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            seen = Seen(prefix + name, name, st, depth, fd)
            yield seen
            if not stat.S_ISDIR(st.st_mode) or not descend(seen):
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # replaced by a symlink or a non-directory since the listing: not followed
            try:
                stack.append((child, seen.rel + b"/", _names(child), depth + 1))
            except BaseException:
                os.close(child)
                raise
    finally:
        for fd, _prefix, _names_left, _depth in stack:
            os.close(fd)


def _names(fd: int) -> list[bytes]:
    """A directory's names, in reverse order (the walk pops from the end: ascending order)."""
    try:
        return sorted((os.fsencode(n) for n in os.listdir(fd)), reverse=True)
    except OSError:
        return []


# ---------------------------------------------------------------- overlay mounts of trial trees

OVERLAY_OPTIONS = "nosuid,nodev"
"""Nothing the agent writes can become setuid or a device on the host, whatever it writes."""


def mount_overlay(lower: Path, upper: Path, work: Path, target: Path) -> None:
    """Mount ``lower`` (never written) + ``upper`` (receives every write) at ``target``."""
    options = f"lowerdir={lower},upperdir={upper},workdir={work},{OVERLAY_OPTIONS}"
    for path in (lower, upper, work, target):
        if "," in str(path) or ":" in str(path):
            raise OSError(f"an overlay path may not contain ',' or ':': {path}")
    done = subprocess.run(
        ["mount", "-t", "overlay", "-o", options, "overlay", str(target)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise OSError(f"mounting an overlay at {target} failed: {done.stderr.strip()[:300]}")


def mounts_below(path: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> list[Path]:
    """Mount points at or below ``path``, deepest first (so each can be detached before its parent)."""
    try:
        text = mountinfo.read_text()
    except OSError:
        return []
    top = os.path.realpath(path)
    found: list[str] = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 5:
            continue
        point = _unescape(fields[4])
        if point == top or point.startswith(top.rstrip("/") + "/"):
            found.append(point)
    return [Path(p) for p in sorted(set(found), key=lambda p: p.count("/"), reverse=True)]


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def unmount_below(path: Path) -> None:
    """Detach every mount at or below ``path`` (lazily: a process still inside cannot keep it)."""
    for point in mounts_below(path):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["umount", "-l", str(point)], stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False
            )


_overlay_probe: dict[str, bool] = {}
_probe_lock = threading.Lock()


def overlay_available(scratch: Path) -> bool:
    """Whether this controller can give trials overlay workspaces on ``scratch``'s filesystem: it may
    mount (root) and the kernel accepts an overlay whose upper directory is there. Probed once per
    filesystem per process, by mounting one, writing through it and unmounting it."""
    if os.geteuid() != 0:
        return False
    try:
        dev = str(os.stat(scratch).st_dev)
    except OSError:
        return False
    with _probe_lock:
        if dev not in _overlay_probe:
            _overlay_probe[dev] = _probe(scratch)
        return _overlay_probe[dev]


def _probe(scratch: Path) -> bool:
    root = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=scratch))
    try:
        parts = [root / name for name in ("lower", "upper", "work", "merged")]
        for part in parts:
            part.mkdir()
        (parts[0] / "a").write_text("a")
        mount_overlay(*parts)
        try:
            (parts[3] / "a").write_text("b")
            return (parts[1] / "a").read_text() == "b" and (parts[0] / "a").read_text() == "a"
        finally:
            unmount_below(parts[3])
    except OSError:
        return False
    finally:
        unmount_below(root)
        shutil.rmtree(root, ignore_errors=True)
