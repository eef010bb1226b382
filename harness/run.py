"""``harness eval`` end to end: run the experiment, analyse, decide, write the reports.

Signals: the first SIGINT/SIGTERM stops new trials and kills the running
containers; every trial then tears itself down and ``results.jsonl`` stays
valid. A second signal (or one before trials start) interrupts at once, still
unwinding through every ``finally``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from harness import decision, report
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
    settings = study.prereg.decision
    records = result.records
    observations = decision.observations_from_records(records, settings.pass_rule)
    analysis = decision.analyze(observations, settings)
    context = decision.context_from_records(
        records,
        study.prereg.execution.runs_per_arm,
        result.budget_stopped,
        planned_task_ids=[t.id for t in study.target_tasks()],
    )
    verdict = decision.decide(analysis, settings, context)
    return report.ReportInput(
        prereg=study.prereg,
        analysis=analysis,
        decision=verdict,
        lock_hash=result.lock_hash,
        skipped_tasks=tuple(t.id for t in study.skipped_tasks()),
        flagged=flagged(records),
        experiment_dir=str(result.experiment_dir.root),
        spent_usd=sum(r.total_cost_usd for r in records),
    )


def flagged(records: list[TrialRecord]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    latest: dict[str, TrialRecord] = {}
    for r in records:
        latest[r.trial_id] = r
    out = []
    for tid, r in sorted(latest.items()):
        flags = (
            (r.patch.flags if r.patch else ())
            + r.flags
            + ((f"rejected: {r.patch.rejected}",) if r.patch and r.patch.rejected else ())
        )
        if flags:
            out.append((tid, tuple(flags)))
    return tuple(out)


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
    )
    experiment = Experiment(study, engine, options, progress)
    try:
        with _signals(experiment):
            result = experiment.run()
    finally:
        progress.close()
    data = analyse(study, result)
    store = result.experiment_dir
    store.write_text("decision.json", report.dumps(report.decision_json(data)))
    summary = report.terminal_summary(data)
    store.write_text("summary.txt", summary + "\n")
    print()
    print(summary)
    return 0
