"""``skilltrial confirm``: a library's selected set against the bare baseline on held-out tasks, by the A/B path.

    the library run (its directory, its locked preregistration)
      -> the selection, recomputed from its results exactly as its report did (never read from a file that
         could be stale or edited), refused when nothing was selected or the analysis refuses
      -> the held-out split: no task of it may be one the library's estimate used (else it is not held out)
      -> a derived preregistration beside the library's, written and locked before any trial: ``selection``
         (the selected set, the library folder, the library run's lock hash), ``split`` (the held-out one), the
         library's tasks, execution and decision settings
      -> the A/B experiment of that preregistration (:func:`harness.experiment.evaluate.run_and_report`): the
         skill arm gets every selected skill at once, named in the prompt and mounted read-only as the library's
         masked arm gets its mask; the baseline none; analysed, decided and reported as any A/B
      -> the skills ledger: the confirmation's own entry (under ``<library>-confirm``) and, on the library's
         entry, the confirmation of that library run (its lock, the split, the set, the verdict)

A rerun with the same library run and split finds its derived preregistration unchanged and resumes; one
whose library run or split differs is refused (a different confirmation is a new preregistration).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError, HarnessError
from harness.experiment import library_plan as library
from harness.experiment.evaluate import run_and_report
from harness.experiment.events import Events
from harness.experiment.options import RunOptions, results_dir
from harness.reporting import ledger
from harness.results.load import study_for
from harness.results.meta import require_meta
from harness.results.store import read_results
from harness.study.config import Study, load_study, lock_path
from harness.study.lock import lock, verify_lock

SUFFIX = "-confirm"


def selected_set(root: Path, prereg_path: Path | None = None) -> tuple[Study, tuple[str, ...], str]:
    """The library run at ``root``: its study, the set its analysis selects, its lock hash. Recomputed from
    ``results.jsonl`` under the locked preregistration (a :class:`LibraryCheckError` when the analysis refuses)."""
    meta = require_meta(root)
    study = study_for(meta, root, prereg_path)
    if study.prereg.library is None:
        raise ConfigError(root, "is not a library experiment (its preregistration has no library: block)")
    verify_lock(study, library.lock_entries)
    res = library.analyze(study, library.design(study), read_results(root / "results.jsonl").records)
    if not res.selected:
        raise HarnessError(
            f"the library run {root} selected no skill ({res.method}): there is nothing to confirm",
            hint="a library whose coefficients are not distinguishable from zero needs more tasks, not a confirmation",
        )
    return study, res.selected, meta.lock_hash


def derived_preregistration(
    lib: Study, selected: tuple[str, ...], lock_hash: str, split: str, root: Path
) -> dict[str, Any]:
    """The confirmation's preregistration (pure): the library's tasks and settings, the selection, the split."""
    pr = lib.locked_prereg
    assert pr.library is not None
    return {
        "skill": f"{pr.skill}{SUFFIX}",
        "selection": {
            "library": pr.library.path,
            "skills": list(selected),
            "library_lock": lock_hash,
            "library_results": str(root),
        },
        "tasks": pr.tasks,
        "target_tasks": pr.target_tasks if pr.target_tasks == "all" else list(pr.target_tasks),
        "split": split,
        "expected_effect": f"the set {', '.join(selected)} selected by library run {lock_hash[:12]} helps on "
        f"held-out tasks (split {split})",
        "on_rejection": "keep",
        "execution": pr.execution.model_dump(mode="json", exclude_defaults=True),
        "decision": pr.decision.model_dump(mode="json", exclude_defaults=True),
        "judge": pr.judge.model_dump(mode="json", exclude_defaults=True),
    }


def _check_held_out(lib: Study, derived: Study, split: str) -> None:
    used = {t.id for t in lib.target_tasks()}
    overlap = sorted(used & {t.id for t in derived.target_tasks()})
    if overlap:
        raise ConfigError(
            "--split",
            f"split {split!r} holds task(s) the library's estimate used ({', '.join(overlap[:5])}): not held out",
            hint="give the library's preregistration a split (split: val) and confirm on another one",
        )


def write_and_lock(lib: Study, selected: tuple[str, ...], lock_hash: str, split: str, root: Path) -> Study:
    """Write the derived preregistration beside the library's and lock it, before any trial; an existing one is
    kept when it says the same (a rerun resumes), refused when it does not."""
    path = lib.prereg_path.with_name(f"{lib.prereg_path.stem}{SUFFIX}-{split}.yaml")
    text = (
        f"# Written by `skilltrial confirm` from library run {lock_hash[:12]} ({root}); do not edit: the lock\n"
        "# covers it. A different confirmation is a new preregistration.\n"
        + yaml.safe_dump(derived_preregistration(lib, selected, lock_hash, split, root), sort_keys=False)
    )
    if path.exists():
        if path.read_text(encoding="utf-8") != text:
            raise ConfigError(
                path, "exists and confirms another library run or selection", field="selection",
                hint="move it aside to confirm this run; each confirmation keeps its own preregistration",
            )  # fmt: skip
        if lock_path(path).exists():
            study = load_study(path)
            verify_lock(study)
            return study
    else:
        path.write_text(text, encoding="utf-8")
    try:
        study = load_study(path, read_lock=False)
        _check_held_out(lib, study, split)
    except HarnessError:
        path.unlink()  # nothing was locked or run: leave no half-made confirmation behind
        raise
    lock(path)
    return load_study(path)


def confirm(
    library_root: Path,
    split: str,
    options_for: Callable[[Study], RunOptions],
    events_for: Callable[[Study], Events] | None = None,
    *,
    prereg_path: Path | None = None,
) -> list[str]:
    """Derive, lock and run the confirmation (see the module docstring); ``options_for`` and ``events_for`` make
    the run's options and progress display for the derived study. Returns the lines to show."""
    lib, selected, lock_hash = selected_set(library_root, prereg_path)
    study = write_and_lock(lib, selected, lock_hash, split, library_root)
    block = study.prereg.lock
    assert block is not None
    options = options_for(study)
    out = options.out or results_dir(study.prereg.skill, block.sha256, options.shard)
    lines = [f"confirmation {study.prereg_path} (locked {block.sha256[:12]}): {', '.join(selected)} on split {split}"]
    done = run_and_report(study, dataclasses.replace(options, out=out), events_for(study) if events_for else None)
    lines += done.lines
    if options.shard is None:
        lines += ledger.record(study, done.data).lines
        confirmation = ledger.LibraryConfirmation(
            library_run=lock_hash[:12], run=block.sha256[:12], split=split, selected=selected,
            verdict=done.data.decision.verdict, date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        )  # fmt: skip
        where = ledger.record_confirmation(lib, lib.prereg.skill, confirmation)
        lines.append(f"ledger {where}: library {lib.prereg.skill}, run {lock_hash[:12]} confirmed on {split}: "
                     f"{done.data.decision.verdict}")  # fmt: skip
    return lines
