"""The library design: seeded masks, identifiability refusals, condition number and sizing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.masks import (
    DesignError,
    aliasing,
    check_design,
    check_identifiable,
    condition_number,
    draw_masks,
    expected_se,
    plan_library,
    variance_factor,
)


def test_draw_masks_is_seeded_and_keeps_all_zero_masks() -> None:
    a = draw_masks(200, 3, p=0.5, seed=7)
    assert a == draw_masks(200, 3, p=0.5, seed=7)
    assert a != draw_masks(200, 3, p=0.5, seed=8)
    assert len(a) == 200 and all(len(m) == 3 and set(m) <= {0, 1} for m in a)
    zeros = sum(1 for m in a if not any(m))
    assert 10 <= zeros <= 45  # about (1/2)^3 = 12.5% are all-zero, and they stay
    share = np.asarray(a).mean()
    assert 0.42 < share < 0.58


def test_draw_masks_is_pinned() -> None:
    """random.Random(seed).random() is guaranteed stable across Python versions: so are the masks."""
    # random.Random(1).random(): .134 .847 .764 | .255 .495 .449 | .652 .789 .094 | .028 .836 .433
    assert draw_masks(4, 3, p=0.5, seed=1) == ((1, 0, 0), (1, 1, 1), (0, 0, 1), (1, 0, 1))


def test_balanced_masks_give_every_skill_the_same_count() -> None:
    m = draw_masks(30, 5, p=0.3, seed=3, balanced=True)
    assert np.asarray(m).sum(axis=0).tolist() == [9] * 5
    assert m == draw_masks(30, 5, p=0.3, seed=3, balanced=True)
    check_identifiable(m, ["a", "b", "c", "d", "e"])


@pytest.mark.parametrize(
    ("n", "k", "p", "balanced", "match"),
    [
        (2, 3, 0.5, False, "cannot identify 3 skills"),
        (10, 3, 0.0, False, "strictly between 0 and 1"),
        (10, 3, 1.0, False, "strictly between 0 and 1"),
        (10, 0, 0.5, False, "no skills"),
        (10, 3, 0.02, True, "no mask contains"),
        (10, 3, 0.98, True, "aliased"),
    ],
)
def test_check_design_refuses(n: int, k: int, p: float, balanced: bool, match: str) -> None:
    with pytest.raises(DesignError, match=match) as err:
        check_design(n, k, p, balanced)
    assert err.value.exit_code == 4


def test_check_design_accepts_sane_designs() -> None:
    check_design(20, 4, 0.5, False)
    check_design(20, 4, 0.5, True)
    check_design(3, 1, 0.99, True)  # K=1, every mask on: the plain A/B, identifiable without an intercept


def test_check_identifiable_names_aliased_skills() -> None:
    masks = [(0, 0, 0), (1, 0, 0), (0, 1, 1), (1, 1, 1), (0, 1, 1), (1, 0, 0)]
    with pytest.raises(DesignError, match=r"rank 2 < K=3.*s2 == s3"):
        check_identifiable(masks, ["s1", "s2", "s3"])
    assert aliasing([(1, 0), (1, 0)], ["a", "b"]) == ["b is in no mask"]
    dep = aliasing([(1, 0, 1), (0, 1, 1), (1, 0, 1), (0, 1, 1)], ["a", "b", "c"])
    assert len(dep) == 1 and set(dep[0].replace("==", "+").replace(" ", "").split("+")) == {"a", "b", "c"}
    check_identifiable([(1, 0), (0, 1), (1, 1)], ["a", "b"])  # positive control
    with pytest.raises(DesignError, match="not unique"):
        check_identifiable([(1, 0), (0, 1)], ["a", "a"])


def test_condition_number() -> None:
    assert condition_number([(1, 0), (0, 1)]) == pytest.approx(1.0)
    assert condition_number([(1, 1), (1, 1)]) == math.inf
    x = np.asarray([(1, 0, 1), (1, 1, 0), (0, 1, 1), (1, 1, 1)], float)
    assert condition_number(x.tolist()) == pytest.approx(np.linalg.cond(x))


def test_expected_se_formula() -> None:
    # README of the vectors: K=10, p=.5: about 350 pairs give +/-10 points, 1,400 give +/-5 (sigma^2 ~ 0.25 assumed)
    assert variance_factor(10, 0.5) == pytest.approx(4 * 10 / 11)
    assert variance_factor(1, 0.5) == pytest.approx(2.0)
    se = expected_se(400, 10, 0.5, 0.5)
    assert se == pytest.approx(0.5 * math.sqrt(40 / 11 / 400))
    assert 1.96 * expected_se(350, 10, 0.5, 0.5) == pytest.approx(0.1, abs=0.005)
    assert 1.96 * expected_se(1400, 10, 0.5, 0.5) == pytest.approx(0.05, abs=0.003)
    with pytest.raises(DesignError):
        expected_se(0, 3, 0.5, 0.5)


def test_expected_se_matches_a_quick_simulation() -> None:
    rng = np.random.default_rng(1)
    n, k, p, sigma = 300, 4, 0.5, 0.5
    betas = []
    for _ in range(400):
        x = (rng.random((n, k)) < p).astype(float)
        y = rng.normal(0, sigma, n)
        betas.append(np.linalg.lstsq(x, y, rcond=None)[0])
    sd = float(np.asarray(betas).std(axis=0).mean())
    assert sd == pytest.approx(expected_se(n, k, p, sigma), rel=0.08)


def test_plan_library() -> None:
    plan = plan_library(20, 3, 0.5, 4)
    assert plan.identifiable and plan.reason is None
    assert plan.n_pairs == 60 and plan.trials == 120
    assert plan.expected_se == pytest.approx(expected_se(60, 4, 0.5, 0.5))
    assert plan.expected_se is not None
    assert plan.ci_halfwidth == pytest.approx(1.96 * plan.expected_se)
    assert plan.rank_deficient_share == 0.0
    assert any("expected SE" in line for line in plan.lines())
    bad = plan_library(1, 2, 0.5, 4)
    assert not bad.identifiable and bad.expected_se is None and "cannot identify" in (bad.reason or "")
    assert any("NOT IDENTIFIABLE" in line for line in bad.lines())
    tiny = plan_library(6, 1, 0.5, 4)
    assert tiny.identifiable and (tiny.rank_deficient_share or 0) > 0.05
    assert any("rank deficient" in line for line in tiny.lines())
    assert plan_library(20, 3, 0.5, 4, sigma_delta=1.0).expected_se == pytest.approx(2 * (plan.expected_se or 0))


def test_readme_sizing_claim() -> None:
    """README: +/-10 points (SE 0.05) on 4 skills at p=.5 needs ~320 pairs at SD 0.5 and ~600 at SD 0.69."""
    assert plan_library(320, 1, 0.5, 4).expected_se == pytest.approx(0.05, abs=0.0005)
    assert plan_library(600, 1, 0.5, 4, sigma_delta=0.69).expected_se == pytest.approx(0.05, abs=0.0005)
