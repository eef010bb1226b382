"""Where a sign or a threshold decides, floating-point noise must not (docs/statistics.md#exact-comparisons).

Two kinds of figures reach a comparison, and each has its rule:

* **Counts** (pass rates ``k/n``, per-task differences and their mean over tasks, missing and infra
  shares): exact rationals (:class:`fractions.Fraction`) built from the counts, compared exactly. Six
  per-task differences that sum to 0 are 0, not -9.25e-18 (which once made the pooled and task-weighted
  differences "point in opposite directions"). A preregistered figure such as ``max_missing_share: 0.2``
  or ``confidence: 0.95`` is the decimal the user wrote (:func:`decimal`), so ``alpha`` is exactly 1/20.
* **Continuous figures** (interval bounds from t and Fieller, cost ratios of float dollar amounts, fitted
  coefficients): compared with :data:`TOLERANCE`. A figure within it of the threshold counts as *at* the
  threshold: :func:`above` and :func:`below` are strict beyond the noise, their negations are "at most"
  and "at least". A lower bound computed as 1e-17 where the exact value is 0 does not exclude 0, and a
  cost ratio of 0.045/0.03 (1.5000000000000002 in floats) is within a limit of 1.5.

Every module of :mod:`harness.analysis` that compares a figure with 0 or a threshold goes through here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

TOLERANCE = 1e-9
"""How close to a threshold a continuous figure counts as at it: absolute for thresholds within [-1, 1]
(0, a gain in pass-rate points), relative beyond (a cost ratio of 1.5, a duration). Far below any
difference a decision could mean (a pass-rate point is 1e-2, a cent 1e-2), far above float noise (1e-16)."""


def rate(passes: int, trials: int) -> Fraction | None:
    """``passes/trials`` exactly (None without trials)."""
    return Fraction(passes, trials) if trials else None


def difference(a: Fraction | None, b: Fraction | None) -> Fraction | None:
    """``a - b`` exactly (None when either is missing)."""
    return None if a is None or b is None else a - b


def mean(values: Iterable[Fraction]) -> Fraction | None:
    """The exact mean (None for no values)."""
    kept = list(values)
    return sum(kept, Fraction(0)) / len(kept) if kept else None


def sign(x: Fraction | int | None) -> int:
    """-1, 0 or +1 (0 for None: no figure has no direction)."""
    if x is None or x == 0:
        return 0
    return 1 if x > 0 else -1


def decimal(x: float) -> Fraction:
    """The number a preregistration wrote (``0.2``, ``0.95``): the shortest decimal that reads back as
    ``x``, as an exact rational, not the binary float nearest to it."""
    if not math.isfinite(x):
        raise ValueError(f"not a finite number: {x!r}")
    return Fraction(repr(float(x)))


def alpha(confidence: float) -> Fraction:
    """1 - confidence, exactly (``1 - 0.95`` is 0.050000000000000044 in floats)."""
    return 1 - decimal(confidence)


def _margin(threshold: float) -> float:
    return TOLERANCE * max(1.0, abs(threshold))


def above(value: float | None, threshold: float) -> bool:
    """``value > threshold`` by more than the noise (:data:`TOLERANCE`); False for None and NaN."""
    if value is None or math.isnan(value):
        return False
    if math.isinf(threshold):
        return value > threshold
    return value > threshold + _margin(threshold)


def below(value: float | None, threshold: float) -> bool:
    """``value < threshold`` by more than the noise (:data:`TOLERANCE`); False for None and NaN."""
    if value is None or math.isnan(value):
        return False
    if math.isinf(threshold):
        return value < threshold
    return value < threshold - _margin(threshold)


def at_most(value: float | None, threshold: float) -> bool:
    """``value <= threshold`` up to the noise: not :func:`above` (False for None and NaN)."""
    return value is not None and not math.isnan(value) and not above(value, threshold)


def at_least(value: float | None, threshold: float) -> bool:
    """``value >= threshold`` up to the noise: not :func:`below` (False for None and NaN)."""
    return value is not None and not math.isnan(value) and not below(value, threshold)
