"""Removing a directory tree an agent may have written, on the host, without following links.

Used for trial directories, run directories and the sweep of a killed run's leftovers: the tree may
hold symlinks to anywhere, chmod 000 directories and nesting deep enough to exhaust Python's
recursion limit; none of that may make the removal touch anything outside it or stop halfway.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
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
    never follows symlinks, stays on one filesystem) finishes the job."""
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
