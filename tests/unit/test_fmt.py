"""harness.fmt: the one set of number formatters, pinned to what the reports and reasons print."""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness import fmt


@dataclass(frozen=True)
class _Counts:
    passes: int = 7
    valid: int = 10
    unknown: int = 0
    truncated: int = 0
    infra: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class _Bounds:
    low: float
    high: float


def test_missing_figures_read_na_in_every_formatter() -> None:
    for f in (fmt.pct, fmt.pp, fmt.ratio, fmt.usd, fmt.cost_delta, fmt.p_value, fmt.num):
        assert f(None) == "n/a"
        assert f(math.nan) == "n/a"


def test_rates_differences_and_ratios() -> None:
    assert fmt.pct(0.7) == "70%" and fmt.pct(0.125, 1) == "12.5%"
    assert fmt.pp(0.125) == "+12.5 pp" and fmt.pp(-0.3, 0) == "-30 pp" and fmt.pp(math.inf) == "+inf"
    assert fmt.ratio(1.234) == "1.23x" and fmt.ratio(1.5, suffix="") == "1.50" and fmt.ratio(math.inf) == "inf"
    assert fmt.cost_delta(1.52) == "+52%" and fmt.cost_delta(0.8) == "-20%" and fmt.cost_delta(math.inf) == "+inf"
    assert fmt.usd(0.03) == "$0.0300"
    assert fmt.p_value(0.03125) == "0.031" and fmt.p_value(0.0001, floor=0.001) == "<0.001"
    assert fmt.num(4.25) == "4.2" and fmt.num(0.35, 3, sign=True) == "+0.350" and fmt.num(math.inf) == "n/a"
    assert fmt.interval(_Bounds(0.02, 0.301)) == "[+2.0 pp, +30.1 pp]"
    assert fmt.interval(_Bounds(0.9, 1.2), fmt.ratio) == "[0.90x, 1.20x]"


def test_counts_with_their_exclusions() -> None:
    plain = _Counts()
    assert fmt.rate(plain) == "7/10" and fmt.excluded(plain) == "" and fmt.rate_with_excluded(plain) == "7/10"
    c = _Counts(unknown=2, truncated=1, infra=1, skipped=3)
    assert fmt.excluded(c) == "+2 unknown, +1 truncated, +1 infra, +3 skipped"
    assert fmt.rate_with_excluded(c, skipped=False) == "7/10 (+2 unknown, +1 truncated, +1 infra)"
    assert fmt.rate_and_excluded(c) == "7/10, +2 unknown, +1 truncated, +1 infra, +3 skipped"
