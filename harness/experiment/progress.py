"""Progress while trials run: a live table on a terminal, plain lines otherwise (CI logs).

Both show, per arm, how many trials are running, done (of planned) and how they
ended (pass / fail / unknown / truncated / infra / skipped), and the money spent
so far by this experiment (reused baseline trials cost nothing here). In plain
mode every finished trial prints one line that ends with that summary, so a CI
log read at any point tells where the run stands.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from harness.experiment.events import Events
from harness.plan import TrialSpec
from harness.records import ARMS, Outcome, PassRule, TrialRecord, outcome

OUTCOME_COLUMNS: tuple[Outcome, ...] = ("pass", "fail", "unknown", "truncated", "infra", "skipped")


def _safe(text: str) -> str:
    """Agent-controlled strings never reach the terminal raw (no escape sequences)."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


class Progress(Events):
    def __init__(self, stream: TextIO, *, live: bool | None = None, pass_rule: PassRule = "verify_and_judge") -> None:
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.live_enabled = self.console.is_terminal if live is None else live
        self.pass_rule: PassRule = pass_rule
        self.lock = threading.Lock()
        self.total: Counter[str] = Counter()
        self.done: Counter[tuple[str, str]] = Counter()
        self.running: dict[str, tuple[str, str, float]] = {}
        self.spent = 0.0
        self.started = time.monotonic()
        self.live: Live | None = None

    # ---------------------------------------------------------------- Events
    def planned(self, specs: Sequence[TrialSpec], finals: Sequence[TrialRecord], spent_usd: float) -> None:
        for spec in specs:
            self.total[spec.arm] += 1
        planned_ids = {spec.trial_id for spec in specs}
        for rec in finals:
            if rec.trial_id in planned_ids:
                self.done[(rec.arm, outcome(rec, self.pass_rule))] += 1
        self.spent = spent_usd
        resumed = sum(self.done.values())
        self.message(
            f"{len(specs)} trials planned ({', '.join(f'{self.total[a]} {a}' for a in self._arms())})"
            + (f"; {resumed} already done, resuming" if resumed else "")
        )
        if self.live_enabled:
            self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=True)
            self.live.start()

    def message(self, text: str) -> None:
        self.console.print(Text(_safe(text), style="dim"))

    def trial_started(self, spec: TrialSpec, attempt: int) -> None:
        with self.lock:
            self.running[spec.trial_id] = (spec.arm, "start", time.monotonic())
        self._refresh()

    def phase(self, trial_id: str, phase: str) -> None:
        with self.lock:
            if trial_id in self.running:
                arm, _, t0 = self.running[trial_id]
                self.running[trial_id] = (arm, phase, t0)
        self._refresh()

    def trial_finished(self, spec: TrialSpec, record: TrialRecord, spent_usd: float) -> None:
        result = outcome(record, self.pass_rule)
        with self.lock:
            self.running.pop(spec.trial_id, None)
            self.done[(spec.arm, result)] += 1
            self.spent = spent_usd
        if not self.live_enabled:
            with self.lock:
                n = sum(self.done.values())
                total = sum(self.total.values())
                summary = self.summary()
            verify = record.verify.exit_code if record.verify else None
            judge = record.judge.verdict if record.judge else "-"
            retry = f" attempt={record.attempt}" if record.attempt > 1 else ""
            self.console.print(
                Text(
                    f"[{n}/{total}] {_safe(spec.trial_id):32} {result:9} status={record.status}{retry} "
                    f"verify={verify} judge={judge} ${record.total_cost_usd:.4f} with judge "
                    f"{sum(record.durations_s.values()):.1f}s | {summary}"
                )
            )
        self._refresh()

    def trials_skipped(self, records: Sequence[TrialRecord], reason: str) -> None:
        with self.lock:
            for rec in records:
                self.running.pop(rec.trial_id, None)
                self.done[(rec.arm, "skipped")] += 1
            summary = self.summary()
        self.message(f"{len(records)} trial(s) skipped: {reason}")
        if not self.live_enabled:
            self.console.print(Text(summary))
        self._refresh()

    def finished(self) -> None:
        self.close()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    # ---------------------------------------------------------------- render
    def _arms(self) -> list[str]:
        """The A/B arms, or a library experiment's (baseline = bare, masked)."""
        return ["baseline", "masked"] if self.total["masked"] else list(ARMS)

    def summary(self) -> str:
        """One line: per arm running, done/planned and outcomes; then the spend. Call with the lock held."""
        parts = []
        for arm in self._arms():
            done = sum(v for (a, _), v in self.done.items() if a == arm)
            running = sum(1 for a, _, _ in self.running.values() if a == arm)
            counts = " ".join(f"{self.done[(arm, o)]} {o}" for o in OUTCOME_COLUMNS if self.done[(arm, o)])
            parts.append(f"{arm} {running} running, {done}/{self.total[arm]} done" + (f" ({counts})" if counts else ""))
        return "; ".join(parts) + f"; spent ${self.spent:.4f} (agents + judges)"

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._render())

    def _render(self) -> Group:
        table = Table(title=None, expand=False, box=None, pad_edge=False)
        for col in ("arm", "running", "done", *OUTCOME_COLUMNS):
            table.add_column(col, justify="right" if col != "arm" else "left")
        with self.lock:
            for arm in self._arms():
                done = sum(v for (a, _), v in self.done.items() if a == arm)
                running = sum(1 for a, _, _ in self.running.values() if a == arm)
                table.add_row(
                    arm,
                    str(running),
                    f"{done}/{self.total[arm]}",
                    *(str(self.done[(arm, o)]) for o in OUTCOME_COLUMNS),
                )
            active = sorted(self.running.items(), key=lambda kv: kv[1][2])[:6]
            lines = [f"  {tid}  {phase}  {time.monotonic() - t0:.0f}s" for tid, (_, phase, t0) in active]
            spent = self.spent
        elapsed = time.monotonic() - self.started
        footer = Text(f"spent ${spent:.4f} (agents + judges)   elapsed {elapsed:.0f}s", style="bold")
        return Group(table, footer, Text("\n".join(_safe(x) for x in lines), style="dim"))
