"""Plan (pure): tasks x arms x runs become frozen TrialSpecs in a seeded order.

Arms and tasks are interleaved in a seeded random order so that time drift (API
load, model rollouts, prompt caching) does not line up with one arm: the plan
is built in rounds (one trial per task and arm per round), the arm order is
shuffled within each task, and the tasks are shuffled within each round.
Rounds also make early stopping and partial results balanced.

Every trial's prompt is decided here: the skill arm's :data:`SKILL_PREFIX`, and a library experiment's
masked arm's :func:`library_prefix`, which names the skills :mod:`harness.trial.delivery` mounts under
:data:`SKILLS_ROOT`.

A trigger study's runs are planned the same way (:func:`plan_trigger_runs`): rounds of query x variant,
shuffled by the seed, each run's CLI session id fixed by the seed, the query and the run index alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from harness.records import ARMS, Arm
from harness.study.config import Task
from harness.study.triggers import Query, TriggerPrereg

SKILL_PREFIX = (
    "Before you start, read the skill file at /skill/SKILL.md and follow its guidance for this task. "
    "Do not ask questions: when something is unclear, state your assumption and continue.\n\n"
)
"""The only difference between the arms. Its hash is part of every record's provenance."""

BASELINE_PREFIX = ""

SKILLS_ROOT = "/skills"
"""Where a library experiment's masked arm finds its skills: ``/skills/<name>/`` (read-only copies)."""
LIBRARY_PREFIX_HEAD = (
    "Before you start, read these skill files and follow their guidance where it applies to this task:\n"
)
LIBRARY_PREFIX_TAIL = "Do not ask questions: when something is unclear, state your assumption and continue.\n\n"


def ordered_skills(skills: Sequence[str]) -> tuple[str, ...]:
    """The stable delivery order: sorted by name (a mask's order never depends on the plan)."""
    return tuple(sorted(set(skills)))


def skill_path(name: str) -> str:
    return f"{SKILLS_ROOT}/{name}/SKILL.md"


def library_prefix(skills: Sequence[str]) -> str:
    """The masked arm's prompt prefix; names each skill of the mask. An empty mask: no skill line, so the
    masked arm's instructions differ from the bare arm's only by the skills."""
    names = ordered_skills(skills)
    if not names:
        return LIBRARY_PREFIX_TAIL
    lines = "".join(f"- {skill_path(n)}\n" for n in names)
    return LIBRARY_PREFIX_HEAD + lines + LIBRARY_PREFIX_TAIL


def library_template_sha256() -> str:
    """Identity of the library prompt template (provenance of both arms of a library experiment)."""
    return hashlib.sha256(
        f"\x00{LIBRARY_PREFIX_HEAD}\x00{skill_path('{name}')}\x00{LIBRARY_PREFIX_TAIL}".encode()
    ).hexdigest()


def prompt_for(arm: Arm, task_prompt: str, skills: Sequence[str] = ()) -> str:
    if arm == "masked":
        return library_prefix(skills) + task_prompt
    return (SKILL_PREFIX if arm == "skill" else BASELINE_PREFIX) + task_prompt


def prompt_template_sha256() -> str:
    return hashlib.sha256(f"{BASELINE_PREFIX}\x00{SKILL_PREFIX}".encode()).hexdigest()


@dataclass(frozen=True)
class TrialSpec:
    trial_id: str
    task: Task
    arm: Arm
    run_index: int
    round: int
    order: int
    skills: tuple[str, ...] = ()
    """Library experiments, masked arm: the skills of this (task, sample) pair's mask, in delivery order."""
    treatment: Arm | None = None
    """The arm whose treatment the agent gets (its prompt, what is mounted), when it is not its own: an A/A
    calibration's skill trials are given the baseline's (:func:`aa_plan`) and recorded as the skill arm's."""
    baseline_version: str | None = None
    """Version against version (``arms.baseline`` names a version): the version a baseline trial carries. Such a
    trial is given the skill arm's prompt and delivery with the baseline version's copy, so the two arms differ
    only by which version of the skill they have."""

    @property
    def treated_as(self) -> Arm:
        """The arm whose treatment the agent gets: :attr:`treatment`, else its own."""
        return self.treatment or self.arm

    @property
    def carries_skill(self) -> bool:
        """The agent is given a version of the skill: the skill arm's, or a versioned baseline's."""
        return self.treated_as == "skill" or (self.treated_as == "baseline" and self.baseline_version is not None)

    @property
    def prompt(self) -> str:
        if self.treated_as == "baseline" and self.baseline_version is not None:
            return prompt_for("skill", self.task.prompt)
        return prompt_for(self.treated_as, self.task.prompt, self.skills)


def trial_id(task_id: str, arm: Arm, run_index: int) -> str:
    return f"{task_id}.{arm}.{run_index}"


def plan_trials(tasks: Sequence[Task], runs_per_arm: int, seed: int) -> tuple[TrialSpec, ...]:
    rng = random.Random(seed)
    specs: list[TrialSpec] = []
    for rnd in range(runs_per_arm):
        order = list(tasks)
        rng.shuffle(order)
        for task in order:
            arms = list(ARMS)
            rng.shuffle(arms)
            for arm in arms:
                specs.append(TrialSpec(trial_id(task.id, arm, rnd), task, arm, rnd, rnd, len(specs)))
    return tuple(specs)


def aa_plan(specs: Sequence[TrialSpec]) -> tuple[TrialSpec, ...]:
    """An A/A calibration's plan: the same trials, every skill trial given the baseline's treatment (same
    prompt, no skill mounted), so the usual analysis compares the baseline with itself."""
    return tuple(dataclasses.replace(s, treatment="baseline") if s.arm == "skill" else s for s in specs)


class ShardRef(NamedTuple):
    """One part of a split run: ``skilltrial eval --shard number/total``."""

    number: int
    """1-based."""
    total: int

    def __str__(self) -> str:
        return f"{self.number}/{self.total}"


def parse_shard(text: str) -> ShardRef:
    """'2/4' -> ShardRef(2, 4); shards are 1-based."""
    try:
        i_s, n_s = text.split("/", 1)
        i, n = int(i_s), int(n_s)
    except ValueError:
        raise ValueError(f"shard must look like i/n (for example 1/4), got {text!r}") from None
    if not (1 <= i <= n):
        raise ValueError(f"shard {text!r}: need 1 <= i <= n")
    return ShardRef(i, n)


def shard_of(trial: TrialSpec, n: int) -> int:
    """Deterministic 1-based shard of a trial: stable across machines and plan orders.

    Keyed by (task, run index), not by trial, so both arms of a pair always run on
    the same machine: infrastructure differences between runners then cannot line
    up with one arm.
    """
    digest = hashlib.sha256(f"{trial.task.id}:{trial.run_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


def select_shard(specs: Sequence[TrialSpec], shard: ShardRef | None) -> tuple[TrialSpec, ...]:
    if shard is None:
        return tuple(specs)
    return tuple(s for s in specs if shard_of(s, shard.total) == shard.number)


# ---------------------------------------------------------------- trigger runs


@dataclass(frozen=True)
class TriggerRunSpec:
    """One run of a trigger study: a query, asked of one variant, for the ``run_index``-th time."""

    variant: str
    query: Query
    run_index: int

    @property
    def run_id(self) -> str:
        return f"{self.variant}.{self.query.id}.{self.run_index}"


def plan_trigger_runs(prereg: TriggerPrereg) -> tuple[TriggerRunSpec, ...]:
    """Rounds of (query x variant), shuffled by the seed so time drift lines up with neither."""
    rng = random.Random(prereg.execution.seed)
    specs: list[TriggerRunSpec] = []
    for r in range(prereg.execution.runs_per_query):
        round_ = [TriggerRunSpec(v, q, r) for q in prereg.queries for v in prereg.variants]
        rng.shuffle(round_)
        specs.extend(round_)
    return tuple(specs)


def paired_session_id(seed: int, query_id: str, run_index: int) -> str:
    """The same UUID for run ``run_index`` of a query in every variant (the pairing key)."""
    digest = hashlib.sha256(f"{seed}:{query_id}:{run_index}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))
