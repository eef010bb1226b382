"""``decision.json``: the machine-readable verdict that ``skilltrial gate`` and ``skilltrial history`` read.

Infinite bounds are written as the strings ``"inf"`` / ``"-inf"`` (JSON has no infinity). The gate
trusts the file only while it is current: same lock, the same result lines (their number and digest,
:func:`harness.reporting.gate.fresh_decision`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from harness import fmt
from harness.analysis import skilluse as skillreport
from harness.analysis.runnotes import failed_trials_by_arm, failures_by_arm, reuse_counts
from harness.analysis.sizing import Sizing
from harness.reporting.model import (
    ReportInput,
    next_experiment,
    next_experiment_text,
    results_digest,
    run_dates,
    run_provenance,
)
from harness.reporting.outputs import DECISION_JSON

__all__ = ["DECISION_JSON", "decision_json", "dumps"]


def decision_json(r: ReportInput) -> dict[str, Any]:
    """The machine-readable verdict, rates, intervals and provenance (schema_version 1)."""
    a, d = r.analysis, r.decision
    prov = run_provenance(r)
    first, last = run_dates(r)
    return {
        "schema_version": 1,
        "skill": r.prereg.skill,
        "lock_hash": r.lock_hash,
        "experiment_id": r.experiment_id,
        "results_lines": len(r.records),
        "results_sha256": results_digest(r.records),
        "started_at": first,
        "finished_at": last,
        "model": prov["model"],
        "resolved_model": prov["resolved_model"],
        "cli_version": prov["cli_version"],
        "rule": d.rule,
        "verdict": d.verdict,
        "label": d.label,
        "point_only_adopt": d.point_only_adopt,
        "point_verdict": d.point_verdict,
        "interval_verdict": d.interval_verdict,
        "evidence": d.evidence,
        "reasons": [{"code": x.code, "kind": x.kind, "message": x.message} for x in d.reasons],
        "arms": {
            arm.arm: {
                "passes": arm.passes,
                "valid": arm.valid,
                "rate": fmt.rate(arm),
                "unknown": arm.unknown,
                "truncated": arm.truncated,
                "infra": arm.infra,
                "skipped": arm.skipped,
                "mean_cost_per_trial_usd": arm.mean_cost_per_trial,
                "cost_per_pass_usd": arm.cost_per_pass,
            }
            for arm in (a.baseline, a.skill)
        },
        "paired_difference": {
            "mean": a.paired.mean,
            "low": _finite(a.paired.interval.low),
            "high": _finite(a.paired.interval.high),
            "tasks": a.paired.n,
        },
        "sign_flip_p": a.sign_flip.p_value,
        "cost_ratio": {
            "ratio": _finite(a.cost.ratio),
            "low": _finite(a.cost.interval.low),
            "high": _finite(a.cost.interval.high),
        },
        "mde": _finite(a.mde),
        "spent_usd": r.spent_usd,
        "skipped_tasks": list(r.skipped_tasks),
        "flagged_trials": [{"trial": t.trial_id, "flags": list(t.flags)} for t in r.flagged],
        "identical_patch_reuse": reuse_counts(r.records),
        "api_failures": {arm: dict(c) for arm, c in failures_by_arm(r.records).items()},
        "api_failed_trials": failed_trials_by_arm(r.records),
        "skill_invocation": skillreport.summary(r.final_records, r.prereg.decision.pass_rule),
        **_sequential(r),
        **_next_experiment(r),
    }


def _sequential(r: ReportInput) -> dict[str, Any]:
    """``sequential`` (only under a group-sequential design): the design's looks and the deciding look, with
    its repeated intervals."""
    seq = r.decision.sequential
    if seq is None:
        return {}
    return {
        "sequential": {
            "spending": seq.design.spending,
            "alpha_one_sided": seq.design.alpha,
            "looks": [
                {
                    "look": x.number,
                    "round": x.round,
                    "information_fraction": x.fraction,
                    "boundary_z": x.boundary,
                    "nominal_confidence": x.confidence,
                    "alpha_spent": x.spent,
                }
                for x in seq.design.looks
            ],
            "decided_at_look": seq.look.number,
            "stopped_early": seq.stopped_early,
            "looks_reached": seq.looks_reached,
            "repeated_interval": {
                "mean": seq.paired.mean,
                "low": _finite(seq.paired.interval.low),
                "high": _finite(seq.paired.interval.high),
                "confidence": seq.look.confidence,
            },
            "cost_ratio": {
                "ratio": _finite(seq.cost.ratio),
                "low": _finite(seq.cost.interval.low),
                "high": _finite(seq.cost.interval.high),
            },
            "planned_trials": seq.planned_trials,
            "analysed_trials": seq.analysed_trials,
            "later_trials": seq.later_trials,
        }
    }


def _next_experiment(r: ReportInput) -> dict[str, Any]:
    """``next_experiment`` (only after an inconclusive verdict): what a new, separately locked experiment
    would need for 80% power, from the same power function as ``mde``."""
    nxt = next_experiment(r)
    if nxt is None:
        return {}

    def design(s: Sizing | None) -> dict[str, Any] | None:
        if s is None:
            return None
        return {"gain": s.gain, "tasks": s.tasks, "runs_per_arm": s.runs, "trials": s.trials,
                "power": s.power, "cost_usd": s.cost_usd}  # fmt: skip

    return {
        "next_experiment": {
            "basis": nxt.basis,
            "design": design(nxt.design),
            "at_minimum_worthwhile_gain": design(nxt.at_minimum),
            "variances": nxt.variances,
            "text": next_experiment_text(r),
        }
    }


def _finite(x: float | None) -> float | str | None:
    if x is None:
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def dumps(data: dict[str, Any]) -> str:
    """The file's text: sorted keys, two-space indent, a final newline."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
