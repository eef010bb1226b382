"""Host side of the per-trial gateway: readiness, and reading its meter.

The gateway itself (``harness/sidecars/gateway.py``) runs in a trusted sidecar
container and prints one JSON line per request and per refusal. The controller
cannot reach it over the network (the trial network has no host address), so
readiness and metering both come from the container's log: read whole at the end of a
phase for the record, and followed while the trial runs (:class:`Follower`) for what the
run must learn at once (the API's ``retry-after``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from harness.errors import InfraError
from harness.records import GatewayMeter
from harness.sandbox.runtime import ContainerRuntime, LogStream

LINE_CAP = 1 << 20
"""A followed log line longer than this is dropped (the gateway's lines are short JSON)."""


def events(engine: ContainerRuntime, name: str) -> list[dict[str, Any]]:
    data, _ = engine.logs(name, stdout=True, stderr=False, cap=8 << 20)
    out: list[dict[str, Any]] = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def _event(line: bytes) -> dict[str, Any] | None:
    try:
        event = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


class Follower:
    """A gateway's log, read on a thread as it is written: ``on_event`` gets each JSON event the moment its
    line is complete, in order. It ends when the gateway stops or :meth:`stop` is called. An engine that
    fails to stream ends it quietly: what the record says comes from :func:`events`, read whole at the end
    of each phase; the follower only lets the run act sooner."""

    def __init__(self, engine: ContainerRuntime, name: str, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.engine = engine
        self.name = name
        self.on_event = on_event
        self._lock = threading.Lock()
        self._stopped = False
        self._stream: LogStream | None = None
        self._thread = threading.Thread(target=self._run, name=f"follow-{name}", daemon=True)

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the stream and wait for the thread (bounded: an engine that cannot cancel a stream ends it
        when the gateway goes, at teardown)."""
        with self._lock:
            self._stopped = True
            stream = self._stream
        if stream is not None:
            stream.close()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            stream = self.engine.follow_logs(self.name)
        except InfraError:
            return
        with self._lock:
            self._stream = stream
            stopped = self._stopped
        if stopped:
            stream.close()
            return
        buffer = b""
        try:
            for chunk in stream:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                if len(buffer) > LINE_CAP:
                    buffer = b""
                for line in lines:
                    event = _event(line)
                    if event is not None:
                        self.on_event(event)
        except InfraError:
            return


def wait_listening(engine: ContainerRuntime, name: str, *, timeout_s: float = 20.0) -> None:
    """Poll the container log for the server's 'listening' line."""
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while time.monotonic() < deadline:
        data, _ = engine.logs(name, stdout=True, stderr=True, cap=65536)
        if b'"event": "listening"' in data:
            return
        if not engine.is_running(name):
            raise InfraError(f"{name} exited before listening: {data.decode('utf-8', 'replace')[-800:]}")
        time.sleep(delay)
        delay = min(0.1, delay * 1.5)
    raise InfraError(f"{name} did not start listening within {timeout_s:.0f} s")


def meter(evts: Sequence[dict[str, Any]]) -> GatewayMeter:
    """Sum the gateway's request log into one trial-phase meter. Side requests (the CLI did not send
    them) are metered like the CLI's own, and counted apart."""
    forwarded = [e for e in evts if e.get("event") == "forwarded"]
    refused = [e for e in evts if e.get("event") == "refused"]

    def total(key: str) -> int:
        return sum(int((e.get("usage") or {}).get(key, 0)) for e in forwarded)

    return GatewayMeter(
        requests=len(forwarded) + len(refused),
        forwarded=len(forwarded),
        refused=tuple(f"{e.get('method', '')} {e.get('path', '')}: {e.get('reason', '')}" for e in refused),
        input_tokens=total("input_tokens"),
        output_tokens=total("output_tokens"),
        cache_creation_input_tokens=total("cache_creation_input_tokens"),
        cache_read_input_tokens=total("cache_read_input_tokens"),
        cost_usd=round(sum(float(e.get("cost_usd", 0.0)) for e in forwarded), 8),
        budget_stopped=any("budget" in str(e.get("reason", "")) for e in refused),
        side_requests=sum(1 for e in evts if e.get("event") == "skill_request" and e.get("side")),
    )
