"""A run's trial reaper: a finished trial's containers, network and directories are removed on a thread
the run owns, off the critical path of the trial that starts next.

Only the removal moves: every container is still fresh and still the trial's own, the agent's and the
judge's are gone when their step ends (``run`` removes them), and what is left for the reaper is the
trial's gateway (which serves no other trial's network, and nothing is on it any more), its network and
the trial's directory and worktree. Nothing is left behind on any path:

- :meth:`TrialReaper.close` (the run's exit, an exception and an interrupt included: it is a context
  manager the run enters inside :class:`harness.experiment.resources.RunResources`) waits until every
  handed-off teardown has run, and the run's own teardown then removes whatever carries its label;
- a teardown handed in after :meth:`close` runs on the caller's thread, as without a reaper;
- at most ``backlog`` teardowns wait at once: a hand-off beyond that waits for room, so a run never
  holds more networks than its running trials and that backlog (the engine's address pools are few);
- a leftover (an object that could not be removed) is reported through ``on_leftover``, like the run's
  own cleanup problems, and is still removed by the run's teardown or by ``skilltrial gc`` (labels).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from types import TracebackType

Teardown = Callable[[], list[str]]
"""One trial's teardown: returns one text per object it could not remove."""


class TrialReaper:
    def __init__(self, on_leftover: Callable[[str], None], *, backlog: int = 4) -> None:
        self._on_leftover = on_leftover
        self._jobs: queue.Queue[tuple[str, Teardown] | None] = queue.Queue(maxsize=backlog)
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="trial-reaper", daemon=True)
        self._thread.start()

    def __enter__(self) -> TrialReaper:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def submit(self, trial_id: str, teardown: Teardown) -> None:
        """Hand one trial's teardown over (waits while ``backlog`` others wait); after :meth:`close`, run it here."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._jobs.put((trial_id, teardown))  # under the lock: close() cannot slip in between
        if closed:
            self._run(trial_id, teardown)

    def close(self) -> None:
        """Every teardown handed over has run when this returns (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._jobs.put(None)
        self._thread.join()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._run(*job)

    def _run(self, trial_id: str, teardown: Teardown) -> None:
        try:
            leftovers = teardown()
        except Exception as e:
            leftovers = [f"{type(e).__name__}: {e}"]
        for text in leftovers:
            self._on_leftover(f"trial {trial_id}: {text}")
