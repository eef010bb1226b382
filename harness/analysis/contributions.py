"""Which skills of a library earn their place: the paired-delta masked regression. Pure: no I/O, no Docker.

For every (task, sample) pair *i* with mask ``C_i`` over the K skills, ``R_i`` is the
masked trial's reward and ``B_i`` the bare trial's reward of the same task and sample:

    R_i - B_i = C_i^T beta + e_i        ordinary least squares, NO intercept

The masks are neither centred nor padded with a constant column, and the all-zero mask
is an observation like any other (its delta is never forced to 0). There is no fallback
to a fit with an intercept: a design that cannot be identified raises
:class:`~harness.analysis.masks.DesignError` naming the aliased skills.

Inference, per coefficient:

* HC3 standard error (heteroskedasticity-consistent, MacKinnon-White) and a two-sided
  p-value from t with ``df_resid`` degrees of freedom; Holm-adjusted over the K skills.
* the classical OLS standard error (``rss / df_resid``), reported for comparison.
* a task-clustered percentile bootstrap interval: tasks are resampled with replacement,
  each with all of its (C_i, R_i, B_i) tuples, because several masks on one task share
  that task's noise. Resamples whose mask matrix is rank deficient are dropped and
  counted (``n_boot_singular``). The resampling draws from the raw PCG64 stream (stable
  across NumPy versions) over tasks in sorted order, so the interval does not depend on
  the order of the input rows.

The all-zero rows double as an A/A check: their mean delta should be 0, because an empty
mask must reproduce the bare run (``AACheck``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import linalg as _linalg
from scipy import stats as _scipy_stats

from harness.analysis import exact
from harness.analysis.family import holm
from harness.analysis.masks import DesignError, check_identifiable, condition_number
from harness.errors import HarnessError

ESTIMATOR = "paired-delta-ols-no-intercept/hc3/task-cluster-bootstrap/v1"
FORMULA = "R_i - B_i = C_i^T beta + e_i (ordinary least squares, no intercept; C_i the 0/1 mask of pair i)"
MIN_BOOT = 2000
CAVEAT = (
    "A positive coefficient is a provisional ranking under an additive model (interactions between skills "
    "and heterogeneity across tasks break it), not proof that a skill helps; a coefficient near zero is not "
    "proof of no effect. Confirm the selected set on held-out tasks with the single-skill A/B path."
)

SelectMethod = Literal["positive", "holm"]


class ContributionError(HarnessError):
    """The observations cannot be fitted (empty, non-finite, duplicated or malformed): bad input."""

    exit_code = 4


@dataclass(frozen=True)
class Observation:
    """One (task, sample) pair: its mask, the masked reward R and the bare reward B of the same pair."""

    task_id: str
    sample: int
    mask: tuple[int, ...]
    masked: float
    bare: float

    @property
    def delta(self) -> float:
        return self.masked - self.bare


@dataclass(frozen=True)
class SkillEstimate:
    skill: str
    beta: float
    se_hc3: float
    se_classical: float
    ci_low: float
    """Task-clustered bootstrap percentile interval (two-sided, level 1 - alpha)."""
    ci_high: float
    masked_mean: float
    """Mean R over the observations whose mask includes the skill (descriptive, not the coefficient)."""
    bare_mean: float
    delta_mean: float
    n_with: int
    """Observations whose mask includes the skill."""
    p_value: float
    """Two-sided, HC3 t statistic with df_resid degrees of freedom."""
    p_holm: float
    se_boot: float = math.nan
    """Standard deviation of the bootstrap coefficients (task-clustered)."""


@dataclass(frozen=True)
class AACheck:
    """The all-zero rows as an A/A check: mean R - B there should be 0 (task-clustered SE, t with G-1 df)."""

    n: int
    n_tasks: int
    mean_delta: float | None
    se: float | None
    ci_low: float | None
    ci_high: float | None
    differs_from_zero: bool


@dataclass(frozen=True)
class LibraryFit:
    skills: tuple[str, ...]
    estimates: tuple[SkillEstimate, ...]
    n: int
    df_resid: int
    rss: float
    condition_number: float
    n_boot: int
    seed: int
    alpha: float
    observations: tuple[Observation, ...]
    """Sorted by (task_id, sample); ``leverage`` and ``residuals`` follow this order."""
    n_tasks: int = 0
    n_boot_singular: int = 0
    """Bootstrap resamples dropped because their mask matrix was rank deficient."""
    leverage: tuple[float, ...] = ()
    residuals: tuple[float, ...] = ()
    aa: AACheck | None = None

    def estimate(self, skill: str) -> SkillEstimate:
        for e in self.estimates:
            if e.skill == skill:
                return e
        raise KeyError(skill)

    @property
    def beta(self) -> tuple[float, ...]:
        return tuple(e.beta for e in self.estimates)


# ---------------------------------------------------------------- core numerics (shared with the simulation)


@dataclass(frozen=True)
class OLSResult:
    beta: np.ndarray
    xtx_inv: np.ndarray
    leverage: np.ndarray
    residuals: np.ndarray
    rss: float
    df_resid: int
    se_classical: np.ndarray
    se_hc3: np.ndarray


def ols_no_intercept(x: np.ndarray, y: np.ndarray) -> OLSResult:
    """OLS of y on x without an intercept, by QR; HC3 and classical SEs. x must have full column rank."""
    n, k = x.shape
    q, r = np.linalg.qr(x)
    beta = _linalg.solve_triangular(r, q.T @ y)
    rinv = _linalg.solve_triangular(r, np.eye(k))
    xtx_inv = rinv @ rinv.T
    leverage = (q * q).sum(axis=1)
    resid = y - x @ beta
    rss = float(resid @ resid)
    df = n - k
    se_classical = np.sqrt(np.diag(xtx_inv) * (rss / df)) if df > 0 else np.full(k, math.nan)
    with np.errstate(divide="ignore", invalid="ignore"):  # leverage 1: HC3 undefined (nan); fit() refuses it
        omega = (resid / (1.0 - leverage)) ** 2
        meat = (x * omega[:, None]).T @ x
        se_hc3 = np.sqrt(np.clip(np.diag(xtx_inv @ meat @ xtx_inv), 0.0, None))
    return OLSResult(beta, xtx_inv, leverage, resid, rss, df, se_classical, se_hc3)


def task_moments(x: np.ndarray, y: np.ndarray, groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-task X^T X (G, K, K) and X^T y (G, K): a task-bootstrap resample is a count-weighted sum of these."""
    k = x.shape[1]
    xtx = np.zeros((n_groups, k, k))
    xty = np.zeros((n_groups, k))
    np.add.at(xtx, groups, x[:, :, None] * x[:, None, :])
    np.add.at(xty, groups, x * y[:, None])
    return xtx, xty


def bootstrap_betas(task_xtx: np.ndarray, task_xty: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients of every resample from task draw counts (B, G); returns (betas (B, K), singular (B,))."""
    k = task_xtx.shape[1]
    xtx = (counts @ task_xtx.reshape(task_xtx.shape[0], k * k)).reshape(-1, k, k)
    xty = counts @ task_xty
    eig = np.linalg.eigvalsh(xtx)
    singular = eig[:, 0] <= np.maximum(eig[:, -1], 1.0) * 1e-10
    betas = np.full((counts.shape[0], k), math.nan)
    ok = ~singular
    if ok.any():
        betas[ok] = np.linalg.solve(xtx[ok], xty[ok][:, :, None])[:, :, 0]
    return betas, singular


def draw_counts(n_groups: int, n_boot: int, seed: int) -> np.ndarray:
    """Task draw counts (n_boot, G) for the clustered bootstrap; seeded and stable across numpy versions.

    Uses the raw 64-bit stream of the PCG64 bit generator (NumPy keeps bit-generator streams stable,
    unlike ``Generator`` methods): u = top 53 bits / 2**53, task index = floor(u * G).
    """
    if seed < 0:
        raise ContributionError(f"seed={seed} must be >= 0")
    raw = np.random.PCG64(seed).random_raw(n_boot * n_groups)
    u = (raw >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    idx = np.minimum((u * n_groups).astype(np.int64), n_groups - 1)
    flat = idx + np.repeat(np.arange(n_boot, dtype=np.int64) * n_groups, n_groups)
    return np.bincount(flat, minlength=n_boot * n_groups).reshape(n_boot, n_groups).astype(float)


def _p_value(beta: float, se: float, df: int) -> float:
    if df <= 0 or math.isnan(se):
        return math.nan
    if se == 0.0:
        return 0.0 if beta != 0.0 else 1.0
    return float(2.0 * _scipy_stats.t.sf(abs(beta / se), df))


def _aa_check(obs: Sequence[Observation], alpha: float) -> AACheck:
    zero = [o for o in obs if not any(o.mask)]
    if not zero:
        return AACheck(0, 0, None, None, None, None, False)
    sums: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for o in zero:
        sums[o.task_id] = sums.get(o.task_id, 0.0) + o.delta
        sizes[o.task_id] = sizes.get(o.task_id, 0) + 1
    n = len(zero)
    g = len(sums)
    mean = sum(sums.values()) / n
    if g < 2:
        return AACheck(n, g, mean, None, None, None, False)
    ss = sum((sums[t] - sizes[t] * mean) ** 2 for t in sums)
    se = math.sqrt(ss * g / (g - 1)) / n
    tq = float(_scipy_stats.t.ppf(1 - alpha / 2, g - 1))
    lo, hi = mean - tq * se, mean + tq * se
    differs = (exact.above(lo, 0.0) or exact.below(hi, 0.0)) if se > 0 else exact.above(abs(mean), 0.0)
    return AACheck(n, g, mean, se, lo, hi, differs)


def _validate(observations: Sequence[Observation], skills: Sequence[str]) -> list[Observation]:
    k = len(skills)
    if not observations:
        raise ContributionError("no observations to fit: every skill coefficient needs masked and bare pairs")
    seen: set[tuple[str, int]] = set()
    for o in observations:
        where = f"observation (task {o.task_id!r}, sample {o.sample})"
        if len(o.mask) != k:
            raise ContributionError(f"{where}: mask has {len(o.mask)} entries but the library has {k} skills")
        if any(v not in (0, 1) for v in o.mask):
            raise ContributionError(f"{where}: mask entries must be 0 or 1, got {o.mask}")
        for name, v in (("masked reward R", o.masked), ("bare reward B", o.bare)):
            if not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
                raise ContributionError(f"{where}: {name} is not a finite number ({v!r})")
        key = (o.task_id, o.sample)
        if key in seen:
            raise ContributionError(
                f"{where} appears twice: pairing is one-to-one by (task, sample), never 'take the latest'"
            )
        seen.add(key)
    return sorted(observations, key=lambda o: (o.task_id, o.sample))


def fit(
    observations: Sequence[Observation],
    skills: Sequence[str],
    *,
    n_boot: int = MIN_BOOT,
    seed: int,
    alpha: float = 0.05,
) -> LibraryFit:
    """Fit the no-intercept paired-delta regression with HC3 SEs and a task-clustered bootstrap.

    Raises :class:`DesignError` when the masks are rank deficient (naming the aliased skills) or a
    coefficient rests on one observation alone (leverage 1), :class:`ContributionError` for empty,
    duplicated or non-finite input. Never falls back to a fit with an intercept.
    """
    skills = tuple(skills)
    if n_boot < MIN_BOOT:
        raise ContributionError(f"n_boot={n_boot}: the task-clustered bootstrap needs at least {MIN_BOOT} resamples")
    if not 0.0 < alpha < 1.0:
        raise ContributionError(f"alpha={alpha!r} must be strictly between 0 and 1")
    obs = _validate(observations, skills)
    masks = [o.mask for o in obs]
    check_identifiable(masks, skills)
    x = np.asarray(masks, dtype=float)
    y = np.asarray([o.delta for o in obs], dtype=float)
    n, k = x.shape
    if n == k:
        raise DesignError(
            f"{n} observations for {k} skills leave no residual degrees of freedom: no standard error exists",
            hint="add (task, sample) pairs",
        )
    res = ols_no_intercept(x, y)
    lonely = [skills[j] for j in range(k) if np.any((res.leverage > 1 - 1e-10) & (x[:, j] != 0))]
    if lonely:
        raise DesignError(
            f"the coefficient of {', '.join(lonely)} rests on a single observation (leverage 1): "
            "its HC3 standard error does not exist",
            hint="add (task, sample) pairs so that every skill is in several masks",
        )

    tasks = sorted({o.task_id for o in obs})
    index = {t: i for i, t in enumerate(tasks)}
    groups = np.asarray([index[o.task_id] for o in obs])
    txtx, txty = task_moments(x, y, groups, len(tasks))
    betas, singular = bootstrap_betas(txtx, txty, draw_counts(len(tasks), n_boot, seed))
    usable = betas[~singular]
    if usable.shape[0] < n_boot / 2:
        raise DesignError(
            f"{int(singular.sum())} of {n_boot} task-bootstrap resamples have a rank-deficient mask matrix: "
            f"{len(tasks)} tasks are too few for {k} skills",
            hint="add tasks (the bootstrap resamples whole tasks)",
        )
    lo, hi = np.quantile(usable, [alpha / 2, 1 - alpha / 2], axis=0)
    se_boot = usable.std(axis=0, ddof=1)

    p_values = [_p_value(float(res.beta[j]), float(res.se_hc3[j]), res.df_resid) for j in range(k)]
    p_holm = holm(p_values)
    estimates = []
    for j, skill in enumerate(skills):
        rows = [o for o in obs if o.mask[j]]
        masked_mean = sum(o.masked for o in rows) / len(rows)
        bare_mean = sum(o.bare for o in rows) / len(rows)
        estimates.append(
            SkillEstimate(
                skill=skill,
                beta=float(res.beta[j]),
                se_hc3=float(res.se_hc3[j]),
                se_classical=float(res.se_classical[j]),
                ci_low=float(lo[j]),
                ci_high=float(hi[j]),
                masked_mean=masked_mean,
                bare_mean=bare_mean,
                delta_mean=masked_mean - bare_mean,
                n_with=len(rows),
                p_value=p_values[j],
                p_holm=p_holm[j],
                se_boot=float(se_boot[j]),
            )
        )
    return LibraryFit(
        skills=skills,
        estimates=tuple(estimates),
        n=n,
        df_resid=res.df_resid,
        rss=res.rss,
        condition_number=condition_number(masks),
        n_boot=n_boot,
        seed=seed,
        alpha=alpha,
        observations=tuple(obs),
        n_tasks=len(tasks),
        n_boot_singular=int(singular.sum()),
        leverage=tuple(float(v) for v in res.leverage),
        residuals=tuple(float(v) for v in res.residuals),
        aa=_aa_check(obs, alpha),
    )


def select(fit: LibraryFit, *, top_k: int, method: SelectMethod) -> tuple[str, ...]:
    """The selected skills, best first; never padded when fewer qualify.

    ``positive``: beta > 0, sorted by beta descending, at most ``top_k``. About half of the
    coefficients come out positive when no skill works, so this selects noise by design.
    ``holm``: beta > 0 and Holm-adjusted HC3 p-value < alpha (the lower bound of the
    Holm-corrected interval is above 0), sorted by beta descending, at most ``top_k``.
    """
    if top_k < 0:
        raise ContributionError(f"top_k={top_k} must be >= 0")
    # "strictly positive" beyond rounding (harness.analysis.exact): an exactly-zero effect fitted by QR comes
    # out as +1e-17, and a p-value within the tolerance of alpha is not below it
    if method == "positive":
        chosen = [e for e in fit.estimates if exact.above(e.beta, 0.0)]
    elif method == "holm":
        chosen = [e for e in fit.estimates if exact.above(e.beta, 0.0) and exact.below(e.p_holm, fit.alpha)]
    else:
        raise ContributionError(f"unknown selection method {method!r} (use 'positive' or 'holm')")
    chosen.sort(key=lambda e: (-e.beta, e.skill))
    return tuple(e.skill for e in chosen[:top_k])


def _num(v: float | None) -> float | None:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return v


def to_json(
    fit: LibraryFit,
    *,
    component: str,
    selected: Sequence[str],
    method: str,
    baseline: Mapping[str, Any],
) -> dict[str, Any]:
    """The contributions.json body for one component: everything needed to recompute the fit by hand.

    Non-finite numbers (an infinite condition number cannot occur after a successful fit) become null.
    """
    aa = fit.aa
    return {
        "component": component,
        "estimator": ESTIMATOR,
        "formula": FORMULA,
        "intercept": 0.0,
        "intercept_note": "fixed metadata: the model has no intercept; the all-zero mask is an observation",
        "se": "HC3",
        "interval": f"task-clustered percentile bootstrap, {fit.n_boot} resamples, seed {fit.seed}",
        "alpha": fit.alpha,
        "baseline": dict(baseline),
        "n": fit.n,
        "n_tasks": fit.n_tasks,
        "df_resid": fit.df_resid,
        "rss": fit.rss,
        "condition_number": _num(fit.condition_number),
        "n_boot": fit.n_boot,
        "n_boot_singular": fit.n_boot_singular,
        "seed": fit.seed,
        "selection": {"method": method, "selected": list(selected)},
        "skills": [
            {
                "skill": e.skill,
                "beta": e.beta,
                "se_hc3": e.se_hc3,
                "se_classical": _num(e.se_classical),
                "se_boot": _num(e.se_boot),
                "ci_low": e.ci_low,
                "ci_high": e.ci_high,
                "p_value": _num(e.p_value),
                "p_holm": _num(e.p_holm),
                "masked_mean": e.masked_mean,
                "bare_mean": e.bare_mean,
                "delta_mean": e.delta_mean,
                "n_with": e.n_with,
            }
            for e in fit.estimates
        ],
        "aa_check": None
        if aa is None
        else {
            "n": aa.n,
            "n_tasks": aa.n_tasks,
            "mean_delta": aa.mean_delta,
            "se": aa.se,
            "ci_low": aa.ci_low,
            "ci_high": aa.ci_high,
            "differs_from_zero": aa.differs_from_zero,
        },
        "observations": [
            {
                "task_id": o.task_id,
                "sample": o.sample,
                "mask": list(o.mask),
                "skills": [s for s, v in zip(fit.skills, o.mask, strict=True) if v],
                "R": o.masked,
                "B": o.bare,
                "delta": o.delta,
                "leverage": fit.leverage[i] if fit.leverage else None,
                "residual": fit.residuals[i] if fit.residuals else None,
            }
            for i, o in enumerate(fit.observations)
        ],
        "caveat": CAVEAT,
    }


def recompute(doc: Mapping[str, Any], *, tol: float = 1e-9) -> tuple[float, ...]:
    """Recompute the coefficients of a contributions.json body from its per-observation rows and check them.

    Raises :class:`ContributionError` when a row's delta is not R - B, the intercept is not the fixed 0.0,
    the estimator is unknown, or the stored coefficients differ from the recomputed ones by more than tol.
    """
    if doc.get("estimator") != ESTIMATOR:
        raise ContributionError(f"contributions: estimator {doc.get('estimator')!r} is not {ESTIMATOR!r}")
    if doc.get("intercept") != 0.0:
        raise ContributionError(f"contributions: intercept must be the fixed 0.0, got {doc.get('intercept')!r}")
    skills = [s["skill"] for s in doc["skills"]]
    rows = doc["observations"]
    for r in rows:
        if abs(r["delta"] - (r["R"] - r["B"])) > tol:
            raise ContributionError(
                f"contributions: task {r['task_id']!r} sample {r['sample']}: delta {r['delta']} != R - B "
                f"= {r['R'] - r['B']}"
            )
    masks = [tuple(r["mask"]) for r in rows]
    check_identifiable(masks, skills)
    res = ols_no_intercept(np.asarray(masks, dtype=float), np.asarray([r["R"] - r["B"] for r in rows], dtype=float))
    beta = tuple(float(b) for b in res.beta)
    for s, b in zip(doc["skills"], beta, strict=True):
        if abs(s["beta"] - b) > tol:
            raise ContributionError(
                f"contributions: skill {s['skill']!r}: stored beta {s['beta']} != {b} recomputed from the rows"
            )
    return beta
