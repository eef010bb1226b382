"""Host side of the per-trial gateway: readiness, and reading its meter.

The gateway itself (``harness/sidecars/gateway.py``) runs in a trusted sidecar
container and prints one JSON line per request and per refusal. The controller
cannot reach it over the network (the trial network has no host address), so
readiness and metering both come from the container's log: read whole at the end of a
phase for the record, and followed while the trial runs (:class:`Follower`) for what the
run must learn at once (the API's ``retry-after``). Each line is parsed once, where it is
read, into the typed events of :mod:`harness.sidecars.gatewaylog` (the model the gateway
writes them with); everything after that reads attributes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

from harness.errors import InfraError
from harness.records import GatewayMeter
from harness.sandbox.runtime import ContainerRuntime, LogStream
from harness.sidecars.gatewaylog import Forwarded, GatewayEvent, Listening, LogFormatError, Refused, SkillRequest, parse

FIRST_LOOK_S = 0.08
"""A sidecar's first look at its log: about the CPU its Python takes to import its modules and bind."""
LOOK_EVERY_S = 0.05
SLOW_START_S = 0.3
"""From here on each look also asks whether the sidecar still runs."""
LINE_CAP = 1 << 20
"""A followed log line longer than this is dropped (the gateway's lines are short JSON)."""


def events(engine: ContainerRuntime, name: str) -> list[GatewayEvent]:
    """The gateway's log so far, parsed. A line the gateway wrote that does not fit its event's class is an
    :class:`InfraError` (the sidecar and this reader are one version: never a line to meter as zero)."""
    data, _ = engine.logs(name, stdout=True, stderr=False, cap=8 << 20)
    try:
        return parsed(data.decode("utf-8", "replace").splitlines())
    except LogFormatError as e:
        raise InfraError(f"{name} wrote a log line this harness cannot read: {e}") from e


def parsed(lines: Iterable[bytes | str]) -> list[GatewayEvent]:
    """The gateway's events among ``lines`` (other lines are skipped; a malformed event raises)."""
    return [event for line in lines if (event := parse(line)) is not None]


class Follower:
    """A gateway's log, read on a thread as it is written: ``on_event`` gets each JSON event the moment its
    line is complete, in order. It ends when the gateway stops or :meth:`stop` is called. An engine that
    fails to stream ends it quietly: what the record says comes from :func:`events`, read whole at the end
    of each phase; the follower only lets the run act sooner."""

    def __init__(self, engine: ContainerRuntime, name: str, on_event: Callable[[GatewayEvent], None]) -> None:
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
                    try:
                        event = parse(line)
                    except LogFormatError:
                        continue  # the record's reading (events()) says so
                    if event is not None:
                        self.on_event(event)
        except InfraError:
            return


def wait_listening(engine: ContainerRuntime, name: str, *, timeout_s: float = 20.0) -> None:
    """Poll the container log for the sidecar's :class:`~harness.sidecars.gatewaylog.Listening` event.

    Each look is one engine request, so they are few: the first after :data:`FIRST_LOOK_S` (a sidecar's Python
    needs longer than that to start), and whether the container still runs is asked only once it is slower
    than usual (a sidecar that died is then told within :data:`LOOK_EVERY_S`). Issue 27 item 4: the looks
    and their checks were 14 requests of a trial's 88."""
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    time.sleep(FIRST_LOOK_S)
    while time.monotonic() < deadline:
        data, _ = engine.logs(name, stdout=True, stderr=True, cap=65536)
        if any(_is_listening(line) for line in data.splitlines()):
            return
        if time.monotonic() - started >= SLOW_START_S and not engine.is_running(name):
            raise InfraError(f"{name} exited before listening: {data.decode('utf-8', 'replace')[-800:]}")
        time.sleep(LOOK_EVERY_S)
    raise InfraError(f"{name} did not start listening within {timeout_s:.0f} s")


def _is_listening(line: bytes) -> bool:
    """A line of a starting sidecar, stderr's too (a traceback is no event)."""
    try:
        return isinstance(parse(line), Listening)
    except LogFormatError:
        return False


def meter(evts: Sequence[GatewayEvent]) -> GatewayMeter:
    """Sum the gateway's request log into one trial-phase meter. Side requests (the CLI did not send
    them) are metered like the CLI's own, and counted apart."""
    forwarded = [e for e in evts if isinstance(e, Forwarded)]
    refused = [e for e in evts if isinstance(e, Refused)]
    return GatewayMeter(
        requests=len(forwarded) + len(refused),
        forwarded=len(forwarded),
        refused=tuple(f"{e.method} {e.path}: {e.reason}" for e in refused),
        input_tokens=sum(e.usage.input_tokens for e in forwarded),
        output_tokens=sum(e.usage.output_tokens for e in forwarded),
        cache_creation_input_tokens=sum(e.usage.cache_creation_input_tokens for e in forwarded),
        cache_read_input_tokens=sum(e.usage.cache_read_input_tokens for e in forwarded),
        cost_usd=round(sum(e.cost_usd for e in forwarded), 8),
        budget_stopped=any("budget" in e.reason for e in refused),
        side_requests=sum(1 for e in evts if isinstance(e, SkillRequest) and e.side),
    )
