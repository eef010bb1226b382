"""harness.analysis.family: Holm's correction (against statsmodels) and the A/B/n family's verdict."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests  # dev extra, tests only: the independent Holm reference

from harness.analysis.decide import decide
from harness.analysis.estimates import analyze
from harness.analysis.family import Comparison, comparison_p_value, decide_family, holm, interval_p_value
from harness.analysis.reasons import ReasonCode
from harness.study.config import DecisionSettings
from tests.unit.test_decision import build, ctx, spec_from

INTERVAL = DecisionSettings(rule="interval")
POINT = DecisionSettings(rule="point")

# Published-style vectors: statsmodels' Holm adjustment of each, recomputed in the test (not pasted).
HOLM_VECTORS = [
    [0.01, 0.04, 0.03],
    [0.5, 0.9],
    [0.01, 0.01, 0.02, 0.5],  # ties
    [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205],  # Holm (1979)-style example, 8 hypotheses
    [0.2],
    [0.0, 1.0, 0.3],
    [0.04, 0.04, 0.04],
]


@pytest.mark.parametrize("p", HOLM_VECTORS)
def test_holm_matches_statsmodels(p: list[float]) -> None:
    reject, adjusted, _, _ = multipletests(p, alpha=0.05, method="holm")
    assert holm(p) == pytest.approx(list(adjusted), abs=1e-12)
    # and the decisions statsmodels takes at 5% are those adjusted <= alpha gives
    assert [q <= 0.05 for q in holm(p)] == list(reject)


def test_holm_matches_statsmodels_on_random_families() -> None:
    rng = random.Random(20261205)
    for _ in range(40):  # statsmodels takes about 0.1 s a call here
        m = rng.randint(1, 12)
        p = [rng.random() ** rng.choice([1, 3, 6]) for _ in range(m)]
        _, adjusted, _, _ = multipletests(p, method="holm")
        assert holm(p) == pytest.approx(list(adjusted), abs=1e-12)


def test_holm_of_nothing_is_nothing() -> None:
    assert holm([]) == []


def test_interval_p_value_is_the_t_test_of_the_rules_interval() -> None:
    # twelve tasks, spread wide enough that the variance floor does not apply: the interval's p equals
    # scipy's one-sample t-test on the per-task differences
    base = [0, 3, 0, 3, 0, 3, 1, 2, 0, 3, 0, 1]
    skill = [3, 3, 3, 0, 3, 3, 1, 3, 3, 3, 0, 2]
    a = analyze(build(spec_from(base, skill)), INTERVAL)
    d = [(s - b) / 3 for b, s in zip(base, skill, strict=True)]
    assert not a.paired.floored
    ref = scipy_stats.ttest_1samp(d, 0.0).pvalue
    assert interval_p_value(a.paired, 0.95) == pytest.approx(ref, rel=1e-9)
    # p < alpha exactly when the interval excludes 0, at another confidence too
    for conf in (0.9, 0.95, 0.99):
        b = analyze(build(spec_from(base, skill)), DecisionSettings(rule="interval", confidence=conf))
        assert (interval_p_value(b.paired, conf) < 1 - conf) == (b.paired.interval.low > 0)


def test_comparison_p_below_ten_tasks_takes_the_sign_flip_too() -> None:
    a = analyze(build(spec_from([0, 1, 2, 1, 0, 2], [2, 2, 3, 2, 1, 3])), INTERVAL)
    assert a.paired.n == 6
    assert a.sign_flip.p_value == pytest.approx(2 / 64)
    assert comparison_p_value(a) == pytest.approx(max(2 / 64, interval_p_value(a.paired, 0.95)))


def test_degenerate_intervals_give_p_1_or_0() -> None:
    one = analyze(build(spec_from([0], [3])), INTERVAL)
    assert interval_p_value(one.paired, 0.95) == 1.0  # one task: no variance estimate
    none = analyze(build({}), INTERVAL)
    assert interval_p_value(none.paired, 0.95) == 1.0


# ------------------------------------------------------------------------- the family


# 12 tasks, 3 runs: a strong variant, a weaker one (p = 0.021 alone: adopts at 5%, not at 5%/3), a null one
# and a worse one (vectors found by a seeded search over the rule's verdicts).
BASE = [0, 1, 2, 1, 0, 2, 1, 1, 0, 2, 1, 0]
STRONG = [2, 3, 3, 2, 2, 3, 2, 3, 2, 3, 2, 2]
WEAK = [0, 3, 3, 2, 1, 2, 1, 1, 2, 2, 3, 1]
NULL = [1, 1, 1, 1, 0, 2, 1, 1, 1, 2, 1, 0]
WORSE = [0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0]


def comparison(name: str, skill: list[int], settings: DecisionSettings = INTERVAL) -> Comparison:
    a = analyze(build(spec_from(BASE, skill)), settings)
    return Comparison(name, a, decide(a, settings, ctx()))


def test_weak_variant_adopts_alone_but_not_after_holm() -> None:
    weak = comparison("weak", WEAK)
    assert weak.decision.verdict == "adopt"
    p = comparison_p_value(weak.analysis)
    assert 0.05 / 3 < p < 0.05 / 2  # adopts alone, fails at the Holm step it lands on
    fam = decide_family([comparison("null", NULL), weak, comparison("worse", WORSE)], 0.95)
    m = fam.member("weak")
    assert m.own_verdict == "adopt" and m.verdict == "inconclusive"
    assert [r.code for r in m.reasons] == [ReasonCode.HOLM_NOT_SIGNIFICANT]
    assert fam.verdict == "inconclusive" and fam.adopted is None


def test_family_adopts_the_best_variant_when_it_survives_holm() -> None:
    fam = decide_family([comparison("weak", WEAK), comparison("strong", STRONG), comparison("null", NULL)], 0.95)
    assert fam.verdict == "adopt"
    assert fam.best == fam.adopted == "strong"
    raw = [fam.member(v).p_value for v in ("weak", "strong", "null")]
    _, ref, _, _ = multipletests(raw, method="holm")
    assert [fam.member(v).p_holm for v in ("weak", "strong", "null")] == pytest.approx(list(ref))


@pytest.mark.parametrize("settings", [INTERVAL, POINT], ids=["interval", "point"])
def test_family_with_one_variant_is_that_comparison(settings: DecisionSettings) -> None:
    """Version against version is a family of one: its verdict is the comparison's under either rule (the point
    rule adopts NULL on its own, p = 0.6: nothing corrects a single comparison)."""
    for skill in (STRONG, WEAK, NULL, WORSE):
        c = comparison("only", skill, settings)
        fam = decide_family([c], 0.95)
        assert fam.verdict == c.decision.verdict
        assert fam.member("only").p_holm == fam.member("only").p_value
    assert decide_family([comparison("only", NULL, POINT)], 0.95).verdict == "adopt"


def test_family_rejects_when_every_variant_is_rejected() -> None:
    worse = comparison("worse", WORSE)
    assert worse.decision.verdict == "reject"
    fam = decide_family([worse, comparison("worse2", WORSE)], 0.95)
    assert fam.verdict == "reject" and fam.best is None


def test_best_estimate_not_adopted_keeps_the_family_inconclusive() -> None:
    # "noisy" has the larger mean gain (+38.9 pp, p = 0.057) but "steady" (+27.8 pp, p = 0.017) is the one
    # the data tell apart from the baseline, and it survives Holm over two (0.035)
    n = comparison("noisy", [3, 3, 2, 3, 2, 0, 3, 3, 3, 0, 0, 3])
    s = comparison("steady", [1, 3, 2, 1, 0, 3, 3, 1, 0, 3, 3, 1])
    assert n.analysis.paired.mean is not None and s.analysis.paired.mean is not None
    assert n.analysis.paired.mean > s.analysis.paired.mean
    assert n.decision.verdict != "adopt"
    fam = decide_family([s, n], 0.95)
    assert fam.best == "noisy" and fam.adopted is None and fam.verdict == "inconclusive"
    assert ReasonCode.FAMILY_BEST_NOT_ADOPTED in [r.code for r in fam.reasons]
    assert fam.member("steady").verdict == "adopt"


def test_an_invalid_comparison_makes_the_family_invalid() -> None:
    a = analyze(build(spec_from(BASE, STRONG)), INTERVAL)
    from harness.analysis.observations import provenance_by_arm
    from tests.unit.test_decision import PROV

    broken = provenance_by_arm({**PROV, "model": "opus"})
    mixed = {"baseline": provenance_by_arm(PROV)["baseline"], "skill": broken["skill"]}
    bad = Comparison("bad", a, decide(a, INTERVAL, ctx(provenance_by_arm=mixed)))
    assert bad.decision.verdict == "invalid"
    fam = decide_family([comparison("strong", STRONG), bad], 0.95)
    assert fam.verdict == "invalid" and fam.adopted is None
    assert ReasonCode.FAMILY_MEMBER_INVALID in [r.code for r in fam.reasons]


def test_point_rule_adoption_needs_the_corrected_evidence_in_a_family() -> None:
    # the point rule adopts "null" alone (pooled 13/36 vs 11/36); in a family of two it must survive Holm
    c = comparison("null", NULL, POINT)
    assert c.decision.verdict == "adopt"
    fam = decide_family([c, comparison("worse", WORSE, POINT)], 0.95)
    assert fam.member("null").verdict == "inconclusive"
    assert fam.verdict == "inconclusive"


def test_repeated_or_empty_families_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        decide_family([], 0.95)
    with pytest.raises(ValueError, match="repeat"):
        decide_family([comparison("a", STRONG), comparison("a", WEAK)], 0.95)


def test_alpha_is_the_decimal_complement_of_confidence() -> None:
    fam = decide_family([comparison("strong", STRONG)], 0.9)
    assert math.isclose(fam.alpha, 0.1)
