"""Report scenarios for the report, gate, ledger and history tests (no Docker, no git): outcome-code
experiments and the report input built from them.

The records and experiment directories themselves come from :mod:`tests.factories`
(:func:`~tests.factories.outcome_records`, :func:`~tests.factories.write_experiment`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.records import TrialRecord
from harness.reporting.model import ReportInput, build_input
from harness.study.config import Preregistration
from tests.factories import LOCK, outcome_records

HOSTILE = "<script>alert(1)</script>"


def prereg(rule: str = "point", runs: int = 3, **extra: Any) -> Preregistration:
    data: dict[str, Any] = {
        "skill": "tidy",
        "skill_ref": "skill",
        "execution": {"runs_per_arm": runs},
        "decision": {"rule": rule},
        **extra,
    }
    return Preregistration.model_validate(data)


def make_input(spec: Mapping[str, tuple[str, str]], *, rule: str = "point", skipped: Sequence[str] = (),
               lock: str = LOCK, recs: Sequence[TrialRecord] | None = None, **kw: Any) -> ReportInput:  # fmt: skip
    rs = list(recs) if recs is not None else outcome_records(spec, **kw)
    runs = max(len(b) for b, _ in spec.values())
    return build_input(
        prereg(rule, runs), rs, planned_task_ids=list(spec), skipped_tasks=skipped,
        lock_hash=lock, experiment_dir="/tmp/experiment",
    )  # fmt: skip


# Six tasks, three runs: the skill clearly better and cheap enough -> adopt.
WIN = {
    "fix-a": ("FFF", "PPF"),
    "fix-b": ("PFF", "PPF"),
    "fix-c": ("PPF", "PPP"),
    "fix-d": ("PFF", "PPF"),
    "fix-e": ("FFF", "PFF"),
    "fix-f": ("PPF", "PPP"),
}
# The skill does worse -> reject.
LOSS = {k: (s, b) for k, (b, s) in WIN.items()}
# One task each way, tiny: point rule adopts on noise, interval rule is inconclusive.
NOISY = {"t1": ("PFF", "PPF"), "t2": ("PPF", "PFF"), "t3": ("PFF", "PPF"), "t4": ("PFF", "PFF")}
