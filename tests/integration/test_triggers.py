"""``skilltrial triggers`` on the real engine, images and Claude Code CLI, against the scripted model.

The scenario fixes each query's chance of a ``Skill`` call (and makes it depend on the listed
description, so the two variants differ): the measured rates must reproduce those known
rates within their intervals, every run must end at its verdict (the gateway refuses the
CLI's request after the Skill call), and the paired comparison must see the difference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.analysis.triggers import TriggerAnalysis
from harness.experiment.triggers import TriggerOptions, run_triggers
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.triggers import load_trigger_study
from tests.integration.helpers import host_paths

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SKILL = "careful-fixer"
EPS = 1e-9  # Wilson's bound at 0/n is 0 up to rounding
# query -> (should trigger, p with the "reproduce" description, p with the terse one)
KNOWN = {
    "yes-a": (True, 0.9, 0.3),
    "yes-b": (True, 0.9, 0.3),
    "no-plain": (False, 0.0, 0.0),
    "no-near": (False, 0.25, 0.25),
}
QUERIES = {
    "yes-a": "mean([]) raises ZeroDivisionError, fix the bug",
    "yes-b": "median is wrong for even lists, a bug: fix it",
    "no-plain": "add docstrings everywhere",
    "no-near": "write a new test for word_count",
}


def _write(root: Path, runs: int) -> tuple[Path, Path]:
    src = Path(__file__).resolve().parents[2] / "examples"
    current = (src / "skills" / SKILL).resolve()
    terse = (src / "triggers" / "variants" / "careful-fixer-terse").resolve()
    prereg = {
        "skill": SKILL,
        "variants": {"current": str(current), "terse": str(terse)},
        "queries": [
            {"id": q, "query": QUERIES[q], "should_trigger": KNOWN[q][0], "near_miss": q == "no-near"} for q in KNOWN
        ],
        "execution": {"runs_per_query": runs, "max_turns": 3, "seed": 3, "budgets": {"timeout_s": 120}},
    }
    scenario: dict[str, Any] = {
        "seed": 3,
        "tasks": {},
        "defaults": {"usage": {"input_tokens": 5000, "output_tokens": 20}},
        "invocation": {
            SKILL: {
                "marker": "careful-fixer-7c1e",
                "p_default": 0.0,
                "rules": [
                    {"query_any": ["word_count"], "p": 0.25},
                    {"query_any": ["bug"], "description_any": ["reproduc"], "p": 0.9},
                    {"query_any": ["bug"], "p": 0.3},
                ],
            }
        },
    }
    (root / "prereg.yaml").write_text(yaml.safe_dump(prereg, sort_keys=False))
    (root / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    return root / "prereg.yaml", root / "scenario.yaml"


@pytest.fixture(scope="module")
def trigger_run(tmp_path_factory: pytest.TempPathFactory, engine: Engine, images: ImageSet) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("triggers")
    prereg, scen = _write(tmp, runs=5)
    study = load_trigger_study(prereg)
    records: list[Any] = []
    work = tmp / "work"
    work.mkdir(mode=0o700)
    analysis = run_triggers(
        study,
        engine,
        TriggerOptions(
            out=tmp / "out", paths=host_paths(work), images=images, jobs=2, scripted=scen, on_run=records.append
        ),
    )
    return {"analysis": analysis, "records": records, "out": tmp / "out", "work": work}


def test_every_run_was_measured_and_ended_at_its_verdict(trigger_run: dict[str, Any]) -> None:
    records = trigger_run["records"]
    assert len(records) == 4 * 5 * 2
    assert all(r.outcome != "could_not_measure" for r in records), [(r.run_id, r.reason) for r in records]
    assert all(r.listed is True for r in records)
    fired = [r for r in records if r.outcome == "triggered"]
    assert fired, "positive control: some runs triggered"
    for r in fired:
        assert r.tool_uses == (f"Skill:{SKILL}",) and r.requests == 1 and r.stopped_at_skill, r
    for r in records:
        if r.outcome == "not_triggered":
            assert r.requests == 1 and not r.stopped_at_skill and r.tool_uses == (), r
    assert list(trigger_run["work"].iterdir()) == [], "trigger run directories are removed"
    assert {p.name for p in trigger_run["out"].iterdir()} >= {"triggers.json", "triggers.md", "triggers.jsonl"}


def test_the_known_scripted_rates_are_reproduced_within_their_intervals(trigger_run: dict[str, Any]) -> None:
    a: TriggerAnalysis = trigger_run["analysis"]
    for col, variant in ((1, "current"), (2, "terse")):
        v = a.variants[variant]
        for row in v.queries:
            p = KNOWN[row.query][col]
            assert within(p, row.low, row.high), (variant, row)
        recall_true = (KNOWN["yes-a"][col] + KNOWN["yes-b"][col]) / 2
        fpr_true = (KNOWN["no-plain"][col] + KNOWN["no-near"][col]) / 2
        assert within(recall_true, v.recall.low, v.recall.high), (variant, v.recall)
        fpr = v.false_trigger_rate
        assert within(fpr_true, fpr.low, fpr.high), fpr
        assert len(v.listings) == 1, "every run of a variant saw the same listing"
        rows = {row.query: row for row in v.queries}
        assert rows["no-plain"].triggered == 0, "a query the model never picks the skill for"
    current, terse = a.variants["current"].recall.rate, a.variants["terse"].recall.rate
    assert current is not None and terse is not None and current > terse


def within(p: float, low: float | None, high: float | None) -> bool:
    return low is not None and high is not None and low - EPS <= p <= high + EPS


def test_the_two_descriptions_are_compared_paired_by_query(trigger_run: dict[str, Any]) -> None:
    (comp,) = trigger_run["analysis"].comparisons
    assert comp.reference == "current" and comp.variant == "terse"
    rec = comp.recall
    assert rec.queries == 2 and rec.difference is not None and rec.difference < 0
    # the same draws: a run the terse description triggered, the current one triggered too
    assert rec.run_pairs_only_variant == 0 and rec.run_pairs_only_reference > 0
    fpr = comp.false_trigger_rate
    assert fpr.difference == 0 and fpr.run_pairs_only_variant == fpr.run_pairs_only_reference == 0
    assert "Side by side" in (trigger_run["out"] / "triggers.md").read_text()
