"""Trigger accuracy, analysed (pure): a trigger study's records in, rates and paired comparisons out.

Per query, its trigger rate (Wilson interval). Per variant, recall over should-trigger runs and the
false-trigger rate over should-not runs, each a ratio estimate with a query-clustered interval (runs of
one query are not independent: :func:`clustered_rate`). Each variant against the first (the reference),
paired by query (the same queries; in the scripted model, the same draws): a t-interval over per-query
differences, a sign-flip test, and McNemar on the run pairs (:func:`compare`).

Could-not-measure runs are never counted as misses: a variant with no measured should-trigger run has no
recall (``rate`` None and why), not a 0% recall. The records come from :mod:`harness.experiment.triggers`;
the renderings (``triggers.json``, ``triggers.md``, the terminal's lines) are :mod:`harness.reporting.triggers`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.analysis import stats
from harness.records import TriggerRecord
from harness.study.triggers import TriggerPrereg


@dataclass(frozen=True)
class RateEstimate:
    """A ratio estimate over queries: ``k`` triggered of ``n`` measured runs, in ``queries`` queries."""

    rate: float | None
    low: float | None
    high: float | None
    k: int
    n: int
    queries: int
    could_not_measure: str | None = None
    """Why there is no rate (only when ``rate`` is None)."""


@dataclass(frozen=True)
class QueryRate:
    """One query's runs in one variant."""

    query: str
    should_trigger: bool
    near_miss: bool
    triggered: int
    measured: int
    could_not_measure: int
    reasons: tuple[str, ...]
    """Why its unmeasured runs were not measured (each reason once, sorted)."""
    rate: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class VariantResult:
    """One variant (one description of the skill) over every query."""

    recall: RateEstimate
    false_trigger_rate: RateEstimate
    queries: tuple[QueryRate, ...]
    """In the preregistration's order."""
    runs: int
    could_not_measure: int
    cost_usd: float
    mean_input_tokens: float | None
    listings: tuple[str, ...]
    """The listing hashes its runs saw (one, when nothing but the description differs)."""


@dataclass(frozen=True)
class PairedDifference:
    """Variant minus reference, paired by query; the run pairs that disagree, for McNemar."""

    difference: float | None
    low: float | None
    high: float | None
    queries: int
    sign_flip_p: float | None
    run_pairs_only_variant: int
    run_pairs_only_reference: int
    mcnemar_p: float | None


@dataclass(frozen=True)
class Comparison:
    reference: str
    variant: str
    recall: PairedDifference
    false_trigger_rate: PairedDifference


@dataclass(frozen=True)
class TriggerAnalysis:
    skill: str
    runs_per_query: int
    confidence: float
    variants: Mapping[str, VariantResult]
    """In the preregistration's order; the first is the reference."""
    comparisons: tuple[Comparison, ...]
    """Each variant after the first against the first."""


Runs = Mapping[tuple[str, str], Sequence[TriggerRecord]]
"""(variant, query id) -> its runs."""


def clustered_rate(clusters: Sequence[tuple[int, int]], confidence: float) -> RateEstimate:
    """Ratio estimate sum(k)/sum(n) over clusters (queries) of (k triggered, n measured), with a
    cluster-robust t-interval (df = clusters - 1). When every cluster has the same rate the robust
    variance is zero; then the Wilson interval with one observation per cluster is used instead
    (conservative: as if each query were a single run)."""
    used = [(k, n) for k, n in clusters if n > 0]
    total_k, total_n = sum(k for k, _ in used), sum(n for _, n in used)
    if total_n == 0:
        return RateEstimate(rate=None, low=None, high=None, k=0, n=0, queries=0)
    p = total_k / total_n
    q = len(used)
    low, high = 0.0, 1.0
    if q >= 2:
        var = q / (q - 1) * sum((k - p * n) ** 2 for k, n in used) / total_n**2
        if var > 0:
            half = stats.t_quantile(1 - (1 - confidence) / 2, q - 1) * math.sqrt(var)
            low, high = max(0.0, p - half), min(1.0, p + half)
        else:
            w = stats.wilson_interval(round(p * q), q, confidence)
            low, high = w.low, w.high
    return RateEstimate(rate=p, low=low, high=high, k=total_k, n=total_n, queries=q)


def analyze(prereg: TriggerPrereg, records: Sequence[TriggerRecord]) -> TriggerAnalysis:
    by: dict[tuple[str, str], list[TriggerRecord]] = {}
    for r in records:
        by.setdefault((r.variant, r.query_id), []).append(r)
    variants = {v: variant_result(prereg, v, by, records) for v in prereg.variants}
    reference, *others = prereg.variants
    return TriggerAnalysis(
        skill=prereg.skill,
        runs_per_query=prereg.execution.runs_per_query,
        confidence=prereg.execution.confidence,
        variants=variants,
        comparisons=tuple(compare(prereg, reference, other, variants, by) for other in others),
    )


def query_rate(prereg: TriggerPrereg, runs: Sequence[TriggerRecord], query_index: int) -> QueryRate:
    q = prereg.queries[query_index]
    k = sum(r.outcome == "triggered" for r in runs)
    n = sum(r.outcome != "could_not_measure" for r in runs)
    unmeasured = [r.reason or "" for r in runs if r.outcome == "could_not_measure"]
    w = stats.wilson_interval(k, n, prereg.execution.confidence)
    return QueryRate(
        query=q.id,
        should_trigger=q.should_trigger,
        near_miss=q.near_miss,
        triggered=k,
        measured=n,
        could_not_measure=len(unmeasured),
        reasons=tuple(sorted(set(unmeasured))),
        rate=k / n if n else None,
        low=w.low if n else None,
        high=w.high if n else None,
    )


def variant_result(prereg: TriggerPrereg, variant: str, by: Runs, records: Sequence[TriggerRecord]) -> VariantResult:
    conf = prereg.execution.confidence
    rows = tuple(query_rate(prereg, by.get((variant, q.id), []), i) for i, q in enumerate(prereg.queries))
    reasons = "; ".join(sorted({x for row in rows for x in row.reasons})) or "none ran"

    def estimate(should_trigger: bool) -> RateEstimate:
        clusters = [(row.triggered, row.measured) for row in rows if row.should_trigger == should_trigger]
        est = clustered_rate(clusters, conf)
        if est.rate is not None:
            return est
        why = "no query of this kind" if not clusters else f"no run measured: {reasons}"
        return dataclasses.replace(est, could_not_measure=why)

    runs = [r for r in records if r.variant == variant]
    return VariantResult(
        recall=estimate(True),
        false_trigger_rate=estimate(False),
        queries=rows,
        runs=len(runs),
        could_not_measure=sum(r.outcome == "could_not_measure" for r in runs),
        cost_usd=round(sum(r.cost_usd for r in runs), 6),
        mean_input_tokens=(sum(r.input_tokens for r in runs) / len(runs)) if runs else None,
        listings=tuple(sorted({r.listing_sha256 for r in runs if r.listing_sha256})),
    )


def compare(
    prereg: TriggerPrereg, reference: str, other: str, variants: Mapping[str, VariantResult], by: Runs
) -> Comparison:
    """``other`` against ``reference``, paired by query."""

    def rates(variant: str) -> dict[str, float | None]:
        return {row.query: row.rate for row in variants[variant].queries}

    ref_rates, other_rates = rates(reference), rates(other)

    def paired(should_trigger: bool) -> PairedDifference:
        queries = [q for q in prereg.queries if q.should_trigger == should_trigger]
        diffs: list[float] = []
        for q in queries:
            a, b = ref_rates.get(q.id), other_rates.get(q.id)
            if a is not None and b is not None:
                diffs.append(b - a)
        ti = stats.t_interval(diffs, prereg.execution.confidence)
        sf = stats.sign_flip_test(diffs) if diffs else None
        only_other = only_ref = 0
        for q in queries:
            ra = {r.run_index: r for r in by.get((reference, q.id), []) if r.outcome != "could_not_measure"}
            rb = {r.run_index: r for r in by.get((other, q.id), []) if r.outcome != "could_not_measure"}
            for i in ra.keys() & rb.keys():
                ta, tb = ra[i].outcome == "triggered", rb[i].outcome == "triggered"
                only_other += tb and not ta
                only_ref += ta and not tb
        return PairedDifference(
            difference=ti.mean,
            low=None if ti.mean is None or math.isinf(ti.interval.low) else ti.interval.low,
            high=None if ti.mean is None or math.isinf(ti.interval.high) else ti.interval.high,
            queries=ti.n,
            sign_flip_p=sf.p_value if sf else None,
            run_pairs_only_variant=only_other,
            run_pairs_only_reference=only_ref,
            mcnemar_p=stats.mcnemar_exact(only_other, only_ref) if only_other + only_ref else None,
        )

    return Comparison(reference=reference, variant=other, recall=paired(True), false_trigger_rate=paired(False))
