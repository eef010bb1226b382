"""The user's inputs: ``tasks.json`` and ``preregistration.yaml``.

Models are frozen and strict (``extra="forbid"`` catches typos). Everything is
loaded through :func:`load_tasks` and :func:`load_preregistration`, which turn
every problem (missing file, bad JSON/YAML, unknown or wrong field, a target
task that does not exist, an empty ``verify_cmd``, a library folder without skills)
into one :class:`~harness.errors.ConfigError` naming the file and the field. Nothing
here touches Docker, git or the clock.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic import Strict as StrictType

from harness.errors import ConfigError
from harness.records import RESULTS, FrozenModel
from harness.study.inputs import load_json, load_yaml, read_input

# matched with fullmatch: '$' would accept a trailing newline
TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\([^\x00-\x1f\x7f]*\))?")
MODEL_NAME = re.compile(r"[^\s\x00-\x1f\x7f]{1,200}")
GIT_REF = re.compile(r"[^\s\x00-\x1f\x7f~^:?*\[\\-][^\s\x00-\x1f\x7f]{0,254}")

Int = Annotated[int, StrictType()]
"""An integer field: a boolean (``timeout_s: true``) or a string is refused, not converted."""
Float = Annotated[float, StrictType()]
"""A number field: an integer is fine; a boolean or a string is refused. inf/nan are refused by the models."""
MAX_TASKS = 10_000
MAX_ARGUMENT_BYTES = 131_071
"""The longest single command-line argument Linux passes to a program: ``MAX_ARG_STRLEN`` (32 pages, 131,072
bytes) less the terminating NUL. A trial's prompt reaches the CLI as one argument (``claude -p PROMPT``),
and so does the judge's prompt (:func:`harness.trial.judge.judge_prompt`, which keeps itself within it)."""
ARGUMENT_RESERVE_BYTES = 16_384
"""What one argument keeps beside a task's own text: the arm's prefix (the skill arm's instruction, a
library's list of skills) and the judge's instructions and at least 15 KB of the diff it grades."""
TASK_TEXT_MAX_BYTES = MAX_ARGUMENT_BYTES - ARGUMENT_RESERVE_BYTES
"""The most a task's ``prompt``, ``pass_criteria`` and ``verify_cmd`` may hold together, in UTF-8 bytes."""
MAX_MODELS = 16
"""The most executor models one preregistration may list (``execution.models``): each is a complete A/B."""


class Strict(FrozenModel):
    """Inputs: frozen and strict like every model, and no inf or nan anywhere."""

    # the attribute docstrings become the fields' descriptions in the JSON Schemas (harness.schemas)
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)


# --------------------------------------------------------------------------- tasks.json


def repository_path_problem(path: str) -> str | None:
    """Why ``path`` is not a path to a file or folder inside the repository (relative, no ``..``, not
    ``.git``, no control characters: a newline would split every list of paths it is written into), else
    None. Protected paths, kept-in paths and the lock's left-out paths are all such paths."""
    bad = [c for c in path if ord(c) < 0x20 or ord(c) == 0x7F]
    if bad:
        what = "a NUL byte" if "\x00" in bad else repr(bad[0])
        return f"{path!r} contains a control character ({what})"
    parts = Path(path).parts
    if not parts or Path(path).is_absolute() or ".." in parts or parts[0] == ".git":
        return (
            f"{path!r} must be a relative path to a file or folder inside the repository (not '.', no '..', not .git)"
        )
    return None


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
    timeout_s: Annotated[Int, Field(gt=0, le=24 * 3600)] | None = None
    """Per-task agent deadline; defaults to the preregistration's budgets.timeout_s."""
    split: str | None = None
    """Which held-out split the task belongs to (``val``, ``test``, ...): a preregistration's ``split`` runs and
    analyses only the tasks of one split, and a library's bare and masked trials pair only within one."""

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not TASK_ID.fullmatch(v):
            raise ValueError(
                "must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return v

    @field_validator("split")
    @classmethod
    def _split_shape(cls, v: str | None) -> str | None:
        if v is not None and not SPLIT_NAME.fullmatch(v):
            raise ValueError(
                "must be 1-32 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return v

    @field_validator("protected_paths")
    @classmethod
    def _relative_paths(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for p in v:
            problem = repository_path_problem(p)
            if problem:
                raise ValueError(problem)
        return v

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty or blank: it is what the agent is asked to do")
        return v

    @model_validator(mode="after")
    def _fits_one_argument(self) -> Task:
        """The prompt reaches the CLI as one command-line argument, and the judge's prompt repeats the
        prompt, the criteria and the verify command: refused here, not as an infra error in every trial."""
        parts = {"prompt": self.prompt, "pass_criteria": self.pass_criteria, "verify_cmd": self.verify_cmd}
        sizes = {k: len(v.encode("utf-8", "surrogatepass")) for k, v in parts.items()}
        total = sum(sizes.values())
        if total > TASK_TEXT_MAX_BYTES:
            raise _FieldError(
                max(sizes, key=sizes.__getitem__),
                f"the task's prompt, pass_criteria and verify_cmd are {total:,} bytes together (UTF-8), more than "
                f"the {TASK_TEXT_MAX_BYTES:,} that fit: the prompt reaches the CLI as one command-line argument "
                f"and the judge's prompt repeats all three, and Linux caps one argument at "
                f"{MAX_ARGUMENT_BYTES:,} bytes (MAX_ARG_STRLEN), of which {ARGUMENT_RESERVE_BYTES:,} are kept for "
                "the arm's prefix and the judge's instructions and diff; put long material in a file of the "
                "repository and name it in the prompt",
            )
        return self

    @property
    def is_todo(self) -> bool:
        return "TODO" in self.prompt


class TaskFile(Strict):
    tasks: Annotated[tuple[Task, ...], Field(max_length=MAX_TASKS)]
    """The tasks, each run in both arms ``runs_per_arm`` times; ids are unique."""
    comment: str | tuple[str, ...] = ""
    """Free text for people (JSON has no comments; ``skilltrial init`` writes its guide here); ignored."""
    schema_ref: Annotated[str, Field(alias="$schema", exclude=True)] = ""
    """The JSON Schema an editor checks this file against (``skilltrial init`` writes ``tasks.schema.json``);
    ignored, and outside the lock hash (excluded from every dump)."""

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
    per_trial_usd: Annotated[Float, Field(gt=0, le=1e6)] = 1.0
    """Passed to the CLI as --max-budget-usd and enforced again by the gateway."""
    total_usd: Annotated[Float, Field(gt=0, le=1e9)] | None = None
    """Cumulative cap for the experiment; reaching it stops new trials (decision: inconclusive)."""
    judge_usd: Annotated[Float, Field(gt=0, le=1e6)] = 0.25
    """--max-budget-usd for each judge call."""
    timeout_s: Annotated[Int, Field(gt=0, le=24 * 3600)] = 900
    """Agent wall-clock deadline per trial, enforced inside (timeout -k) and outside (docker kill)."""
    verify_timeout_s: Annotated[Int, Field(gt=0, le=24 * 3600)] = 600
    """Wall-clock deadline of each verify run."""
    judge_timeout_s: Annotated[Int, Field(gt=0, le=3600)] = 300
    """Wall-clock deadline of each judge call."""


def is_size(text: str) -> bool:
    """A size as the preregistration and the environment write it: bytes, or a k, m or g suffix."""
    return re.fullmatch(r"[1-9][0-9]{0,15}[kmg]?", text.strip().lower()) is not None


def parse_size(text: str) -> int:
    """Bytes of a size such as ``512m`` or ``2g`` (binary units); see :func:`is_size`."""
    text = text.strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if text[-1:] in "kmg" else text) * mult


class Resources(Strict):
    memory: str = "2g"
    """Memory limit of every trial container; swap is set equal (no swap)."""
    cpus: Annotated[Float, Field(gt=0, le=64)] = 1.0
    """At most the host's cores (checked by :func:`check_host_fits` when locking and evaluating)."""
    pids: Annotated[Int, Field(ge=32, le=65536)] = 512
    """--pids-limit of every trial container."""
    tmpfs_size: str = "512m"
    """Size of the /tmp and HOME tmpfs mounts."""
    max_file_size: str = "1g"
    """--ulimit fsize for every trial container."""
    nofile: Annotated[Int, Field(ge=64, le=1048576)] = 4096
    """--ulimit nofile (open files) of every trial container."""

    @field_validator("memory", "tmpfs_size", "max_file_size")
    @classmethod
    def _size(cls, v: str, info: ValidationInfo) -> str:
        if v != v.strip() or not is_size(v):
            raise ValueError(f"{v!r} is not a size like 512m or 2g")
        low, high = SIZE_BOUNDS[str(info.field_name)]
        if not low <= parse_size(v) <= high:
            raise ValueError(f"{v!r} is outside {_size_text(low)}..{_size_text(high)}")
        return v.lower()


SIZE_BOUNDS = {
    "memory": (64 << 20, 1 << 40),
    "tmpfs_size": (1 << 20, 1 << 40),
    "max_file_size": (1 << 20, 1 << 40),
}
"""(smallest, largest) bytes of each size field: a trial cannot start in 1k of memory."""


def _size_text(n: int) -> str:
    for suffix, shift in (("t", 40), ("g", 30), ("m", 20), ("k", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


NonNegFloat = Annotated[float, Field(ge=0)]


def model_dir_name(model: str) -> str:
    """The directory name of one model's experiment in a model matrix (``<out>/models/<name>``): the model
    name with every character but letters, digits, ``.``, ``_`` and ``-`` as ``_``, and no leading dot
    (``us.anthropic.claude:0`` -> ``us.anthropic.claude_0``, ``a/b`` -> ``a_b``)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", model)
    return "_" + name[1:] if name.startswith(".") else name


AGENT_MODELS = {"claude-code": "sonnet", "codex": "gpt-6.2-sol"}
"""Each agent's default model (Codex: the pinned CLI's own default, docs/agents.md)."""
CLAUDE_MODEL = re.compile(r"(?i)^(sonnet|haiku|opus|claude[-.\w]*|anthropic[/.:][-.\w]*)$")
"""A model name only Claude Code runs: an error for another agent, which would meter it at a Claude price."""


class Execution(Strict):
    agent: Literal["claude-code", "codex"] = "claude-code"
    """The coding agent under test: ``claude-code`` (the Claude Code CLI) or ``codex`` (OpenAI's Codex CLI,
    offline against the scripted Responses API; see docs/agents.md). Its model is ``model`` (default: the
    agent's own, ``sonnet`` or ``gpt-6.2-sol``). The judge is Claude Code whatever the agent."""
    runs_per_arm: Annotated[Int, Field(ge=1, le=100)] = 3
    """How often each task runs in each arm (the trials of a task are averaged; tasks are the unit)."""
    model: str = "sonnet"
    """The agent's model; with ``models``, the first of them (do not write both)."""
    models: Annotated[tuple[str, ...], Field(max_length=MAX_MODELS)] = ()
    """A model matrix: one complete A/B per executor model, one after another, each in its own experiment
    directory (``<out>/models/<model>``), then one summary and one gate over them (see
    :mod:`harness.experiment.matrix`). At least two, distinct, none the judge; instead of ``model``."""
    judge_model: str = "haiku"
    """The judge's model: must differ from every executor model (an independent judge)."""
    allowed_tools: tuple[str, ...] = ("Bash", "Edit", "Read")
    """Claude Code's --allowedTools in both arms (``Bash``, ``Edit``, ``Read``, ``Bash(git *)``...)."""
    delivery: Literal["prompt", "installed"] = "prompt"
    """prompt: ``claude --bare``, the skill arm told to read /skill/SKILL.md (the article's method);
    installed: the CLI without --bare, the skill in .claude/skills for the model to pick up (or not) from
    its description, both arms in that mode (see harness.trial.installed)."""
    budgets: Budgets = Budgets()
    """Money and time caps: per trial, per judge call, for the whole experiment."""
    resources: Resources = Resources()
    """Limits of every trial container (memory, cpus, pids, tmpfs, file size, open files)."""
    seed: Annotated[Int, Field(ge=-(1 << 63), lt=1 << 63)] = 20261130
    """Seeds the interleaved order of the trials (``harness.plan``) and nothing else: the scripted
    model draws its outcomes from the scenario file's own ``seed`` (see docs/scenario.md)."""
    repo: str = "."
    """The repository under test, relative to the preregistration file."""
    base_ref: str = "HEAD"
    """Commit the trials start from; resolved to a SHA by ``skilltrial lock``."""
    include_paths: tuple[str, ...] = ()
    """Paths that ``skilltrial lock`` leaves out of the tree every trial starts from by default (the
    experiment's own files, a copy of the skill under test) and that the trials must see anyway: each a
    path the lock names as left out, or a folder above one (relative to the repository's top)."""
    max_infra_retries: Annotated[Int, Field(ge=0, le=10)] = 2
    """How often a trial that failed for an infrastructure reason is retried (never counted against an arm)."""
    prices: dict[str, tuple[NonNegFloat, NonNegFloat, NonNegFloat, NonNegFloat]] = {}
    """Per model, USD per million tokens (input, output, cache write, cache read): pins or overrides
    the shipped price table the gateway meters with (see :mod:`harness.study.prices`)."""

    @model_validator(mode="before")
    @classmethod
    def _model_from_models(cls, data: Any) -> Any:
        """``models`` and ``model`` are exclusive; with ``models``, ``model`` reads its first entry, so code
        that knows one model (prices, calibration, the ledger) never sees the default by accident. Without
        either, the model is the agent's default (:data:`AGENT_MODELS`)."""
        if isinstance(data, Mapping) and data.get("models") is None and "model" not in data:
            agent = data.get("agent")
            if isinstance(agent, str) and agent in AGENT_MODELS:
                return {**data, "model": AGENT_MODELS[agent]}
        if not isinstance(data, Mapping) or data.get("models") is None:
            return data
        if "model" in data:
            raise _FieldError("model", "give either model (one executor model) or models (a matrix of them), not both")
        models = data["models"]
        if (
            isinstance(models, list | tuple)
            and models
            and isinstance(models[0], str)
            and MODEL_NAME.fullmatch(models[0])
        ):
            return {**data, "model": models[0]}
        return data

    @field_validator("model", "judge_model")
    @classmethod
    def _model_name(cls, v: str) -> str:
        if not MODEL_NAME.fullmatch(v):
            raise ValueError(f"{v!r} is not a model name like sonnet or claude-sonnet-4-5 (empty, blank or spaces)")
        return v

    @field_validator("base_ref")
    @classmethod
    def _ref(cls, v: str) -> str:
        if not GIT_REF.fullmatch(v):
            raise ValueError(f"{v!r} is not a git commit, branch or tag name")
        return v

    @model_validator(mode="after")
    def _include_paths(self) -> Execution:
        for i, p in enumerate(self.include_paths):
            problem = repository_path_problem(p)
            if problem:
                raise _FieldError(f"include_paths[{i}]", problem)
            if p in self.include_paths[:i]:
                raise _FieldError(f"include_paths[{i}]", f"{p!r} is listed twice")
        return self

    @field_validator("allowed_tools")
    @classmethod
    def _tools(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for tool in v:
            if not TOOL_NAME.fullmatch(tool):
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
    def _agent_model(self) -> Execution:
        if self.agent != "claude-code" and CLAUDE_MODEL.fullmatch(self.model):
            raise _FieldError(
                "model",
                f"{self.model!r} is a Claude model and execution.agent is {self.agent!r}: name one of its models "
                f"(default {AGENT_MODELS[self.agent]!r})",
            )
        return self

    @model_validator(mode="after")
    def _judge_differs(self) -> Execution:
        if self.judge_model == self.model and not self.models:
            raise _FieldError("judge_model", "must differ from model: the judge is an independent model")
        self._check_models()
        return self

    def _check_models(self) -> None:
        if "models" in self.model_fields_set and len(self.models) < 2:
            raise _FieldError("models", "must list at least two models (for one, write execution.model: NAME instead)")
        dirs: dict[str, int] = {}
        for i, m in enumerate(self.models):
            if not MODEL_NAME.fullmatch(m):
                raise _FieldError(f"models[{i}]", f"{m!r} is not a model name like sonnet or claude-sonnet-4-5")
            if m in self.models[:i]:
                raise _FieldError(f"models[{i}]", f"{m!r} is listed twice (models[{self.models.index(m)}])")
            if m == self.judge_model:
                raise _FieldError(
                    "judge_model",
                    f"must differ from every executor model (models[{i}] is {m!r}): the judge is independent",
                )
            key = model_dir_name(m).lower()  # case-insensitive file systems would merge them
            if key in dirs:
                raise _FieldError(
                    f"models[{i}]",
                    f"{m!r} would share the results directory models/{model_dir_name(m)} with "
                    f"models[{dirs[key]}] ({self.models[dirs[key]]!r})",
                )
            dirs[key] = i

    @property
    def executor_models(self) -> tuple[str, ...]:
        """Every model the experiment runs the A/B on: ``models``, else ``(model,)``."""
        return self.models or (self.model,)

    def for_model(self, model: str) -> Execution:
        """The settings of one model's A/B of a matrix: ``model`` and no ``models``; everything else alike."""
        if model not in self.executor_models:
            raise ValueError(f"{model!r} is not one of the preregistered models {self.executor_models}")
        return self.model_copy(update={"model": model, "models": ()})


class SequentialSettings(Strict):
    """A group-sequential design for the interval rule: the data are analysed at preregistered looks (after
    chosen rounds of the plan) and the run stops at the first look whose verdict is adopt or reject.

    Each look applies the interval rule to repeated confidence intervals whose level comes from a Lan-DeMets
    alpha-spending boundary, so that adopting at any look keeps the overall false adoption at the fixed
    design's level (one-sided (1 - confidence) / 2). The futility stop (``futility_stop``) stays beside it,
    non-binding. Interval rule only; not for library experiments. See
    docs/statistics.md#group-sequential-design."""

    looks: Annotated[tuple[Annotated[Int, Field(ge=1, le=100)], ...], Field(min_length=2, max_length=20)] | None = None
    """The rounds after which the data are analysed (a round runs every task once in each arm), strictly
    increasing and ending at ``execution.runs_per_arm``; default: after every round."""
    spending: Literal["obrien-fleming", "pocock"] = "obrien-fleming"
    """The alpha-spending function: obrien-fleming (Lan-DeMets, default) spends almost nothing at early looks
    and keeps the final look close to the fixed design; pocock spends evenly, stops earlier more often and
    pays with a stricter final look."""

    @field_validator("looks")
    @classmethod
    def _increasing(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None and any(b <= a for a, b in pairwise(v)):
            raise ValueError(f"must increase strictly (rounds after which to look), got {list(v)}")
        return v


class DecisionSettings(Strict):
    """How results become adopt / reject / inconclusive. Locked with everything else."""

    rule: Literal["point", "interval"] = "interval"
    """interval (default): adopt only when the paired CI excludes zero; point: the source article's rule
    (adopts a skill that does nothing about 45% of the time; kept by name for fidelity)."""
    cost_increase_max: Annotated[Float, Field(ge=0)] = 0.5
    """Largest acceptable relative cost increase (0.5 = +50%)."""
    min_worthwhile_gain: Annotated[Float, Field(ge=0, le=1)] = 0.05
    """Interval rule: reject when the upper bound of the gain is below this."""
    max_missing_share: Annotated[Float, Field(ge=0, le=1)] = 0.2
    """Inconclusive when unknown + truncated trials (and infra after reaching the model) exceed this share of an arm."""
    max_infra_imbalance: Annotated[Float, Field(ge=0, le=1)] = 0.1
    """Inconclusive when the arms' infra-error shares differ by more than this (0.1 = 10 points)."""
    pass_rule: Literal["verify_and_judge", "verify", "judge"] = "verify_and_judge"
    """When a trial passes: verify exits 0 and the judge says pass (default), or either alone."""
    confidence: Annotated[Float, Field(gt=0.5, lt=1)] = 0.95
    """Confidence level of every interval the decision uses."""
    early_stop: Literal["none", "curtail"] = "none"
    """curtail: stop once the remaining trials cannot change the decision (interval rule: once every
    completion of the plan ends in the same reject or inconclusive; ``futility_stop`` goes further)."""
    futility_stop: bool = True
    """Interval rule: stop once no outcome of the remaining trials can make the verdict adopt; the verdict
    is then reject when every completion of the plan rejects, else inconclusive (FUTILITY_STOPPED), also
    where the full plan might have rejected. Armed for plans of at least 6 tasks (smaller ones cannot adopt
    and run in full); ignored by the point rule. See docs/statistics.md#curtailment."""
    sequential: SequentialSettings | None = None
    """A group-sequential design (interval rule only): look at preregistered rounds and stop early for
    success as well as futility; None (default): one analysis at the end of the plan."""
    models_rule: Literal["every", "any"] = "every"
    """With ``execution.models``, the verdict over the per-model verdicts (``skilltrial gate`` on the matrix):
    a model that rejects rejects, a model without a valid verdict leaves none (exit 3); otherwise every:
    adopt only when every model adopts, any: adopt when at least one does (see harness.analysis.matrix)."""


class JudgeSettings(Strict):
    reuse_identical: bool = False
    """Share one judge verdict between trials of a task whose judge input (diff, verify exit code,
    model) is byte-identical. Off by default: a real judge is stochastic, and sharing its verdict
    makes identical patches agree by construction. Verify results are always shared on identical
    patches (its input is identical; see harness.trial.samepatch)."""


class MaskSettings(Strict):
    inclusion_probability: Annotated[Float, Field(gt=0, lt=1)] = 0.5
    """Chance that a skill is in one (task, sample) pair's mask."""
    balanced: bool = False
    """Every skill appears in the same number of masks (round(n p)) instead of independent draws."""
    seed: int = 20261201
    """Seeds the masks (independent of execution.seed, which orders the trials)."""


BARE = "bare"
"""``arms.baseline: bare``: the baseline arm has no skill at all (the A/B baseline)."""
MAX_VARIANTS = 8
"""The most versions one preregistration may compare with its baseline (``arms``): each is a complete A/B."""


class SkillVersion(Strict):
    path: str
    """The version's skill folder (holding SKILL.md), relative to this file."""
    ref: str | None = None
    """A commit, tag or branch of the repository holding ``path``: the version is that folder as of that commit,
    read from git objects (:mod:`harness.study.versions`); None: the folder as it is."""

    @field_validator("ref")
    @classmethod
    def _ref_shape(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or v.startswith("-") or any(c.isspace() or c in "\x00:" for c in v)):
            raise ValueError("must be a commit, tag or branch name (no spaces, ':' or leading '-')")
        return v


class Arms(Strict):
    """Versions of one skill compared paired with one baseline: version against version, or A/B/n."""

    baseline: str = BARE
    """``bare`` (no skill: the A/B baseline) or the name of one of ``versions``: the arm every other version
    (a *variant*) is compared with, paired, with Holm's correction across the variants when there are several."""
    versions: dict[str, SkillVersion]
    """Each version of the skill by name (letters, digits, '.', '_', '-'), in the order reports list them."""

    @model_validator(mode="after")
    def _checks(self) -> Arms:
        for name in self.versions:
            if not TASK_ID.fullmatch(name) or name == BARE:
                raise _FieldError(
                    f"versions.{name}", "a version's name is 1-64 letters, digits, '.', '_' or '-', and not 'bare'"
                )
        if self.baseline != BARE and self.baseline not in self.versions:
            raise _FieldError(
                "baseline", f"must be 'bare' or one of the versions ({', '.join(self.versions) or 'none'})"
            )
        n = len(self.variants)
        if not 1 <= n <= MAX_VARIANTS:
            raise _FieldError(
                "versions",
                f"needs 1 to {MAX_VARIANTS} versions besides the baseline ({n} given): "
                + ("version against version names two" if self.baseline != BARE else "a bare baseline and one or more"),
            )
        places = [(v.path, v.ref) for v in self.versions.values()]
        for name, v in self.versions.items():
            problem = None if v.path.strip() else "must name a folder"
            if problem is None and places.count((v.path, v.ref)) > 1:
                problem = f"{v.path!r} is named by another version too: two versions are two folders, or two refs"
            if problem:
                raise _FieldError(f"versions.{name}.path", problem)
        return self

    @property
    def variants(self) -> tuple[str, ...]:
        """The versions compared with the baseline, in the preregistered order."""
        return tuple(n for n in self.versions if n != self.baseline)


class Selection(Strict):
    """A library's selected set confirmed on held-out tasks (``skilltrial confirm`` writes this block): an A/B
    whose skill arm gets every selected skill at once, delivered as the library's masked arm is."""

    library: str
    """The library's folder (every subfolder with a SKILL.md is one skill), relative to this file."""
    skills: Annotated[tuple[str, ...], Field(min_length=1, max_length=100)]
    """The selected set, as the library run selected it."""
    library_lock: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """The library run's lock hash: the experiment the selection came from."""
    library_results: str = ""
    """The library run's directory, for the record."""

    @field_validator("skills")
    @classmethod
    def _distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("names a skill twice")
        return v


class Library(Strict):
    """A library experiment (see :mod:`harness.experiment.library`): which of K skills earn their place."""

    path: str
    """Folder of skills (each a subfolder holding SKILL.md), relative to the preregistration."""
    masks: MaskSettings = MaskSettings()
    top_k: Annotated[Int, Field(ge=1, le=100)] = 3
    """At most this many skills are selected (no padding when fewer qualify)."""
    selection: Literal["positive", "holm"] = "holm"
    """positive: beta > 0, sorted; holm: the lower confidence bound > 0 after a Holm correction."""
    baseline_from: str | None = None
    """An earlier experiment directory (relative to this file) whose bare trials are reused; its
    data is hashed into the lock."""
    components: tuple[Literal["pass", "verify", "judge", "cost", "turns", "duration"], ...] = (
        "pass",
        "verify",
        "judge",
        "cost",
        "turns",
        "duration",
    )
    """Regressions to run; pass (the preregistered pass_rule) is the primary one and always included."""
    delivery: Literal["prompt"] = "prompt"
    """How the masked arm gets its skills (see harness.trial.delivery)."""
    n_boot: Annotated[Int, Field(ge=2000, le=100_000)] = 2000
    alpha: Annotated[Float, Field(gt=0, lt=0.5)] = 0.05

    @field_validator("components")
    @classmethod
    def _primary(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if "pass" not in v:
            raise ValueError("must include 'pass' (the primary component)")
        if len(set(v)) != len(v):
            raise ValueError("lists a component twice")
        return v


class Preregistration(Strict):
    skill: str
    """Name of the skill under evaluation (of the library, for a library experiment)."""
    skill_ref: str | None = None
    """Path to the skill folder (holding SKILL.md), relative to this file. Required unless library is set."""
    library: Library | None = None
    """A library experiment instead of a single-skill A/B."""
    arms: Arms | None = None
    selection: Selection | None = None
    """A library's selected set confirmed on held-out tasks (written by ``skilltrial confirm``) instead of
    ``skill_ref``: the skill arm gets every selected skill, the baseline none."""
    """Versions of the skill compared with one baseline (version against version, or several variants) instead of
    ``skill_ref``: each variant is a complete paired A/B against the baseline, the baseline run once for all."""
    tasks: str = "tasks.json"
    """Path to tasks.json, relative to this file."""
    target_tasks: tuple[str, ...] | Literal["all"] = "all"
    """Task ids from the tasks file this experiment runs, or ``all``."""
    split: str | None = None
    """Run and analyse only the target tasks of this split (tasks.json's ``split``): the preregistered split of a
    library's estimate, or the held-out split ``skilltrial confirm`` runs. None: every target task."""
    expected_effect: str = ""
    """What should get better with the skill, and why: written before the run, shown in the reports."""
    side_effects_to_watch: tuple[str, ...] = ()
    """What could get worse (cost, edits to tests...): written before the run, shown in the reports."""
    adoption_criteria: str | tuple[str, ...] = "skill pass rate > baseline pass rate and cost increase <= +50%"
    """The adoption rule in words (the rule that decides is ``decision``)."""
    rejection_criteria: str | tuple[str, ...] = "otherwise"
    """The rejection rule in words (the rule that decides is ``decision``)."""
    on_rejection: Literal["shelve", "keep"] = "shelve"
    """shelve: a rejected skill folder is moved to ``shelf`` (never deleted); keep: left where it is."""
    shelf: str = "shelf"
    """Folder (relative to this file) a rejected skill is moved to when on_rejection is shelve."""
    execution: Execution = Execution()
    """How the trials run: models, runs per arm, tools, delivery, budgets, resources, repository."""
    decision: DecisionSettings = DecisionSettings()
    """How the results become adopt / reject / inconclusive."""
    judge: JudgeSettings = JudgeSettings()
    """Judge settings beyond its model (``execution.judge_model``)."""
    lock: LockBlock | None = None
    """The earlier lock format (a block at the end of the file); ``skilltrial lock`` now writes ``<file>.lock``."""

    @field_validator("skill")
    @classmethod
    def _skill_name(cls, v: str) -> str:
        if not TASK_ID.fullmatch(v):
            raise ValueError("must be a short name of letters, digits, '.', '_' or '-'")
        return v

    @field_validator("split")
    @classmethod
    def _split_name(cls, v: str | None) -> str | None:
        if v is not None and not SPLIT_NAME.fullmatch(v):
            raise ValueError(
                "must be 1-32 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return v

    @model_validator(mode="after")
    def _skill_or_library(self) -> Preregistration:
        if self.selection is not None:
            self._check_selection()
        if self.arms is not None:
            self._check_arms()
        elif self.library is None and self.skill_ref is None and self.selection is None:
            raise _FieldError("skill_ref", "required field is missing")
        if self.library is not None and self.skill_ref is not None:
            raise _FieldError("skill_ref", "a library experiment takes its skills from library.path, not skill_ref")
        if self.execution.models and self.library is not None:
            raise _FieldError("execution.models", "a library experiment runs one model (execution.model)")
        if self.decision.models_rule != "every" and not self.execution.models:
            raise _FieldError("decision.models_rule", "applies only to a model matrix (execution.models)")
        self._check_sequential()
        self._check_agent()
        if self.library is not None and self.execution.delivery != "prompt":
            # the masked arm names its skills in the prompt prefix; the installed command line drops the prefix,
            # so its trials would run with mounts they are never told about
            raise _FieldError(
                "execution.delivery",
                "a library experiment supports only the prompt delivery (library.delivery: prompt); "
                "installed delivery is for single-skill A/B experiments",
            )
        return self

    def _check_agent(self) -> None:
        """The single-skill A/B (either delivery) runs any agent; the other experiment types run Claude Code
        until they support another (each refused here by name, so ``skilltrial lock`` says so)."""
        agent = self.execution.agent
        if agent == "claude-code":
            return
        if self.library is not None:
            raise _FieldError("execution.agent", f"a library experiment runs Claude Code only, not {agent!r}")
        if self.execution.models:
            raise _FieldError(
                "execution.agent", f"a model matrix (execution.models) runs Claude Code only, not {agent!r}"
            )
        if self.arms is not None:
            raise _FieldError("execution.agent", f"versions of a skill (arms) run Claude Code only, not {agent!r}")
        if self.selection is not None:
            raise _FieldError(
                "execution.agent", f"a confirmation of a library's selection runs Claude Code only, not {agent!r}"
            )

    def _check_selection(self) -> None:
        for other in ("skill_ref", "library", "arms"):
            if getattr(self, other) is not None:
                raise _FieldError(other, "a confirmation of a library's selection (selection:) has no " + other)
        if self.execution.delivery != "prompt":
            raise _FieldError("execution.delivery", "a selection is delivered as the library's masked arm: prompt")
        if self.execution.models:
            raise _FieldError("execution.models", "a confirmation runs one model (execution.model)")

    def _check_arms(self) -> None:
        arms = self.arms
        assert arms is not None
        if self.skill_ref is not None:
            raise _FieldError("skill_ref", "with arms, each version names its folder (arms.versions.<name>.path)")
        if self.library is not None:
            raise _FieldError("arms", "a library experiment has no arms: remove one of library and arms")
        if self.execution.models:
            raise _FieldError("arms", "compares versions under one model (execution.model), not a model matrix")
        if len(arms.variants) > 1:
            # each comparison's early stop certifies its own verdict, not the family's Holm-corrected one
            if self.decision.sequential is not None:
                raise _FieldError("decision.sequential", "is not supported with several variants (arms)")
            if self.decision.early_stop != "none":
                raise _FieldError("decision.early_stop", "must be none with several variants (arms)")

    def _check_sequential(self) -> None:
        seq = self.decision.sequential
        if seq is None:
            return
        if self.decision.rule != "interval":
            raise _FieldError(
                "decision.sequential", "applies to the interval rule only (decision.rule: interval), not the point rule"
            )
        if self.library is not None:
            raise _FieldError(
                "decision.sequential", "a library experiment has no interval rule to look at: remove the block"
            )
        runs = self.execution.runs_per_arm
        if runs < 2:
            raise _FieldError(
                "decision.sequential",
                "needs at least two rounds to look at (execution.runs_per_arm >= 2); with one run per arm "
                "there is only the final analysis",
            )
        if seq.looks is not None and seq.looks[-1] != runs:
            raise _FieldError(
                "decision.sequential.looks",
                f"must end at the last round, execution.runs_per_arm = {runs} (got {list(seq.looks)})",
            )


class LockBlock(Strict):
    locked_at: str
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    base_sha: Annotated[str, Field(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]
    # (pydantic's patterns are Rust regexes: '$' there is the end of the text, a newline included)
    files: dict[str, str] = {}
    """sha256 of each locked file (relative path -> digest), for naming what changed."""
    listed_name: str | None = None
    """The name the CLI lists the skill under (SKILL.md's front matter ``name``; :mod:`harness.study.skillname`):
    derived from the locked SKILL.md, written for the reader. None: a library, or a lock of an earlier version."""
    base_excluded: dict[str, str] = {}
    """What of the base commit's tree no trial sees (path from the repository's top -> why): the experiment's
    own files and every copy of the skill under test, found by ``skilltrial lock`` (hashed as ``base/tree``)."""
    base_visible: dict[str, str] = {}
    """What both arms will see that can change an agent's behaviour (``CLAUDE.md``, ``AGENTS.md``,
    ``.claude/``, other skills, paths kept in by ``execution.include_paths``): path -> what it is."""

    @field_validator("base_excluded")
    @classmethod
    def _excluded_paths(cls, v: dict[str, str]) -> dict[str, str]:
        for p in v:
            problem = repository_path_problem(p)
            if problem:
                raise ValueError(problem)
        return v


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


_UNION_TAGS = ("str", "int", "float", "bool", "none", "tuple", "list", "dict")


def _is_union_tag(part: int | str) -> bool:
    """pydantic puts the union member into an error's location (``tuple[str, ...]``, ``literal['all']``,
    ``constrained-int``); no field of these models is named like that."""
    if not isinstance(part, str):
        return False
    return part in _UNION_TAGS or any(c in part for c in "[]'()") or part.startswith(("constrained-", "function-"))


def _clean_loc(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    return tuple(p for p in loc if not _is_union_tag(p))


def _raise_validation(path: Path, e: ValidationError) -> None:
    errors = e.errors()
    err = errors[0]
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        # the validator names the field relative to its own model; prefix where that model sits
        prefix = _loc(_clean_loc(tuple(err["loc"]))) + "." if err["loc"] else ""
        raise ConfigError(path, ctx_error.message, field=prefix + ctx_error.field) from None
    loc = _clean_loc(tuple(err["loc"]))
    field = _loc(loc)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling; see README for the allowed fields)"
    elif err["type"] == "missing":
        msg = "required field is missing"
    # a union field reports one error per alternative: say them as one
    same = [x for x in errors if _clean_loc(tuple(x["loc"])) == loc]
    if len(same) > 1 and err["type"] not in ("extra_forbidden", "missing"):
        msg = "; or ".join(dict.fromkeys(x["msg"].removeprefix("Value error, ") for x in same))
    more = len(errors) - len(same)
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    raise ConfigError(path, msg, field=field) from None


def read_text(path: Path) -> str:
    """An input file's text: a regular file only, size-capped (see :mod:`harness.study.inputs`)."""
    return read_input(path)


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


def parse_yaml(path: Path, text: str, *, aliases: bool = False) -> Any:
    """Strict YAML: no aliases (unless ``aliases``, then bounded), no duplicate keys, bounded nesting
    (see :func:`harness.study.inputs.load_yaml`)."""
    return load_yaml(path, text, aliases=aliases)


def parse_tasks(path: Path, text: str) -> TaskFile:
    return validate(path, TaskFile, load_json(path, text), 'an object like {"tasks": [...]}')


def load_tasks(path: Path) -> TaskFile:
    return parse_tasks(path, read_text(path))


def parse_preregistration(path: Path, text: str) -> Preregistration:
    return validate(path, Preregistration, parse_yaml(path, text), "a mapping of fields (skill, skill_ref, ...)")


# The lock file's format (read here, where a preregistration is loaded; written by harness.study.lock).
LOCK_SUFFIX = ".lock"
MAX_LOCK_FILE = 1 << 20


def lock_path(prereg_path: Path) -> Path:
    """Where the lock of ``prereg_path`` is written: the same name with ``.lock`` appended."""
    return prereg_path.with_name(prereg_path.name + LOCK_SUFFIX)


def read_lock_file(prereg_path: Path) -> LockBlock | None:
    """The lock in the lock file beside ``prereg_path``, or None when there is none."""
    path = lock_path(prereg_path)
    if not os.path.lexists(path):
        return None
    data = load_json(path, read_input(path, limit=MAX_LOCK_FILE))
    return validate(path, LockBlock, data, 'an object like {"sha256": ..., "base_sha": ...}')


def lock_file_bytes(block: LockBlock) -> bytes:
    return (json.dumps(block.model_dump(mode="json"), indent=2, ensure_ascii=True) + "\n").encode()


def load_preregistration(path: Path, *, read_lock: bool = True) -> Preregistration:
    """The preregistration, with its lock from the lock file beside it when there is one
    (see :func:`lock_path`); a lock block inside the file (the earlier format) still counts.
    ``read_lock=False`` (for ``skilltrial lock``, which replaces it) leaves the lock file unread."""
    prereg = parse_preregistration(path, read_text(path))
    if not read_lock:
        return prereg
    block = read_lock_file(path)
    return prereg if block is None else prereg.model_copy(update={"lock": block})


class Study:
    """A preregistration with its tasks and skill resolved to paths and checked together."""

    def __init__(self, prereg_path: Path, prereg: Preregistration, tasks: TaskFile) -> None:
        self.prereg_path = prereg_path
        self.prereg = prereg
        self.task_file = tasks
        self.excluded: dict[str, str] = {}
        """Target tasks left out of the plan, with the reason (the preflight's trivial tasks)."""
        self.locked_prereg = prereg
        """The preregistration as written, which the lock covers: ``prereg`` itself, except in one model's
        study of a matrix (:meth:`for_model`), whose ``prereg`` names that model alone."""
        self.matrix_model: str | None = None
        """The executor model of one model's study of a matrix (None: the study as preregistered)."""
        self.variant: str | None = None
        """The variant of one comparison of ``arms`` (:meth:`for_variant`); None: the study as preregistered."""
        self.version_copies: dict[str, Path] = {}
        """Versions named by a git ref, written into controller-owned folders for a run
        (:func:`harness.study.lock.materialize`): name -> folder."""

    def for_model(self, model: str) -> Study:
        """One model's A/B of a model matrix (``execution.models``): the same study with ``execution`` narrowed
        to ``model``, so the run, its records and its reports are a single-model experiment's; its lock is
        still the whole preregistration's."""
        narrowed = self.prereg.model_copy(update={"execution": self.locked_prereg.execution.for_model(model)})
        study = Study(self.prereg_path, narrowed, self.task_file)
        study.locked_prereg = self.locked_prereg
        study.matrix_model = model
        study.excluded = dict(self.excluded)
        return study

    def excluding(self, tasks: Mapping[str, str]) -> Study:
        """This study with ``tasks`` (id -> why) left out of the plan as well (the preflight's trivial tasks):
        a copy, so the study as preregistered stays as it was."""
        study = copy.copy(self)
        study.excluded = {**self.excluded, **tasks}
        return study

    def variants(self) -> tuple[str, ...]:
        """The versions compared with the baseline (``arms``), in the preregistered order; () without arms."""
        arms = self.locked_prereg.arms
        return arms.variants if arms is not None else ()

    @property
    def baseline_version(self) -> str | None:
        """The version the baseline arm carries (version against version); None: a bare baseline."""
        arms = self.locked_prereg.arms
        return None if arms is None or arms.baseline == BARE else arms.baseline

    def for_variant(self, variant: str) -> Study:
        """One comparison of ``arms``: the variant against the baseline as a single-skill A/B (``skill_ref`` the
        variant's folder), its lock still the whole preregistration's (every version's files)."""
        arms = self.locked_prereg.arms
        if arms is None or variant not in arms.variants:
            raise ValueError(f"{variant!r} is not a variant of {self.prereg_path}")
        copy = self.version_copies.get(variant)
        narrowed = self.prereg.model_copy(update={"skill_ref": str(copy) if copy else arms.versions[variant].path})
        study = Study(self.prereg_path, narrowed, self.task_file)
        study.locked_prereg = self.locked_prereg
        study.variant = variant
        study.version_copies = dict(self.version_copies)
        study.excluded = dict(self.excluded)
        return study

    def version_dir(self, name: str) -> Path:
        """A version's skill folder: the variant's own is :attr:`skill_dir` (a run's checked copy, once copied)."""
        arms = self.locked_prereg.arms
        assert arms is not None
        if name == self.variant:
            return self.skill_dir
        if name in self.version_copies:
            return self.version_copies[name]
        return (self.root / arms.versions[name].path).resolve()

    def from_git(self, name: str) -> bool:
        """Version ``name`` is named by a git ref and not yet written into a folder of the run's."""
        arms = self.locked_prereg.arms
        assert arms is not None
        return arms.versions[name].ref is not None and name not in self.version_copies

    @property
    def root(self) -> Path:
        return self.prereg_path.parent

    @property
    def tasks_path(self) -> Path:
        return (self.root / self.prereg.tasks).resolve()

    @property
    def skill_dir(self) -> Path:
        """The skill folder; for a library experiment, the folder of skills (all of it is locked)."""
        lib, arms, sel = self.prereg.library, self.prereg.arms, self.prereg.selection
        if sel is not None:  # a confirmation: the library folder the selected skills come from
            return (self.root / sel.library).resolve()
        if arms is not None and self.prereg.skill_ref is None:  # the whole family: its first variant stands for it
            return (self.root / arms.versions[arms.variants[0]].path).resolve()
        return (self.root / (lib.path if lib is not None else self.prereg.skill_ref or "")).resolve()

    @property
    def repo_path(self) -> Path:
        return (self.root / self.prereg.execution.repo).resolve()

    @property
    def shelf_dir(self) -> Path:
        return (self.root / self.prereg.shelf).resolve()

    def target_tasks(self) -> tuple[Task, ...]:
        """Runnable tasks the preregistration targets (TODO prompts excluded), of its ``split`` when it names one."""
        return tuple(
            t for t in self.listed_tasks() if not t.is_todo and t.id not in self.excluded and self._in_split(t)
        )

    def listed_tasks(self) -> tuple[Task, ...]:
        """The tasks ``target_tasks`` names (every task for ``all``), before the split and TODO filters."""
        targets = self.prereg.target_tasks
        if targets == "all":
            return self.task_file.tasks
        by_id = self.task_file.by_id()
        return tuple(by_id[t] for t in targets)

    def _in_split(self, task: Task) -> bool:
        return self.prereg.split is None or task.split == self.prereg.split

    def skipped_tasks(self) -> tuple[Task, ...]:
        targets = self.prereg.target_tasks
        wanted = set(t.id for t in self.task_file.tasks) if targets == "all" else set(targets)
        return tuple(t for t in self.task_file.skipped if t.id in wanted and self._in_split(t))


def _resolve(path: Path, source: Path | None = None, field: str | None = None) -> Path:
    """``path.resolve()``, or a ConfigError (a symlink loop, a NUL byte, a name too long, no permission)
    naming where the path came from. A path that does not exist is fine here (checked where it is used)."""
    where = source or repr(str(path))[1:-1]
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError, ValueError) as e:
        problem = "contains a NUL byte" if "\x00" in str(path) else f"cannot be resolved ({e})"
        raise ConfigError(where, f"the path {str(path)!r} {problem}", field=field) from None
    try:
        os.stat(resolved)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as e:
        raise ConfigError(where, f"the path {str(path)[:200]!r} cannot be used ({e.strerror})", field=field) from None
    return resolved


def load_study(prereg_path: Path, *, read_lock: bool = True) -> Study:
    """Load and cross-check preregistration, tasks and skill folder (see :func:`load_preregistration`)."""
    prereg_path = _resolve(prereg_path)
    prereg = load_preregistration(prereg_path, read_lock=read_lock)
    paths = {"skill_ref": prereg.skill_ref, "tasks": prereg.tasks, "shelf": prereg.shelf}
    if prereg.library is not None:
        paths["library.path"] = prereg.library.path
    if prereg.selection is not None:
        paths["selection.library"] = prereg.selection.library
    if prereg.arms is not None:  # a version at a git ref need not exist in the working tree (read at lock)
        paths.update({f"arms.versions.{n}.path": v.path for n, v in prereg.arms.versions.items() if v.ref is None})
    for name, value in paths.items():
        if value is not None:
            _resolve(prereg_path.parent / value, prereg_path, name)
    _resolve(prereg_path.parent / prereg.execution.repo, prereg_path, "execution.repo")
    tasks_path = (prereg_path.parent / prereg.tasks).resolve()
    try:
        tasks_text = read_text(tasks_path)
    except ConfigError as e:  # the file itself is wrong (missing, a FIFO, a device): name the field too
        raise ConfigError(prereg_path, f"the tasks file {e}", field="tasks") from None
    tasks = parse_tasks(tasks_path, tasks_text)
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
    if prereg.split is not None and not any(t.split == prereg.split for t in study.listed_tasks()):
        splits = sorted({t.split for t in study.listed_tasks() if t.split is not None})
        raise ConfigError(
            prereg_path,
            f"no target task of {study.tasks_path.name} is in split {prereg.split!r}",
            field="split",
            hint=f"the target tasks' splits: {', '.join(repr(x) for x in splits) or '(none: add split to the tasks)'}",
        )
    if not study.target_tasks():
        raise ConfigError(
            prereg_path, "no runnable task is targeted (all are TODO or none listed)", field="target_tasks"
        )
    if prereg.library is not None:
        check_library_folder(study)
        return study
    if prereg.arms is not None:
        for name, version in prereg.arms.versions.items():
            if version.ref is None:
                _check_skill_folder(prereg_path, study.version_dir(name), f"arms.versions.{name}.path")
    elif prereg.selection is not None:
        for i, name in enumerate(prereg.selection.skills):
            _check_skill_folder(prereg_path, study.skill_dir / name, f"selection.skills[{i}]")
    else:
        _check_skill_folder(prereg_path, study.skill_dir, "skill_ref")
    return study


def _check_skill_folder(prereg_path: Path, skill: Path, field: str) -> None:
    if not skill.is_dir():
        raise ConfigError(prereg_path, f"skill folder {skill} does not exist", field=field)
    skill_md = skill / "SKILL.md"
    if skill_md.is_symlink() or not skill_md.is_file():
        raise ConfigError(prereg_path, f"{skill_md} is missing or not a regular file", field=field)


# ------------------------------------------------------------------------- a library's folder


def library_skills(study: Study) -> tuple[str, ...]:
    """The library's skills: every subfolder of ``library.path`` holding a SKILL.md, sorted by name."""
    root = study.skill_dir
    out = []
    for child in sorted(root.iterdir()) if root.is_dir() else ():
        if child.is_dir() and not child.is_symlink() and child.name not in (".git", "__pycache__"):
            out.append(child.name)
    return tuple(out)


def check_library_folder(study: Study) -> None:
    """Bad input in the library folder, named by file and field, before anything is locked or run."""
    root = study.skill_dir
    field = "library.path"
    if not root.is_dir():
        raise ConfigError(study.prereg_path, f"library folder {root} does not exist", field=field)
    names = library_skills(study)
    if not names:
        raise ConfigError(study.prereg_path, f"library folder {root} holds no skill folders", field=field)
    for name in names:
        if not TASK_ID.match(name):
            raise ConfigError(
                root / name, "a skill folder's name must be letters, digits, '.', '_' or '-'", field=field
            )
        md = root / name / "SKILL.md"
        if md.is_symlink() or not md.is_file():
            raise ConfigError(md, "is missing or not a regular file", field=field)
    lib = study.prereg.library
    assert lib is not None
    if lib.baseline_from is not None and not (baseline_dir(study) / RESULTS).is_file():
        raise ConfigError(
            study.prereg_path, f"{baseline_dir(study)} holds no {RESULTS} to reuse", field="library.baseline_from"
        )


def baseline_dir(study: Study) -> Path:
    lib = study.prereg.library
    assert lib is not None and lib.baseline_from is not None
    return (study.root / lib.baseline_from).resolve()


def check_host_fits(study: Study, cpu_count: int | None = None) -> None:
    """Refuse resources this host cannot give a trial (``cpus`` above its cores): checked when
    locking and evaluating, not when a report is read on another machine."""
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    cpus = study.prereg.execution.resources.cpus
    if cpus > cores:
        raise ConfigError(
            study.prereg_path,
            f"{cpus:g} is more than this host's {cores} CPU core(s)",
            field="execution.resources.cpus",
        )
