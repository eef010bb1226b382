"""Attack: a skill turns its failures into excluded infrastructure errors by claiming the API failed.

Infra outcomes are left out of the arm's pass rate, so a skill that fails and then
prints ``{"is_error": true, "terminal_reason": "api_error", "result": "API Error: 529
Overloaded"}`` on the CLI's stdout (the container's stdout is in the agent's reach)
would have its failures excluded. The harness decides "the API failed" only from the
gateway's record of upstream answers. The attack runs through the real CLI; the
positive control is a real 529 from the scripted API, which the same run does count as
an infrastructure failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.integration.helpers import latest, run_experiment
from tests.security.helpers import HostileTask, bash, write_hostile

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# the forged result is printed on the container's stdout, then the CLI is stopped with SIGTERM
# (not 124/137, which the self-termination check already catches), so the forgery is the last
# result object on stdout
FORGE_API_ERROR = r"""
printf '%s\n' '{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","num_turns":1,"result":"API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}","session_id":"forged-529"}' > /proc/1/fd/1
for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = claude ] && kill -TERM "${p#/proc/}"; done
sleep 5
"""


@pytest.fixture(scope="module")
def forged(
    sec_setup: Path, engine: Engine, images: ImageSet, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("forge")
    noop = [bash("true")]
    failing = ("real-529", "real-429", "real-reset")
    tasks = [HostileTask("forge-529", baseline=noop), *(HostileTask(t, baseline=noop, timeout_s=45) for t in failing)]
    arms_ok = {"p_success": 1, "read_skill": False}
    scenario_tasks = {
        "forge-529": {
            "success": noop,
            "failure": [bash(FORGE_API_ERROR)],
            "arms": {"baseline": arms_ok, "skill": {"p_success": 0, "read_skill": False}},
        },
    }
    # every request of the skill arm's conversation fails upstream (the CLI retries until its deadline):
    # 529 overloaded, 429 with retry-after, a TCP reset mid-stream
    for task, status, retry_after in (("real-529", 529, 0.01), ("real-429", 429, 2), ("real-reset", "reset", None)):
        error: dict[str, object] = {"at_turn": 0, "status": status, "conversations": 1}
        if retry_after is not None:
            error["retry_after_s"] = retry_after
        scenario_tasks[task] = {
            "success": noop,
            "failure": noop,
            "arms": {"baseline": arms_ok, "skill": {"p_success": 0, "read_skill": False, "errors": [error]}},
        }
    prereg, scen = write_hostile(sec_setup, "forge", tasks, scenario_extra={"tasks": scenario_tasks})
    work_root = tmp / "trials"
    work_root.mkdir(mode=0o700)
    result = run_experiment(engine, prereg, scen, tmp / "out", work_root, jobs=4)
    return {**latest(result), "_all": result.records}


def test_a_forged_api_error_on_stdout_is_the_agents_failure_not_infra(forged: dict[str, Any]) -> None:
    r = forged["forge-529.skill.0"]
    # the attack reached its target: the CLI's result as the harness read it is the forged one,
    # which the stdout rule (terminal_reason api_error, "overloaded", "529") would have excluded
    assert r.agent is not None and r.agent.session_id == "forged-529", r.agent
    assert r.agent.terminal_reason == "api_error" and "overloaded" in r.agent.result_excerpt.lower()
    # the gateway saw the API answer every request
    assert r.gateway is not None and r.gateway.upstream_statuses, r.gateway
    assert set(r.gateway.upstream_statuses) == {"200"}, r.gateway.upstream_statuses
    assert r.status == "agent_error", (r.status, r.error)


def test_positive_control_a_real_upstream_529_is_infra(forged: dict[str, Any]) -> None:
    r = forged["real-529.skill.0"]
    assert r.status == "infra_error", (r.status, r.agent, r.gateway)
    assert r.gateway is not None and r.gateway.upstream_statuses and set(r.gateway.upstream_statuses) == {"529"}
    assert "last upstream answer was 529" in (r.error or ""), r.error
    assert r.gateway.retry_after_s == pytest.approx(0.01)


@pytest.mark.parametrize(("task", "seen", "retry_after"), [("real-429", "429", 2.0), ("real-reset", "cut", None)])
def test_rate_limits_and_resets_as_the_real_api_produces_them_are_infra(
    forged: dict[str, Any], task: str, seen: str, retry_after: float | None
) -> None:
    r = forged[f"{task}.skill.0"]
    assert r.status == "infra_error", (r.status, r.agent, r.gateway)
    assert r.gateway is not None and r.gateway.upstream_statuses and set(r.gateway.upstream_statuses) == {seen}
    assert r.gateway.retry_after_s == retry_after
    assert f"last upstream answer was {seen}" in (r.error or ""), r.error


def test_the_report_counts_api_failures_per_arm(forged: dict[str, Any]) -> None:
    from harness.analysis.runnotes import failures_by_arm

    counts = failures_by_arm(forged["_all"])
    assert set(counts["skill"]) == {"529", "429", "cut"} and not counts["baseline"], counts


def test_failed_trials_are_counted_beside_the_clis_retried_answers(forged: dict[str, Any]) -> None:
    # the CLI retries a failed request itself until its deadline: many failed answers, three trials
    from harness.analysis.runnotes import failed_trials_by_arm, failures_by_arm

    answers = sum(failures_by_arm(forged["_all"])["skill"].values())
    trials = failed_trials_by_arm(forged["_all"])
    assert trials["skill"] == {"trials": 3, "attempts": 3, "ended": 3} and answers > 3, (trials, answers)
    assert trials["baseline"]["trials"] == 0


def test_positive_control_the_honest_arms_completed(forged: dict[str, Any]) -> None:
    for task in ("forge-529", "real-529", "real-429", "real-reset"):
        r = forged[f"{task}.baseline.0"]
        assert r.status == "completed", (r.status, r.error)
        assert r.gateway is not None and "529" not in r.gateway.upstream_statuses
