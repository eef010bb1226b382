"""The skill-library estimator against the independent test vectors in data/masked_library_vectors.json."""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import statsmodels.api as sm  # dev extra, tests only: the independent HC3 reference

from harness.analysis.contributions import (
    CAVEAT,
    ESTIMATOR,
    ContributionError,
    LibraryFit,
    Observation,
    fit,
    recompute,
    select,
    to_json,
)
from harness.analysis.masks import DesignError

VECTORS = {
    v["name"]: v for v in json.loads((Path(__file__).parent / "data" / "masked_library_vectors.json").read_text())
}


def _obs(vec: dict[str, Any], tasks: list[int] | None = None) -> list[Observation]:
    tasks = tasks if tasks is not None else vec.get("task", list(range(len(vec["C"]))))
    seen: dict[int, int] = {}
    out = []
    for c, r, b, t in zip(vec["C"], vec["R"], vec["B"], tasks, strict=True):
        s = seen.get(t, 0)
        seen[t] = s + 1
        out.append(Observation(f"t{t:03d}", s, tuple(c), float(r), float(b)))
    return out


def _skills(vec: dict[str, Any]) -> list[str]:
    ids: list[str] = vec.get("skill_ids", [f"s{j + 1}" for j in range(len(vec["C"][0]))])
    return ids


@pytest.fixture(scope="module")
def factorial() -> LibraryFit:
    vec = VECTORS["factorial_2x2x2_binary"]
    return fit(_obs(vec), _skills(vec), seed=1)


def test_factorial_beta_is_exact(factorial: LibraryFit) -> None:
    expected = [Fraction(s) for s in VECTORS["factorial_2x2x2_binary"]["expected"]["beta"]]
    assert factorial.beta == pytest.approx([float(f) for f in expected], abs=1e-12)
    assert factorial.beta == pytest.approx(VECTORS["factorial_2x2x2_binary"]["expected"]["beta_float"], abs=1e-12)


def test_factorial_fit_statistics(factorial: LibraryFit) -> None:
    exp = VECTORS["factorial_2x2x2_binary"]["expected"]
    assert factorial.leverage == pytest.approx(exp["leverage"], abs=1e-12)
    assert factorial.residuals == pytest.approx(exp["residuals"], abs=1e-12)
    assert factorial.rss == pytest.approx(exp["rss"], abs=1e-12)
    assert factorial.n == exp["n"] == 8
    assert factorial.df_resid == exp["df_resid"] == 5
    assert [e.se_classical for e in factorial.estimates] == pytest.approx(exp["se_classical"], abs=5e-7)
    assert [e.se_hc3 for e in factorial.estimates] == pytest.approx(exp["se_hc3"], abs=5e-7)


def test_factorial_per_skill_means_are_marginal_not_coefficients(factorial: LibraryFit) -> None:
    exp = VECTORS["factorial_2x2x2_binary"]["expected"]["per_skill"]
    for e in factorial.estimates:
        want = exp[e.skill]
        assert e.masked_mean == pytest.approx(float(Fraction(want["masked_mean"])), abs=1e-12)
        assert e.bare_mean == pytest.approx(float(Fraction(want["bare_mean"])), abs=1e-12)
        assert e.delta_mean == pytest.approx(float(Fraction(want["delta_mean"])), abs=1e-12)
        assert e.n_with == 4
    s2 = factorial.estimate("s2")
    assert s2.delta_mean > 0 > s2.beta  # the vector's note: marginal contrasts are not the coefficients


def test_factorial_selection(factorial: LibraryFit) -> None:
    exp = VECTORS["factorial_2x2x2_binary"]["expected"]["selection_top2_strictly_positive"]
    assert list(select(factorial, top_k=2, method="positive")) == exp == ["s1"]  # no padding to 2
    # 7/8 with HC3 SE 0.46 on 5 df is not significant after Holm: the strict selection is empty.
    assert select(factorial, top_k=2, method="holm") == ()


def test_factorial_matches_exact_fractions_and_lstsq() -> None:
    """Independent checks: exact normal equations in Fractions, and numpy.linalg.lstsq."""
    vec = VECTORS["factorial_2x2x2_binary"]
    c = [[Fraction(v) for v in row] for row in vec["C"]]
    y = [Fraction(r) - Fraction(b) for r, b in zip(vec["R"], vec["B"], strict=True)]
    k = 3
    zero = Fraction(0)
    a = [
        [sum((row[i] * row[j] for row in c), zero) for j in range(k)]
        + [sum((row[i] * yy for row, yy in zip(c, y, strict=True)), zero)]
        for i in range(k)
    ]
    for i in range(k):  # Gauss-Jordan in exact arithmetic
        piv = a[i][i]
        a[i] = [v / piv for v in a[i]]
        for r in range(k):
            if r != i:
                f = a[r][i]
                a[r] = [vr - f * vi for vr, vi in zip(a[r], a[i], strict=True)]
    exact = [a[i][k] for i in range(k)]
    assert exact == [Fraction(s) for s in vec["expected"]["beta"]]
    got = fit(_obs(vec), _skills(vec), seed=2).beta
    assert got == pytest.approx([float(f) for f in exact], abs=1e-12)
    lst = np.linalg.lstsq(
        np.asarray(vec["C"], float), np.asarray(vec["R"], float) - np.asarray(vec["B"], float), rcond=None
    )[0]
    assert got == pytest.approx(lst, abs=1e-12)


def test_ols_matches_lstsq_on_random_designs() -> None:
    rng = np.random.default_rng(7)
    for k in (1, 3, 6):
        n = 40
        c = (rng.random((n, k)) < 0.5).astype(int)
        r = rng.random(n)
        b = rng.random(n)
        obs = [
            Observation(f"t{i // 2:03d}", i % 2, tuple(int(v) for v in c[i]), float(r[i]), float(b[i]))
            for i in range(n)
        ]
        got = fit(obs, [f"s{j}" for j in range(k)], seed=3).beta
        lst = np.linalg.lstsq(c.astype(float), r - b, rcond=None)[0]
        assert got == pytest.approx(lst, abs=1e-10)


def test_hc3_and_classical_against_statsmodels() -> None:
    vec = VECTORS["factorial_2x2x2_binary"]
    x = np.asarray(vec["C"], float)
    y = np.asarray(vec["R"], float) - np.asarray(vec["B"], float)
    ref = sm.OLS(y, x).fit(cov_type="HC3")  # no add_constant: no intercept
    ours = fit(_obs(vec), _skills(vec), seed=4)
    assert [e.se_hc3 for e in ours.estimates] == pytest.approx(list(ref.bse), abs=1e-12)
    assert list(ref.bse) == pytest.approx(vec["expected"]["se_hc3"], abs=5e-7)
    assert [e.se_classical for e in ours.estimates] == pytest.approx(list(sm.OLS(y, x).fit().bse), abs=1e-12)
    rng = np.random.default_rng(11)
    c = (rng.random((60, 4)) < 0.5).astype(float)
    yy = c @ np.array([0.2, -0.1, 0.0, 0.05]) + rng.normal(0, 0.5, 60) * (1 + c[:, 0])
    obs = [Observation(f"t{i:03d}", 0, tuple(int(v) for v in c[i]), float(yy[i]), 0.0) for i in range(60)]
    ours = fit(obs, ["a", "b", "c", "d"], seed=5)
    ref = sm.OLS(yy, c).fit(cov_type="HC3")
    assert [e.se_hc3 for e in ours.estimates] == pytest.approx(list(ref.bse), rel=1e-10)
    # p-values: HC3 t statistic on df_resid (statsmodels' HC3 uses the normal by default; use_t gives t)
    ref_t = sm.OLS(yy, c).fit(cov_type="HC3", use_t=True)
    assert [e.p_value for e in ours.estimates] == pytest.approx(list(ref_t.pvalues), rel=1e-8)


def test_dropping_the_all_zero_row_is_detected_as_different_n_and_df(factorial: LibraryFit) -> None:
    vec = VECTORS["factorial_2x2x2_binary"]
    inv = vec["invariants"]["drop_all_zero_row"]
    dropped = fit(_obs(vec)[1:], _skills(vec), seed=1)
    assert dropped.beta == pytest.approx(factorial.beta, abs=1e-12)
    assert [e.se_hc3 for e in dropped.estimates] == pytest.approx([e.se_hc3 for e in factorial.estimates], abs=1e-12)
    assert (dropped.n, dropped.df_resid) == (inv["n"], 4) != (factorial.n, factorial.df_resid)
    assert [e.se_classical for e in dropped.estimates] == pytest.approx(inv["se_classical"], abs=5e-7)
    assert dropped.estimates[0].se_classical != pytest.approx(factorial.estimates[0].se_classical, abs=1e-3)
    # the all-zero row is kept in the output and counted by the A/A check
    assert factorial.aa is not None and factorial.aa.n == 1 and factorial.aa.mean_delta == 1.0
    assert dropped.aa is not None and dropped.aa.n == 0


def test_forcing_the_zero_row_delta_to_zero_is_visible_in_the_json(factorial: LibraryFit) -> None:
    vec = VECTORS["factorial_2x2x2_binary"]
    inv = vec["invariants"]["force_zero_row_delta_to_0"]
    doc = to_json(factorial, component="pass", selected=["s1"], method="positive", baseline={"source": "same"})
    zero_rows = [r for r in doc["observations"] if not any(r["mask"])]
    assert len(zero_rows) == 1 and zero_rows[0]["delta"] == 1.0 == zero_rows[0]["R"] - zero_rows[0]["B"]
    forced = _obs(vec)
    forced[0] = Observation(forced[0].task_id, 0, forced[0].mask, 0.0, 0.0)
    f2 = fit(forced, _skills(vec), seed=1)
    assert f2.beta == pytest.approx(factorial.beta, abs=1e-12)
    assert [e.se_classical for e in f2.estimates] == pytest.approx(inv["se_classical"], abs=5e-7)
    doc2 = to_json(f2, component="pass", selected=[], method="positive", baseline={})
    assert next(r for r in doc2["observations"] if not any(r["mask"]))["delta"] == 0.0
    # tampering with a row's delta (forcing it to 0 while keeping R and B) is caught on recompute
    zero_rows[0]["delta"] = 0.0
    with pytest.raises(ContributionError, match="delta"):
        recompute(doc)


def test_row_permutation_invariance(factorial: LibraryFit) -> None:
    vec = VECTORS["factorial_2x2x2_binary"]
    obs = _obs(vec)
    for seed in range(5):
        shuffled = obs[:]
        random.Random(seed).shuffle(shuffled)
        f = fit(shuffled, _skills(vec), seed=1)
        assert f.beta == pytest.approx(factorial.beta, abs=1e-12)
        assert [e.se_hc3 for e in f.estimates] == pytest.approx([e.se_hc3 for e in factorial.estimates], abs=1e-12)
        assert [e.se_classical for e in f.estimates] == pytest.approx(
            [e.se_classical for e in factorial.estimates], abs=1e-12
        )
        # tasks are resampled in sorted order, so even the bootstrap interval is order-free
        assert [(e.ci_low, e.ci_high) for e in f.estimates] == [(e.ci_low, e.ci_high) for e in factorial.estimates]


def test_the_with_intercept_fit_is_never_used(factorial: LibraryFit) -> None:
    vec = VECTORS["factorial_2x2x2_binary"]
    wrong = vec["invariants"]["with_intercept_fit_must_not_be_used"]
    x1 = np.column_stack([np.ones(8), np.asarray(vec["C"], float)])
    y = np.asarray(vec["R"], float) - np.asarray(vec["B"], float)
    assert np.linalg.lstsq(x1, y, rcond=None)[0] == pytest.approx(wrong, abs=1e-12)  # the vector is what it says
    assert factorial.beta != pytest.approx(wrong[1:], abs=1e-3)
    doc = to_json(factorial, component="pass", selected=[], method="positive", baseline={})
    assert doc["intercept"] == 0.0 and "no intercept" in doc["formula"]
    assert [s["beta"] for s in doc["skills"]] == pytest.approx([0.875, -0.125, -0.125], abs=1e-12)


def test_collinear_design_is_refused_naming_the_aliased_skills() -> None:
    vec = VECTORS["collinear_s2_s3"]
    with pytest.raises(DesignError, match=r"rank 2 < K=3") as err:
        fit(_obs(vec), ["s1", "s2", "s3"], seed=1)
    assert "s2 == s3" in str(err.value)
    assert err.value.exit_code == 4
    # the silent minimum-norm answer the vector warns about really is what lstsq would give
    y = np.asarray(vec["R"], float) - np.asarray(vec["B"], float)
    mn = np.linalg.lstsq(np.asarray(vec["C"], float), y, rcond=None)[0]
    assert mn == pytest.approx(vec["expected"]["silent_min_norm_lstsq_would_give"], abs=1e-12)


def test_drift_is_absorbed_and_flagged_by_the_all_zero_rows() -> None:
    vec = VECTORS["drift_absorbed_by_no_intercept"]
    f = fit(_obs(vec), ["s1"], seed=1)
    assert f.beta == pytest.approx(vec["expected"]["beta"], abs=1e-12)
    assert f.aa is not None
    assert f.aa.n == 4
    assert f.aa.mean_delta == pytest.approx(vec["expected"]["aa_mean_delta_on_all_zero_rows"], abs=1e-12)
    assert f.aa.se is not None and f.aa.se < 1e-12
    assert f.aa.differs_from_zero
    doc = to_json(f, component="pass", selected=[], method="positive", baseline={})
    assert doc["aa_check"]["differs_from_zero"] is True
    # positive control: no drift, noisy zero rows -> not flagged
    noisy = [Observation(f"t{i:03d}", 0, (i % 2,), float(i % 3 == 0), float(i % 4 == 0)) for i in range(24)]
    g = fit(noisy, ["s1"], seed=1)
    assert g.aa is not None and g.aa.n == 12 and not g.aa.differs_from_zero


def test_cluster_bootstrap_resamples_tasks_not_rows() -> None:
    vec = VECTORS["cluster_bootstrap_shared_bare"]
    exp = vec["expected"]
    clustered = fit(_obs(vec), ["s1"], n_boot=20000, seed=20261201)
    assert clustered.n_tasks == 6 and clustered.n == 12
    assert clustered.beta[0] == pytest.approx(exp["beta"], abs=1e-12)
    se = clustered.estimates[0].se_boot
    assert abs(se - exp["cluster_bootstrap_se_exact"]) / exp["cluster_bootstrap_se_exact"] < 0.03
    # CR0 sandwich computed here independently equals the exact cluster-bootstrap SE of the vector
    y = np.asarray(vec["R"]) - np.asarray(vec["B"])
    task = np.asarray(vec["task"])
    resid = y - y.mean()
    cr0 = math.sqrt(sum(resid[task == g].sum() ** 2 for g in range(6))) / len(y)
    assert cr0 == pytest.approx(exp["cr0_sandwich_se"], abs=1e-12)
    # the wrong, row-level bootstrap (every row its own cluster) is visibly narrower
    rows = fit(_obs(vec, tasks=list(range(12))), ["s1"], n_boot=20000, seed=20261201)
    se_rows = rows.estimates[0].se_boot
    assert abs(se_rows - exp["row_bootstrap_se_mc_WRONG"]) / exp["row_bootstrap_se_mc_WRONG"] < 0.05
    assert se > 1.25 * se_rows
    width = clustered.estimates[0].ci_high - clustered.estimates[0].ci_low
    assert width > rows.estimates[0].ci_high - rows.estimates[0].ci_low
    assert clustered.n_boot_singular == 0


def test_bootstrap_is_seeded_and_counts_singular_resamples() -> None:
    vec = VECTORS["factorial_2x2x2_binary"]
    a = fit(_obs(vec), _skills(vec), seed=9)
    b = fit(_obs(vec), _skills(vec), seed=9)
    c = fit(_obs(vec), _skills(vec), seed=10)
    assert a.estimates == b.estimates
    assert a.estimates != c.estimates
    # 8 single-row tasks over 3 skills: some resamples miss a skill entirely and must be dropped, not solved
    assert 0 < a.n_boot_singular < a.n_boot / 2


def test_selection_positive_vs_holm() -> None:
    rng = np.random.default_rng(3)
    n = 400
    c = (rng.random((n, 4)) < 0.5).astype(int)
    beta = np.array([0.3, 0.1, -0.3, 0.02])
    y = c @ beta + rng.normal(0, 0.3, n)
    obs = [Observation(f"t{i // 4:03d}", i % 4, tuple(int(v) for v in c[i]), float(y[i]), 0.0) for i in range(n)]
    f = fit(obs, ["help", "small", "hurt", "tiny"], seed=1)
    assert select(f, top_k=1, method="positive") == ("help",)
    pos = select(f, top_k=4, method="positive")
    assert pos[:2] == ("help", "small") and "hurt" not in pos
    assert select(f, top_k=4, method="holm") == ("help", "small")
    with pytest.raises(ContributionError):
        select(f, top_k=2, method="best")  # type: ignore[arg-type]


def test_bad_input_is_refused() -> None:
    ok = [Observation(f"t{i}", 0, (i % 2, (i // 2) % 2), 1.0, 0.0) for i in range(8)]
    with pytest.raises(ContributionError, match="no observations"):
        fit([], ["a"], seed=1)
    with pytest.raises(ContributionError, match="not a finite number"):
        fit([*ok[:-1], Observation("t7", 0, (1, 1), math.nan, 0.0)], ["a", "b"], seed=1)
    with pytest.raises(ContributionError, match="appears twice"):
        fit([*ok, Observation("t7", 0, (1, 1), 1.0, 0.0)], ["a", "b"], seed=1)
    with pytest.raises(ContributionError, match="mask has 3 entries"):
        fit([*ok, Observation("t9", 0, (1, 1, 0), 1.0, 0.0)], ["a", "b"], seed=1)
    with pytest.raises(ContributionError, match="at least 2000"):
        fit(ok, ["a", "b"], n_boot=100, seed=1)
    with pytest.raises(DesignError, match="single observation"):
        fit([Observation(f"t{i}", 0, (1, int(i == 0)), float(i), 0.0) for i in range(6)], ["a", "b"], seed=1)


def test_to_json_has_everything_to_recompute(factorial: LibraryFit) -> None:
    doc = to_json(
        factorial,
        component="pass",
        selected=select(factorial, top_k=2, method="positive"),
        method="positive",
        baseline={"source": "experiment exp-1", "hash": "sha256:abc"},
    )
    assert doc["estimator"] == ESTIMATOR and doc["intercept"] == 0.0 and doc["caveat"] == CAVEAT
    assert doc["baseline"]["hash"] == "sha256:abc"
    assert doc["n"] == 8 and doc["df_resid"] == 5 and doc["n_boot"] == 2000
    assert doc["selection"] == {"method": "positive", "selected": ["s1"]}
    assert len(doc["observations"]) == 8
    assert all(r["delta"] == r["R"] - r["B"] for r in doc["observations"])
    s1 = doc["skills"][0]
    assert s1["skill"] == "s1" and s1["ci_low"] < s1["beta"] < s1["ci_high"]
    json.dumps(doc, allow_nan=False)  # strictly valid JSON
    assert recompute(json.loads(json.dumps(doc))) == pytest.approx(factorial.beta, abs=1e-12)
    doc["skills"][1]["beta"] = 0.5
    with pytest.raises(ContributionError, match="recomputed"):
        recompute(doc)


def test_numpy_and_bool_rewards_are_numbers() -> None:
    obs = [
        Observation(f"t{i:02d}", 0, (i % 2, (i // 2) % 2), np.float64(i % 3 == 0), bool(i % 4 == 0)) for i in range(16)
    ]
    f = fit(obs, ["a", "b"], seed=1)
    assert math.isfinite(f.beta[0])
    with pytest.raises(ContributionError, match="not a finite number"):
        fit([*obs, Observation("t99", 0, (1, 0), "1", 0.0)], ["a", "b"], seed=1)  # type: ignore[arg-type]


def test_no_all_zero_rows_means_no_aa_check() -> None:
    obs = [Observation(f"t{i:02d}", 0, (1, i % 2), float(i % 3 == 0), 0.0) for i in range(12)]
    f = fit(obs, ["a", "b"], seed=1)
    assert f.aa is not None and f.aa.n == 0 and not f.aa.differs_from_zero
    assert to_json(f, component="pass", selected=[], method="holm", baseline={})["aa_check"]["mean_delta"] is None


def test_a_coefficient_that_is_zero_up_to_rounding_is_not_selected() -> None:
    """Found in the library integration run: an exactly neutral skill fitted as +1e-17 was 'positive'."""
    import dataclasses

    from harness.analysis import contributions as c

    obs = [
        c.Observation(task_id=f"t{i}", sample=0, mask=m, masked=r, bare=0.0)
        for i, (m, r) in enumerate(
            [((1, 0), 1.0), ((0, 1), 0.0), ((1, 1), 1.0), ((0, 0), 0.0), ((1, 0), 1.0), ((0, 1), 0.0)]
        )
    ]
    fit = c.fit(obs, ["helps", "neutral"], seed=1)
    noisy = dataclasses.replace(
        fit, estimates=tuple(dataclasses.replace(e, beta=1e-17) if e.skill == "neutral" else e for e in fit.estimates)
    )
    assert c.select(noisy, top_k=2, method="positive") == ("helps",)
