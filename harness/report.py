"""Rendering an analysed experiment for people and machines (read-only over results).

The terminal summary shows every rate with its N (``7/10``) and what was
excluded, both rules' verdicts beside the preregistered one, and every reason
that applied. ``decision.json`` is the machine-readable verdict ``harness gate``
reads.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from harness.config import Preregistration
from harness.decision import Analysis, DecisionResult


@dataclass(frozen=True)
class ReportInput:
    prereg: Preregistration
    analysis: Analysis
    decision: DecisionResult
    lock_hash: str
    skipped_tasks: tuple[str, ...]
    flagged: tuple[tuple[str, tuple[str, ...]], ...]
    """(trial id, flags) of trials a reviewer should look at."""
    experiment_dir: str
    spent_usd: float


def _pp(x: float | None) -> str:
    if x is None:
        return "n/a"
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"{100 * x:+.1f} pp"


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:.4f}"


def _ratio(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "inf" if math.isinf(x) else f"{x:.2f}x"


def terminal_summary(r: ReportInput) -> str:
    a, d = r.analysis, r.decision
    conf = round(100 * a.confidence)
    lines = [
        f"skill {r.prereg.skill}   lock {r.lock_hash[:12]}   rule {d.rule}   "
        f"tasks {a.n_tasks} x {r.prereg.execution.runs_per_arm} runs per arm",
        "",
        f"{'':10}{'pass rate':>14}  {'naive ' + str(conf) + '% (Wilson)':>22}  {'$/trial':>9}  {'$/pass':>9}  excluded",
    ]
    for arm in (a.baseline, a.skill):
        w = arm.wilson
        lines.append(
            f"{arm.arm:10}{arm.rate_text:>14}  {f'[{w.low:.2f}, {w.high:.2f}]':>22}  "
            f"{_usd(arm.mean_cost_per_trial):>9}  {_usd(arm.cost_per_pass):>9}  {arm.extras_text or '-'}"
        )
    p = a.paired
    lines += [
        "",
        f"paired difference (skill - baseline, per task): {_pp(p.mean)}  {conf}% CI [{_pp(p.interval.low)}, "
        f"{_pp(p.interval.high)}] (t, {max(p.n - 1, 0)} df)   sign-flip p = "
        + (f"{a.sign_flip.p_value:.3f}" if a.sign_flip.p_value is not None else "n/a"),
        f"tasks improved / worse / tied: {a.tasks_improved} / {a.tasks_worse} / {a.tasks_tied}   "
        f"smallest detectable effect: {_pp(a.mde).lstrip('+')}",
        f"cost ratio skill/baseline: {_ratio(a.cost.ratio)}  {conf}% CI [{_ratio(a.cost.interval.low)}, "
        f"{_ratio(a.cost.interval.high)}]   limit {1 + r.prereg.decision.cost_increase_max:.2f}x",
    ]
    if a.paired_table is not None:
        t = a.paired_table
        lines.append(
            f"one run per arm: McNemar p = {t.mcnemar_p:.3f}, Newcombe {_pp(t.newcombe.difference)} "
            f"[{_pp(t.newcombe.interval.low)}, {_pp(t.newcombe.interval.high)}]"
        )
    if r.skipped_tasks:
        lines.append(f"skipped (TODO in prompt): {', '.join(r.skipped_tasks)}")
    if r.flagged:
        lines.append(
            f"flagged trials ({len(r.flagged)}): "
            + "; ".join(f"{t} [{', '.join(f)}]" for t, f in r.flagged[:6])
            + (" ..." if len(r.flagged) > 6 else "")
        )
    lines += [
        "",
        f"point rule (the article's): {d.point_verdict or 'n/a'}   interval rule: {d.interval_verdict}   "
        f"evidence: {d.evidence}",
    ]
    for reason in d.reasons:
        lines.append(f"  - [{reason.code}] {reason.message}")
    lines += [
        "",
        f"DECISION ({d.rule} rule, preregistered): {d.verdict.upper()}",
        f"spent {_usd(r.spent_usd)}   results in {r.experiment_dir}",
    ]
    return "\n".join(lines)


def decision_json(r: ReportInput) -> dict[str, Any]:
    a, d = r.analysis, r.decision
    return {
        "schema_version": 1,
        "skill": r.prereg.skill,
        "lock_hash": r.lock_hash,
        "rule": d.rule,
        "verdict": d.verdict,
        "point_verdict": d.point_verdict,
        "interval_verdict": d.interval_verdict,
        "evidence": d.evidence,
        "reasons": [{"code": x.code, "kind": x.kind, "message": x.message} for x in d.reasons],
        "arms": {
            arm.arm: {
                "passes": arm.passes,
                "valid": arm.valid,
                "rate": arm.rate_text,
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
    }


def _finite(x: float | None) -> float | str | None:
    if x is None:
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
