"""A/A calibration: the baseline against itself (``skilltrial calibrate PREREG``).

Both arms run the baseline (same prompt, no skill mounted, same plan); the second
arm is recorded under the arm name ``skill`` so the ordinary analysis applies.
Whatever a rule adopts or rejects here is noise, so the run measures:

* how often each rule would adopt or reject a skill that does nothing, by
  resampling the A/A data (tasks drawn with replacement, arms swapped at random
  per task: both are exchangeable when the arms are identical);
* how often the judge agrees with verify (pass/fail, with Cohen's kappa);
* the drift between the two arms (the paired difference with its interval;
  an interval that excludes 0 means the harness itself differs between arms).

The summary is written to ``calibration.json`` in the run's directory and
appended to the ledger next to the preregistration. :func:`summarize` is pure.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import fmt
from harness.analysis.decide import decide, judge_independence_warning
from harness.analysis.estimates import Analysis, analyze
from harness.analysis.observations import DecisionContext, Observation, context_from_records, observations_from_records
from harness.analysis.rules import evidence_label
from harness.analysis.sequential import decide_run
from harness.records import TrialRecord
from harness.reporting.outputs import CALIBRATION_JSON, CALIBRATION_OUTPUTS, publish
from harness.results.attempts import final_attempts
from harness.study.config import DecisionSettings, Study

DEFAULT_RESAMPLES = 400


def judge_agreement(records: Sequence[TrialRecord]) -> dict[str, Any]:
    """Agreement of the judge's pass/fail with verify's exit code over final records that have both."""
    finals = final_attempts(records).finals
    pairs: list[tuple[bool, bool]] = []
    for r in finals:
        if r.verify is None or r.verify.exit_code is None or r.judge is None or r.judge.verdict == "unknown":
            continue
        pairs.append((r.verify.exit_code == 0, r.judge.verdict == "pass"))
    n = len(pairs)
    if n == 0:
        return {"trials": 0, "agreement": None, "kappa": None}
    agree = sum(1 for v, j in pairs if v == j) / n
    pv = sum(1 for v, _ in pairs if v) / n
    pj = sum(1 for _, j in pairs if j) / n
    expected = pv * pj + (1 - pv) * (1 - pj)
    kappa = None if expected >= 1.0 else (agree - expected) / (1.0 - expected)
    return {"trials": n, "agreement": agree, "kappa": kappa}


def _resample(obs: Sequence[Observation], rng: random.Random) -> list[Observation]:
    by_task: dict[str, list[Observation]] = {}
    for o in obs:
        by_task.setdefault(o.task_id, []).append(o)
    ids = sorted(by_task)
    out: list[Observation] = []
    for j in range(len(ids)):
        tid = rng.choice(ids)
        swap = rng.random() < 0.5
        for o in by_task[tid]:
            arm = o.arm if not swap else ("skill" if o.arm == "baseline" else "baseline")
            out.append(
                Observation(
                    f"{tid}#{j}",
                    arm,
                    o.outcome,
                    o.cost_usd,
                    o.turns,
                    o.duration_s,
                    reached_model=o.reached_model,
                    run_index=o.run_index,
                )
            )
    return out


def rule_rates(
    records: Sequence[TrialRecord], settings: DecisionSettings, runs: int, *, resamples: int, seed: int
) -> dict[str, dict[str, float]]:
    """For each rule: the share of resampled A/A experiments ending adopt / reject / inconclusive / invalid.
    The point and interval rules as fixed designs; with ``decision.sequential`` also ``sequential``, the
    interval rule under the preregistered group-sequential design (every look, as :func:`decide_run` decides
    it on the resampled runs)."""
    obs = observations_from_records(records, settings.pass_rule)
    context = context_from_records(records, runs, False)
    rng = random.Random(seed)
    counts: dict[str, Counter[str]] = {"point": Counter(), "interval": Counter()}
    rules = {
        name: settings.model_copy(update={"rule": name, "early_stop": "none", "sequential": None}) for name in counts
    }
    design = settings.model_copy(update={"rule": "interval", "early_stop": "none"})
    if settings.sequential is not None and settings.rule == "interval":
        counts["sequential"] = Counter()
    for _ in range(resamples):
        sample = _resample(obs, rng)
        for name, rule_settings in rules.items():
            a = analyze(sample, rule_settings)
            counts[name][decide_quiet(a, rule_settings, context)] += 1
        if "sequential" in counts:
            counts["sequential"][decide_run(sample, design, _quiet_context(context)).decision.verdict] += 1
    return {
        name: {v: c[v] / resamples for v in ("adopt", "reject", "inconclusive", "invalid")}
        for name, c in counts.items()
    }


def _quiet_context(context: DecisionContext) -> DecisionContext:
    """The run's context without the plan's task ids, which resampled task labels would not match."""
    return DecisionContext(
        budget_stopped=False,
        provenance_by_arm=context.provenance_by_arm,
        planned_runs_per_arm=context.planned_runs_per_arm,
    )


def decide_quiet(a: Analysis, settings: DecisionSettings, context: DecisionContext) -> str:
    """The verdict without the design gates that resampled task labels would trip (unplanned tasks)."""
    return decide(a, settings, _quiet_context(context)).verdict


def summarize(
    study: Study, records: Sequence[TrialRecord], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> dict[str, Any]:
    """Everything ``calibration.json`` holds, from the A/A run's records (pure)."""
    settings = study.prereg.decision
    runs = study.prereg.execution.runs_per_arm
    obs = observations_from_records(records, settings.pass_rule)
    a = analyze(obs, settings)
    finals = final_attempts(records).finals
    outcome_records = [r for r in finals if r.is_outcome]
    models = sorted({r.provenance.model for r in outcome_records})
    resolved = sorted({r.agent.resolved_model for r in outcome_records if r.agent and r.agent.resolved_model})
    clis = sorted({r.provenance.cli_version for r in outcome_records})
    judges = sorted({r.provenance.judge_model for r in outcome_records})
    p = a.paired
    drift_detected = evidence_label(p) != "not distinguishable from noise"  # an interval that excludes 0
    warnings: list[str] = []
    for m in models:
        for j in judges:
            why = judge_independence_warning(m, j)
            if why:
                warnings.append(why)
    if drift_detected:
        warnings.append("the two identical arms differ beyond noise: check the harness before trusting any A/B")
    return {
        "schema_version": 1,
        "kind": "aa_calibration",
        "skill": study.prereg.skill,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "model": ", ".join(models) or study.prereg.execution.model,
        "resolved_model": ", ".join(resolved) or None,
        "cli_version": ", ".join(clis) or "n/a",
        "judge_model": ", ".join(judges) or study.prereg.execution.judge_model,
        "tasks": a.n_tasks,
        "runs_per_arm": runs,
        "arms": {
            arm.arm: {"passes": arm.passes, "valid": arm.valid, "rate": fmt.rate(arm)} for arm in (a.baseline, a.skill)
        },
        "drift": {
            "mean": p.mean,
            "low": p.interval.low,
            "high": p.interval.high,
            "tasks": p.n,
            "detected": drift_detected,
            "text": f"{fmt.pp(p.mean)} [{fmt.pp(p.interval.low)}, {fmt.pp(p.interval.high)}]",
        },
        "observed": {
            "point": decide_quiet(
                a,
                settings.model_copy(update={"rule": "point", "early_stop": "none", "sequential": None}),
                context_from_records(records, runs, False),
            ),
            "interval": decide_quiet(
                a,
                settings.model_copy(update={"rule": "interval", "early_stop": "none", "sequential": None}),
                context_from_records(records, runs, False),
            ),
        },
        "resamples": resamples,
        "rules": rule_rates(records, settings, runs, resamples=resamples, seed=seed),
        "judge": judge_agreement(records),
        "warnings": warnings,
    }


def render(summary: dict[str, Any]) -> str:
    """The terminal summary of a calibration."""

    rules = summary["rules"]
    j = summary["judge"]
    arms = summary["arms"]
    lines = [
        f"A/A calibration of the baseline for {summary['skill']}: model {summary['model']}, "
        f"Claude Code {summary['cli_version']}, judge {summary['judge_model']}",
        f"{summary['tasks']} tasks x {summary['runs_per_arm']} runs per arm; arm A {arms['baseline']['rate']}, "
        f"arm B {arms['skill']['rate']}",
        f"drift between the identical arms: {summary['drift']['text']}"
        + ("  << beyond noise" if summary["drift"]["detected"] else "  (within noise)"),
        f"would adopt a do-nothing skill ({summary['resamples']} resamples): point rule "
        f"{fmt.pct(rules['point']['adopt'], 1)}, interval rule {fmt.pct(rules['interval']['adopt'], 1)}",
        f"would reject it: point rule {fmt.pct(rules['point']['reject'], 1)}, interval rule {fmt.pct(rules['interval']['reject'], 1)}",
        *(
            [
                f"the preregistered group-sequential design would adopt it {fmt.pct(rules['sequential']['adopt'], 1)} "
                f"and reject it {fmt.pct(rules['sequential']['reject'], 1)} of the time"
            ]
            if "sequential" in rules
            else []
        ),
        f"judge agrees with verify on {fmt.pct(j['agreement'], 1)} of {j['trials']} trials"
        + (f" (kappa {j['kappa']:.2f})" if j["kappa"] is not None else ""),
    ]
    lines += [f"warning: {w}" for w in summary["warnings"]]
    return "\n".join(lines)


def write(root: Path, summarise: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], Path]:
    """Summarise and write ``calibration.json`` (:func:`harness.reporting.outputs.publish`: a summary that
    cannot be made leaves no calibration.json from before). Returns the summary and the file."""
    made: list[dict[str, Any]] = []

    def produce() -> dict[str, str]:
        made.append(summarise())
        return {CALIBRATION_JSON: json.dumps(made[0], indent=2, sort_keys=True, default=str) + "\n"}

    paths = publish(root, CALIBRATION_OUTPUTS, produce, lambda _e: {})
    return made[0], paths[CALIBRATION_JSON]


def ledger_entry(summary: dict[str, Any], run_id: str) -> Any:
    from harness.reporting.ledger import CalibrationEntry

    return CalibrationEntry(
        date=summary["date"],
        run=run_id,
        model=summary["model"],
        cli_version=summary["cli_version"],
        judge_model=summary["judge_model"],
        resolved_model=summary["resolved_model"],
        tasks=summary["tasks"],
        runs_per_arm=summary["runs_per_arm"],
        point_adopt=summary["rules"]["point"]["adopt"],
        interval_adopt=summary["rules"]["interval"]["adopt"],
        judge_agreement=summary["judge"]["agreement"],
        drift=summary["drift"]["text"],
    )


def calibrate(study: Study, options: Any, events: Any = None, *, resamples: int = DEFAULT_RESAMPLES) -> list[str]:
    """Run the A/A experiment (``options`` is a RunOptions with ``aa=True``; it reports through ``events``),
    summarise and record it. Returns the lines to show afterwards."""
    from harness.experiment.evaluate import _signals
    from harness.experiment.experiment import Experiment
    from harness.reporting import ledger

    experiment = Experiment(study, None, options, events)  # its engine is made once the study is admitted
    with _signals(experiment):
        result = experiment.run()
    summary, path = write(
        result.experiment_dir.root,
        lambda: summarize(result.study, result.records, resamples=resamples, seed=study.prereg.execution.seed),
    )
    ledger.record_calibration(ledger.ledger_path(study), ledger_entry(summary, result.lock_hash[:12]))
    return ["", *render(summary).split("\n"), f"calibration written to {path}; recorded in {ledger.ledger_path(study)}"]
