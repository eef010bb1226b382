"""The preregistered early stops as the loop sees them, and the decisions they lead to: the point rule's
curtailment, and the interval rule's futility stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.analysis.reasons import ReasonCode
from harness.experiment.loop import curtailment_check
from harness.plan import TrialSpec, plan_trials
from harness.records import TrialRecord
from harness.results.attempts import max_cost_per_trial
from harness.study.config import DecisionSettings, Execution, Preregistration, Study, Task, TaskFile
from tests.factories import make_record, run_loop

TASKS = tuple(Task(id=f"t{i}", prompt=f"task {i}", verify_cmd="true") for i in range(2))
SIX = tuple(Task(id=f"t{i}", prompt=f"task {i}", verify_cmd="true") for i in range(6))
"""The smallest plan the interval rule's futility stop is armed for."""


def _study(tasks: tuple[Task, ...] = TASKS, /, **decision: Any) -> Study:
    prereg = Preregistration(
        skill="s",
        skill_ref="skill",
        execution=Execution(runs_per_arm=3),
        decision=DecisionSettings(**{"rule": "point", **decision}),
    )
    return Study(Path("/nowhere/preregistration.yaml"), prereg, TaskFile(tasks=tasks))


def _tasks(study: Study) -> tuple[Task, ...]:
    return tuple(study.task_file.tasks)


def _run(study: Study, outcome: Any) -> tuple[list[TrialRecord], str | None]:
    return run_loop(study, outcome, seed=2)


def _decide(study: Study, records: list[TrialRecord]) -> Any:
    from harness.analysis.decide import decide
    from harness.analysis.estimates import analyze
    from harness.analysis.observations import context_from_records, observations_from_records
    from harness.results.attempts import stops

    settings = study.prereg.decision
    analysis = analyze(observations_from_records(records, settings.pass_rule), settings)
    budget, early = stops(records)
    ctx = context_from_records(
        records,
        3,
        budget,
        early_stopped=early,
        planned_task_ids=[t.id for t in _tasks(study)],
        max_cost_per_trial=max_cost_per_trial(study.prereg),
    )
    return decide(analysis, settings, ctx)


LOOSE = {"max_missing_share": 0.5, "max_infra_imbalance": 1.0}
"""Two tasks x 3 runs: with the default caps one remaining trial ending missing or infra could trip a gate."""


def test_a_skill_that_always_fails_is_rejected_before_the_plan_ends() -> None:
    study = _study(early_stop="curtail", **LOOSE)
    lines, reason = _run(study, lambda spec: spec.arm == "baseline")
    ran = [r for r in lines if r.status != "skipped"]
    skipped_ = [r for r in lines if r.status == "skipped"]
    assert reason is not None and "verdict is reject" in reason
    assert skipped_ and len(ran) + len(skipped_) == 12
    assert {r.stopped_by for r in skipped_} == {"early_stop"}
    assert all(r.error == reason for r in skipped_)
    verdict = _decide(study, lines)
    codes = {r.code for r in verdict.reasons}
    assert verdict.verdict == "reject"
    assert (
        ReasonCode.EARLY_STOPPED in codes
        and ReasonCode.INCOMPLETE not in codes
        and ReasonCode.EARLY_STOP_UNSUPPORTED not in codes
    )


def test_the_stop_is_the_same_verdict_the_full_plan_gives() -> None:
    study = _study(early_stop="curtail", **LOOSE)
    lines, _ = _run(study, lambda spec: spec.arm == "baseline")
    full, none = _run(_study(**LOOSE), lambda spec: spec.arm == "baseline")
    assert none is None and all(r.status != "skipped" for r in full)
    assert _decide(study, lines).verdict == _decide(_study(**LOOSE), full).verdict == "reject"


def test_with_default_caps_a_tiny_design_does_not_stop_when_a_missing_trial_could_flip_a_gate() -> None:
    lines, reason = _run(_study(early_stop="curtail"), lambda spec: spec.arm == "baseline")
    assert reason is None and all(r.status != "skipped" for r in lines)


def test_no_stop_while_the_remaining_trials_could_change_the_verdict() -> None:
    study = _study(early_stop="curtail")
    lines, reason = _run(study, lambda spec: spec.run_index % 2 == 0)  # both arms alike: undecided to the end
    assert reason is None and all(r.status != "skipped" for r in lines)


def test_curtailment_is_off_unless_preregistered() -> None:
    assert curtailment_check(_study(), ["t0"]) is None
    assert curtailment_check(_study(early_stop="curtail"), ["t0"]) is not None


def test_the_interval_rule_stops_only_plans_of_six_tasks_or_more_and_only_when_asked() -> None:
    """The futility stop is on by default for the interval rule; a plan that cannot adopt at all (fewer
    than 6 tasks) is a pilot and runs in full."""
    ids = [t.id for t in SIX]
    assert curtailment_check(_study(SIX, rule="interval"), ids) is not None
    assert curtailment_check(_study(TASKS, rule="interval"), ["t0", "t1"]) is None
    assert curtailment_check(_study(SIX, rule="interval", futility_stop=False), ids) is None
    assert curtailment_check(_study(SIX, rule="interval", futility_stop=False, early_stop="curtail"), ids) is not None
    assert DecisionSettings().futility_stop and DecisionSettings().rule == "interval"


def test_a_skill_that_does_nothing_is_stopped_for_futility_and_ends_inconclusive() -> None:
    study = _study(SIX, rule="interval")
    same = lambda spec: spec.run_index == 0  # noqa: E731 - both arms pass their first run and fail the others
    lines, reason = _run(study, same)
    ran = [r for r in lines if r.status != "skipped"]
    skipped_ = [r for r in lines if r.status == "skipped"]
    assert reason is not None and "futility stop" in reason and "FUTILITY_STOPPED" in reason
    assert skipped_ and len(ran) + len(skipped_) == 36
    assert {r.stopped_by for r in skipped_} == {"early_stop"}
    decision = _decide(study, lines)
    assert decision.verdict == "inconclusive"
    (why,) = [r for r in decision.reasons if r.code == ReasonCode.FUTILITY_STOPPED]
    assert f"{len(skipped_)} of 36 planned trial(s) not run" in why.message
    assert ReasonCode.INCOMPLETE not in decision.codes and ReasonCode.EARLY_STOP_UNSUPPORTED not in decision.codes
    # the full plan ends inconclusive too (and never adopt: that is what the stop proved)
    off = _study(SIX, rule="interval", futility_stop=False)
    full, none = _run(off, same)
    assert none is None and len(full) == 36
    assert _decide(off, full).verdict == "inconclusive"


def test_a_skill_that_always_fails_is_rejected_by_the_futility_stop_when_reject_is_certain() -> None:
    study = _study(SIX, rule="interval", **LOOSE)
    lines, reason = _run(study, lambda spec: spec.arm == "baseline")
    skipped_ = [r for r in lines if r.status == "skipped"]
    assert reason is not None and "the verdict is reject" in reason and skipped_
    decision = _decide(study, lines)
    assert decision.verdict == "reject" and ReasonCode.EARLY_STOPPED in decision.codes
    off = _study(SIX, rule="interval", futility_stop=False, **LOOSE)
    full, _ = _run(off, lambda spec: spec.arm == "baseline")
    assert _decide(off, full).verdict == "reject"


def test_a_skill_that_always_helps_is_never_stopped_for_futility() -> None:
    lines, reason = _run(_study(SIX, rule="interval"), lambda spec: spec.arm == "skill")
    assert reason is None and all(r.status != "skipped" for r in lines)


def test_running_trials_count_as_remaining() -> None:
    """With trials in flight the check sees them as not yet finished: a stop is certain whatever they give."""
    study = _study(early_stop="curtail", **LOOSE)
    check = curtailment_check(study, [t.id for t in TASKS])
    assert check is not None
    specs: list[TrialSpec] = list(plan_trials(TASKS, 3, seed=2))
    finals = [make_record(s, 1, passed=s.arm == "baseline") for s in specs[:4]]
    assert check(finals) is None, "after one round the skill could still catch up"
