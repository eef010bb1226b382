"""Issue 12: decisions that cannot be gamed (defaults, infra forgery, small samples, curtailment, cost CI)."""

from __future__ import annotations

import math
import random

import pytest

from harness.analysis import stats
from harness.analysis.curtail import early_stop_verdict
from harness.analysis.decide import decide, judge_independence_warning
from harness.analysis.estimates import analyze
from harness.analysis.observations import DecisionContext, Observation, observations_from_records
from harness.analysis.reasons import ReasonCode
from harness.records import TrialRecord, TrialStatus
from harness.study.config import DecisionSettings
from tests.factories import provenance, trial_record
from tests.unit.test_decision import INTERVAL, POINT, PROV, arm_obs, build, ctx, spec_from

# ------------------------------------------------------------------- 1. honest defaults


def test_the_interval_rule_is_the_default_and_the_point_rule_is_kept_by_name() -> None:
    assert DecisionSettings().rule == "interval"
    assert DecisionSettings(rule="point").rule == "point"


def test_a_point_only_adoption_is_labelled_amber_not_plain_adopt() -> None:
    # Four tasks, a noisy win: the point rule adopts, the interval rule does not.
    spec = spec_from([1, 2, 1, 1, 1, 2], [2, 1, 2, 1, 2, 2])
    r = decide(analyze(build(spec), POINT), POINT, ctx())
    assert r.verdict == "adopt" and r.interval_verdict != "adopt"
    assert r.point_only_adopt
    assert r.label == "adopt by the point rule; not distinguishable from noise"
    assert any(x.code == ReasonCode.ADOPT_NOT_DISTINGUISHABLE for x in r.reasons)


def test_a_clear_adoption_has_no_amber_label() -> None:
    spec = spec_from([0] * 8, [3] * 8)
    r = decide(analyze(build(spec), POINT), POINT, ctx())
    assert r.verdict == "adopt" and r.interval_verdict == "adopt"
    assert not r.point_only_adopt and r.label == "adopt"


# ------------------------------------------------------------------ 2. infra forgery


def _infra_obs(task: str, arm: str, n: int, reached: bool) -> list[Observation]:
    return [Observation(task, arm, "infra", 0.1, None, None, reached_model=reached) for _ in range(n)]  # type: ignore[arg-type]


def _forgery(outcome_code: str, reached: bool = True) -> list[Observation]:
    """Ten tasks; the baseline passes 1 of 3 everywhere; the skill passes 2 of 3 but its third trial is
    the one it 'failed': as a fail, an unknown, or a forged infra error."""
    obs: list[Observation] = []
    for i in range(10):
        t = f"t{i}"
        obs += arm_obs(t, "baseline", "PFF")
        obs += arm_obs(t, "skill", "PP" if i % 2 else "PF")
        if outcome_code == "I":
            obs += _infra_obs(t, "skill", 1, reached)
        else:
            obs += arm_obs(t, "skill", outcome_code)
    return obs


def test_infra_after_reaching_the_model_counts_like_unknown() -> None:
    settings = DecisionSettings(rule="point", max_infra_imbalance=1.0)
    as_unknown = decide(analyze(_forgery("U"), settings), settings, ctx())
    as_infra = decide(analyze(_forgery("I"), settings), settings, ctx())
    assert as_infra.verdict == as_unknown.verdict != "adopt"
    a = analyze(_forgery("I"), settings)
    assert a.skill.missing == 10 and a.skill.infra == 10


def test_infra_before_reaching_the_model_stays_excluded() -> None:
    a = analyze(_forgery("I", reached=False), POINT)
    assert a.skill.missing == 0 and a.skill.infra == 10


def test_an_infra_imbalance_between_arms_is_inconclusive_with_its_own_reason() -> None:
    settings = DecisionSettings(rule="point", max_missing_share=1.0, max_infra_imbalance=0.1)
    r = decide(analyze(_forgery("I", reached=False), settings), settings, ctx(runs=3))
    assert r.verdict == "inconclusive"
    assert ReasonCode.INFRA_IMBALANCE in r.codes
    assert DecisionSettings().max_infra_imbalance == pytest.approx(0.1)
    # positive control: the same data under a looser preregistered cap has no imbalance reason
    loose = DecisionSettings(rule="point", max_missing_share=1.0, max_infra_imbalance=0.5)
    assert (
        ReasonCode.INFRA_IMBALANCE not in decide(analyze(_forgery("I", reached=False), loose), loose, ctx(runs=3)).codes
    )


def test_records_set_reached_model_from_the_gateway_meter() -> None:
    from harness.records import GatewayMeter

    prov = provenance(lock_hash="l", base_sha="b", model="m", judge_model="j", cli_version="c",
                      image_digest="i", prompt_template_sha256="p", harness_version="h")  # fmt: skip

    def rec(tid: str, forwarded: int) -> TrialRecord:
        return trial_record(trial_id=tid, task_id="t", attempt=3, provenance=prov, status="infra_error",
                            started_at="x", finished_at="y",
                            gateway=GatewayMeter(requests=forwarded, forwarded=forwarded))  # fmt: skip

    obs = observations_from_records([rec("a", 2), rec("b", 0)], "verify_and_judge")
    assert [o.reached_model for o in obs] == [True, False]


# ------------------------------------------------------------------ 3. small samples


def test_the_paired_interval_has_a_variance_floor() -> None:
    # Two tasks, one run each, both improved: sd(d) = 0 collapsed the interval to a point.
    a = analyze(build(spec_from([0, 0], [1, 1], n=1)), INTERVAL)
    assert a.paired.interval.low < 0 < a.paired.interval.high
    assert a.paired.floored


def test_adoption_is_refused_below_six_tasks() -> None:
    a = analyze(build(spec_from([0] * 5, [3] * 5)), INTERVAL)
    assert decide(a, INTERVAL, ctx()).verdict != "adopt"
    rp = decide(analyze(build(spec_from([0] * 5, [3] * 5)), POINT), POINT, ctx())
    assert rp.verdict == "inconclusive"
    assert ReasonCode.TOO_FEW_TASKS_TO_ADOPT in rp.codes
    six = decide(analyze(build(spec_from([0] * 6, [3] * 6)), POINT), POINT, ctx())
    assert six.verdict == "adopt"


def test_below_ten_tasks_the_interval_rule_needs_an_exact_sign_flip() -> None:
    # Seven tasks: six improve by 2/3, one worsens by 1/3: p(sign flip) = 4/128 = 0.03125 passes;
    # with two worse tasks p = 0.109 > 0.05 even if the interval clears 0.
    ok = spec_from([0, 0, 0, 0, 0, 0, 2], [2, 2, 2, 2, 2, 2, 1])
    r = decide(analyze(build(ok), INTERVAL), INTERVAL, ctx())
    assert r.verdict == "adopt"
    # Six tasks whose t-interval (with the floor) clears 0 but whose exact sign-flip p is 6/64 = 0.094.
    p_needed = analyze(build(spec_from([1, 0, 0, 0, 1, 0], [3, 3, 2, 2, 0, 1])), INTERVAL)
    assert p_needed.paired.interval.low > 0
    r2 = decide(p_needed, INTERVAL, ctx())
    assert p_needed.sign_flip.p_value is not None and p_needed.sign_flip.p_value > 0.05
    assert r2.interval_verdict != "adopt"
    assert ReasonCode.SIGN_FLIP_REQUIRED in r2.codes


def test_displayed_difference_intervals_are_clipped_to_plus_minus_100_points() -> None:
    a = analyze(build(spec_from([0, 0], [3, 0])), INTERVAL)
    assert a.paired.interval.low >= -1.0 and a.paired.interval.high <= 1.0


def test_a_design_that_cannot_show_any_effect_says_so() -> None:
    r = decide(analyze(build(spec_from([1, 1, 1], [2, 2, 1], n=3)), INTERVAL), INTERVAL, ctx())
    assert ReasonCode.MDE_IMPOSSIBLE in r.codes


def test_small_suites_do_not_reject_a_large_true_gain_often() -> None:
    """A +24-point skill at 3-5 tasks x 3 runs was rejected 11-23% of the time; now rarely."""
    rng = random.Random(12)
    shift = 1.25  # about +24 points mean gain on Beta(.5,.5) difficulty
    rejects = 0
    reps = 300
    for _ in range(reps):
        obs: list[Observation] = []
        for t in range(4):
            p = min(1 - 1e-9, max(1e-9, math.sin(rng.random() * math.pi / 2) ** 2))
            ps = 1 / (1 + math.exp(-(math.log(p / (1 - p)) + shift)))
            for arm, q in (("baseline", p), ("skill", ps)):
                for _ in range(3):
                    obs.append(Observation(f"t{t}", arm, "pass" if rng.random() < q else "fail", 1.0))  # type: ignore[arg-type]
        rejects += decide(analyze(obs, INTERVAL), INTERVAL, ctx()).verdict == "reject"
    assert rejects / reps < 0.05


# ------------------------------------------------------------------ 4. early stop


def _null_run(rng: random.Random, tasks: int, runs: int, unknown: float) -> list[Observation]:
    """One null experiment in a shuffled plan order (both arms p = task difficulty, 15% unknown)."""
    obs: list[Observation] = []
    for t in range(tasks):
        p = rng.random()
        for arm in ("baseline", "skill"):
            for _ in range(runs):
                out = "unknown" if rng.random() < unknown else "pass" if rng.random() < p else "fail"
                obs.append(Observation(f"t{t}", arm, out, 0.5 + 0.5 * rng.random()))  # type: ignore[arg-type]
    rng.shuffle(obs)
    return obs


def test_curtailment_never_changes_the_final_verdict_under_unknowns() -> None:
    """Null runs at 10 x 3 with 15% unknowns, curtailment checked after every trial: whenever it stops,
    the decision on the stopped data equals the decision the full plan gives (5% differed before)."""
    settings = DecisionSettings(rule="point", early_stop="curtail")
    rng = random.Random(20261201)
    tasks, runs, cap = 10, 3, 1.0
    ids = [f"t{i}" for i in range(tasks)]
    full_ctx = ctx(runs=runs, planned_task_ids=frozenset(ids), max_cost_per_trial=cap)
    stop_ctx = ctx(runs=runs, planned_task_ids=frozenset(ids), max_cost_per_trial=cap, early_stopped=True)
    stopped = differ = 0
    for _ in range(60):
        obs = _null_run(rng, tasks, runs, 0.15)
        final = decide(analyze(obs, settings), settings, full_ctx).verdict
        for i in range(2 * tasks, len(obs)):
            a = analyze(obs[:i], settings)
            verdict, _ = early_stop_verdict(a, settings, runs, ids, max_cost_per_trial=cap)
            if verdict is not None:
                stopped += 1
                got = decide(a, settings, stop_ctx).verdict
                differ += got != final or verdict != final
                break
    assert differ == 0, f"{differ} of {stopped} early stops changed the verdict"


# ------------------------------------------------------------------- 5. cost ratio


def test_cost_ratio_interval_is_fieller() -> None:
    s = [1.0, 2.0, 1.5, 3.0, 2.2]
    b = [1.1, 1.7, 1.2, 2.5, 2.0]
    cr = stats.cost_ratio(s, b)
    n = len(s)
    ms, mb = sum(s) / n, sum(b) / n
    vs = sum((x - ms) ** 2 for x in s) / (n - 1) / n
    vb = sum((x - mb) ** 2 for x in b) / (n - 1) / n
    cv = sum((x - ms) * (y - mb) for x, y in zip(s, b, strict=True)) / (n - 1) / n
    t2 = stats.t_quantile(0.975, n - 1) ** 2
    qa, qb, qc = mb * mb - t2 * vb, -2 * (ms * mb - t2 * cv), ms * ms - t2 * vs
    root = math.sqrt(qb * qb - 4 * qa * qc)
    assert cr.interval.low == pytest.approx((-qb - root) / (2 * qa))
    assert cr.interval.high == pytest.approx((-qb + root) / (2 * qa))
    assert cr.method == "fieller"


def test_cost_ratio_coverage_is_at_least_nominal_by_simulation() -> None:
    rng = random.Random(5)
    hits = 0
    reps = 1500
    for _ in range(reps):
        s, b = [], []
        for _ in range(10):
            tc = math.exp(rng.gauss(math.log(0.3), 0.5))
            b.append(sum(tc * math.exp(rng.gauss(0, 0.3)) for _ in range(3)) / 3)
            s.append(sum(tc * 1.2 * math.exp(rng.gauss(0, 0.3)) for _ in range(3)) / 3)
        iv = stats.cost_ratio(s, b).interval
        hits += iv.low <= 1.2 <= iv.high
    assert hits / reps >= 0.945


def test_fieller_is_unbounded_when_the_baseline_mean_is_not_distinguishable_from_zero() -> None:
    cr = stats.cost_ratio([1.0, 1.0, 1.0], [0.01, 2.0, 0.01])
    assert math.isinf(cr.interval.high)


# ------------------------------------------------------------------ 8. judge independence


def test_judge_model_equal_to_executor_model_is_refused_or_warned() -> None:
    from harness.study.config import Execution

    with pytest.raises(ValueError):
        Execution(model="sonnet", judge_model="sonnet")
    assert judge_independence_warning("claude-sonnet-4-5", "sonnet") is not None
    assert judge_independence_warning("sonnet", "haiku") is None


_ = (DecisionContext, PROV)


# ------------------------------------------------------------ 6. duplicate attempts


def _record(tid: str, attempt: int, status: TrialStatus = "completed", exit_code: int = 0) -> TrialRecord:
    from harness.records import VerifyResult

    prov = provenance(lock_hash="l", base_sha="b", model="m", judge_model="j", cli_version="c",
                      image_digest="i", prompt_template_sha256="p", harness_version="h")  # fmt: skip
    return trial_record(trial_id=tid, task_id="t", attempt=attempt, provenance=prov, status=status,
                        started_at="x", finished_at="y", verify=VerifyResult(exit_code=exit_code))  # fmt: skip


def test_two_final_records_with_the_same_attempt_are_refused() -> None:
    from harness.results.attempts import DuplicateAttemptError, final_attempts

    fail, forged_pass = _record("x", 1, exit_code=1), _record("x", 1, exit_code=0)
    with pytest.raises(DuplicateAttemptError) as info:
        final_attempts([fail, forged_pass])
    assert "attempt 1" in str(info.value) and "x" in str(info.value)
    with pytest.raises(DuplicateAttemptError):
        observations_from_records([fail, forged_pass], "verify")
    # positive control: distinct attempts still resolve to the last one
    finals, earlier = final_attempts([_record("x", 1, "infra_error"), _record("x", 2)])
    assert [r.attempt for r in finals] == [2] and len(earlier["x"]) == 1


def test_the_gate_refuses_results_with_a_duplicated_attempt(tmp_path: object) -> None:
    from pathlib import Path

    from harness.errors import HarnessError
    from harness.results.load import read_records

    root = Path(str(tmp_path))
    line = _record("x", 1).model_dump_json()
    (root / "results.jsonl").write_text(line + "\n" + line + "\n")
    with pytest.raises(HarnessError, match="two records with attempt 1"):
        read_records(root)


# --------------------------------------------------------- 1. the amber label in every report

NOISY6 = {
    "t1": ("PFF", "PPF"), "t2": ("PPF", "PFF"), "t3": ("PFF", "PPF"),
    "t4": ("PFF", "PFF"), "t5": ("PFF", "PPF"), "t6": ("PPF", "PPF"),
}  # fmt: skip


def test_every_report_shows_the_point_only_adoption_in_amber(tmp_path: object) -> None:
    from pathlib import Path

    from harness.reporting import html as report_html
    from harness.reporting.decision_json import decision_json
    from harness.reporting.gate import gate
    from harness.reporting.markdown import markdown
    from harness.reporting.text import terminal_summary
    from tests import reportkit as kit
    from tests.factories import write_experiment

    r = kit.make_input(NOISY6, rule="point")
    assert r.decision.verdict == "adopt" and r.decision.point_only_adopt
    label = "adopt by the point rule; not distinguishable from noise"
    text = terminal_summary(r)
    assert label.upper() in text and "preregistered): ADOPT\n" not in text + "\n"
    md = markdown(r)
    assert label.upper() in md and "✅" not in md
    html = report_html.render(r)
    assert label[:1].upper() + label[1:] in html
    assert f'<header class="banner" style="background:{report_html.VERDICT_COLOURS["inconclusive"]}"' in html
    data = decision_json(r)
    assert data["label"] == label and data["point_only_adopt"] is True and data["verdict"] == "adopt"
    exp = write_experiment(Path(str(tmp_path)), NOISY6, rule="point")
    g = gate(exp)
    assert g.exit_code == 0 and g.line.startswith(label.upper())
    # positive control: a clear win keeps the plain green ADOPT
    clear = kit.make_input(kit.WIN, rule="point")
    assert not clear.decision.point_only_adopt and "✅" in markdown(clear)
