"""``skilltrial eval`` for a library experiment: the A/B machinery with another plan and analysis.

:class:`LibraryExperiment` is an :class:`~harness.experiment.experiment.Experiment` (hardened containers,
gateway, budgets, resume, shards, progress, baseline reuse) whose plan is one bare and one
masked trial per (task, sample) pair, whose masked trials get exactly their mask's skills
(:mod:`harness.trial.delivery`), and which refuses, before any model call, a reused bare arm that does
not cover the plan with final, scorable trials of identical provenance. After the run,
:func:`harness.experiment.library_plan.analyze` pairs and audits the records and fits every component; the
outputs are ``contributions.json``, ``report.md``, ``report.html``, ``summary.txt`` and a
ledger entry with each skill's coefficient and interval. The four files are one set
(:data:`harness.reporting.outputs.LIBRARY_OUTPUTS`): a refused analysis rewrites every one of them to say so,
so no report keeps a selection or a chart the records no longer support.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import fmt
from harness.errors import ConfigError, HarnessError
from harness.experiment import library_plan as library
from harness.experiment import reuse
from harness.experiment.evaluate import _signals
from harness.experiment.events import Events
from harness.experiment.experiment import Experiment
from harness.experiment.options import RunOptions
from harness.plan import TrialSpec, library_template_sha256
from harness.records import Provenance, TrialRecord, outcome
from harness.reporting import ledger
from harness.reporting.outputs import (
    CONTRIBUTIONS_JSON,
    LIBRARY_OUTPUTS,
    REPORT_HTML,
    REPORT_MD,
    SUMMARY_TXT,
    publish,
    refusal_page,
)
from harness.results.attempts import latest_by_trial
from harness.results.identity import RecordIdentity
from harness.results.load import study_for
from harness.results.meta import require_meta
from harness.sandbox.runtime import Runtime
from harness.study.config import Study, baseline_dir
from harness.study.lock import copy_skill, skill_files

__all__ = ["CONTRIBUTIONS_JSON", "LibraryExperiment", "analyze_and_write", "evaluate_library", "report_library"]

CAVEAT = (
    "A positive coefficient is a provisional ranking under an additive model (interactions and heterogeneity "
    "break it), not proof that a skill helps; a zero coefficient is not proof of no effect. Confirm the "
    "selected set on held-out tasks with the A/B path."
)


class LibraryExperiment(Experiment):
    def __init__(
        self,
        study: Study,
        engine: Runtime | None,
        options: RunOptions,
        events: Events | None = None,
        *,
        design: library.Design,
        **kwargs: Any,
    ) -> None:
        super().__init__(study, engine, options, events, **kwargs)
        self.design = design
        self.run_id = "library" + secrets.token_hex(3)  # every Docker object of the run says what it is

    def plan_specs(self, study: Study | None = None) -> tuple[TrialSpec, ...]:
        return library.plan_trials(self.design, (study or self.study).prereg.execution.seed)

    def prompt_template_sha256(self) -> str:
        return library_template_sha256()

    def check_reuse(
        self,
        specs: Sequence[TrialSpec],
        latest: Mapping[str, TrialRecord],
        identity: RecordIdentity,
        inputs: reuse.BaselineInputs,
    ) -> None:
        """Before any container: every planned bare trial this directory has no outcome of must come from
        ``library.baseline_from``; otherwise refuse (exit 4), naming the first input that differs."""
        lib = self.study.prereg.library
        assert lib is not None
        if lib.baseline_from is None:
            return
        wanted = {
            s.trial_id: fp
            for s in specs
            if (fp := identity.fingerprint(s)) and not (s.trial_id in latest and latest[s.trial_id].is_outcome)
        }
        chosen = reuse.select(wanted, [baseline_dir(self.study)], identity.provenance, inputs=inputs)
        if chosen.missed:
            raise library.reuse_refused(self.study, chosen.summary(len(wanted)))

    def preflight(self, specs: Sequence[TrialSpec], records: Sequence[TrialRecord], provenance: Provenance) -> None:
        lib = self.study.prereg.library
        assert lib is not None
        if lib.baseline_from is None:
            return
        latest = latest_by_trial(records)
        rule = self.study.prereg.decision.pass_rule
        problems = []
        for spec in specs:
            if spec.arm != library.BARE:
                continue
            rec = latest.get(spec.trial_id)
            if rec is None:
                problems.append(f"{spec.trial_id}: not in the baseline (or its fingerprint or provenance differ)")
            elif outcome(rec, rule) not in ("pass", "fail"):
                problems.append(f"{spec.trial_id}: the bare trial is not final and scorable ({outcome(rec, rule)})")
            elif rec.provenance.of_run() != provenance:
                problems.append(f"{spec.trial_id}: provenance differs from this experiment's")
        library._refuse(problems, f"before any model call, the reused baseline {baseline_dir(self.study)}")

    def derived_outputs(self) -> tuple[str, ...]:
        return LIBRARY_OUTPUTS.files

    def library_copies(self, run_root: Path) -> dict[str, Path]:
        root = self.study.skill_dir
        return {name: copy_skill(skill_files(root / name), run_root / "library" / name) for name in self.design.skills}


def evaluate_library(study: Study, options: RunOptions, events: Events | None = None) -> list[str]:
    """Run (or resume) a library experiment (reporting through ``events``), analyse it, write its outputs
    and ledger entry. Returns the lines to show afterwards."""
    design = library.design(study)  # an unidentifiable design is refused before anything runs
    lib = study.prereg.library
    assert lib is not None
    if options.reuse_from:
        raise ConfigError(
            study.prereg_path,
            "a library experiment reuses bare trials only from library.baseline_from (its data is locked), "
            "not from --reuse-baseline-from",
            field="library.baseline_from",
        )
    if lib.baseline_from is not None:
        options = dataclasses.replace(options, reuse_from=(baseline_dir(study),))
    experiment = LibraryExperiment(study, None, options, events, design=design)
    with _signals(experiment):
        result = experiment.run()
    if options.shard is not None:
        return [f"shard {options.shard} done: merge the shards, then analyse"]
    return analyze_and_write(
        result.study,  # as run: the preflight's trivial tasks left out
        design,
        RunData(
            result.experiment_dir.root,
            result.records,
            result.lock_hash,
            result.images.claude_code_version,
            result.experiment_dir.redactor.text,
        ),
    )


@dataclasses.dataclass(frozen=True)
class RunData:
    """What the analysis needs of a finished (or merged) library experiment directory."""

    root: Path
    records: Sequence[TrialRecord]
    lock_hash: str
    cli_version: str
    redact: Callable[[str], str] = str


def analyze_and_write(
    study: Study, design: library.Design, result: RunData, *, update_ledger: bool = True
) -> list[str]:
    """Analyse the records; write contributions.json and the reports; update the ledger.
    A refused analysis (a failed check) writes the refusal (no selection) into every output, then raises
    (:func:`harness.reporting.outputs.publish`)."""
    lock = study.prereg.lock
    assert lock is not None
    analysed: list[library.LibraryResult] = []

    def produce() -> dict[str, str]:
        analysed.append(library.analyze(study, design, result.records))
        body = contributions_body(study, analysed[0], result, dict(lock.files))
        return rendered_outputs(study, analysed[0], body)

    def refusal(e: HarnessError) -> dict[str, str]:
        return refusal_outputs(study, design, result, str(e))

    paths = publish(result.root, LIBRARY_OUTPUTS, produce, refusal, result.redact)
    res = analysed[0]
    primary = res.fits[library.PRIMARY]
    run = ledger.LibraryRun(
        run=result.lock_hash[:12],
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        model=study.prereg.execution.model,
        cli_version=result.cli_version,
        component=library.PRIMARY,
        method=res.method,
        selected=res.selected,
        coefficients={
            e.skill: ledger.LibraryCoefficient(
                beta=round(e.beta, 6), ci_low=round(e.ci_low, 6), ci_high=round(e.ci_high, 6), se_hc3=round(e.se_hc3, 6)
            )
            for e in primary.estimates
        },
    )
    out = [paths[SUMMARY_TXT].read_text(encoding="utf-8").rstrip("\n")]
    out += [f"  {paths[n]}" for n in (CONTRIBUTIONS_JSON, REPORT_MD, REPORT_HTML)]
    if update_ledger:
        where = ledger.record_library(study, study.prereg.skill, run)
        out.append(f"ledger {where}: library {study.prereg.skill}, coefficients of run {run.run} recorded")
    return out


# ------------------------------------------------------------------------------ outputs


def design_info(study: Study, d: library.Design, result: RunData) -> dict[str, Any]:
    lib = study.prereg.library
    assert lib is not None
    ran = sum(1 for r in latest_by_trial(result.records).values() if r.reused_from is None and r.is_outcome)
    reused = sum(1 for r in latest_by_trial(result.records).values() if r.reused_from is not None)
    k = len(d.skills)
    return {
        "skills": list(d.skills),
        "tasks": [t.id for t in d.tasks],
        "samples": d.samples,
        "pairs": len(d.pairs),
        "inclusion_probability": lib.masks.inclusion_probability,
        "balanced": lib.masks.balanced,
        "mask_seed": lib.masks.seed,
        "delivery": lib.delivery,
        "trials_planned": 2 * len(d.pairs),
        "trials_run": ran,
        "bare_trials_reused": reused,
        "factorial_arms": 2**k,
        "factorial_trials": 2**k * len(d.tasks) * d.samples,
    }


def contributions_body(
    study: Study, res: library.LibraryResult, result: RunData, lock_files: Mapping[str, str]
) -> dict[str, Any]:
    from harness.analysis import contributions

    baseline = library.baseline_info(study, lock_files)
    components = {
        c: contributions.to_json(
            fit,
            component=c,
            selected=res.selected if c == library.PRIMARY else (),
            method=res.method,
            baseline=baseline,
        )
        for c, fit in res.fits.items()
    }
    return {
        "format": 1,
        "library": study.prereg.skill,
        "experiment_id": result.lock_hash[:12],
        "lock_hash": result.lock_hash,
        "estimator": contributions.ESTIMATOR,
        "primary": library.PRIMARY,
        "pass_rule": study.prereg.decision.pass_rule,
        "selection": {"method": res.method, "top_k": res.top_k, "selected": list(res.selected)},
        "baseline": baseline,
        "design": design_info(study, res.design, result),
        "caveat": CAVEAT,
        "components": components,
    }


def _dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"


def summary_text(study: Study, res: library.LibraryResult) -> str:
    fit = res.fits[library.PRIMARY]
    lines = [
        f"LIBRARY {study.prereg.skill}: selected ({res.method}, top {res.top_k}): "
        + (", ".join(res.selected) if res.selected else "none"),
        f"{res.paired} paired observations, K={len(res.design.skills)} skills; coefficient on pass "
        f"(task-clustered bootstrap interval, {round(100 * (1 - fit.alpha))}%):",
    ]
    for e in sorted(fit.estimates, key=lambda e: -e.beta):
        lines.append(
            f"  {e.skill:<24} {fmt.num(e.beta, 3, sign=True)}  "
            f"[{fmt.num(e.ci_low, 3, sign=True)}, {fmt.num(e.ci_high, 3, sign=True)}]  HC3 SE {fmt.num(e.se_hc3, 3)}"
        )
    lines.append(CAVEAT)
    return "\n".join(lines) + "\n"


def markdown_report(study: Study, res: library.LibraryResult, body: Mapping[str, Any]) -> str:
    from harness.reporting import contributions as contributions_report

    d = body["design"]
    lines = [
        f"# Skill library `{study.prereg.skill}`",
        "",
        f"**Selected ({res.method}, top {res.top_k}):** " + (", ".join(f"`{s}`" for s in res.selected) or "none"),
        "",
        f"{d['pairs']} (task, sample) pairs over {len(d['tasks'])} tasks x {d['samples']} samples, "
        f"K = {len(d['skills'])} skills, inclusion probability {d['inclusion_probability']:g}"
        + (" (balanced)" if d["balanced"] else "")
        + f"; {d['trials_planned']} trials ({d['bare_trials_reused']} bare reused) instead of the "
        f"{d['factorial_trials']} of a full 2^{len(d['skills'])} factorial. Baseline: {body['baseline']['source']}.",
        "",
        contributions_report.markdown_section(res.fits, res.selected, res.method).rstrip("\n"),
        "",
    ]
    return "\n".join(lines)


def html_report(study: Study, res: library.LibraryResult, body: Mapping[str, Any]) -> str:
    from harness.reporting import contributions as contributions_report

    esc = html.escape
    rows = []
    for comp, fit in res.fits.items():
        cells = "".join(
            f"<td>{e.beta:+.3g}<br><small>[{e.ci_low:+.3g}, {e.ci_high:+.3g}]</small></td>" for e in fit.estimates
        )
        rows.append(f"<tr><th>{esc(comp)}</th>{cells}</tr>")
    head = "".join(f"<th>{esc(e.skill)}</th>" for e in res.fits[library.PRIMARY].estimates)
    d = body["design"]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Skill library {esc(study.prereg.skill)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}}
.caveat{{background:#fff7e0;padding:.6rem;border-left:4px solid #e0a000}}</style></head><body>
<h1>Skill library <code>{esc(study.prereg.skill)}</code></h1>
<p><strong>Selected ({esc(res.method)}, top {res.top_k}):</strong> {esc(", ".join(res.selected) or "none")}</p>
<p>{d["pairs"]} (task, sample) pairs, K = {len(d["skills"])} skills, inclusion probability
{d["inclusion_probability"]:g}; {d["trials_planned"]} trials instead of {d["factorial_trials"]} for a full factorial.
Baseline: {esc(str(body["baseline"]["source"]))}.</p>
<h2>Coefficient on pass, with its bootstrap interval</h2>
{contributions_report.svg_chart(res.fits[library.PRIMARY])}
<h2>Every component</h2>
<table><tr><th>component</th>{head}</tr>{"".join(rows)}</table>
<p class="caveat">{esc(CAVEAT)}</p>
</body></html>
"""


def rendered_outputs(study: Study, res: library.LibraryResult, body: Mapping[str, Any]) -> dict[str, str]:
    """The library's set (:data:`~harness.reporting.outputs.LIBRARY_OUTPUTS`) of an analysis that fitted."""
    return {
        CONTRIBUTIONS_JSON: _dumps(body),
        REPORT_MD: markdown_report(study, res, body),
        REPORT_HTML: html_report(study, res, body),
        SUMMARY_TXT: summary_text(study, res),
    }


def refusal_outputs(study: Study, d: library.Design, result: RunData, message: str) -> dict[str, str]:
    """A refused analysis: every output of the set says so and selects nothing (no table, no chart)."""
    body = {
        "format": 1,
        "library": study.prereg.skill,
        "experiment_id": result.lock_hash[:12],
        "lock_hash": result.lock_hash,
        "status": "refused",
        "error": message,
        "selection": None,
        "design": design_info(study, d, result),
    }
    name = study.prereg.skill
    return {
        CONTRIBUTIONS_JSON: _dumps(body),
        REPORT_MD: f"# Skill library `{name}`: no selection\n\nThe analysis was refused: {message}\n",
        REPORT_HTML: refusal_page(f"Skill library {name}: no selection", message),
        SUMMARY_TXT: f"LIBRARY {name}: REFUSED, no selection\n{message}\n",
    }


def report_library(root: Path, prereg_path: Path | None = None) -> list[str]:
    """Re-render a library experiment's outputs from ``root`` (``skilltrial report``, ``skilltrial merge``): no
    Docker, no ledger update. Raises LibraryCheckError (after writing the refusal) like ``eval``."""
    from harness.results.store import read_results

    meta = require_meta(root)
    study = study_for(meta, root, prereg_path)
    records = read_results(root / "results.jsonl").records
    versions = {r.provenance.cli_version for r in records}
    run = RunData(root, records, meta.lock_hash, ", ".join(sorted(versions)))
    return analyze_and_write(study, library.design(study), run, update_ledger=False)


def is_library_dir(root: Path, prereg_path: Path | None = None) -> bool:
    """Whether ``root`` holds a library experiment (its preregistration has a library: block)."""
    from harness.study.config import load_preregistration

    try:
        named = prereg_path or Path(str(require_meta(root).preregistration))
        return load_preregistration(named).library is not None
    except Exception:  # not readable here: the A/B path reports the problem with its own message
        return False
