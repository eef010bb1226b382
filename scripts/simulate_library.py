"""The skill-library estimator by simulation with known coefficients: bias, interval coverage, and SE by design size.

Data-generating model (additive, so the no-intercept regression is correctly specified):
each task i has a bare pass probability p0_i ~ Uniform(0.3, 0.65) and its own skill effects
beta + u_i with u_ik ~ Uniform(-0.05, 0.05) (heterogeneity across tasks, mean zero, which makes
the observations of one task correlated). Every (task, sample) pair gets a Bernoulli(p) mask C
over K = 4 skills (``harness.analysis.masks.draw_masks``), a bare reward B ~ Bernoulli(p0_i) and a masked
reward R ~ Bernoulli(p0_i + C . (beta + u_i)); the probabilities stay inside [0.1, 0.9], so
E[R - B | C] = C . beta exactly.

Part 1 sends every simulated dataset through the real ``harness.analysis.contributions.fit`` (HC3,
task-clustered bootstrap percentile interval with 2,000 resamples) and reports the mean of
beta-hat against beta and the coverage of the bootstrap interval. Part 2 prints, for tasks x
samples x p, the expected SE per coefficient (``harness.analysis.masks.expected_se`` with the model's true
SD of R - B) next to the simulated SD of beta-hat and the mean HC3 SE. Part 3 runs a library in
which no skill works through ``fit`` and ``select``: the share of skills each selection rule picks.

    python3 scripts/simulate_library.py            # 1,000 datasets; about a minute or two on 2 cores
    python3 scripts/simulate_library.py --quick    # 200 datasets, smaller table: a smoke run

Exits 1 when the bias or the coverage is outside the stated bounds.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as _scipy_stats

if __package__ in (None, ""):
    # Run as a file (python3 scripts/simulate_library.py): make the repository root importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.analysis.contributions import Observation, fit, ols_no_intercept, select
from harness.analysis.masks import DesignError, draw_masks, expected_se

DEFAULT_SEED = 20261201
BETA = (0.10, -0.10, 0.05, 0.0)
"""One skill helps, one hurts, one helps a little, one is neutral (on the pass probability)."""
P0_RANGE = (0.3, 0.65)
TAU = 0.05
TASKS = (10, 20, 50, 100)
SAMPLES = (1, 3)
PS = (0.3, 0.5)
BIAS_BOUND = 0.01
COVERAGE_BOUNDS = (0.93, 0.97)
QUICK_BIAS_BOUND = 0.03
"""--quick fits 200 datasets: the Monte Carlo SE of the mean is ~0.007, so only loose bounds can be enforced."""
QUICK_COVERAGE_BOUNDS = (0.90, 0.99)


@dataclass(frozen=True)
class Dataset:
    observations: list[Observation]
    masks: np.ndarray
    delta: np.ndarray


def simulate_dataset(
    rng: np.random.Generator,
    tasks: int,
    samples: int,
    p: float,
    beta: Sequence[float] = BETA,
    mask_seed: int | None = None,
    *,
    with_observations: bool = True,
) -> Dataset:
    """One experiment under the additive model: masks from the real ``draw_masks``, rewards 0/1."""
    k = len(beta)
    n = tasks * samples
    seed = int(rng.integers(0, 2**31)) if mask_seed is None else mask_seed
    masks = np.asarray(draw_masks(n, k, p=p, seed=seed), dtype=float).reshape(n, k)
    p0 = rng.uniform(*P0_RANGE, size=tasks)
    effects = np.asarray(beta)[None, :] + rng.uniform(-TAU, TAU, size=(tasks, k))
    task_of = np.repeat(np.arange(tasks), samples)
    p_bare = p0[task_of]
    p_masked = p_bare + (masks * effects[task_of]).sum(axis=1)
    bare = (rng.random(n) < p_bare).astype(float)
    masked = (rng.random(n) < p_masked).astype(float)
    obs = [
        Observation(f"t{task_of[i]:04d}", i % samples, tuple(int(v) for v in masks[i]), masked[i], bare[i])
        for i in range(n)
        if with_observations
    ]
    return Dataset(obs, masks, masked - bare)


@functools.cache
def true_sigma_delta(p: float, beta: tuple[float, ...] = BETA, draws: int = 400_000, seed: int = 1) -> float:
    """SD of e = R - B - C.beta under the model (Monte Carlo over tasks and masks, exact given them)."""
    rng = np.random.default_rng(seed)
    k = len(beta)
    c = (rng.random((draws, k)) < p).astype(float)
    p0 = rng.uniform(*P0_RANGE, size=draws)
    u = rng.uniform(-TAU, TAU, size=(draws, k))
    pr = p0 + c @ np.asarray(beta) + (c * u).sum(axis=1)
    var = pr * (1 - pr) + p0 * (1 - p0) + ((c * u).sum(axis=1)) ** 2
    return math.sqrt(float(var.mean()))


@dataclass(frozen=True)
class CoverageResult:
    reps: int
    used: int
    """Datasets fitted (the rest were refused as rank deficient and are counted, not hidden)."""
    beta: tuple[float, ...]
    mean_beta_hat: tuple[float, ...]
    coverage_boot: tuple[float, ...]
    coverage_hc3: tuple[float, ...]

    @property
    def max_bias(self) -> float:
        return max(abs(m - b) for m, b in zip(self.mean_beta_hat, self.beta, strict=True))

    @property
    def pooled_coverage(self) -> float:
        return sum(self.coverage_boot) / len(self.coverage_boot)


def simulate_coverage(
    reps: int,
    *,
    tasks: int = 50,
    samples: int = 4,
    p: float = 0.5,
    beta: Sequence[float] = BETA,
    n_boot: int = 2000,
    seed: int = DEFAULT_SEED,
    truth_shift: float = 0.0,
) -> CoverageResult:
    """Fit ``reps`` simulated datasets with the real estimator; bias of beta-hat and interval coverage."""
    rng = np.random.default_rng(seed)
    skills = [f"s{j + 1}" for j in range(len(beta))]
    b = np.asarray(beta) + truth_shift  # truth_shift != 0 only as a positive control: coverage must collapse
    hats: list[np.ndarray] = []
    cover_boot: list[np.ndarray] = []
    cover_hc3: list[np.ndarray] = []
    for r in range(reps):
        data = simulate_dataset(rng, tasks, samples, p, beta)
        try:
            f = fit(data.observations, skills, n_boot=n_boot, seed=r)
        except DesignError:
            continue
        est = f.estimates
        hat = np.asarray([e.beta for e in est])
        hats.append(hat)
        cover_boot.append(np.asarray([e.ci_low <= bb <= e.ci_high for e, bb in zip(est, b, strict=True)]))
        tq = _scipy_stats.t.ppf(1 - f.alpha / 2, f.df_resid)
        cover_hc3.append(np.asarray([abs(e.beta - bb) <= tq * e.se_hc3 for e, bb in zip(est, b, strict=True)]))
    used = len(hats)
    return CoverageResult(
        reps=reps,
        used=used,
        beta=tuple(beta),
        mean_beta_hat=tuple(float(v) for v in np.mean(hats, axis=0)),
        coverage_boot=tuple(float(v) for v in np.mean(cover_boot, axis=0)),
        coverage_hc3=tuple(float(v) for v in np.mean(cover_hc3, axis=0)),
    )


@dataclass(frozen=True)
class SECell:
    tasks: int
    samples: int
    p: float
    n_pairs: int
    expected: float
    simulated: float
    """Root mean square over the K skills of the SD of beta-hat across datasets."""
    mean_hc3: float
    refused: float
    """Share of datasets refused as not identifiable (rank deficient or a skill in one mask only)."""


def se_cell(tasks: int, samples: int, p: float, reps: int, seed: int, beta: Sequence[float] = BETA) -> SECell:
    rng = np.random.default_rng([seed, tasks, samples, int(p * 1000)])
    k = len(beta)
    n = tasks * samples
    hats = []
    hc3 = []
    refused = 0
    for _ in range(reps):
        data = simulate_dataset(rng, tasks, samples, p, beta, with_observations=False)
        x = data.masks
        if np.linalg.matrix_rank(x) < k:
            refused += 1
            continue
        res = ols_no_intercept(x, data.delta)
        if np.any((res.leverage > 1 - 1e-10)[:, None] & (x != 0)) or res.df_resid == 0:
            refused += 1
            continue
        hats.append(res.beta)
        hc3.append(res.se_hc3)
    sd = np.asarray(hats).std(axis=0, ddof=1)
    return SECell(
        tasks=tasks,
        samples=samples,
        p=p,
        n_pairs=n,
        expected=expected_se(n, k, p, true_sigma_delta(p, tuple(beta))),
        simulated=float(np.sqrt(np.mean(sd**2))),
        mean_hc3=float(np.sqrt(np.mean(np.asarray(hc3) ** 2))),
        refused=refused / reps,
    )


@dataclass(frozen=True)
class NullSelection:
    reps: int
    used: int
    positive_share: float
    """Share of the K coefficients that the 'positive' rule selects when no skill has any effect."""
    holm_share: float
    holm_any: float
    """Share of datasets in which the 'holm' rule selects at least one skill (family-wise error)."""


def simulate_null_selection(
    reps: int, *, k: int = 4, tasks: int = 50, samples: int = 4, p: float = 0.5, seed: int = DEFAULT_SEED
) -> NullSelection:
    """A library of skills that do nothing, through the real fit and select: how often each rule picks noise."""
    rng = np.random.default_rng([seed, 0xA11])
    skills = [f"s{j + 1}" for j in range(k)]
    beta = (0.0,) * k
    pos = holm_sel = holm_any = used = 0
    for r in range(reps):
        data = simulate_dataset(rng, tasks, samples, p, beta)
        try:
            f = fit(data.observations, skills, seed=r)
        except DesignError:
            continue
        used += 1
        pos += len(select(f, top_k=k, method="positive"))
        chosen = select(f, top_k=k, method="holm")
        holm_sel += len(chosen)
        holm_any += bool(chosen)
    return NullSelection(reps, used, pos / (used * k), holm_sel / (used * k), holm_any / used)


def se_table(cells: Sequence[SECell]) -> str:
    lines = [
        "| tasks | samples | p | pairs | expected SE | simulated SE | mean HC3 SE | refused designs |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        lines.append(
            f"| {c.tasks} | {c.samples} | {c.p:g} | {c.n_pairs} | {c.expected:.3f} | {c.simulated:.3f} | "
            f"{c.mean_hc3:.3f} | {c.refused:.1%} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--reps", type=int, default=None, help="simulated datasets for bias and coverage (default 1000)")
    ap.add_argument("--table-reps", type=int, default=None, help="datasets per cell of the SE table (default 1000)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--quick", action="store_true", help="200 datasets and a smaller table (smoke run)")
    args = ap.parse_args(argv)
    reps = args.reps or (200 if args.quick else 1000)
    table_reps = args.table_reps or (200 if args.quick else 1000)
    tasks_grid = (20, 50) if args.quick else TASKS

    t0 = time.monotonic()
    print(f"## Skill-library estimator by simulation (K={len(BETA)}, beta={list(BETA)}, seed {args.seed})\n")
    cov = simulate_coverage(reps, seed=args.seed)
    print(
        f"Bias and coverage: 50 tasks x 4 samples, p=0.5, {cov.used}/{cov.reps} datasets fitted, "
        "2,000 task-clustered bootstrap resamples each.\n"
    )
    print("| skill | beta | mean beta-hat | bias | bootstrap 95% coverage | HC3 t 95% coverage |")
    print("|---|---:|---:|---:|---:|---:|")
    for j, b in enumerate(cov.beta):
        m = cov.mean_beta_hat[j]
        print(
            f"| s{j + 1} | {b:+.3f} | {m:+.4f} | {m - b:+.4f} | {cov.coverage_boot[j]:.3f} | {cov.coverage_hc3[j]:.3f} |"
        )
    bias_bound, (cov_lo, cov_hi) = (
        (QUICK_BIAS_BOUND, QUICK_COVERAGE_BOUNDS) if args.quick and reps < 1000 else (BIAS_BOUND, COVERAGE_BOUNDS)
    )
    print(
        f"\nmax |bias| = {cov.max_bias:.4f} (bound {bias_bound}); pooled bootstrap coverage = "
        f"{cov.pooled_coverage:.3f} (bounds {cov_lo}-{cov_hi})\n"
    )
    sigmas = {p: true_sigma_delta(p) for p in PS}
    print(
        f"Expected vs simulated SE per coefficient (K=4, {table_reps} datasets per row; "
        + ", ".join(f"SD(R - B) = {s:.3f} at p={p:g}" for p, s in sigmas.items())
        + "):\n"
    )
    cells = [se_cell(t, s, p, table_reps, args.seed) for t in tasks_grid for s in SAMPLES for p in PS]
    print(se_table(cells))
    null = simulate_null_selection(reps, seed=args.seed)
    print(
        f"\nNo skill works (K=4, all beta = 0; 50 tasks x 4 samples, {null.used}/{null.reps} datasets): "
        f"'positive' selects {null.positive_share:.1%} of the skills, 'holm' {null.holm_share:.1%} "
        f"(at least one skill in {null.holm_any:.1%} of the runs)."
    )
    print(f"\nsimulate_library: {time.monotonic() - t0:.0f} s")
    ok = cov.max_bias <= bias_bound and cov_lo <= cov.pooled_coverage <= cov_hi
    if not ok:
        print("FAILED: bias or coverage outside the bounds", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
