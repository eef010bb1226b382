"""Did the model API fail? Decided from the gateway's record of what it saw upstream.

The CLI's result is read from the agent container's stdout, which the agent can
write to: a skill could print ``{"is_error": true, "result": "API Error: 529
overloaded"}`` and turn its failures into excluded infrastructure errors. So the
agent's words never decide it. The gateway (a trusted sidecar) logs the status of
every upstream answer; a trial is an API failure only when the CLI did not
finish and the **last** upstream answer the gateway forwarded was a failure:

    429 (rate limit), 401 (the controller's key), 408, any 5xx (529 overloaded
    included), ``cut`` (a stream that ended before ``message_stop``: a reset or a
    dropped connection), ``unreachable`` (no answer: TLS, proxy, DNS, refused)

A 400 or 413 is the request's fault (the agent's context), not the API's (the
rule is :func:`harness.records.is_upstream_failure`). The same record gives the run
its backoff (the upstream's ``retry-after``) and the report its per-arm counts
(:mod:`harness.analysis.runnotes`). While a trial runs, each line of its gateway's log is
also read the moment it is written, and a failure's ``retry-after`` pauses the run's
trial starts at once (:func:`pause_asked_s`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from harness.records import UPSTREAM_CUT, UPSTREAM_UNREACHABLE, GatewayMeter, TrialRecord, is_upstream_failure
from harness.sidecars.gatewaylog import Forwarded, GatewayEvent, UpstreamError

RETRY_AFTER_CAP_S = 300.0
"""A retry-after beyond this is not waited for in one go (the run would look hung)."""
MAX_ERROR_DETAILS = 5


def _retry_after(value: str) -> float | None:
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # an HTTP date: not honoured (the API sends seconds)
    return seconds if seconds >= 0 else None


def annotate(meter: GatewayMeter, events: Sequence[GatewayEvent]) -> GatewayMeter:
    """``meter`` with the upstream record of ``events`` (the gateway's log lines of one phase)."""
    outcomes: list[str] = []
    details: list[str] = []
    retry_after: float | None = None
    for e in events:
        if isinstance(e, Forwarded):
            status = str(e.status)
            if status == "200" and e.stream and not e.complete and not e.broken:
                status = UPSTREAM_CUT
            outcomes.append(status)
            if is_upstream_failure(status) and e.retry_after is not None:
                retry_after = _retry_after(e.retry_after)
        elif isinstance(e, UpstreamError):
            outcomes.append(UPSTREAM_UNREACHABLE)
            detail = (e.detail or e.error or "no answer")[:300]
            if detail not in details and len(details) < MAX_ERROR_DETAILS:
                details.append(detail)
    return meter.model_copy(
        update={"upstream_statuses": tuple(outcomes), "upstream_errors": tuple(details), "retry_after_s": retry_after}
    )


def api_failure(meter: GatewayMeter | None) -> str | None:
    """A description when the gateway's last upstream answer was a failure, else None."""
    if meter is None or not meter.last_answer_failed:
        return None
    failed = Counter(meter.failed_answers)
    seen = ", ".join(f"{k} x{v}" for k, v in sorted(failed.items()))
    text = f"the gateway's last upstream answer was {meter.upstream_statuses[-1]} ({seen} of {len(meter.upstream_statuses)})"
    if meter.upstream_errors:
        text += ": " + "; ".join(meter.upstream_errors)
    return text


def pause_asked_s(event: GatewayEvent) -> float:
    """The pause one line of a gateway's log asks of the run, read as it is written: the ``retry-after`` of
    an upstream failure the gateway forwarded (capped), else 0."""
    if not isinstance(event, Forwarded) or event.retry_after is None or not is_upstream_failure(str(event.status)):
        return 0.0
    return min(RETRY_AFTER_CAP_S, _retry_after(event.retry_after) or 0.0)


def backoff_s(record: TrialRecord) -> float:
    """How long the run should leave the API alone after ``record``: the upstream's retry-after, capped."""
    if record.status != "infra_error" or record.gateway is None or record.gateway.retry_after_s is None:
        return 0.0
    return min(RETRY_AFTER_CAP_S, record.gateway.retry_after_s)
