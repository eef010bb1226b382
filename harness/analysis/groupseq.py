"""Group-sequential designs (pure): Lan-DeMets alpha spending, boundaries by recursive numerical integration.

A preregistered group-sequential design (``decision.sequential``) analyses the interval rule at a few
looks (after chosen rounds of the plan) instead of once. At look k the one-sided efficacy boundary c_k
is set so that the probability of a first crossing there, under "the skill does nothing", is the
alpha the spending function allots between the previous look and this one (Lan and DeMets 1983):

* ``obrien-fleming``: alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)) (spends almost nothing early);
* ``pocock``: alpha(t) = alpha ln(1 + (e - 1) t) (spends evenly).

``alpha`` is the one-sided level of the fixed design, (1 - confidence)/2: the interval rule adopts when
the lower bound of a two-sided ``confidence`` interval is above 0. The crossing probabilities come from
the joint distribution of the look statistics with independent increments, Z_k ~ N(eta sqrt(t_k), 1),
Corr(Z_j, Z_k) = sqrt(t_j / t_k), computed by the recursive numerical integration of Armitage, McPherson
and Rowe (1969) as Jennison and Turnbull (2000, ch. 19) describe it: the density of Z_k on the
continuation region (-inf, c_k) is carried from look to look on a grid and integrated by Simpson's rule.
No package here computes it; the tests check it against published values and a plain simulation.

What a look decides with is the boundary's nominal one-sided level p_k = 1 - Phi(c_k): the interval
rule applied to two-sided intervals at confidence 1 - 2 p_k, the repeated confidence intervals of
Jennison and Turnbull (ch. 9), with t quantiles on tasks - 1 degrees of freedom because the task count
is small. How the information fraction t_k of a look is chosen (the bound round / runs) is in
docs/statistics.md#group-sequential-design.

:class:`SequentialResult` is what a decision carries about its design (which look decided, with the
look's repeated intervals); the evaluation itself is :mod:`harness.analysis.sequential`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Literal

import numpy as np
from scipy import optimize
from scipy.special import ndtr, ndtri

from harness.analysis import stats
from harness.study.config import SequentialSettings

Spending = Literal["obrien-fleming", "pocock"]
SPENDING_NAMES: dict[Spending, str] = {"obrien-fleming": "O'Brien-Fleming", "pocock": "Pocock"}
"""How reports name each spending function (Lan-DeMets approximations of the classic boundaries)."""

GRID_STEP = 0.02
"""Spacing of the integration grid, in standard deviations of Z. Simpson's rule on this grid reproduces
published boundaries to 1e-7 (tests/unit/test_groupseq.py)."""
TAIL = 10.0
"""The grid covers the continuation region down to this many standard deviations below the mean of Z
(and at most this far above it): the density beyond carries less than 1e-22."""
BOUNDARY_TOLERANCE = 1e-12
"""Absolute tolerance of each boundary's root search (in z)."""


# ============================================================================ spending functions


def spent(spending: Spending, fraction: float, alpha: float) -> float:
    """Cumulative one-sided alpha the Lan-DeMets spending function allots by information fraction ``fraction``."""
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    if fraction <= 0.0:
        return 0.0
    t = min(1.0, fraction)
    if spending == "obrien-fleming":
        return float(2.0 * ndtr(-ndtri(1.0 - alpha / 2.0) / math.sqrt(t)))
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    raise ValueError(f"unknown spending function {spending!r}")


# ============================================================================ the integration


_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _pdf(x: np.ndarray) -> np.ndarray:
    """The standard normal density (plain numpy: scipy's distribution objects are slow in the inner loop)."""
    return np.asarray(np.exp(-0.5 * x * x) / _SQRT_2PI)


def _simpson(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Grid points and Simpson weights on [lo, hi], an even number of intervals of at most GRID_STEP."""
    n = max(2, math.ceil((hi - lo) / GRID_STEP))
    n += n % 2
    x = np.linspace(lo, hi, n + 1)
    w = np.ones(n + 1)
    w[1:-1:2] = 4.0
    w[2:-1:2] = 2.0
    return x, w * ((hi - lo) / n / 3.0)


@dataclass(frozen=True)
class _Continuation:
    """The sub-density of Z_k on the continuation region, on a grid: ``density * weights`` sums to the
    probability of having reached look k + 1 without crossing."""

    x: np.ndarray
    mass: np.ndarray
    """density(x) * Simpson weight(x)."""


def _first(fraction: float, drift: float, bound: float) -> _Continuation:
    centre = drift * math.sqrt(fraction)
    x, w = _simpson(centre - TAIL, min(bound, centre + TAIL))
    return _Continuation(x, _pdf(x - centre) * w)


def _transition(prev: _Continuation, t_prev: float, t: float, drift: float) -> tuple[np.ndarray, float]:
    """Mean of Z_k given each grid point of Z_{k-1}, and its standard deviation (independent increments)."""
    mean = (prev.x * math.sqrt(t_prev) + drift * (t - t_prev)) / math.sqrt(t)
    return mean, math.sqrt((t - t_prev) / t)


def _cross(prev: _Continuation, mean: np.ndarray, sd: float, bound: float) -> float:
    """P(no crossing before look k, and Z_k >= bound)."""
    return float(np.dot(prev.mass, ndtr((mean - bound) / sd)))


def _carry(prev: _Continuation, mean: np.ndarray, sd: float, centre: float, bound: float) -> _Continuation:
    x, w = _simpson(min(centre, bound) - TAIL, min(bound, centre + TAIL))
    density = _pdf((x[:, None] - mean[None, :]) / sd) @ prev.mass / sd
    return _Continuation(x, density * w)


def _check_fractions(fractions: Sequence[float]) -> tuple[float, ...]:
    t = tuple(float(f) for f in fractions)
    if not t:
        raise ValueError("at least one look is needed")
    if any(not 0.0 < f <= 1.0 for f in t) or any(b <= a for a, b in pairwise(t)):
        raise ValueError(f"information fractions must increase strictly within (0, 1], got {t}")
    return t


def boundaries_for(fractions: Sequence[float], cumulative: Sequence[float]) -> tuple[float, ...]:
    """One-sided upper boundaries z_1..z_K whose first-crossing probabilities under the null (drift 0) add
    up to ``cumulative[k]`` by look k (an alpha-spending schedule). A look allotted no new alpha gets +inf.
    No lower boundary: a futility stop beside them is non-binding, so it does not enter."""
    t = _check_fractions(fractions)
    if len(cumulative) != len(t):
        raise ValueError("one cumulative alpha per look")
    out: list[float] = []
    prev: _Continuation | None = None
    done = 0.0
    for k, frac in enumerate(t):
        target = float(cumulative[k]) - done
        if prev is None:
            bound = float(-ndtri(target)) if target > 0.0 else math.inf
            cont = _first(frac, 0.0, bound)
        else:
            mean, sd = _transition(prev, t[k - 1], frac, 0.0)
            if target > 0.0:
                bound = optimize.brentq(
                    lambda c, m=mean, s=sd, p=prev, g=target: _cross(p, m, s, c) - g,
                    -TAIL,
                    4.0 * TAIL,
                    xtol=BOUNDARY_TOLERANCE,
                )
            else:
                bound = math.inf
            cont = _carry(prev, mean, sd, 0.0, bound)
        out.append(float(bound))
        done += max(0.0, target)
        prev = cont
    return tuple(out)


def crossing_probabilities(
    bounds: Sequence[float], fractions: Sequence[float], drift: float = 0.0
) -> tuple[float, ...]:
    """P(the first crossing is at look k) for upper boundaries ``bounds`` at information ``fractions`` when
    E[Z_k] = drift * sqrt(t_k) (drift = effect / SE at full information; 0 is the null)."""
    t = _check_fractions(fractions)
    if len(bounds) != len(t):
        raise ValueError("one boundary per look")
    out: list[float] = []
    prev: _Continuation | None = None
    for k, (frac, bound) in enumerate(zip(t, bounds, strict=True)):
        if prev is None:
            out.append(float(ndtr(drift * math.sqrt(frac) - bound)))
            prev = _first(frac, drift, bound)
            continue
        mean, sd = _transition(prev, t[k - 1], frac, drift)
        out.append(_cross(prev, mean, sd, bound))
        prev = _carry(prev, mean, sd, drift * math.sqrt(frac), bound)
    return tuple(out)


@lru_cache(maxsize=256)
def spending_boundaries(fractions: tuple[float, ...], alpha: float, spending: Spending) -> tuple[float, ...]:
    """The Lan-DeMets boundaries of ``spending`` at one-sided level ``alpha`` (cached: designs recur)."""
    return boundaries_for(fractions, [spent(spending, f, alpha) for f in fractions])


# ============================================================================ a design


@dataclass(frozen=True)
class Look:
    """One preregistered look: after ``round`` rounds (each task run ``round`` times in each arm)."""

    number: int
    """1-based."""
    round: int
    fraction: float
    """The information fraction the boundary assumes: round / runs, the smallest the true one can be."""
    boundary: float
    """The one-sided z boundary."""
    nominal: float
    """Its nominal one-sided level 1 - Phi(boundary): the look adopts when the gain's lower bound at
    confidence 1 - 2 nominal is above 0."""
    spent: float
    """Cumulative one-sided alpha spent through this look."""

    @property
    def confidence(self) -> float:
        """The two-sided level of this look's repeated confidence intervals."""
        return 1.0 - 2.0 * self.nominal


@dataclass(frozen=True)
class SequentialDesign:
    """The looks of a preregistered group-sequential design, with their boundaries."""

    spending: Spending
    alpha: float
    """One-sided: (1 - confidence) / 2 of the fixed design."""
    runs: int
    looks: tuple[Look, ...]

    @property
    def final(self) -> Look:
        return self.looks[-1]

    @property
    def name(self) -> str:
        return f"Lan-DeMets {SPENDING_NAMES[self.spending]}"

    def remaining(self, rounds_done: int) -> tuple[Look, ...]:
        """The looks still ahead once ``rounds_done`` rounds are complete (the final look always)."""
        ahead = tuple(x for x in self.looks if x.round > rounds_done)
        return ahead or (self.final,)

    def futility_levels(self, rounds_done: int) -> tuple[float, float]:
        """(the lowest confidence of the looks ahead, the final look's): a futility stop rules adoption out at
        the first (adoption at any look ahead would need at least that) and certifies a reject at the second."""
        ahead = self.remaining(rounds_done)
        return min(x.confidence for x in ahead), self.final.confidence


def look_rounds(seq: SequentialSettings, runs: int) -> tuple[int, ...]:
    """The rounds after which the design looks: as preregistered, else after every round."""
    rounds = tuple(seq.looks) if seq.looks is not None else tuple(range(1, runs + 1))
    if len(rounds) < 2 or rounds[-1] != runs or any(b <= a for a, b in pairwise(rounds)):
        raise ValueError(f"looks {rounds} must be at least two increasing rounds ending at runs_per_arm {runs}")
    if rounds[0] < 1:
        raise ValueError(f"looks {rounds} must be rounds >= 1")
    return rounds


def design(seq: SequentialSettings, runs: int, confidence: float) -> SequentialDesign:
    """The design a preregistration's ``decision.sequential`` describes for ``runs`` runs per arm."""
    return _design(seq.spending, look_rounds(seq, runs), runs, (1.0 - confidence) / 2.0)


@lru_cache(maxsize=256)
def _design(spending: Spending, rounds: tuple[int, ...], runs: int, alpha: float) -> SequentialDesign:
    fractions = tuple(r / runs for r in rounds)
    bounds = spending_boundaries(fractions, alpha, spending)
    looks = tuple(
        Look(i + 1, r, f, b, float(ndtr(-b)), spent(spending, f, alpha))
        for i, (r, f, b) in enumerate(zip(rounds, fractions, bounds, strict=True))
    )
    return SequentialDesign(spending, alpha, runs, looks)


# ============================================================================ what a decision carries


@dataclass(frozen=True)
class SequentialResult:
    """What a group-sequential decision found: which look's verdict stands, with its repeated intervals."""

    design: SequentialDesign
    look: Look
    """The look that decided: the first interim look whose verdict was adopt or reject, else the final one."""
    stopped_early: bool
    """An interim look decided (a boundary was crossed)."""
    paired: stats.MeanInterval
    """The gain's repeated confidence interval at that look (confidence ``look.confidence``)."""
    cost: stats.CostRatio
    """The cost ratio with its repeated interval at that look."""
    looks_reached: int
    """How many looks had complete data (interim looks that decided nothing included)."""
    planned_trials: int
    analysed_trials: int
    """Finished trials in the look's data (the rounds up to it)."""
    later_trials: int = 0
    """Finished trials of rounds after a deciding interim look (running when it stopped, or a run that went
    on): recorded, and left out of the decision."""

    @property
    def saved_trials(self) -> int:
        """Planned trials the decision did not need (not run, or run after the deciding look)."""
        return max(0, self.planned_trials - self.analysed_trials)
