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
provenance equals the new experiment's (everything but the lock hash and what
its trial observed of itself, the installed delivery's skill listing, which
the decision compares between the arms instead), its
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
from harness.errors import ConfigError
from harness.host.files import atomic_write
from harness.records import RESULTS, Provenance, TrialRecord
from harness.results.attempts import latest_by_trial
from harness.results.meta import read_meta
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
        **study_settings(execution, pass_rule),
        "runtime": runtime or "",
        "upstream": upstream,
        **{  # the route (host, proxy, CA) and the price table, where recorded
            k: v
            for k in ("upstream_host", "upstream_proxy", "upstream_ca_sha256", "price_table_sha256")
            if (v := getattr(provenance, k)) is not None
        },
    }


def study_settings(execution: Execution, pass_rule: str) -> dict[str, Any]:
    """The part of :func:`baseline_settings` the preregistration decides alone (known when it is locked)."""
    return {
        "allowed_tools": list(execution.allowed_tools),
        "budgets": execution.budgets.model_dump(mode="json", exclude={"total_usd"}),
        "resources": execution.resources.model_dump(mode="json"),
        "pass_rule": pass_rule,
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
                "task": task_json(task),
                "prompt": plan.prompt_for("baseline", task.prompt),
                "judge_prompt_sha256": sha256_hex(judge.judge_prompt(task, 0, "", None).encode()),
                "upstream_task": upstream_task,
            }
        )
    )


def task_json(task: Task) -> dict[str, Any]:
    """The task as a baseline trial sees it: every field but ``split``, which labels the task for the analysis
    (which held-out set it is in) and changes nothing the trial does."""
    return task.model_dump(mode="json", exclude={"split"})


def task_parts(task: Task, upstream_task: Any = None) -> dict[str, str]:
    """The task's part of a baseline fingerprint, by name, each as a hash (what :class:`BaselineInputs`
    keeps per task)."""
    return {
        "task": sha256_hex(canonical_json(task_json(task))),
        "prompt": sha256_hex(plan.prompt_for("baseline", task.prompt).encode()),
        "judge_prompt_sha256": sha256_hex(judge.judge_prompt(task, 0, "", None).encode()),
        "upstream_task": sha256_hex(canonical_json(upstream_task)),
    }


@dataclass(frozen=True)
class BaselineInputs:
    """What went into an experiment's baseline fingerprints, by name (``experiment.json``'s
    ``baseline_inputs``), so a record that is not reused can say which input differs: the settings as they
    are, and per task the hashes of its parts (:func:`task_parts`)."""

    settings: Mapping[str, Any]
    tasks: Mapping[str, Mapping[str, str]]

    def of(self, task_id: str) -> dict[str, Any]:
        return {**self.settings, **self.tasks.get(task_id, {})}

    def to_json(self) -> dict[str, Any]:
        return {"settings": dict(self.settings), "tasks": {k: dict(v) for k, v in self.tasks.items()}}

    @classmethod
    def from_json(cls, data: Any) -> BaselineInputs | None:
        if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
            return None
        tasks = data.get("tasks")
        return cls(data["settings"], tasks if isinstance(tasks, dict) else {})


INPUT_LABELS: dict[str, str] = {
    "base_sha": "base commit",
    "base_excluded": "paths left out of the base tree",
    "model": "model",
    "judge_model": "judge model",
    "delivery": "delivery",
    "cli_version": "Claude Code version",
    "image_digest": "trial image",
    "sidecar_image": "sidecar image",
    "prompt_template_sha256": "prompt template",
    "harness_version": "harness version",
    "allowed_tools": "allowed tools",
    "budgets": "budgets",
    "resources": "resources",
    "pass_rule": "pass rule",
    "runtime": "runtime",
    "upstream": "model server",
    "upstream_host": "upstream host",
    "upstream_proxy": "upstream proxy",
    "upstream_ca_sha256": "upstream CA bundle",
    "price_table_sha256": "price table",
    "listing_sha256": "skill listing",
    "delivery_check": "delivery check",
    "task": "the task's definition in the tasks file",
    "prompt": "the baseline prompt",
    "judge_prompt_sha256": "the judge's prompt",
    "upstream_task": "the scripted model's baseline behaviour for the task",
}
"""Every input of a baseline fingerprint or of the provenance a reused record must share, by name, in the
order a difference is reported (the first one that differs is named)."""


def _shown(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "(none)"
    if isinstance(value, str):
        hexed = value.removeprefix("sha256:")
        if len(hexed) >= 40 and all(c in "0123456789abcdef" for c in hexed):
            return value[: len(value) - len(hexed) + 12] if value.startswith("sha256:") else value[:7]
        return value if len(value) <= 60 else value[:57] + "..."
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def difference(then: Mapping[str, Any], now: Mapping[str, Any], keys: Iterable[str] | None = None) -> str | None:
    """The first input (in :data:`INPUT_LABELS`' order) whose value differs, worded ``base commit f604634 ->
    1a2b3c4`` (a mapping names its first differing key: ``budgets.timeout_s 900 -> 600``); ``keys``: compare
    only these (what is known on both sides). None when they agree."""
    names = set(keys) if keys is not None else set(then) | set(now)
    for key in [k for k in INPUT_LABELS if k in names] + sorted(names - set(INPUT_LABELS)):
        old, new = then.get(key), now.get(key)
        if old == new:
            continue
        label = INPUT_LABELS.get(key, key)
        if isinstance(old, dict) and isinstance(new, dict):
            sub = next(k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
            return f"{label}.{sub} {_shown(old.get(sub))} -> {_shown(new.get(sub))}"
        return f"{label} {_shown(old)} -> {_shown(new)}"
    return None


def provenance_inputs(p: Provenance) -> dict[str, Any]:
    """A provenance as reuse compares it: what the run knew before any trial (:meth:`Provenance.of_run`), but
    the lock hash (which covers the skill)."""
    return p.of_run().model_dump(exclude={"lock_hash"})


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


@dataclass(frozen=True)
class Match:
    record: TrialRecord
    """The source record, unchanged."""
    directory: Path


NO_RECORD = "no record of it"


def why_not_reused(
    rec: TrialRecord | None,
    fingerprint: str,
    provenance: Provenance,
    then: Mapping[str, Any] | None = None,
    now: Mapping[str, Any] | None = None,
) -> str | None:
    """Why ``rec`` (a source's last attempt of a wanted trial) cannot stand in for it, naming the first
    input that differs; None when it can. ``then``/``now``: the fingerprint's inputs by name (the source's,
    as its directory recorded them, and this experiment's), to name a difference the provenance does not
    show (budgets, tools, the task...)."""
    if rec is None:
        return NO_RECORD
    if rec.arm != "baseline":
        return f"its record is of the {rec.arm} arm"
    if not rec.is_outcome:
        return f"its last attempt ended {rec.status}, not with an outcome"
    differs = difference(provenance_inputs(rec.provenance), provenance_inputs(provenance))
    if differs is not None:
        return differs
    if rec.baseline_fingerprint == fingerprint:
        return None
    if then is not None and now is not None:
        differs = difference(then, now)
        if differs is not None:
            return differs
        return "its baseline fingerprint differs"
    return "its baseline fingerprint differs (its directory does not record what went into it: an earlier harness)"


@dataclass(frozen=True)
class Selection:
    found: dict[str, Match]
    """Trial id -> the record that stands in for it (first source wins)."""
    missed: dict[str, str]
    """Trial id -> why no source could give it (from the first source holding a record of it)."""

    def summary(self, of: int | None = None, limit: int = 3) -> str:
        """The misses grouped by reason, most first: ``12 of 12: base commit f604634 -> 1a2b3c4 (t0.baseline.0,
        ...)``; ``of`` is how many were wanted."""
        groups: dict[str, list[str]] = {}
        for trial_id, why in sorted(self.missed.items()):
            groups.setdefault(why, []).append(trial_id)
        parts = []
        for why, ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            count = f"{len(ids)} of {of}" if of is not None else str(len(ids))
            shown = ", ".join(ids[:limit]) + (", ..." if len(ids) > limit else "")
            parts.append(f"{count}: {why} ({shown})")
        return "; ".join(parts)


def select(
    wanted: Mapping[str, str],
    sources: Sequence[Path],
    provenance: Provenance,
    *,
    exclude: Path | None = None,
    inputs: BaselineInputs | None = None,
) -> Selection:
    """Reusable baseline records for ``wanted`` (trial id -> fingerprint), first source wins, and for every
    other one why not (:func:`why_not_reused`; ``inputs``: this experiment's, to name the input that differs)."""
    found: dict[str, Match] = {}
    missed: dict[str, str] = {}
    skip = exclude.resolve() if exclude is not None else None
    for directory in sources:
        if skip is not None and directory.resolve() == skip:
            continue
        latest = latest_by_trial(read_results(directory / RESULTS).records)
        recorded = recorded_inputs(directory)
        for trial_id, fp in wanted.items():
            if trial_id in found:
                continue
            rec = latest.get(trial_id)
            then = recorded.of(rec.task_id) if recorded is not None and rec is not None else None
            now = inputs.of(rec.task_id) if inputs is not None and rec is not None else None
            why = why_not_reused(rec, fp, provenance, then, now)
            if why is None:
                assert rec is not None
                found[trial_id] = Match(rec, directory)
                missed.pop(trial_id, None)
            elif missed.get(trial_id, NO_RECORD) == NO_RECORD:
                missed[trial_id] = why
    for trial_id in wanted:
        if trial_id not in found:
            missed.setdefault(trial_id, NO_RECORD)
    return Selection(found, missed)


def recorded_inputs(directory: Path) -> BaselineInputs | None:
    """What an experiment directory recorded of its baseline fingerprints' inputs (None: nothing readable)."""
    try:
        meta = read_meta(directory)
    except ConfigError:
        return None
    return BaselineInputs.from_json(meta.baseline_inputs) if meta is not None else None


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
