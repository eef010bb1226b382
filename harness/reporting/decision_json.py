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
from harness.reporting.model import ReportInput, results_digest, run_dates, run_provenance
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
