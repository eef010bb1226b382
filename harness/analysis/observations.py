"""The analysis's input: one observation per trial, and what the decision needs to know about the run.

:func:`observations_from_records` reduces ``results.jsonl`` records to one :class:`Observation` per
trial (its last attempt, with the infrastructure retries it superseded). :func:`context_from_records`
collects how the run went (budget or early stop, the plan) and the provenance of each arm's trials,
which :mod:`harness.analysis.decide` compares. Pure: records in, values out.

Outcomes: ``pass``/``fail`` are valid trials (the denominators). ``unknown``
(the judge gave no verdict) and ``truncated`` (deadline or per-trial budget)
are *missing*: excluded from denominators, counted, and filled both ways for
the sensitivity bounds. ``infra`` is not a model outcome: excluded from rates
and from cost, counted, its spend reported as waste. ``skipped`` (TODO tasks)
is counted and otherwise ignored.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import get_args

from harness.records import ARMS, Arm, Outcome, PassRule, TrialRecord, outcome
from harness.results.attempts import final_attempts

OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))


@dataclass(frozen=True)
class Observation:
    """The final outcome of one planned trial, as the analysis sees it.

    ``infra_retries`` / ``infra_retry_cost_usd`` describe earlier attempts of
    the same trial that failed for infrastructure reasons and were superseded
    by this one: they never count for or against an arm, but their number and
    spend are reported.
    """

    task_id: str
    arm: Arm
    outcome: Outcome
    cost_usd: float = 0.0
    turns: int | None = None
    duration_s: float | None = None
    infra_retries: int = 0
    infra_retry_cost_usd: float = 0.0
    reached_model: bool = False
    """For ``infra`` outcomes: the gateway forwarded at least one request upstream (GatewayMeter.forwarded > 0).
    Such a trial reached the model, so it counts like an unknown (missing) in the fills and the missing share:
    otherwise a skill could turn its failures into excluded infrastructure errors."""
    run_index: int | None = None
    """Which run of the task in its arm (0-based; the plan's round): a group-sequential look analyses the
    trials of the rounds up to it (:mod:`harness.analysis.sequential`). None when not known."""

    def __post_init__(self) -> None:
        if self.arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {self.arm!r}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {sorted(OUTCOMES)}, got {self.outcome!r}")
        # A NaN or negative cost would silently poison every mean and ratio downstream.
        for name in ("cost_usd", "infra_retry_cost_usd"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.infra_retries < 0:
            raise ValueError("infra_retries must be >= 0")


def _duration(rec: TrialRecord) -> float | None:
    # The agent's own wall-clock (CLI duration_ms) is the comparable figure across arms;
    # the controller's phase timing is the fallback when the CLI printed no result.
    if rec.agent is not None and rec.agent.duration_ms is not None:
        return rec.agent.duration_ms / 1000.0
    agent_phase = rec.durations_s.get("agent")
    return float(agent_phase) if agent_phase is not None else None


def observations_from_records(records: Iterable[TrialRecord], pass_rule: PassRule) -> tuple[Observation, ...]:
    """One :class:`Observation` per trial id from result lines (every attempt of every trial).

    The last attempt decides the trial's outcome via :func:`harness.records.outcome`
    under ``pass_rule``; earlier ``infra_error`` attempts are superseded and
    counted in ``infra_retries`` (with their spend in ``infra_retry_cost_usd``).
    Cost is the agent's (``TrialRecord.agent_cost_usd``: the larger of the CLI's figure and the
    gateway's meter); the judge's cost is the harness's overhead, identical in kind for both arms.
    """
    finals, earlier = final_attempts(records)
    out: list[Observation] = []
    for rec in finals:
        superseded = [r for r in earlier.get(rec.trial_id, []) if r.status == "infra_error"]
        out.append(
            Observation(
                task_id=rec.task_id,
                arm=rec.arm,
                outcome=outcome(rec, pass_rule),
                cost_usd=max(0.0, rec.agent_cost_usd),
                turns=rec.agent.num_turns if rec.agent is not None else None,
                duration_s=_duration(rec),
                infra_retries=len(superseded),
                infra_retry_cost_usd=math.fsum(max(0.0, r.agent_cost_usd) for r in superseded),
                reached_model=rec.gateway is not None and rec.gateway.forwarded > 0,
                run_index=rec.run_index,
            )
        )
    return tuple(out)


ProvenanceFields = Mapping[str, str | None]
"""One trial's provenance, field by field (``model``, ``cli_version``, ``image_digest``, ...)."""
ProvenanceKey = tuple[tuple[str, str | None], ...]
"""A provenance as a sorted, hashable tuple of (field, value) pairs (how it is compared)."""


def provenance_key(fields: ProvenanceFields) -> ProvenanceKey:
    """The hashable, sorted form of one provenance (values as strings; None stays None)."""
    return tuple(sorted((str(k), None if v is None else str(v)) for k, v in fields.items()))


def provenance_order(key: ProvenanceKey) -> tuple[tuple[str, bool, str], ...]:
    """A sort key for provenance keys: None ("not known for that trial", e.g. the model of a trial that got
    no model answer) sorts before every value instead of being compared with one (a TypeError)."""
    return tuple((name, value is not None, value or "") for name, value in key)


def provenance_by_arm(
    baseline: ProvenanceFields, skill: ProvenanceFields | None = None
) -> dict[str, tuple[ProvenanceFields, ...]]:
    """``DecisionContext.provenance_by_arm`` with one provenance per arm (``skill`` defaults to the
    baseline's): what tests, scripts and simulations pass when every trial of an arm ran alike."""
    return {"baseline": (baseline,), "skill": (baseline if skill is None else skill,)}


@dataclass(frozen=True)
class DecisionContext:
    """What the decision needs besides the outcomes: how the run went, and what it ran on.

    ``provenance_by_arm`` maps each arm to the distinct provenances of its
    trials, field by field (normalised to :data:`ProvenanceKey` on construction;
    :func:`provenance_by_arm` builds the common one-per-arm case). A None value
    means "not known for that trial" and is not compared.
    ``planned_task_ids``: tasks the plan ran (None: the tasks seen in the data).
    ``max_cost_per_trial``: a hard per-trial cost bound (the gateway's cap), used
    only by :func:`harness.analysis.curtail.curtailment` to decide whether the cost condition is settled.
    ``futility_levels``: with a group-sequential design, the (lowest, final) confidence levels of the looks
    still ahead, at which the futility stop is re-derived (:class:`harness.analysis.curtail.Levels`);
    None: the preregistered confidence.
    """

    budget_stopped: bool
    provenance_by_arm: Mapping[str, Collection[ProvenanceFields]]
    planned_runs_per_arm: int
    early_stopped: bool = False
    planned_task_ids: frozenset[str] | None = None
    max_cost_per_trial: float | None = None
    futility_levels: tuple[float, float] | None = None
    normalized_provenance: Mapping[str, frozenset[ProvenanceKey]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.planned_runs_per_arm < 1:
            raise ValueError("planned_runs_per_arm must be >= 1")
        norm = {arm: frozenset(provenance_key(p) for p in provs) for arm, provs in self.provenance_by_arm.items()}
        object.__setattr__(self, "normalized_provenance", norm)
        if self.planned_task_ids is not None:
            object.__setattr__(self, "planned_task_ids", frozenset(self.planned_task_ids))


def context_from_records(
    records: Iterable[TrialRecord],
    planned_runs_per_arm: int,
    budget_stopped: bool,
    *,
    early_stopped: bool = False,
    planned_task_ids: Iterable[str] | None = None,
    max_cost_per_trial: float | None = None,
) -> DecisionContext:
    """Build a :class:`DecisionContext` from result lines.

    Provenance is collected from the final attempt of each trial whose outcome
    is neither infra nor skipped: an attempt that failed on infrastructure
    produced no outcome, so a stray value on it cannot make outcomes
    incomparable. The model the API actually resolved (``agent.resolved_model``)
    is included beside the requested alias, so an alias that moved mid-run is
    caught.
    """
    finals = final_attempts(records).finals
    by_arm: dict[str, set[ProvenanceKey]] = {arm: set() for arm in ARMS}
    for rec in finals:
        if not rec.is_outcome:
            continue
        prov: dict[str, str | None] = dict(rec.provenance.model_dump())
        prov["resolved_model"] = rec.agent.resolved_model if rec.agent is not None else None
        by_arm[rec.arm].add(provenance_key(prov))
    return DecisionContext(
        budget_stopped=budget_stopped,
        provenance_by_arm={
            arm: tuple(dict(key) for key in sorted(keys, key=provenance_order)) for arm, keys in by_arm.items()
        },
        planned_runs_per_arm=planned_runs_per_arm,
        early_stopped=early_stopped,
        planned_task_ids=None if planned_task_ids is None else frozenset(planned_task_ids),
        max_cost_per_trial=max_cost_per_trial,
    )
