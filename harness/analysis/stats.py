"""Pure statistics for the skill decision: deterministic, no I/O, stdlib plus scipy quantiles.

The unit of analysis is the task (docs/statistics.md#task-as-the-unit-of-analysis): trials of one task
are correlated, so every interval that drives a decision is computed from
per-task summaries (per-task pass rates, per-task mean costs), never from pooled
trials. The one pooled-trial interval here (:func:`wilson_interval`) is for
display beside a ``k/n`` count and is labelled "naive" wherever it is shown.

Conventions shared by every function:

* ``confidence`` is two-sided (0.95 gives a 2.5% tail on each side).
* ``None`` in a per-task sequence means "this task has no usable data in that
  arm"; such tasks are dropped pairwise and the number kept is reported.
* Degenerate inputs never raise: they give documented degenerate results
  (an infinite interval when there is no variance estimate, a zero-width one
  when the observed variance is zero).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist

from scipy import stats as _scipy_stats

DEFAULT_SIGMA2 = 0.125
"""Mean within-task Bernoulli variance p(1-p) of a U-shaped (Beta(.5,.5)) suite; used without pilot data."""
DEFAULT_OMEGA2 = 0.0
"""Between-task variance of the true effect assumed without pilot data (no effect heterogeneity)."""
DEFAULT_POWER = 0.8
SIGN_FLIP_EXACT_MAX_TASKS = 20
SIGN_FLIP_MC_FLIPS = 100_000
SIGN_FLIP_MAX_EXACT_STATES = 1 << 20
"""Beyond 20 tasks the exact distribution is still used while it has at most this many distinct sums."""

_INF = math.inf


@dataclass(frozen=True)
class Interval:
    """A closed interval ``[low, high]``; bounds may be infinite when nothing bounds them."""

    low: float
    high: float

    @property
    def width(self) -> float:
        return self.high - self.low


# ----------------------------------------------------------------------------- quantiles


def z_quantile(p: float) -> float:
    """Standard normal quantile (stdlib; no scipy needed)."""
    return NormalDist().inv_cdf(p)


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """Student-t quantile with ``df`` degrees of freedom.

    Cached because the analysis asks for the same few (p, df) pairs over and
    over (and the simulation asks for them hundreds of thousands of times).
    """
    if df <= 0:
        return _INF if p > 0.5 else (-_INF if p < 0.5 else 0.0)
    return float(_scipy_stats.t.ppf(p, df))


def _two_sided(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return 1.0 - (1.0 - confidence) / 2.0


# ------------------------------------------------------------------------ one proportion


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for one binomial proportion ``successes/trials``.

    This treats trials as independent, which repeated trials of one task are
    not, so it is too narrow for an arm's pooled pass rate (about 83% coverage at
    3 runs per task in the design notes' simulation, docs/statistics.md#simulation-facts):
    reports must label it *naive*.
    ``trials == 0`` gives the uninformative ``[0, 1]``.
    Reference: 7/10 at 95% -> [0.3968, 0.8922].
    """
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes}/{trials}")
    if trials == 0:
        return Interval(0.0, 1.0)
    z = z_quantile(_two_sided(confidence))
    n = float(trials)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom
    # Clamp only the rounding noise at the ends (k=0 or k=n give exactly 0 or 1 in exact arithmetic).
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return Interval(low, high)


# ----------------------------------------------------------------------- mean of tasks


@dataclass(frozen=True)
class MeanInterval:
    """Mean of per-task values with a Student-t interval (df = n - 1).

    ``mean`` is None when no task is usable. With one task there is no variance
    estimate: ``sd`` is None and the interval is ``(-inf, +inf)``. With zero
    sample variance the interval collapses to ``[mean, mean]``.
    """

    mean: float | None
    interval: Interval
    sd: float | None
    n: int
    dropped: int = 0
    """Tasks left out because a value (or, for a paired difference, either value) was missing."""
    floored: bool = False
    """The interval used the within-task variance floor instead of the smaller observed sd
    (:func:`paired_difference_counts`)."""
    exact_mean: Fraction | None = None
    """The mean as an exact rational where it comes from counts (:func:`paired_difference_counts`): what its
    sign is decided on (:mod:`harness.analysis.exact`); ``mean`` is its nearest float."""

    @property
    def df(self) -> int:
        return max(0, self.n - 1)

    @property
    def se(self) -> float | None:
        return None if self.sd is None or self.n == 0 else self.sd / math.sqrt(self.n)


def t_interval(values: Sequence[float | None], confidence: float = 0.95) -> MeanInterval:
    """Mean of the non-None ``values`` with a t-interval, df = (number of values) - 1.

    Used for an arm's task-clustered pass rate (mean of per-task rates), which
    is the honest companion of the naive Wilson interval.
    """
    kept = [v for v in values if v is not None]
    dropped = len(values) - len(kept)
    n = len(kept)
    if n == 0:
        return MeanInterval(None, Interval(-_INF, _INF), None, 0, dropped)
    mean = math.fsum(kept) / n
    if n == 1:
        return MeanInterval(mean, Interval(-_INF, _INF), None, 1, dropped)
    sd = statistics.stdev(kept, xbar=mean)
    if sd == 0.0:
        return MeanInterval(mean, Interval(mean, mean), 0.0, n, dropped)
    half = t_quantile(_two_sided(confidence), n - 1) * sd / math.sqrt(n)
    return MeanInterval(mean, Interval(mean - half, mean + half), sd, n, dropped)


def paired_difference(
    skill: Sequence[float | None], baseline: Sequence[float | None], confidence: float = 0.95
) -> MeanInterval:
    """Task-weighted paired difference of pass rates, d_i = skill_i - baseline_i.

    ``skill[i]`` and ``baseline[i]`` are task i's pass rates (k/n over valid
    trials), None when the task has no valid trial in that arm; only tasks with
    a rate in both arms (T') are used and ``dropped`` counts the others. The
    interval is mean(d) +/- t_{T'-1, 1-a/2} * sd(d)/sqrt(T') (docs/statistics.md#paired-difference),
    which held ~95% coverage at 10-30 tasks where bootstraps under-covered (design notes).
    Degenerate cases as in :class:`MeanInterval`.
    """
    if len(skill) != len(baseline):
        raise ValueError("skill and baseline must list the same tasks")
    diffs: list[float | None] = [
        None if s is None or b is None else s - b for s, b in zip(skill, baseline, strict=True)
    ]
    return t_interval(diffs, confidence)


def jeffreys_variance(passes: int, trials: int) -> float:
    """Binomial variance of a rate k/n with the Jeffreys-adjusted p = (k + 1/2)/(n + 1): p(1-p)/n.

    Never zero, even for 0/n and n/n, which is the point: three passes out of three
    do not prove the task always passes."""
    if trials <= 0:
        raise ValueError("trials must be >= 1")
    p = (passes + 0.5) / (trials + 1.0)
    return p * (1.0 - p) / trials


def paired_difference_counts(
    skill: Sequence[tuple[int, int] | None],
    baseline: Sequence[tuple[int, int] | None],
    confidence: float = 0.95,
) -> MeanInterval:
    """The paired task-level difference of pass rates from per-task counts ``(passes, valid)``,
    with a floor under the variance and bounds clipped to [-1, +1].

    As :func:`paired_difference`, except that the variance of d_i used for the interval is
    max(sample variance of d_i, mean_i[v_J(S, i) + v_J(B, i)]), where v_J is the Jeffreys-adjusted
    within-task binomial variance (:func:`jeffreys_variance`): the sampling noise each d_i carries
    even when every observed d_i happens to be equal. Without the floor, two tasks that both went
    0/1 -> 1/1 gave the zero-width interval [+100, +100] points. A difference of two rates lies in
    [-1, +1], so the interval is clipped there (it is what the reports show). A count with
    ``valid == 0`` (or None) drops the task.
    """
    if len(skill) != len(baseline):
        raise ValueError("skill and baseline must list the same tasks")
    kept = [
        (s, b)
        for s, b in zip(skill, baseline, strict=True)
        if s is not None and b is not None and s[1] > 0 and b[1] > 0
    ]
    dropped = len(skill) - len(kept)
    n = len(kept)
    if n == 0:
        return MeanInterval(None, Interval(-1.0, 1.0), None, 0, dropped)
    # d_i and their mean exactly, from the counts: six differences that sum to 0 have mean 0, not -9e-18
    exact_diffs = [Fraction(s[0], s[1]) - Fraction(b[0], b[1]) for s, b in kept]
    exact_mean = sum(exact_diffs, Fraction(0)) / n
    mean = float(exact_mean)
    if n == 1:
        return MeanInterval(mean, Interval(-1.0, 1.0), None, 1, dropped, exact_mean=exact_mean)
    sd = math.sqrt(float(statistics.variance(exact_diffs, xbar=exact_mean)))
    floor = math.fsum(jeffreys_variance(*s) + jeffreys_variance(*b) for s, b in kept) / n
    floored = sd * sd < floor
    sd_used = math.sqrt(floor) if floored else sd
    half = t_quantile(_two_sided(confidence), n - 1) * sd_used / math.sqrt(n)
    low, high = max(-1.0, mean - half), min(1.0, mean + half)
    return MeanInterval(mean, Interval(low, high), sd, n, dropped, floored, exact_mean)


# ---------------------------------------------------------------------- sign-flip test


@dataclass(frozen=True)
class SignFlipResult:
    """Two-sided sign-flip permutation test of "mean d_i = 0".

    ``p_value`` is None when there is no task. ``method`` is "exact" (the full
    2^n sign distribution) or "monte_carlo" (``flips`` random sign vectors,
    p = (1 + hits)/(1 + flips) so that it is never 0).
    """

    p_value: float | None
    method: str
    n: int
    flips: int


def _integer_weights(values: Sequence[float | Fraction]) -> list[int]:
    """Scale |values| to integers so sums compare exactly: exact rationals (per-task differences of k/n
    rates) as they are, floats through their nearest small-denominator fraction (usually exact too)."""
    exact = [abs(v) for v in values if isinstance(v, Fraction)]
    if len(exact) == len(values):
        fracs = exact
    else:
        floats = [abs(float(v)) for v in values]
        fracs = [Fraction(v).limit_denominator(1_000_000) for v in floats]
        if not all(abs(float(f) - v) <= 1e-12 * max(1.0, v) for f, v in zip(fracs, floats, strict=True)):
            fracs = []
    scale = 1
    for f in fracs:
        scale = math.lcm(scale, f.denominator)
        if scale > 10**12:
            break
    else:
        if fracs or not values:
            return [int(f * scale) for f in fracs]
    # Not on a small rational lattice: 1e-9 resolution is far below any meaningful difference.
    return [round(abs(float(v)) * 1e9) for v in values]


def _exact_sign_flip_hits(weights: Sequence[int], observed: int, max_states: int) -> Fraction | None:
    """Share of sign vectors with |sum| >= |observed|, or None if the state space grows too large.

    A subset-sum DP over distinct partial sums counts exactly what full
    enumeration of the 2^n sign vectors would count, in O(n * distinct sums).
    """
    counts: dict[int, int] = {0: 1}
    for w in weights:
        nxt: dict[int, int] = {}
        for s, c in counts.items():
            nxt[s + w] = nxt.get(s + w, 0) + c
            nxt[s - w] = nxt.get(s - w, 0) + c
        counts = nxt
        if len(counts) > max_states:
            return None
    target = abs(observed)
    hits = sum(c for s, c in counts.items() if abs(s) >= target)
    return Fraction(hits, 2 ** len(weights))


def sign_flip_test(
    differences: Sequence[float | Fraction],
    *,
    seed: int = 0,
    mc_flips: int = SIGN_FLIP_MC_FLIPS,
    exact_max_tasks: int = SIGN_FLIP_EXACT_MAX_TASKS,
    max_exact_states: int = SIGN_FLIP_MAX_EXACT_STATES,
) -> SignFlipResult:
    """Exact (or seeded Monte Carlo) two-sided sign-flip test on per-task differences d_i.

    Under "the skill does nothing" each d_i is as likely to be +|d_i| as -|d_i|;
    p is the share of the 2^n sign vectors whose |sum| is at least the observed
    |sum|. Up to ``exact_max_tasks`` tasks the distribution is always exact.
    Beyond that it is still exact when the sums take few distinct values (d_i
    are differences of k/n rates, so they do: 50 tasks x 3 runs have at most
    301), and only otherwise falls back to ``mc_flips`` seeded random flips.
    Zero differences are kept (they do not change p). Pass exact rationals (per-task differences of
    ``k/n`` rates) where there are: then every weight and sign is exact.
    """
    n = len(differences)
    if n == 0:
        return SignFlipResult(None, "exact", 0, 0)
    weights = _integer_weights(differences)
    observed = sum(w if d >= 0 else -w for w, d in zip(weights, differences, strict=True))
    nonzero = [w for w in weights if w != 0]
    states = max_exact_states if n > exact_max_tasks else max(max_exact_states, 1 << exact_max_tasks)
    exact = _exact_sign_flip_hits(nonzero, observed, states)
    if exact is not None:
        return SignFlipResult(float(exact), "exact", n, 2**n)
    rng = random.Random(seed)
    # Lookup tables of 8-sign chunks: each random flip costs ceil(n/8) additions instead of n.
    chunks = [nonzero[i : i + 8] for i in range(0, len(nonzero), 8)]
    tables: list[list[int]] = []
    for chunk in chunks:
        table = []
        for mask in range(1 << len(chunk)):
            table.append(sum(w if mask >> j & 1 else -w for j, w in enumerate(chunk)))
        tables.append(table)
    target = abs(observed)
    hits = 0
    for _ in range(mc_flips):
        total = 0
        for chunk, table in zip(chunks, tables, strict=True):
            total += table[rng.getrandbits(len(chunk))]
        if abs(total) >= target:
            hits += 1
    return SignFlipResult((1 + hits) / (1 + mc_flips), "monte_carlo", n, mc_flips)


# ------------------------------------------------------------- one trial per arm and task


def mcnemar_exact(skill_only: int, baseline_only: int) -> float:
    """Exact McNemar test: two-sided binomial(b + c, 1/2) p on the discordant pairs.

    ``skill_only`` = tasks where only the skill arm passed, ``baseline_only`` =
    where only the baseline passed (one trial per arm and task). p is
    min(1, 2 * P(X <= min(b, c))), which is what ``binomtest`` gives for a
    symmetric null. Reference: 8 vs 2 -> 0.1094. No discordant pair -> 1.
    """
    if skill_only < 0 or baseline_only < 0:
        raise ValueError("counts must be >= 0")
    n = skill_only + baseline_only
    if n == 0:
        return 1.0
    k = min(skill_only, baseline_only)
    tail = Fraction(sum(math.comb(n, i) for i in range(k + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


@dataclass(frozen=True)
class PairedProportion:
    """Difference of two paired proportions (skill - baseline) with its interval."""

    difference: float
    interval: Interval
    n: int


def newcombe_paired_interval(
    both_pass: int, skill_only: int, baseline_only: int, both_fail: int, confidence: float = 0.95
) -> PairedProportion:
    """Newcombe (1998) method 10 interval for a difference of paired proportions.

    Cells of the paired 2x2 table (one trial per arm and task): a = both pass,
    b = skill passed and baseline failed, c = baseline passed and skill failed,
    d = both fail. The difference is (b - c)/n. It combines the Wilson
    intervals of each arm's marginal rate through the phi correlation of the
    table, with Newcombe's continuity correction on phi when ad > bc.
    Reference (Altman, Statistics with Confidence, table 6.2): a=14, b=5, c=0,
    d=22 -> 0.122 (0.0115, 0.2265). An empty table gives difference 0 on [-1, 1].
    """
    a, b, c, d = both_pass, skill_only, baseline_only, both_fail
    if min(a, b, c, d) < 0:
        raise ValueError("cell counts must be >= 0")
    n = a + b + c + d
    if n == 0:
        return PairedProportion(0.0, Interval(-1.0, 1.0), 0)
    theta1 = (a + b) / n
    theta2 = (a + c) / n
    w1 = wilson_interval(a + b, n, confidence)
    w2 = wilson_interval(a + c, n, confidence)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    if margins == 0:
        phi = 0.0  # a margin is empty: no correlation can be estimated, treat the arms as uncorrelated
    else:
        num = float(a * d - b * c)
        if num > 0:
            # Newcombe's own correction of phi (his method 10); without it Altman's published bounds are not reproduced.
            num = max(num - n / 2.0, 0.0)
        phi = num / math.sqrt(margins)
    diff = theta1 - theta2
    lower_sq = (theta1 - w1.low) ** 2 - 2.0 * phi * (theta1 - w1.low) * (w2.high - theta2) + (w2.high - theta2) ** 2
    upper_sq = (w1.high - theta1) ** 2 - 2.0 * phi * (w1.high - theta1) * (theta2 - w2.low) + (theta2 - w2.low) ** 2
    low = diff - math.sqrt(max(0.0, lower_sq))
    high = diff + math.sqrt(max(0.0, upper_sq))
    return PairedProportion(diff, Interval(max(-1.0, low), min(1.0, high)), n)


# -------------------------------------------------------------------------------- cost


@dataclass(frozen=True)
class CostRatio:
    """Skill/baseline ratio of task-weighted mean cost per trial, with Fieller's paired interval.

    ``ratio`` is mean_i(c_S,i) / mean_i(c_B,i) over the tasks with cost data in
    both arms. Conventions when a mean is zero: 0/0 -> 1 on [1, 1] (neither arm
    spent anything, e.g. a free scripted model), x/0 -> +inf on [inf, inf], 0/x
    -> 0 on [0, 0]. With one task the interval is (0, +inf). ``method`` names
    how the interval was computed.
    """

    ratio: float | None
    interval: Interval
    mean_skill: float | None
    mean_baseline: float | None
    n: int
    dropped: int = 0
    method: str = "fieller"


def fieller_interval(pairs: Sequence[tuple[float, float]], confidence: float = 0.95) -> Interval:
    """Fieller's interval for mu_S/mu_B from paired task means (s_i, b_i), t with n - 1 df.

    The set of R with (s_bar - R b_bar)^2 <= t^2 Var(s_bar - R b_bar), where the variance uses the
    sample variances and covariance of the pairs divided by n. When b_bar is not distinguishable
    from zero (b_bar^2 <= t^2 Var(b_bar)) the set is unbounded: (0, +inf) for positive costs.
    Costs are never negative, so the lower bound is clipped at 0.
    """
    n = len(pairs)
    if n < 2:
        return Interval(0.0, _INF)
    s = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    ms, mb = math.fsum(s) / n, math.fsum(b) / n
    vs = statistics.variance(s, xbar=ms) / n
    vb = statistics.variance(b, xbar=mb) / n
    cov = math.fsum((x - ms) * (y - mb) for x, y in pairs) / (n - 1) / n
    t2 = t_quantile(_two_sided(confidence), n - 1) ** 2
    qa = mb * mb - t2 * vb
    qb = -2.0 * (ms * mb - t2 * cov)
    qc = ms * ms - t2 * vs
    disc = qb * qb - 4.0 * qa * qc
    if qa <= 0.0 or disc < 0.0:
        return Interval(0.0, _INF)
    root = math.sqrt(disc)
    low = (-qb - root) / (2.0 * qa)
    high = (-qb + root) / (2.0 * qa)
    return Interval(max(0.0, low), max(0.0, high))


def cost_ratio(
    skill_costs: Sequence[float | None], baseline_costs: Sequence[float | None], confidence: float = 0.95
) -> CostRatio:
    """Cost ratio R = mu_S/mu_B of per-task mean costs with Fieller's interval (:func:`fieller_interval`).

    ``skill_costs[i]``/``baseline_costs[i]`` are task i's mean cost per trial in
    each arm (None when the arm has no costed trial there). Pairing by task keeps
    the large between-task cost variation out through the covariance term. The
    log-scale delta method used before covered 91-94% in simulation; Fieller covers
    at least 95% there (``scripts/simulate_rules.py`` prints the figure).
    """
    if len(skill_costs) != len(baseline_costs):
        raise ValueError("skill and baseline must list the same tasks")
    pairs = [(s, b) for s, b in zip(skill_costs, baseline_costs, strict=True) if s is not None and b is not None]
    dropped = len(skill_costs) - len(pairs)
    n = len(pairs)
    if n == 0:
        return CostRatio(None, Interval(0.0, _INF), None, None, 0, dropped)
    mu_s = math.fsum(s for s, _ in pairs) / n
    mu_b = math.fsum(b for _, b in pairs) / n
    if mu_b == 0.0 and mu_s == 0.0:
        return CostRatio(1.0, Interval(1.0, 1.0), mu_s, mu_b, n, dropped)
    if mu_b == 0.0:
        return CostRatio(_INF, Interval(_INF, _INF), mu_s, mu_b, n, dropped)
    if mu_s == 0.0:
        return CostRatio(0.0, Interval(0.0, 0.0), mu_s, mu_b, n, dropped)
    ratio = mu_s / mu_b
    if n == 1:
        return CostRatio(ratio, Interval(0.0, _INF), mu_s, mu_b, n, dropped)
    return CostRatio(ratio, fieller_interval(pairs, confidence), mu_s, mu_b, n, dropped)


def cost_per_pass(total_cost_usd: float, passes: int) -> float | None:
    """Descriptive cost per passing trial (total cost / passes); None without a pass."""
    return None if passes <= 0 else total_cost_usd / passes


# --------------------------------------------------------------------------- power / MDE


@dataclass(frozen=True)
class Variances:
    """Variance components of Miller's Eq. 9 with questions -> tasks.

    ``sigma2_*`` = mean over tasks of the within-task Bernoulli variance
    p_i(1 - p_i) in each arm; ``omega2`` = between-task variance of the true
    per-task effect (difficulty itself cancels thanks to pairing).
    """

    sigma2_skill: float
    sigma2_baseline: float
    omega2: float


DEFAULT_VARIANCES = Variances(DEFAULT_SIGMA2, DEFAULT_SIGMA2, DEFAULT_OMEGA2)


def pilot_variances(tasks: Sequence[tuple[int, int, int, int]], runs: float) -> Variances:
    """Estimate :class:`Variances` from per-task counts ``(k_skill, n_skill, k_base, n_base)``.

    sigma2_a = mean_i p_i(1-p_i) * n_i/(n_i-1) over tasks with n_i >= 2 (the
    unbiased within-task variance; 0 if no task has two valid trials),
    omega2 = max(0, Var(d_i) - (sigma2_S + sigma2_B)/runs) (docs/statistics.md#smallest-detectable-effect).
    Tasks without a valid trial in both arms are ignored. With one trial per
    arm the within-task part cannot be separated and all of Var(d) lands in
    omega2, which is right for the same design and conservative for more runs.
    """

    def within(pairs: list[tuple[int, int]]) -> float:
        terms = [(k / n) * (1 - k / n) * n / (n - 1) for k, n in pairs if n >= 2]
        return math.fsum(terms) / len(terms) if terms else 0.0

    usable = [t for t in tasks if t[1] > 0 and t[3] > 0]
    s2_s = within([(ks, ns) for ks, ns, _, _ in usable])
    s2_b = within([(kb, nb) for _, _, kb, nb in usable])
    diffs = [ks / ns - kb / nb for ks, ns, kb, nb in usable]
    var_d = statistics.variance(diffs) if len(diffs) >= 2 else 0.0
    omega2 = max(0.0, var_d - (s2_s + s2_b) / runs) if runs > 0 else var_d
    return Variances(s2_s, s2_b, omega2)


def _effect_se(tasks: int, runs: float, variances: Variances) -> float:
    """Standard error of the paired task-level mean difference: sqrt((omega2 + sigma2_S/N + sigma2_B/N)/T)."""
    return math.sqrt((variances.omega2 + variances.sigma2_skill / runs + variances.sigma2_baseline / runs) / tasks)


def power(
    effect: float,
    tasks: int,
    runs: float,
    *,
    alpha: float = 0.05,
    variances: Variances = DEFAULT_VARIANCES,
) -> float:
    """The power function of the design: the chance that the paired task-level t-test (the interval rule's
    lower bound above 0) detects a true gain ``effect`` with T ``tasks`` and N ``runs`` per arm.

    power = F_{t, T-1}(effect / SE - t_{T-1, 1-alpha/2}), SE = sqrt((omega2 + sigma2_S/N + sigma2_B/N)/T)
    (Miller 2024 Eq. 9-10 with t in place of z; docs/statistics.md#smallest-detectable-effect). The
    report's smallest detectable effect (:func:`mde`) is its inverse at 80%, and ``skilltrial plan`` sizes
    designs with it: one power function for both. Fewer than 2 tasks: 0 (no test possible).
    """
    if tasks < 2 or runs <= 0:
        return 0.0
    df = tasks - 1
    se = _effect_se(tasks, runs, variances)
    if se == 0.0:
        return 1.0 if effect > 0 else 0.0
    return float(_scipy_stats.t.cdf(effect / se - t_quantile(1.0 - alpha / 2.0, df), df))


def mde(
    tasks: int,
    runs: float,
    *,
    alpha: float = 0.05,
    power: float = DEFAULT_POWER,
    variances: Variances = DEFAULT_VARIANCES,
) -> float:
    """Smallest true gain (absolute pass-rate points) the paired task-level t-test detects: the inverse of
    :func:`power` at ``power``, in closed form,

    MDE = (t_{T-1, 1-alpha/2} + t_{T-1, power}) * sqrt((omega2 + sigma2_S/N + sigma2_B/N)/T)
    for T tasks and N runs per arm (Miller 2024 Eq. 9-10; docs/statistics.md#smallest-detectable-effect).
    With the defaults (sigma2 = 0.125, omega2 = 0) this gives 0.29 / 0.19 / 0.12
    at 10 / 20 / 50 tasks x 3 runs. Fewer than 2 tasks -> +inf (no test possible).
    """
    if tasks < 2 or runs <= 0:
        return _INF
    df = tasks - 1
    return (t_quantile(1.0 - alpha / 2.0, df) + t_quantile(power, df)) * _effect_se(tasks, runs, variances)


# ------------------------------------------------------------------------ descriptive


@dataclass(frozen=True)
class Summary:
    """Median and interquartile range of a descriptive metric (turns, seconds); None fields when empty."""

    n: int
    median: float | None
    q1: float | None
    q3: float | None

    @property
    def iqr(self) -> float | None:
        return None if self.q1 is None or self.q3 is None else self.q3 - self.q1


EMPTY_SUMMARY = Summary(0, None, None, None)


def summarize(values: Sequence[float | None]) -> Summary:
    """Median and quartiles (linear interpolation, numpy's default) of the non-None values."""
    kept = sorted(float(v) for v in values if v is not None)
    if not kept:
        return EMPTY_SUMMARY
    if len(kept) == 1:
        return Summary(1, kept[0], kept[0], kept[0])
    q1, med, q3 = statistics.quantiles(kept, n=4, method="inclusive")
    return Summary(len(kept), med, q1, q3)
