"""A model matrix (``execution.models``): one complete A/B per executor model, then one summary over them.

    matrix.json (written at the start, checked on resume)
      -> per model, in the preregistered order: the model's study (:meth:`Study.for_model`, the
         preregistration narrowed to that model, same lock) evaluated exactly as a single-model experiment
         into ``<out>/models/<name>/``: its own experiment.json (naming the model), results.jsonl, reports
         and decision.json, provenance.model that model; resume, ``--shard`` and baseline reuse per model
      -> models.md and models.json in ``<out>`` (:mod:`harness.reporting.matrix`)
      -> the skills ledger, once, with the verdict of the preregistered rule over the models (whole runs only)

Why one after another: each model's run already uses every trial slot the host has (``--jobs``, host-wide
slots), so running models side by side would only interleave them; in sequence the first model's decision
is on disk (and shown) before the second starts, and a stopped matrix resumes model by model.

Stops: a signal stops the running model exactly as it stops one experiment (running trials torn down,
``results.jsonl`` intact) and no later model starts (:class:`~harness.errors.Interrupted`). An error in one
model's run stops the matrix the same way; the models before it keep their results. Rerunning the same
command resumes: a finished model is re-read and re-reported without running a trial, the stopped one
continues. Nothing is written to the ledger until every model has a decision.

Also here: ``skilltrial merge`` of a sharded matrix (each model's shards merged as one experiment's are) and
``skilltrial report`` of a matrix (every model's reports and the summary re-rendered, read-only over results).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from harness.errors import HarnessError, Interrupted, MergeError
from harness.experiment.evaluate import Evaluated, run_and_report
from harness.experiment.events import Events
from harness.experiment.options import RunOptions, admit, results_dir
from harness.reporting import analyse_and_write, ledger
from harness.reporting.matrix import ModelResult, matrix_report, terminal_lines, write_matrix_reports
from harness.reporting.model import ReportInput, analyze_records, load_experiment
from harness.reporting.outputs import MATRIX_OUTPUTS, retract
from harness.results.matrix import (
    MATRIX_JSON,
    MODELS_DIR,
    MatrixMeta,
    is_matrix_dir,
    model_dir,
    read_matrix_meta,
    start_or_resume,
)
from harness.results.matrix import write_matrix_meta as _write_meta
from harness.results.merge import check, merge, read_shard
from harness.results.topdir import check_shard_tops
from harness.study.config import Study

RunModel = Callable[[Study, RunOptions, Events | None], Evaluated]
"""How one model's experiment is run and reported (:func:`harness.experiment.evaluate.run_and_report`;
tests pass their own)."""


def reuse_sources(paths: Iterable[Path]) -> tuple[Path, ...]:
    """``--reuse-baseline-from`` for a matrix's models: each path as given, and for a matrix's top directory
    (the path itself, or one in a folder of experiments such as ``harness-results``) its folder of model
    experiments. A baseline is reused only from the same model: the model is part of the fingerprint."""
    out: list[Path] = []
    for path in paths:
        out.append(path)
        if is_matrix_dir(path):
            out.append(path / MODELS_DIR)
        elif path.is_dir():
            out.extend(child / MODELS_DIR for child in sorted(path.iterdir()) if is_matrix_dir(child))
    return tuple(out)


def evaluate_matrix(
    study: Study,
    options: RunOptions,
    events_for: Callable[[Study], Events],
    show: Callable[[Sequence[str]], None],
    *,
    run_model: RunModel = run_and_report,
) -> list[str]:
    """Run every preregistered model's A/B into ``options.out/models/<name>/`` (see the module docstring).

    ``events_for`` makes each model's progress display (a fresh one per model); ``show`` gets each model's
    summary as soon as it is decided. Returns the lines to show at the end: the matrix section, then what the
    ledger did."""
    models = study.locked_prereg.execution.models
    lock_hash = admit(study, options).lock.sha256  # each model's run admits its own study again
    top = options.out or results_dir(study.prereg.skill, lock_hash, options.shard)
    shard = f"{options.shard[0]}/{options.shard[1]}" if options.shard else None
    start_or_resume(
        top, MatrixMeta.start(study, lock_hash, shard=shard, mode="scripted" if options.scripted else "real")
    )
    retract(top, MATRIX_OUTPUTS)  # the models' results are about to change: the summary is rewritten at the end
    sources = reuse_sources(options.reuse_from)
    done: list[ModelResult] = []
    for i, model in enumerate(models, 1):
        own = study.for_model(model)
        events = events_for(own)
        where = model_dir(top, model)
        events.message(f"model {i}/{len(models)}: {model} -> {where}")
        result = run_model(own, dataclasses.replace(options, out=where, reuse_from=sources), events)
        show(["", f"=== model {i}/{len(models)}: {model} ===", *result.lines[1:]])
        done.append(ModelResult(model, result.data))
        if result.stopped:  # a signal while it ran: no later model, no summary, no ledger
            rest = f": {', '.join(models[i:])} did not start" if i < len(models) else ""
            raise Interrupted(f"interrupted after model {model}{rest}; rerun the same command to resume")
    report = matrix_report(study.prereg.skill, lock_hash, study.prereg.decision.models_rule, done, top)
    write_matrix_reports(top, report)
    lines = ["", *terminal_lines(report)]
    if options.shard is None:  # only a whole matrix decides; a shard's partial results never touch the ledger
        decided = {row.model: row.report for row in done if row.report is not None}
        lines += ledger.record_matrix(study, report.verdict, decided).lines
    return lines


def summarize(root: Path, meta: MatrixMeta, reports: dict[str, ReportInput | HarnessError]) -> list[str]:
    """Write the summary of the matrix at ``root`` from each model's analysed experiment (or its error)."""
    rows = []
    for model in meta.models:
        got = reports.get(model)
        if isinstance(got, ReportInput):
            rows.append(ModelResult(model, got))
        else:
            why = got.message if got is not None else "not run"
            rows.append(ModelResult(model, None, why))
    report = matrix_report(meta.skill, meta.lock_hash, meta.rule, rows, root)
    write_matrix_reports(root, report)
    return terminal_lines(report)


def report_matrix(root: Path, prereg_path: Path | None = None) -> list[str]:
    """``skilltrial report`` on a matrix's top directory: every model's reports re-rendered from its results (a
    model without readable results is named in the summary, not fatal), then models.md and models.json."""
    meta = _require(root)
    reports: dict[str, ReportInput | HarnessError] = {}
    lines = []
    for model in meta.models:
        sub = model_dir(root, model)
        try:
            data, _ = analyse_and_write(sub, functools.partial(load_experiment, sub, prereg_path))
        except HarnessError as e:  # its reports now say why (analyse_and_write): none is left from before
            reports[model] = e
            lines.append(f"{model}: no report ({e.message})")
            continue
        reports[model] = data
        lines.append(f"{model}: {data.decision.verdict.upper()} ({data.decision.rule} rule)  {sub / 'report.md'}")
    return [*lines, "", *summarize(root, meta, reports)]


def merge_matrix(out: Path, shard_tops: Sequence[Path], prereg_path: Path | None = None) -> list[str]:
    """``skilltrial merge OUT SHARD...`` for a sharded matrix: each model's shards merged exactly as one
    experiment's are (every check of :mod:`harness.results.merge`, all of them before anything is written),
    then OUT's matrix.json and summary."""
    first = check_shard_tops(out, MATRIX_JSON, list(shard_tops), [_require(s, MergeError) for s in shard_tops],
                             kind="model matrix")  # fmt: skip
    for model in first.models:  # every model's shards checked before anything is written
        check([read_shard(model_dir(s, model)) for s in shard_tops], prereg_path)
    reports: dict[str, ReportInput | HarnessError] = {}
    lines = []
    for model in first.models:
        merged = merge(model_dir(out, model), [model_dir(s, model) for s in shard_tops], prereg_path=prereg_path)
        data, _ = analyse_and_write(
            model_dir(out, model),
            functools.partial(analyze_records, merged.study, merged.records, lock_hash=merged.lock_hash,
                              experiment_dir=model_dir(out, model)),
        )  # fmt: skip
        reports[model] = data
        lines.append(f"{model}: merged {len(merged.shards)} shard(s), {len(merged.records)} result line(s): "
                     f"{data.decision.verdict.upper()}")  # fmt: skip
    _write_meta(
        out, first.model_copy(update={"shard": None, "merged_from": tuple(str(s.resolve()) for s in shard_tops)})
    )
    return [*lines, "", *summarize(out, first, reports)]


def _require(root: Path, error: type[HarnessError] = HarnessError) -> MatrixMeta:
    try:
        meta = read_matrix_meta(root)
    except HarnessError as e:
        raise error(e.message, hint=e.hint) from e
    if meta is None:
        raise error(f"{root} is not a model matrix (no matrix.json)")
    return meta
