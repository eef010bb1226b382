"""Baseline reuse: a baseline trial already run under identical settings is not run again.

The baseline arm does not depend on the skill, so evaluating three skills on the
same tasks, model, image and budgets need not sample the baseline three times.
The lock hash cannot be the key (it covers the skill), so every baseline record
carries a **baseline fingerprint** instead: a SHA-256 over everything that shapes
one baseline trial of one task:

    the task (prompt, verify command, pass criteria, protected paths, timeout),
    base commit (and what its tree is made without), model, judge model, Claude Code version, trial and sidecar image
    ids, the prompt template and the judge's prompt, allowed tools, per-trial
    budgets and timeouts, container resources and runtime, the pass rule, the
    harness version, and the upstream (the real API, or the scripted model's
    baseline behaviour for this task).

A record is reused only when its fingerprint equals the new trial's, its
provenance (everything but the lock hash) equals the new experiment's, its
final attempt produced an outcome (not an infrastructure failure, not skipped),
and it pairs by the same trial id (task, arm, run index). The copy is admitted
into the new experiment under its lock (so the provenance check of the
decision still compares every other field between the arms) and names the
experiment it came from in ``reused_from``. Artifacts are copied by content hash.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from harness import plan
from harness.host.files import atomic_write
from harness.records import RESULTS, Provenance, ReusedFrom, TrialRecord
from harness.results.attempts import latest_by_trial
from harness.results.store import read_results
from harness.study.config import Execution, Task
from harness.study.lock import canonical_json, sha256_hex
from harness.trial import judge

FINGERPRINT_FORMAT = 1


def baseline_settings(
    execution: Execution,
    *,
    provenance: Provenance,
    pass_rule: str,
    sidecar_image: str,
    runtime: str | None,
    upstream: str,
    base_excluded: Sequence[str] = (),
) -> dict[str, Any]:
    """The experiment-wide part of the fingerprint (pure). ``upstream`` names the model
    server: the real API's URL, or ``scripted:<sha256>`` of the scripted model's settings;
    ``base_excluded`` what the base tree is made without (recorded only when there is something)."""
    budgets = execution.budgets.model_dump(mode="json", exclude={"total_usd"})
    left_out = {"base_excluded": sorted(base_excluded)} if base_excluded else {}
    return {
        **left_out,
        "base_sha": provenance.base_sha,
        "model": provenance.model,
        "judge_model": provenance.judge_model,
        "cli_version": provenance.cli_version,
        "image_digest": provenance.image_digest,
        "sidecar_image": sidecar_image,
        "prompt_template_sha256": provenance.prompt_template_sha256,
        "harness_version": provenance.harness_version,
        "allowed_tools": list(execution.allowed_tools),
        "budgets": budgets,
        "resources": execution.resources.model_dump(mode="json"),
        "pass_rule": pass_rule,
        "runtime": runtime or "",
        "upstream": upstream,
        **{  # the route (host, proxy, CA) and the price table, where recorded
            k: v
            for k in ("upstream_host", "upstream_proxy", "upstream_ca_sha256", "price_table_sha256")
            if (v := getattr(provenance, k)) is not None
        },
    }


def baseline_fingerprint(settings: Mapping[str, Any], task: Task, upstream_task: Any = None) -> str:
    """The baseline fingerprint of one task under ``settings`` (pure).

    ``upstream_task``: what the model server does for this task's baseline (the
    scripted model's compiled behaviour; None for the real API).
    """
    return sha256_hex(
        canonical_json(
            {
                "format": FINGERPRINT_FORMAT,
                "settings": dict(settings),
                "task": task.model_dump(mode="json"),
                "prompt": plan.prompt_for("baseline", task.prompt),
                "judge_prompt_sha256": sha256_hex(judge.judge_prompt(task, 0, "", None).encode()),
                "upstream_task": upstream_task,
            }
        )
    )


class ScriptedViews(NamedTuple):
    global_sha256: str
    """A hash of the scenario's settings outside any task."""
    tasks: dict[str, Any]
    """Task id -> what its baseline trial sees of the scenario."""


def scripted_views(compiled: bytes) -> ScriptedViews:
    """Split a compiled scenario into what a baseline trial depends on.

    The skill arm's behaviour and the skill marker are left out, so scenarios
    that differ only in the skill under evaluation give equal fingerprints.
    """
    data = json.loads(compiled)
    tasks = data.pop("tasks", {})
    data.pop("skill_marker", None)
    # the skill under evaluation's name and its Skill-tool invocation rules: a baseline never sees the skill
    data.pop("skill", None)
    data.pop("invocation", None)
    views: dict[str, Any] = {}
    for task_id, script in tasks.items():
        view = {k: v for k, v in script.items() if k not in ("skill_marker", "arms")}
        view["baseline"] = (script.get("arms") or {}).get("baseline")
        views[task_id] = view
    return ScriptedViews(sha256_hex(canonical_json(data)), views)


# ------------------------------------------------------------------------- selection


def experiment_dirs(paths: Iterable[Path]) -> list[Path]:
    """Each path is an experiment directory, or a folder of them (for example ``harness-results``)."""
    out: list[Path] = []
    for path in paths:
        if (path / RESULTS).is_file():
            out.append(path)
        elif path.is_dir():
            out.extend(sorted(p for p in path.iterdir() if (p / RESULTS).is_file()))
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def same_provenance(a: Provenance, b: Provenance) -> bool:
    """Equal in every field the decision compares, except the lock hash (which covers the skill)."""
    return a.model_dump(exclude={"lock_hash"}) == b.model_dump(exclude={"lock_hash"})


@dataclass(frozen=True)
class Match:
    record: TrialRecord
    """The source record, unchanged."""
    directory: Path


def select(
    wanted: Mapping[str, str],
    sources: Sequence[Path],
    provenance: Provenance,
    *,
    exclude: Path | None = None,
) -> dict[str, Match]:
    """Reusable baseline records for ``wanted`` (trial id -> fingerprint), first source wins."""
    found: dict[str, Match] = {}
    skip = exclude.resolve() if exclude is not None else None
    for directory in sources:
        if skip is not None and directory.resolve() == skip:
            continue
        latest = latest_by_trial(read_results(directory / RESULTS).records)
        for trial_id, fp in wanted.items():
            if trial_id in found:
                continue
            rec = latest.get(trial_id)
            if (
                rec is not None
                and rec.arm == "baseline"
                and rec.is_outcome  # infra failures and skips are not outcomes of the arm
                and rec.baseline_fingerprint == fp
                and same_provenance(rec.provenance, provenance)
            ):
                found[trial_id] = Match(rec, directory)
    return found


def adopt(match: Match, *, experiment_id: str, lock_hash: str) -> TrialRecord:
    """The copy that joins the new experiment: its lock, and where it first ran."""
    rec = match.record
    origin = rec.reused_from or ReusedFrom(
        experiment_id=rec.experiment_id, lock_hash=rec.provenance.lock_hash, directory=str(match.directory)
    )
    return rec.model_copy(
        update={
            "experiment_id": experiment_id,
            "provenance": rec.provenance.model_copy(update={"lock_hash": lock_hash}),
            "reused_from": origin,
        }
    )


def copy_artifacts(record: TrialRecord, source: Path, target: Path) -> int:
    """Copy the record's content-addressed artifacts (same names: they are hashes). Returns the count copied."""
    copied = 0
    digests = set(record.artifacts.values())
    if record.patch is not None:
        digests.add(record.patch.sha256)
    for digest in sorted(digests):
        src = source / "artifacts" / digest[:2] / digest
        dst = target / "artifacts" / digest[:2] / digest
        if dst.exists() or not src.is_file():
            continue
        data = src.read_bytes()
        if sha256_hex(data) != digest:
            continue  # a corrupted source artifact is not spread further
        os.makedirs(dst.parent, exist_ok=True)
        atomic_write(dst, data)
        copied += 1
    return copied
