"""The one retry policy factory.

Only transient, idempotent calls are retried (listing, inspecting, removing,
pulling logs). Creating a container or running an agent is never retried
blindly: a retried create after a read timeout can leave a duplicate
(docker/docker-py#2461); trial-level retries of infrastructure failures are a
separate, recorded decision made by the experiment loop.

Tests set ``WAIT_SCALE`` to 0 so retries do not sleep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

T = TypeVar("T")

#: multiplies every backoff; tests set it to 0
WAIT_SCALE = 1.0


def retrying(is_transient: Callable[[BaseException], bool], *, attempts: int = 3, max_wait: float = 8.0) -> Retrying:
    """A tenacity policy: exponential backoff, bounded attempts, re-raises the last error."""
    return Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.5 * WAIT_SCALE, max=max_wait * WAIT_SCALE),
        reraise=True,
    )


def call_with_retry(fn: Callable[..., T], is_transient: Callable[[BaseException], bool], *args: Any, **kw: Any) -> T:
    for attempt in retrying(is_transient):
        with attempt:
            return fn(*args, **kw)
    raise AssertionError("unreachable: tenacity re-raises")  # pragma: no cover
