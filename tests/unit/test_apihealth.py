"""harness.trial.apihealth, harness.analysis.runnotes and harness.experiment.upstream: the API's health from the
gateway's record, its per-arm counts, and the real run's route."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness import retry
from harness.analysis import runnotes
from harness.errors import ConfigError
from harness.experiment import upstream
from harness.experiment.events import NullEvents
from harness.experiment.loop import ApiPause, LoopPolicy, TrialLoop
from harness.plan import TrialSpec, plan_trials
from harness.records import GatewayMeter, TrialRecord, is_upstream_failure
from harness.sidecars.gatewaylog import Forwarded, GatewayEvent, UpstreamError
from harness.trial import apihealth
from tests.factories import TASKS, make_record, skipped
from tests.fakes import forwarded, refused


def answer(status: int, *, stream: bool = True, complete: bool = True, **extra: Any) -> Forwarded:
    return replace(forwarded(status=status, stream=stream), complete=complete, **extra)


EVENTS: list[GatewayEvent] = [
    answer(200),
    answer(429, stream=False, retry_after="12"),
    answer(200, complete=False, broken=False),
    answer(200, complete=False, broken=True),
    UpstreamError(path="/v1/messages", error="SSLCertVerificationError", detail="TLS certificate verification failed"),
    refused("not allowed"),
]


def test_annotate_reads_statuses_cuts_and_unreachable_in_order() -> None:
    meter = apihealth.annotate(GatewayMeter(), EVENTS)
    # a stream the agent's side broke (broken) is not the API's cut
    assert meter.upstream_statuses == ("200", "429", "cut", "200", "unreachable")
    assert meter.upstream_errors == ("TLS certificate verification failed",)
    assert meter.retry_after_s == 12.0
    assert "certificate" in (apihealth.api_failure(meter) or "")


def test_an_answer_that_is_no_stream_is_never_a_cut() -> None:
    meter = apihealth.annotate(GatewayMeter(), [answer(200, stream=False, complete=False)])
    assert meter.upstream_statuses == ("200",) and apihealth.api_failure(meter) is None


@pytest.mark.parametrize(("outcome", "failed"), [("529", True), ("500", True), ("429", True), ("401", True),
                                                 ("400", False), ("413", False), ("200", False), ("cut", True)])  # fmt: skip
def test_what_counts_as_the_api_failing(outcome: str, failed: bool) -> None:
    assert is_upstream_failure(outcome) is failed


SPECS = plan_trials(TASKS, 1, seed=1)


def _infra(arm: str, statuses: tuple[str, ...], retry_after: float | None = None, task: int = 0) -> TrialRecord:
    spec = next(s for s in SPECS if s.arm == arm and s.task.id == TASKS[task].id)
    meter = GatewayMeter(forwarded=len(statuses), upstream_statuses=statuses, retry_after_s=retry_after)
    return make_record(spec, 1, "infra_error").model_copy(update={"gateway": meter})


def test_backoff_honours_retry_after_capped() -> None:
    assert apihealth.backoff_s(_infra("baseline", ("429",), 12)) == 12
    assert apihealth.backoff_s(_infra("baseline", ("429",), 99999)) == apihealth.RETRY_AFTER_CAP_S
    assert apihealth.backoff_s(_infra("baseline", ("500",))) == 0


def test_summary_counts_failures_per_arm_over_every_attempt() -> None:
    records = [
        _infra("baseline", ("529", "529")),
        _infra("skill", ("200", "429")),
        _infra("skill", ("cut", "200"), task=1),
    ]
    counts = runnotes.failures_by_arm(records)
    assert counts["baseline"] == {"529": 2} and counts["skill"] == {"429": 1, "cut": 1}
    assert runnotes.api_summary(records) == (
        "API failures the gateway saw upstream (every attempt, the CLI's own retries included): "
        "baseline 529 x2 in 1 trial (1 attempt, 1 ended by them); skill 429 x1, cut x1 in 2 trials (2 attempts, "
        "1 ended by them)"
    )
    assert runnotes.api_summary([]) is None


def test_failed_trials_are_counted_beside_the_failed_answers() -> None:
    # one trial whose CLI retried a 529 five times and gave up (infra, retried), then got through after one more
    first = _infra("baseline", ("529",) * 5)
    second = first.model_copy(
        update={
            "attempt": 2,
            "status": "completed",
            "gateway": GatewayMeter(forwarded=2, upstream_statuses=("529", "200")),
        }
    )
    records = [first, second, _infra("skill", ("400",))]  # a 400 is the request's fault, not the API's
    assert runnotes.failures_by_arm(records)["baseline"] == {"529": 6}
    assert runnotes.failed_trials_by_arm(records) == {
        "baseline": {"trials": 1, "attempts": 2, "ended": 1},
        "skill": {"trials": 0, "attempts": 0, "ended": 0},
    }
    assert "baseline 529 x6 in 1 trial (2 attempts, 1 ended by them); skill none" in (
        runnotes.api_summary(records) or ""
    )


def test_the_loop_holds_off_for_the_upstreams_retry_after() -> None:
    specs = [SPECS[0]]
    calls: list[int] = []

    def run_one(spec: TrialSpec, attempt: int) -> TrialRecord:
        calls.append(attempt)
        if attempt == 1:
            meter = GatewayMeter(forwarded=1, upstream_statuses=("429",), retry_after_s=30)
            return make_record(spec, 1, "infra_error").model_copy(update={"gateway": meter})
        return make_record(spec, attempt)

    lines: list[TrialRecord] = []
    loop = TrialLoop(
        run_one, lines.append, LoopPolicy(jobs=1, max_infra_retries=2), skipped=skipped, prior={}, finals=[],
        spent=0.0, stop=threading.Event(), wait=retry.WaitPolicy(0.001),  # 30 s of retry-after become 30 ms
    )  # fmt: skip
    loop.run(specs)
    assert calls == [1, 2] and loop.backoffs == [30]
    assert [r.status for r in lines] == ["infra_error", "completed"]


def test_a_gateway_line_asks_for_a_pause_only_for_a_forwarded_failure_with_retry_after() -> None:
    assert [apihealth.pause_asked_s(e) for e in EVENTS] == [0, 12, 0, 0, 0, 0]
    assert apihealth.pause_asked_s(answer(529, retry_after="0.5")) == 0.5
    assert apihealth.pause_asked_s(answer(429)) == 0, "no retry-after: no pause"
    assert apihealth.pause_asked_s(answer(400, retry_after="9")) == 0, "not the API's"
    date = "Wed, 21 Oct 2026 07:28:00 GMT"
    assert apihealth.pause_asked_s(answer(429, retry_after=date)) == 0
    assert apihealth.pause_asked_s(answer(429, retry_after="99999")) == apihealth.RETRY_AFTER_CAP_S
    # the gateway's own budget refusal is a 429 to the client too, but the trial's, not the API's
    assert apihealth.pause_asked_s(refused("trial budget of $1.0000 is spent")) == 0


def test_a_pause_told_while_a_trial_runs_holds_the_next_start_from_that_moment() -> None:
    """Issue 24 item 10: the first trial's gateway forwards a 429 with retry-after 20 and its CLI goes on (it
    completes); the second trial finishes at once. The third must not start until 20 s (here 0.2 s) after
    the 429, although no record failed."""
    pause = ApiPause(retry.WaitPolicy(0.01))
    started: dict[str, float] = {}
    second, told = threading.Event(), threading.Event()

    def run_one(spec: TrialSpec, attempt: int) -> TrialRecord:
        started[spec.trial_id] = time.monotonic()
        if spec is SPECS[0]:
            second.wait(5)
            pause.hold(20)  # what the trial's gateway follower does, live
            told.set()
            time.sleep(0.4)
        elif spec is SPECS[1]:
            second.set()
            told.wait(5)  # ends right after the 429: its slot is free inside the pause
        return make_record(spec, attempt)

    lines: list[TrialRecord] = []
    loop = TrialLoop(
        run_one, lines.append, LoopPolicy(jobs=2, max_infra_retries=0), skipped=skipped, prior={}, finals=[],
        spent=0.0, stop=threading.Event(), pause=pause,
    )  # fmt: skip
    loop.run(SPECS[:3])
    assert [r.status for r in lines].count("completed") == 3 and loop.backoffs == [20]
    third = started[SPECS[2].trial_id] - started[SPECS[0].trial_id]
    assert third >= 0.2, f"the third trial started {third:.2f} s after the 429, inside the 0.2 s pause"


def test_a_new_pause_is_said_once_and_a_longer_one_extends_it() -> None:
    said: list[str] = []

    class Said(NullEvents):
        def message(self, text: str) -> None:
            said.append(text)

    pause = ApiPause(retry.WaitPolicy(0.01), Said())
    pause.hold(0)
    assert pause.left() == 0 and said == []
    pause.hold(10)
    pause.hold(5)  # within the first: no new message, no shorter pause
    assert len(said) == 1 and "10 s" in said[0]
    assert 0.05 < pause.left() <= 0.1
    pause.hold(30)
    assert 0.2 < pause.left() <= 0.3 and pause.asked == [10, 5, 30]


def test_route_from_the_users_environment() -> None:
    env = {"ANTHROPIC_BASE_URL": "https://llm.corp.example/anthropic/", "HTTPS_PROXY": "http://u:pw@proxy:3128"}
    route = upstream.from_env(env)
    assert route.url == "https://llm.corp.example/anthropic" and route.host == "llm.corp.example"
    assert route.via_proxy and route.secrets() == ["pw"]
    prov = route.provenance()
    assert prov["upstream_host"] == "llm.corp.example" and prov["upstream_proxy"] == "yes"
    assert "proxy" not in str(prov["upstream_host"]) and "pw" not in str(prov)
    # the proxy's URL (with its password) is a file of the route's volume, never an environment variable
    assert route.gateway_env()["GATEWAY_PROXY_FILE"] == upstream.PROXY_FILE and "pw" not in str(route.gateway_env())
    # --upstream wins; NO_PROXY exempts the host
    direct = upstream.from_env({**env, "NO_PROXY": ".corp.example"}, url="https://llm.corp.example")
    assert not direct.via_proxy and direct.provenance()["upstream_proxy"] == "no"
    assert upstream.from_env({}).url == upstream.REAL_UPSTREAM and not upstream.from_env({}).via_proxy


def test_route_ca_hash_differs_with_the_bundle(tmp_path: Path) -> None:
    a, b = tmp_path / "a.pem", tmp_path / "b.pem"
    a.write_text("A")
    b.write_text("B")
    ha = upstream.from_env({}, extra_ca=a).provenance()["upstream_ca_sha256"]
    hb = upstream.from_env({}, extra_ca=b).provenance()["upstream_ca_sha256"]
    assert ha != hb


@pytest.mark.parametrize(
    ("env", "url", "field"),
    [
        ({}, "ftp://x", "--upstream"),
        ({"ANTHROPIC_BASE_URL": "not a url"}, None, "ANTHROPIC_BASE_URL"),
        ({}, "https://user:key@api.example", "--upstream"),
        ({"HTTPS_PROXY": "https://proxy:443"}, None, "HTTPS_PROXY"),
    ],
)
def test_bad_routes_name_the_setting(env: dict[str, str], url: str | None, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        upstream.from_env(env, url=url)


def test_the_route_is_part_of_the_baseline_fingerprint() -> None:
    from harness.experiment import reuse
    from harness.study.config import Execution
    from tests.factories import PROV

    def fp(**route: str) -> str:
        settings = reuse.baseline_settings(
            Execution(), provenance=PROV.model_copy(update=route), pass_rule="verify_and_judge",
            sidecar_image="s", runtime=None, upstream="https://api.anthropic.com",
        )  # fmt: skip
        return reuse.baseline_fingerprint(settings, TASKS[0])

    direct = fp(upstream_host="api.anthropic.com", upstream_proxy="no", upstream_ca_sha256="a")
    assert direct != fp(upstream_host="api.anthropic.com", upstream_proxy="yes", upstream_ca_sha256="a")
    assert direct != fp(upstream_host="api.anthropic.com", upstream_proxy="no", upstream_ca_sha256="b")
    assert direct != fp(upstream_host="api.anthropic.com", upstream_proxy="no", upstream_ca_sha256="a",
                        price_table_sha256="p")  # fmt: skip
    assert fp() == fp(), "records without a route keep their old fingerprint"


def test_arms_that_went_different_ways_are_invalid() -> None:
    from harness.analysis.decide import provenance_reasons
    from harness.analysis.observations import DecisionContext
    from tests.factories import PROV

    ctx = DecisionContext(
        budget_stopped=False,
        provenance_by_arm={
            "baseline": [PROV.model_copy(update={"upstream_proxy": "no"}).model_dump()],
            "skill": [PROV.model_copy(update={"upstream_proxy": "yes"}).model_dump()],
        },
        planned_runs_per_arm=1,
    )
    reasons = provenance_reasons(ctx)
    assert [r.kind for r in reasons] == ["invalid"] and "upstream_proxy" in reasons[0].message


def test_scripted_errors_per_conversation_with_retry_after() -> None:
    from harness.sidecars import scripted_api
    from harness.study.scenario import InjectedError

    err = InjectedError(status=429, conversations=1, retry_after_s=2).model_dump(mode="json", exclude_none=True)
    assert err == {"at_turn": 0, "status": 429, "times": 1, "conversations": 1, "retry_after_s": 2.0}
    sc = scripted_api.Scenario({"tasks": {}})
    first, second = {"task": "t", "arm": "skill", "index": 0}, {"task": "t", "arm": "skill", "index": 1}
    # every request (the CLI's retries) of the first conversation, none of the second
    assert all(scripted_api.error_applies(sc, err, first) for _ in range(20))
    assert not scripted_api.error_applies(sc, err, second)
    # without `conversations`: the next `times` requests, whoever sends them
    counted = {"at_turn": 0, "status": 529, "times": 2}
    assert [scripted_api.error_applies(sc, counted, second) for _ in range(3)] == [True, True, False]
