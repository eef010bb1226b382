"""The trial loop without Docker: concurrency, host slots, infra retries, budget and early stop.

``TrialLoop`` schedules around an injected ``run_one(spec, attempt)``; here that
is a fake that returns records with chosen statuses and exact costs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import retry
from harness.errors import Interrupted
from harness.experiment.loop import LoopPolicy, TrialLoop
from harness.host.slots import HostSlots
from harness.plan import TrialSpec, plan_trials
from harness.records import ReusedFrom, TrialRecord
from tests.factories import TASKS, make_record, skipped


class Recorder:
    def __init__(self) -> None:
        self.lines: list[TrialRecord] = []
        self.lock = threading.Lock()

    def __call__(self, record: TrialRecord) -> None:
        with self.lock:
            self.lines.append(record)


def make_loop(
    run_one: Callable[[TrialSpec, int], TrialRecord],
    *,
    jobs: int = 2,
    retries: int = 2,
    total_usd: float | None = None,
    early_stop: Callable[..., str | None] | None = None,
    prior: dict[str, TrialRecord] | None = None,
    slots: HostSlots | None = None,
    stop: threading.Event | None = None,
    spent: float = 0.0,
    wait: retry.WaitPolicy | None = None,
) -> tuple[TrialLoop, Recorder]:
    log = Recorder()
    loop = TrialLoop(
        run_one,
        log,
        LoopPolicy(jobs=jobs, max_infra_retries=retries, total_usd=total_usd, early_stop=early_stop),
        skipped=skipped,
        prior=prior or {},
        finals=[],
        spent=spent,
        stop=stop or threading.Event(),
        slots=slots,
        wait=wait,
    )
    return loop, log


class Gauge:
    """A fake ``run_one`` that takes a while and remembers how many trials ran at once at most."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.active = self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, spec: TrialSpec, attempt: int) -> TrialRecord:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.seconds)
        with self.lock:
            self.active -= 1
        return make_record(spec, attempt)


def test_every_trial_runs_once_and_never_more_than_jobs_at_once() -> None:
    specs = plan_trials(TASKS, 2, seed=1)
    gauge = Gauge(0.02)
    loop, log = make_loop(gauge, jobs=3)
    out = loop.run(specs)
    assert out.ran == len(specs) == 12
    assert sorted(r.trial_id for r in log.lines) == sorted(s.trial_id for s in specs)
    assert gauge.peak == 3
    assert not out.budget_stopped and out.early_stop is None


def test_trials_start_in_plan_order() -> None:
    specs = plan_trials(TASKS, 2, seed=5)
    started: list[str] = []

    def run_one(spec: TrialSpec, attempt: int) -> TrialRecord:
        started.append(spec.trial_id)
        return make_record(spec, attempt)

    make_loop(run_one, jobs=1)[0].run(specs)
    assert started == [s.trial_id for s in specs]


def test_host_slots_bound_two_loops_sharing_one_slot_directory(tmp_path: Path) -> None:
    """Two experiments with --jobs 3 each, on a host with 2 slots: never more than 2 trials at once."""
    gauge = Gauge(0.03)
    loops = [make_loop(gauge, jobs=3, slots=HostSlots(2, tmp_path / "slots"))[0] for _ in range(2)]
    threads = [threading.Thread(target=loop.run, args=(plan_trials(TASKS, 1, seed=i),)) for i, loop in enumerate(loops)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert gauge.peak == 2


def test_an_infra_failure_is_retried_and_every_attempt_is_kept() -> None:
    specs = plan_trials(TASKS[:1], 1, seed=1)

    def run_one(spec: TrialSpec, attempt: int) -> TrialRecord:
        return make_record(spec, attempt, "infra_error" if attempt == 1 else "completed")

    loop, log = make_loop(run_one, retries=2)
    out = loop.run(specs)
    assert out.ran == 2
    by_trial = {s.trial_id: [(r.attempt, r.status) for r in log.lines if r.trial_id == s.trial_id] for s in specs}
    assert all(v == [(1, "infra_error"), (2, "completed")] for v in by_trial.values())


def test_infra_retries_are_bounded_and_the_last_failure_is_final() -> None:
    spec = plan_trials(TASKS[:1], 1, seed=1)[0]
    loop, log = make_loop(lambda s, a: make_record(s, a, "infra_error"), retries=2)
    out = loop.run([spec])
    assert [(r.attempt, r.status) for r in log.lines] == [(1, "infra_error"), (2, "infra_error"), (3, "infra_error")]
    assert out.ran == 1
    assert loop.final[spec.trial_id].attempt == 3


def test_retry_waits_come_from_the_tenacity_policy_and_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = plan_trials(TASKS[:1], 1, seed=1)[0]
    waits: list[float] = []
    loop, _ = make_loop(lambda s, a: make_record(s, a, "infra_error"), retries=3, wait=retry.REAL_WAITS)
    monkeypatch.setattr(loop, "_sleep", waits.append)
    loop.run([spec])
    assert len(waits) == 3 and waits == sorted(waits) and waits[0] > 0
    zero: list[float] = []
    loop, _ = make_loop(lambda s, a: make_record(s, a, "infra_error"), retries=3, wait=retry.NO_WAIT)
    monkeypatch.setattr(loop, "_sleep", zero.append)
    loop.run([spec])
    assert zero == [0.0, 0.0, 0.0]


def test_resumed_infra_failure_continues_its_attempt_numbers_and_budget_of_retries() -> None:
    spec = plan_trials(TASKS[:1], 1, seed=1)[0]
    prior = {spec.trial_id: make_record(spec, 2, "infra_error")}
    loop, log = make_loop(lambda s, a: make_record(s, a, "infra_error"), retries=2, prior=prior)
    loop.run([spec])
    assert [r.attempt for r in log.lines] == [3], "attempts 1-2 ran before the crash; only one retry is left"


def test_cumulative_budget_stops_new_trials_and_records_the_rest_as_skipped() -> None:
    specs = plan_trials(TASKS, 2, seed=3)  # 12 trials at exactly $0.01 each
    loop, log = make_loop(lambda s, a: make_record(s, a, cost=0.01), jobs=1, total_usd=0.035)
    out = loop.run(specs)
    ran = [r for r in log.lines if r.status != "skipped"]
    assert [r.trial_id for r in ran] == [s.trial_id for s in specs[:4]], "0.01+0.01+0.01 < 0.035 <= 0.04"
    skipped_ = [r for r in log.lines if r.status == "skipped"]
    assert [r.trial_id for r in skipped_] == [s.trial_id for s in specs[4:]]
    assert {r.stopped_by for r in skipped_} == {"budget"}
    assert all("cumulative budget" in (r.error or "") for r in skipped_)
    assert out.budget_stopped and out.ran == 4


def test_a_budget_spent_before_the_run_starts_skips_every_trial_and_runs_none() -> None:
    """A rerun whose earlier attempts used up the budget: the loop starts nothing and writes skips."""
    specs = plan_trials(TASKS, 1, seed=3)

    def run_one(spec: TrialSpec, attempt: int) -> TrialRecord:
        raise AssertionError("no trial may start")

    loop, log = make_loop(run_one, total_usd=1.0, spent=1.0)
    out = loop.run(specs)
    assert out.ran == 0 and out.budget_stopped
    assert [(r.trial_id, r.status, r.stopped_by) for r in log.lines] == [
        (s.trial_id, "skipped", "budget") for s in specs
    ]


def test_budget_lets_running_trials_finish() -> None:
    specs = plan_trials(TASKS, 2, seed=3)
    barrier = threading.Barrier(3)

    def run_one(spec: TrialSpec, attempt: int) -> TrialRecord:
        if spec.order < 3:
            barrier.wait(timeout=5)  # the first three run together
        return make_record(spec, attempt, cost=0.02)

    loop, log = make_loop(run_one, jobs=3, total_usd=0.01)
    loop.run(specs)
    ran = [r for r in log.lines if r.status != "skipped"]
    assert len(ran) == 3, "the three running trials finished; nothing new started"
    assert sum(1 for r in log.lines if r.status == "skipped") == 9


def test_budget_reached_between_attempts_skips_the_retry() -> None:
    spec = plan_trials(TASKS[:1], 1, seed=1)[0]
    loop, log = make_loop(lambda s, a: make_record(s, a, "infra_error", cost=0.5), retries=2, total_usd=0.1)
    out = loop.run([spec])
    assert [(r.attempt, r.status, r.stopped_by) for r in log.lines] == [
        (1, "infra_error", None),
        (2, "skipped", "budget"),
    ]
    assert out.budget_stopped


def test_reused_records_do_not_count_against_the_budget() -> None:
    spec = plan_trials(TASKS[:1], 1, seed=1)[0]
    loop, _ = make_loop(lambda s, a: make_record(s, a), total_usd=1.0)
    loop.append(
        make_record(spec, 1, cost=5.0).model_copy(
            update={"reused_from": ReusedFrom(experiment_id="x", lock_hash="y", directory="d")}
        )
    )
    assert loop.spent == 0.0 and loop.stop_reason() is None


def test_early_stop_skips_the_remaining_trials_with_its_reason() -> None:
    specs = plan_trials(TASKS, 2, seed=3)

    def early(records: list[TrialRecord]) -> str | None:
        return "early stop: decided" if len(records) >= 5 else None

    loop, log = make_loop(lambda s, a: make_record(s, a), jobs=1, early_stop=early)
    out = loop.run(specs)
    assert sum(1 for r in log.lines if r.status != "skipped") == 5
    skipped_ = [r for r in log.lines if r.status == "skipped"]
    assert len(skipped_) == 7 and {r.stopped_by for r in skipped_} == {"early_stop"}
    assert out.early_stop == "early stop: decided" and not out.budget_stopped


def test_a_stop_signal_raises_interrupted_and_records_nothing_for_unstarted_trials() -> None:
    specs = plan_trials(TASKS, 2, seed=3)
    stop = threading.Event()

    def run_one(spec: TrialSpec, attempt: int) -> TrialRecord:
        if spec.order == 1:
            stop.set()
            raise Interrupted("interrupted")
        return make_record(spec, attempt)

    loop, log = make_loop(run_one, jobs=1, stop=stop)
    with pytest.raises(Interrupted):
        loop.run(specs)
    assert [r.trial_id for r in log.lines] == [specs[0].trial_id]


def test_the_run_labels_outlive_a_plan_with_a_long_per_task_deadline() -> None:
    """A 4 h task must keep the run's scripted API and network from being reaped as expired."""
    from harness.experiment.resources import run_ttl_s
    from harness.study.config import Execution, Task

    ex = Execution(model="sonnet", judge_model="haiku")
    short = plan_trials(TASKS, 1, seed=1)
    long_task = Task(id="long", prompt="p", verify_cmd="true", timeout_s=4 * 3600)
    long = plan_trials([long_task], 1, seed=1)
    assert ex.agent_timeout_s(long_task) == 4 * 3600
    assert ex.agent_timeout_s(TASKS[0]) == ex.budgets.timeout_s
    # two trials of 4 h each at --jobs 1 run for 8 h at least
    assert run_ttl_s(ex, long, jobs=1) > 2 * 4 * 3600
    assert run_ttl_s(ex, long, jobs=1) > run_ttl_s(ex, short[: len(long)], jobs=1)


def test_a_stop_before_the_first_trial_is_the_loops_own_rule() -> None:
    """What the experiment checks before any run set-up: the same stop the loop would apply."""
    from harness.experiment.loop import stop_before_start, stop_reason

    spec = plan_trials(TASKS[:1], 1, seed=1)[0]
    finals = [make_record(spec, 1)]
    assert stop_before_start(LoopPolicy(jobs=1, max_infra_retries=0), finals, 5.0) is None
    capped = LoopPolicy(jobs=1, max_infra_retries=0, total_usd=1.0)
    assert stop_before_start(capped, finals, 1.0) == stop_reason(capped, 1.0, None)
    assert stop_before_start(capped, finals, 1.0) is not None and stop_before_start(capped, finals, 0.5) is None
    early = LoopPolicy(jobs=1, max_infra_retries=0, early_stop=lambda records: f"decided by {len(records)}")
    assert stop_before_start(early, finals, 0.0) == ("early_stop", "decided by 1")
