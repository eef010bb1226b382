"""Versions of one skill against one baseline (``arms:``): one paired A/B per variant, then Holm across them.

    family.json (written at the start, checked on resume)
      -> per variant, in the preregistered order: the variant's study (:meth:`Study.for_variant`: the variant's
         folder as the skill, the baseline as preregistered, the whole preregistration's lock) evaluated exactly
         as a single-skill experiment into ``<out>/variants/<name>/``: its own experiment.json, results.jsonl,
         reports and decision.json (the comparison on its own)
      -> the baseline runs once: every later variant reuses the earlier variants' baseline trials (baseline
         reuse, :mod:`harness.experiment.reuse`: identical fingerprints, copied with ``reused_from``), so every
         comparison is paired on the same baseline data
      -> the family's reports in ``<out>`` (:mod:`harness.reporting.family`): Holm's correction across the
         variants and the version that won
      -> the skills ledger, once, with the family's verdict and the winning version (whole runs only)

Why one after another, as a model matrix: each run already uses every trial slot. The price: a later variant's
trials run after the baseline's, so slow drift (API load, a model rollout) is not spread over the arms as it is
within one experiment; the reports say the baseline was reused, and a run that must rule drift out runs each
variant as its own experiment. A signal stops the running variant as it stops one experiment, and no later
variant starts; rerunning the same command resumes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.errors import HarnessError, Interrupted, MergeError, ResultsUnavailable
from harness.experiment.evaluate import Evaluated, run_and_report
from harness.experiment.events import Events
from harness.experiment.options import RunOptions, admit, results_dir
from harness.reporting import analyse_and_write, ledger
from harness.reporting.family import (
    FAMILY_OUTPUTS,
    FamilyReport,
    VariantResult,
    family_report,
    terminal_lines,
    write_family_reports,
)
from harness.reporting.model import ReportInput, analyze_records, load_experiment
from harness.reporting.outputs import retract
from harness.results.family import (
    FAMILY_JSON,
    VARIANTS_DIR,
    VERSIONS_DIR,
    FamilyMeta,
    is_family_dir,
    read_family_meta,
    start_or_resume,
    variant_dir,
    write_family_meta,
)
from harness.results.merge import check, merge, read_shard
from harness.results.meta import require_meta
from harness.results.topdir import check_shard_tops
from harness.study.config import Study
from harness.study.lock import materialize

RunVariant = Callable[[Study, RunOptions, Events | None], Evaluated]
"""How one variant's comparison is run and reported (:func:`harness.experiment.evaluate.run_and_report`)."""


def evaluate_family(
    study: Study,
    options: RunOptions,
    events_for: Callable[[Study], Events],
    show: Callable[[Sequence[str]], None],
    *,
    run_variant: RunVariant = run_and_report,
) -> list[str]:
    """Run every variant's comparison into ``options.out/variants/<name>/`` (see the module docstring).
    Returns the lines to show at the end: the family's table and verdict, then what the ledger did."""
    variants = study.variants()
    lock_hash = admit(study, options).lock.sha256  # each variant's run admits its own study again
    top = options.out or results_dir(study.prereg.skill, lock_hash, options.shard)
    shard = f"{options.shard[0]}/{options.shard[1]}" if options.shard else None
    meta = start_or_resume(
        top, FamilyMeta.start(study, lock_hash, shard=shard, mode="scripted" if options.scripted else "real")
    )
    retract(top, FAMILY_OUTPUTS)  # the comparisons are about to change: the family's reports are rewritten at the end
    study = materialize(study, top / VERSIONS_DIR)  # versions at a git ref: written once, checked against the lock
    done: list[VariantResult] = []
    for i, variant in enumerate(variants, 1):
        own = study.for_variant(variant)
        events = events_for(own)
        where = variant_dir(top, variant)
        earlier = tuple(variant_dir(top, v) for v in variants[: i - 1])
        events.message(f"variant {i}/{len(variants)}: {variant} -> {where}")
        result = run_variant(
            own, dataclasses.replace(options, out=where, reuse_from=(*earlier, *options.reuse_from)), events
        )
        show(["", f"=== variant {i}/{len(variants)}: {variant} ===", *result.lines[1:]])
        done.append(VariantResult(variant, result.data))
        if result.stopped:
            rest = f": {', '.join(variants[i:])} did not start" if i < len(variants) else ""
            raise Interrupted(f"interrupted after variant {variant}{rest}; rerun the same command to resume")
    report = _report(meta, done, top)
    write_family_reports(top, report)
    lines = ["", *terminal_lines(report)]
    if options.shard is None:  # only a whole family decides; a shard's partial results never touch the ledger
        lines += ledger.record_family(study, report).lines
    return lines


def _report(meta: FamilyMeta, rows: Sequence[VariantResult], top: Path) -> FamilyReport:
    return family_report(meta.skill, meta.lock_hash, meta.baseline, rows, meta.confidence, top)


def _require(root: Path, error: type[HarnessError] = ResultsUnavailable) -> FamilyMeta:
    try:
        meta = read_family_meta(root)
    except HarnessError as e:
        raise error(e.message, hint=e.hint) from e
    if meta is None:
        raise error(f"{root} is not a family of variants (no family.json)")
    return meta


def _analysed(root: Path, meta: FamilyMeta, variant: str, analyse: Callable[[Path], ReportInput]) -> VariantResult:
    sub = variant_dir(root, variant)
    try:
        own = require_meta(sub)
        if own.lock_hash != meta.lock_hash:
            raise ResultsUnavailable(f"{sub} ran lock {own.lock_hash[:12]}, not this family's {meta.lock_hash[:12]}")
        return VariantResult(variant, analyse(sub))
    except HarnessError as e:
        return VariantResult(variant, None, e.message)


def family_of(root: Path, prereg_path: Path | None = None) -> FamilyReport:
    """The family at ``root`` as its variants' results are now (read-only): what ``skilltrial gate`` decides on.
    A variant without an analysed comparison (not run, unreadable, another lock) leaves the family without a
    verdict (exit 3). Raises :class:`ResultsUnavailable` when ``family.json`` cannot be read."""
    meta = _require(root)
    analyse = functools.partial(_load, prereg_path=prereg_path)
    return _report(meta, [_analysed(root, meta, v, analyse) for v in meta.variants], root)


def variant_verdict(path: Path) -> str | None:
    """What ``skilltrial history`` shows for a family's variant directory: its verdict after Holm's correction
    across the family, with its own beside it (``inconclusive (in the family; alone adopt)``), as ``skilltrial
    gate`` decides on it; None for a directory that is no family's variant."""
    path = path.resolve()
    top = path.parent.parent
    if path.parent.name != VARIANTS_DIR or not is_family_dir(top):
        return None
    try:
        member = family_of(top).member(path.name)
    except HarnessError as e:
        return f"n/a (its family: {e.message[:60]})"
    if member is None:  # a variant of the family has no analysed comparison yet: no corrected verdict exists
        return "unavailable (in the family: not every variant is analysed)"
    return f"{member.verdict} (in the family; alone {member.own_verdict})"


def _load(sub: Path, prereg_path: Path | None) -> ReportInput:
    return load_experiment(sub, prereg_path)


def merge_family(out: Path, shard_tops: Sequence[Path], prereg_path: Path | None = None) -> list[str]:
    """``skilltrial merge OUT SHARD...`` for a family run with ``--shard``: each variant's shards merged exactly as
    one experiment's are (every check of :mod:`harness.results.merge`, all of them before anything is written),
    then the family's reports, Holm's correction over the merged comparisons. OUT's ``family.json`` is written
    before the variants' reports, so each says its verdict is before the correction. Like a merged experiment, the merged family
    does not write the skills ledger (the shards never did)."""
    first = check_shard_tops(out, FAMILY_JSON, list(shard_tops), [_require(s, MergeError) for s in shard_tops],
                             kind="family of variants")  # fmt: skip
    meta = first.model_copy(update={"shard": None, "merged_from": tuple(str(s.resolve()) for s in shard_tops)})
    for variant in meta.variants:  # every comparison's shards checked before anything is written
        check([read_shard(variant_dir(s, variant)) for s in shard_tops], prereg_path)
    write_family_meta(out, meta)
    rows, lines = [], []
    for variant in meta.variants:
        where = variant_dir(out, variant)
        merged = merge(where, [variant_dir(s, variant) for s in shard_tops], prereg_path=prereg_path)
        data, _ = analyse_and_write(
            where, functools.partial(analyze_records, merged.study, merged.records, lock_hash=merged.lock_hash,
                                     experiment_dir=where),
        )  # fmt: skip
        rows.append(VariantResult(variant, data))
        lines.append(f"{variant}: merged {len(merged.shards)} shard(s), {len(merged.records)} result line(s): "
                     f"{data.decision.verdict.upper()} alone")  # fmt: skip
    report = _report(meta, rows, out)
    write_family_reports(out, report)
    return [*lines, "", *terminal_lines(report)]


def report_family(root: Path, prereg_path: Path | None = None) -> list[str]:
    """``skilltrial report`` on a family's top directory: every variant's reports re-rendered from its results,
    then the family's."""
    meta = _require(root)

    def rewrite(sub: Path) -> ReportInput:
        data, _ = analyse_and_write(sub, functools.partial(load_experiment, sub, prereg_path))
        return data

    rows = [_analysed(root, meta, v, rewrite) for v in meta.variants]
    report = _report(meta, rows, root)
    write_family_reports(root, report)
    return terminal_lines(report)
