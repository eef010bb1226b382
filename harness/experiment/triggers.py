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

Analysis (pure, :func:`analyze`): per query, its trigger rate (Wilson interval);
per variant, recall over should-trigger runs and false-trigger rate over
should-not runs, each a ratio estimate with a query-clustered interval (runs of
one query are not independent); and each variant against the first, paired by
query (the same queries; in the scripted model, the same draws) with a t-interval
over per-query differences, a sign-flip test, and McNemar on the run pairs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import secrets
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness import fmt
from harness.analysis import stats
from harness.errors import HarnessError, PrerequisiteError
from harness.host import workroots
from harness.host.paths import HostPaths
from harness.host.trees import remove_tree
from harness.host.workroots import OWNER_FILE
from harness.plan import TriggerRunSpec, paired_session_id, plan_trigger_runs
from harness.records import TRIGGER_RESULTS, TriggerOutcome, TriggerRecord
from harness.sandbox import lifecycle, subnets, volumes
from harness.sandbox import roles as sandbox
from harness.sandbox.deadline import host_deadline_s
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageBuilder, ImageOptions
from harness.sandbox.labels import RUN, TRIAL, make_labels
from harness.sandbox.names import TrialNames
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
    jobs: int = 2
    scripted: Path | None = None
    api_key: str | None = None
    upstream: str = "https://api.anthropic.com"
    images: ImageOptions = dataclasses.field(default_factory=ImageOptions)
    on_run: Callable[[TriggerRecord], None] = lambda _r: None


def run_triggers(study: TriggerStudy, engine: Engine, options: TriggerOptions) -> dict[str, Any]:
    """Run every planned trigger run (fresh containers each) and write triggers.jsonl, triggers.json and
    triggers.md into ``options.out``. Returns the analysis."""
    prereg, ex = study.prereg, study.prereg.execution
    options.out.mkdir(parents=True, exist_ok=True)
    images = ImageBuilder(engine, options.images).ensure()
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
    (options.out / "triggers.json").write_text(json.dumps(analysis, indent=2, sort_keys=True) + "\n")
    (options.out / "triggers.md").write_text(markdown(analysis))
    return analysis


def _key(options: TriggerOptions) -> str:
    if options.scripted is not None:
        return "sk-ant-test-" + secrets.token_urlsafe(24)
    if not options.api_key:
        raise PrerequisiteError("ANTHROPIC_API_KEY is not set", hint="or run against the scripted model: --scripted")
    return options.api_key


def _start_scripted(
    engine: Engine,
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
    engine: Engine,
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


# ======================================================================== analysis


def clustered_rate(clusters: Sequence[tuple[int, int]], confidence: float) -> dict[str, Any]:
    """Ratio estimate sum(k)/sum(n) over clusters (queries) of (k triggered, n measured), with a
    cluster-robust t-interval (df = clusters - 1). When every cluster has the same rate the robust
    variance is zero; then the Wilson interval with one observation per cluster is used instead
    (conservative: as if each query were a single run)."""
    used = [(k, n) for k, n in clusters if n > 0]
    total_k, total_n = sum(k for k, _ in used), sum(n for _, n in used)
    if total_n == 0:
        return {"rate": None, "low": None, "high": None, "k": 0, "n": 0, "queries": 0}
    p = total_k / total_n
    q = len(used)
    low, high = 0.0, 1.0
    if q >= 2:
        var = q / (q - 1) * sum((k - p * n) ** 2 for k, n in used) / total_n**2
        if var > 0:
            half = stats.t_quantile(1 - (1 - confidence) / 2, q - 1) * math.sqrt(var)
            low, high = max(0.0, p - half), min(1.0, p + half)
        else:
            w = stats.wilson_interval(round(p * q), q, confidence)
            low, high = w.low, w.high
    return {"rate": p, "low": low, "high": high, "k": total_k, "n": total_n, "queries": q}


def analyze(prereg: TriggerPrereg, records: Sequence[TriggerRecord]) -> dict[str, Any]:
    conf = prereg.execution.confidence
    variants = list(prereg.variants)
    by: dict[tuple[str, str], list[TriggerRecord]] = {}
    for r in records:
        by.setdefault((r.variant, r.query_id), []).append(r)
    out: dict[str, Any] = {
        "skill": prereg.skill,
        "runs_per_query": prereg.execution.runs_per_query,
        "confidence": conf,
        "variants": {},
        "comparisons": [],
    }
    rates: dict[str, dict[str, float | None]] = {}
    for v in variants:
        per_query: list[dict[str, Any]] = []
        rates[v] = {}
        for q in prereg.queries:
            runs = by.get((v, q.id), [])
            k = sum(r.outcome == "triggered" for r in runs)
            n = sum(r.outcome != "could_not_measure" for r in runs)
            cnm = [r.reason or "" for r in runs if r.outcome == "could_not_measure"]
            w = stats.wilson_interval(k, n, conf)
            rates[v][q.id] = k / n if n else None
            per_query.append(
                {
                    "query": q.id,
                    "should_trigger": q.should_trigger,
                    "near_miss": q.near_miss,
                    "triggered": k,
                    "measured": n,
                    "could_not_measure": len(cnm),
                    "reasons": sorted(set(cnm)),
                    "rate": k / n if n else None,
                    "low": w.low if n else None,
                    "high": w.high if n else None,
                }
            )
        pos = [(row["triggered"], row["measured"]) for row in per_query if row["should_trigger"]]
        neg = [(row["triggered"], row["measured"]) for row in per_query if not row["should_trigger"]]
        recall, fpr = clustered_rate(pos, conf), clustered_rate(neg, conf)
        for est, rows in ((recall, pos), (fpr, neg)):
            if est["rate"] is None:
                reasons = sorted({x for row in per_query for x in row["reasons"]})
                est["could_not_measure"] = (
                    "no query of this kind" if not rows else "no run measured: " + ("; ".join(reasons) or "none ran")
                )
        vruns = [r for r in records if r.variant == v]
        out["variants"][v] = {
            "recall": recall,
            "false_trigger_rate": fpr,
            "queries": per_query,
            "runs": len(vruns),
            "could_not_measure": sum(r.outcome == "could_not_measure" for r in vruns),
            "cost_usd": round(sum(r.cost_usd for r in vruns), 6),
            "mean_input_tokens": (sum(r.input_tokens for r in vruns) / len(vruns)) if vruns else None,
            "listings": sorted({r.listing_sha256 for r in vruns if r.listing_sha256}),
        }
    ref = variants[0]
    for other in variants[1:]:
        comp: dict[str, Any] = {"reference": ref, "variant": other}
        for kind, want in (("recall", True), ("false_trigger_rate", False)):
            diffs: list[float] = []
            for q in prereg.queries:
                a, b = rates[ref].get(q.id), rates[other].get(q.id)
                if q.should_trigger == want and a is not None and b is not None:
                    diffs.append(b - a)
            ti = stats.t_interval(diffs, conf)
            sf = stats.sign_flip_test(diffs) if diffs else None
            only_other = only_ref = 0
            for q in prereg.queries:
                if q.should_trigger != want:
                    continue
                ra = {r.run_index: r for r in by.get((ref, q.id), []) if r.outcome != "could_not_measure"}
                rb = {r.run_index: r for r in by.get((other, q.id), []) if r.outcome != "could_not_measure"}
                for i in ra.keys() & rb.keys():
                    ta, tb = ra[i].outcome == "triggered", rb[i].outcome == "triggered"
                    only_other += tb and not ta
                    only_ref += ta and not tb
            comp[kind] = {
                "difference": ti.mean,
                "low": None if ti.mean is None or math.isinf(ti.interval.low) else ti.interval.low,
                "high": None if ti.mean is None or math.isinf(ti.interval.high) else ti.interval.high,
                "queries": ti.n,
                "sign_flip_p": sf.p_value if sf else None,
                "run_pairs_only_variant": only_other,
                "run_pairs_only_reference": only_ref,
                "mcnemar_p": stats.mcnemar_exact(only_other, only_ref) if only_other + only_ref else None,
            }
        out["comparisons"].append(comp)
    return out


def _bound(x: float | None) -> str:
    """A bound of a difference of rates, in whole points (a difference of rates lies in [-100, +100])."""
    return fmt.pp(None if x is None else max(-1.0, min(1.0, x)), 0)


def _est(e: dict[str, Any]) -> str:
    if e["rate"] is None:
        return f"could not measure ({e.get('could_not_measure', '')})"
    return (
        f"{fmt.pct(e['rate'])} ({e['k']}/{e['n']}, {e['queries']} queries) [{fmt.pct(e['low'])}, {fmt.pct(e['high'])}]"
    )


def summary_lines(a: dict[str, Any]) -> list[str]:
    conf = round(100 * a["confidence"])
    lines = [
        f"trigger accuracy of skill {a['skill']}: {a['runs_per_query']} run(s) per query, "
        f"{conf}% intervals clustered by query"
    ]
    for v, d in a["variants"].items():
        lines.append(f"  {v}: recall {_est(d['recall'])}   false triggers {_est(d['false_trigger_rate'])}")
        if d["could_not_measure"]:
            lines.append(f"  {v}: {d['could_not_measure']} of {d['runs']} run(s) could not be measured")
    return lines + ["  " + x for x in comparison_lines(a)]


def comparison_lines(a: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for c in a["comparisons"]:
        for kind in ("recall", "false_trigger_rate"):
            x = c[kind]
            if x["difference"] is None:
                continue
            lines.append(
                f"{c['variant']} - {c['reference']} {kind.replace('_', ' ')}: {fmt.pp(x['difference'], 0)} "
                f"[{_bound(x['low'])}, {_bound(x['high'])}] over {x['queries']} queries, sign-flip p = "
                + fmt.p_value(x["sign_flip_p"])
            )
    return lines


def markdown(a: dict[str, Any]) -> str:
    conf = round(100 * a["confidence"])
    lines = [
        f"## Trigger accuracy: `{a['skill']}`",
        "",
        f"{a['runs_per_query']} run(s) per query; {conf}% intervals clustered by query.",
        "",
    ]
    lines += ["| variant | recall | false-trigger rate | could not measure |", "|:--|:--|:--|--:|"]
    for v, d in a["variants"].items():
        lines.append(
            f"| {v} | {_est(d['recall'])} | {_est(d['false_trigger_rate'])} | {d['could_not_measure']}/{d['runs']} |"
        )
    lines += [
        "",
        "### Per query",
        "",
        "| query | should trigger | " + " | ".join(a["variants"]) + " |",
        "|:--|:--|" + "--:|" * len(a["variants"]),
    ]
    queries = next(iter(a["variants"].values()))["queries"]
    for i, row in enumerate(queries):
        cells = []
        for d in a["variants"].values():
            q = d["queries"][i]
            cells.append(
                f"{q['triggered']}/{q['measured']}"
                + (f" (+{q['could_not_measure']} n/m)" if q["could_not_measure"] else "")
            )
        label = "yes" if row["should_trigger"] else ("no (near miss)" if row["near_miss"] else "no")
        lines.append(f"| `{row['query']}` | {label} | " + " | ".join(cells) + " |")
    if a["comparisons"]:
        lines += ["", "### Side by side (paired by query)", ""]
        lines += [f"- {x}" for x in comparison_lines(a)]
    return "\n".join(lines) + "\n"


def add_parser(sub: Any) -> None:
    tr = sub.add_parser(
        "triggers",
        help="trigger accuracy: recall and false-trigger rate of a skill's description (installed delivery)",
        description="Run labelled queries (should-trigger / should-not-trigger) N times each with the skill "
        "installed, one fresh sandbox per run, stopping at the first Skill call or the end of the turn; "
        "compare descriptions (variants) side by side, paired by query.",
    )
    tr.add_argument("prereg", type=Path, metavar="PREREG", help="the trigger preregistration (YAML)")
    tr.add_argument("--out", type=Path, help="output directory (default: triggers-<skill> next to PREREG)")
    tr.add_argument("--jobs", type=int, default=None, help="concurrent runs (default 2)")
    tr.add_argument("--scripted", type=Path, metavar="SCENARIO", help="use the scripted Messages API (offline)")
    tr.add_argument("--verbose", action="store_true", help="print every run's verdict")
