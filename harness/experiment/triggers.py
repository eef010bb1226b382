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

The analysis is :mod:`harness.analysis.triggers` (pure), its outputs :mod:`harness.reporting.triggers`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import secrets
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.analysis.triggers import TriggerAnalysis, analyze
from harness.errors import HarnessError, PrerequisiteError
from harness.host import workroots
from harness.host.paths import HostPaths
from harness.host.trees import remove_tree
from harness.host.workroots import OWNER_FILE
from harness.plan import TriggerRunSpec, paired_session_id, plan_trigger_runs
from harness.records import TRIGGER_RESULTS, TriggerOutcome, TriggerRecord
from harness.reporting.triggers import render
from harness.sandbox import lifecycle, subnets, volumes
from harness.sandbox import roles as sandbox
from harness.sandbox.deadline import host_deadline_s
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import RUN, TRIAL, make_labels
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import Runtime
from harness.sidecars.gatewaylog import GatewayEvent
from harness.study import scenario
from harness.study.lock import copy_skill, skill_files
from harness.study.triggers import TriggerPrereg, TriggerStudy
from harness.trial import gateway, installed

# ==================================================================== plan and run


def verdict(evts: Sequence[GatewayEvent], skill: str) -> tuple[TriggerOutcome, str | None, dict[str, Any]]:
    """A run's outcome from the gateway's log (pure)."""
    use, prov, _flags = installed.observe(evts, skill=skill, arm="skill", delivery="installed")
    extra = {"listed": use.listed, "tool_uses": use.tool_uses, "listing_sha256": prov.get("listing_sha256")}
    if use.invoked == "could_not_measure":
        return "could_not_measure", use.reason or "not measured", extra
    return ("triggered" if use.invoked == "yes" else "not_triggered"), None, extra


@dataclasses.dataclass
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


def run_triggers(study: TriggerStudy, engine: Runtime, options: TriggerOptions) -> TriggerAnalysis:
    """Run every planned trigger run (fresh containers each) and write triggers.jsonl, triggers.json and
    triggers.md into ``options.out``. Returns the analysis."""
    prereg, ex = study.prereg, study.prereg.execution
    options.out.mkdir(parents=True, exist_ok=True)
    images = options.images
    run_id = secrets.token_hex(4)
    root = workroots.prepare(options.paths)  # gc finds a killed trigger run's directories too
    work = root / f"triggers-{run_id}"
    work.mkdir(mode=0o700)
    # the owner file lets gc and the next start remove it after a SIGKILL (the volumes go by their labels)
    (work / OWNER_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")
    users = sandbox.role_users(engine, os.getuid(), os.getgid())
    sidecar_uid = users.sidecar
    profile = sandbox.make_profile(ex.resources, images.trial, images.sidecar, users, None)
    labels = make_labels(run_id, role="run", ttl_s=3600 + ex.budgets.timeout_s * len(plan_trigger_runs(prereg)))
    upstream_net = f"hx-{run_id}-up"
    scripted_name = f"hx-{run_id}-scripted"
    records: list[TriggerRecord] = []
    lock = threading.Lock()
    results = options.out / TRIGGER_RESULTS
    try:
        key = _key(options)
        # files reach containers in volumes filled through the archive API: a remote engine works too
        key_volume = volumes.make(
            engine, f"hx-{run_id}-key", sandbox.key_tar(key, sidecar_uid), image=images.sidecar, labels=labels
        )
        copies = {
            v: volumes.make(
                engine,
                f"hx-{run_id}-skill-{i}",
                volumes.tar_tree(copy_skill(skill_files(d), work / "skills" / v)),
                image=images.sidecar,
                labels=labels,
            )
            for i, (v, d) in enumerate(sorted(study.variant_dirs.items()))
        }
        engine.create_network(upstream_net, labels, internal=options.scripted is not None, hosts=subnets.RUN_HOSTS)
        upstream = options.upstream
        if options.scripted is not None:
            upstream = _start_scripted(engine, profile, options.scripted, prereg, scripted_name, upstream_net, labels)

        def one(spec: TriggerRunSpec) -> None:
            rec = _one_run(
                engine, profile, prereg, spec, copies[spec.variant], run_id, key_volume, upstream, upstream_net
            )
            with lock:
                records.append(rec)
                with open(results, "a", encoding="utf-8") as fh:
                    fh.write(rec.model_dump_json() + "\n")
            options.on_run(rec)

        with ThreadPoolExecutor(max_workers=max(1, options.jobs), thread_name_prefix="trigger") as pool:
            list(pool.map(one, plan_trigger_runs(prereg)))
    finally:
        if options.scripted is not None:
            try:
                data, _ = engine.logs(scripted_name, stdout=True, stderr=True, cap=16 << 20)
                (options.out / "scripted-api.log").write_bytes(data)
            except HarnessError:
                pass
        lifecycle.remove_labelled(engine, {RUN: run_id})
        remove_tree(work)
    analysis = analyze(prereg, records)
    for name, text in render(analysis).items():
        (options.out / name).write_text(text)
    return analysis


def _key(options: TriggerOptions) -> str:
    if options.scripted is not None:
        return "sk-ant-test-" + secrets.token_urlsafe(24)
    if not options.api_key:
        raise PrerequisiteError("ANTHROPIC_API_KEY is not set", hint="or run against the scripted model: --scripted")
    return options.api_key


def _start_scripted(
    engine: Runtime,
    profile: sandbox.Profile,
    path: Path,
    prereg: TriggerPrereg,
    name: str,
    network: str,
    labels: dict[str, str],
) -> str:
    sc = scenario.load_scenario(path)
    compiled = scenario.compile_scenario(path, sc, (), skill=prereg.skill, seed=prereg.execution.seed)
    scen = volumes.make(
        engine, f"hx-{labels[RUN]}-scenario", sandbox.scenario_tar(compiled), image=profile.sidecar_image, labels=labels
    )
    spec = sandbox.scripted_api_spec(profile, name=name, labels=labels, network=network, scenario_volume=scen)
    engine.create(spec)
    engine.start(name)
    gateway.wait_listening(engine, name)
    return f"http://{name}:{sandbox.SCRIPTED_PORT}"


def _one_run(
    engine: Runtime,
    profile: sandbox.Profile,
    prereg: TriggerPrereg,
    spec: TriggerRunSpec,
    skill_volume: str,
    run_id: str,
    key_volume: str,
    upstream: str,
    upstream_net: str,
) -> TriggerRecord:
    """One query, one fresh gateway and agent; the verdict from the gateway's log."""
    ex = prereg.execution
    key = hashlib.sha256(spec.run_id.encode()).hexdigest()[:10]
    names = {role: TrialNames(run_id, key).container(role) for role in ("gateway", "agent")}
    network = f"hx-{run_id}-{key}-net"
    labels = make_labels(run_id, role="trial", trial_id=spec.run_id, ttl_s=ex.budgets.timeout_s + 900)
    t0 = dt.datetime.now(dt.UTC)
    base: dict[str, Any] = {
        "run_id": spec.run_id,
        "variant": spec.variant,
        "query_id": spec.query.id,
        "should_trigger": spec.query.should_trigger,
        "run_index": spec.run_index,
    }
    try:
        engine.create_network(network, labels, internal=True)
        gw = sandbox.gateway_spec(
            profile,
            name=names["gateway"],
            labels=labels,
            upstream_network=upstream_net,
            upstream=upstream,
            key_volume=key_volume,
            budget_usd=ex.budgets.per_run_usd,
        )
        gw = dataclasses.replace(gw, env={**gw.env, "GATEWAY_STOP_ON_SKILL": prereg.skill})
        engine.create(gw, extra_networks=[network])
        engine.start(gw.name)
        gateway.wait_listening(engine, gw.name)
        gateway_ip = engine.container_ip(gw.name, network)
        command = installed.agent_command(
            spec.query.query,
            model=ex.model,
            allowed_tools=ex.allowed_tools,
            max_budget_usd=ex.budgets.per_run_usd,
            timeout_s=ex.budgets.timeout_s,
            max_turns=ex.max_turns,
            session_id=paired_session_id(ex.seed, spec.query.id, spec.run_index),
        )
        agent = sandbox.trigger_agent_spec(
            profile,
            name=names["agent"],
            labels=labels,
            network=network,
            gateway_ip=gateway_ip,
            skill_volume=skill_volume,
            skill_target=installed.skill_target(prereg.skill),
            command=command,
        )
        lifecycle.run(engine, agent, deadline_s=host_deadline_s(ex.budgets.timeout_s), output_cap=1 << 20)
        evts = gateway.events(engine, gw.name)
        meter = gateway.meter(evts)
        outcome, reason, extra = verdict(evts, prereg.skill)
        if outcome != "triggered" and meter.forwarded == 0:
            outcome, reason = "could_not_measure", "no API call got through the gateway"
        return TriggerRecord(
            **base,
            outcome=outcome,
            reason=reason,
            input_tokens=meter.input_tokens,
            cost_usd=meter.cost_usd,
            requests=meter.forwarded,
            stopped_at_skill=any("verdict is known" in r for r in meter.refused),
            seconds=(dt.datetime.now(dt.UTC) - t0).total_seconds(),
            **extra,
        )
    except HarnessError as e:
        return TriggerRecord(
            **base,
            outcome="could_not_measure",
            reason=f"infrastructure: {str(e)[:300]}",
            seconds=(dt.datetime.now(dt.UTC) - t0).total_seconds(),
        )
    finally:
        lifecycle.remove_labelled(engine, {RUN: run_id, TRIAL: spec.run_id})
