"""``skilltrial merge OUT SHARD_DIR...``: one experiment from the result files of its shards.

A CI matrix runs ``skilltrial eval --shard i/n`` on n machines; each writes its own
experiment directory. Merging refuses anything that would make the combined
result wrong, and says which shard to look at:

- every directory ran the same lock (and the same mode: scripted or real);
- the shards are distinct parts of one split (same n, no index twice);
- no trial id appears in two shards, and each trial sits in the shard
  :func:`harness.plan.shard_of` assigns it;
- no result line is unreadable, and every line carries the lock;
- every trial of the plan has a final record (an unfinished shard is rerun
  with the same command, which resumes), and nothing outside the plan is there.

The merged directory gets ``experiment.json`` (``merged_from`` lists the shards),
``results.jsonl`` (every attempt of every shard, shard by shard), the artifacts
and the reports with the decision, so ``skilltrial gate OUT`` works as for a
single-machine run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from harness import plan
from harness.errors import ConfigError, LockError, MergeError
from harness.host.files import atomic_write, read_regular
from harness.records import RESULTS, TrialRecord
from harness.redact import Redactor
from harness.results.attempts import is_final, latest_by_trial
from harness.results.load import PREFLIGHT_JSON, study_for
from harness.results.meta import META, ExperimentMeta, require_meta, write_meta
from harness.results.store import ExperimentDir, read_results
from harness.study.config import Study

LibraryPlan = Callable[[Study], Sequence[plan.TrialSpec]]
"""A library experiment's planned trials (:func:`harness.experiment.library_plan.planned_trials`): its masks
are drawn by the analysis layer, above this one, so the caller passes the planner in."""


@dataclass(frozen=True)
class Shard:
    root: Path
    meta: ExperimentMeta
    records: list[TrialRecord]
    index: int | None
    count: int | None


@dataclass(frozen=True)
class Merged:
    out: Path
    study: Study
    lock_hash: str
    records: list[TrialRecord]
    shards: tuple[Shard, ...]


class Checked(NamedTuple):
    """What the checks established: the study every shard ran, under this lock."""

    study: Study
    lock_hash: str


def _read_meta(root: Path) -> ExperimentMeta:
    try:
        return require_meta(root)
    except ConfigError as e:
        raise MergeError(f"{root} is not a readable experiment directory: {e}") from e


def _parse_shard(text: str | None, root: Path) -> tuple[int | None, int | None]:
    if text is None:
        return None, None
    try:
        i, n = plan.parse_shard(text)
    except ValueError as e:
        raise MergeError(f"{root / META}: {e}") from None
    return i, n


def read_shard(root: Path) -> Shard:
    meta = _read_meta(root)
    results = read_results(root / RESULTS)
    if results.bad_lines:
        number, err = results.bad_lines[0]
        raise MergeError(
            f"{root / RESULTS} line {number} is unreadable ({err}); {len(results.bad_lines)} bad line(s) in all",
            hint="a merged experiment must not silently drop trials: inspect or rerun that shard",
        )
    index, count = _parse_shard(meta.shard, root)
    return Shard(root, meta, results.records, index, count)


def _load_study(meta: ExperimentMeta, prereg_path: Path | None, where: Path) -> Study:
    try:
        return study_for(meta, where, prereg_path)
    except (ConfigError, LockError) as e:
        raise MergeError(f"the shards' preregistration: {e.message}", hint="pass it with --prereg") from None


def check(shards: Sequence[Shard], prereg_path: Path | None = None, library_plan: LibraryPlan | None = None) -> Checked:
    """Every check of the module docstring; returns the study and the lock hash. ``library_plan`` is
    required for a library experiment's shards (see :data:`LibraryPlan`)."""
    if not shards:
        raise MergeError("no shard directories given", hint="skilltrial merge OUT SHARD_DIR...")
    first = shards[0]
    lock_hash = first.meta.lock_hash
    for s in shards[1:]:
        if s.meta.lock_hash != lock_hash:
            raise MergeError(
                f"{s.root} ran lock {s.meta.lock_hash[:12]}, {first.root} ran {lock_hash[:12]}: "
                "shards of different preregistrations cannot be merged"
            )
        if s.meta.mode != first.meta.mode:
            raise MergeError(f"{s.root} ran the {s.meta.mode} model, {first.root} the {first.meta.mode}")
        if s.meta.model != first.meta.model:  # two models' experiments of one matrix
            raise MergeError(f"{s.root} ran model {s.meta.model}, {first.root} ran {first.meta.model}")
    counts = {s.count for s in shards}
    if len(counts) != 1:
        raise MergeError(
            "the directories come from different splits (shard counts "
            + ", ".join(sorted(str(c) if c else "unsharded" for c in counts))
            + ")"
        )
    count = counts.pop()
    seen: dict[int, Path] = {}
    for s in shards:
        if s.index is not None:
            if s.index in seen:
                raise MergeError(f"shard {s.index}/{count} given twice: {seen[s.index]} and {s.root}")
            seen[s.index] = s.root
    study = _load_study(first.meta, prereg_path, first.root)
    ex = study.prereg.execution
    if study.prereg.library is not None:  # a library experiment: bare and masked trials per pair
        if library_plan is None:
            raise TypeError(
                f"{study.prereg_path} is a library preregistration: pass "
                "library_plan=harness.experiment.library_plan.planned_trials to merge its shards"
            )
        planned = library_plan(study)
    else:
        planned = plan.plan_trials(study.target_tasks(), ex.runs_per_arm, ex.seed)
    specs = {s.trial_id: s for s in planned}
    owner: dict[str, Path] = {}
    for s in shards:
        foreign = [r for r in s.records if r.provenance.lock_hash != lock_hash]
        if foreign:
            raise MergeError(f"{s.root / RESULTS} holds {len(foreign)} line(s) of another lock")
        for tid in sorted({r.trial_id for r in s.records}):
            if tid in owner:
                raise MergeError(f"trial {tid} is in two shards: {owner[tid]} and {s.root}")
            owner[tid] = s.root
            spec = specs.get(tid)
            if spec is None:
                raise MergeError(f"{s.root} holds trial {tid}, which the plan does not call for")
            if count is not None and plan.shard_of(spec, count) != s.index:
                raise MergeError(
                    f"{s.root} (shard {s.index}/{count}) holds trial {tid} of shard {plan.shard_of(spec, count)}"
                )
    latest = latest_by_trial([r for s in shards for r in s.records])
    missing = sorted(t for t in specs if t not in latest or not is_final(latest[t], ex.max_infra_retries))
    if missing:
        where = ""
        if count is not None:
            absent = sorted({plan.shard_of(specs[t], count) for t in missing})
            given = sorted(seen)
            where = f" (shard(s) {', '.join(f'{i}/{count}' for i in absent)}; given: {', '.join(map(str, given))})"
        raise MergeError(
            f"{len(missing)} planned trial(s) have no final record{where}: {', '.join(missing[:6])}"
            + (" ..." if len(missing) > 6 else ""),
            hint="rerun the unfinished shard with the same command (it resumes), or add the missing shard directory",
        )
    return Checked(study, lock_hash)


def merge(
    out: Path, shard_dirs: Sequence[Path], *, prereg_path: Path | None = None, library_plan: LibraryPlan | None = None
) -> Merged:
    """Check the shards, then write the merged experiment directory (results, artifacts, meta)."""
    shards = tuple(read_shard(d) for d in shard_dirs)
    study, lock_hash = check(shards, prereg_path, library_plan)
    if (out / RESULTS).exists() or (out / META).exists():
        raise MergeError(f"{out} already holds an experiment", hint="merge into a new directory")
    resolved = {d.resolve() for d in shard_dirs}
    if out.resolve() in resolved:
        raise MergeError(f"{out} is one of the shard directories")
    store = ExperimentDir(out, Redactor([]))
    records: list[TrialRecord] = []
    for s in shards:
        _copy_tree(s.root / "artifacts", out / "artifacts")
        log = s.root / "scripted-api.log"
        if log.is_file():
            data = _read(log)
            with open(out / "scripted-api.log", "ab") as fh:
                fh.write(data)
        for rec in s.records:
            store.results.append(rec)
            records.append(rec)
    first = shards[0].meta
    if (shards[0].root / PREFLIGHT_JSON).is_file():  # the tasks the preflight left out of the plan
        shutil.copy2(shards[0].root / PREFLIGHT_JSON, out / PREFLIGHT_JSON)
    write_meta(
        out,
        ExperimentMeta.start(
            lock_hash, preregistration=str(study.prereg_path), skill=study.prereg.skill, shard=None,
            mode=first.mode, merged_from=tuple(str(s.root.resolve()) for s in shards), model=first.model,
        ),
    )  # fmt: skip
    return Merged(out, study, lock_hash, records, shards)


def _copy_tree(src: Path, dst: Path) -> None:
    """Content-addressed files: same name, same bytes; copy what is missing."""
    if not src.is_dir():
        return
    for dirpath, _dirs, files in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        for name in files:
            target = dst / rel / name
            if target.exists():
                continue
            data = _read(Path(dirpath) / name)  # a regular file, or the merge stops naming it (never /dev/zero)
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, data)


def _read(path: Path) -> bytes:
    try:
        return read_regular(path)
    except OSError as e:
        raise MergeError(f"{path} cannot be read: {e.strerror}") from e
