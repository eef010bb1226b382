"""A container's two deadlines: the one inside it and the controller's backstop.

Every command with a time limit runs under ``timeout -k`` inside its container (:func:`deadline_argv`), so
it is stopped by a timer the container's own init reaps; the controller's wait (:func:`host_deadline_s`)
is later still and fires only when that timer was stopped or killed, and then kills the container.
Pure values: the engine applies the host deadline (``harness.sandbox.lifecycle.run(deadline_s=...)``).
"""

from __future__ import annotations

KILL_GRACE_S = 10
"""Seconds between the in-container SIGTERM and SIGKILL (timeout -k)."""
HOST_BACKSTOP_S = 20
"""Beyond the in-container deadline and its grace, how long the controller waits before ``docker kill``."""


def deadline_argv(timeout_s: int) -> tuple[str, ...]:
    """The in-container deadline: SIGTERM at ``timeout_s``, SIGKILL after the grace."""
    return ("timeout", "-k", str(KILL_GRACE_S), str(timeout_s))


def host_deadline_s(timeout_s: float) -> float:
    """The controller's deadline for a container whose command runs under :func:`deadline_argv`:
    it fires only when the in-container timer was stopped or killed."""
    return timeout_s + KILL_GRACE_S + HOST_BACKSTOP_S
