"""The interval rule's futility stop (harness.analysis.curtail.futility) and what the decision makes of it.

Each stop kind on a dataset built so that the stop is certain, beside a control one outcome short of it;
then properties over random partial runs: whenever the stop fires, every completion tried gives the stated
verdict class, and the stop never goes away as more trials finish.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.analysis.curtail import (
    Futility,
    early_stop_armed,
    early_stop_verdict,
    futility,
    remaining_trials,
)
from harness.analysis.decide import decide
from harness.analysis.estimates import Analysis, analyze
from harness.analysis.observations import DecisionContext, Observation, provenance_by_arm
from harness.analysis.reasons import ReasonCode
from harness.records import Arm, Outcome
from harness.reporting.gate import gate
from harness.study.config import DecisionSettings
from tests.factories import outcome_record, outcome_records, write_experiment

INTERVAL = DecisionSettings(rule="interval")
CURTAIL_ONLY = DecisionSettings(rule="interval", futility_stop=False, early_stop="curtail")
CAP = 1.0
"""The per-trial cost cap of these tests (every trial below costs 0.5)."""

_OUTCOME: dict[str, Outcome] = {"P": "pass", "F": "fail", "U": "unknown", "T": "truncated", "I": "infra"}
"""Codes: P pass, F fail, U unknown, T truncated, I infra before reaching the model, R infra after it."""


def obs(task: str, arm: Arm, code: str, cost: float = 0.5) -> Observation:
    if code == "R":
        return Observation(task, arm, "infra", cost, reached_model=True)
    return Observation(task, arm, _OUTCOME[code], 0.0 if code == "I" else cost)


def build(spec: Mapping[str, tuple[str, str]], skill_cost: Mapping[str, float] | None = None) -> list[Observation]:
    """{task: (baseline codes, skill codes)} -> observations; every trial costs 0.5 unless ``skill_cost``
    names the skill arm's cost on a task."""
    out = []
    for t, (b, s) in spec.items():
        out += [obs(t, "baseline", c) for c in b]
        out += [obs(t, "skill", c, (skill_cost or {}).get(t, 0.5)) for c in s]
    return out


def ctx(runs: int, tasks: Sequence[str], *, early: bool = False) -> DecisionContext:
    return DecisionContext(
        budget_stopped=False,
        provenance_by_arm=provenance_by_arm({"model": "sonnet"}),
        planned_runs_per_arm=runs,
        early_stopped=early,
        planned_task_ids=frozenset(tasks),
        max_cost_per_trial=CAP,
    )


def check(spec: Mapping[str, tuple[str, str]], s: DecisionSettings = INTERVAL, runs: int = 3) -> Futility | None:
    a = analyze(build(spec), s)
    return futility(a, remaining_trials(a, runs, list(spec)), s, max_cost_per_trial=CAP)


def final_verdict(spec: Mapping[str, tuple[str, str]], s: DecisionSettings = INTERVAL, runs: int = 3) -> str:
    return decide(analyze(build(spec), s), s, ctx(runs, list(spec))).verdict


def stopped_decision(spec: Mapping[str, tuple[str, str]], s: DecisionSettings = INTERVAL, runs: int = 3) -> Analysis:
    return analyze(build(spec), s)


def gains(j: int) -> dict[str, tuple[str, str]]:
    """Ten tasks x 3 runs: j tasks where the skill gained a pass (1/3 -> 2/3), the rest tied at 1/3; the
    last task's last skill trial is still to run."""
    spec = {f"t{i}": ("PFF", "PPF") if i < j else ("PFF", "PFF") for i in range(9)}
    spec["t9"] = ("PFF", "PF")
    return spec


def losses(j: int) -> dict[str, tuple[str, str]]:
    """Ten tasks x 3 runs: j tasks where the skill lost a pass (2/3 -> 1/3), the rest tied at 1/3; the last
    task (a tie) still has its last skill trial to run."""
    spec = {f"t{i}": ("PPF", "PFF") if i < j else ("PFF", "PFF") for i in range(9)}
    spec["t9"] = ("PFF", "PF")
    return spec


# ------------------------------------------------------------------------ futility: inconclusive


def test_futility_when_even_the_best_last_trial_cannot_lift_the_lower_bound_above_zero() -> None:
    found = check(gains(7))
    assert found is not None and found.verdict == "inconclusive"
    assert "lower bound of the gain's interval" in found.why
    # the skill's last trial passing is the best completion; it is not adopt (nor is any other)
    best = {**gains(7), "t9": ("PFF", "PFP")}
    assert final_verdict(best) == "inconclusive"
    # no completion can reject either (the upper bound stays above the minimum gain, the cost within the
    # limit under the $1 cap): the stop reports the verdict every completion gives
    assert found.certain and found.witnessed


def test_control_one_more_gain_keeps_adoption_possible() -> None:
    assert check(gains(8)) is None
    # and it is real: the best completion adopts
    assert final_verdict({**gains(8), "t9": ("PFF", "PFP")}) == "adopt"


def test_without_a_cost_cap_the_outcome_is_not_certain_and_the_loop_runs_on() -> None:
    a = analyze(build(gains(7)), INTERVAL)
    rem = remaining_trials(a, 3, list(gains(7)))
    found = futility(a, rem, INTERVAL, max_cost_per_trial=None)
    # a last skill trial of unbounded cost could make the cost ratio reject: reject is possible, and
    # no completion is exhibited that ends inconclusive (one remaining trial cannot trip a gate here)
    assert found is not None and not found.certain and not found.witnessed
    assert early_stop_verdict(a, INTERVAL, 3, list(gains(7)), max_cost_per_trial=None).verdict is None
    assert early_stop_verdict(a, INTERVAL, 3, list(gains(7)), max_cost_per_trial=CAP).verdict == "inconclusive"


def test_a_futility_stop_is_inconclusive_with_its_own_reason_and_the_trials_saved() -> None:
    spec = gains(7)
    r = decide(stopped_decision(spec), INTERVAL, ctx(3, list(spec), early=True))
    assert r.verdict == "inconclusive" and r.early_stop_verdict == "inconclusive"
    (reason,) = [x for x in r.reasons if x.code == ReasonCode.FUTILITY_STOPPED]
    assert reason.kind == "inconclusive"
    assert reason.message.startswith("adoption is no longer possible under the plan; stopped early")
    assert "1 of 60 planned trial(s) not run (2%)" in reason.message
    assert "every completion of the plan ends inconclusive" in reason.message
    assert ReasonCode.INCOMPLETE not in r.codes and ReasonCode.UNBALANCED not in r.codes


def test_an_uncertain_futility_stop_says_the_full_plan_could_have_rejected() -> None:
    spec = losses(7)  # a completion rejects (skill's last trial fails), another does not (it passes)
    assert final_verdict({**spec, "t9": ("PFF", "PFF")}) == "reject"
    assert final_verdict({**spec, "t9": ("PFF", "PFP")}) == "inconclusive"
    found = check(spec)
    assert found is not None and found.verdict == "inconclusive" and not found.certain
    r = decide(stopped_decision(spec), INTERVAL, ctx(3, list(spec), early=True))
    assert r.verdict == "inconclusive"
    assert "the full plan could have ended reject or inconclusive, never adopt" in r.reasons[0].message


def test_futility_when_too_few_tasks_can_end_paired() -> None:
    spec = {f"t{i}": ("PFF", "PPP") for i in range(5)}
    spec["t5"] = ("PFF", "II")  # the skill arm of t5 ended infra twice; one trial is left
    assert check(spec) is None, "the last trial could still pair t5"
    spec["t5"] = ("PFF", "III")
    found = check(spec)
    assert found is not None and "at most 5 task(s)" in found.why


def test_futility_when_the_missing_share_stays_over_the_cap() -> None:
    spec = {f"t{i}": ("PFF", "PPP") for i in range(7)}
    spec.update(t0=("PFF", "UUP"), t1=("PFF", "UUP"), t2=("PFF", "UPP"), t6=("PFF", "PP"))
    # skill: 5 missing of 20 counted; even a valid last trial leaves 5/21 > 20%
    found = check(spec)
    assert found is not None and found.certain and "missing share" in found.why
    spec["t2"] = ("PFF", "PPP")  # control: 4/21 could end within the cap
    assert check(spec) is None


def test_futility_on_cost_alone() -> None:
    spec = {f"t{i}": ("FFF", "PPP") for i in range(6)}
    spec["t5"] = ("FFF", "PP")
    # the skill costs 2.0 a trial on t4 and t5: even a free last trial leaves the ratio at
    # (4 x 0.5 + 2 + 4/3) / (6 x 0.5) = 1.78 > 1.5, whatever the passes say
    a = analyze(build(spec, {"t4": 2.0, "t5": 2.0}), INTERVAL)
    found = futility(a, remaining_trials(a, 3, list(spec)), INTERVAL, max_cost_per_trial=CAP)
    assert found is not None and "cost ratio is at least 1.78" in found.why
    # control: at 1.5 a trial on t5 alone, a free last trial could bring the ratio to (5 x 0.5 + 1) / 3 = 1.17
    a = analyze(build(spec, {"t5": 1.5}), INTERVAL)
    assert futility(a, remaining_trials(a, 3, list(spec)), INTERVAL, max_cost_per_trial=CAP) is None


def test_the_futility_stop_waits_while_the_run_heads_for_a_reject() -> None:
    """Six of ten tasks still have their last trial in each arm to run (one ending infra in one arm would trip
    the infra gate: a witness). With no effect the stop reports inconclusive; a skill that loses a pass on
    every task is heading for a reject the full plan gives in most completions, so the stop waits for it."""
    null = {**{f"t{i}": ("PFF", "PFF") for i in range(4)}, **{f"t{i}": ("PF", "PF") for i in range(4, 10)}}
    harm = {**{f"t{i}": ("PPF", "PFF") for i in range(4)}, **{f"t{i}": ("PP", "PF") for i in range(4, 10)}}
    for spec, heading in ((null, False), (harm, True)):
        found = check(spec)
        assert found is not None and found.witnessed and not found.certain
        assert found.heading_for_reject is heading
        a = analyze(build(spec), INTERVAL)
        stop = early_stop_verdict(a, INTERVAL, 3, list(spec), max_cost_per_trial=CAP)
        assert stop.verdict == (None if heading else "inconclusive")
    assert final_verdict({**harm, **{f"t{i}": ("PPF", "PFF") for i in range(4, 10)}}) == "reject"
    assert final_verdict({**harm, **{f"t{i}": ("PPF", "PFP") for i in range(4, 10)}}) == "inconclusive"


# ---------------------------------------------------------------------------- certain reject


def test_certain_reject_when_every_completion_keeps_the_upper_bound_below_the_minimum_gain() -> None:
    found = check(losses(9))
    assert found is not None and found[:3] == ("reject", True, True)
    for last in ("P", "F", "U", "I", "R"):
        assert final_verdict({**losses(9), "t9": ("PFF", "PF" + last)}) == "reject", last
    r = decide(stopped_decision(losses(9)), INTERVAL, ctx(3, list(losses(9)), early=True))
    assert r.verdict == "reject" and r.early_stop_verdict == "reject"
    assert ReasonCode.EARLY_STOPPED in r.codes and ReasonCode.GAIN_BELOW_MINIMUM in r.codes
    assert ReasonCode.FUTILITY_STOPPED not in r.codes
    note = next(x for x in r.reasons if x.code == ReasonCode.EARLY_STOPPED)
    assert "every completion of the plan ends in reject; 1 of 60 planned trial(s) not run" in note.message


def test_control_a_completion_that_does_not_reject_leaves_reject_uncertain() -> None:
    found = check(losses(7))
    assert found is not None and found.verdict == "inconclusive"
    assert final_verdict({**losses(7), "t9": ("PFF", "PFP")}) == "inconclusive"


def test_a_gate_a_completion_could_trip_blocks_a_certain_reject() -> None:
    spec = losses(9)
    strict = DecisionSettings(rule="interval", max_missing_share=0.0)
    # the last trial ending unknown would make the skill's missing share 1/30 > 0
    found = check(spec, strict)
    assert found is not None and found.verdict == "inconclusive" and found.witnessed and not found.certain


# ------------------------------------------------------------------------------- arming


def test_the_stops_are_armed_only_for_the_interval_rule_with_six_or_more_tasks() -> None:
    assert early_stop_armed(INTERVAL, 6) and not early_stop_armed(INTERVAL, 5)
    assert not early_stop_armed(DecisionSettings(rule="interval", futility_stop=False), 10)
    assert early_stop_armed(CURTAIL_ONLY, 6)
    assert not early_stop_armed(DecisionSettings(rule="point"), 10)  # futility_stop is ignored there
    small = {f"t{i}": ("PPP", "FF") for i in range(5)}
    a = analyze(build(small), INTERVAL)
    assert early_stop_verdict(a, INTERVAL, 3, list(small), max_cost_per_trial=CAP).verdict is None
    r = decide(a, INTERVAL, ctx(3, list(small), early=True))
    assert ReasonCode.EARLY_STOP_UNSUPPORTED in r.codes and "at least 6 tasks" in r.reasons[0].message


def test_curtailment_alone_stops_the_interval_rule_only_on_a_certain_verdict() -> None:
    spec = losses(7)
    a = analyze(build(spec), CURTAIL_ONLY)
    assert early_stop_verdict(a, CURTAIL_ONLY, 3, list(spec), max_cost_per_trial=CAP).verdict is None
    r = decide(a, CURTAIL_ONLY, ctx(3, list(spec), early=True))
    assert r.verdict == "inconclusive" and ReasonCode.EARLY_STOP_UNSUPPORTED in r.codes
    certain = analyze(build(losses(9)), CURTAIL_ONLY)
    assert early_stop_verdict(certain, CURTAIL_ONLY, 3, list(spec), max_cost_per_trial=CAP).verdict == "reject"
    assert decide(certain, CURTAIL_ONLY, ctx(3, list(spec), early=True)).verdict == "reject"


def test_the_point_rule_is_never_futility_checked() -> None:
    a = analyze(build(gains(7)), DecisionSettings(rule="point"))
    assert futility(a, remaining_trials(a, 3, list(gains(7))), DecisionSettings(rule="point")) is None


def test_negative_remaining_counts_are_refused() -> None:
    a = analyze(build(gains(7)), INTERVAL)
    with pytest.raises(ValueError, match=">= 0"):
        futility(a, {"skill": {"t9": -1}, "baseline": {}}, INTERVAL)


# ------------------------------------------------------------------------------ properties


Partial = tuple[int, dict[str, tuple[str, str]], dict[str, tuple[int, int]], DecisionSettings]
"""runs per arm, finished codes per task (baseline, skill), trials left per task (baseline, skill), settings."""


@st.composite
def partial_runs(draw: st.DrawFn, harmful: bool = False) -> Partial:
    """A plan (tasks x runs), what has finished of it (codes per task and arm), how much of each task is
    left per arm, and the decision's settings (gate caps strict or loose). Each arm draws its codes from its own mix (a skill that helps,
    does nothing or harms; rare or frequent missing and infra outcomes); most tasks are near their end,
    where stops happen. ``harmful``: a skill that mostly fails where the baseline mostly passes, loose gate
    caps, little noise: where certain rejects happen."""
    runs = draw(st.integers(1, 3))
    n_tasks = draw(st.integers(6, 9))
    noise = draw(st.sampled_from(["", "U", "UTIR", "UUIIRR"][: 2 if harmful else 4]))
    mixes = (
        draw(st.sampled_from(["PPPF"] if harmful else ["PF", "PPPF", "PFFF"])),
        draw(st.sampled_from(["FFFFFP"] if harmful else ["PPPPF", "PF", "PFFF", "FFFFFP"])),
    )
    spec: dict[str, tuple[str, str]] = {}
    left: dict[str, tuple[int, int]] = {}
    for i in range(n_tasks):
        done = []
        for mix in mixes:
            k = draw(st.sampled_from([runs] * 14 + [max(0, runs - 1)] * 5 + list(range(runs + 1))))
            done.append("".join(draw(st.sampled_from(mix * 3 + noise)) for _ in range(k)))
        spec[f"t{i}"] = (done[0], done[1])
        left[f"t{i}"] = (runs - len(done[0]), runs - len(done[1]))
    caps = DecisionSettings(
        rule="interval",
        max_missing_share=draw(st.sampled_from([0.5, 1.0] if harmful else [0.2, 0.5, 1.0])),
        max_infra_imbalance=draw(st.sampled_from([1.0] if harmful else [0.1, 1.0])),
    )
    return runs, spec, left, caps


def _complete(
    spec: Mapping[str, tuple[str, str]], left: Mapping[str, tuple[int, int]], fill: Mapping[str, Sequence[str]]
) -> dict[str, tuple[str, str]]:
    """``spec`` with each task's remaining trials appended: ``fill[task]`` gives baseline then skill codes."""
    out = {}
    for t, (b, s) in spec.items():
        codes = list(fill[t])
        nb, _ = left[t]
        out[t] = (b + "".join(codes[:nb]), s + "".join(codes[nb:]))
    return out


def _uniform(left: Mapping[str, tuple[int, int]], base: str, skill: str) -> dict[str, list[str]]:
    return {t: [base] * nb + [skill] * ns for t, (nb, ns) in left.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(run=st.one_of(partial_runs(), partial_runs(harmful=True)), data=st.data())
def test_whenever_the_stop_fires_every_completion_gives_the_stated_verdict_class(
    run: Partial, data: st.DataObject
) -> None:
    runs, spec, left, s = run
    found = check(spec, s, runs)
    event("stop fires" if found is not None else "adoption still possible")
    if found is None:
        return
    event(f"{found.verdict}, certain={found.certain}, witnessed={found.witnessed}")
    completions = [
        _uniform(left, "F", "P"),  # the best case for the skill
        _uniform(left, "P", "F"),
        _uniform(left, "U", "U"),
        _uniform(left, "I", "I"),
        _uniform(left, "P", "U"),
        _uniform(left, "U", "P"),
        _uniform(left, "F", "I"),
        _uniform(left, "I", "P"),
    ]
    for _ in range(4):
        completions.append(
            {
                t: data.draw(st.lists(st.sampled_from("PFUTIR"), min_size=nb + ns, max_size=nb + ns))
                for t, (nb, ns) in left.items()
            }
        )
    verdicts = {final_verdict(_complete(spec, left, c), s, runs) for c in completions}
    assert "adopt" not in verdicts, found
    if found.certain:
        assert verdicts <= {found.verdict}, (found, verdicts)
    # what the decision reports on the stopped data is the stated verdict
    a = analyze(build(spec), s)
    assert decide(a, s, ctx(runs, list(spec), early=True)).verdict == found.verdict
    if found.witnessed and not found.certain:
        # the witness completions (a gate tripped) are among the uniform ones above
        assert "inconclusive" in verdicts, found


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(run=st.one_of(partial_runs(), partial_runs(harmful=True)), data=st.data())
def test_once_adoption_is_ruled_out_it_stays_ruled_out(run: Partial, data: st.DataObject) -> None:
    """The decision re-derives the stop from the final data, trials that were running included: the bounds
    only tighten, so a stop made stays legitimate, and a certain verdict stays certain."""
    runs, spec, left, s = run
    found = check(spec, s, runs)
    if found is None:
        return
    more: dict[str, tuple[str, str]] = {}
    for t, (b, sk) in spec.items():
        nb, ns = left[t]
        more[t] = (
            b + "".join(data.draw(st.lists(st.sampled_from("PFUIR"), max_size=nb))),
            sk + "".join(data.draw(st.lists(st.sampled_from("PFUIR"), max_size=ns))),
        )
    later = check(more, s, runs)
    assert later is not None, (found, more)
    if found.certain:
        assert later.certain and later.verdict == found.verdict


# ------------------------------------------------------------------------------ the gate


def test_harness_gate_exits_2_on_a_futility_stop(tmp_path: Path) -> None:
    """A run the futility stop ended: the gate recomputes the decision from results.jsonl and exits 2
    (inconclusive), naming FUTILITY_STOPPED and the trials not run."""
    spec = gains(7)
    full = {t: (b, s.ljust(3, "F")) for t, (b, s) in spec.items()}
    records = outcome_records(spec)
    last = outcome_record("t9", "skill", 2, "F")
    why = "early stop (preregistered futility stop): adoption is no longer possible under the plan"
    records.append(
        last.model_copy(
            update={"status": "skipped", "stopped_by": "early_stop", "error": why, "agent": None, "verify": None}
            | {"judge": None, "patch": None}
        )
    )
    exp = write_experiment(tmp_path, full, rule="interval", recs=records)
    result = gate(exp)
    assert result.verdict == "inconclusive" and result.exit_code == 2
    assert "[FUTILITY_STOPPED] adoption is no longer possible under the plan" in result.line
    assert "1 of 60 planned trial(s) not run" in result.line
