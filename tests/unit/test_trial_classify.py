"""harness.trial.trial.classify_agent: the agent phase's status from exit info, CLI result and gateway meter."""

from __future__ import annotations

import pytest

from harness.errors import InfraError
from harness.records import AgentResult, GatewayMeter
from harness.sandbox.runtime import ExitInfo
from harness.trial.trial import classify_agent

SUCCESS = AgentResult(exit_code=0, subtype="success", is_error=False, cost_usd=0.01, result_excerpt="Done")
NO_RESULT = AgentResult(parse_error="no result object on stdout")
METER = GatewayMeter(requests=4, forwarded=3, cost_usd=0.01)
NO_TRAFFIC = GatewayMeter(requests=1, forwarded=0)


def run(exit_code: int | None = 0, *, timed_out: bool = False, oom: bool = False) -> ExitInfo:
    return ExitInfo(
        exit_code=exit_code,
        timed_out=timed_out,
        oom_killed=oom,
        stdout=b"",
        stderr=b"",
        stdout_truncated=False,
        seconds=1.0,
    )


def test_completed() -> None:
    assert classify_agent(run(0), SUCCESS, METER) == "completed"


def test_host_deadline_is_timeout() -> None:
    assert classify_agent(run(None, timed_out=True), NO_RESULT, NO_TRAFFIC) == "timeout"
    assert classify_agent(run(137, timed_out=True), SUCCESS, METER) == "timeout"


@pytest.mark.parametrize("code", [124, 137])
def test_in_container_timeout_without_result(code: int) -> None:
    assert classify_agent(run(code), NO_RESULT, METER) == "timeout"


def test_exit_124_with_a_cli_result_is_not_a_timeout() -> None:
    status = classify_agent(run(124), SUCCESS, METER)
    assert status == "agent_error"


def test_cli_budget_subtype() -> None:
    result = AgentResult(exit_code=1, subtype="error_max_budget_usd", is_error=True, cost_usd=1.02)
    assert classify_agent(run(1), result, METER) == "budget_exceeded"


def test_cli_budget_terminal_reason() -> None:
    result = AgentResult(subtype="success", terminal_reason="budget_exhausted")
    assert classify_agent(run(0), result, METER) == "budget_exceeded"


def test_gateway_budget_stop() -> None:
    meter = GatewayMeter(requests=9, forwarded=8, cost_usd=1.3, budget_stopped=True)
    assert classify_agent(run(1), NO_RESULT, meter) == "budget_exceeded"
    assert classify_agent(run(0), SUCCESS, meter) == "budget_exceeded"


def test_oom_is_an_agent_error() -> None:
    assert classify_agent(run(137, oom=True), NO_RESULT, METER) == "agent_error"
    assert classify_agent(run(137, oom=True), NO_RESULT, NO_TRAFFIC) == "agent_error"
    assert classify_agent(run(0, oom=True), SUCCESS, METER) == "agent_error"


@pytest.mark.parametrize(
    ("exit_code", "result"),
    [
        (1, AgentResult(subtype="error_during_execution", is_error=True, result_excerpt="tool failed")),
        (0, AgentResult(subtype="success", is_error=True, result_excerpt="I could not do it")),
        (2, AgentResult(subtype="success", is_error=False)),
        (1, NO_RESULT),
    ],
)
def test_agent_error(exit_code: int, result: AgentResult) -> None:
    assert classify_agent(run(exit_code), result, METER) == "agent_error"


@pytest.mark.parametrize("code", [0, 1, 125, 127])
def test_no_result_and_no_api_call_is_infra(code: int) -> None:
    with pytest.raises(InfraError, match="no API call got through"):
        classify_agent(run(code), NO_RESULT, NO_TRAFFIC)


API_WORDS = [
    AgentResult(subtype="success", terminal_reason="api_error", is_error=True, result_excerpt="API Error: 529"),
    AgentResult(subtype="success", is_error=True, result_excerpt="API Error: Overloaded"),
    AgentResult(subtype="error_during_execution", is_error=True, result_excerpt="status 529 from upstream"),
]


@pytest.mark.parametrize("result", API_WORDS)
def test_the_agents_words_alone_never_make_an_api_failure(result: AgentResult) -> None:
    """The forgery: every upstream answer was 200, the stdout claims an overloaded API."""
    meter = GatewayMeter(requests=3, forwarded=3, upstream_statuses=("200", "200", "200"))
    assert classify_agent(run(1), result, meter) == "agent_error"


@pytest.mark.parametrize("last", ["529", "429", "500", "503", "cut", "unreachable"])
def test_the_gateways_record_of_a_failing_api_is_infra(last: str) -> None:
    meter = GatewayMeter(requests=4, forwarded=4, upstream_statuses=("200", last, last, last))
    with pytest.raises(InfraError, match="model API kept failing.*last upstream answer was " + last):
        classify_agent(run(1), API_WORDS[0], meter)


def test_a_failure_the_cli_recovered_from_is_not_infra() -> None:
    meter = GatewayMeter(requests=3, forwarded=3, upstream_statuses=("529", "529", "200"))
    assert classify_agent(run(0), SUCCESS, meter) == "completed"
    assert classify_agent(run(1), API_WORDS[1], meter) == "agent_error"


def test_a_client_error_is_the_agents_not_the_apis() -> None:
    meter = GatewayMeter(requests=2, forwarded=2, upstream_statuses=("200", "400"))
    assert classify_agent(run(1), API_WORDS[0], meter) == "agent_error"


def test_a_finished_cli_is_not_infra_even_after_a_failed_last_answer() -> None:
    meter = GatewayMeter(requests=2, forwarded=2, upstream_statuses=("200", "529"))
    assert classify_agent(run(0), SUCCESS, meter) == "completed"


def test_no_answer_names_the_upstream_problem() -> None:
    meter = GatewayMeter(
        requests=1,
        upstream_statuses=("unreachable",),
        upstream_errors=("TLS certificate verification failed for api:443: unable to get local issuer certificate",),
    )
    with pytest.raises(InfraError, match=r"model API kept failing.*certificate verification failed"):
        classify_agent(run(1), NO_RESULT, meter)


def test_a_watchdog_trip_is_the_agents_fail_or_an_infra_error_when_the_host_ran_low() -> None:
    from harness.errors import InfraError
    from harness.trial.trial import _TrialState, _workspace_limit
    from harness.trial.watchdog import Trip

    done = _TrialState()
    _workspace_limit(Trip("more than 10 files and directories in the workspace", True), done)
    assert done.status == "agent_error" and done.patch is not None and done.patch.rejected
    assert "workspace_limit" in done.flags[0]
    with pytest.raises(InfraError, match="less than"):
        _workspace_limit(Trip("the host filesystem has less than 1 bytes free", False), _TrialState())
