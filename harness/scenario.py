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

from pydantic import BaseModel, ConfigDict, Field

from harness.config import Task, parse_yaml, read_text, validate
from harness.errors import ConfigError


class M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Usage(M):
    input_tokens: Annotated[int, Field(ge=0, le=900_000)] = 1000
    output_tokens: Annotated[int, Field(ge=0, le=128_000)] = 100
    cache_creation_input_tokens: Annotated[int, Field(ge=0)] = 0
    cache_read_input_tokens: Annotated[int, Field(ge=0)] = 0


class Step(M):
    tool: Literal["Bash", "Edit", "Read", "Write"]
    input: dict[str, Any]
    say: str | None = None
    probe: str | None = None
    """Log this step's tool result as a ``probe`` event (security tests read it from scripted-api.log);
    later steps may use ``{{probe:NAME}}`` in their input."""


class InjectedError(M):
    at_turn: Annotated[int, Field(ge=0)] = 0
    status: int | Literal["broken_stream"] = 529
    times: Annotated[int, Field(ge=1)] = 1
    """How many conversations of this task and arm get the error (then it stops)."""


class ArmBehaviour(M):
    p_success: Annotated[float, Field(ge=0, le=1)] = 0.5
    usage: Usage | None = None
    latency_ms: Annotated[int, Field(ge=0, le=600_000)] | None = None
    read_skill: bool = True
    """Skill arm: first read /skill/SKILL.md and check the tool_result contains skill_marker."""
    prelude: tuple[Step, ...] = ()
    errors: tuple[InjectedError, ...] = ()


class JudgeBehaviour(M):
    mode: Literal["follow_verify", "pass", "fail", "no_structured_output"] = "follow_verify"
    p_unknown: Annotated[float, Field(ge=0, le=1)] = 0.0
    usage: Usage | None = None
    latency_ms: Annotated[int, Field(ge=0)] | None = None


class TaskScript(M):
    success: tuple[Step, ...] = ()
    failure: tuple[Step, ...] = ()
    final_text: str = "Done."
    arms: dict[Literal["baseline", "skill"], ArmBehaviour] = {}
    judge: JudgeBehaviour | None = None
    skill_marker: str | None = None


class SkillBehaviour(ArmBehaviour):
    marker: str = ""
    """Text in the skill's SKILL.md; the scripted model checks the file it read contains it."""


class Defaults(M):
    usage: Usage = Usage()
    latency_ms: Annotated[int, Field(ge=0, le=600_000)] = 0


class Scenario(M):
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


def load_scenario(path: Path) -> Scenario:
    return validate(path, Scenario, parse_yaml(path, read_text(path)), "a mapping with a 'tasks' field")


def scenario_warnings(scenario: Scenario, *, skill: str) -> list[str]:
    """What would silently spoil a scripted run (pure): a skill arm that reads SKILL.md with no
    marker to find in it is counted as 'skill not read', and every such trial fails."""
    out = []
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
    path: Path, scenario: Scenario, tasks: tuple[Task, ...], *, skill: str, seed: int | None = None
) -> bytes:
    """The server's JSON for one experiment: each task's prompt (how the server recognises a
    task) and fully resolved behaviour per arm, the skill arm's taken from ``skills[skill]``."""
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
    data = scenario.model_dump(mode="json", exclude_none=True, exclude={"skills", "arms"})
    if seed is not None:
        data["seed"] = seed
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
