"""harness.records: the three-valued outcome under each pass rule, and the cost figures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.records import (
    SCHEMA_VERSION,
    AgentResult,
    GatewayMeter,
    JudgeResult,
    JudgeVerdict,
    PassRule,
    PatchInfo,
    TrialRecord,
    TrialStatus,
    VerifyResult,
    outcome,
)
from tests.factories import trial_record


def record(status: TrialStatus = "completed", **kw: Any) -> TrialRecord:
    return trial_record(experiment_id="exp", status=status, **kw)


def with_results(verify: JudgeVerdict, judge: JudgeVerdict, status: TrialStatus = "completed") -> TrialRecord:
    v = {"pass": VerifyResult(exit_code=0), "fail": VerifyResult(exit_code=1), "unknown": None}[verify]
    j = JudgeResult(verdict=judge)
    return record(status, verify=v, judge=j)


# verify x judge -> outcome, for each pass rule (Kleene conjunction for verify_and_judge)
TABLE: list[tuple[JudgeVerdict, JudgeVerdict, str, str, str]] = [
    # verify,  judge,     v_and_j,   verify,    judge
    ("pass", "pass", "pass", "pass", "pass"),
    ("pass", "fail", "fail", "pass", "fail"),
    ("pass", "unknown", "unknown", "pass", "unknown"),
    ("fail", "pass", "fail", "fail", "pass"),
    ("fail", "fail", "fail", "fail", "fail"),
    ("fail", "unknown", "fail", "fail", "unknown"),
    ("unknown", "pass", "unknown", "unknown", "pass"),
    ("unknown", "fail", "fail", "unknown", "fail"),
    ("unknown", "unknown", "unknown", "unknown", "unknown"),
]


@pytest.mark.parametrize(("verify", "judge", "vj", "v", "j"), TABLE)
def test_outcome_table(verify: JudgeVerdict, judge: JudgeVerdict, vj: str, v: str, j: str) -> None:
    r = with_results(verify, judge)
    assert outcome(r) == vj  # the default rule
    assert outcome(r, "verify_and_judge") == vj
    assert outcome(r, "verify") == v
    assert outcome(r, "judge") == j


@pytest.mark.parametrize("status", ["completed", "agent_error"])
def test_agent_error_is_judged_like_completed(status: TrialStatus) -> None:
    assert outcome(with_results("pass", "pass", status)) == "pass"
    assert outcome(with_results("fail", "pass", status)) == "fail"


@pytest.mark.parametrize(
    ("status", "expected"),
    [("timeout", "truncated"), ("budget_exceeded", "truncated"), ("infra_error", "infra"), ("skipped", "skipped")],
)
@pytest.mark.parametrize("rule", ["verify_and_judge", "verify", "judge"])
def test_unfinished_trials_have_their_own_outcome(status: TrialStatus, expected: str, rule: PassRule) -> None:
    # even with passing verify and judge results attached, these never count as pass
    assert outcome(with_results("pass", "pass", status), rule) == expected
    assert outcome(record(status), rule) == expected


def test_missing_judge_is_unknown() -> None:
    r = record(verify=VerifyResult(exit_code=0))
    assert outcome(r) == "unknown"
    assert outcome(r, "verify") == "pass"
    assert outcome(r, "judge") == "unknown"


def test_verify_timed_out_without_exit_code_is_unknown() -> None:
    r = record(verify=VerifyResult(exit_code=None, timed_out=True), judge=JudgeResult(verdict="pass"))
    assert outcome(r) == "unknown"


def test_rejected_patch_counts_as_verify_fail() -> None:
    patch = PatchInfo(sha256="x", bytes=1, files_changed=1, insertions=0, deletions=0, rejected="unsafe_path: ..")
    r = record(patch=patch, verify=VerifyResult(skipped_reason="patch rejected"), judge=JudgeResult(verdict="pass"))
    assert outcome(r) == "fail"
    assert outcome(r, "verify") == "fail"


def test_skipped_verify_without_rejection_is_unknown() -> None:
    patch = PatchInfo(sha256="x", bytes=1, files_changed=1, insertions=0, deletions=0)
    r = record(patch=patch, verify=VerifyResult(skipped_reason="?"), judge=JudgeResult(verdict="pass"))
    assert outcome(r) == "unknown"


def test_nonzero_verify_exit_is_fail() -> None:
    r = record(verify=VerifyResult(exit_code=2), judge=JudgeResult(verdict="pass"))
    assert outcome(r) == "fail"


# --------------------------------------------------------------------------------- cost


def test_agent_cost_is_the_larger_of_cli_and_gateway_so_a_forged_low_figure_never_wins() -> None:
    forged = record(agent=AgentResult(cost_usd=0.0001), gateway=GatewayMeter(forwarded=3, cost_usd=0.7))
    assert forged.agent_cost_usd == 0.7
    honest = record(agent=AgentResult(cost_usd=0.5), gateway=GatewayMeter(forwarded=3, cost_usd=0.5))
    assert honest.agent_cost_usd == 0.5
    above = record(agent=AgentResult(cost_usd=0.9), gateway=GatewayMeter(forwarded=3, cost_usd=0.5))
    assert above.agent_cost_usd == 0.9


def test_agent_cost_ignores_negative_and_nan_cli_figures() -> None:
    assert (
        record(agent=AgentResult(cost_usd=-5.0), gateway=GatewayMeter(forwarded=1, cost_usd=0.2)).agent_cost_usd == 0.2
    )
    assert (
        record(agent=AgentResult(cost_usd=float("nan")), gateway=GatewayMeter(forwarded=1, cost_usd=0.2)).agent_cost_usd
        == 0.2
    )


def test_agent_cost_falls_back_to_the_gateway_meter() -> None:
    assert (
        record(agent=AgentResult(cost_usd=None), gateway=GatewayMeter(forwarded=1, cost_usd=0.7)).agent_cost_usd == 0.7
    )
    assert record(agent=None, gateway=GatewayMeter(forwarded=1, cost_usd=0.25)).agent_cost_usd == 0.25


def test_agent_cost_zero_when_nothing_known() -> None:
    assert record().agent_cost_usd == 0.0
    assert record(agent=AgentResult()).agent_cost_usd == 0.0


def test_total_cost_includes_the_judge() -> None:
    r = record(agent=AgentResult(cost_usd=0.5), judge=JudgeResult(verdict="pass", cost_usd=0.02))
    assert r.total_cost_usd == pytest.approx(0.52)
    assert record(agent=AgentResult(cost_usd=0.5), judge=JudgeResult(verdict="pass")).total_cost_usd == 0.5


# ------------------------------------------------------------------------------- schema


def test_record_round_trips_through_json() -> None:
    r = record(
        agent=AgentResult(cost_usd=0.1, num_turns=3),
        gateway=GatewayMeter(requests=3, forwarded=3, refused=("mcp_servers",)),
        verify=VerifyResult(exit_code=0, output_tail="ok"),
        judge=JudgeResult(verdict="pass", reason="fine"),
        artifacts={"patch.diff": "a" * 64},
        flags=("edits_tests",),
    )
    line = r.model_dump_json()
    assert "\n" not in line
    data = json.loads(line)
    assert data["schema_version"] == SCHEMA_VERSION
    assert TrialRecord.model_validate_json(line) == r


def test_record_rejects_unknown_fields_and_bad_values() -> None:
    with pytest.raises(ValueError, match="extra"):
        record(surprise=1)
    with pytest.raises(ValueError):
        record(status="finished")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        JudgeResult(verdict="maybe")
