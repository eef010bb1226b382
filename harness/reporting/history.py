"""``skilltrial history SKILL``: one skill's results over time, by model and date (read-only).

Every experiment directory of the skill becomes one row: when it ran, the
model (requested alias and the model the API resolved), the Claude Code
version, both arms' pass counts as ``k/n``, the cost ratio and the verdict.
Figures come from ``decision.json`` when it is current (same lock, same number
of result lines), else they are recomputed from ``results.jsonl`` and the
preregistration; when that is impossible the row says why instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness import fmt
from harness.errors import HarnessError
from harness.records import RESULTS, TrialRecord
from harness.reporting.gate import fresh_decision
from harness.reporting.model import load_experiment
from harness.results.attempts import final_attempts
from harness.results.meta import META, require_meta
from harness.results.store import read_results

DEFAULT_GLOBS = (
    "harness-results/*",
    "harness-results/*/models/*",
    "harness-results/*/variants/*",
    "demo-output/results-*",
)
"""Where experiments are by default (``*/models/*``: each model's experiment of a model matrix;
``*/variants/*``: each version's comparison in a family of variants)."""

Corrected = Callable[[Path], str | None]
"""The verdict an experiment directory has as a member of something larger (a family's variant: after Holm's
correction), or None when it stands alone. The caller supplies it: the family's analysis is above this layer."""


@dataclass(frozen=True)
class HistoryRow:
    date: str
    model: str
    cli_version: str
    baseline: str
    skill: str
    cost_ratio: str
    verdict: str
    experiment: str
    path: Path


def discover(cwd: Path, patterns: Sequence[str] = DEFAULT_GLOBS) -> list[Path]:
    """Experiment directories (with results.jsonl and experiment.json) under the default locations."""
    found: set[Path] = set()
    for pattern in patterns:
        for d in cwd.glob(pattern):
            if d.is_dir() and (d / RESULTS).is_file() and (d / META).is_file():
                found.add(d)
    return sorted(found)


def discover_in(roots: Iterable[Path]) -> list[Path]:
    """Experiment directories in each of ``roots`` (``history --in``): a root that is one, its
    subdirectories that are (a folder such as harness-results), and the default locations under it."""
    found: set[Path] = set()
    for root in roots:
        if (root / RESULTS).is_file() and (root / META).is_file():
            found.add(root)
            continue
        found.update(discover(root, ("*", "*/models/*", "*/variants/*", *DEFAULT_GLOBS)))
    return sorted(found)


def _values(records: Iterable[TrialRecord], pick: str) -> str:
    """The models or CLI versions of the trials that reached an outcome (final attempts only)."""
    ran = [r for r in final_attempts(records).finals if r.is_outcome]
    if pick == "model":
        aliases = sorted({r.provenance.model for r in ran})
        resolved = sorted({r.agent.resolved_model for r in ran if r.agent and r.agent.resolved_model})
        text = ", ".join(aliases) or "n/a"
        return f"{text} ({', '.join(resolved)})" if resolved else text
    return ", ".join(sorted({r.provenance.cli_version for r in ran})) or "n/a"


def row_for(path: Path, skill: str, *, explicit: bool = False) -> HistoryRow | None:
    """The row of one experiment directory; None when it belongs to another skill (or is a shard, unless named)."""
    try:
        meta = require_meta(path)
    except HarnessError:
        return None
    if meta.skill != skill or (meta.shard and not explicit):
        return None
    try:
        records = read_results(path / RESULTS).records
    except HarnessError:  # named on the row, not the end of the whole history
        records = []
    date = min((r.started_at for r in records), default=meta.created_at or "")
    base = HistoryRow(
        date=date[:16].replace("T", " "),
        model=_values(records, "model"),
        cli_version=_values(records, "cli"),
        baseline="n/a",
        skill="n/a",
        cost_ratio="n/a",
        verdict="n/a",
        experiment=meta.experiment_id,
        path=path,
    )
    shard = f" (shard {meta.shard})" if meta.shard else ""
    data = fresh_decision(path, meta, records)
    if data is not None:
        arms = data.get("arms", {})
        ratio = data.get("cost_ratio", {}).get("ratio")
        return replace(
            base, baseline=str(arms.get("baseline", {}).get("rate", "n/a")),
            skill=str(arms.get("skill", {}).get("rate", "n/a")), cost_ratio=_ratio_text(ratio),
            verdict=str(data["verdict"]) + shard,
        )  # fmt: skip
    try:
        r = load_experiment(path)
    except HarnessError as e:
        return replace(base, verdict=f"n/a ({e.message[:80]})")
    return replace(
        base, baseline=fmt.rate(r.analysis.baseline), skill=fmt.rate(r.analysis.skill),
        cost_ratio=fmt.ratio(r.analysis.cost.ratio), verdict=r.decision.verdict + shard,
    )  # fmt: skip


def _ratio_text(value: object) -> str:
    if isinstance(value, int | float):
        return fmt.ratio(float(value))
    return "inf" if value == "inf" else "n/a"


def history(
    skill: str,
    dirs: Iterable[Path] | None = None,
    *,
    cwd: Path | None = None,
    explicit: bool | None = None,
    corrected: Corrected | None = None,
) -> list[HistoryRow]:
    """Rows for ``skill``, oldest first (then by model), from ``dirs`` or the default locations.
    ``explicit`` (default: whether ``dirs`` is given): shards are shown only from named directories.
    ``corrected``: a member's verdict replaces its own (a variant's uncorrected verdict is never shown alone)."""
    explicit = dirs is not None if explicit is None else explicit
    paths = list(dirs) if dirs is not None else discover(cwd or Path.cwd())
    rows = [row for p in paths if (row := row_for(p, skill, explicit=explicit)) is not None]
    if corrected is not None:
        rows = [replace(r, verdict=v) if (v := corrected(r.path)) is not None else r for r in rows]
    return sorted(rows, key=lambda x: (x.date, x.model, x.experiment))


def format_table(rows: Sequence[HistoryRow]) -> str:
    header = ("date (UTC)", "model", "Claude Code", "baseline", "skill", "cost ratio", "verdict", "experiment")
    cells = [(r.date, r.model, r.cli_version, r.baseline, r.skill, r.cost_ratio, r.verdict, r.experiment) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    right = {3, 4, 5}

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(c) for c in cells)])
