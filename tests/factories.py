"""The one place the test suite builds its data: provenance, trial records, studies, experiment directories.

Every ``TrialRecord`` and ``Provenance`` a test needs is made here, through :func:`trial_record` and
:func:`provenance` (the shaped builders below call them), so a schema change is absorbed in one file. The
overrides are typed against the models' own fields (:class:`RecordFields`, :class:`ProvenanceFields`;
``test_factories.py`` holds them equal to the models), and go through pydantic's validation exactly as a
constructor call would.

- **Records for the experiment tests** (no Docker): :func:`make_record` from a planned :class:`TrialSpec`,
  with exact costs and a chosen status, and :func:`skipped`.
- **Records from outcome codes** for the report, gate, ledger and history tests: :func:`outcome_records`
  turns ``{task: (baseline codes, skill codes)}`` into result lines: ``P`` pass, ``F`` fail, ``U`` unknown
  (no judge verdict), ``T`` truncated (timeout), ``I`` infra error.
- **Studies**: :class:`StudyFactory` lays out a preregistration, tasks, a skill and a tiny git repository
  (the ``make_study`` fixture of ``tests/unit/conftest.py``); git runs with no global or system
  configuration so the host's settings cannot leak in.
- **Experiment directories**: :func:`write_experiment_dir` writes ``experiment.json`` and
  ``results.jsonl``; :func:`write_experiment` a complete one (a locked study beside it) so
  ``load_experiment`` and ``gate`` run on it; :func:`write_matrix` a model matrix's top directory
  (``matrix.json`` and one such experiment per model).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack

import yaml

from harness.plan import TrialSpec
from harness.records import (
    RESULTS,
    AgentResult,
    Arm,
    EngineRef,
    GatewayMeter,
    JudgeResult,
    JudgeVerdict,
    MountedSkill,
    PatchInfo,
    Provenance,
    ReusedFrom,
    SkillUse,
    StopReason,
    TrialRecord,
    TrialStatus,
    VerifyResult,
)
from harness.results.meta import META
from harness.study.config import Study, Task

# ----------------------------------------------------------------------------- provenance


class ProvenanceFields(TypedDict, total=False):
    """Every field of :class:`Provenance`, each optional: the overrides :func:`provenance` accepts."""

    lock_hash: str
    base_sha: str
    model: str
    judge_model: str
    cli_version: str
    image_digest: str
    prompt_template_sha256: str
    harness_version: str
    upstream_host: str | None
    upstream_proxy: str | None
    upstream_ca_sha256: str | None
    price_table_sha256: str | None
    delivery: str | None
    listing_sha256: str | None
    delivery_check: str | None
    agent: str | None
    agent_sandbox: str | None
    agent_approval: str | None
    judge_agent: str | None


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
"""The default provenance: what every record carries unless a test says otherwise."""


def provenance(base: Provenance = PROV, **fields: Unpack[ProvenanceFields]) -> Provenance:
    """``base`` with ``fields`` replaced, validated like a constructor call."""
    return Provenance.model_validate({**base.model_dump(), **fields})


# ----------------------------------------------------------------------------- records


class RecordFields(TypedDict, total=False):
    """Every field of :class:`TrialRecord`, each optional: the overrides :func:`trial_record` accepts."""

    schema_version: int
    experiment_id: str
    trial_id: str
    task_id: str
    arm: Arm
    run_index: int
    attempt: int
    provenance: Provenance
    status: TrialStatus
    error: str | None
    started_at: str
    finished_at: str
    durations_s: dict[str, float]
    agent: AgentResult | None
    gateway: GatewayMeter | None
    patch: PatchInfo | None
    verify: VerifyResult | None
    judge: JudgeResult | None
    artifacts: dict[str, str]
    flags: tuple[str, ...]
    oom_killed: bool
    shard: str | None
    stopped_by: StopReason | None
    baseline_fingerprint: str | None
    reused_from: ReusedFrom | None
    skills_mounted: tuple[MountedSkill, ...] | None
    skill: SkillUse | None
    split: str | None
    workspace: Literal["overlay", "copy"] | None
    engine: EngineRef | None


STARTED_AT = "2026-01-01T00:00:00Z"
FINISHED_AT = "2026-01-01T00:01:00Z"


def trial_record(**fields: Unpack[RecordFields]) -> TrialRecord:
    """A completed record of trial ``t1.skill.0`` under :data:`PROV`, with ``fields`` replaced.

    The trial id follows the task, arm and run index unless given (``task.arm.run``)."""
    task, arm, run = fields.get("task_id", "t1"), fields.get("arm", "skill"), fields.get("run_index", 0)
    data: dict[str, Any] = {
        "experiment_id": "e",
        "trial_id": f"{task}.{arm}.{run}",
        "task_id": task,
        "arm": arm,
        "run_index": run,
        "provenance": PROV,
        "status": "completed",
        "started_at": STARTED_AT,
        "finished_at": FINISHED_AT,
    }
    return TrialRecord.model_validate({**data, **fields})


TASKS = [Task(id=f"t{i}", prompt=f"task {i}", verify_cmd="true") for i in range(3)]
"""Three tasks for planning experiment-loop trials (``plan_trials(TASKS, runs, seed)``)."""


def make_record(
    spec: TrialSpec, attempt: int, status: TrialStatus = "completed", cost: float = 0.01, passed: bool = True
) -> TrialRecord:
    """The record of ``spec``'s ``attempt``: exact agent cost, verify and judge agreeing on ``passed``."""
    return trial_record(
        trial_id=spec.trial_id,
        task_id=spec.task.id,
        arm=spec.arm,
        run_index=spec.run_index,
        attempt=attempt,
        status=status,
        error="engine hiccup" if status == "infra_error" else None,
        started_at="t",
        finished_at="t",
        agent=AgentResult(cost_usd=cost),
        verify=VerifyResult(exit_code=0 if passed else 1),
        judge=JudgeResult(verdict="pass" if passed else "fail"),
    )


def skipped(spec: TrialSpec, attempt: int, kind: StopReason, why: str) -> TrialRecord:
    """The ``skipped`` record a stop leaves for a trial that never started."""
    return make_record(spec, attempt, "skipped", 0.0).model_copy(update={"stopped_by": kind, "error": why})


def run_loop(
    study: Study, outcome: Callable[[TrialSpec], bool], *, seed: int = 2
) -> tuple[list[TrialRecord], str | None]:
    """``study``'s plan through the real trial loop with fake trials (``outcome(spec)``: whether it passes)
    and the preregistered early stop armed (``--jobs 1``): every record written, and the early stop's reason."""
    import threading

    from harness.experiment.loop import LoopPolicy, TrialLoop, curtailment_check
    from harness.plan import plan_trials

    tasks = tuple(study.task_file.tasks)
    lines: list[TrialRecord] = []
    loop = TrialLoop(
        lambda spec, attempt: make_record(spec, attempt, passed=outcome(spec)),
        lines.append,
        LoopPolicy(jobs=1, max_infra_retries=0, early_stop=curtailment_check(study, [t.id for t in tasks])),
        skipped=skipped,
        prior={},
        finals=[],
        spent=0.0,
        stop=threading.Event(),
    )
    out = loop.run(plan_trials(tasks, study.prereg.execution.runs_per_arm, seed=seed))
    return lines, out.early_stop


LOCK = "ab" * 32
"""The lock hash of the outcome-code experiments."""

OUTCOME_PROV = provenance(
    lock_hash=LOCK,
    base_sha="c" * 40,
    cli_version="2.1.0",
    image_digest="sha256:" + "d" * 64,
    prompt_template_sha256="e" * 64,
)
"""The provenance of the outcome-code records (what the reports render)."""

_STATUS: dict[str, TrialStatus] = {"T": "timeout", "I": "infra_error"}
_VERDICT: dict[str, JudgeVerdict] = {"P": "pass", "F": "fail", "U": "unknown"}


def outcome_record(task: str, arm: Arm, run: int, code: str, *, cost: float = 0.03, turns: int = 4,
                   flags: Sequence[str] = (), files: Sequence[str] = (), prov: Provenance | None = None,
                   resolved: str = "claude-sonnet-x", attempt: int = 1, day: int = 10) -> TrialRecord:  # fmt: skip
    """One result line from its outcome code (``P F U T I``, see the module docstring)."""
    verify = VerifyResult(exit_code=0 if code in "PU" else 1) if code in "PFU" else None
    judge = JudgeResult(verdict=_VERDICT[code], reason="scripted", cost_usd=0.001) if code in "PFU" else None
    patch = PatchInfo(sha256="f" * 64, bytes=100, files_changed=len(files) or 1, insertions=1, deletions=1,
                      files=tuple(files) or ("src/x.py",), flags=tuple(flags))  # fmt: skip
    prov = prov or OUTCOME_PROV
    return trial_record(
        experiment_id=prov.lock_hash[:12], trial_id=f"{task}.{arm}.{run}", task_id=task,
        arm=arm,
        run_index=run, attempt=attempt, provenance=prov, status=_STATUS.get(code, "completed"),
        started_at=f"2026-11-{day:02d}T1{run}:00:00.000+00:00", finished_at=f"2026-11-{day:02d}T1{run}:01:00.000+00:00",
        durations_s={"agent": 30.0, "verify": 2.0},
        agent=None if code == "I" else AgentResult(num_turns=turns, cost_usd=cost, resolved_model=resolved),
        patch=None if code in "TI" else patch, verify=verify, judge=judge,
    )  # fmt: skip


def outcome_records(spec: Mapping[str, tuple[str, str]], *, skill_cost: float = 0.03, base_cost: float = 0.03,
                    flags: Mapping[str, Sequence[str]] | None = None, prov: Provenance | None = None,
                    resolved: str = "claude-sonnet-x", day: int = 10) -> list[TrialRecord]:  # fmt: skip
    """Every trial of ``{task: (baseline codes, skill codes)}``; ``flags`` maps a trial id (``task.arm.run``)
    to its patch flags."""
    out = []
    for task, (base, skill) in spec.items():
        arms: tuple[tuple[Arm, str, float], ...] = (("baseline", base, base_cost), ("skill", skill, skill_cost))
        for arm, codes, cost in arms:
            for i, c in enumerate(codes):
                tid = f"{task}.{arm}.{i}"
                fl = (flags or {}).get(tid, ())
                out.append(outcome_record(task, arm, i, c, cost=cost + 0.002 * i, turns=3 + i + (arm == "skill"),
                                          flags=fl, files=("tests/test_x.py",) if fl else (), prov=prov,
                                          resolved=resolved, day=day))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- studies

DEFAULT_TASKS: list[dict[str, Any]] = [
    {"id": "t1", "prompt": "Fix the off-by-one in range_sum.", "verify_cmd": "python -m pytest -q"},
    {"id": "t2", "prompt": "Add input validation to parse_date.", "verify_cmd": "make check"},
    {"id": "t3", "prompt": "TODO: write this task", "verify_cmd": ""},
]

DEFAULT_PREREG = """\
# Preregistration written by a careful person.
# These comments must survive `skilltrial lock`.
skill: tidy
skill_ref: skill
tasks: tasks.json
target_tasks: all
expected_effect: fewer failed verifies
execution:
  runs_per_arm: 2
  model: sonnet
  judge_model: haiku
  repo: repo
"""


def git_env(home: Path) -> dict[str, str]:
    """The environment for test git: no host configuration, fixed dates."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        {
            "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
        }
    )
    return env


def run_git(repo: Path, *args: str) -> bytes:
    """Run git in ``repo`` with a clean configuration; returns stdout bytes."""
    proc = subprocess.run(
        ["git", "-c", "user.name=x", "-c", "user.email=x", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        env=git_env(repo),
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, f"git {args} failed: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


def init_repo(path: Path, files: dict[str, str] | None = None) -> str:
    """A git repository at ``path`` with one commit of ``files``; returns the commit SHA."""
    path.mkdir(parents=True, exist_ok=True)
    run_git(path, "init", "-q")
    for rel, content in (files or {"README.md": "hello\n"}).items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    run_git(path, "add", "-A")
    run_git(path, "commit", "-q", "--no-verify", "-m", "base")
    return run_git(path, "rev-parse", "HEAD").decode().strip()


@dataclass
class StudyFiles:
    root: Path
    prereg: Path
    tasks: Path
    skill: Path
    repo: Path
    base_sha: str


class StudyFactory:
    """What the ``make_study`` fixture returns: each call writes a fresh study directory under ``parent``."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self.made = 0

    def __call__(
        self,
        prereg: str = DEFAULT_PREREG,
        tasks: Sequence[dict[str, Any]] | str | None = None,
        skill_files: dict[str, str] | None = None,
        with_repo: bool = True,
    ) -> StudyFiles:
        """A study directory; the arguments override the prereg text, the tasks (a list, or the raw file
        text) or the skill files."""
        root = self.parent / f"study{self.made}"
        self.made += 1
        root.mkdir()
        prereg_path = root / "preregistration.yaml"
        prereg_path.write_text(prereg)
        tasks_path = root / "tasks.json"
        if isinstance(tasks, str):
            tasks_path.write_text(tasks)
        else:
            tasks_path.write_text(json.dumps({"tasks": list(DEFAULT_TASKS if tasks is None else tasks)}, indent=2))
        skill = root / "skill"
        skill.mkdir()
        for rel, content in (skill_files or {"SKILL.md": "# Tidy\nAlways tidy up.\n"}).items():
            (skill / rel).parent.mkdir(parents=True, exist_ok=True)
            (skill / rel).write_text(content)
        repo = root / "repo"
        sha = init_repo(repo) if with_repo else ""
        return StudyFiles(root, prereg_path, tasks_path, skill, repo, sha)


# ----------------------------------------------------------------------------- experiment directories


def write_experiment_dir(out: Path, meta: Mapping[str, Any], records: Sequence[TrialRecord] | None = None) -> Path:
    """``out/experiment.json`` from ``meta`` and, unless ``records`` is None, ``out/results.jsonl``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / META).write_text(json.dumps(meta))
    if records is not None:
        (out / RESULTS).write_text("".join(r.model_dump_json() + "\n" for r in records))
    return out


def write_experiment(root: Path, spec: Mapping[str, tuple[str, str]], *, rule: str = "point",
                     recs: Sequence[TrialRecord] | None = None, tasks_extra: Sequence[dict[str, Any]] = (),
                     lock: str = LOCK, skill: str = "tidy", shard: str | None = None,
                     model: str = "sonnet", cli: str = "2.1.0", decision: Mapping[str, Any] | None = None,
                     **kw: Any) -> Path:  # fmt: skip
    """A complete experiment directory under ``root`` from outcome codes: returns the experiment dir.

    Layout: ``root/study/{preregistration.yaml, tasks.json, skill/SKILL.md}`` and
    ``root/exp/{experiment.json, results.jsonl}``. ``model``/``cli`` set every record's provenance
    (unless ``prov`` or ``recs`` is given); ``decision`` adds preregistered decision settings beside ``rule``;
    the rest of ``kw`` goes to :func:`outcome_records`.
    """
    study = root / "study"
    (study / "skill").mkdir(parents=True, exist_ok=True)
    (study / "skill" / "SKILL.md").write_text(f"# {skill}\nBe tidy.\n")
    tasks = [{"id": t, "prompt": f"Fix {t}.", "verify_cmd": "true"} for t in spec] + list(tasks_extra)
    (study / "tasks.json").write_text(json.dumps({"tasks": tasks}))
    runs = max(len(b) for b, _ in spec.values())
    pr = {
        "skill": skill, "skill_ref": "skill", "tasks": "tasks.json",
        "execution": {"runs_per_arm": runs}, "decision": {"rule": rule, **(decision or {})},
        "lock": {"locked_at": "2026-11-01T00:00:00Z", "sha256": lock, "base_sha": "c" * 40},
    }  # fmt: skip
    (study / "preregistration.yaml").write_text(yaml.safe_dump(pr))
    meta = {
        "lock_hash": lock, "experiment_id": lock[:12], "skill": skill, "shard": shard,
        "created_at": "2026-11-10T10:00:00+00:00", "preregistration": str(study / "preregistration.yaml"),
    }  # fmt: skip
    if recs is None and "prov" not in kw:
        kw["prov"] = provenance(OUTCOME_PROV, lock_hash=lock, model=model, cli_version=cli)
    rs = list(recs) if recs is not None else outcome_records(spec, **kw)
    return write_experiment_dir(root / "exp", meta, rs)


def write_matrix(root: Path, specs: Mapping[str, Mapping[str, tuple[str, str]] | None], *, rule: str = "point",
                 models_rule: str = "every", lock: str = LOCK, skill: str = "tidy", judge: str = "haiku",
                 provs: Mapping[str, Provenance] | None = None) -> Path:  # fmt: skip
    """A model matrix from outcome codes, one spec per model (None: that model has no directory yet): returns
    the top directory ``root/matrix`` (``matrix.json``, ``models/<model>/``), its locked study in ``root/study``.

    Every record of a model carries that model (and ``judge``) in its provenance unless ``provs`` gives one."""
    from harness.study.config import model_dir_name

    study = root / "study"
    (study / "skill").mkdir(parents=True, exist_ok=True)
    (study / "skill" / "SKILL.md").write_text(f"# {skill}\nBe tidy.\n")
    task_ids = sorted({t for spec in specs.values() if spec for t in spec})
    (study / "tasks.json").write_text(json.dumps({"tasks": [{"id": t, "prompt": f"Fix {t}.", "verify_cmd": "true"}
                                                            for t in task_ids]}))  # fmt: skip
    runs = max(len(b) for spec in specs.values() if spec for b, _ in spec.values())
    pr = {
        "skill": skill, "skill_ref": "skill", "tasks": "tasks.json",
        "execution": {"runs_per_arm": runs, "models": list(specs), "judge_model": judge},
        "decision": {"rule": rule, **({"models_rule": models_rule} if models_rule != "every" else {})},
        "lock": {"locked_at": "2026-11-01T00:00:00Z", "sha256": lock, "base_sha": "c" * 40},
    }  # fmt: skip
    prereg = study / "preregistration.yaml"
    prereg.write_text(yaml.safe_dump(pr))
    top = root / "matrix"
    top.mkdir(parents=True, exist_ok=True)
    (top / "matrix.json").write_text(json.dumps({
        "lock_hash": lock, "preregistration": str(prereg), "skill": skill, "models": list(specs),
        "rule": models_rule, "mode": "scripted",
    }))  # fmt: skip
    for model, spec in specs.items():
        if spec is None:
            continue
        prov = (provs or {}).get(model) or provenance(OUTCOME_PROV, lock_hash=lock, model=model, judge_model=judge)
        meta = {"lock_hash": lock, "skill": skill, "preregistration": str(prereg), "model": model,
                "created_at": "2026-11-10T10:00:00+00:00"}  # fmt: skip
        records = outcome_records(spec, prov=prov, resolved=f"claude-{model}-x")
        write_experiment_dir(top / "models" / model_dir_name(model), meta, records)
    return top


def write_family(root: Path, specs: Mapping[str, Mapping[str, tuple[str, str]] | None], *, rule: str = "interval",
                 baseline: str = "bare", lock: str = LOCK, skill: str = "tidy") -> Path:  # fmt: skip
    """A family of variants (``arms``) from outcome codes, one spec per variant (None: that variant has no
    directory yet): returns the top directory ``root/family`` (``family.json``, ``variants/<name>/``), its locked
    study in ``root/study`` (one folder per version, and the baseline's when ``baseline`` names a version)."""
    study = root / "study"
    versions = [*([baseline] if baseline != "bare" else []), *specs]
    for v in versions:
        (study / v).mkdir(parents=True, exist_ok=True)
        (study / v / "SKILL.md").write_text(f"# {skill}\nBe tidy ({v}).\n")
    task_ids = sorted({t for spec in specs.values() if spec for t in spec})
    (study / "tasks.json").write_text(json.dumps({"tasks": [{"id": t, "prompt": f"Fix {t}.", "verify_cmd": "true"}
                                                            for t in task_ids]}))  # fmt: skip
    runs = max(len(b) for spec in specs.values() if spec for b, _ in spec.values())
    pr = {
        "skill": skill, "tasks": "tasks.json",
        "arms": {"baseline": baseline, "versions": {v: {"path": v} for v in versions}},
        "execution": {"runs_per_arm": runs},
        "decision": {"rule": rule},
        "lock": {"locked_at": "2026-11-01T00:00:00Z", "sha256": lock, "base_sha": "c" * 40},
    }  # fmt: skip
    prereg = study / "preregistration.yaml"
    prereg.write_text(yaml.safe_dump(pr))
    top = root / "family"
    top.mkdir(parents=True, exist_ok=True)
    (top / "family.json").write_text(json.dumps({
        "lock_hash": lock, "preregistration": str(prereg), "skill": skill, "baseline": baseline,
        "variants": list(specs), "mode": "scripted",
    }))  # fmt: skip
    for variant, spec in specs.items():
        if spec is None:
            continue
        prov = provenance(OUTCOME_PROV, lock_hash=lock)
        meta = {"lock_hash": lock, "skill": skill, "preregistration": str(prereg),
                "created_at": "2026-11-10T10:00:00+00:00"}  # fmt: skip
        write_experiment_dir(top / "variants" / variant, meta, outcome_records(spec, prov=prov))
    return top
