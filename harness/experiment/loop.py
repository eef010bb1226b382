"""The trial loop: which planned trial runs when, how often, and when none may start any more.

Pure scheduling around an injected ``run_one(spec, attempt)``: at most ``jobs`` trials at once (and
one host slot each), in plan order; an infrastructure failure is retried with backoff (one tenacity
policy, :func:`harness.retry.retrying`) until ``max_infra_retries`` retries are used; a stop (the
cumulative budget, the preregistered early stop) between attempts records the trial as skipped; no
trial starts or retries while the model API's ``retry-after`` runs (:class:`ApiPause`: told by a failed
trial's record, and live by the trials' gateways the moment one forwards such an answer). No
Docker, no files: every attempt goes to an injected ``append`` the moment it ends, so it is unit
tested with fakes (tests/unit/test_experiment_loop.py).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import NamedTuple

from harness import retry
from harness.analysis import sequential
from harness.analysis.curtail import early_stop_armed, early_stop_verdict, stop_message
from harness.analysis.estimates import analyze
from harness.analysis.observations import context_from_records, observations_from_records
from harness.analysis.sequential import sequential_design
from harness.errors import Interrupted
from harness.experiment.events import Events, NullEvents
from harness.host.slots import HostSlots
from harness.plan import TrialSpec
from harness.records import StopReason, TrialRecord
from harness.results.attempts import max_cost_per_trial
from harness.retry import retrying
from harness.study.config import Study
from harness.trial import apihealth

INFRA_RETRY_MAX_WAIT_S = 30.0

EarlyStop = Callable[[Sequence[TrialRecord]], str | None]
"""The preregistered early stop over the final records so far: a reason to stop, or None."""


def curtailment_check(study: Study, planned_task_ids: Sequence[str]) -> EarlyStop | None:
    """The preregistered early stop as a function of the final records so far (None when not preregistered).

    Returns a reason when :func:`harness.analysis.curtail.early_stop_verdict` proves that no
    outcome of the remaining trials (every planned trial without a final record,
    running ones included) can change the point rule's verdict, or can make the interval rule adopt;
    with a group-sequential design (``decision.sequential``) also when a look decides
    (:func:`harness.analysis.sequential.early_stop`).
    """
    settings = study.prereg.decision
    runs = study.prereg.execution.runs_per_arm
    design = sequential_design(settings, runs)
    if design is None and not early_stop_armed(settings, len(set(planned_task_ids))):
        return None
    cap = max_cost_per_trial(study.prereg)
    tasks = list(planned_task_ids)

    def check(records: Sequence[TrialRecord]) -> str | None:
        if not {r.arm for r in records} >= {"baseline", "skill"}:
            return None
        observations = observations_from_records(records, settings.pass_rule)
        if design is not None:
            context = context_from_records(records, runs, False, planned_task_ids=tasks, max_cost_per_trial=cap)
            found = sequential.early_stop(observations, settings, context)
            return None if found.verdict is None else sequential.sequential_stop_message(settings, found)
        analysis = analyze(observations, settings)
        stop = early_stop_verdict(analysis, settings, runs, tasks, max_cost_per_trial=cap)
        return None if stop.verdict is None else stop_message(settings, stop)

    return check


@dataclass(frozen=True)
class LoopPolicy:
    jobs: int
    max_infra_retries: int
    total_usd: float | None = None
    early_stop: EarlyStop | None = None


class Halt(NamedTuple):
    """Why no new attempt may start: the kind (a skipped record's ``stopped_by``) and the words."""

    kind: StopReason
    why: str


def stop_reason(policy: LoopPolicy, spent: float, early_reason: str | None) -> Halt | None:
    """Why no new attempt may start (None: go on), from what is spent and an early stop already found."""
    cap = policy.total_usd
    if cap is not None and spent >= cap:
        return Halt("budget", f"the cumulative budget of ${cap:g} is reached (${spent:.4f} spent)")
    if early_reason is not None:
        return Halt("early_stop", early_reason)
    return None


def stop_before_start(policy: LoopPolicy, finals: Sequence[TrialRecord], spent: float) -> Halt | None:
    """Whether a stop applies before any trial of this invocation starts (the loop's own rule, over the
    final records and the spend a resumed or reusing run starts with): then nothing needs setting up."""
    early = policy.early_stop(list(finals)) if policy.early_stop is not None else None
    return stop_reason(policy, spent, early)


class ApiPause:
    """The model API asked the run to leave it alone (``retry-after`` on a 429, 529 or 5xx): no trial starts
    or retries before the latest such pause ends.

    :meth:`hold` is called from any thread: by the loop with a failed trial's record, and live, while
    trials run, by each trial's gateway follower (:attr:`harness.trial.trial.TrialContext.on_api_pause`)
    the moment its gateway forwarded such an answer, so the pause counts from when the API asked, not from
    when the failing trial ends (a trial whose CLI retries and then succeeds still paused the others).
    ``wait`` scales how long a pause really lasts (tests: none)."""

    def __init__(self, wait: retry.WaitPolicy | None = None, events: Events | None = None) -> None:
        self.wait = wait or retry.default_wait()
        self.events: Events = events or NullEvents()
        self._lock = threading.Lock()
        self._until = 0.0
        self.asked: list[float] = []
        """Every pause asked for, in seconds (capped at :data:`apihealth.RETRY_AFTER_CAP_S`)."""

    def hold(self, seconds: float) -> None:
        if seconds <= 0:
            return
        seconds = min(seconds, apihealth.RETRY_AFTER_CAP_S)
        now = time.monotonic()
        with self._lock:
            self.asked.append(seconds)
            starts = self._until <= now
            self._until = max(self._until, now + self.wait.seconds(seconds))
        if starts:
            self.events.message(f"the model API asked for a pause: no trial starts for {seconds:g} s")

    def left(self) -> float:
        """Seconds until trials may start again (0: now)."""
        with self._lock:
            return max(0.0, self._until - time.monotonic())


@dataclass
class LoopOutcome:
    ran: int = 0
    budget_stopped: bool = False
    early_stop: str | None = None
    skipped: list[TrialRecord] = field(default_factory=list)


class _RetryInfra(Exception):
    def __init__(self, record: TrialRecord) -> None:
        super().__init__(record.error or "infrastructure failure")
        self.record = record


SkippedFactory = Callable[[TrialSpec, int, StopReason, str], TrialRecord]


class TrialLoop:
    """Schedules trials: at most ``jobs`` at once (and one host slot each), in plan order (see the
    module docstring). ``skipped`` makes the record of a trial a stop kept from running."""

    def __init__(
        self,
        run_one: Callable[[TrialSpec, int], TrialRecord],
        append: Callable[[TrialRecord], None],
        policy: LoopPolicy,
        *,
        skipped: SkippedFactory,
        prior: Mapping[str, TrialRecord],
        finals: Sequence[TrialRecord],
        spent: float,
        stop: threading.Event,
        slots: HostSlots | None = None,
        events: Events | None = None,
        wait: retry.WaitPolicy | None = None,
        pause: ApiPause | None = None,
    ) -> None:
        self.run_one = run_one
        self._append = append
        self.policy = policy
        self.make_skipped = skipped
        self.prior = dict(prior)
        self.final: dict[str, TrialRecord] = {r.trial_id: r for r in finals}
        self.spent = spent
        self.stop = stop
        self.slots = slots
        self.events: Events = events or NullEvents()
        self.wait = wait or retry.default_wait()
        """How long retry backoffs and the upstream's hold-offs really wait (tests: none)."""
        self.early_reason: str | None = None
        self._lock = threading.Lock()
        self._pending: deque[TrialSpec] = deque()
        self.pause = pause or ApiPause(self.wait, self.events)
        """Shared with the run's trials, whose gateways tell it live (see :class:`ApiPause`)."""

    # ---------------------------------------------------------------- state
    def append(self, record: TrialRecord) -> None:
        with self._lock:
            self._append(record)
            if record.reused_from is None:
                self.spent += record.total_cost_usd

    def stop_reason(self) -> Halt | None:
        """Why no new attempt may start now (None: go on)."""
        with self._lock:
            spent = self.spent
        return stop_reason(self.policy, spent, self.early_reason)

    def check_early_stop(self) -> None:
        if self.policy.early_stop is None or self.early_reason is not None:
            return
        reason = self.policy.early_stop(list(self.final.values()))
        if reason is not None:
            self.early_reason = reason
            self.events.message(reason + ": no new trial starts")

    # ----------------------------------------------------------------- run
    def run(self, todo: Sequence[TrialSpec]) -> LoopOutcome:
        out = LoopOutcome()
        self.check_early_stop()
        pending = self._pending
        pending.extend(todo)
        halted: Halt | None = None
        jobs = max(1, self.policy.jobs)
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="trial") as pool:
            running: dict[Future[TrialRecord | None], TrialSpec] = {}
            while pending or running:
                while pending and len(running) < jobs and not self.stop.is_set():
                    halted = self.stop_reason()
                    if halted is not None or self.quiet_left() > 0:
                        break
                    spec = pending.popleft()
                    running[pool.submit(self._attempts, spec)] = spec
                if not running:
                    if pending and halted is None and self.quiet_left() > 0 and not self.stop.is_set():
                        self.stop.wait(min(self.quiet_left(), 0.5))  # the API asked for a pause
                        continue
                    break
                finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in finished:
                    spec = running.pop(fut)
                    record = fut.result()
                    if record is None:
                        continue
                    if self._set_aside(record):  # handed back while it finished: its rerun is pending
                        out.ran += 1
                        continue
                    self.final[spec.trial_id] = record
                    if record.status == "skipped":
                        out.skipped.append(record)
                    else:
                        out.ran += 1
                        with self._lock:
                            spent = self.spent
                        self.events.trial_finished(spec, record, spent)
                        self.check_early_stop()
            if self.stop.is_set():
                raise Interrupted("interrupted: running trials were stopped and torn down; results.jsonl is intact")
        halted = halted or self.stop_reason()
        if pending and halted is not None:
            kind, why = halted
            for spec in pending:
                prior = self.prior.get(spec.trial_id)
                rec = self.make_skipped(spec, prior.attempt + 1 if prior else 1, kind, why)
                self.append(rec)
                self.final[spec.trial_id] = rec
                out.skipped.append(rec)
        if out.skipped:
            kinds = {r.stopped_by for r in out.skipped}
            out.budget_stopped = "budget" in kinds
            if "early_stop" in kinds:
                out.early_stop = self.early_reason
            self.events.trials_skipped(out.skipped, halted.why if halted else out.skipped[0].error or "stopped")
        return out

    def resubmit(self, spec: TrialSpec, prior: TrialRecord) -> None:
        """Run ``spec`` again after ``prior`` (already appended): a trial a running one hands back (its pair
        reruns whole after an engine of a pool was lost: :mod:`harness.experiment.placement`). Called from a
        running trial's thread, so the loop is still running when it sees the spec."""
        with self._lock:
            self.prior[spec.trial_id] = prior
            self.final.pop(spec.trial_id, None)
            self._pending.append(spec)

    def _set_aside(self, record: TrialRecord) -> bool:
        """``record`` was set aside by a later line (:meth:`resubmit` ran after it was written and before the
        loop took it from its future): never the trial's final record, nor one the early stop counts."""
        with self._lock:
            later = self.prior.get(record.trial_id)
        return later is not None and later.attempt > record.attempt

    def _attempts(self, spec: TrialSpec) -> TrialRecord | None:
        """Every attempt of one trial, until one is final. None when interrupted (nothing recorded)."""
        prior = self.prior.get(spec.trial_id)
        first = prior.attempt + 1 if prior is not None else 1
        left = max(1, self.policy.max_infra_retries + 2 - first)
        policy = retrying(
            lambda e: isinstance(e, _RetryInfra), attempts=left, max_wait=INFRA_RETRY_MAX_WAIT_S, wait=self.wait
        ).copy(sleep=self._sleep)
        try:
            for attempt in policy:
                with attempt:
                    number = first + attempt.retry_state.attempt_number - 1
                    return self._one(spec, number)
        except _RetryInfra as e:
            return e.record  # retries used up: the infra failure is the trial's final record
        except (Interrupted, InterruptedError):
            return None
        raise AssertionError("unreachable: tenacity re-raises")  # pragma: no cover

    def _one(self, spec: TrialSpec, number: int) -> TrialRecord:
        halted = self.stop_reason()
        if halted is not None:
            rec = self.make_skipped(spec, number, *halted)
            self.append(rec)
            return rec
        if self.slots is not None:
            with self.slots.slot(self.stop):
                record = self._run(spec, number)
        else:
            record = self._run(spec, number)
        self.append(record)
        if record.status == "infra_error" and not self.stop.is_set():
            self.events.message(f"{spec.trial_id}: infrastructure failure (attempt {number}): {record.error}")
            self.hold_off(apihealth.backoff_s(record))
            raise _RetryInfra(record)
        return record

    @property
    def backoffs(self) -> list[float]:
        """Every pause the upstream asked for (live or from a failed trial's record), in seconds."""
        return self.pause.asked

    def hold_off(self, seconds: float) -> None:
        """The upstream asked for a pause (retry-after): no trial starts or retries before it ends."""
        self.pause.hold(seconds)

    def quiet_left(self) -> float:
        return self.pause.left()

    def _run(self, spec: TrialSpec, number: int) -> TrialRecord:
        if self.stop.is_set():
            raise Interrupted("interrupted")
        self.events.trial_started(spec, number)
        return self.run_one(spec, number)

    def _sleep(self, seconds: float) -> None:
        if self.stop.wait(max(seconds, self.quiet_left())):
            raise Interrupted("interrupted while waiting to retry")
