"""Records and specs for the experiment tests (no Docker): exact costs, chosen statuses."""

from __future__ import annotations

from harness.plan import TrialSpec
from harness.records import AgentResult, JudgeResult, Provenance, StopReason, TrialRecord, TrialStatus, VerifyResult
from harness.study.config import Task

PROV = Provenance(
    lock_hash="l" * 64,
    base_sha="b" * 40,
    model="sonnet",
    judge_model="haiku",
    cli_version="2.1.332",
    image_digest="sha256:img",
    prompt_template_sha256="p" * 64,
    harness_version="0.1.0",
)
TASKS = [Task(id=f"t{i}", prompt=f"task {i}", verify_cmd="true") for i in range(3)]


def make_record(
    spec: TrialSpec, attempt: int, status: TrialStatus = "completed", cost: float = 0.01, passed: bool = True
) -> TrialRecord:
    return TrialRecord(
        experiment_id="e",
        trial_id=spec.trial_id,
        task_id=spec.task.id,
        arm=spec.arm,
        run_index=spec.run_index,
        attempt=attempt,
        provenance=PROV,
        status=status,
        error="engine hiccup" if status == "infra_error" else None,
        started_at="t",
        finished_at="t",
        agent=AgentResult(cost_usd=cost),
        verify=VerifyResult(exit_code=0 if passed else 1),
        judge=JudgeResult(verdict="pass" if passed else "fail"),
    )


def skipped(spec: TrialSpec, attempt: int, kind: StopReason, why: str) -> TrialRecord:
    return make_record(spec, attempt, "skipped", 0.0).model_copy(update={"stopped_by": kind, "error": why})
