"""``skills-ledger.yaml``: the current status of every evaluated skill, and shelving.

The ledger sits next to the preregistration. One entry per skill: status
(candidate / adopted / retired), both arms' pass rates as ``7/10``, the
relative cost delta, the last run's id, model and Claude Code version, its
verdict and reasons, the date, where the skill folder is, and a short list of
status changes.

A model matrix (``execution.models``) is one entry too, written once after every model has run
(:func:`record_matrix`): the verdict of the preregistered rule over the models drives the status and the
shelving exactly as one experiment's verdict does, and ``models`` keeps each model's verdict, rates and
cost change beside it.

Transitions, applied by :func:`apply` (pure) in this order:

1. **Model update.** An adopted or retired skill goes back to candidate when
   the run's model (requested alias or resolved model) or CLI version differs
   from the last recorded run: earlier evidence was about another model.
2. **The new verdict.** adopt -> adopted; reject -> an adopted skill is
   retired (a failed regression run), anything else keeps its status (a
   candidate stays a candidate); inconclusive and invalid change no status.

With ``on_rejection: shelve`` a rejected skill's folder is *moved* into the
preregistration's ``shelf`` folder (never deleted, never over an existing
entry: a suffix is added), so it can be re-evaluated after a model update.
:func:`record` does the I/O: under a lock file it loads, applies, shelves and
writes the ledger atomically.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from harness import fmt
from harness.analysis.matrix import MatrixVerdict
from harness.errors import ConfigError, HarnessError
from harness.host.files import atomic_write, read_regular
from harness.records import FrozenModel
from harness.reporting.family import FamilyReport
from harness.reporting.model import ReportInput
from harness.study.config import Study

LEDGER_NAME = "skills-ledger.yaml"
SkillStatus = Literal["candidate", "adopted", "retired"]
MAX_TRANSITIONS = 50
"""Status changes kept per skill (the oldest are dropped first)."""

HEADER = """\
# skills-ledger.yaml: written by `skilltrial eval` after each decided experiment.
# status: candidate (not adopted) | adopted | retired (an adopted skill a regression run rejected).
# A rejected skill's folder is moved to the preregistration's shelf folder, never deleted.
"""


class Transition(FrozenModel):
    date: str
    run: str
    change: str
    """``adopted -> candidate``, or ``shelved`` for a move without a status change."""
    why: str


class ModelEntry(FrozenModel):
    """One model's part of a matrix run: its own verdict and figures."""

    verdict: str
    baseline: str
    skill: str
    cost_delta: str
    resolved_model: str | None = None


class SkillEntry(FrozenModel):
    status: SkillStatus = "candidate"
    verdict: str
    """The last run's verdict (adopt / reject / inconclusive / invalid)."""
    rule: str
    baseline: str
    """Baseline pass rate of the last run, ``7/10``."""
    skill: str
    """Skill-arm pass rate of the last run, ``7/10``."""
    cost_delta: str
    """Relative cost change of the skill arm, ``+52%``."""
    last_run: str
    """Experiment id (the lock hash prefix) of the last run."""
    model: str
    resolved_model: str | None = None
    cli_version: str
    reasons: tuple[str, ...] = ()
    date: str
    skill_path: str | None = None
    """Where the skill folder is now (relative to the ledger)."""
    shelved_to: str | None = None
    transitions: tuple[Transition, ...] = ()
    models: dict[str, ModelEntry] | None = None
    """A model matrix's last run: each model's verdict and figures (the entry's verdict is the combined one)."""
    variants: dict[str, ModelEntry] | None = None
    """A family's last run (``arms``): each variant's Holm-corrected verdict and figures against the baseline."""
    version: str | None = None
    """A family's last run: the version it adopted (None: none won), and the baseline it was compared with."""
    baseline_version: str | None = None


class CalibrationEntry(FrozenModel):
    """One A/A calibration run (``skilltrial calibrate``): the baseline against itself."""

    date: str
    run: str
    model: str
    cli_version: str
    judge_model: str | None = None
    resolved_model: str | None = None
    tasks: int = 0
    runs_per_arm: int = 0
    point_adopt: float | None = None
    """Share of resampled A/A experiments the point rule would have adopted (a false adoption)."""
    interval_adopt: float | None = None
    judge_agreement: float | None = None
    drift: str = ""
    """The A/A paired difference with its interval, ``+1.2 pp [-4.0 pp, +6.4 pp]``."""


class LibraryCoefficient(FrozenModel):
    beta: float
    ci_low: float
    ci_high: float
    se_hc3: float


class LibraryRun(FrozenModel):
    """One library experiment: each skill's coefficient on the primary component, with its interval."""

    run: str
    date: str
    model: str
    cli_version: str
    component: str
    method: str
    selected: tuple[str, ...]
    coefficients: dict[str, LibraryCoefficient]


class LibraryConfirmation(FrozenModel):
    """A library run's selected set against the bare baseline on held-out tasks (``skilltrial confirm``)."""

    library_run: str
    """The library run whose selection was confirmed (its experiment id)."""
    run: str
    """The confirmation's own experiment id (its A/B entry is under ``<library>-confirm``)."""
    split: str
    selected: tuple[str, ...]
    verdict: str
    date: str


class LibraryEntry(FrozenModel):
    runs: tuple[LibraryRun, ...] = ()
    confirmations: tuple[LibraryConfirmation, ...] = ()
    """Held-out confirmations of these runs' selections, newest last."""


class Ledger(FrozenModel):
    schema_version: int = 1
    skills: dict[str, SkillEntry] = {}
    calibrations: tuple[CalibrationEntry, ...] = ()
    """A/A calibration runs, newest last (recommended after every model or CLI update)."""
    libraries: dict[str, LibraryEntry] = {}
    """Library experiments (harness.experiment.library_plan), by library name: the runs, newest last."""


@dataclass(frozen=True)
class RunSummary:
    """What the ledger records about one decided experiment."""

    skill: str
    verdict: str
    rule: str
    baseline: str
    skill_rate: str
    cost_delta: str
    run_id: str
    model: str
    resolved_model: str | None
    cli_version: str
    reasons: tuple[str, ...]
    date: str


def _one(values: set[str]) -> str | None:
    return ", ".join(sorted(values)) if values else None


def summarize_run(r: ReportInput, now: dt.datetime | None = None) -> RunSummary:
    finals = [x for x in r.final_records if x.is_outcome]
    a, d = r.analysis, r.decision
    when = now or dt.datetime.now(dt.UTC)
    return RunSummary(
        skill=r.prereg.skill,
        verdict=d.verdict,
        rule=d.rule,
        baseline=fmt.rate(a.baseline),
        skill_rate=fmt.rate(a.skill),
        cost_delta=fmt.cost_delta(a.cost.ratio),
        run_id=r.experiment_id,
        model=_one({x.provenance.model for x in finals}) or r.prereg.execution.model,
        resolved_model=_one({x.agent.resolved_model for x in finals if x.agent and x.agent.resolved_model}),
        cli_version=_one({x.provenance.cli_version for x in finals}) or "unknown",
        reasons=tuple(f"{x.code}: {x.message}" for x in d.reasons),
        date=when.strftime("%Y-%m-%d"),
    )


def model_changed(entry: SkillEntry, run: RunSummary) -> list[str]:
    """What differs between the entry's last run and this one (model, resolved model, CLI version)."""
    changes = []
    if entry.model != run.model:
        changes.append(f"model {entry.model} -> {run.model}")
    if entry.resolved_model and run.resolved_model and entry.resolved_model != run.resolved_model:
        changes.append(f"resolved model {entry.resolved_model} -> {run.resolved_model}")
    if entry.cli_version != run.cli_version:
        changes.append(f"Claude Code {entry.cli_version} -> {run.cli_version}")
    return changes


def apply(entry: SkillEntry | None, run: RunSummary) -> SkillEntry:
    """The entry after this run (pure): model-update demotion first, then the verdict's transition."""
    status: SkillStatus = entry.status if entry is not None else "candidate"
    transitions = list(entry.transitions) if entry is not None else []

    def move(new: SkillStatus, why: str) -> None:
        nonlocal status
        if new != status:
            transitions.append(Transition(date=run.date, run=run.run_id, change=f"{status} -> {new}", why=why))
            status = new

    # An invalid run's provenance is mixed by definition: it says nothing about a model update.
    if entry is not None and run.verdict != "invalid" and status in ("adopted", "retired"):
        changed = model_changed(entry, run)
        if changed:
            move("candidate", "model update: " + "; ".join(changed))
    if run.verdict == "adopt":
        move("adopted", f"adopted: skill {run.skill_rate} vs baseline {run.baseline}, cost {run.cost_delta}")
    elif run.verdict == "reject" and status == "adopted":
        move("retired", f"regression run rejected it: skill {run.skill_rate} vs baseline {run.baseline}, "
                        f"cost {run.cost_delta}")  # fmt: skip
    keep = {"skill_path": entry.skill_path, "shelved_to": entry.shelved_to} if entry is not None else {}
    return SkillEntry(
        status=status, verdict=run.verdict, rule=run.rule, baseline=run.baseline, skill=run.skill_rate,
        cost_delta=run.cost_delta, last_run=run.run_id, model=run.model, resolved_model=run.resolved_model,
        cli_version=run.cli_version, reasons=run.reasons, date=run.date,
        transitions=tuple(transitions[-MAX_TRANSITIONS:]), **keep,
    )  # fmt: skip


# ============================================================================ files


def load(path: Path) -> Ledger:
    """The ledger at ``path`` (an empty one when the file does not exist)."""
    try:
        text = read_regular(path).decode("utf-8")
    except FileNotFoundError:
        return Ledger()
    except UnicodeDecodeError as e:  # a ValueError, not an OSError
        raise ConfigError(path, f"is not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise ConfigError(path, f"cannot be read: {e.strerror}") from None
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(
            path, f"malformed YAML: {e}", hint="fix or move the file; it is rewritten on the next eval"
        ) from None
    if data is None:
        return Ledger()
    try:
        return Ledger.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        raise ConfigError(path, err["msg"], field=field or None) from None


def dumps(ledger: Ledger) -> str:
    data = ledger.model_dump(mode="json", exclude_none=True, exclude={"libraries"} if not ledger.libraries else None)
    return HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110)


def save(path: Path, ledger: Ledger) -> None:
    try:
        atomic_write(path, dumps(ledger).encode("utf-8"))
    except OSError as e:
        raise HarnessError(f"cannot write the ledger {path}: {e.strerror}") from None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise read-modify-write of one ledger (two CI jobs may decide two skills at once)."""
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _shelf_names(name: str, run_id: str) -> Iterator[str]:
    yield name
    yield f"{name}-{run_id}"
    n = 2
    while True:
        yield f"{name}-{run_id}-{n}"
        n += 1


def shelve(skill_dir: Path, shelf: Path, run_id: str) -> Path:
    """Move ``skill_dir`` into ``shelf`` and return the new path. Never deletes, never overwrites.

    The destination is ``shelf/<name>``, else ``shelf/<name>-<run id>``, else
    with ``-2``, ``-3``, ... appended. It is claimed with an exclusive
    ``mkdir`` first, so a concurrent shelving cannot take the same name.
    """
    link = _shelve_link(skill_dir)
    skill_dir = link if link is not None else skill_dir.resolve()
    shelf = shelf.resolve()
    if link is None and (shelf == skill_dir or shelf.is_relative_to(skill_dir)):
        raise ConfigError(shelf, f"the shelf folder lies inside the skill folder {skill_dir}", field="shelf")
    if not skill_dir.is_dir():
        raise HarnessError(f"cannot shelve {skill_dir}: it is not a folder")
    try:
        shelf.mkdir(parents=True, exist_ok=True)
        for name in _shelf_names(skill_dir.name, run_id):
            dest = shelf / name
            try:
                dest.mkdir()
                break
            except FileExistsError:
                continue
    except OSError as e:
        raise HarnessError(f"cannot create a shelf entry in {shelf}: {e.strerror}") from None
    if link is not None:
        return _move_link(link, dest)
    try:
        os.rename(skill_dir, dest)  # replaces the empty directory just claimed
    except OSError as e:
        if e.errno != errno.EXDEV:
            dest.rmdir()
            raise HarnessError(f"cannot move {skill_dir} to {dest}: {e.strerror}") from None
        try:
            shutil.copytree(skill_dir, dest, symlinks=True, dirs_exist_ok=True)
        except (OSError, shutil.Error) as copy_error:
            raise HarnessError(f"cannot copy {skill_dir} to {dest} (the original is kept): {copy_error}") from None
        shutil.rmtree(skill_dir)  # only after a complete copy: a move across filesystems
    return dest


def _shelve_link(skill_dir: Path) -> Path | None:
    """The skill path itself when it is a symbolic link (then the link is shelved, never its
    target). A path that reaches the folder through a link in a parent directory is refused:
    moving it would move, or across filesystems delete, a folder outside the study."""
    path = Path(os.path.abspath(skill_dir))
    if path.is_symlink():
        return path.parent.resolve() / path.name
    if path.resolve() != path:
        raise HarnessError(f"cannot shelve {path}: it is reached through a symbolic link ({path.resolve()})")
    return None


def _move_link(link: Path, dest: Path) -> Path:
    """Shelve the symbolic link itself (the folder it points to is never moved or deleted)."""
    target = os.readlink(link)
    dest.rmdir()  # the claimed name becomes the link
    try:
        os.rename(link, dest)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise HarnessError(f"cannot move the link {link} to {dest}: {e.strerror}") from None
        try:
            os.symlink(target, dest)
        except OSError as copy_error:
            raise HarnessError(f"cannot recreate the link {link} at {dest}: {copy_error.strerror}") from None
        os.unlink(link)  # the link only: unlink never follows it
    return dest


@dataclass(frozen=True)
class LedgerUpdate:
    path: Path
    skill: str
    entry: SkillEntry
    previous_status: SkillStatus | None
    shelved_to: Path | None

    @property
    def lines(self) -> list[str]:
        """What changed, for the person running eval."""
        before = self.previous_status or "new"
        out = [f"ledger {self.path}: {self.skill} {before} -> {self.entry.status} ({self.entry.verdict})"]
        if self.shelved_to is not None:
            out.append(f"shelved: the skill folder was moved to {self.shelved_to} (not deleted)")
        return out


def _rel(path: Path, base: Path) -> str:
    return os.path.relpath(path, base)


def ledger_path(study: Study) -> Path:
    """Next to the preregistration; beside the skill folder when the preregistration lives inside it
    (the ledger must not move with a shelved skill)."""
    root = study.root.resolve()
    skill = study.skill_dir.resolve()
    return (skill.parent if root == skill or root.is_relative_to(skill) else root) / LEDGER_NAME


def record(study: Study, r: ReportInput, *, now: dt.datetime | None = None) -> LedgerUpdate:
    """Apply a decided experiment to the ledger next to the preregistration; shelve a rejected skill.

    The ledger is written even when shelving fails (the error is raised after it is saved).
    """
    return _record(study, summarize_run(r, now), r.prereg.on_rejection)


def summarize_matrix(
    skill: str, verdict: MatrixVerdict, reports: Mapping[str, ReportInput], now: dt.datetime | None = None
) -> tuple[RunSummary, dict[str, ModelEntry]]:
    """What the ledger records about a model matrix: the combined ``verdict``, with each model's figures
    joined (``sonnet 3/10; opus 7/10``) and kept apart in ``models``. ``reports``: every model, in order."""
    runs = {model: summarize_run(r, now) for model, r in reports.items()}
    first = next(iter(runs.values()))

    def each(pick: Callable[[RunSummary], str | None]) -> str:
        return "; ".join(f"{model} {pick(run)}" for model, run in runs.items())

    resolved = [f"{model}: {run.resolved_model}" for model, run in runs.items() if run.resolved_model]
    summary = RunSummary(
        skill=skill,
        verdict=verdict.verdict,
        rule=f"{first.rule} per model, {verdict.rule} across models",
        baseline=each(lambda x: x.baseline),
        skill_rate=each(lambda x: x.skill_rate),
        cost_delta=each(lambda x: x.cost_delta),
        run_id=first.run_id,
        model=", ".join(runs),
        resolved_model="; ".join(resolved) or None,
        cli_version=", ".join(sorted({run.cli_version for run in runs.values()})),
        reasons=(f"models: {verdict.reason}", *(f"{model}: {run.verdict}" for model, run in runs.items())),
        date=first.date,
    )
    models = {
        model: ModelEntry(verdict=run.verdict, baseline=run.baseline, skill=run.skill_rate,
                          cost_delta=run.cost_delta, resolved_model=run.resolved_model)
        for model, run in runs.items()
    }  # fmt: skip
    return summary, models


def record_matrix(
    study: Study, verdict: MatrixVerdict, reports: Mapping[str, ReportInput], *, now: dt.datetime | None = None
) -> LedgerUpdate:
    """Apply a model matrix to the ledger once, after every model ran: the combined ``verdict`` moves the status
    and shelves as one experiment's would; each model's verdict and figures are kept in the entry's ``models``."""
    run, models = summarize_matrix(study.prereg.skill, verdict, reports, now)
    return _record(study, run, study.locked_prereg.on_rejection, models=models)


def record_family(study: Study, f: FamilyReport, *, now: dt.datetime | None = None) -> LedgerUpdate:
    """Apply a family (``arms``) to the ledger once, after every variant ran: the family's verdict, the version
    that won (``version``, and its folder as ``skill_path``) and each variant's corrected verdict and figures.

    Against a bare baseline the verdict moves the status as an A/B's does. Against a baseline *version* (the one
    shipped), only an adoption moves it (to the winning version); a rejected or unclear edit says nothing against
    the version in use, so its status stays. Nothing is shelved: every version's folder stays where it is."""
    reports = {r.variant: r.report for r in f.rows if r.report is not None}
    runs = {v: summarize_run(r, now) for v, r in reports.items()}
    first = next(iter(runs.values()))

    def each(pick: Callable[[RunSummary], str | None]) -> str:
        return "; ".join(f"{v} {pick(run)}" for v, run in runs.items())

    members = {v: (f.member(v).verdict if f.member(v) is not None else "unavailable") for v in runs}  # type: ignore[union-attr]
    run = RunSummary(
        skill=study.prereg.skill,
        verdict=f.verdict,
        rule=f"{first.rule} per variant, Holm across {len(f.rows)}",
        baseline=first.baseline,
        skill_rate=each(lambda x: x.skill_rate),
        cost_delta=each(lambda x: x.cost_delta),
        run_id=f.lock_hash[:12],
        model=first.model,
        resolved_model=first.resolved_model,
        cli_version=", ".join(sorted({x.cli_version for x in runs.values()})),
        reasons=(f"family: {f.reason}", *(f"{v}: {members[v]}" for v in runs)),
        date=first.date,
    )
    variants = {
        v: ModelEntry(verdict=members[v], baseline=x.baseline, skill=x.skill_rate, cost_delta=x.cost_delta,
                      resolved_model=x.resolved_model)
        for v, x in runs.items()
    }  # fmt: skip
    baseline = study.baseline_version
    winner = study.for_variant(f.adopted).skill_dir if f.adopted is not None else None
    return _record(
        study,
        run,
        "keep",
        variants=variants,
        version=(f.adopted, baseline),
        keep_status=baseline is not None and f.verdict != "adopt",
        skill_dir=winner or (study.version_dir(baseline) if baseline is not None else None),
    )


def _record(
    study: Study,
    run: RunSummary,
    on_rejection: str,
    *,
    models: dict[str, ModelEntry] | None = None,
    variants: dict[str, ModelEntry] | None = None,
    version: tuple[str | None, str | None] | None = None,
    keep_status: bool = False,
    skill_dir: Path | None = None,
) -> LedgerUpdate:
    path = ledger_path(study)
    base = path.parent
    with _locked(path):
        ledger = load(path)
        before = ledger.skills.get(run.skill)
        entry = apply(before, run)
        if keep_status and before is not None:  # the verdict is recorded, the status and its history are not moved
            entry = entry.model_copy(update={"status": before.status, "transitions": before.transitions})
        if models is not None:
            entry = entry.model_copy(update={"models": models})
        if variants is not None and version is not None:
            entry = entry.model_copy(
                update={"variants": variants, "version": version[0], "baseline_version": version[1]}
            )
        folder = skill_dir or study.skill_dir
        if folder.is_dir():
            entry = entry.model_copy(update={"skill_path": _rel(folder, base), "shelved_to": None})
        shelved: Path | None = None
        failure: HarnessError | None = None
        skill_ref = study.prereg.skill_ref
        if run.verdict == "reject" and on_rejection == "shelve" and skill_ref and study.skill_dir.is_dir():
            try:  # the path as the preregistration names it: a link is shelved, never its target
                shelved = shelve(study.root / skill_ref, study.shelf_dir, run.run_id)
            except HarnessError as e:
                failure = e
        if shelved is not None:
            where = _rel(shelved, base)
            entry = entry.model_copy(
                update={
                    "skill_path": where,
                    "shelved_to": where,
                    "transitions": (
                        *entry.transitions,
                        Transition(date=run.date, run=run.run_id, change="shelved",
                                   why=f"rejected with on_rejection: shelve; moved to {where}"),
                    )[-MAX_TRANSITIONS:],
                }
            )  # fmt: skip
        skills = dict(ledger.skills)
        skills[run.skill] = entry
        save(path, Ledger(schema_version=ledger.schema_version, skills=dict(sorted(skills.items()))))
    if failure is not None:
        raise HarnessError(f"the ledger {path} was updated, but the rejected skill was not shelved: {failure}",
                           hint="move the skill folder by hand, or set shelf: in the preregistration")  # fmt: skip
    return LedgerUpdate(path, run.skill, entry, before.status if before else None, shelved)


CALIBRATION_MAX_AGE_DAYS = 14
"""A calibration older than this is not recent: baseline reuse warns."""


def record_calibration(path: Path, entry: CalibrationEntry) -> None:
    """Append an A/A calibration run to the ledger at ``path`` (under the ledger's lock)."""
    with _locked(path):
        ledger = load(path)
        save(path, ledger.model_copy(update={"calibrations": (*ledger.calibrations, entry)}))


def recent_calibration(
    path: Path,
    *,
    model: str | None = None,
    now: dt.datetime | None = None,
    max_age_days: int = CALIBRATION_MAX_AGE_DAYS,
) -> CalibrationEntry | None:
    """The newest calibration in the ledger at ``path`` no older than ``max_age_days`` (and for ``model``
    when given), else None."""
    now = now or dt.datetime.now(dt.UTC)
    best: CalibrationEntry | None = None
    for entry in load(path).calibrations:
        if model is not None and entry.model != model:
            continue
        try:
            when = dt.datetime.fromisoformat(entry.date.replace("Z", "+00:00"))
        except ValueError:
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        if now - when <= dt.timedelta(days=max_age_days):
            best = entry
    return best


def record_confirmation(study: Study, name: str, confirmation: LibraryConfirmation) -> Path:
    """Append a held-out confirmation to the library's entry in the ledger next to its preregistration."""
    return _update_library(study, name, lambda e: e.model_copy(
        update={"confirmations": (*e.confirmations, confirmation)[-MAX_TRANSITIONS:]}))  # fmt: skip


def record_library(study: Study, name: str, run: LibraryRun) -> Path:
    """Append a library experiment's coefficients to the ledger next to the preregistration."""
    return _update_library(study, name, lambda e: e.model_copy(update={"runs": (*e.runs, run)[-MAX_TRANSITIONS:]}))


def _update_library(study: Study, name: str, change: Callable[[LibraryEntry], LibraryEntry]) -> Path:
    path = ledger_path(study)
    with _locked(path):
        ledger = load(path)
        libs = dict(ledger.libraries)
        libs[name] = change(ledger.libraries.get(name, LibraryEntry()))
        save(path, ledger.model_copy(update={"libraries": dict(sorted(libs.items()))}))
    return path
