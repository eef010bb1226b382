"""``harness eval`` end to end: run the experiment, analyse, decide, write the reports.

Signals: the first SIGINT/SIGTERM stops new trials and kills the running
containers; every trial then tears itself down and ``results.jsonl`` stays
valid. A second signal (or one before trials start) interrupts at once, still
unwinding through every ``finally``.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from harness import decision, ledger, report, runstate
from harness.config import Study
from harness.engine import Engine
from harness.experiment import Experiment, ExperimentResult, RunOptions
from harness.hostslots import default_slots
from harness.images import ImageOptions
from harness.progress import Progress
from harness.records import TrialRecord


@contextmanager
def _signals(experiment: Experiment) -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        if experiment.stop.is_set():
            raise KeyboardInterrupt
        experiment.abort()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def default_jobs(study: Study) -> int:
    from harness.engine import parse_size

    return default_slots(per_trial_mem=parse_size(study.prereg.execution.resources.memory))


def analyse(study: Study, result: ExperimentResult) -> report.ReportInput:
    return analyse_records(study, result.records, lock_hash=result.lock_hash, experiment_dir=result.experiment_dir.root)


def analyse_records(
    study: Study, records: Sequence[TrialRecord], *, lock_hash: str, experiment_dir: Path
) -> report.ReportInput:
    """The report input, decided with how the run stopped (budget or preregistered early stop, read from
    the skipped records), the per-trial cost cap, and the spend without reused baseline trials."""
    budget_stopped, early_stopped = runstate.stops(records)
    planned = [t.id for t in study.target_tasks()]
    data = report.build_input(
        study.prereg,
        records,
        planned_task_ids=planned,
        skipped_tasks=[t.id for t in study.skipped_tasks()],
        budget_stopped=budget_stopped,
        lock_hash=lock_hash,
        experiment_dir=str(experiment_dir),
    )
    context = decision.context_from_records(
        records,
        study.prereg.execution.runs_per_arm,
        budget_stopped,
        early_stopped=early_stopped,
        planned_task_ids=planned,
        max_cost_per_trial=runstate.max_cost_per_trial(study.prereg),
    )
    verdict = decision.decide(data.analysis, study.prereg.decision, context)
    return dataclasses.replace(data, decision=verdict, spent_usd=runstate.spent_usd(records))


flagged = report.flagged
"""Kept for callers of ``run.flagged``; the implementation lives in :mod:`harness.report`."""


def evaluate(
    study: Study,
    *,
    out: Path,
    env: Mapping[str, str],
    jobs: int | None,
    scripted: Path | None,
    api_key: str | None,
    shard: tuple[int, int] | None,
    runtime: str | None,
    images: ImageOptions,
    reuse_from: Sequence[Path] = (),
) -> int:
    engine = Engine(env)
    progress = Progress(sys.stdout, pass_rule=study.prereg.decision.pass_rule)
    options = RunOptions(
        out=out,
        jobs=jobs or default_jobs(study),
        scripted=scripted,
        api_key=api_key,
        shard=shard,
        runtime=runtime,
        images=images,
        env=env,
        reuse_from=tuple(reuse_from),
    )
    experiment = Experiment(study, engine, options, progress)
    try:
        with _signals(experiment):
            result = experiment.run()
    finally:
        progress.close()
    data = analyse(study, result)
    store = result.experiment_dir
    paths = report.write_reports(store.root, data, store.redactor.text)
    print()
    print(paths[report.SUMMARY_TXT].read_text(encoding="utf-8"), end="")
    if shard is None:
        # Only a whole experiment decides; a shard's partial results never touch the ledger.
        for line in ledger.record(study, data).lines:
            print(line)
    return 0
