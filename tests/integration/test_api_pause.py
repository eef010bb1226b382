"""The model API's ``retry-after`` pauses trial starts from the moment a gateway sees it (issue 24 item 10).

A real scripted run, two trials at a time: the first trial's first request gets a 429 with
``retry-after``; its CLI waits and retries, and the trial completes. The run must start no other trial
until the pause is over, counted from the 429: before, the pause came only from a failed trial's record,
so here (no trial failed) trials went on starting into the API's rate limit (one started 7 s into a 20 s
``retry-after`` in the report). The controller learns of it by following the gateway's log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import retry
from harness.demo import DemoSetup
from harness.experiment.events import NullEvents
from harness.plan import TrialSpec, plan_trials
from harness.records import TrialRecord
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import load_study
from tests.integration.helpers import demo_task_scripts, latest, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RETRY_AFTER_S = 12
TASKS = ["fix-mean", "fix-median", "fix-slugify"]


class Timeline(NullEvents):
    """What the loop said and when (monotonic seconds)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[float, str, str]] = []

    def _add(self, kind: str, what: str) -> None:
        with self.lock:
            self.seen.append((time.monotonic(), kind, what))

    def message(self, text: str) -> None:
        self._add("message", text)

    def trial_started(self, spec: TrialSpec, attempt: int) -> None:
        self._add("started", spec.trial_id)

    def trial_finished(self, spec: TrialSpec, record: TrialRecord, spent_usd: float) -> None:
        self._add("finished", spec.trial_id)


@pytest.fixture
def real_waits() -> Iterator[None]:
    """The suite's backoffs do not wait (tests/conftest.py); this test measures one that must."""
    previous = retry.set_default_wait(retry.REAL_WAITS)
    yield
    retry.set_default_wait(previous)


def test_a_retry_after_pauses_new_trial_starts_from_when_the_gateway_saw_it(
    engine: Engine, images: ImageSet, demo_setup: DemoSetup, tmp_path: Path, work_root: Path, real_waits: None
) -> None:
    scripts = demo_task_scripts(demo_setup.root)
    scenario: dict[str, Any] = {
        "tasks": {
            t: {**scripts[t], "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1, "read_skill": False}}}
            for t in TASKS
        }
    }
    prereg, scenario_path = write_experiment(demo_setup.root, "api-pause", tasks=TASKS, scenario=scenario)
    study = load_study(prereg)
    first = plan_trials(study.target_tasks(), 1, study.prereg.execution.seed)[0]
    # the first trial's first request is rate limited (only that one: the CLI's retry gets through)
    limited = {"at_turn": 0, "status": 429, "retry_after_s": RETRY_AFTER_S, "times": 1}
    scenario["tasks"][first.task.id]["arms"][first.arm]["errors"] = [limited]
    scenario_path.write_text(yaml.safe_dump(scenario, sort_keys=False))

    timeline = Timeline()
    result = run_experiment(engine, prereg, scenario_path, tmp_path / "out", work_root, jobs=2, events=timeline)
    records = latest(result)
    assert len(records) == 6 and all(r.status == "completed" for r in records.values()), {
        t: (r.status, r.error) for t, r in records.items()
    }
    limited_record = records[first.trial_id]
    assert limited_record.gateway is not None and limited_record.gateway.upstream_statuses[0] == "429"

    paused = [t for t, kind, what in timeline.seen if kind == "message" and "asked for a pause" in what]
    assert paused, f"the run never paused: {timeline.seen}"
    pause_at = paused[0]
    finished = next(t for t, kind, what in timeline.seen if kind == "finished" and what == first.trial_id)
    assert pause_at < finished, "the pause came from the gateway's log, live, not from the trial's record"
    later = [(t - pause_at, what) for t, kind, what in timeline.seen if kind == "started" and t > pause_at]
    assert later, "positive control: trials started after the pause (the window was tested)"
    assert all(dt >= RETRY_AFTER_S - 0.5 for dt, _ in later), f"started inside the {RETRY_AFTER_S} s pause: {later}"
