"""``skilltrial eval`` end to end: run the experiment, analyse, decide, write the reports.

Nothing here prints: the experiment reports through the :class:`~harness.experiment.events.Events`
it is given (the CLI's progress display), and what to show afterwards comes back as lines.

Signals: the first SIGINT/SIGTERM stops new trials and kills the running
containers; every trial then tears itself down and ``results.jsonl`` stays
valid. A second signal (or one before trials start) interrupts at once, still
unwinding through every ``finally``.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from harness.experiment.events import Events
from harness.experiment.experiment import Experiment, ExperimentResult
from harness.experiment.options import RunOptions
from harness.host.slots import slot_count
from harness.reporting import SUMMARY_TXT, analyse_and_write, ledger
from harness.reporting.model import ReportInput, analyze_records
from harness.sandbox import roles
from harness.study.config import Study


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


def default_jobs(study: Study, env: Mapping[str, str]) -> int:
    """As many trials as the host-wide limit lets run at once (HARNESS_HOST_SLOTS, else what the machine can
    hold by CPU and memory per trial: :mod:`harness.host.capacity`)."""
    return slot_count(env, per_trial_mem=roles.trial_memory_limits(study.prereg.execution.resources))


def analyze(result: ExperimentResult) -> ReportInput:
    """The analysis of a run, on the study as run (the preflight's trivial tasks left out, and named)."""
    return analyze_records(
        result.study, result.records, lock_hash=result.lock_hash, experiment_dir=result.experiment_dir.root
    )


@dataclass(frozen=True)
class Evaluated:
    """One experiment run, analysed and reported (its ledger entry not yet written)."""

    data: ReportInput
    lines: list[str]
    """A blank line, then the summary (summary.txt)."""
    stopped: bool
    """A stop was requested while it ran (a signal): whatever comes next must not start."""


def run_and_report(study: Study, options: RunOptions, events: Events | None = None) -> Evaluated:
    """Run the experiment (reporting through ``events``), analyse it and write its reports; no ledger."""
    experiment = Experiment(study, None, options, events)  # its engine is made once the study is admitted
    with _signals(experiment):
        result = experiment.run()
    store = result.experiment_dir
    data, paths = analyse_and_write(store.root, lambda: analyze(result), store.redactor.text)
    lines = ["", *paths[SUMMARY_TXT].read_text(encoding="utf-8").splitlines()]
    return Evaluated(data, lines, experiment.stop.is_set())


def evaluate(study: Study, options: RunOptions, events: Events | None = None) -> list[str]:
    """Run the experiment (reporting through ``events``), write its reports and ledger entry. Returns
    the lines to show afterwards: a blank one, the summary, then what the ledger did. (A model matrix,
    ``execution.models``, runs through :func:`harness.experiment.matrix.evaluate_matrix` instead.)"""
    done = run_and_report(study, options, events)
    lines = done.lines
    if options.shard is None:
        # Only a whole experiment decides; a shard's partial results never touch the ledger.
        lines += ledger.record(study, done.data).lines
    return lines
