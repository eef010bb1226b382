"""The skill-library design: random masks, identifiability and sizing. Pure: no I/O, no Docker.

Every (task, sample) pair gets a 0/1 mask over the K skills of a library; the masked
trial runs with exactly the mask's skills and is paired with the bare trial of the
same task and sample. The estimator (:mod:`harness.analysis.contributions`) regresses
``R - B`` on the masks without an intercept, so it needs the mask matrix to have full
column rank. This module draws the masks, refuses designs that cannot be identified
(naming the aliased skills), and predicts the standard error of each coefficient so a
user can size a run before paying for it (``plan_library``).

Masks are drawn from :class:`random.Random` using only ``random()``, the one method
whose sequence Python guarantees across versions for a given seed, so a locked plan
redraws the same masks on any interpreter.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import HarnessError

Mask = tuple[int, ...]

DEFAULT_SIGMA_DELTA = 0.5
"""Assumed SD of R - B without pilot data: binary rewards on a U-shaped suite (E[p(1-p)] = 0.125 per arm)."""


class DesignError(HarnessError):
    """The mask design cannot identify every skill's coefficient (bad input; names the skills)."""

    exit_code = 4


def _check_p(p: float) -> None:
    if not (isinstance(p, int | float) and math.isfinite(p) and 0.0 < p < 1.0):
        raise DesignError(
            f"mask inclusion probability p={p!r} must be strictly between 0 and 1",
            hint="with p = 0 or p = 1 every mask is the same and no skill's effect can be separated",
        )


def _balanced_count(n: int, p: float) -> int:
    return round(n * p)


def check_design(n: int, k: int, p: float, balanced: bool) -> None:
    """Refuse, before any trial runs, a design whose mask matrix cannot have full column rank.

    ``n`` is the number of (task, sample) pairs, ``k`` the number of skills. Raises
    :class:`DesignError` when n < k, k < 1, p is not in (0, 1), or a balanced design
    puts every skill in no mask or in every mask (two or more identical columns).
    """
    if k < 1:
        raise DesignError("the library has no skills: nothing to estimate")
    if n < 1:
        raise DesignError("the design has no (task, sample) pairs")
    _check_p(p)
    if n < k:
        raise DesignError(
            f"{n} (task, sample) pairs cannot identify {k} skills: the mask matrix has rank at most {n} < {k}",
            hint="add tasks or samples so that there are more pairs than skills (and many more for useful precision)",
        )
    if balanced:
        m = _balanced_count(n, p)
        if m == 0:
            raise DesignError(f"balanced design: round({n} * {p}) = 0, so no mask contains any skill")
        if m == n and k > 1:
            raise DesignError(
                f"balanced design: round({n} * {p}) = {n}, so every mask contains every skill "
                "and all skills are aliased with each other"
            )


def draw_masks(n: int, k: int, *, p: float = 0.5, seed: int, balanced: bool = False) -> tuple[Mask, ...]:
    """Draw ``n`` masks over ``k`` skills, one per (task, sample) pair in the order given; seeded, deterministic.

    ``balanced=False``: each entry is an independent Bernoulli(p). ``balanced=True``: every skill
    appears in exactly ``round(n * p)`` masks (an independent random subset of rows per skill).
    The all-zero mask is a valid mask: it is never redrawn and never dropped. A draw is not
    checked for rank here; call :func:`check_identifiable` on the result.
    """
    if n < 0 or k < 0:
        raise DesignError(f"cannot draw {n} masks over {k} skills")
    _check_p(p)
    rng = random.Random(seed)
    if not balanced:
        return tuple(tuple(1 if rng.random() < p else 0 for _ in range(k)) for _ in range(n))
    m = _balanced_count(n, p)
    columns: list[list[int]] = []
    for _ in range(k):
        rows = list(range(n))
        # Fisher-Yates driven by random() alone (random.shuffle's algorithm is not version-guaranteed).
        for i in range(n - 1, 0, -1):
            j = int(rng.random() * (i + 1))
            rows[i], rows[j] = rows[j], rows[i]
        chosen = set(rows[:m])
        columns.append([1 if r in chosen else 0 for r in range(n)])
    return tuple(tuple(columns[c][r] for c in range(k)) for r in range(n))


def _matrix(masks: Sequence[Sequence[int]], k: int | None = None) -> np.ndarray:
    rows = [tuple(int(v) for v in m) for m in masks]
    if not rows:
        return np.zeros((0, k or 0))
    widths = {len(r) for r in rows}
    if len(widths) != 1:
        raise DesignError(f"masks have different lengths: {sorted(widths)}")
    if k is not None and widths != {k}:
        raise DesignError(f"masks have length {widths.pop()} but the library has {k} skills")
    if any(v not in (0, 1) for r in rows for v in r):
        raise DesignError("a mask entry is not 0 or 1")
    return np.asarray(rows, dtype=float)


def _fmt_coef(c: float) -> str:
    r = round(c, 6)
    if abs(r - round(r)) < 1e-6:
        return str(round(r))
    return f"{r:g}"


def aliasing(masks: Sequence[Sequence[int]], skills: Sequence[str]) -> list[str]:
    """Human-readable reasons why the mask matrix is rank deficient (empty when it has full column rank).

    Names skills in no mask ("s3 is in no mask"), identical columns ("s2 == s3"), and any other
    linear dependence found in the null space ("s1 + s2 == s3").
    """
    x = _matrix(masks, len(skills))
    k = len(skills)
    if x.shape[0] == 0:
        return [f"no observations for {k} skills"]
    if np.linalg.matrix_rank(x) == k:
        return []
    reasons: list[str] = []
    covered: set[int] = set()
    for j in range(k):
        if not x[:, j].any():
            reasons.append(f"{skills[j]} is in no mask")
            covered.add(j)
    for a in range(k):
        if a in covered:
            continue
        for b in range(a + 1, k):
            if b not in covered and np.array_equal(x[:, a], x[:, b]):
                reasons.append(f"{skills[a]} == {skills[b]}")
                covered.add(b)
    reduced = [j for j in range(k) if j not in covered]
    sub = x[:, reduced]
    if reduced and np.linalg.matrix_rank(sub) < len(reduced):
        _, s, vt = np.linalg.svd(sub)
        tol = s.max() * max(sub.shape) * np.finfo(float).eps if s.size else 0.0
        rank = int((s > tol).sum())
        for v in vt[rank:]:
            v = v / np.abs(v).max()
            lhs = [(reduced[i], c) for i, c in enumerate(v) if c > 1e-9]
            rhs = [(reduced[i], -c) for i, c in enumerate(v) if c < -1e-9]
            if not lhs:
                lhs, rhs = rhs, lhs

            def side(terms: list[tuple[int, float]]) -> str:
                if not terms:
                    return "0"
                return " + ".join((skills[j] if abs(c - 1) < 1e-6 else f"{_fmt_coef(c)}*{skills[j]}") for j, c in terms)

            reasons.append(f"{side(lhs)} == {side(rhs)}")
    return reasons


def check_identifiable(masks: Sequence[Sequence[int]], skills: Sequence[str]) -> None:
    """Raise :class:`DesignError` naming the aliased skills and the rank when the masks are rank deficient.

    Used after drawing the masks and again, on the masks actually run, before fitting.
    """
    k = len(skills)
    if k == 0:
        raise DesignError("the library has no skills: nothing to estimate")
    if len(set(skills)) != k:
        dupes = sorted({s for s in skills if list(skills).count(s) > 1})
        raise DesignError(f"skill names are not unique: {', '.join(dupes)}")
    x = _matrix(masks, k)
    rank = int(np.linalg.matrix_rank(x)) if x.shape[0] else 0
    if rank < k:
        why = "; ".join(aliasing(masks, skills))
        raise DesignError(
            f"mask matrix rank {rank} < K={k}: not identifiable ({why})",
            hint="the effects of aliased skills cannot be told apart; redraw the masks with another seed "
            "or add (task, sample) pairs",
        )


def condition_number(masks: Sequence[Sequence[int]]) -> float:
    """2-norm condition number of the mask matrix C (largest over smallest singular value); inf when singular."""
    x = _matrix(masks)
    if x.size == 0:
        return math.inf
    s = np.linalg.svd(x, compute_uv=False)
    if s.min() <= s.max() * max(x.shape) * np.finfo(float).eps:
        return math.inf
    return float(s.max() / s.min())


def variance_factor(k: int, p: float) -> float:
    """f(p, K) with Var(beta_k) ~= sigma^2 f / n: [1 / (p (1-p))] * [1 - p / (1 - p + K p)].

    From E[C^T C] / n = p(1-p) I + p^2 J for independent Bernoulli(p) masks and no intercept.
    """
    _check_p(p)
    if k < 1:
        raise DesignError("the library has no skills: nothing to estimate")
    return (1.0 / (p * (1.0 - p))) * (1.0 - p / (1.0 - p + k * p))


def expected_se(n_pairs: int, k: int, p: float, sigma_delta: float) -> float:
    """Expected SE of each coefficient: sigma / sqrt(n p (1-p)) * sqrt(1 - p / (1 - p + K p)).

    Large-sample approximation for independent Bernoulli(p) masks (optimistic when n is
    only a few times K); checked by simulation in ``scripts/simulate_library.py``.
    """
    if n_pairs < 1:
        raise DesignError("the design has no (task, sample) pairs")
    if not (math.isfinite(sigma_delta) and sigma_delta >= 0):
        raise DesignError(f"sigma_delta={sigma_delta!r} must be a finite number >= 0")
    return sigma_delta * math.sqrt(variance_factor(k, p) / n_pairs)


@dataclass(frozen=True)
class LibraryPlan:
    """What ``skilltrial plan`` prints for a library design before anything runs."""

    tasks: int
    samples: int
    k: int
    p: float
    balanced: bool
    sigma_delta: float
    n_pairs: int
    trials: int
    """Trials to run: one masked and one bare per (task, sample) pair (bare may be reused instead)."""
    expected_se: float | None
    ci_halfwidth: float | None
    """1.96 x expected SE: the approximate half-width of each coefficient's 95% interval."""
    identifiable: bool
    reason: str | None
    """Why the design cannot be identified (None when it can)."""
    rank_deficient_share: float | None
    """Share of seeded random draws (Bernoulli design) whose mask matrix is rank deficient."""

    def lines(self) -> list[str]:
        """Plain-text lines for the CLI."""
        head = (
            f"library design: {self.tasks} tasks x {self.samples} samples = {self.n_pairs} pairs, "
            f"K={self.k} skills, p={self.p:g}{' (balanced)' if self.balanced else ''}; "
            f"{self.trials} trials ({self.n_pairs} masked + {self.n_pairs} bare)"
        )
        if not self.identifiable:
            return [head, f"NOT IDENTIFIABLE: {self.reason}"]
        out = [
            head,
            f"expected SE per coefficient ~ {self.expected_se:.3f} (95% interval about +/-{self.ci_halfwidth:.3f}) "
            f"assuming SD(R - B) = {self.sigma_delta:g}",
        ]
        if self.rank_deficient_share:
            out.append(
                f"warning: {self.rank_deficient_share:.1%} of random draws of this design are rank deficient "
                "(the run would be refused; use balanced masks or more pairs)"
            )
        return out


def _rank_deficient_share(n: int, k: int, p: float, draws: int = 500, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    chunk = max(1, min(draws, 1_000_000 // max(1, n * k)))
    deficient = 0
    for start in range(0, draws, chunk):
        d = min(chunk, draws - start)
        x = (rng.random((d, n, k)) < p).astype(float)
        eig = np.linalg.eigvalsh(np.einsum("dni,dnj->dij", x, x))
        deficient += int((eig[:, 0] <= eig[:, -1] * 1e-10 + 1e-12).sum())
    return deficient / draws


def plan_library(
    tasks: int,
    samples: int,
    p: float,
    k: int,
    *,
    sigma_delta: float = DEFAULT_SIGMA_DELTA,
    balanced: bool = False,
) -> LibraryPlan:
    """Size a library run: expected SE per coefficient and whether the design can be identified. Pure.

    Never raises for an unidentifiable design: it says so in ``identifiable``/``reason``.
    """
    n = tasks * samples
    try:
        check_design(n, k, p, balanced)
        if not (math.isfinite(sigma_delta) and sigma_delta >= 0):
            raise DesignError(f"sigma_delta={sigma_delta!r} must be a finite number >= 0")
    except DesignError as e:
        return LibraryPlan(tasks, samples, k, p, balanced, sigma_delta, n, 2 * n, None, None, False, e.message, None)
    se = expected_se(n, k, p, sigma_delta)
    share = None if balanced or n * k > 50_000 else _rank_deficient_share(n, k, p)
    return LibraryPlan(tasks, samples, k, p, balanced, sigma_delta, n, 2 * n, se, 1.96 * se, True, None, share)
