"""The user's inputs: ``tasks.json`` and ``preregistration.yaml``.

Models are frozen and strict (``extra="forbid"`` catches typos). Everything is
loaded through :func:`load_tasks` and :func:`load_preregistration`, which turn
every problem (missing file, bad JSON/YAML, unknown or wrong field, a target
task that does not exist, an empty ``verify_cmd``) into one
:class:`~harness.errors.ConfigError` naming the file and the field. Nothing here
touches Docker, git or the clock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import ConfigError

TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\(.*\))?$")


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)


# --------------------------------------------------------------------------- tasks.json


class Task(Strict):
    id: str
    """Stable identifier; used in results, reports and scenario files."""
    prompt: str
    """What the agent is asked to do. A prompt containing TODO is skipped (and reported)."""
    verify_cmd: str = ""
    """Shell command run in a fresh container on base + patch; exit 0 means pass."""
    pass_criteria: str = ""
    """What a correct solution looks like, in words; shown to the judge."""
    protected_paths: tuple[str, ...] = ()
    """Paths (files or directories) restored from base before verify; edits to them are flagged."""
    timeout_s: Annotated[int, Field(gt=0, le=24 * 3600)] | None = None
    """Per-task agent deadline; defaults to the preregistration's budgets.timeout_s."""

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not TASK_ID.match(v):
            raise ValueError(
                "must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return v

    @field_validator("protected_paths")
    @classmethod
    def _relative_paths(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for p in v:
            parts = Path(p).parts
            if not p or Path(p).is_absolute() or ".." in parts or (parts and parts[0] == ".git"):
                raise ValueError(f"{p!r} must be a relative path inside the repository (no '..', not .git)")
        return v

    @property
    def is_todo(self) -> bool:
        return "TODO" in self.prompt


class TaskFile(Strict):
    tasks: tuple[Task, ...]
    comment: str | tuple[str, ...] = ""
    """Free text for people (JSON has no comments; ``harness init`` writes its guide here); ignored."""

    @model_validator(mode="after")
    def _checks(self) -> TaskFile:
        seen: set[str] = set()
        for i, task in enumerate(self.tasks):
            if task.id in seen:
                raise _FieldError(f"tasks[{i}].id", f"duplicate task id {task.id!r}")
            seen.add(task.id)
            if not task.is_todo and not task.verify_cmd.strip():
                raise _FieldError(f"tasks[{i}].verify_cmd", f"task {task.id!r} has an empty verify_cmd")
        if not self.tasks:
            raise _FieldError("tasks", "at least one task is required")
        return self

    @property
    def runnable(self) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if not t.is_todo)

    @property
    def skipped(self) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if t.is_todo)

    def by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}


# --------------------------------------------------------------------- preregistration


class Budgets(Strict):
    per_trial_usd: Annotated[float, Field(gt=0)] = 1.0
    """Passed to the CLI as --max-budget-usd and enforced again by the gateway."""
    total_usd: Annotated[float, Field(gt=0)] | None = None
    """Cumulative cap for the experiment; reaching it stops new trials (decision: inconclusive)."""
    judge_usd: Annotated[float, Field(gt=0)] = 0.25
    """--max-budget-usd for each judge call."""
    timeout_s: Annotated[int, Field(gt=0, le=24 * 3600)] = 900
    """Agent wall-clock deadline per trial, enforced inside (timeout -k) and outside (docker kill)."""
    verify_timeout_s: Annotated[int, Field(gt=0, le=24 * 3600)] = 600
    judge_timeout_s: Annotated[int, Field(gt=0, le=3600)] = 300


def is_size(text: str) -> bool:
    """A size as the preregistration and the environment write it: bytes, or a k, m or g suffix."""
    return re.fullmatch(r"[1-9][0-9]*[kmg]?", text.strip().lower()) is not None


def parse_size(text: str) -> int:
    """Bytes of a size such as ``512m`` or ``2g`` (binary units); see :func:`is_size`."""
    text = text.strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if text[-1:] in "kmg" else text) * mult


class Resources(Strict):
    memory: str = "2g"
    """Memory limit of every trial container; swap is set equal (no swap)."""
    cpus: Annotated[float, Field(gt=0, le=64)] = 1.0
    pids: Annotated[int, Field(ge=32, le=65536)] = 512
    tmpfs_size: str = "512m"
    """Size of the /tmp and HOME tmpfs mounts."""
    max_file_size: str = "1g"
    """--ulimit fsize for every trial container."""
    nofile: Annotated[int, Field(ge=64, le=1048576)] = 4096

    @field_validator("memory", "tmpfs_size", "max_file_size")
    @classmethod
    def _size(cls, v: str) -> str:
        if not is_size(v):
            raise ValueError(f"{v!r} is not a size like 512m or 2g")
        return v.lower()


class Execution(Strict):
    runs_per_arm: Annotated[int, Field(ge=1, le=100)] = 3
    model: str = "sonnet"
    judge_model: str = "haiku"
    allowed_tools: tuple[str, ...] = ("Bash", "Edit", "Read")
    budgets: Budgets = Budgets()
    resources: Resources = Resources()
    seed: int = 20261130
    """Seeds the interleaved order of the trials (``harness.plan``) and nothing else: the scripted
    model draws its outcomes from the scenario file's own ``seed`` (see docs/scenario.md)."""
    repo: str = "."
    """The repository under test, relative to the preregistration file."""
    base_ref: str = "HEAD"
    """Commit the trials start from; resolved to a SHA by ``harness lock``."""
    max_infra_retries: Annotated[int, Field(ge=0, le=10)] = 2

    @field_validator("allowed_tools")
    @classmethod
    def _tools(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for tool in v:
            if not TOOL_NAME.match(tool):
                raise ValueError(f"{tool!r} is not a tool name like Bash, Edit or Bash(git *)")
        return v

    def agent_timeout_s(self, task: Task) -> int:
        """The agent's deadline on ``task``: its own ``timeout_s``, else the preregistration's."""
        return task.timeout_s or self.budgets.timeout_s

    def trial_deadlines_s(self, task: Task) -> int:
        """The sum of a trial's three deadlines on ``task`` (agent, verify, judge)."""
        b = self.budgets
        return self.agent_timeout_s(task) + b.verify_timeout_s + b.judge_timeout_s

    @model_validator(mode="after")
    def _judge_differs(self) -> Execution:
        if self.judge_model == self.model:
            raise _FieldError("judge_model", "must differ from model: the judge is an independent model")
        return self


class Decision(Strict):
    """How results become adopt / reject / inconclusive. Locked with everything else."""

    rule: Literal["point", "interval"] = "point"
    """point: the article's rule; interval: adopt only when the paired CI excludes zero."""
    cost_increase_max: Annotated[float, Field(ge=0)] = 0.5
    """Largest acceptable relative cost increase (0.5 = +50%)."""
    min_worthwhile_gain: Annotated[float, Field(ge=0, le=1)] = 0.05
    """Interval rule: reject when the upper bound of the gain is below this."""
    max_missing_share: Annotated[float, Field(ge=0, le=1)] = 0.2
    """Inconclusive when unknown + truncated trials exceed this share of an arm."""
    pass_rule: Literal["verify_and_judge", "verify", "judge"] = "verify_and_judge"
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95
    early_stop: Literal["none", "curtail"] = "none"
    """curtail: stop once the remaining trials cannot change the point-rule decision."""


class Preregistration(Strict):
    skill: str
    """Name of the skill under evaluation."""
    skill_ref: str
    """Path to the skill folder (holding SKILL.md), relative to this file."""
    tasks: str = "tasks.json"
    """Path to tasks.json, relative to this file."""
    target_tasks: tuple[str, ...] | Literal["all"] = "all"
    expected_effect: str = ""
    side_effects_to_watch: tuple[str, ...] = ()
    adoption_criteria: str | tuple[str, ...] = "skill pass rate > baseline pass rate and cost increase <= +50%"
    rejection_criteria: str | tuple[str, ...] = "otherwise"
    on_rejection: Literal["shelve", "keep"] = "shelve"
    shelf: str = "shelf"
    """Folder (relative to this file) a rejected skill is moved to when on_rejection is shelve."""
    execution: Execution = Execution()
    decision: Decision = Decision()
    lock: LockBlock | None = None

    @field_validator("skill")
    @classmethod
    def _skill_name(cls, v: str) -> str:
        if not TASK_ID.match(v):
            raise ValueError("must be a short name of letters, digits, '.', '_' or '-'")
        return v


class LockBlock(Strict):
    locked_at: str
    sha256: str
    base_sha: str
    files: dict[str, str] = {}
    """sha256 of each locked file (relative path -> digest), for naming what changed."""


Preregistration.model_rebuild()


# ------------------------------------------------------------------------------ loading


class _FieldError(ValueError):
    """Raised inside validators to point at a specific field path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _raise_validation(path: Path, e: ValidationError) -> None:
    err = e.errors()[0]
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        # the validator names the field relative to its own model; prefix where that model sits
        prefix = _loc(tuple(err["loc"])) + "." if err["loc"] else ""
        raise ConfigError(path, ctx_error.message, field=prefix + ctx_error.field) from None
    field = _loc(tuple(err["loc"]))
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling; see README for the allowed fields)"
    elif err["type"] == "missing":
        msg = "required field is missing"
    more = len(e.errors()) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    raise ConfigError(path, msg, field=field) from None


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, "file not found") from None
    except IsADirectoryError:
        raise ConfigError(path, "is a directory, expected a file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(path, f"is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ConfigError(path, f"cannot be read: {e.strerror}") from None


M = TypeVar("M", bound=BaseModel)


def validate(path: Path, model: type[M], data: object, shape: str) -> M:
    """``data`` as ``model``, or one ConfigError naming the file and the first bad field."""
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"expected {shape}", field="(top level)")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        _raise_validation(path, e)
        raise  # pragma: no cover


def parse_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(path, f"malformed YAML{where}: {problem}") from None


def parse_tasks(path: Path, text: str) -> TaskFile:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(path, f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    return validate(path, TaskFile, data, 'an object like {"tasks": [...]}')


def load_tasks(path: Path) -> TaskFile:
    return parse_tasks(path, read_text(path))


def parse_preregistration(path: Path, text: str) -> Preregistration:
    return validate(path, Preregistration, parse_yaml(path, text), "a mapping of fields (skill, skill_ref, ...)")


def load_preregistration(path: Path) -> Preregistration:
    return parse_preregistration(path, read_text(path))


class Study:
    """A preregistration with its tasks and skill resolved to paths and checked together."""

    def __init__(self, prereg_path: Path, prereg: Preregistration, tasks: TaskFile) -> None:
        self.prereg_path = prereg_path
        self.prereg = prereg
        self.task_file = tasks
        self.excluded: dict[str, str] = {}
        """Target tasks left out of the plan, with the reason (the preflight's trivial tasks)."""

    @property
    def root(self) -> Path:
        return self.prereg_path.parent

    @property
    def tasks_path(self) -> Path:
        return (self.root / self.prereg.tasks).resolve()

    @property
    def skill_dir(self) -> Path:
        return (self.root / self.prereg.skill_ref).resolve()

    @property
    def repo_path(self) -> Path:
        return (self.root / self.prereg.execution.repo).resolve()

    @property
    def shelf_dir(self) -> Path:
        return (self.root / self.prereg.shelf).resolve()

    def target_tasks(self) -> tuple[Task, ...]:
        """Runnable tasks the preregistration targets (TODO prompts excluded)."""
        targets = self.prereg.target_tasks
        if targets == "all":
            return tuple(t for t in self.task_file.runnable if t.id not in self.excluded)
        by_id = self.task_file.by_id()
        return tuple(by_id[t] for t in targets if not by_id[t].is_todo and t not in self.excluded)

    def skipped_tasks(self) -> tuple[Task, ...]:
        targets = self.prereg.target_tasks
        wanted = set(t.id for t in self.task_file.tasks) if targets == "all" else set(targets)
        return tuple(t for t in self.task_file.skipped if t.id in wanted)


def load_study(prereg_path: Path) -> Study:
    """Load and cross-check preregistration, tasks and skill folder."""
    prereg_path = prereg_path.resolve()
    prereg = load_preregistration(prereg_path)
    tasks = load_tasks((prereg_path.parent / prereg.tasks).resolve())
    study = Study(prereg_path, prereg, tasks)
    if prereg.target_tasks != "all":
        known = tasks.by_id()
        for i, tid in enumerate(prereg.target_tasks):
            if tid not in known:
                raise ConfigError(
                    prereg_path,
                    f"task {tid!r} does not exist in {study.tasks_path.name}",
                    field=f"target_tasks[{i}]",
                    hint=f"known tasks: {', '.join(sorted(known)) or '(none)'}",
                )
            if tid in prereg.target_tasks[:i]:  # a repeated id would plan the same trial ids twice
                raise ConfigError(prereg_path, f"task {tid!r} is listed twice", field=f"target_tasks[{i}]")
    if not study.target_tasks():
        raise ConfigError(
            prereg_path, "no runnable task is targeted (all are TODO or none listed)", field="target_tasks"
        )
    skill = study.skill_dir
    if not skill.is_dir():
        raise ConfigError(prereg_path, f"skill folder {skill} does not exist", field="skill_ref")
    skill_md = skill / "SKILL.md"
    if skill_md.is_symlink() or not skill_md.is_file():
        raise ConfigError(prereg_path, f"{skill_md} is missing or not a regular file", field="skill_ref")
    return study
