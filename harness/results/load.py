"""Reading an experiment directory back: its description, its result lines and the study it ran.

Everything that opens a directory without running it (``skilltrial report``, ``gate``, ``history``,
``merge``, library re-renders) reads it through here, so none of them depends on a renderer. Nothing
here writes, analyses or renders: the preregistration named in ``experiment.json`` is loaded and
checked against the experiment's lock, the result lines are read with what was unreadable noted,
and the preflight's skipped tasks are recovered from ``preflight.json``.

Errors: :class:`~harness.errors.ResultsUnavailable` (exit 3) when there are no usable result lines;
:class:`~harness.errors.ConfigError` or :class:`~harness.errors.LockError` when the description or
the preregistration does not fit.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError, LockError, ResultsUnavailable
from harness.host.files import read_regular
from harness.records import RESULTS, TrialRecord
from harness.results.attempts import check_unique_attempts
from harness.results.meta import META, ExperimentMeta, require_meta
from harness.results.store import read_results
from harness.study.config import Study, load_preregistration, load_tasks

PREFLIGHT_JSON = "preflight.json"
"""The preflight's outcome per task (written by :mod:`harness.experiment.preflight`)."""


@dataclass(frozen=True)
class ResultLines:
    """The readable result lines of a directory, and what the reader should know about the rest."""

    records: list[TrialRecord]
    notes: list[str]
    """Unreadable lines and a torn tail, one sentence each."""


@dataclass(frozen=True)
class StoredExperiment:
    """An experiment directory as read back: ready to analyse (see ``harness.reporting.load_experiment``)."""

    root: Path
    meta: ExperimentMeta
    study: Study
    lines: ResultLines


def read_records(root: Path) -> ResultLines:
    """``root/results.jsonl``: every readable line (ResultsUnavailable when there is none)."""
    path = root / RESULTS
    if not os.path.lexists(path):  # there but not a file (a directory, a device): read_results names it
        raise ResultsUnavailable(f"{path} does not exist: there are no results to report on",
                                 hint="run `skilltrial eval` first, or check the directory name")  # fmt: skip
    rr = read_results(path)
    notes = [f"results.jsonl line {n} is unreadable and was ignored: {err}" for n, err in rr.bad_lines]
    if rr.torn_tail:
        notes.append("results.jsonl ends in an unterminated line (a crash mid-write); it was ignored")
    if not rr.records:
        raise ResultsUnavailable(f"{path} holds no readable trial result")
    check_unique_attempts(rr.records, path)
    return ResultLines(rr.records, notes)


def preflight_skipped(root: Path) -> dict[str, str]:
    """Tasks the preflight of ``root`` found trivial: ``{task_id: reason}`` (empty when none or no file)."""
    try:
        data = json.loads(read_regular(root / PREFLIGHT_JSON))
        tasks = data.get("tasks", {})
        return {tid: str(t.get("reason", "")) for tid, t in tasks.items() if t.get("outcome") == "passes"}
    except (OSError, ValueError, AttributeError):
        return {}


def study_for(meta: ExperimentMeta, root: Path, prereg_path: Path | None = None) -> Study:
    """The study an experiment directory ran: ``prereg_path``, else the preregistration its
    ``experiment.json`` names, which must carry the experiment's lock (a re-locked one may have
    other decision settings). The skill folder is not needed: a shelved skill's experiment loads."""
    lock_hash = meta.lock_hash
    if prereg_path is None:
        named = meta.preregistration
        if named is None:
            raise ConfigError(root / META, "names no preregistration", field="preregistration",
                              hint="pass the file with --prereg")  # fmt: skip
        prereg_path = Path(named)
    prereg = load_preregistration(prereg_path)
    if prereg.lock is None or prereg.lock.sha256 != lock_hash:
        found = prereg.lock.sha256[:12] if prereg.lock else "none"
        raise LockError(
            f"{prereg_path} is locked as {found}, but {root} ran under lock {lock_hash[:12]}: "
            "its decision settings may differ",
            hint="pass the preregistration this experiment ran under with --prereg",
        )
    tasks = load_tasks((prereg_path.parent / prereg.tasks).resolve())
    study = Study(prereg_path.resolve(), prereg, tasks)
    if meta.model is not None:  # one model's experiment of a matrix: the preregistration narrowed to it
        if meta.model not in prereg.execution.models:
            raise ConfigError(root / META, f"names model {meta.model!r}, which {prereg_path} does not list",
                              field="model", hint="pass the preregistration this experiment ran under with --prereg")  # fmt: skip
        study = study.for_model(meta.model)
    study.excluded = preflight_skipped(root)
    return study


def read_experiment(root: Path, prereg_path: Path | None = None) -> StoredExperiment:
    """Everything ``root`` holds that an analysis needs, without writing anything there.

    The preregistration is the one ``experiment.json`` names unless ``prereg_path`` is given (see
    :func:`study_for`); every result line must carry the experiment's lock."""
    meta = require_meta(root)
    lines = read_records(root)
    study = study_for(meta, root, prereg_path)
    foreign = sum(1 for r in lines.records if r.provenance.lock_hash != meta.lock_hash)
    if foreign:
        raise ConfigError(root / RESULTS, f"holds {foreign} line(s) of another lock than {meta.lock_hash[:12]}")
    return StoredExperiment(root, meta, study, lines)
