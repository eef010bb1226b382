"""What an experiment reports while it runs: the :class:`Events` interface and :class:`NullEvents`.

The experiment, its loop and its run resources report only through this interface; the progress
display (:mod:`harness.experiment.progress`) implements it and :mod:`harness.cli` decides where it
goes. Events carry facts (the plan, a finished trial, a message); nothing an implementation does may
change the run, and every method may be called from a trial's thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from harness.plan import TrialSpec
from harness.records import TrialRecord


class Events(Protocol):
    def planned(self, specs: Sequence[TrialSpec], finals: Sequence[TrialRecord], spent_usd: float) -> None:
        """The plan, the final records it already has (a resumed or reusing run) and what they cost."""

    def message(self, text: str) -> None:
        """A line for the person watching (resuming, reuse, preflight, cleanup problems, stops)."""

    def trial_started(self, spec: TrialSpec, attempt: int) -> None: ...
    def phase(self, trial_id: str, phase: str) -> None: ...
    def trial_finished(self, spec: TrialSpec, record: TrialRecord, spent_usd: float) -> None: ...
    def trials_skipped(self, records: Sequence[TrialRecord], reason: str) -> None: ...
    def finished(self) -> None:
        """The run is over, however it ended: no event follows (a live display stops here)."""


class NullEvents:
    """Reports nothing: the default, and a base for tests that watch only some events."""

    def planned(self, specs: Sequence[TrialSpec], finals: Sequence[TrialRecord], spent_usd: float) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def trial_started(self, spec: TrialSpec, attempt: int) -> None:
        pass

    def phase(self, trial_id: str, phase: str) -> None:
        pass

    def trial_finished(self, spec: TrialSpec, record: TrialRecord, spent_usd: float) -> None:
        pass

    def trials_skipped(self, records: Sequence[TrialRecord], reason: str) -> None:
        pass

    def finished(self) -> None:
        pass
