"""The label namespace every Docker object of the harness carries.

Labels make cleanup independent of how the controller ended: ``skilltrial gc``
and every start remove objects whose owner process is gone (same host) or whose
expiry has passed (:func:`reap_orphans`, over any :class:`~harness.sandbox.runtime.ContainerRuntime`),
and never touch anything without ``harness.owner``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from harness.sandbox import lifecycle
from harness.sandbox.runtime import ContainerRuntime, DockerObject

OWNER = "harness.owner"
OWNER_VALUE = "skill-harness"  # the first name, kept: gc must still find what earlier versions made
RUN = "harness.run"
TRIAL = "harness.trial"
ROLE = "harness.role"
PID = "harness.pid"
HOST = "harness.host"
EXPIRES = "harness.expires"
PURPOSE = "harness.purpose"


def make_labels(
    run_id: str,
    *,
    role: str,
    trial_id: str | None = None,
    ttl_s: float,
    pid: int | None = None,
    host: str | None = None,
    now: float | None = None,
    purpose: str = "trial",
) -> dict[str, str]:
    labels = {
        OWNER: OWNER_VALUE,
        RUN: run_id,
        ROLE: role,
        PID: str(pid if pid is not None else os.getpid()),
        HOST: host if host is not None else socket.gethostname(),
        EXPIRES: str(int((now if now is not None else time.time()) + ttl_s)),
        PURPOSE: purpose,
    }
    if trial_id is not None:
        labels[TRIAL] = trial_id
    return labels


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def orphan_reason(
    labels: Mapping[str, str],
    *,
    now: float,
    host: str,
    alive: Callable[[int], bool] = pid_alive,
    own_pid: int | None = None,
) -> str | None:
    """Why an object is an orphan (to be reaped), or None when its owner may still use it."""
    if labels.get(OWNER) != OWNER_VALUE:
        return None
    try:
        expires = float(labels.get(EXPIRES, "0"))
    except ValueError:
        expires = 0.0
    if expires and now > expires:
        return "expired"
    if labels.get(HOST) == host:
        try:
            pid = int(labels.get(PID, "0"))
        except ValueError:
            return "bad owner pid"
        if pid and pid != own_pid and not alive(pid):
            return f"owner pid {pid} is gone"
    return None


class Reaped(NamedTuple):
    target: DockerObject
    reason: str
    """Why it was an orphan (:func:`orphan_reason`)."""


def reap_orphans(runtime: ContainerRuntime, *, own_pid: int | None = None, now: float | None = None) -> list[Reaped]:
    """Remove every orphan (dead owner on this host, or expired); returns what went and why. What cannot
    go yet (still attached, or racing another gc) is left for the next pass. Raises InfraError when the
    runtime cannot list its objects."""
    host = socket.gethostname()
    now = time.time() if now is None else now
    reasons: dict[tuple[str, str], str] = {}
    orphans: list[DockerObject] = []
    for obj in runtime.labelled():
        reason = orphan_reason(obj.labels, now=now, host=host, own_pid=own_pid)
        if reason is not None:
            reasons[(obj.kind, obj.name)] = reason
            orphans.append(obj)
    removal = lifecycle.remove_objects(runtime, orphans)
    return [Reaped(obj, reasons[(obj.kind, obj.name)]) for obj in removal.removed]
