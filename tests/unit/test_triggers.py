"""Trigger accuracy without Docker: the preregistration, the plan, the analysis and every byte of its outputs.

The golden files were rendered by the code before ``experiment/triggers.py`` was split along the layers; a
change to them is a change users see, so make it on purpose: rerun with ``HARNESS_UPDATE_GOLDEN=1`` to
rewrite them, and say why in the commit.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.analysis.triggers import analyze, clustered_rate
from harness.errors import ConfigError
from harness.plan import paired_session_id, plan_trigger_runs
from harness.records import TriggerRecord
from harness.reporting.triggers import markdown, summary_lines, triggers_json
from harness.study.triggers import Query, TriggerExecution, TriggerPrereg, load_trigger_study

GOLDEN = Path(__file__).parent / "data" / "triggers-golden"
T, N, C = "triggered", "not_triggered", "could_not_measure"


# ------------------------------------------------------------------ the analysis


def runs(variant: str, query: str, should: bool, outcomes: list[str]) -> list[TriggerRecord]:
    return [
        TriggerRecord(
            run_id=f"{variant}.{query}.{i}",
            variant=variant,
            query_id=query,
            should_trigger=should,
            run_index=i,
            outcome=o,
            reason="the skill under test was not listed" if o == C else None,
        )
        for i, o in enumerate(outcomes)
    ]


def prereg() -> TriggerPrereg:
    return TriggerPrereg(
        skill="s",
        variants={"a": "x", "b": "y"},
        queries=(
            Query(id="q1", query="one", should_trigger=True),
            Query(id="q2", query="two", should_trigger=True),
            Query(id="n1", query="three", should_trigger=False, near_miss=True),
        ),
    )


def test_trigger_analysis_recall_false_triggers_and_paired_comparison() -> None:
    recs = (
        runs("a", "q1", True, [T, T, T, N]) + runs("a", "q2", True, [T, T, N, N]) + runs("a", "n1", False, [N, N, T, N])
        + runs("b", "q1", True, [T, N, N, N]) + runs("b", "q2", True, [T, N, N, N]) + runs("b", "n1", False, [N, N, N, N])
    )  # fmt: skip
    a = analyze(prereg(), recs)
    ra = a.variants["a"].recall
    assert ra.rate == pytest.approx(5 / 8) and ra.queries == 2
    assert ra.low is not None and ra.high is not None and ra.rate is not None and 0 <= ra.low < ra.rate < ra.high <= 1
    assert a.variants["a"].false_trigger_rate.rate == pytest.approx(1 / 4)
    (comp,) = a.comparisons
    assert comp.recall.difference == pytest.approx(((1 / 4 - 3 / 4) + (1 / 4 - 2 / 4)) / 2)
    assert comp.recall.run_pairs_only_reference == 3 and comp.recall.run_pairs_only_variant == 0
    assert "recall" in "\n".join(summary_lines(a)) and "Side by side" in markdown(a)


def test_nothing_measured_is_could_not_measure_never_a_zero_recall() -> None:
    recs = runs("a", "q1", True, [C, C]) + runs("a", "q2", True, [C]) + runs("a", "n1", False, [N, N])
    a = analyze(prereg(), recs)
    recall = a.variants["a"].recall
    assert recall.rate is None and "not listed" in (recall.could_not_measure or "")
    assert a.variants["a"].could_not_measure == 3
    assert "could not measure" in "\n".join(summary_lines(a))
    assert (a.variants["b"].recall.could_not_measure or "").startswith("no run measured")


def test_clustered_interval_is_wider_than_naive_when_queries_differ() -> None:
    est = clustered_rate([(10, 10), (0, 10)], 0.95)
    assert est.rate == 0.5 and est.low == 0.0 and est.high == 1.0
    same = clustered_rate([(5, 5), (5, 5), (5, 5)], 0.95)
    assert same.rate == 1.0 and same.low is not None and same.low < 1.0, "zero robust variance: Wilson over queries"


# ------------------------------------------------------------------ every byte of the outputs

GOLDEN_QUERIES = (
    Query(id="fix-crash", query="mean([]) crashes, fix it", should_trigger=True),
    Query(id="fix-median", query="median is wrong", should_trigger=True),
    Query(id="fix-never", query="a bug nobody measured", should_trigger=True),
    Query(id="docstrings", query="add docstrings", should_trigger=False),
    Query(id="new-test", query="write a test", should_trigger=False, near_miss=True),
)
GOLDEN_RUNS = {  # variant -> query -> one letter per run: Triggered, Not triggered, Could not measure
    "current": {"fix-crash": "TTTN", "fix-median": "TTNT", "fix-never": "CCCC", "docstrings": "NNNN", "new-test": "TNNC"},
    "terse": {"fix-crash": "TNNN", "fix-median": "TNTN", "fix-never": "CCCC", "docstrings": "NNNN", "new-test": "NNNN"},
    "broken": {"fix-crash": "CCCC", "fix-median": "CCCC", "fix-never": "CCCC", "docstrings": "CCNN", "new-test": "CCCC"},
}  # fmt: skip


def golden_dataset() -> tuple[TriggerPrereg, list[TriggerRecord]]:
    """Three variants, one never listed; a query no run measured; a near miss; intervals that are n/a."""
    prereg = TriggerPrereg(
        skill="careful-fixer",
        variants={"current": "a", "terse": "b", "broken": "c"},
        queries=GOLDEN_QUERIES,
        execution=TriggerExecution(runs_per_query=4),
    )
    outcome = {"T": T, "N": N, "C": C}
    records = []
    for variant, letters in GOLDEN_RUNS.items():
        for q in GOLDEN_QUERIES:
            for i, letter in enumerate(letters[q.id]):
                measured = letter != "C"
                unlisted = "the skill under test was not listed in the first request"
                records.append(
                    TriggerRecord(
                        run_id=f"{variant}.{q.id}.{i}",
                        variant=variant,
                        query_id=q.id,
                        should_trigger=q.should_trigger,
                        run_index=i,
                        outcome=outcome[letter],
                        reason=None
                        if measured
                        else (unlisted if variant == "broken" else "infrastructure: the gateway did not start"),
                        listed=True if measured else None,
                        tool_uses=("Skill:careful-fixer",) if letter == "T" else (),
                        input_tokens=5000 + 10 * i,
                        cost_usd=0.0125 + 0.001 * i,
                        seconds=3.0,
                        listing_sha256=f"sha-{variant}" if measured else None,
                        requests=1,
                        stopped_at_skill=letter == "T",
                    )
                )
    return prereg, records


def rendered() -> dict[str, str]:
    prereg, records = golden_dataset()
    a = analyze(prereg, records)
    return {
        "triggers.json": triggers_json(a),
        "triggers.md": markdown(a),
        "summary.txt": "\n".join(summary_lines(a)) + "\n",
    }


@pytest.mark.parametrize("name", ["triggers.json", "triggers.md", "summary.txt"])
def test_the_outputs_of_a_fixed_dataset_are_byte_identical(name: str) -> None:
    text = rendered()[name]
    if os.environ.get("HARNESS_UPDATE_GOLDEN"):
        (GOLDEN / name).write_text(text)
    assert text == (GOLDEN / name).read_text()


# ------------------------------------------------------------------ the preregistration and the plan


def test_trigger_preregistration_checks_the_variants_name(tmp_path: Path) -> None:
    for name, skill_name in (("a", "s"), ("b", "other")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "SKILL.md").write_text(f"---\nname: {skill_name}\ndescription: d\n---\n")
    path = tmp_path / "p.yaml"
    path.write_text("skill: s\nvariants: {a: a, b: b}\nqueries: [{id: q, query: x, should_trigger: true}]\n")
    with pytest.raises(ConfigError, match=r"variants\.b"):
        load_trigger_study(path)
    path.write_text("skill: s\nvariants: {a: a}\nqueries: [{id: q, query: x, should_trigger: true}]\n")
    assert load_trigger_study(path).variant_dirs["a"] == (tmp_path / "a").resolve()
    assert len(plan_trigger_runs(load_trigger_study(path).prereg)) == 3
    ids = {paired_session_id(1, "q", 0), paired_session_id(1, "q", 1)}
    assert len(ids) == 2, "each run of a query its own session"
    assert paired_session_id(1, "q", 0) != paired_session_id(2, "q", 0), "the seed decides them"
