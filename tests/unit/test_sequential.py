"""A preregistered group-sequential design at work: which look decides, what the loop stops on, what every
report says about it, and how the preregistration refuses it where it cannot apply."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.analysis import sequential
from harness.analysis.curtail import Levels, futility, remaining_trials
from harness.analysis.estimates import analyze
from harness.analysis.observations import DecisionContext, Observation, provenance_by_arm
from harness.analysis.reasons import ReasonCode
from harness.errors import ConfigError
from harness.plan import TrialSpec
from harness.records import TrialRecord
from harness.reporting.decision_json import decision_json, dumps
from harness.reporting.html import render
from harness.reporting.markdown import markdown
from harness.reporting.model import ReportInput, build_input
from harness.reporting.text import terminal_summary
from harness.study.config import (
    DecisionSettings,
    Execution,
    Preregistration,
    SequentialSettings,
    Study,
    Task,
    TaskFile,
    load_preregistration,
)
from tests.factories import LOCK, outcome_records, run_loop

SEQ = DecisionSettings(rule="interval", sequential=SequentialSettings())
POCOCK = DecisionSettings(rule="interval", sequential=SequentialSettings(spending="pocock"))
PROV = provenance_by_arm({"model": "m", "lock_hash": "l"})


def _obs(spec: dict[str, tuple[str, str]]) -> list[Observation]:
    """Observations from ``{task: (baseline codes, skill codes)}`` with P/F/U codes, run index = position."""
    out = []
    for task, (base, skill) in spec.items():
        for arm, codes in (("baseline", base), ("skill", skill)):
            for i, c in enumerate(codes):
                outcome = {"P": "pass", "F": "fail", "U": "unknown", "S": "skipped"}[c]
                out.append(Observation(task, arm, outcome, 0.03 if c != "S" else 0.0, run_index=i))  # type: ignore[arg-type]
    return out


def _ctx(spec: dict[str, Any], runs: int = 3, **kw: Any) -> DecisionContext:
    return DecisionContext(False, PROV, runs, planned_task_ids=frozenset(spec), **kw)


STRONG = {f"t{i:02d}": ("FFF", "PPP") for i in range(12)}
"""Twelve tasks the skill always solves and the baseline never does: adopted at the first look."""
NULL = {f"t{i:02d}": ("PFP", "PFP") for i in range(6)} | {f"u{i:02d}": ("FFP", "FPF") for i in range(6)}


# =========================================================================== decide_run


def test_without_a_design_decide_run_is_analyze_then_decide() -> None:
    fixed = DecisionSettings(rule="interval")
    obs = _obs(STRONG)
    run = sequential.decide_run(obs, fixed, _ctx(STRONG))
    assert run.decision.sequential is None
    assert run.analysis == analyze(obs, fixed)
    assert run.decision.verdict == "adopt"


def test_a_strong_skill_is_adopted_at_the_first_look_on_the_first_rounds_data_alone() -> None:
    obs = _obs(STRONG)
    run = sequential.decide_run(obs, SEQ, _ctx(STRONG))
    seq = run.decision.sequential
    assert run.decision.verdict == "adopt" and seq is not None and seq.stopped_early
    assert seq.look.number == 1 and seq.look.round == 1
    assert (seq.analysed_trials, seq.planned_trials, seq.later_trials) == (24, 72, 48)
    assert seq.saved_trials == 48
    # the report's analysis is the look's data (one run per arm), the decision's interval the repeated one
    assert run.analysis.skill.valid == 12 and run.analysis.paired_table is not None
    assert seq.paired.interval.low > 0 and seq.paired.interval.width > run.analysis.paired.interval.width
    assert ReasonCode.BOUNDARY_CROSSED in run.decision.codes
    crossed = next(x for x in run.decision.reasons if x.code == ReasonCode.BOUNDARY_CROSSED)
    assert crossed.kind == "note" and "look 1 of 3" in crossed.message
    # the rule's own finding quotes the look's level, not 95%
    gain = next(x for x in run.decision.reasons if x.code == ReasonCode.GAIN_SIGNIFICANT)
    assert "99.98% interval" in gain.message


def test_the_verdict_depends_on_the_data_not_on_when_the_loop_stopped() -> None:
    """A run that went on past a deciding look (sharded, or trials that were running) is decided by that
    look; the trials after it are counted and left out."""
    obs = _obs(STRONG)
    first_round = [o for o in obs if o.run_index == 0]
    a = sequential.decide_run(obs, SEQ, _ctx(STRONG)).decision
    b = sequential.decide_run(first_round, SEQ, _ctx(STRONG, early_stopped=True)).decision
    assert a.verdict == b.verdict == "adopt"
    assert a.sequential is not None and b.sequential is not None
    assert a.sequential.paired == b.sequential.paired and b.sequential.later_trials == 0


def test_an_incomplete_round_is_no_look() -> None:
    spec = dict(STRONG)
    spec["t00"] = ("SSS", "PPP")  # one task never ran in the baseline arm
    run = sequential.decide_run(_obs(spec), SEQ, _ctx(spec))
    seq = run.decision.sequential
    assert seq is not None and not seq.stopped_early and seq.looks_reached == 0
    assert sequential.rounds_complete(_obs(spec), spec, 3) == 0


def test_a_skill_that_does_nothing_reaches_the_final_look_at_its_nominal_level() -> None:
    obs = _obs(NULL)
    run = sequential.decide_run(obs, SEQ, _ctx(NULL))
    seq = run.decision.sequential
    assert seq is not None and not seq.stopped_early and seq.look.number == 3 and seq.looks_reached == 3
    assert run.decision.verdict != "adopt"
    assert ReasonCode.FINAL_LOOK in run.decision.codes
    # the final look's repeated interval is wider than the fixed design's 95% one on the same data
    fixed = analyze(obs, DecisionSettings(rule="interval"))
    assert seq.paired.interval.low < fixed.paired.interval.low and seq.paired.mean == fixed.paired.mean
    assert run.analysis == fixed, "the report's analysis is the whole run at the preregistered confidence"


def test_an_interim_look_rejects_a_skill_whose_repeated_interval_lies_below_the_minimum_gain() -> None:
    harmful = {f"t{i:02d}": ("PPP", "FFF") for i in range(12)}
    run = sequential.decide_run(_obs(harmful), SEQ, _ctx(harmful))
    assert run.decision.verdict == "reject"
    assert run.decision.sequential is not None and run.decision.sequential.look.number == 1


def test_below_ten_tasks_a_look_also_needs_the_sign_flip_test_at_its_own_level() -> None:
    """Eight tasks all improved: the sign-flip p = 2/256 is below the final level's alpha but above the first
    look's, so the first look cannot adopt however large the gain."""
    spec = {f"t{i}": ("FFF", "PPP") for i in range(8)}
    run = sequential.decide_run(_obs(spec), SEQ, _ctx(spec))
    seq = run.decision.sequential
    assert seq is not None and seq.look.number > 1 and run.decision.verdict == "adopt"


def test_a_provenance_mismatch_stops_no_look_and_invalidates_the_run() -> None:
    ctx = DecisionContext(
        False, provenance_by_arm({"model": "a"}, {"model": "b"}), 3, planned_task_ids=frozenset(STRONG)
    )
    run = sequential.decide_run(_obs(STRONG), SEQ, ctx)
    assert run.decision.verdict == "invalid"
    assert run.decision.sequential is not None and not run.decision.sequential.stopped_early


# =========================================================================== the loop's stop


def test_early_stop_fires_when_the_first_look_decides_and_names_it() -> None:
    obs = _obs(STRONG)
    first = [o for o in obs if o.run_index == 0]
    stop = sequential.early_stop(first, SEQ, _ctx(STRONG))
    assert stop.verdict == "adopt" and stop.look is not None and stop.look.number == 1 and stop.remaining == 48
    msg = sequential.sequential_stop_message(SEQ, stop)
    assert "look 1 of 3" in msg and "48 remaining" in msg
    # looks known to be checked are skipped (their data cannot change)
    assert sequential.early_stop(first, SEQ, _ctx(STRONG), looks_checked=1).look is None


def test_before_a_round_completes_only_the_futility_stop_can_fire() -> None:
    obs = [o for o in _obs(STRONG) if o.run_index == 0][:-1]
    stop = sequential.early_stop(obs, SEQ, _ctx(STRONG))
    assert stop.verdict is None and stop.look is None


def test_the_futility_stop_bounds_adoption_at_the_lowest_level_of_the_looks_ahead() -> None:
    """Ten tasks tied after two rounds: even if every last skill trial passed and every last baseline trial
    failed, the gain's lower bound clears 0 at the fixed design's 95% but at no level of Pocock's last look
    (97.8%), so under that design adoption is already impossible and the futility stop may fire."""
    spec = {f"t{i:02d}": ("PFF", "PFP") for i in range(10)}
    obs = [o for o in _obs(spec) if o.run_index is not None and o.run_index < 2]
    a = analyze(obs, POCOCK)
    remaining = remaining_trials(a, 3, list(spec))
    design = sequential.sequential_design(POCOCK, 3)
    assert design is not None and design.futility_levels(2) == (design.final.confidence,) * 2
    assert futility(a, remaining, POCOCK) is None
    found = futility(a, remaining, POCOCK, levels=Levels(*design.futility_levels(2)))
    assert found is not None and found.verdict == "inconclusive" and "lower bound" in found.why
    # and the loop's check applies those levels: with the stop armed it fires here, the fixed design's does not
    stop = sequential.early_stop(obs, POCOCK, _ctx(spec))
    fixed = sequential.early_stop(obs, DecisionSettings(rule="interval"), _ctx(spec))
    assert fixed.verdict is None and stop.verdict == "inconclusive" and stop.look is None
    # the decision re-derives the stop at the same levels
    decided = sequential.decide_run(obs, POCOCK, _ctx(spec, early_stopped=True)).decision
    assert ReasonCode.FUTILITY_STOPPED in decided.codes and ReasonCode.EARLY_STOP_UNSUPPORTED not in decided.codes


RUNS = 3


def _study(tasks: Sequence[Task], **decision: Any) -> Study:
    prereg = Preregistration(
        skill="s",
        skill_ref="skill",
        execution=Execution(runs_per_arm=RUNS),
        decision=DecisionSettings(**{"rule": "interval", **decision}),
    )
    return Study(Path("/nowhere/preregistration.yaml"), prereg, TaskFile(tasks=tuple(tasks)))


def _loop(study: Study, outcome: Callable[[TrialSpec], bool]) -> tuple[list[TrialRecord], str | None]:
    return run_loop(study, outcome, seed=3)


TWELVE = tuple(Task(id=f"t{i:02d}", prompt=f"task {i}", verify_cmd="true") for i in range(12))


def test_the_loop_stops_after_the_first_round_and_the_report_says_so() -> None:
    study = _study(TWELVE, sequential=SequentialSettings())
    lines, why = _loop(study, lambda spec: spec.arm == "skill")
    assert why is not None and "group-sequential design" in why and "look 1 of 3" in why
    ran = [r for r in lines if r.status != "skipped"]
    assert len(ran) == 24 and {r.run_index for r in ran} == {0}
    assert sum(1 for r in lines if r.status == "skipped") == 48
    report = _report(study.prereg, lines, [t.id for t in TWELVE])
    assert report.decision.verdict == "adopt"
    assert report.decision.sequential is not None and report.decision.sequential.look.number == 1
    assert ReasonCode.EARLY_STOP_UNSUPPORTED not in report.decision.codes


def test_without_the_design_the_same_loop_runs_the_plan_through() -> None:
    study = _study(TWELVE)
    lines, why = _loop(study, lambda spec: spec.arm == "skill")
    assert why is None and all(r.status != "skipped" for r in lines) and len(lines) == 72


# =========================================================================== every report


def _report(prereg: Preregistration, records: Sequence[TrialRecord], planned: Sequence[str]) -> ReportInput:
    return build_input(
        prereg, records, planned_task_ids=planned, skipped_tasks=[], lock_hash=LOCK, experiment_dir="/tmp/experiment"
    )


def _seq_prereg(**seq: Any) -> Preregistration:
    return Preregistration.model_validate(
        {
            "skill": "tidy",
            "skill_ref": "skill",
            "execution": {"runs_per_arm": 3},
            "decision": {"rule": "interval", "sequential": seq},
        }
    )


def test_every_renderer_says_which_look_decided_and_gives_the_repeated_interval() -> None:
    r = _report(_seq_prereg(), outcome_records(STRONG), list(STRONG))
    seq = r.decision.sequential
    assert seq is not None
    low = f"{100 * seq.paired.interval.low:+.1f}"
    text, md, html = terminal_summary(r), markdown(r), render(r)
    for out in (text, md, html):
        assert "look 1 of 3" in out and ("O&#x27;Brien-Fleming" in out or "O'Brien-Fleming" in out)
        assert "repeated 95% interval" in out and low in out
    assert "unadjusted 95% CI" in text and "(unadjusted)" in md
    data = json.loads(dumps(decision_json(r)))
    assert data["sequential"]["decided_at_look"] == 1 and data["sequential"]["stopped_early"] is True
    assert data["sequential"]["repeated_interval"]["low"] == pytest.approx(seq.paired.interval.low)
    assert [x["round"] for x in data["sequential"]["looks"]] == [1, 2, 3]
    assert data["sequential"]["later_trials"] == 48
    assert "next_experiment" not in data, "a decided run is not sized again"


def test_the_fixed_designs_reports_carry_no_sequential_key() -> None:
    r = _report(_seq_prereg().model_copy(update={"decision": DecisionSettings(rule="interval")}),
                outcome_records(STRONG), list(STRONG))  # fmt: skip
    assert "sequential" not in decision_json(r) and "Group-sequential" not in markdown(r)
    assert "unadjusted" not in terminal_summary(r)


# =========================================================================== the preregistration


PREREG = """\
skill: tidy
skill_ref: skill
execution:
  runs_per_arm: {runs}
decision:
{decision}
"""


def _load(tmp_path: Path, decision: str, runs: int = 3, extra: str = "") -> Preregistration:
    path = tmp_path / "preregistration.yaml"
    path.write_text(PREREG.format(runs=runs, decision=decision) + extra)
    return load_preregistration(path)


def test_the_block_loads_with_defaults_and_with_chosen_looks(tmp_path: Path) -> None:
    p = _load(tmp_path, "  sequential: {}")
    assert p.decision.sequential == SequentialSettings(looks=None, spending="obrien-fleming")
    p = _load(tmp_path, "  sequential:\n    looks: [2, 4]\n    spending: pocock", runs=4)
    assert p.decision.sequential == SequentialSettings(looks=(2, 4), spending="pocock")


@pytest.mark.parametrize(
    ("decision", "runs", "extra", "field", "words"),
    [
        ("  rule: point\n  sequential: {}", 3, "", "decision.sequential", "interval rule only"),
        ("  sequential: {}", 1, "", "decision.sequential", "at least two rounds"),
        ("  sequential:\n    looks: [1, 2]", 3, "", "decision.sequential.looks", "must end at the last round"),
        ("  sequential:\n    looks: [2, 1, 3]", 3, "", "decision.sequential.looks", "increase strictly"),
        ("  sequential:\n    looks: [0, 3]", 3, "", "decision.sequential.looks", "greater than or equal to 1"),
        ("  sequential:\n    looks: [3]", 3, "", "decision.sequential.looks", "at least 2"),
        ("  sequential:\n    spending: haybittle", 3, "", "decision.sequential.spending", "obrien-fleming"),
        ("  sequential:\n    look: [1, 3]", 3, "", "decision.sequential.look", "unknown field"),
        ("  sequential:\n    looks: [true, 3]", 3, "", "decision.sequential.looks", "integer"),
    ],
)
def test_the_block_is_refused_by_name_where_it_cannot_apply(
    tmp_path: Path, decision: str, runs: int, extra: str, field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, decision, runs, extra)
    assert info.value.field is not None and info.value.field.startswith(field), info.value.field
    assert words in str(info.value)


def test_a_library_experiment_refuses_the_block(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _load_library(tmp_path)
    assert info.value.field == "decision.sequential" and "library" in str(info.value)


def _load_library(tmp_path: Path) -> Preregistration:
    path = tmp_path / "preregistration.yaml"
    path.write_text("skill: lib\nlibrary:\n  path: skills\ndecision:\n  sequential: {}\n")
    (tmp_path / "skills" / "a").mkdir(parents=True)
    (tmp_path / "skills" / "a" / "SKILL.md").write_text("---\nname: a\ndescription: a\n---\n")
    return load_preregistration(path)


def test_the_lock_covers_the_design_and_a_preregistration_without_it_hashes_as_before(make_study: Any) -> None:
    from harness.errors import LockError
    from harness.study.config import load_study
    from harness.study.lock import lock, verify_lock
    from tests.factories import DEFAULT_PREREG

    plain = make_study()
    lock(plain.prereg)
    before = verify_lock(load_study(plain.prereg)).sha256
    plain.prereg.write_text(DEFAULT_PREREG + "decision:\n  sequential: null\n")
    assert verify_lock(load_study(plain.prereg)).sha256 == before, "unset, the field is not in the hash"
    plain.prereg.write_text(DEFAULT_PREREG + "decision:\n  sequential: {}\n")
    with pytest.raises(LockError, match="changed since lock: analysis, preregistration"):
        verify_lock(load_study(plain.prereg))
    lock(plain.prereg)
    obf = verify_lock(load_study(plain.prereg)).sha256
    plain.prereg.write_text(DEFAULT_PREREG + "decision:\n  sequential:\n    spending: pocock\n")
    with pytest.raises(LockError, match="analysis"):
        verify_lock(load_study(plain.prereg))
    assert obf != before
