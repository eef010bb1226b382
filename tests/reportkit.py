"""Hand-built experiments for the report, gate, ledger and history tests (no Docker, no git).

``records(spec)`` turns ``{task: (baseline codes, skill codes)}`` into result
lines: ``P`` pass, ``F`` fail, ``U`` unknown (no judge verdict), ``T``
truncated (timeout), ``I`` infra error. ``write_experiment`` lays out a real
experiment directory (experiment.json, results.jsonl, a locked
preregistration and tasks.json) so ``load_experiment`` and ``gate`` run on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.records import AgentResult, JudgeResult, PatchInfo, Provenance, TrialRecord, TrialStatus, VerifyResult
from harness.reporting.model import ReportInput, build_input
from harness.study.config import Preregistration

LOCK = "ab" * 32
HOSTILE = "<script>alert(1)</script>"


def provenance(lock: str = LOCK, model: str = "sonnet", cli: str = "2.1.0") -> Provenance:
    return Provenance(
        lock_hash=lock, base_sha="c" * 40, model=model, judge_model="haiku", cli_version=cli,
        image_digest="sha256:" + "d" * 64, prompt_template_sha256="e" * 64, harness_version="0.1.0",
    )  # fmt: skip


def record(task: str, arm: str, run: int, code: str, *, cost: float = 0.03, turns: int = 4,
           flags: Sequence[str] = (), files: Sequence[str] = (), prov: Provenance | None = None,
           resolved: str = "claude-sonnet-x", attempt: int = 1, day: int = 10) -> TrialRecord:  # fmt: skip
    status: TrialStatus = {"T": "timeout", "I": "infra_error"}.get(code, "completed")  # type: ignore[assignment]
    verify = VerifyResult(exit_code=0 if code in "PU" else 1) if code in "PFU" else None
    judge = (
        JudgeResult(verdict={"P": "pass", "F": "fail", "U": "unknown"}[code], reason="scripted", cost_usd=0.001)  # type: ignore[arg-type]
        if code in "PFU"
        else None
    )
    patch = PatchInfo(sha256="f" * 64, bytes=100, files_changed=len(files) or 1, insertions=1, deletions=1,
                      files=tuple(files) or ("src/x.py",), flags=tuple(flags))  # fmt: skip
    return TrialRecord(
        experiment_id=(prov or provenance()).lock_hash[:12], trial_id=f"{task}.{arm}.{run}", task_id=task,
        arm=arm,  # type: ignore[arg-type]
        run_index=run, attempt=attempt, provenance=prov or provenance(), status=status,
        started_at=f"2026-11-{day:02d}T1{run}:00:00.000+00:00", finished_at=f"2026-11-{day:02d}T1{run}:01:00.000+00:00",
        durations_s={"agent": 30.0, "verify": 2.0},
        agent=None if code == "I" else AgentResult(num_turns=turns, cost_usd=cost, resolved_model=resolved),
        patch=None if code in "TI" else patch, verify=verify, judge=judge,
    )  # fmt: skip


def records(spec: Mapping[str, tuple[str, str]], *, skill_cost: float = 0.03, base_cost: float = 0.03,
            flags: Mapping[str, Sequence[str]] | None = None, prov: Provenance | None = None,
            resolved: str = "claude-sonnet-x", day: int = 10) -> list[TrialRecord]:  # fmt: skip
    """``flags`` maps a trial id (``task.arm.run``) to its patch flags."""
    out = []
    for task, (base, skill) in spec.items():
        for arm, codes, cost in (("baseline", base, base_cost), ("skill", skill, skill_cost)):
            for i, c in enumerate(codes):
                tid = f"{task}.{arm}.{i}"
                fl = (flags or {}).get(tid, ())
                out.append(record(task, arm, i, c, cost=cost + 0.002 * i, turns=3 + i + (arm == "skill"),
                                  flags=fl, files=("tests/test_x.py",) if fl else (), prov=prov,
                                  resolved=resolved, day=day))  # fmt: skip
    return out


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
    rs = list(recs) if recs is not None else records(spec, **kw)
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


def write_experiment(root: Path, spec: Mapping[str, tuple[str, str]], *, rule: str = "point",
                     recs: Sequence[TrialRecord] | None = None, tasks_extra: Sequence[dict[str, Any]] = (),
                     lock: str = LOCK, skill: str = "tidy", shard: str | None = None, **kw: Any) -> Path:  # fmt: skip
    """A complete experiment directory under ``root``: returns the experiment dir.

    Layout: ``root/study/{preregistration.yaml, tasks.json, skill/SKILL.md}``
    and ``root/exp/{experiment.json, results.jsonl}``. ``model``/``cli`` in
    ``kw`` set every record's provenance.
    """
    study = root / "study"
    (study / "skill").mkdir(parents=True, exist_ok=True)
    (study / "skill" / "SKILL.md").write_text(f"# {skill}\nBe tidy.\n")
    tasks = [{"id": t, "prompt": f"Fix {t}.", "verify_cmd": "true"} for t in spec] + list(tasks_extra)
    (study / "tasks.json").write_text(json.dumps({"tasks": tasks}))
    runs = max(len(b) for b, _ in spec.values())
    pr = {
        "skill": skill, "skill_ref": "skill", "tasks": "tasks.json",
        "execution": {"runs_per_arm": runs}, "decision": {"rule": rule},
        "lock": {"locked_at": "2026-11-01T00:00:00Z", "sha256": lock, "base_sha": "c" * 40},
    }  # fmt: skip
    (study / "preregistration.yaml").write_text(yaml.safe_dump(pr))
    exp = root / "exp"
    exp.mkdir(parents=True, exist_ok=True)
    meta = {
        "lock_hash": lock, "experiment_id": lock[:12], "skill": skill, "shard": shard,
        "created_at": "2026-11-10T10:00:00+00:00", "preregistration": str(study / "preregistration.yaml"),
    }  # fmt: skip
    (exp / "experiment.json").write_text(json.dumps(meta))
    if recs is None and "prov" not in kw:
        kw["prov"] = provenance(lock=lock, model=kw.pop("model", "sonnet"), cli=kw.pop("cli", "2.1.0"))
    rs = list(recs) if recs is not None else records(spec, **kw)
    (exp / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rs))
    return exp
