"""Group-sequential boundaries: published values as test vectors, crossing probabilities by a plain simulation.

Published vectors: the expected values of rpact's own unit tests (rpact-com/rpact,
tests/testthat/test-f_design_group_sequential.R: ``getDesignGroupSequential`` and ``getDesignInverseNormal``
designs x0, x1/y1, x5, x6a, x6b, x7a, x9), the Lan-DeMets O'Brien-Fleming boundaries of three equally spaced
looks at one-sided 0.025 that gsDesign and rpact both print (3.7103, 2.5114, 1.9930), and the classic constant
boundaries of Jennison and Turnbull (2000), Table 2.1 (Pocock, C_P) and Table 2.3 (O'Brien-Fleming, C_B), at
two-sided 0.05. The simulation below shares nothing with the product's integration but the boundaries.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from harness.analysis import groupseq
from harness.study.config import SequentialSettings


def _approx(values: tuple[float, ...], expected: list[float], tol: float = 2e-7) -> None:
    assert len(values) == len(expected)
    for got, want in zip(values, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-7, abs=tol)


def _cumulative(xs: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(float(v) for v in np.cumsum(xs))


# ===================================================================== published boundaries


def test_the_default_design_reproduces_the_lan_demets_obrien_fleming_values_of_gsdesign_and_rpact() -> None:
    bounds = groupseq.spending_boundaries((1 / 3, 2 / 3, 1.0), 0.025, "obrien-fleming")
    assert [round(b, 4) for b in bounds] == [3.7103, 2.5114, 1.9930]


@pytest.mark.parametrize(
    ("spending", "alpha", "fractions", "bounds", "spent"),
    [
        # x7a: asOF, alpha 0.13, informationRates (0.4, 0.75, 1); non-binding futility leaves the bounds alone
        ("obrien-fleming", 0.13, (0.4, 0.75, 1.0), [2.1280732, 1.4368565, 1.2468994],
         [0.016665509, 0.080406163, 0.13]),
        # x7a (kMax 4): (0.4, 0.75, 0.85, 1)
        ("obrien-fleming", 0.13, (0.4, 0.75, 0.85, 1.0), [2.1280732, 1.4368565, 1.422873, 1.2970881],
         [0.016665509, 0.080406163, 0.10053322, 0.13]),
        # x6a: asP, alpha 0.13, (0.35, 0.7, 1), non-binding futility
        ("pocock", 0.13, (0.35, 0.7, 1.0), [1.5446617, 1.4828682, 1.4620058], [0.061214062, 0.10266465, 0.13]),
        # x6b: asP, default alpha 0.025, informationRates (0.4, 0.7): the last look below full information
        ("pocock", 0.025, (0.4, 0.7), [2.223875, 2.3050796], [0.013078429, 0.0197432]),
    ],
)  # fmt: skip
def test_spending_boundaries_match_rpacts_published_designs(
    spending: groupseq.Spending,
    alpha: float,
    fractions: tuple[float, ...],
    bounds: list[float],
    spent: list[float],
) -> None:
    _approx(groupseq.spending_boundaries(fractions, alpha, spending), bounds)
    _approx(tuple(groupseq.spent(spending, f, alpha) for f in fractions), spent, tol=2e-9)


@pytest.mark.parametrize(
    ("fractions", "cumulative", "bounds"),
    [
        # x1: asHSD with gamma 0 is linear spending, alpha 0.03 at (0.2, 0.4, 1)
        ((0.2, 0.4, 1.0), [0.006, 0.012, 0.03], [2.5121443, 2.4228747, 2.0280392]),
        # x5: asUser (0.01, 0.02, 0.03, 0.05) at four equally spaced looks
        ((0.25, 0.5, 0.75, 1.0), [0.01, 0.02, 0.03, 0.05], [2.3263479, 2.2192994, 2.1201347, 1.8189562]),
    ],
)
def test_any_spending_schedule_gives_rpacts_boundaries(
    fractions: tuple[float, ...], cumulative: list[float], bounds: list[float]
) -> None:
    _approx(groupseq.boundaries_for(fractions, cumulative), bounds)


def test_crossing_probabilities_of_fixed_boundaries_match_rpacts_alpha_spent() -> None:
    # x0: the classic O'Brien-Fleming design, one-sided 0.025, three looks; x9: Haybittle-Peto, four looks
    _approx(
        _cumulative(groupseq.crossing_probabilities((3.4710914, 2.4544323, 2.0040356), (1 / 3, 2 / 3, 1.0))),
        [0.00025917372, 0.0071600594, 0.025],
        tol=2e-8,
    )
    _approx(
        _cumulative(groupseq.crossing_probabilities((3.0, 3.0, 3.0, 1.9827514), (0.25, 0.5, 0.75, 1.0))),
        [0.001349898, 0.0024617416, 0.0033695882, 0.025],
        tol=2e-8,
    )


def test_crossing_probabilities_under_an_effect_match_rpacts_power() -> None:
    # y1: the x1 design's power (0.86 at the end) at the drift its characteristics report, shift = drift^2
    bounds = (2.5121443, 2.4228747, 2.0280392)
    got = _cumulative(groupseq.crossing_probabilities(bounds, (0.2, 0.4, 1.0), drift=math.sqrt(9.4594101)))
    _approx(got, [0.12783451, 0.34055165, 0.86], tol=2e-7)


@pytest.mark.parametrize(
    ("looks", "pocock", "obrien_fleming"),
    [(2, 2.178, 1.977), (3, 2.289, 2.004), (4, 2.361, 2.024), (5, 2.413, 2.040)],
)
def test_the_classic_constants_of_jennison_and_turnbull_tables_2_1_and_2_3(
    looks: int, pocock: float, obrien_fleming: float
) -> None:
    """Two-sided 0.05 with K equally spaced looks: the constant c with c (Pocock) or c sqrt(K/k) (O'Brien and
    Fleming) at look k. One-sided here, as the product spends: the paths that would first cross the lower
    boundary of the two-sided test change the upper crossing probability by far less than the tables' rounding."""
    t = tuple(k / looks for k in range(1, looks + 1))

    def constant(shape: list[float]) -> float:
        return float(
            optimize.brentq(
                lambda c: sum(groupseq.crossing_probabilities(tuple(c * s for s in shape), t)) - 0.025,
                1.5,
                3.5,
                xtol=1e-5,
            )
        )

    assert constant([1.0] * looks) == pytest.approx(pocock, abs=6e-4)
    assert constant([math.sqrt(looks / k) for k in range(1, looks + 1)]) == pytest.approx(obrien_fleming, abs=6e-4)


# ===================================================================== an independent simulation


def _simulated_first_crossings(
    bounds: tuple[float, ...], fractions: tuple[float, ...], drift: float, draws: int, seed: int
) -> np.ndarray:
    """Brownian motion observed at the looks: S(t) with independent N(drift dt, dt) increments, Z = S / sqrt(t);
    the share of paths whose first crossing of ``bounds`` is at each look."""
    rng = np.random.default_rng(seed)
    t = np.asarray(fractions)
    steps = np.diff(np.concatenate([[0.0], t]))
    s = np.cumsum(rng.normal(drift * steps, np.sqrt(steps), size=(draws, len(t))), axis=1)
    z = s / np.sqrt(t)
    crossed = z >= np.asarray(bounds)
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    return np.array([(first == k).mean() for k in range(len(t))])


@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
@pytest.mark.parametrize("drift", [0.0, 2.5])
def test_crossing_probabilities_agree_with_a_plain_simulation(spending: groupseq.Spending, drift: float) -> None:
    fractions = (0.25, 0.5, 0.75, 1.0)
    bounds = groupseq.spending_boundaries(fractions, 0.025, spending)
    exact = np.array(groupseq.crossing_probabilities(bounds, fractions, drift=drift))
    draws = 400_000
    simulated = _simulated_first_crossings(bounds, fractions, drift, draws, seed=20261204)
    se = np.sqrt(np.maximum(exact * (1 - exact), 1e-12) / draws)
    assert np.all(np.abs(simulated - exact) <= 4.5 * se + 1e-6), (simulated, exact)
    if drift == 0.0:
        assert exact.sum() == pytest.approx(0.025, abs=1e-9), "the boundaries spend exactly alpha under the null"
        spent = _cumulative(tuple(exact))
        _approx(spent, [groupseq.spent(spending, f, 0.025) for f in fractions], tol=1e-9)


# ===================================================================== the design of a preregistration


def test_a_design_looks_after_every_round_by_default_and_its_levels_follow_the_boundaries() -> None:
    d = groupseq.design(SequentialSettings(), 3, 0.95)
    assert [x.round for x in d.looks] == [1, 2, 3] and d.alpha == pytest.approx(0.025)
    assert [x.fraction for x in d.looks] == pytest.approx([1 / 3, 2 / 3, 1.0])
    for x in d.looks:
        assert x.confidence == pytest.approx(1 - 2 * x.nominal)
        assert x.nominal == pytest.approx(0.5 * math.erfc(x.boundary / math.sqrt(2)), rel=1e-12)
    # every look is stricter than the fixed design's 95%, so the fixed design's futility bounds stay valid
    assert all(x.confidence > 0.95 for x in d.looks)
    assert d.final.spent == pytest.approx(0.025)
    assert d.futility_levels(0) == (min(x.confidence for x in d.looks), d.final.confidence)
    assert d.remaining(2) == (d.final,) and d.remaining(3) == (d.final,)


def test_pococks_first_look_is_its_lowest_level_so_the_futility_stop_bounds_adoption_there() -> None:
    d = groupseq.design(SequentialSettings(spending="pocock"), 3, 0.95)
    assert d.looks[0].confidence < d.final.confidence
    assert d.futility_levels(0)[0] == d.looks[0].confidence
    assert d.futility_levels(1)[0] == min(d.looks[1].confidence, d.final.confidence)


def test_preregistered_looks_at_chosen_rounds() -> None:
    d = groupseq.design(SequentialSettings(looks=(2, 5)), 5, 0.9)
    assert [(x.round, x.fraction) for x in d.looks] == [(2, 0.4), (5, 1.0)]
    assert d.alpha == pytest.approx(0.05)
    with pytest.raises(ValueError, match="ending at runs_per_arm"):
        groupseq.design(SequentialSettings(looks=(1, 2)), 3, 0.95)
    with pytest.raises(ValueError, match="at least two"):
        groupseq.look_rounds(SequentialSettings(), 1)


def test_bad_fractions_and_levels_are_refused() -> None:
    with pytest.raises(ValueError, match="increase strictly"):
        groupseq.boundaries_for((0.5, 0.5), (0.01, 0.02))
    with pytest.raises(ValueError, match="alpha"):
        groupseq.spent("pocock", 0.5, 0.7)
    assert groupseq.boundaries_for((0.5, 1.0), (0.0, 0.025))[0] == math.inf, "no alpha to spend: no boundary"
