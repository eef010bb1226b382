"""Engine.wait: its own deadline is a timeout; a lost engine connection is an infrastructure error."""

from __future__ import annotations

import pytest
import requests.exceptions
import urllib3.exceptions

from harness.errors import InfraError
from harness.sandbox.engine import Engine


class _Container:
    def __init__(self, first: BaseException | None) -> None:
        self.first = first
        self.waits = 0

    def wait(self, timeout: float) -> dict[str, int]:
        self.waits += 1
        if self.waits == 1 and self.first is not None:
            raise self.first
        return {"StatusCode": 137}


class _Client:
    def __init__(self, container: _Container) -> None:
        self.container = container
        self.killed: list[str] = []
        self.containers = self
        self.api = self

    def wait(self, name: str, timeout: float) -> dict[str, int]:
        """The API client's wait (the engine makes no container object: one request, no inspect before it)."""
        return self.container.wait(timeout)

    def kill(self, name: str) -> None:
        self.killed.append(name)

    def inspect_container(self, name: str) -> dict[str, object]:
        """How it ended, as the engine records it: 2.5 s from its start to its exit."""
        return {"State": {"StartedAt": "2026-12-04T10:00:00.25Z", "FinishedAt": "2026-12-04T10:00:02.75Z"}}


def _engine(first: BaseException | None) -> tuple[Engine, _Client]:
    engine = Engine.__new__(Engine)
    client = _Client(_Container(first))
    engine.client = client  # type: ignore[assignment]
    return engine, client


def _read_timeout() -> urllib3.exceptions.ReadTimeoutError:
    return urllib3.exceptions.ReadTimeoutError(None, "/containers/x/wait", "Read timed out.")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "overrun",
    [
        requests.exceptions.ReadTimeout("Read timed out."),
        requests.exceptions.ConnectionError(_read_timeout()),  # the deadline passed while reading the body
        requests.exceptions.ConnectionError(urllib3.exceptions.MaxRetryError(None, "/wait", _read_timeout())),  # type: ignore[arg-type]
    ],
)
def test_the_deadline_passing_is_a_timeout_and_kills_the_container(overrun: BaseException) -> None:
    engine, client = _engine(overrun)
    waited = engine.wait("agent", 5)
    assert (waited.exit_code, waited.timed_out) == (None, True)
    assert client.killed == ["agent"]


@pytest.mark.parametrize(
    "lost",
    [
        requests.exceptions.ConnectionError(
            urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError())
        ),
        requests.exceptions.ConnectionError("Connection refused"),
    ],
)
def test_a_dropped_engine_connection_is_infra_not_a_timeout(lost: BaseException) -> None:
    engine, client = _engine(lost)
    with pytest.raises(InfraError, match="waiting for container agent failed"):
        engine.wait("agent", 5)
    assert client.killed == []


def test_a_normal_exit_returns_its_code_and_the_engines_run_time() -> None:
    engine, client = _engine(None)
    waited = engine.wait("agent", 5)
    assert (waited.exit_code, waited.timed_out, waited.oom_killed, waited.ran_s) == (137, False, False, 2.5)
    assert client.killed == []
