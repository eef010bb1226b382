"""harness.analysis (observations, estimates, rules, decide, curtail): analysis figures and every verdict path on hand-built observation sets."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import pytest

from harness import fmt
from harness.analysis import stats
from harness.analysis.curtail import curtailment, remaining_trials
from harness.analysis.decide import decide
from harness.analysis.estimates import analyze
from harness.analysis.observations import (
    DecisionContext,
    Observation,
    context_from_records,
    observations_from_records,
    provenance_by_arm,
)
from harness.analysis.reasons import ReasonCode
from harness.records import (
    AgentResult,
    Arm,
    JudgeResult,
    JudgeVerdict,
    Outcome,
    TrialRecord,
    TrialStatus,
    VerifyResult,
)
from harness.study.config import DecisionSettings
from tests.factories import provenance, trial_record

POINT = DecisionSettings(rule="point")
INTERVAL = DecisionSettings(rule="interval")
T5_975 = 2.5705818366147395

_CODES: dict[str, Outcome] = {
    "P": "pass",
    "F": "fail",
    "U": "unknown",
    "T": "truncated",
    "I": "infra",
    "S": "skipped",
}
PROV = {
    "model": "sonnet",
    "cli_version": "2.1.0",
    "image_digest": "sha256:img",
    "base_sha": "a" * 40,
    "prompt_template_sha256": "tmpl",
    "lock_hash": "lock",
}


def arm_obs(task: str, arm: Arm, codes: str, cost: float = 1.0) -> list[Observation]:
    """'PFU' -> pass, fail, unknown trials of one task in one arm, each costing ``cost``."""
    return [Observation(task, arm, _CODES[c], cost, 5, 60.0) for c in codes]


def build(spec: Mapping[str, tuple[str, str]], skill_cost: float = 1.0) -> list[Observation]:
    """{task: (baseline codes, skill codes)} -> observations."""
    out: list[Observation] = []
    for task, (base, skill) in spec.items():
        out += arm_obs(task, "baseline", base)
        out += arm_obs(task, "skill", skill, skill_cost)
    return out


def ctx(runs: int = 3, **kw: object) -> DecisionContext:
    prov = kw.pop("provenance_by_arm", provenance_by_arm(PROV))
    return DecisionContext(
        budget_stopped=bool(kw.pop("budget_stopped", False)),
        provenance_by_arm=prov,  # type: ignore[arg-type]
        planned_runs_per_arm=runs,
        **kw,  # type: ignore[arg-type]
    )


def codes_of(n_pass: int, n: int = 3) -> str:
    return "P" * n_pass + "F" * (n - n_pass)


def spec_from(base: Sequence[int], skill: Sequence[int], n: int = 3) -> dict[str, tuple[str, str]]:
    return {f"t{i}": (codes_of(b, n), codes_of(s, n)) for i, (b, s) in enumerate(zip(base, skill, strict=True))}


# Six tasks, three runs: d = (2/3, 1/3, 1/3, 1/3, 1/3, 1/3); pooled 13/18 vs 6/18.
CLEAR_WIN = spec_from([0, 1, 2, 1, 0, 2], [2, 2, 3, 2, 1, 3])
CLEAR_LOSS = spec_from([2, 2, 3, 2, 1, 3], [0, 1, 2, 1, 0, 2])
# Four tasks: d = (1/3, -1/3, 1/3, 0); pooled 6/12 vs 5/12.
NOISY_WIN = spec_from([1, 2, 1, 1], [2, 1, 2, 1])
# Six tasks: d = (1/3, -1/3, 1/3, 0, 1/3, 0); pooled 10/18 vs 8/18: the point rule adopts on noise.
NOISY_WIN6 = spec_from([1, 2, 1, 1, 1, 2], [2, 1, 2, 1, 2, 2])


# ------------------------------------------------------------------------------ analysis


def test_analysis_of_clear_win() -> None:
    a = analyze(build(CLEAR_WIN), POINT)
    assert fmt.rate(a.baseline) == "6/18"
    assert fmt.rate(a.skill) == "13/18"
    assert a.n_paired_tasks == 6
    assert a.pooled_difference == pytest.approx(7 / 18)
    assert a.paired.mean == pytest.approx(7 / 18)
    # deviations 5/18 once and -1/18 five times: variance (25 + 5)/324/5 = 1/54, below the floor:
    # the mean Jeffreys within-task variance p(1-p)/3 with p = (k + 1/2)/4 in each arm.
    assert a.paired.floored and a.paired.sd == pytest.approx(math.sqrt(1 / 54))
    jv = {k: (k + 0.5) / 4 * (1 - (k + 0.5) / 4) / 3 for k in range(4)}
    floor = sum(jv[b] + jv[s] for b, s in zip([0, 1, 2, 1, 0, 2], [2, 2, 3, 2, 1, 3], strict=True)) / 6
    half = T5_975 * math.sqrt(floor) / math.sqrt(6)
    assert a.paired.interval.low == pytest.approx(7 / 18 - half)
    assert a.paired.interval.high == pytest.approx(7 / 18 + half)
    assert a.sign_flip.p_value == pytest.approx(2 / 64)
    assert (a.tasks_improved, a.tasks_worse, a.tasks_tied) == (6, 0, 0)
    assert a.cost.ratio == pytest.approx(1.0)
    assert a.skill.cost_per_pass == pytest.approx(18 / 13)
    assert a.paired_table is None  # three runs per arm: no McNemar
    assert round(a.baseline.wilson.low, 4) == round(stats.wilson_interval(6, 18).low, 4)
    assert a.skill.turns.median == 5.0
    assert a.mde_source == "pilot"


def test_unknowns_excluded_from_denominators_but_counted() -> None:
    obs = build({"a": ("PPU", "PFT"), "b": ("PFF", "PPI")})
    a = analyze(obs, POINT)
    assert fmt.rate(a.baseline) == "3/5"
    assert a.baseline.unknown == 1
    assert fmt.rate_with_excluded(a.baseline) == "3/5 (+1 unknown)"
    assert fmt.rate(a.skill) == "3/4"
    assert a.skill.truncated == 1
    assert a.skill.infra == 1
    assert fmt.rate_with_excluded(a.skill) == "3/4 (+1 truncated, +1 infra)"
    assert a.skill.missing_share == pytest.approx(1 / 5)  # infra is not in the base
    row = {r.task_id: r for r in a.tasks}["a"]
    assert fmt.rate(row.baseline) == "2/2"
    assert fmt.rate(row.skill) == "1/2"
    # Truncated trials were paid for: they count in cost; the infra trial does not (it is waste).
    assert row.skill.cost_trials == 3
    assert {r.task_id: r for r in a.tasks}["b"].skill.cost_trials == 2
    assert a.skill.waste_usd == pytest.approx(1.0)


def test_missing_fills_bounds() -> None:
    obs = build({"a": ("PPU", "PFT"), "b": ("PFF", "PPF")})
    a = analyze(obs, POINT)
    # worst case for the skill: its truncated trial fails, the baseline's unknown passes
    assert a.worst_case.skill_rate == pytest.approx(3 / 6)
    assert a.worst_case.baseline_rate == pytest.approx(4 / 6)
    assert a.best_case.skill_rate == pytest.approx(4 / 6)
    assert a.best_case.baseline_rate == pytest.approx(3 / 6)
    assert a.worst_case.paired.mean == pytest.approx(((1 / 3 - 1) + (2 / 3 - 1 / 3)) / 2)


def test_one_run_per_arm_gives_mcnemar_and_newcombe() -> None:
    spec: dict[str, tuple[str, str]] = {}
    for i in range(14):
        spec[f"both{i}"] = ("P", "P")
    for i in range(5):
        spec[f"skill{i}"] = ("F", "P")
    for i in range(22):
        spec[f"none{i}"] = ("F", "F")
    a = analyze(build(spec), POINT)
    assert a.paired_table is not None
    t = a.paired_table
    assert (t.both_pass, t.skill_only, t.baseline_only, t.both_fail) == (14, 5, 0, 22)
    assert t.mcnemar_p == pytest.approx(2 / 32)
    assert round(t.newcombe.difference, 3) == 0.122
    assert round(t.newcombe.interval.low, 4) == 0.0115
    assert round(t.newcombe.interval.high, 4) == 0.2265


def test_mde_falls_back_to_default_without_variance() -> None:
    a = analyze(build(spec_from([3, 3, 3], [3, 3, 3])), POINT)
    assert a.mde_source == "default"
    assert a.mde == pytest.approx(stats.mde(3, 3))


def test_cost_ratio_and_per_pass_in_analysis() -> None:
    a = analyze(build(CLEAR_WIN, skill_cost=2.0), POINT)
    assert a.cost.ratio == pytest.approx(2.0)
    assert a.cost.interval.low == pytest.approx(2.0)
    assert a.baseline.mean_cost_per_trial == pytest.approx(1.0)
    assert a.skill.cost_per_pass == pytest.approx(36 / 13)


# ------------------------------------------------------------------------------- rules


def test_point_and_interval_adopt_clear_win() -> None:
    a = analyze(build(CLEAR_WIN), POINT)
    r = decide(a, POINT, ctx())
    assert r.verdict == "adopt"
    assert r.codes == (ReasonCode.SKILL_BETTER, ReasonCode.COST_OK, ReasonCode.MDE_LARGE)
    assert r.point_verdict == "adopt"
    assert r.interval_verdict == "adopt"
    assert r.evidence == "supported"
    ri = decide(a, INTERVAL, ctx())
    assert ri.verdict == "adopt"
    assert ReasonCode.GAIN_SIGNIFICANT in ri.codes


def test_point_and_interval_reject_clear_loss() -> None:
    a = analyze(build(CLEAR_LOSS), POINT)
    r = decide(a, POINT, ctx())
    assert r.verdict == "reject"
    assert ReasonCode.NOT_BETTER in r.codes
    assert r.evidence == "contradicted"
    ri = decide(a, INTERVAL, ctx())
    assert ri.verdict == "reject"
    assert ReasonCode.GAIN_BELOW_MINIMUM in ri.codes


def test_point_rule_ties_reject() -> None:
    a = analyze(build(spec_from([1, 2, 1], [2, 1, 1])), POINT)
    r = decide(a, POINT, ctx())
    assert r.verdict == "reject"
    assert ReasonCode.NOT_BETTER in r.codes


def test_noisy_win_point_adopts_interval_inconclusive() -> None:
    a = analyze(build(NOISY_WIN6), POINT)
    assert decide(a, POINT, ctx()).verdict == "adopt"
    assert decide(analyze(build(NOISY_WIN), POINT), POINT, ctx()).verdict == "inconclusive"  # 4 tasks < 6
    r = decide(a, INTERVAL, ctx())
    assert r.verdict == "inconclusive"
    assert r.point_verdict == "adopt"
    assert r.interval_verdict == "inconclusive"
    assert r.evidence == "not distinguishable from noise"
    under = [x for x in r.reasons if x.code == ReasonCode.UNDERPOWERED]
    assert len(under) == 1
    assert "MDE" in under[0].message


def test_cost_too_high_rejects_under_both_rules() -> None:
    a = analyze(build(CLEAR_WIN, skill_cost=2.0), POINT)
    r = decide(a, POINT, ctx())
    assert r.verdict == "reject"
    assert ReasonCode.SKILL_BETTER in r.codes
    assert ReasonCode.COST_TOO_HIGH in r.codes
    assert decide(a, INTERVAL, ctx()).verdict == "reject"


def test_cost_exactly_at_limit_is_allowed() -> None:
    a = analyze(build(CLEAR_WIN, skill_cost=1.5), POINT)
    assert decide(a, POINT, ctx()).verdict == "adopt"


def test_interval_rule_cost_uncertain_is_inconclusive() -> None:
    obs: list[Observation] = []
    for i, (base_pass, skill_pass) in enumerate(zip([0, 1, 2, 1, 0, 2], [2, 2, 3, 2, 1, 3], strict=True)):
        obs += arm_obs(f"t{i}", "baseline", codes_of(base_pass), 1.0)
        obs += arm_obs(f"t{i}", "skill", codes_of(skill_pass), 1.0 if i % 2 else 2.2)
    a = analyze(obs, INTERVAL)
    assert a.cost.interval.low < 1.5 < a.cost.interval.high
    r = decide(a, INTERVAL, ctx())
    assert r.verdict == "inconclusive"
    assert ReasonCode.COST_UNCERTAIN in r.codes
    assert ReasonCode.GAIN_SIGNIFICANT in r.codes


def test_interval_rule_small_certain_gain_rejects() -> None:
    # 1000 runs per task: the gain is certainly > 0 but certainly below the 5-point minimum.
    base = [500] * 6
    skill = [525, 524, 526, 525, 525, 525]
    a = analyze(build(spec_from(base, skill, n=1000)), INTERVAL)
    assert a.paired.interval.low > 0
    assert a.paired.interval.high < 0.05
    r = decide(a, INTERVAL, ctx(runs=1000))
    assert r.verdict == "reject"
    assert ReasonCode.GAIN_SIGNIFICANT in r.codes
    assert ReasonCode.GAIN_BELOW_MINIMUM in r.codes


# ------------------------------------------------------------------ always-inconclusive


def test_budget_stop_is_inconclusive() -> None:
    a = analyze(build(CLEAR_WIN), POINT)
    r = decide(a, POINT, ctx(budget_stopped=True))
    assert r.verdict == "inconclusive"
    assert ReasonCode.BUDGET_STOPPED in r.codes
    assert r.point_verdict == "adopt"  # still shown


def test_unbalanced_arms_are_inconclusive() -> None:
    spec = dict(CLEAR_WIN)
    spec["t0"] = ("FFF", "PP")  # skill ran one trial fewer on t0
    a = analyze(build(spec), POINT)
    r = decide(a, POINT, ctx())
    assert r.verdict == "inconclusive"
    assert ReasonCode.UNBALANCED in r.codes
    assert ReasonCode.INCOMPLETE in r.codes
    unbalanced = next(x for x in r.reasons if x.code == ReasonCode.UNBALANCED)
    assert "t0 (3 vs 2)" in unbalanced.message


def test_planned_task_without_results_is_incomplete() -> None:
    a = analyze(build(CLEAR_WIN), POINT)
    planned = frozenset([*CLEAR_WIN, "never_ran"])
    r = decide(a, POINT, ctx(planned_task_ids=planned))
    assert r.verdict == "inconclusive"
    assert ReasonCode.INCOMPLETE in r.codes
    assert ReasonCode.UNBALANCED not in r.codes


def test_trials_beyond_the_plan_are_inconclusive() -> None:
    a = analyze(build(CLEAR_WIN), POINT)
    r = decide(a, POINT, ctx(runs=2))
    assert ReasonCode.UNPLANNED_TRIALS in r.codes
    assert r.verdict == "inconclusive"


def test_too_many_missing_is_inconclusive() -> None:
    spec = dict(CLEAR_WIN)
    spec["t2"] = ("PPF", "UUU")
    spec["t3"] = ("PFF", "PUF")
    a = analyze(build(spec), POINT)
    assert a.skill.missing_share == pytest.approx(4 / 18)
    r = decide(a, POINT, ctx())
    assert r.verdict == "inconclusive"
    assert ReasonCode.TOO_MANY_MISSING in r.codes
    relaxed = DecisionSettings(rule="point", max_missing_share=0.25)
    assert ReasonCode.TOO_MANY_MISSING not in decide(a, relaxed, ctx()).codes


def test_missing_sensitive_flip() -> None:
    # baseline 9/17 (+1 unknown) vs skill 10/18: adopt as observed; filling the
    # unknown as a baseline pass gives 10/18 vs 10/18, a tie, which rejects.
    spec = spec_from([1, 2, 1, 2, 1, 2], [2, 2, 1, 2, 1, 2])
    spec["t0"] = ("PFU", spec["t0"][1])
    a = analyze(build(spec), POINT)
    assert fmt.rate_with_excluded(a.baseline) == "9/17 (+1 unknown)"
    assert fmt.rate(a.skill) == "10/18"
    assert a.worst_case.baseline_rate == pytest.approx(10 / 18)
    r = decide(a, POINT, ctx())
    assert r.point_verdict == "adopt"
    assert r.verdict == "inconclusive"
    assert ReasonCode.MISSING_SENSITIVE in r.codes
    assert ReasonCode.TOO_MANY_MISSING not in r.codes
    better = next(x for x in r.reasons if x.code == ReasonCode.SKILL_BETTER)
    assert better.message == "skill pass rate 55.6% (10/18) > baseline 52.9% (9/17, +1 unknown)"


def test_no_missing_means_not_sensitive() -> None:
    r = decide(analyze(build(NOISY_WIN), POINT), POINT, ctx())
    assert ReasonCode.MISSING_SENSITIVE not in r.codes


def test_too_few_tasks_is_inconclusive_without_crashing() -> None:
    a = analyze(build({"only": ("FFF", "PPP")}), POINT)
    assert a.paired.interval == stats.Interval(-1.0, 1.0)  # no variance estimate: the whole range, clipped
    assert a.mde == math.inf
    r = decide(a, POINT, ctx())
    assert r.point_verdict == "adopt"
    assert r.verdict == "inconclusive"
    assert ReasonCode.TOO_FEW_TASKS in r.codes
    assert decide(a, INTERVAL, ctx()).verdict == "inconclusive"


def test_empty_arm_is_inconclusive() -> None:
    a = analyze(arm_obs("a", "baseline", "PPP") + arm_obs("b", "baseline", "PFF"), POINT)
    r = decide(a, POINT, ctx())
    assert r.point_verdict is None
    assert r.verdict == "inconclusive"
    assert ReasonCode.NO_VALID_TRIALS in r.codes
    assert ReasonCode.UNBALANCED in r.codes


def test_pooled_and_task_weighted_disagree() -> None:
    # pooled: skill 7/9 < baseline 6/7; task-weighted: +1/9
    spec = {"a": ("FUU", "PFF"), "b": ("PPP", "PPP"), "c": ("PPP", "PPP")}
    settings = DecisionSettings(rule="point", max_missing_share=0.5)
    a = analyze(build(spec), settings)
    assert a.pooled_difference is not None
    assert a.pooled_difference < 0
    assert a.paired.mean == pytest.approx(1 / 9)
    r = decide(a, settings, ctx())
    assert ReasonCode.POOLED_TASK_DISAGREE in r.codes
    assert r.verdict == "inconclusive"


# ---------------------------------------------------------------------------- invalid


def test_provenance_mismatch_between_arms_is_invalid() -> None:
    other = {**PROV, "model": "opus"}
    a = analyze(build(CLEAR_WIN), POINT)
    r = decide(a, POINT, ctx(provenance_by_arm=provenance_by_arm(PROV, other)))
    assert r.verdict == "invalid"
    mism = [x for x in r.reasons if x.code == ReasonCode.PROVENANCE_MISMATCH]
    assert len(mism) == 1
    assert mism[0].message.startswith("model differs between arms")
    assert "opus" in mism[0].message


def test_provenance_mismatch_within_an_arm_is_invalid_and_beats_inconclusive() -> None:
    p1 = {"model": "sonnet", "image_digest": "sha256:aaa"}
    p2 = {"model": "sonnet", "image_digest": "sha256:bbb"}
    a = analyze(build(CLEAR_WIN), POINT)
    r = decide(a, POINT, ctx(budget_stopped=True, provenance_by_arm={"baseline": [p1], "skill": [p1, p2]}))
    assert r.verdict == "invalid"
    assert ReasonCode.BUDGET_STOPPED in r.codes  # every reason is kept
    mism = next(x for x in r.reasons if x.code == ReasonCode.PROVENANCE_MISMATCH)
    assert "image_digest differs within skill" in mism.message


def test_unknown_provenance_values_are_not_compared() -> None:
    p1 = {"model": "sonnet", "resolved_model": None}
    p2 = {"model": "sonnet", "resolved_model": "claude-sonnet-x"}
    a = analyze(build(CLEAR_WIN), POINT)
    assert decide(a, POINT, ctx(provenance_by_arm={"baseline": [p1], "skill": [p2]})).verdict == "adopt"


# ----------------------------------------------------------------------------- records


def record(
    trial: str,
    task: str,
    arm: Arm,
    *,
    status: TrialStatus = "completed",
    attempt: int = 1,
    verify: int | None = 0,
    judge: JudgeVerdict | None = "pass",
    cost: float = 0.5,
    model: str = "sonnet",
    cli: str = "2.1.0",
    resolved: str | None = "claude-sonnet",
) -> TrialRecord:
    prov = provenance(
        lock_hash="lock",
        base_sha="a" * 40,
        model=model,
        cli_version=cli,
        image_digest="sha256:img",
        prompt_template_sha256="tmpl",
    )
    return trial_record(
        experiment_id="exp",
        trial_id=trial,
        task_id=task,
        arm=arm,
        attempt=attempt,
        provenance=prov,
        status=status,
        agent=AgentResult(num_turns=7, cost_usd=cost, duration_ms=42_000, resolved_model=resolved),
        verify=VerifyResult(exit_code=verify) if verify is not None else None,
        judge=JudgeResult(verdict=judge) if judge is not None else None,
    )


def test_observations_from_records_last_attempt_wins() -> None:
    recs = [
        record("t1.baseline.0", "t1", "baseline", status="infra_error", attempt=1, cost=0.1, verify=None, judge=None),
        record("t1.baseline.0", "t1", "baseline", attempt=2, cost=0.5),
        record("t1.skill.0", "t1", "skill", judge=None),  # judge never answered -> unknown
        record("t2.skill.0", "t2", "skill", verify=1),  # verify failed -> fail whatever the judge says
    ]
    obs = observations_from_records(recs, "verify_and_judge")
    by_trial = {(o.task_id, o.arm): o for o in obs}
    assert len(obs) == 3
    base = by_trial[("t1", "baseline")]
    assert base.outcome == "pass"
    assert base.infra_retries == 1
    assert base.infra_retry_cost_usd == pytest.approx(0.1)
    assert base.turns == 7
    assert base.duration_s == pytest.approx(42.0)
    assert by_trial[("t1", "skill")].outcome == "unknown"
    assert by_trial[("t2", "skill")].outcome == "fail"
    # under the verify-only rule the missing judge no longer matters
    verify_only = {(o.task_id, o.arm): o for o in observations_from_records(recs, "verify")}
    assert verify_only[("t1", "skill")].outcome == "pass"
    a = analyze(obs, POINT)
    assert a.baseline.infra_attempts == 1
    assert a.baseline.waste_usd == pytest.approx(0.1)
    assert a.baseline.infra == 0


def test_context_from_records_detects_model_drift_and_ignores_infra() -> None:
    recs = [
        record("t1.baseline.0", "t1", "baseline"),
        record("t1.skill.0", "t1", "skill"),
        # an infra attempt with a garbled version produced no outcome: not compared
        record("t2.skill.0", "t2", "skill", status="infra_error", cli="", verify=None, judge=None),
    ]
    c = context_from_records(recs, planned_runs_per_arm=1, budget_stopped=False)
    a = analyze(observations_from_records(recs, "verify_and_judge"), POINT)
    assert ReasonCode.PROVENANCE_MISMATCH not in decide(a, POINT, c).codes
    drift = [*recs, record("t3.skill.0", "t3", "skill", resolved="claude-sonnet-next")]
    c2 = context_from_records(drift, planned_runs_per_arm=1, budget_stopped=True)
    r = decide(a, POINT, c2)
    assert r.verdict == "invalid"
    assert any(x.message.startswith("resolved_model differs within skill") for x in r.reasons)
    assert c2.budget_stopped


def test_observation_validation() -> None:
    with pytest.raises(ValueError, match="arm"):
        Observation("t", "control", "pass", 0.0, None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outcome"):
        Observation("t", "skill", "maybe", 0.0, None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cost_usd"):
        Observation("t", "skill", "pass", math.nan, None, None)


# ------------------------------------------------------------------------- curtailment

CURTAIL = DecisionSettings(rule="point", early_stop="curtail", max_missing_share=0.5, max_infra_imbalance=1.0)
"""Caps loose enough that the remaining trials ending missing or infra cannot trip those gates here
(test_decision_gaming covers the gates)."""


def remaining(pairs: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {"baseline": {}, "skill": {}}
    for arm, task, n in pairs:
        out[arm][task] = n
    return out


def test_curtailment_rejects_when_the_gap_cannot_close() -> None:
    obs = build({"A": ("PPP", "FFF"), "B": ("PP", "F")})
    rem = remaining([("baseline", "B", 1), ("skill", "B", 2)])
    # best case for the skill: 2/6 = .33; worst case for the baseline: 5/6
    assert curtailment(analyze(obs, CURTAIL), rem, CURTAIL) == "reject"


def test_curtailment_rejects_a_certain_tie() -> None:
    obs = build({"A": ("PPF", "PF"), "B": ("PF", "PF")})
    rem = remaining([("skill", "A", 1)])
    # at best the skill ties the baseline at 3/5, and ties reject (one task alone would be too few)
    assert curtailment(analyze(obs, CURTAIL), rem, CURTAIL) == "reject"


def test_curtailment_waits_while_the_comparison_can_change() -> None:
    obs = build({"A": ("PF", "PP")})
    rem = remaining([("baseline", "A", 1), ("skill", "A", 1)])
    # skill worst 2/3 is not above baseline best 2/3
    assert curtailment(analyze(obs, CURTAIL), rem, CURTAIL) is None


def test_curtailment_adopts_only_when_cost_is_settled() -> None:
    obs = build({**{t: ("FFF", "PPP") for t in "ACDEF"}, "B": ("FF", "PP")})
    rem = remaining([("baseline", "B", 1), ("skill", "B", 1)])
    # the pass-rate comparison is settled (17/18 vs 1/18) but a remaining skill trial could cost anything
    assert curtailment(analyze(obs, CURTAIL), rem, CURTAIL) is None
    # with a hard cap of $3 per trial the worst cost ratio is (5 + 5/3) / (5 + 2/3) = 1.18 <= 1.5
    assert curtailment(analyze(obs, CURTAIL), rem, CURTAIL, max_cost_per_trial=3.0) == "adopt"
    # with $30: skill task B could reach (2 + 30)/3, ratio (5 + 32/3) / (5 + 2/3) = 2.8 > 1.5
    assert curtailment(analyze(obs, CURTAIL), rem, CURTAIL, max_cost_per_trial=30.0) is None
    # fewer than 6 paired tasks: adoption is refused, so it is never certified
    few = build({"A": ("FFF", "PPP"), "B": ("FF", "PP")})
    assert curtailment(analyze(few, CURTAIL), rem, CURTAIL, max_cost_per_trial=1.0) is None


def test_curtailment_rejects_on_cost_alone() -> None:
    obs = build({"A": ("FFF", "PPP"), "B": ("FFF", "PP")}, skill_cost=2.0)
    rem = remaining([("skill", "B", 1)])
    # even a free last skill trial leaves the ratio at (2 + 4/3) / 2 = 1.67 > 1.5
    assert curtailment(analyze(obs, CURTAIL), rem, CURTAIL) == "reject"


def test_curtailment_is_for_the_point_rule_only() -> None:
    obs = build({"A": ("PPP", "FFF"), "B": ("PP", "F")})
    rem = remaining([("baseline", "B", 1), ("skill", "B", 2)])
    assert curtailment(analyze(obs, CURTAIL), rem, DecisionSettings(rule="interval", early_stop="curtail")) is None


def test_remaining_trials_helper() -> None:
    a = analyze(build({"A": ("PPP", "FFF"), "B": ("PP", "F")}), CURTAIL)
    assert remaining_trials(a, 3) == {"baseline": {"A": 0, "B": 1}, "skill": {"A": 0, "B": 2}}
    assert remaining_trials(a, 3, ["A", "B", "C"])["skill"]["C"] == 3


def test_decide_accepts_a_certified_early_stop() -> None:
    obs = build({"A": ("PPP", "FFF"), "B": ("PP", "F"), "C": ("PPP", "FFF")})
    a = analyze(obs, CURTAIL)
    r = decide(a, CURTAIL, ctx(early_stopped=True))
    assert r.verdict == "reject"
    assert r.early_stop_verdict == "reject"
    assert ReasonCode.EARLY_STOPPED in r.codes
    assert ReasonCode.UNBALANCED not in r.codes
    assert ReasonCode.INCOMPLETE not in r.codes


def test_decide_refuses_an_unplanned_or_uncertified_early_stop() -> None:
    obs = build({"A": ("PPP", "FFF"), "B": ("PP", "F"), "C": ("PPP", "FFF")})
    a = analyze(obs, POINT)
    r = decide(a, POINT, ctx(early_stopped=True))  # early_stop="none" was preregistered
    assert r.verdict == "inconclusive"
    assert ReasonCode.EARLY_STOP_UNSUPPORTED in r.codes
    assert ReasonCode.UNBALANCED in r.codes
    close = build({"A": ("PF", "PP"), "B": ("PF", "PP")})
    r2 = decide(analyze(close, CURTAIL), CURTAIL, ctx(early_stopped=True))
    assert r2.verdict == "inconclusive"
    assert ReasonCode.EARLY_STOP_UNSUPPORTED in r2.codes
