"""A trigger study's inputs: its ``preregistration.yaml`` (``skilltrial triggers PREREG``).

One skill, one or more *variants* (skill folders that describe the same skill differently, e.g. the current
description and a proposed one), and labelled queries: should-trigger, or should-not (a *near miss* is a
should-not query deliberately close to the skill's territory). The models are frozen and strict
(``extra="forbid"``); :func:`load_trigger_study` turns every problem into one
:class:`~harness.errors.ConfigError` naming the file and the field. The plan is :func:`harness.plan.plan_trigger_runs`,
the run :mod:`harness.experiment.triggers`, the analysis :mod:`harness.analysis.triggers`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.errors import ConfigError
from harness.study.config import TASK_ID, Resources, parse_yaml, read_text, validate
from harness.study.skillname import listed_name


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)  # docstrings: the schema


class Query(_Strict):
    id: str
    query: str
    should_trigger: bool
    near_miss: bool = False
    """A should-not query that is deliberately close to the skill's territory."""

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not TASK_ID.match(v):
            raise ValueError("must be 1-64 letters, digits, '.', '_' or '-'")
        return v


class TriggerBudgets(_Strict):
    per_run_usd: Annotated[float, Field(gt=0)] = 0.25
    timeout_s: Annotated[int, Field(gt=0, le=3600)] = 180


class TriggerExecution(_Strict):
    runs_per_query: Annotated[int, Field(ge=1, le=100)] = 3
    model: str = "sonnet"
    allowed_tools: tuple[str, ...] = ("Bash", "Edit", "Read")
    max_turns: Annotated[int, Field(ge=1, le=50)] = 4
    """Turn cap: a run that neither called the skill nor ended its turn by then is *not triggered*."""
    seed: int = 20261201
    budgets: TriggerBudgets = TriggerBudgets()
    resources: Resources = Resources()
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95


class TriggerPrereg(_Strict):
    skill: str
    """The skill's name (its SKILL.md ``name``); every variant must carry it."""
    variants: dict[str, str]
    """Variant name -> skill folder (relative to this file): descriptions of the same skill, compared side
    by side. The first is the reference the others are paired against."""
    queries: tuple[Query, ...]
    execution: TriggerExecution = TriggerExecution()


@dataclasses.dataclass(frozen=True)
class TriggerStudy:
    path: Path
    prereg: TriggerPrereg
    variant_dirs: dict[str, Path]


def load_trigger_study(path: Path) -> TriggerStudy:
    path = path.resolve()
    prereg = validate(path, TriggerPrereg, parse_yaml(path, read_text(path)), "a mapping (skill, variants, queries)")
    if not prereg.variants:
        raise ConfigError(path, "at least one variant (skill folder) is required", field="variants")
    if not prereg.queries:
        raise ConfigError(path, "at least one query is required", field="queries")
    seen: set[str] = set()
    for i, q in enumerate(prereg.queries):
        if q.id in seen:
            raise ConfigError(path, f"duplicate query id {q.id!r}", field=f"queries[{i}].id")
        seen.add(q.id)
    dirs: dict[str, Path] = {}
    for name, ref in prereg.variants.items():
        d = (path.parent / ref).resolve()
        md = d / "SKILL.md"
        if md.is_symlink() or not md.is_file():
            raise ConfigError(path, f"{md} is missing or not a regular file", field=f"variants.{name}")
        listed = listed_name(d, "")
        if listed != prereg.skill:
            raise ConfigError(
                path,
                f"{md} is named {listed or '(no name)'!r}, not {prereg.skill!r}: variants are descriptions of one skill",
                field=f"variants.{name}",
            )
        dirs[name] = d
    return TriggerStudy(path, prereg, dirs)
