"""Every host path harness processes of one user must agree on, read from the environment once.

:meth:`HostPaths.from_env` runs in :func:`harness.cli.main` and the result is passed down
(``RunOptions.paths``, ``TriggerOptions.paths``); nothing below reads ``TMPDIR`` or
``HARNESS_SLOTS_DIR`` itself.

**The one rule about TMPDIR.** What harness processes of one user *share* lives at a fixed per-user
place under ``/tmp``, never under ``TMPDIR``: the host-wide trial slots, the named locks (image builds,
worktree changes) and the record of work roots. ``TMPDIR`` differs between shells, CI jobs and cron
entries, and two jobs that saw different ones must still share slots and locks. What one run *owns*,
its trial directories (agent-written trees and the gateway's key file), lives under the work root in
that run's ``TMPDIR``, and every run records its work root in the shared record, so a ``skilltrial gc``
under any other ``TMPDIR`` still finds a killed run's directories. (Only a host without ``/tmp`` puts
the shared places in the temporary directory instead.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SHARED_ROOT = Path("/tmp")
_TEMP_VARIABLES = ("TMPDIR", "TEMP", "TMP")
_TEMP_FALLBACKS = ("/tmp", "/var/tmp", "/usr/tmp")


def temp_dir(env: Mapping[str, str]) -> Path:
    """The temporary directory ``env`` names, chosen as :func:`tempfile.gettempdir` chooses it (the first
    of TMPDIR, TEMP, TMP that is a writable directory, then /tmp, /var/tmp, /usr/tmp, the working
    directory), but from ``env`` instead of the process environment."""
    candidates = [env[name] for name in _TEMP_VARIABLES if env.get(name)] + list(_TEMP_FALLBACKS)
    for candidate in candidates:
        path = Path(candidate)
        if path.is_dir() and os.access(path, os.W_OK | os.X_OK):
            return path.absolute()
    return Path.cwd()


def shared_root(env: Mapping[str, str] | None = None) -> Path:
    """Where the places every harness process of a user shares live: ``/tmp`` (see the module docstring)."""
    return SHARED_ROOT if SHARED_ROOT.is_dir() else temp_dir(env or {})


def shared_dir(kind: str, env: Mapping[str, str] | None = None, *, uid: int | None = None) -> Path:
    """``/tmp/harness-<kind>-<uid>``: the same for every process of the user, whatever its environment."""
    return shared_root(env) / f"harness-{kind}-{os.getuid() if uid is None else uid}"


@dataclass(frozen=True)
class HostPaths:
    work_root: Path
    """Where runs make their trial directories: ``<TMPDIR>/harness-<uid>`` (recorded in ``work_roots``)."""
    slots_dir: Path
    """The host-wide trial slots: ``/tmp/harness-slots-<uid>``, or ``HARNESS_SLOTS_DIR``."""
    locks_dir: Path
    """Named host-wide locks (image builds, worktree changes): ``/tmp/harness-locks-<uid>``."""
    work_roots: Path
    """The record of every work root this user's runs used: ``/tmp/harness-work-roots-<uid>``."""
    engines: Path | None = None
    """The record of every engine of a pool this user's runs used (``/tmp/harness-engines-<uid>``), so
    ``skilltrial gc`` reaches them all; None: not recorded."""

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, uid: int | None = None) -> HostPaths:
        uid = os.getuid() if uid is None else uid
        configured_slots = env.get("HARNESS_SLOTS_DIR", "")
        return cls(
            work_root=temp_dir(env) / f"harness-{uid}",
            slots_dir=Path(configured_slots) if configured_slots else shared_dir("slots", env, uid=uid),
            locks_dir=shared_dir("locks", env, uid=uid),
            work_roots=shared_dir("work-roots", env, uid=uid),
            engines=shared_dir("engines", env, uid=uid),
        )
