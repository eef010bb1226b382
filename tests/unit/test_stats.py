"""harness.analysis.stats: the test vectors of docs/statistics.md#test-vectors, plus hand-computed cases."""

from __future__ import annotations

import math

import pytest

from harness.analysis import stats

# Student-t quantiles written out so the expected values below do not come from the code under test.
T2_975 = 4.302652729749462
T3_975 = 3.182446305283708
T3_80 = 0.9784723123633042
T19_975 = 2.093024054408309
T19_80 = 0.8609505502689286


def test_wilson_seven_of_ten() -> None:
    iv = stats.wilson_interval(7, 10)
    assert round(iv.low, 4) == 0.3968
    assert round(iv.high, 4) == 0.8922


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [(10, 10, 0.722, 1.000), (3, 3, 0.439, 1.000), (0, 10, 0.000, 0.278), (27, 30, 0.744, 0.965)],
)
def test_wilson_reference_values(k: int, n: int, low: float, high: float) -> None:
    iv = stats.wilson_interval(k, n)
    assert round(iv.low, 3) == low
    assert round(iv.high, 3) == high


def test_wilson_empty_and_invalid() -> None:
    assert stats.wilson_interval(0, 0) == stats.Interval(0.0, 1.0)
    with pytest.raises(ValueError, match="successes"):
        stats.wilson_interval(4, 3)


def test_wilson_confidence_changes_width() -> None:
    assert stats.wilson_interval(7, 10, 0.99).width > stats.wilson_interval(7, 10, 0.95).width


def test_t_interval_by_hand() -> None:
    values = [0.0, 1 / 3, 1 / 3, 2 / 3]
    # mean 1/3; deviations -1/3, 0, 0, +1/3 -> variance (2/9)/3 = 2/27
    sd = math.sqrt(2 / 27)
    half = T3_975 * sd / 2
    got = stats.t_interval(values)
    assert got.mean == pytest.approx(1 / 3)
    assert got.sd == pytest.approx(sd)
    assert got.n == 4
    assert got.df == 3
    assert got.interval.low == pytest.approx(1 / 3 - half)
    assert got.interval.high == pytest.approx(1 / 3 + half)
    assert round(got.interval.low, 4) == -0.0997
    assert round(got.interval.high, 4) == 0.7664


def test_paired_difference_drops_tasks_missing_an_arm() -> None:
    skill = [1 / 3, 2 / 3, 2 / 3, 1.0, None, 0.5]
    base = [1 / 3, 1 / 3, 1 / 3, 1 / 3, 0.5, None]
    got = stats.paired_difference(skill, base)
    assert got.n == 4
    assert got.dropped == 2
    assert got.mean == pytest.approx(1 / 3)  # same d_i as the hand case above
    assert got.interval.low == pytest.approx(1 / 3 - T3_975 * math.sqrt(2 / 27) / 2)


def test_paired_difference_degenerate_cases() -> None:
    one = stats.paired_difference([1.0], [0.0])
    assert one.mean == 1.0
    assert one.sd is None
    assert one.interval == stats.Interval(-math.inf, math.inf)
    flat = stats.paired_difference([0.25, 0.5, 1.0], [0.0, 0.25, 0.75])
    assert flat.sd == 0.0
    assert flat.interval == stats.Interval(0.25, 0.25)
    none = stats.paired_difference([None], [0.5])
    assert none.mean is None
    assert none.n == 0
    with pytest.raises(ValueError, match="same tasks"):
        stats.paired_difference([0.1], [0.1, 0.2])


def test_sign_flip_exact_small_cases() -> None:
    # 8 sign vectors of (0.5, 1, 0.5): sums 2,1,0,-1,1,0,-1,-2; |sum| >= 1 in 6 -> p = 0.75
    r = stats.sign_flip_test([0.5, 1.0, -0.5])
    assert r.p_value == 0.75
    assert r.method == "exact"
    assert r.flips == 8
    # all five tasks improve: only the all-plus and all-minus vectors are as extreme -> 2/32
    assert stats.sign_flip_test([1.0] * 5).p_value == 0.0625
    assert stats.sign_flip_test([0.0, 0.0]).p_value == 1.0
    assert stats.sign_flip_test([]).p_value is None


def test_sign_flip_thirds_are_exact() -> None:
    # rates with 3 runs differ by multiples of 1/3: float noise must not split equal sums
    d = [1 / 3, 2 / 3 - 1 / 3, -1 / 3, 1 - 2 / 3]
    # |d| all 1/3: observed sum 2/3; sums of 4 signs: |sum| >= 2/3 in 2 (all same) + 8 (three alike) = 10 of 16
    assert stats.sign_flip_test(d).p_value == 10 / 16


def test_sign_flip_exact_beyond_twenty_tasks_when_lattice() -> None:
    r = stats.sign_flip_test([1 / 3] * 25)
    assert r.method == "exact"
    assert r.p_value == pytest.approx(2 / 2**25)


def test_sign_flip_monte_carlo_matches_exact_and_is_seeded() -> None:
    d = [(-1) ** i * (i % 4 + 1) / 3 for i in range(24)] + [1.0, 1.0]
    exact = stats.sign_flip_test(d)
    assert exact.method == "exact"
    mc = stats.sign_flip_test(d, max_exact_states=8, seed=7)
    assert mc.method == "monte_carlo"
    assert mc.flips == 100_000
    assert exact.p_value is not None
    assert mc.p_value is not None
    assert abs(mc.p_value - exact.p_value) < 0.006  # ~4 Monte Carlo standard errors
    assert stats.sign_flip_test(d, max_exact_states=8, seed=7).p_value == mc.p_value


def test_mcnemar_exact() -> None:
    assert stats.mcnemar_exact(8, 2) == pytest.approx(0.109375)
    assert round(stats.mcnemar_exact(8, 2), 4) == 0.1094
    assert stats.mcnemar_exact(2, 8) == stats.mcnemar_exact(8, 2)
    assert stats.mcnemar_exact(6, 0) == pytest.approx(0.03125)  # smallest one-sided count below .05
    assert stats.mcnemar_exact(5, 0) == pytest.approx(0.0625)
    assert stats.mcnemar_exact(0, 0) == 1.0
    assert stats.mcnemar_exact(3, 3) == 1.0


def test_newcombe_altman_table_6_2() -> None:
    r = stats.newcombe_paired_interval(both_pass=14, skill_only=5, baseline_only=0, both_fail=22)
    assert round(r.difference, 3) == 0.122
    assert round(r.interval.low, 4) == 0.0115
    assert round(r.interval.high, 4) == 0.2265
    assert r.n == 41


def test_newcombe_orientation_is_skill_minus_baseline() -> None:
    r = stats.newcombe_paired_interval(both_pass=14, skill_only=0, baseline_only=5, both_fail=22)
    assert round(r.difference, 3) == -0.122
    assert round(r.interval.low, 4) == -0.2265
    assert round(r.interval.high, 4) == -0.0115


def test_newcombe_degenerate_tables() -> None:
    empty = stats.newcombe_paired_interval(0, 0, 0, 0)
    assert empty.interval == stats.Interval(-1.0, 1.0)
    all_pass = stats.newcombe_paired_interval(10, 0, 0, 0)
    assert all_pass.difference == 0.0
    assert all_pass.interval.low < 0 < all_pass.interval.high


def test_cost_ratio_fieller_by_hand() -> None:
    skill = [1.0, 2.0, 3.0]
    base = [1.0, 1.5, 2.0]
    # mu_S = 2, mu_B = 1.5, R = 4/3; Var(mean s) = 1/3, Var(mean b) = 1/12, Cov = 1/6.
    r = stats.cost_ratio(skill, base)
    assert r.ratio == pytest.approx(4 / 3)
    assert r.mean_skill == pytest.approx(2.0)
    assert r.mean_baseline == pytest.approx(1.5)
    t2 = T2_975**2
    # The lower root is negative (three tasks, t(2) = 4.30): costs are never negative, so it is clipped to 0.
    assert r.interval.low == 0.0
    for bound in (r.interval.high,):
        # The bound solves (mu_S - R mu_B)^2 = t^2 Var(mean s - R mean b).
        lhs = (2.0 - bound * 1.5) ** 2
        rhs = t2 * (1 / 3 - 2 * bound / 6 + bound * bound / 12)
        assert lhs == pytest.approx(rhs)
    assert r.interval.low < 4 / 3 < r.interval.high
    assert round(r.interval.high, 4) == 1.6353


def test_cost_ratio_conventions() -> None:
    assert stats.cost_ratio([0.0, 0.0], [0.0, 0.0]).interval == stats.Interval(1.0, 1.0)
    assert stats.cost_ratio([1.0, 1.0], [0.0, 0.0]).ratio == math.inf
    assert stats.cost_ratio([0.0, 0.0], [1.0, 2.0]).interval == stats.Interval(0.0, 0.0)
    one = stats.cost_ratio([2.0, None], [1.0, 1.0])
    assert one.ratio == 2.0
    assert one.n == 1
    assert one.dropped == 1
    assert one.interval == stats.Interval(0.0, math.inf)
    assert stats.cost_ratio([2.0, 4.0], [1.0, 2.0]).interval.high == math.inf  # two tasks: t(1) is too wide
    same = stats.cost_ratio([2.0, 4.0, 3.0, 5.0, 1.0], [1.0, 2.0, 1.5, 2.5, 0.5])  # every task exactly doubles
    assert same.interval.low == pytest.approx(2.0)
    assert same.interval.high == pytest.approx(2.0)
    assert stats.cost_ratio([None], [None]).ratio is None


def test_cost_per_pass() -> None:
    assert stats.cost_per_pass(3.0, 4) == 0.75
    assert stats.cost_per_pass(3.0, 0) is None


@pytest.mark.parametrize(("tasks", "expected"), [(10, 0.29), (20, 0.19), (50, 0.12)])
def test_mde_default_table(tasks: int, expected: float) -> None:
    assert round(stats.mde(tasks, 3), 2) == expected


def test_mde_formula_by_hand() -> None:
    expected = (T19_975 + T19_80) * math.sqrt((0.125 / 3 + 0.125 / 3) / 20)
    assert stats.mde(20, 3) == pytest.approx(expected)
    assert stats.mde(1, 3) == math.inf


def test_pilot_variances_and_mde_by_hand() -> None:
    # baseline 1/2 on four tasks (unbiased p(1-p) = .25 * 2/1 = .5); skill 2/2, 2/2, 0/2, 0/2 (variance 0)
    tasks = [(2, 2, 1, 2), (2, 2, 1, 2), (0, 2, 1, 2), (0, 2, 1, 2)]
    v = stats.pilot_variances(tasks, runs=2)
    assert v.sigma2_baseline == pytest.approx(0.5)
    assert v.sigma2_skill == pytest.approx(0.0)
    # d = (.5, .5, -.5, -.5): Var = 1/3; omega2 = 1/3 - (0 + .5)/2 = 1/12
    assert v.omega2 == pytest.approx(1 / 12)
    expected = (T3_975 + T3_80) * math.sqrt((1 / 12 + 0.0 / 2 + 0.5 / 2) / 4)
    assert stats.mde(4, 2, variances=v) == pytest.approx(expected)


def test_summarize() -> None:
    s = stats.summarize([10, 1, 2, 3, 4, None])
    assert (s.n, s.median, s.q1, s.q3, s.iqr) == (5, 3.0, 2.0, 4.0, 2.0)
    assert stats.summarize([]).median is None
    assert stats.summarize([7]) == stats.Summary(1, 7.0, 7.0, 7.0)


def test_t_quantile_df_zero_is_infinite() -> None:
    assert stats.t_quantile(0.975, 0) == math.inf
    assert stats.t_quantile(0.975, 19) == pytest.approx(T19_975)


def test_wilson_is_exactly_zero_and_one_at_the_ends() -> None:
    from harness.analysis.stats import wilson_interval

    assert wilson_interval(0, 9).low == 0.0
    assert wilson_interval(9, 9).high == 1.0
