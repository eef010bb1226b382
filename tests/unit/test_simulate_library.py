"""A small, seeded run of scripts/simulate_library.py: the estimator is unbiased and its interval covers."""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis.masks import expected_se
from scripts.simulate_library import (
    BETA,
    se_cell,
    simulate_coverage,
    simulate_dataset,
    simulate_null_selection,
    true_sigma_delta,
)


def test_simulated_model_is_additive() -> None:
    rng = np.random.default_rng(0)
    data = simulate_dataset(rng, tasks=2000, samples=3, p=0.5)
    fitted = np.linalg.lstsq(data.masks, data.delta, rcond=None)[0]
    assert fitted == pytest.approx(BETA, abs=0.06)  # SE ~0.016 per coefficient at 6,000 pairs
    assert {o.task_id for o in data.observations} == {f"t{i:04d}" for i in range(2000)}


def test_small_simulation_bias_and_coverage() -> None:
    res = simulate_coverage(200, tasks=30, samples=3, seed=5)
    assert res.used == 200
    assert res.max_bias < 0.03
    assert 0.88 <= res.pooled_coverage <= 0.99
    assert all(0.85 <= c <= 1.0 for c in res.coverage_boot)
    # positive control: the same intervals against a wrong truth (every beta shifted by 0.4, ~4 SE) rarely cover
    wrong = simulate_coverage(20, tasks=30, samples=3, seed=5, beta=BETA, truth_shift=0.4)
    assert wrong.pooled_coverage < 0.3


def test_se_cell_matches_the_formula_at_moderate_size() -> None:
    cell = se_cell(50, 3, 0.5, reps=300, seed=1)
    assert cell.expected == pytest.approx(expected_se(150, 4, 0.5, true_sigma_delta(0.5)))
    assert cell.simulated == pytest.approx(cell.expected, rel=0.15)
    assert cell.refused == 0.0
    small = se_cell(10, 1, 0.3, reps=200, seed=1)
    assert small.refused > 0  # tiny designs are often not identifiable: counted, not hidden


def test_null_library_positive_selects_noise_holm_does_not() -> None:
    res = simulate_null_selection(60, tasks=30, samples=3, seed=3)
    assert res.used == 60
    assert 0.3 <= res.positive_share <= 0.7  # about half of the coefficients of useless skills come out positive
    assert res.holm_share <= 0.08
    assert res.holm_any <= 0.2
