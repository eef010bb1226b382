"""Every number a person reads: rates, differences, ratios, dollars, p-values, counts with their N.

One formatter per kind of figure, used by the decision's reasons, every report, the ledger, history,
calibration and trigger summaries, so the same figure reads the same everywhere. Missing figures
(``None``, and NaN where a float could be one) read ``n/a``. Precision is a parameter, not a second
formatter: reasons and the terminal quote rates to 0.1 point, tables and charts to whole percents.

Pure and dependency-free (a foundation module): it knows numbers and a small :class:`Counts`
shape, never an analysis or a report type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

NA = "n/a"


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def pct(x: float | None, digits: int = 0) -> str:
    """A rate as a percentage: ``70%`` (``digits=1``: ``70.0%``)."""
    return NA if x is None or _missing(x) else f"{100 * x:.{digits}f}%"


def pp(x: float | None, digits: int = 1) -> str:
    """A difference of rates in percentage points, signed: ``+12.5 pp`` (``+inf`` / ``-inf`` when unbounded)."""
    if x is None or _missing(x):
        return NA
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"{100 * x:+.{digits}f} pp"


def ratio(x: float | None, suffix: str = "x") -> str:
    """A ratio to two decimals: ``1.23x`` (``suffix=""``: ``1.23``, as the decision's reasons quote it); ``inf``."""
    if x is None or _missing(x):
        return NA
    return "inf" if math.isinf(x) else f"{x:.2f}{suffix}"


def usd(x: float | None) -> str:
    """Dollars to a hundredth of a cent: ``$0.0312``."""
    return NA if x is None or _missing(x) else f"${x:.4f}"


def cost_delta(ratio: float | None) -> str:
    """The relative cost change a cost ratio means: 1.52 -> ``+52%``."""
    if ratio is None or _missing(ratio):
        return NA
    if math.isinf(ratio):
        return "+inf"
    return f"{100 * (ratio - 1):+.0f}%"


def p_value(x: float | None, floor: float | None = None) -> str:
    """A p-value to three decimals: ``0.031``; below ``floor`` (when given): ``<0.001``."""
    if x is None or not math.isfinite(x):
        return NA
    if floor is not None and x < floor:
        return f"<{floor:g}"
    return f"{x:.3f}"


def num(x: float | None, digits: int = 1, *, sign: bool = False) -> str:
    """A plain number: ``4.5`` (``sign=True``: ``+4.500`` with ``digits=3``)."""
    if x is None or not math.isfinite(x):
        return NA
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


class Bounds(Protocol):
    @property
    def low(self) -> float: ...
    @property
    def high(self) -> float: ...


def interval(iv: Bounds, f: Callable[[float | None], str] = pp) -> str:
    """An interval in brackets, each bound by ``f``: ``[+2.0 pp, +30.1 pp]``."""
    return f"[{f(iv.low)}, {f(iv.high)}]"


class Counts(Protocol):
    """What a rate with its N is made of (an arm, or one task in one arm)."""

    @property
    def passes(self) -> int: ...
    @property
    def valid(self) -> int: ...
    @property
    def unknown(self) -> int: ...
    @property
    def truncated(self) -> int: ...
    @property
    def infra(self) -> int: ...
    @property
    def skipped(self) -> int: ...


def rate(c: Counts) -> str:
    """The article's count: ``7/10`` (passes over valid trials)."""
    return f"{c.passes}/{c.valid}"


def excluded(c: Counts, *, skipped: bool = True) -> str:
    """What left the denominator: ``+2 unknown, +1 truncated, +1 skipped`` (empty when nothing was excluded).

    ``skipped=False`` leaves skipped trials out (the per-task tables, whose skipped tasks get rows of their own).
    """
    parts = [
        f"+{n} {label}" for n, label in ((c.unknown, "unknown"), (c.truncated, "truncated"), (c.infra, "infra")) if n
    ]
    if skipped and c.skipped:
        parts.append(f"+{c.skipped} skipped")
    return ", ".join(parts)


def rate_with_excluded(c: Counts, *, skipped: bool = True) -> str:
    """``7/10 (+2 unknown, +1 truncated)``, or ``7/10`` when nothing was excluded."""
    extras = excluded(c, skipped=skipped)
    return f"{rate(c)} ({extras})" if extras else rate(c)


def rate_and_excluded(c: Counts) -> str:
    """``7/10, +2 unknown`` (as the point rule's reasons quote an arm), or ``7/10``."""
    extras = excluded(c)
    return f"{rate(c)}, {extras}" if extras else rate(c)
