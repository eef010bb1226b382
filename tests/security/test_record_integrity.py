"""Pure checks of how the agent phase is classified when the agent tampers with its own processes."""

from __future__ import annotations

import pytest

from harness.records import AgentResult, GatewayMeter
from harness.sandbox.runtime import ExitInfo
from harness.trial.trial import classify_agent, integrity_flags

NO_RESULT = AgentResult(parse_error="no result object on stdout")
METER = GatewayMeter(requests=3, forwarded=3, cost_usd=0.02)


def run(code: int | None, seconds: float, *, timed_out: bool = False, oom: bool = False) -> ExitInfo:
    return ExitInfo(code, timed_out, oom, b"", b"", False, seconds)


@pytest.mark.parametrize("code", [124, 137])
def test_an_early_timeout_exit_is_the_agents_error(code: int) -> None:
    assert classify_agent(run(code, 3.0), NO_RESULT, METER, timeout_s=60) == "agent_error"
    assert any(f.startswith("self_terminated") for f in integrity_flags(run(code, 3.0), NO_RESULT, METER, timeout_s=60))


@pytest.mark.parametrize("code", [124, 137])
def test_positive_control_a_real_deadline_is_still_a_timeout(code: int) -> None:
    assert classify_agent(run(code, 61.0), NO_RESULT, METER, timeout_s=60) == "timeout"
    assert classify_agent(run(None, 95.0, timed_out=True), NO_RESULT, METER, timeout_s=60) == "timeout"
    assert integrity_flags(run(code, 61.0), NO_RESULT, METER, timeout_s=60) == []


def test_an_oom_kill_is_not_called_self_termination() -> None:
    assert classify_agent(run(137, 3.0, oom=True), NO_RESULT, METER, timeout_s=60) == "agent_error"
    assert integrity_flags(run(137, 3.0, oom=True), NO_RESULT, METER, timeout_s=60) == []


def test_a_cli_cost_below_the_gateways_meter_is_flagged() -> None:
    forged = AgentResult(exit_code=0, subtype="success", is_error=False, cost_usd=0.0)
    assert any(f.startswith("cost_mismatch") for f in integrity_flags(run(0, 5.0), forged, METER, timeout_s=60))
    honest = AgentResult(exit_code=0, subtype="success", is_error=False, cost_usd=0.02)
    assert integrity_flags(run(0, 5.0), honest, METER, timeout_s=60) == []  # positive control
