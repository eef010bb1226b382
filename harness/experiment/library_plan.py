"""Skill libraries: which of K skills earn their place (paired-delta random-masked validation).

Pure planning and analysis around the estimator (:mod:`harness.analysis.contributions`) and the design
(:mod:`harness.analysis.masks`); running the trials is :mod:`harness.experiment.library`'s business.

    design     every (task, sample) pair gets a seeded 0/1 mask over the K skills
    plan       per pair one ``bare`` trial (arm ``baseline``: no skill, reusable like any baseline)
               and one ``masked`` trial with exactly the mask's skills (harness.trial.delivery)
    lock       the lock hash also covers the estimator's identity, the drawn masks and, when the
               bare arm is reused (``library.baseline_from``), a hash of the baseline data
    analyse    strict one-to-one pairing by (split, task, sample), the audits, then one regression
               ``R - B = C^T beta`` (no intercept) per component; a failed check is a
               :class:`LibraryCheckError`: no selection, no fallback.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from harness import __version__
from harness.analysis import masks
from harness.errors import ConfigError, HarnessError
from harness.experiment import reuse
from harness.plan import TrialSpec, library_prefix, library_template_sha256, ordered_skills, trial_id
from harness.records import RESULTS, Arm, PassRule, Provenance, TrialRecord, outcome
from harness.results.attempts import final_attempts, latest_by_trial
from harness.results.store import read_results
from harness.study.config import MAX_ARGUMENT_BYTES, Study, Task, baseline_dir, library_skills
from harness.study.lock import canonical_json, sha256_hex, skill_files

BARE: Arm = "baseline"
"""The bare arm is the A/B baseline arm (no skill at all): same trial ids, same reuse mechanism."""
MASKED: Arm = "masked"
PRIMARY = "pass"


class LibraryCheckError(HarnessError):
    """A check before the regression failed: the experiment gives no selection (and no fallback)."""

    exit_code = 3


# ----------------------------------------------------------------------------- the library


def files_sha256(files: Mapping[str, bytes]) -> str:
    """A SHA-256 over a skill's files (relative path and content), as :func:`harness.trial.delivery.tree_sha256`."""
    h = hashlib.sha256()
    for rel in sorted(files):
        data = files[rel]
        h.update(f"{rel}\x00{len(data)}\x00".encode())
        h.update(data)
    return h.hexdigest()


def skill_hashes(study: Study) -> dict[str, str]:
    """Each skill's locked content hash: what a mounted copy must hash to."""
    return {name: files_sha256(skill_files(study.skill_dir / name)) for name in library_skills(study)}


# ------------------------------------------------------------------------------ the design


@dataclass(frozen=True)
class Pair:
    """One observation: a task and sample with its mask (0/1 per skill) and the mask's skill names."""

    task_id: str
    sample: int
    mask: tuple[int, ...]
    skills: tuple[str, ...]
    split: str | None = None
    """The task's split (tasks.json): its masked and bare trials pair only within it."""


@dataclass(frozen=True)
class Design:
    skills: tuple[str, ...]
    pairs: tuple[Pair, ...]
    tasks: tuple[Task, ...]
    samples: int

    @property
    def masks(self) -> tuple[tuple[int, ...], ...]:
        return tuple(p.mask for p in self.pairs)


def design(study: Study) -> Design:
    """Draw the masks (seeded) and refuse, before any model call, a design that cannot be identified."""
    lib = study.prereg.library
    assert lib is not None
    skills = library_skills(study)
    tasks = study.target_tasks()
    _check_prompts_fit(study, skills, tasks)
    samples = study.prereg.execution.runs_per_arm
    n, k = len(tasks) * samples, len(skills)
    p, balanced = lib.masks.inclusion_probability, lib.masks.balanced
    masks.check_design(n, k, p, balanced)
    drawn = masks.draw_masks(n, k, p=p, seed=lib.masks.seed, balanced=balanced)
    masks.check_identifiable(drawn, skills)
    pairs = []
    i = 0
    for task in tasks:
        for sample in range(samples):
            m = tuple(drawn[i])
            on = tuple(s for s, bit in zip(skills, m, strict=True) if bit)
            pairs.append(Pair(task.id, sample, m, on, task.split))
            i += 1
    return Design(skills, tuple(pairs), tasks, samples)


def _check_prompts_fit(study: Study, skills: Sequence[str], tasks: Sequence[Task]) -> None:
    """The masked arm's prompt names every skill of its mask before the task's prompt, and reaches the CLI
    as one command-line argument: refused here when a mask of every skill would not fit one."""
    prefix = len(library_prefix(skills).encode())
    for task in tasks:
        size = prefix + len(task.prompt.encode("utf-8", "surrogatepass"))
        if size > MAX_ARGUMENT_BYTES:
            raise ConfigError(
                study.prereg_path,
                f"with all {len(skills)} skills in its mask, the masked arm's prompt for task {task.id!r} is "
                f"{size:,} bytes, more than the {MAX_ARGUMENT_BYTES:,} one command-line argument holds "
                "(Linux MAX_ARG_STRLEN)",
                field="library.path",
                hint="evaluate fewer skills at once, or shorten the task's prompt",
            )


def plan_trials(d: Design, seed: int) -> tuple[TrialSpec, ...]:
    """Per pair one bare and one masked trial, in rounds (one per sample), tasks and arms shuffled by
    ``seed`` within each round so time drift never lines up with one arm."""
    rng = random.Random(seed)
    by_pair = {(p.task_id, p.sample): p for p in d.pairs}
    specs: list[TrialSpec] = []
    previous: list[Task] = []
    for rnd in range(d.samples):
        order = _spaced(list(d.tasks), previous, rng)
        previous = order
        for task in order:
            arms: list[Arm] = [BARE, MASKED]
            rng.shuffle(arms)
            for arm in arms:
                skills = ordered_skills(by_pair[(task.id, rnd)].skills) if arm == MASKED else ()
                specs.append(TrialSpec(trial_id(task.id, arm, rnd), task, arm, rnd, rnd, len(specs), skills))
    return tuple(specs)


def planned_trials(study: Study) -> tuple[TrialSpec, ...]:
    """The trials a library preregistration plans: its design (:func:`design`), in rounds by its seed."""
    return plan_trials(design(study), study.prereg.execution.seed)


def _spaced(tasks: list[Task], previous: Sequence[Task], rng: random.Random) -> list[Task]:
    """A seeded shuffle of ``tasks`` whose first tasks are not the previous round's last ones, so the
    trials of one task in consecutive rounds never start back to back (a model server that tells
    conversations apart by their order, as the scripted one does, then sees them in plan order)."""
    gap = min(2, len(tasks) // 2)
    tail = {t.id for t in previous[len(previous) - gap :]} if previous and gap else set()
    order = list(tasks)
    for _ in range(100):
        rng.shuffle(order)
        if not tail & {t.id for t in order[:gap]}:
            break
    return order


# ------------------------------------------------------------------------------ the lock


def bare_records_for(study: Study, records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The final bare records of the planned (task, sample) pairs, in trial-id order."""
    wanted = {trial_id(t.id, BARE, s) for t in study.target_tasks() for s in range(study.prereg.execution.runs_per_arm)}
    finals = final_attempts(records).finals
    return sorted((r for r in finals if r.trial_id in wanted and r.arm == BARE), key=lambda r: r.trial_id)


def baseline_data_sha256(study: Study) -> str:
    """A hash of the reused baseline data: every final bare record of the planned pairs, as stored."""
    report = read_results(baseline_dir(study) / RESULTS)
    rows = [r.model_dump(mode="json") for r in bare_records_for(study, report.records)]
    return sha256_hex(canonical_json({"format": 1, "records": rows}))


def lock_entries(study: Study, base_sha: str) -> dict[str, str]:
    """What a library experiment adds to the lock: the estimator, the drawn masks, the baseline data (after
    :func:`check_reusable_baseline`: a baseline that cannot serve this plan is refused here)."""
    from harness.analysis import contributions

    d = design(study)
    out = {
        "library/estimator": sha256_hex(contributions.ESTIMATOR.encode()),
        "library/masks": sha256_hex(canonical_json({"skills": list(d.skills), "masks": [list(m) for m in d.masks]})),
    }
    lib = study.prereg.library
    assert lib is not None
    if lib.baseline_from is not None:
        check_reusable_baseline(study, base_sha)
        out["library/baseline"] = baseline_data_sha256(study)
    return out


def check_reusable_baseline(study: Study, base_sha: str) -> None:
    """Refuse (exit 4, naming ``library.baseline_from``) a reused bare arm that cannot serve this plan, by what
    is known before any image exists: every planned bare trial must have a final, scorable record there whose
    base commit, models, delivery, prompt template and harness version are this experiment's and, where that
    directory recorded them, whose settings and task are too. The first input that differs is named
    (``base commit f604634 -> 1a2b3c4``); the rest (Claude Code version, images, runtime, model server) is
    compared by ``eval`` before any container starts (:meth:`LibraryExperiment.check_reuse`)."""
    source = baseline_dir(study)
    ex, rule = study.prereg.execution, study.prereg.decision.pass_rule
    latest = latest_by_trial(read_results(source / RESULTS).records)
    recorded = reuse.recorded_inputs(source)
    known: dict[str, Any] = {
        "base_sha": base_sha,
        "model": ex.model,
        "judge_model": ex.judge_model,
        "delivery": ex.delivery,
        "prompt_template_sha256": library_template_sha256(),
        "harness_version": __version__,
    }
    missed: dict[str, str] = {}
    for task in study.target_tasks():
        now = dict(known)
        if recorded is not None:
            parts = reuse.task_parts(task)
            parts.pop("upstream_task")  # the model server is not known until eval
            now.update({**reuse.study_settings(ex, rule), **parts})
        for sample in range(ex.runs_per_arm):
            tid = trial_id(task.id, BARE, sample)
            rec = latest.get(tid)
            if rec is None:
                missed[tid] = reuse.NO_RECORD
            elif not rec.is_outcome or outcome(rec, rule) not in ("pass", "fail"):
                missed[tid] = f"not final and scorable ({rec.status}, {outcome(rec, rule)})"
            elif rec.split != task.split:  # a bare trial pairs only within its split (field split of the record)
                missed[tid] = f"split {rec.split!r} there, {task.split!r} here"
            else:
                then = {
                    **(recorded.of(task.id) if recorded is not None else {}),
                    **reuse.provenance_inputs(rec.provenance),
                }
                differs = reuse.difference(then, now, keys=now)
                if differs is not None:
                    missed[tid] = differs
    if missed:
        planned = len(study.target_tasks()) * ex.runs_per_arm
        raise reuse_refused(study, reuse.Selection({}, missed).summary(planned))


def reuse_refused(study: Study, summary: str) -> ConfigError:
    """The refusal of a reused bare arm (``library.baseline_from``) that cannot serve the plan."""
    return ConfigError(
        study.prereg_path,
        f"the bare trials in {baseline_dir(study)} cannot stand in for this experiment's: {summary}",
        field="library.baseline_from",
        hint="a bare trial is reused only when it ran on the same base commit under the same settings: run that "
        "baseline again under these (or remove library.baseline_from to run the bare arm in this experiment)",
    )


# ------------------------------------------------------------------------------ components


def _binary(v: str | None) -> float | None:
    return {"pass": 1.0, "fail": 0.0}.get(v or "")


def _verify(r: TrialRecord) -> float | None:
    if r.verify is not None and r.verify.exit_code is not None:
        return 1.0 if r.verify.exit_code == 0 else 0.0
    if r.patch is not None and r.patch.rejected:
        return 0.0
    return None


def _turns(r: TrialRecord) -> float | None:
    return float(r.agent.num_turns) if r.agent is not None and r.agent.num_turns is not None else None


def _duration(r: TrialRecord) -> float | None:
    v = r.durations_s.get("agent")
    return float(v) if v is not None else None


def component_value(r: TrialRecord, component: str, pass_rule: PassRule) -> float | None:
    """One trial's value of a component; None when it is missing (the analysis then refuses)."""
    getters: dict[str, Callable[[TrialRecord], float | None]] = {
        "pass": lambda rec: _binary(outcome(rec, pass_rule)),
        "verify": _verify,
        "judge": lambda rec: _binary(rec.judge.verdict if rec.judge is not None else None),
        "cost": lambda rec: rec.agent_cost_usd if rec.agent is not None or rec.gateway is not None else None,
        "turns": _turns,
        "duration": _duration,
    }
    return getters[component](r)


# ------------------------------------------------------------------------------- analysis


@dataclass(frozen=True)
class Paired:
    pair: Pair
    masked: TrialRecord
    bare: TrialRecord


def _refuse(problems: Sequence[str], what: str) -> None:
    if problems:
        more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        raise LibraryCheckError(
            f"{what}: " + "; ".join(problems[:8]) + more,
            hint="no selection is made: fix the cause (or rerun the experiment to resume it) and analyse again",
        )


def _where(r: TrialRecord) -> str:
    """The results file a record was read from: the run's own, or the one it was reused from."""
    return f"{r.reused_from.directory}/{RESULTS}" if r.reused_from is not None else RESULTS


def _split_problems(p: Pair, masked: TrialRecord, bare: TrialRecord) -> list[str]:
    """A pair never crosses splits: both records must carry the planned task's split (tasks.json)."""
    out = []
    for r, arm in ((masked, "masked"), (bare, "bare")):
        if r.split != p.split:
            out.append(
                f"{r.trial_id}: the {arm} trial's field split is {r.split!r} in {_where(r)}, but task {p.task_id!r} "
                f"is in split {p.split!r} of tasks.json: a masked trial pairs only with the bare trial of the same "
                "(split, task, sample)"
            )
    return out


def pair_records(d: Design, records: Sequence[TrialRecord], pass_rule: PassRule) -> list[Paired]:
    """Strict one-to-one pairing by (split, task, sample). Every deviation is an error, never a silent drop."""
    planned = {(p.task_id, p.sample): p for p in d.pairs}
    problems: list[str] = []
    # exactly one completed record per episode (retried infrastructure failures are fine)
    outcomes: dict[str, int] = defaultdict(int)
    for r in records:
        if r.is_outcome:
            outcomes[r.trial_id] += 1
        if r.arm not in (BARE, MASKED):
            problems.append(f"{r.trial_id}: arm {r.arm!r} does not belong to a library experiment")
        elif r.trial_id != trial_id(r.task_id, r.arm, r.run_index):
            problems.append(f"{r.trial_id}: the record says task {r.task_id!r}, sample {r.run_index}")
        elif (r.task_id, r.run_index) not in planned:
            problems.append(f"{r.trial_id}: no planned (task, sample) pair {r.task_id}/{r.run_index}")
    problems += [f"{t}: {n} completed records for one episode" for t, n in sorted(outcomes.items()) if n > 1]
    _refuse(problems, "the records do not pair one to one")
    finals = {r.trial_id: r for r in final_attempts(records).finals}
    out: list[Paired] = []
    crossing: list[str] = []
    for p in d.pairs:
        m = finals.get(trial_id(p.task_id, MASKED, p.sample))
        b = finals.get(trial_id(p.task_id, BARE, p.sample))
        if m is None and b is None:
            problems.append(f"{p.task_id}/{p.sample}: neither trial has a record")
            continue
        if m is None:
            problems.append(f"{p.task_id}/{p.sample}: the masked trial has no record")
            continue
        if b is None:
            problems.append(f"{p.task_id}/{p.sample}: the masked trial has no bare partner")
            continue
        crossing += _split_problems(p, m, b)
        for r, arm in ((m, "masked"), (b, "bare")):
            if not r.is_outcome:
                problems.append(f"{r.trial_id}: the {arm} trial ended {r.status} ({r.error or 'no outcome'})")
        if b.is_outcome and outcome(b, pass_rule) not in ("pass", "fail"):
            problems.append(f"{b.trial_id}: the bare trial is not scorable ({outcome(b, pass_rule)})")
        out.append(Paired(p, m, b))
    _refuse(crossing, "a pair would cross splits")
    _refuse(problems, "coverage: not every planned (task, sample) pair has a final, scorable bare and masked trial")
    provs = {r.provenance for pr in out for r in (pr.masked, pr.bare)}
    if len(provs) > 1:
        fields = sorted(k for k in Provenance.model_fields if len({getattr(pv, k) for pv in provs}) > 1)
        _refuse([f"the trials differ in {', '.join(fields)}"], "provenance is not identical across the trials")
    return out


def audit_mounts(paired: Sequence[Paired], hashes: Mapping[str, str]) -> None:
    """The skills each container had (as recorded from its spec, with content hashes) equal its mask."""
    problems: list[str] = []
    for pr in paired:
        for rec, want in ((pr.masked, ordered_skills(pr.pair.skills)), (pr.bare, ())):
            got = rec.skills_mounted
            if got is None:
                problems.append(f"{rec.trial_id}: the record does not say which skills the container had")
                continue
            names = tuple(s.name for s in got)
            if names != tuple(want):
                problems.append(
                    f"{rec.trial_id}: the container had [{', '.join(names)}], its mask is [{', '.join(want)}]"
                )
                continue
            bad = [s.name for s in got if hashes.get(s.name) != s.sha256]
            if bad:
                problems.append(f"{rec.trial_id}: the mounted copy of {', '.join(bad)} differs from the locked files")
    _refuse(problems, "audit of the injected skills failed")


def observations(d: Design, paired: Sequence[Paired], component: str, pass_rule: PassRule) -> list[Any]:
    """The estimator's observations for one component; refuses missing or non-finite values."""
    from harness.analysis import contributions

    out = []
    problems: list[str] = []
    for pr in paired:
        r = component_value(pr.masked, component, pass_rule)
        b = component_value(pr.bare, component, pass_rule)
        for rec, v in ((pr.masked, r), (pr.bare, b)):
            if v is None or not math.isfinite(v):
                problems.append(f"{rec.trial_id}: {component} is {'missing' if v is None else v}")
        if r is not None and b is not None:
            out.append(contributions.Observation(pr.pair.task_id, pr.pair.sample, pr.pair.mask, r, b))
    _refuse(problems, f"component {component!r} is not complete and finite")
    return out


@dataclass(frozen=True)
class LibraryResult:
    design: Design
    fits: dict[str, Any]
    """component -> contributions.LibraryFit"""
    selected: tuple[str, ...]
    method: str
    top_k: int
    paired: int


def analyze(study: Study, d: Design, records: Sequence[TrialRecord]) -> LibraryResult:
    """Pair, audit, fit every preregistered component, select on the primary one. Raises LibraryCheckError."""
    from harness.analysis import contributions

    lib = study.prereg.library
    assert lib is not None
    rule = study.prereg.decision.pass_rule
    paired = pair_records(d, records, rule)
    audit_mounts(paired, skill_hashes(study))
    masks.check_identifiable([pr.pair.mask for pr in paired], d.skills)
    obs: dict[str, list[Any]] = {c: observations(d, paired, c, rule) for c in lib.components}
    fits = {
        c: contributions.fit(o, d.skills, n_boot=lib.n_boot, seed=lib.masks.seed, alpha=lib.alpha)
        for c, o in obs.items()
    }
    selected = tuple(contributions.select(fits[PRIMARY], top_k=lib.top_k, method=lib.selection))
    return LibraryResult(d, fits, selected, lib.selection, lib.top_k, len(paired))


def baseline_info(study: Study, lock_files: Mapping[str, str]) -> dict[str, Any]:
    lib = study.prereg.library
    assert lib is not None
    if lib.baseline_from is None:
        return {"source": "run in this experiment", "sha256": None}
    return {"source": str(baseline_dir(study)), "sha256": lock_files.get("library/baseline")}


# ------------------------------------------------------------------------------ sizing


class PlanLines(NamedTuple):
    lines: list[str]
    identifiable: bool
    """The design and the masks its seed draws can identify every skill (``skilltrial plan`` exits 0)."""


def plan_lines(study: Study, sigma_delta: float = masks.DEFAULT_SIGMA_DELTA) -> PlanLines:
    """What ``skilltrial plan`` prints: the sizing (expected SE per coefficient) and the identifiability
    verdict of the preregistered design and of the masks its seed actually draws."""
    import numpy as np

    lib = study.prereg.library
    if lib is None:
        raise ConfigError(study.prereg_path, "is not a library preregistration (no library: block)", field="library")
    skills = library_skills(study)
    tasks = study.target_tasks()
    samples = study.prereg.execution.runs_per_arm
    p, balanced = lib.masks.inclusion_probability, lib.masks.balanced
    sizing = masks.plan_library(len(tasks), samples, p, len(skills), sigma_delta=sigma_delta, balanced=balanced)
    lines = sizing.lines()
    if not sizing.identifiable:
        return PlanLines(lines, False)
    try:
        d = design(study)
    except masks.DesignError as e:
        lines.append(f"NOT IDENTIFIABLE with mask seed {lib.masks.seed}: {e.message}")
        return PlanLines(lines, False)
    x = np.asarray(d.masks, dtype=float)
    exact = np.sqrt(np.diag(np.linalg.inv(x.T @ x))) * sigma_delta
    lines.append(
        f"identifiable: the masks drawn with seed {lib.masks.seed} have full column rank {len(skills)}, "
        f"condition number {masks.condition_number(d.masks):.2f}; "
        f"{sum(1 for m in d.masks if not any(m))} all-zero mask(s) kept"
    )
    lines.append(f"expected SE per coefficient for these masks (SD(R - B) = {sigma_delta:g}):")
    for j, name in enumerate(skills):
        n_with = int(x[:, j].sum())
        lines.append(f"  {name:<24} in {n_with:>3} of {len(d.masks)} masks   SE ~ {exact[j]:.3f}")
    k = len(skills)
    lines.append(
        f"a full 2^{k} factorial would need {2**k} arms = {2**k * len(tasks) * samples} trials; this design runs "
        f"{2 * len(d.masks)} ({len(d.masks)} masked + {len(d.masks)} bare)"
    )
    return PlanLines(lines, True)
