"""The one retry policy factory, and the wait policy every backoff goes through.

Only transient, idempotent calls are retried (listing, inspecting, removing,
pulling logs). Creating a container or running an agent is never retried
blindly: a retried create after a read timeout can leave a duplicate
(docker/docker-py#2461); trial-level retries of infrastructure failures are a
separate, recorded decision made by the experiment loop.

How long a backoff really waits is a :class:`WaitPolicy`: the experiment loop
takes one as a parameter; everything else uses the process default, which only
:func:`set_default_wait` changes (the test suite's one fixture sets
:data:`NO_WAIT`, so retries do not sleep).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

T = TypeVar("T")


@dataclass(frozen=True)
class WaitPolicy:
    """Every backoff and hold-off waits ``scale`` times what it asks for (1 for real runs)."""

    scale: float = 1.0

    def seconds(self, asked: float) -> float:
        return asked * self.scale


REAL_WAITS = WaitPolicy(1.0)
NO_WAIT = WaitPolicy(0.0)

_default = REAL_WAITS


def default_wait() -> WaitPolicy:
    return _default


def set_default_wait(policy: WaitPolicy) -> WaitPolicy:
    """Replace the process default (tests only); returns the previous one, to restore it."""
    global _default
    previous, _default = _default, policy
    return previous


def retrying(
    is_transient: Callable[[BaseException], bool],
    *,
    attempts: int = 3,
    max_wait: float = 8.0,
    wait: WaitPolicy | None = None,
) -> Retrying:
    """A tenacity policy: exponential backoff, bounded attempts, re-raises the last error."""
    w = wait or _default
    return Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=w.seconds(0.5), max=w.seconds(max_wait)),
        reraise=True,
    )


def call_with_retry(fn: Callable[..., T], is_transient: Callable[[BaseException], bool], *args: Any, **kw: Any) -> T:
    for attempt in retrying(is_transient):
        with attempt:
            return fn(*args, **kw)
    raise AssertionError("unreachable: tenacity re-raises")  # pragma: no cover
