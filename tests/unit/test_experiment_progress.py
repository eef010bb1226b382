"""Progress in plain mode (CI logs): one line per finished trial with per-arm running/done/outcomes and spend."""

from __future__ import annotations

import io

from harness.experiment.progress import Progress
from harness.plan import plan_trials
from harness.records import ReusedFrom
from harness.results.attempts import spent_usd
from harness.study.config import Task
from tests.factories import make_record

TASKS = [Task(id="alpha", prompt="a", verify_cmd="true"), Task(id="beta", prompt="b", verify_cmd="true")]


def _plain() -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress(out, live=False), out


def test_plain_lines_show_running_done_outcomes_and_spend_per_arm() -> None:
    specs = plan_trials(TASKS, 1, seed=1)
    progress, out = _plain()
    progress.planned(specs, [], 0.0)
    for spec in specs:
        progress.trial_started(spec, 1)
    first, second = specs[0], specs[1]
    progress.phase(first.trial_id, "judge")
    progress.trial_finished(first, make_record(first, 1, cost=0.25, passed=True), 0.25)
    progress.trial_finished(second, make_record(second, 1, "infra_error", cost=0.1), 0.35)
    lines = out.getvalue().splitlines()
    assert lines[0] == "4 trials planned (2 baseline, 2 skill)"
    assert lines[1].startswith(f"[1/4] {first.trial_id}")
    assert " pass " in lines[1] and "$0.2500" in lines[1]
    b_run = sum(1 for s in specs[1:] if s.arm == "baseline") - (second.arm == "baseline")
    s_run = sum(1 for s in specs[1:] if s.arm == "skill") - (second.arm == "skill")
    summary = lines[2].split(" | ", 1)[1]
    assert f"baseline {b_run} running" in summary and f"skill {s_run} running" in summary
    assert "1 infra" in summary and "1 pass" in summary
    assert summary.endswith("spent $0.3500 (agents + judges)")


def test_skipped_trials_are_counted_and_the_reason_printed() -> None:
    specs = plan_trials(TASKS, 1, seed=1)
    progress, out = _plain()
    progress.planned(specs, [], 0.0)
    recs = [make_record(s, 1, "skipped", 0.0).model_copy(update={"stopped_by": "budget"}) for s in specs[2:]]
    progress.trials_skipped(recs, "the cumulative budget of $1 is reached")
    text = out.getvalue()
    assert "2 trial(s) skipped: the cumulative budget of $1 is reached" in text
    assert "skipped)" in text.splitlines()[-1]


def test_resume_counts_done_trials_and_excludes_reused_spend() -> None:
    specs = plan_trials(TASKS, 1, seed=1)
    done = [make_record(specs[0], 1, cost=0.5)]
    reused = make_record(specs[1], 1, cost=9.0).model_copy(
        update={"reused_from": ReusedFrom(experiment_id="x", lock_hash="y", directory="d")}
    )
    progress, out = _plain()
    progress.planned(specs, [*done, reused], spent_usd([*done, reused]))
    assert "2 already done, resuming" in out.getvalue()
    assert progress.spent == 0.5


def test_resume_counts_a_trial_whose_infra_retries_are_used_up_as_done() -> None:
    """The experiment passes the final records: an exhausted infra failure is final (counted as infra)."""
    specs = plan_trials(TASKS, 1, seed=1)
    exhausted = make_record(specs[0], 3, "infra_error", cost=0.1)
    progress, out = _plain()
    progress.planned(specs, [exhausted], 0.1)
    assert "1 already done, resuming" in out.getvalue()
    assert progress.done[(specs[0].arm, "infra")] == 1


def test_agent_controlled_text_cannot_reach_the_terminal_raw() -> None:
    spec = plan_trials(TASKS, 1, seed=1)[0]
    progress, out = _plain()
    progress.planned([spec], [], 0.0)
    progress.message("evil \x1b[31m red")
    assert "\x1b" not in out.getvalue()
