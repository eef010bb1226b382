"""Trigger accuracy: does the model pick the skill up from its description, and only when it should?

``skilltrial triggers PREREG`` runs each labelled query (should-trigger, or a near miss
that should not) N times in the installed delivery (see :mod:`harness.trial.installed`),
one fresh gateway and agent container per run, for each *variant* (another
description of the same skill, e.g. the current one and a proposed one). A run
stops as soon as its verdict is known: the gateway refuses every request after
the model's first ``Skill`` call on the skill (``GATEWAY_STOP_ON_SKILL``), or the
turn ends, or ``max_turns`` is reached.

Verdicts come from the gateway's log only: *triggered* (a ``Skill`` tool_use naming
the skill anywhere in the turn), *not triggered*, or *could not measure* with its
reason (the skill was not listed, no request got through, an infrastructure
failure). Could-not-measure runs are never counted as misses: a variant with no
measured should-trigger run has no recall, not a 0% recall.

The run stands on the machinery every run shares: its key, the variants' skill copies and the upstream
(the scripted model, or the route with its preflight) are :class:`~harness.experiment.resources.RunResources`
(undone when the set-up fails halfway, the scripted model's log kept redacted), and each run's network,
gateway and their removal a :class:`~harness.trial.site.GatewaySite`. The inputs are
:mod:`harness.study.triggers`, the plan :func:`harness.plan.plan_trigger_runs`, the analysis
:mod:`harness.analysis.triggers` (pure), its outputs :mod:`harness.reporting.triggers`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from harness.analysis.triggers import TriggerAnalysis, analyze
from harness.errors import HarnessError, PrerequisiteError
from harness.experiment.resources import RunResources, RunSetup
from harness.experiment.upstream import Upstream
from harness.host import workroots
from harness.host.paths import HostPaths
from harness.plan import TriggerRunSpec, paired_session_id, plan_trigger_runs
from harness.records import TriggerOutcome, TriggerRecord
from harness.redact import Redactor
from harness.reporting.outputs import publish
from harness.reporting.triggers import TRIGGER_OUTPUTS, render
from harness.results.store import TriggerDir
from harness.sandbox import lifecycle, roles
from harness.sandbox.deadline import host_deadline_s
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import make_labels
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import Runtime
from harness.sidecars.gatewaylog import GatewayEvent
from harness.study import scenario
from harness.study.lock import copy_skill, skill_files
from harness.study.triggers import TriggerPrereg, TriggerStudy
from harness.trial import gateway, installed
from harness.trial.site import GatewaySite, RunCore

AGENT_OUTPUT_CAP = 1 << 20


@dataclasses.dataclass(frozen=True)
class TriggerOptions:
    out: Path
    paths: HostPaths
    """Where the runs' directories go and are recorded for gc (:mod:`harness.host.paths`)."""
    images: ImageSet
    """The images the runs' containers start from (:meth:`harness.sandbox.images.ImageBuilder.ensure`)."""
    jobs: int = 2
    scripted: Path | None = None
    api_key: str | None = None
    upstream: str = "https://api.anthropic.com"
    on_run: Callable[[TriggerRecord], None] = lambda _r: None
    say: Callable[[str], None] = lambda _line: None
    """A line for the person watching (what could not be cleaned up)."""


def run_triggers(study: TriggerStudy, engine: Runtime, options: TriggerOptions) -> TriggerAnalysis:
    """Run every planned trigger run (fresh containers each) and write triggers.jsonl, triggers.json and
    triggers.md into ``options.out``. Returns the analysis."""
    setup = trigger_setup(study, engine, options)  # a missing key or a bad scenario stops here: nothing made yet
    out = TriggerDir(options.out, Redactor([setup.key]))
    records: list[TriggerRecord] = []
    lock = threading.Lock()
    with RunResources(engine, setup, out, options.say) as run:

        def one(spec: TriggerRunSpec) -> None:
            record = run_one(run, study.prereg, spec, options.say)
            out.results.append(record)
            with lock:
                records.append(record)
            options.on_run(record)

        with ThreadPoolExecutor(max_workers=max(1, options.jobs), thread_name_prefix="trigger") as pool:
            list(pool.map(one, plan_trigger_runs(study.prereg)))
    analysis = analyze(study.prereg, records)
    publish(out.root, TRIGGER_OUTPUTS, lambda: render(analysis), lambda _error: {}, out.redactor.text)
    return analysis


def trigger_setup(study: TriggerStudy, engine: Runtime, options: TriggerOptions) -> RunSetup:
    """What the run's resources are made from: decided before any of them exists."""
    prereg, ex = study.prereg, study.prereg.execution
    run_id = secrets.token_hex(4)
    users = roles.role_users(engine, os.getuid(), os.getgid())
    compiled = None
    if options.scripted is not None:
        sc = scenario.load_scenario(options.scripted)
        compiled = scenario.compile_scenario(options.scripted, sc, (), skill=prereg.skill, seed=ex.seed)

    def variant_copies(root: Path) -> dict[str, Path]:
        return {v: copy_skill(skill_files(d), root / "skills" / v) for v, d in study.variant_dirs.items()}

    return RunSetup(
        run_id=run_id,
        work_root=workroots.prepare(options.paths),  # gc finds a killed trigger run's directories too
        labels=make_labels(run_id, role="run", ttl_s=3600 + ex.budgets.timeout_s * len(plan_trigger_runs(prereg))),
        profile=roles.make_profile(ex.resources, options.images.trial, options.images.sidecar, users, None),
        key=_key(options),
        key_owner=users.sidecar,
        route=Upstream(url=options.upstream),
        scenario=compiled,
        skill_copies=variant_copies,
        gateway_env={"GATEWAY_STOP_ON_SKILL": prereg.skill},
    )


def _key(options: TriggerOptions) -> str:
    if options.scripted is not None:
        return "sk-ant-test-" + secrets.token_urlsafe(24)
    if not options.api_key:
        raise PrerequisiteError("ANTHROPIC_API_KEY is not set", hint="or run against the scripted model: --scripted")
    return options.api_key


def run_one(run: RunCore, prereg: TriggerPrereg, spec: TriggerRunSpec, say: Callable[[str], None]) -> TriggerRecord:
    """One query, one fresh gateway and agent; the verdict from the gateway's log."""
    ex = prereg.execution
    names = TrialNames(run.run_id, hashlib.sha256(spec.run_id.encode()).hexdigest()[:10])
    labels = make_labels(run.run_id, role="trial", trial_id=spec.run_id, ttl_s=ex.budgets.timeout_s + 900)
    record = TriggerRecord(
        run_id=spec.run_id,
        variant=spec.variant,
        query_id=spec.query.id,
        should_trigger=spec.query.should_trigger,
        run_index=spec.run_index,
        outcome="could_not_measure",
    )
    t0 = time.monotonic()
    site = GatewaySite(run, names, labels, gateway_budget_usd=ex.budgets.per_run_usd, trial_id=spec.run_id)
    try:
        with site:  # its network and containers are removed on every path
            site.start_gateway()
            command = installed.agent_command(
                spec.query.query,
                model=ex.model,
                allowed_tools=ex.allowed_tools,
                max_budget_usd=ex.budgets.per_run_usd,
                timeout_s=ex.budgets.timeout_s,
                max_turns=ex.max_turns,
                session_id=paired_session_id(ex.seed, spec.query.id, spec.run_index),
            )
            agent = roles.trigger_agent_spec(
                run.profile,
                name=names.container("agent"),
                labels=labels,
                network=site.network,
                gateway_ip=site.open_gateway(),
                skill_volume=run.skill_copies[spec.variant].volume,
                skill_target=installed.skill_target(prereg.skill),
                command=command,
            )
            lifecycle.run(
                run.engine, agent, deadline_s=host_deadline_s(ex.budgets.timeout_s), output_cap=AGENT_OUTPUT_CAP
            )
            record = measured(record, site.gateway_events(), prereg.skill)
    except HarnessError as e:
        record = record.model_copy(update={"reason": f"infrastructure: {str(e)[:300]}"})
    for leftover in site.leftovers:
        say(f"cleanup: {leftover}")
    return record.model_copy(update={"seconds": round(time.monotonic() - t0, 6)})


class Verdict(NamedTuple):
    outcome: TriggerOutcome
    reason: str | None
    listed: bool | None
    tool_uses: tuple[str, ...]
    listing_sha256: str | None


def verdict(evts: Sequence[GatewayEvent], skill: str) -> Verdict:
    """A run's outcome from the gateway's log (pure)."""
    use, prov, _flags = installed.observe(evts, skill=skill, arm="skill", delivery="installed")
    if use.invoked == "could_not_measure":
        outcome: TriggerOutcome = "could_not_measure"
    else:
        outcome = "triggered" if use.invoked == "yes" else "not_triggered"
    reason = (use.reason or "not measured") if outcome == "could_not_measure" else None
    return Verdict(outcome, reason, use.listed, use.tool_uses, prov.get("listing_sha256"))


def measured(record: TriggerRecord, evts: Sequence[GatewayEvent], skill: str) -> TriggerRecord:
    """``record`` with what the gateway's log says: the verdict, the meter, whether the run ended at it."""
    meter = gateway.meter(evts)
    v = verdict(evts, skill)
    if v.outcome != "triggered" and meter.forwarded == 0:
        v = v._replace(outcome="could_not_measure", reason="no API call got through the gateway")
    return record.model_copy(
        update={
            **v._asdict(),
            "input_tokens": meter.input_tokens,
            "cost_usd": meter.cost_usd,
            "requests": meter.forwarded,
            "stopped_at_skill": any("verdict is known" in r for r in meter.refused),
        }
    )
