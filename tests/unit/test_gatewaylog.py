"""The gateway's log, typed once (``harness/sidecars/gatewaylog.py``): what the gateway writes is what the
controller reads, a misspelt field is a type error, and a line that does not fit is loud, never zero tokens."""

from __future__ import annotations

import json
import math
import textwrap
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from mypy import api as mypy_api

from harness.errors import InfraError
from harness.sandbox.runtime import ContainerSpec
from harness.sidecars import gatewaylog
from harness.sidecars.gatewaylog import (
    Fatal,
    Forwarded,
    GatewayEvent,
    Listening,
    LogFormatError,
    ModelToolUse,
    Refused,
    SkillRequest,
    ToolUse,
    UpstreamError,
    Usage,
)
from harness.trial import gateway
from tests.fakes import FakeRuntime, Outcome, forwarded

ONE_OF_EACH: list[GatewayEvent] = [
    Listening(upstream_scheme="https", budget_usd=0.5),
    Fatal(reason="empty key file"),
    Refused(method="GET", path="/v1/models", reason="only the Messages API is forwarded"),
    UpstreamError(path="/v1/messages", error="ConnectionRefusedError", detail="connection refused"),
    Forwarded(
        path="/v1/messages",
        status=429,
        model="claude-sonnet-5-5",
        stream=True,
        usage=Usage(input_tokens=12, output_tokens=3, cache_creation_input_tokens=40, cache_read_input_tokens=5000),
        cost_usd=0.00123,
        broken=False,
        complete=False,
        retry_after="7",
    ),
    SkillRequest(
        turn=0,
        tools=("Bash", "Skill"),
        listed=("careful-fixer",),
        loaded=(),
        request_bytes=2048,
        thread="cli",
        side=False,
        root=True,
        listing=("- careful-fixer: Fix a bug.",),
    ),
    ModelToolUse(uses=(ToolUse(name="Skill", skill="careful-fixer"), ToolUse(name="Bash")), thread=None, side=True),
]


def test_every_kind_reads_back_as_the_event_written() -> None:
    assert {type(e) for e in ONE_OF_EACH} == set(gatewaylog.EVENT_TYPES), "one of each kind"
    for event in ONE_OF_EACH:
        line = gatewaylog.dump(event)
        assert "\n" not in line and json.loads(line)["event"] == event.event
        assert gatewaylog.parse(line) == event
        assert gatewaylog.parse(line.encode()) == event


def test_each_kind_has_its_own_discriminator() -> None:
    assert sorted(gatewaylog.KINDS) == sorted(e.event for e in ONE_OF_EACH)
    assert all(gatewaylog.KINDS[e.event] is type(e) for e in ONE_OF_EACH)


def test_lines_that_are_no_event_of_the_gateways_are_skipped() -> None:
    for line in ("Traceback (most recent call last):", "[1, 2]", '"listening"', "{}", '{"event": ["x"]}'):
        assert gatewaylog.parse(line) is None, line
    # the scripted Messages API's own lines (its audit trail) are not the gateway's events
    assert gatewaylog.parse('{"event": "skill_decision", "invoke": true, "p": 0.9}') is None
    # ... but its first line is the same Listening event the gateway writes
    assert gatewaylog.parse('{"event": "listening", "port": 8080}') == Listening(port=8080)


def _forwarded_line(**change: object) -> str:
    data = asdict(forwarded(0.5))
    data.update(change)
    return json.dumps({k: v for k, v in data.items() if v is not MISSING})


MISSING = object()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"usage": MISSING, "usgae": {"input_tokens": 100}}, "forwarded: no field 'usage'"),  # a misspelt field
        ({"complete": MISSING}, "no field 'complete'"),
        ({"status": "200"}, "forwarded.status: str '200'"),
        ({"status": True}, "forwarded.status: bool"),  # JSON true is no status
        ({"usage": {"input_tokens": "100"}}, "forwarded.usage.input_tokens: str"),
        ({"cost_usd": None}, "forwarded.cost_usd: NoneType"),
        ({"retry_after": 7}, "forwarded.retry_after: int"),
    ],
)
def test_a_line_that_does_not_fit_its_kind_is_an_error_naming_the_field(change: dict[str, object], named: str) -> None:
    with pytest.raises(LogFormatError, match=named.replace("(", r"\(").replace(")", r"\)")):
        gatewaylog.parse(_forwarded_line(**change))


def test_unknown_fields_are_ignored_and_an_integer_cost_is_a_float() -> None:
    event = gatewaylog.parse(_forwarded_line(cost_usd=1, note="a later field"))
    assert isinstance(event, Forwarded) and event.cost_usd == 1.0 and isinstance(event.cost_usd, float)


def _gateway(runtime: FakeRuntime, name: str, log: str) -> str:
    """A started gateway container of the fake engine that has written ``log``."""
    runtime.behave(name, Outcome(stdout=log.encode(), hold_s=math.inf))
    runtime.create(ContainerSpec(name=name, image="sidecar:test", command=("gateway",), labels={}, user="65534"))
    runtime.start(name)
    return name


def test_the_controller_reads_the_log_once_and_a_malformed_line_fails_the_read() -> None:
    runtime = FakeRuntime(images=["sidecar:test"])
    lines = [
        gatewaylog.dump(forwarded(0.25)),
        "not json",
        gatewaylog.dump(Refused(method="POST", path="/", reason="x")),
    ]
    evts = gateway.events(runtime, _gateway(runtime, "gw", "\n".join(lines) + "\n"))
    assert [type(e) for e in evts] == [Forwarded, Refused]
    assert gateway.meter(evts).cost_usd == 0.25 and gateway.meter(evts).input_tokens == 100
    bad = _gateway(runtime, "gw-2", _forwarded_line(usage=MISSING) + "\n")
    with pytest.raises(InfraError, match="gw-2 wrote a log line this harness cannot read: forwarded: no field 'usage'"):
        gateway.events(runtime, bad)


def test_both_sidecars_listening_lines_are_what_the_start_waits_for() -> None:
    runtime = FakeRuntime(images=["sidecar:test"])
    gateway.wait_listening(runtime, _gateway(runtime, "gw", gatewaylog.dump(Listening(budget_usd=1.0)) + "\n"))
    gateway.wait_listening(runtime, _gateway(runtime, "scripted", '{"event": "listening", "port": 8080}\n'))
    # a line that has the bytes the start used to look for, and is no event, is not the sidecar serving
    mention = _gateway(runtime, "other", 'starting: will log "event": "listening" when ready\n')
    with pytest.raises(InfraError, match="did not start listening"):
        gateway.wait_listening(runtime, mention, timeout_s=0.2)


def test_a_misspelt_field_is_a_type_error_where_it_is_read_and_where_it_is_written(tmp_path: Path) -> None:
    source = tmp_path / "reader.py"
    source.write_text(
        textwrap.dedent(
            """
            from harness.sidecars.gatewaylog import Forwarded, GatewayEvent, Refused

            def tokens(events: list[GatewayEvent]) -> int:
                return sum(e.usage.input_tokenz for e in events if isinstance(e, Forwarded))

            def refuse() -> Refused:
                return Refused(method="GET", path="/", reasn="no")

            def right(events: list[GatewayEvent]) -> int:
                return sum(e.usage.input_tokens for e in events if isinstance(e, Forwarded))
            """
        )
    )
    out, _, status = mypy_api.run(["--strict", "--no-incremental", "--follow-imports=silent", str(source)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1 and len(errors) == 2, out
    assert '"Usage" has no attribute "input_tokenz"' in errors[0]
    assert 'Unexpected keyword argument "reasn"' in errors[1]


def test_the_start_looks_at_the_log_a_few_times_and_asks_whether_the_sidecar_runs_only_when_it_is_slow() -> None:
    """Issue 27 item 4: each look is an engine request. A sidecar that listens at once is found by one read of
    its log and no state check; one that died before listening is still told (not left to the timeout)."""
    runtime = FakeRuntime(images=["sidecar:test"])
    name = _gateway(runtime, "gw", gatewaylog.dump(Listening(budget_usd=1.0)) + "\n")
    before = len(runtime.calls)
    gateway.wait_listening(runtime, name)
    assert [c.method for c in runtime.calls[before:]] == ["logs"]
    runtime.behave("dead", Outcome(exit_code=1, stderr=b"Traceback: boom\n"))
    runtime.create(ContainerSpec(name="dead", image="sidecar:test", command=("gateway",), labels={}, user="65534"))
    runtime.start("dead")
    t0 = time.monotonic()
    with pytest.raises(InfraError, match="dead exited before listening: Traceback: boom"):
        gateway.wait_listening(runtime, "dead", timeout_s=20)
    assert time.monotonic() - t0 < gateway.SLOW_START_S + 1.0
