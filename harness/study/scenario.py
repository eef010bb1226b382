"""Scenario files for the scripted Messages API (host side: validate and compile).

A scenario says, per task and arm, what the scripted model does: the tool calls
it makes when the trial is drawn to succeed and when it is drawn to fail, the
chance of success, token usage per turn (so cost is exact), latency, injected
API errors; and how the judge behaves. :func:`compile_scenario` checks it
against the tasks and writes the JSON the server in
``harness/sidecars/scripted_api.py`` reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from harness.errors import ConfigError
from harness.study.config import Strict, Task, parse_yaml, read_text, validate


class Usage(Strict):
    input_tokens: Annotated[int, Field(ge=0, le=900_000)] = 1000
    output_tokens: Annotated[int, Field(ge=0, le=128_000)] = 100
    cache_creation_input_tokens: Annotated[int, Field(ge=0)] = 0
    cache_read_input_tokens: Annotated[int, Field(ge=0)] = 0


class Step(Strict):
    tool: Literal["Bash", "Edit", "Read", "Write", "Agent", "Skill"]
    input: dict[str, Any]
    say: str | None = None
    probe: str | None = None
    """Log this step's tool result as a ``probe`` event (security tests read it from scripted-api.log);
    later steps may use ``{{probe:NAME}}`` in their input."""
    usage: Usage | None = None
    """This turn's token usage instead of the arm's (a large ``cache_read_input_tokens`` makes the
    non-bare CLI compact its conversation before the next turn)."""
    subagent: tuple[Step, ...] | None = None
    """``Agent`` steps: what the subagent does (the conversation whose first message carries this step's
    ``input.prompt``), then it answers ``Subagent done.``"""

    @model_validator(mode="after")
    def _agent(self) -> Step:
        if self.tool == "Agent" and not (isinstance(self.input.get("prompt"), str) and self.input["prompt"].strip()):
            raise ValueError("an Agent step needs input.prompt (the subagent's first message)")
        if self.subagent and self.tool != "Agent":
            raise ValueError("only an Agent step has subagent steps")
        return self


class InjectedError(Strict):
    at_turn: Annotated[int, Field(ge=0)] = 0
    status: int | Literal["broken_stream", "reset"] = 529
    """An HTTP status, a stream cut off mid-way, or a TCP reset mid-stream."""
    times: Annotated[int, Field(ge=1)] = 1
    """How many conversations of this task and arm get the error (then it stops)."""
    conversations: Annotated[int, Field(ge=1)] | None = None
    """Instead of ``times``: every request of the first N conversations (the CLI's own retries
    included), so an API that keeps failing fails exactly those trials."""
    retry_after_s: Annotated[float, Field(ge=0, le=3600)] | None = None
    """Send ``retry-after`` with the error, as the real API does on 429 and 529."""


class ArmBehaviour(Strict):
    p_success: Annotated[float, Field(ge=0, le=1)] = 0.5
    usage: Usage | None = None
    latency_ms: Annotated[int, Field(ge=0, le=600_000)] | None = None
    read_skill: bool = True
    """Skill arm: first read /skill/SKILL.md and check the tool_result contains skill_marker."""
    prelude: tuple[Step, ...] = ()
    errors: tuple[InjectedError, ...] = ()


class JudgeBehaviour(Strict):
    mode: Literal["follow_verify", "pass", "fail", "no_structured_output"] = "follow_verify"
    p_unknown: Annotated[float, Field(ge=0, le=1)] = 0.0
    usage: Usage | None = None
    latency_ms: Annotated[int, Field(ge=0)] | None = None


class TaskScript(Strict):
    success: tuple[Step, ...] = ()
    failure: tuple[Step, ...] = ()
    final_text: str = "Done."
    arms: dict[Literal["baseline", "skill"], ArmBehaviour] = {}
    judge: JudgeBehaviour | None = None
    skill_marker: str | None = None


class SkillBehaviour(ArmBehaviour):
    marker: str = ""
    """Text in the skill's SKILL.md; the scripted model checks the file it read contains it."""


class SkillEffect(Strict):
    """A library skill's scripted effect, additive on the masked trial's success probability and tokens."""

    p_effect: Annotated[float, Field(ge=-1, le=1)] = 0.0
    input_tokens: Annotated[int, Field(ge=-100_000, le=100_000)] = 0
    output_tokens: Annotated[int, Field(ge=-100_000, le=100_000)] = 0
    marker: str = ""
    """Text in the skill's SKILL.md; the masked trial fails unless every marker came back from reading."""


class LibraryBehaviour(Strict):
    """Library experiments: the masked arm's success probability is the task's baseline ``p_success``
    plus the effects of the skills named in its prompt (clamped to [0, 1]); its tokens per turn are the
    baseline's plus theirs. The bare and masked trial of one (task, sample) share one random draw
    (common random numbers: the k-th bare and the k-th masked conversation of a task), so their
    difference shows the skills' effect and little else."""

    skills: dict[str, SkillEffect] = {}


class InvokeRule(Strict):
    query_any: tuple[str, ...] = ()
    """Matches when the query (the task prompt, or a trigger run's query) contains any of these (any case)."""
    description_any: tuple[str, ...] = ()
    """... and the skill's listed description contains any of these (so two descriptions can differ)."""
    p: Annotated[float, Field(ge=0, le=1)]


class Invocation(Strict):
    """Installed delivery: whether the scripted model calls ``Skill`` on a listed skill (seeded)."""

    p_default: Annotated[float, Field(ge=0, le=1)] = 1.0
    rules: tuple[InvokeRule, ...] = ()
    """The first rule that matches sets the probability; none matching: ``p_default``."""
    marker: str = ""
    """Text of SKILL.md's body; after the call the model checks the CLI sent it back (else skill_marker)."""


class Defaults(Strict):
    usage: Usage = Usage()
    latency_ms: Annotated[int, Field(ge=0, le=600_000)] = 0


class ModelBehaviour(Strict):
    """A model matrix (``execution.models``): what differs for one executor model. Its ``arms`` and ``skills``
    entries replace the scenario's entries of the same name in that model's experiment; task-level arms
    still come first (see docs/scenario.md)."""

    arms: dict[Literal["baseline", "skill"], ArmBehaviour] = {}
    skills: dict[str, SkillBehaviour] = {}


class Scenario(Strict):
    seed: int = 0
    probe_wait_s: Annotated[float, Field(ge=0, le=600)] = 60
    """How long a ``{{probe:NAME}}`` reference waits for that probe's output."""
    skill_marker: str = ""
    defaults: Defaults = Defaults()
    arms: dict[Literal["baseline", "skill"], ArmBehaviour] = {}
    """Arm behaviour for every task that does not set its own."""
    skills: dict[str, SkillBehaviour] = {}
    """Skill-arm behaviour by skill name: one scenario can drive experiments of several skills."""
    judge: JudgeBehaviour = JudgeBehaviour()
    tasks: dict[str, TaskScript]
    library: LibraryBehaviour | None = None
    """Per-skill effects for library experiments (harness.experiment.library_plan)."""
    invocation: dict[str, Invocation] = {}
    """Installed delivery and trigger runs, by skill name: when the model calls the Skill tool."""
    models: dict[str, ModelBehaviour] = {}
    """By executor model name: per-model arm and skill behaviour for a model matrix (:func:`for_model`)."""


def for_model(scenario: Scenario, model: str) -> Scenario:
    """The scenario one model's experiment runs: ``models.<model>`` laid over ``arms`` and ``skills``
    (the server answers every model alike; only what it is told to do differs)."""
    own = scenario.models.get(model)
    if own is None:
        return scenario
    return scenario.model_copy(
        update={"arms": {**scenario.arms, **own.arms}, "skills": {**scenario.skills, **own.skills}}
    )


def load_scenario(path: Path) -> Scenario:
    data = parse_yaml(path, read_text(path), aliases=True)  # bounded: see harness.study.inputs.check_tree
    return validate(path, Scenario, data, "a mapping with a 'tasks' field")


def scenario_warnings(scenario: Scenario, *, skill: str) -> list[str]:
    """What would silently spoil a scripted run (pure): a skill arm that reads SKILL.md with no
    marker to find in it is counted as 'skill not read', and every such trial fails."""
    out: list[str] = []
    if scenario.library is not None:  # a library experiment has no /skill arm (its skills are under /skills/)
        return out
    skill_cfg = scenario.skills.get(skill)
    for task_id, task in scenario.tasks.items():
        chosen = task.arms.get("skill") or skill_cfg or scenario.arms.get("skill") or ArmBehaviour()
        marker = task.skill_marker or (skill_cfg.marker if skill_cfg else "") or scenario.skill_marker
        if chosen.read_skill and not marker:
            out.append(
                f"task {task_id!r}: the skill arm reads /skill/SKILL.md but no marker is set (skill_marker, "
                f"skills.{skill}.marker or tasks.{task_id}.skill_marker): the scripted model will find the skill "
                "unread and fail every skill trial of this task"
            )
    return out


def compile_scenario(
    path: Path,
    scenario: Scenario,
    tasks: tuple[Task, ...],
    *,
    skill: str,
    seed: int | None = None,
    listed: str | None = None,
) -> bytes:
    """The server's JSON for one experiment: each task's prompt (how the server recognises a
    task) and fully resolved behaviour per arm, the skill arm's taken from ``skills[skill]``.
    ``listed``: the name the CLI lists the skill under (SKILL.md's front matter name, when it is not
    ``skill``): the server's skill arm is the one whose listing names it, and it calls ``Skill`` on it
    (``invocation`` is looked up under either name)."""
    known = {t.id: t for t in tasks}
    for task_id in scenario.tasks:
        if task_id not in known:
            raise ConfigError(
                path,
                f"task {task_id!r} is not one of the {len(known)} task(s) this experiment runs "
                f"(the preregistration's target_tasks, TODO prompts left out: {', '.join(sorted(known))})",
                field=f"tasks.{task_id}",
                hint="remove it from the scenario, or add it to target_tasks (and lock again)",
            )
    skill_cfg = scenario.skills.get(skill)
    if scenario.skills and skill_cfg is None:
        raise ConfigError(
            path, f"no behaviour for skill {skill!r} (known: {', '.join(scenario.skills)})", field="skills"
        )
    data = scenario.model_dump(mode="json", exclude_none=True, exclude={"skills", "arms", "models"})
    if seed is not None:
        data["seed"] = seed
    data["skill"] = listed or skill  # the installed delivery's skill arm is the one whose listing names it
    invocation = data.get("invocation") or {}
    if listed and listed != skill and skill in invocation and listed not in invocation:
        invocation[listed] = invocation.pop(skill)
    if skill_cfg is not None and skill_cfg.marker:
        data["skill_marker"] = skill_cfg.marker
    for task_id, script in data["tasks"].items():
        script["prompt"] = known[task_id].prompt
        task = scenario.tasks[task_id]
        arms: dict[str, Any] = {}
        for arm in ("baseline", "skill"):
            chosen: ArmBehaviour | None = task.arms.get(arm)
            if chosen is None and arm == "skill":
                chosen = skill_cfg
            if chosen is None:
                chosen = scenario.arms.get(arm)
            if chosen is not None:
                arms[arm] = chosen.model_dump(mode="json", exclude_none=True, exclude={"marker"})
        script["arms"] = arms
    return json.dumps(data, sort_keys=True).encode()
