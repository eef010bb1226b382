"""A decision on every run (issue 24 item 3): no record, however incomplete, stops the analysis.

A trial with no model answer beside one with it (an upstream 400 on every request, an agent that kills its
own CLI) once crashed ``eval``, ``report`` and ``gate`` with a TypeError while sorting provenance. The
first tests reproduce that from records; the property tests then draw result sets in which any optional
field of :class:`~harness.records.TrialRecord` and of its nested models, at any depth, is absent or None
(:mod:`tests.strategies` reads the fields from the models, so a new field is drawn too) and run the whole
analysis on them: the decision, every renderer (terminal, Markdown, HTML, JUnit, decision.json), the gate
(from decision.json and recomputed), history, the ledger's summary, the model matrix's summary and gate, a
family of variants' reports and gate (Holm across the comparisons),
the A/A calibration, and a library experiment's analysis and reports. The only exception allowed is a
refusal that names its cause (a :class:`~harness.errors.HarnessError`), and then every output says so.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.analysis.decide import decide
from harness.analysis.estimates import analyze
from harness.analysis.observations import context_from_records, observations_from_records
from harness.errors import HarnessError
from harness.experiment import calibrate
from harness.experiment import library_plan as library
from harness.experiment.family import family_of, report_family
from harness.experiment.library import CONTRIBUTIONS_JSON, report_library
from harness.experiment.matrix import report_matrix
from harness.records import AgentResult, GatewayMeter, TrialRecord
from harness.reporting import DECISION_JSON, JUNIT_XML, REPORT_HTML, REPORT_MD, SUMMARY_TXT, ledger, write_reports
from harness.reporting.gate import GATE_CODES, gate, gate_matrix
from harness.reporting.history import row_for
from harness.reporting.model import load_experiment
from harness.results.load import read_experiment
from harness.study.config import DecisionSettings, load_study
from harness.study.lock import lock
from tests.factories import (
    LOCK,
    outcome_records,
    provenance,
    write_experiment,
    write_experiment_dir,
    write_family,
    write_matrix,
)
from tests.strategies import holed_sets, result_sets
from tests.unit.test_library import complete_records, make_library

SCALE = float(os.environ.get("HARNESS_PROPERTY_SCALE", "1"))
"""More examples than the default run: ``HARNESS_PROPERTY_SCALE=20``."""


def examples(n: int) -> settings:
    """``n`` examples (times the scale), no deadline, nothing written into the checkout."""
    return settings(max_examples=max(1, round(n * SCALE)), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])  # fmt: skip


SPEC = {"t1": ("PF", "PP"), "t2": ("FF", "PF"), "t3": ("PP", "PP")}
"""The experiment the property tests write (its records are replaced by the drawn ones)."""
DESIGNS: dict[str, tuple[str, dict[str, Any]]] = {
    "point": ("point", {}),
    "interval": ("interval", {}),
    "sequential": ("interval", {"sequential": {}}),
    "pocock": ("interval", {"sequential": {"spending": "pocock"}}),
}
"""The preregistered designs every drawn result set is decided under: both rules, and the interval rule's
group-sequential design with each spending function (every look, every renderer's sequential lines)."""
AB_FILES = (DECISION_JSON, SUMMARY_TXT, REPORT_MD, REPORT_HTML, JUNIT_XML)


@contextmanager
def scratch() -> Iterator[Path]:
    """A fresh directory per example (hypothesis runs many examples in one test)."""
    with tempfile.TemporaryDirectory(prefix="decides-") as d:
        yield Path(d)


def no_answer(record: TrialRecord) -> TrialRecord:
    """What the CLI records when every request got a 400: an error result that names no model."""
    return record.model_copy(
        update={
            "status": "agent_error",
            "agent": AgentResult(exit_code=1, is_error=True, subtype="error", resolved_model=None),
            "gateway": GatewayMeter(requests=1, forwarded=1, upstream_statuses=("400",)),
            "patch": None,
            "verify": None,
            "judge": None,
        }
    )


def every_output(exp: Path) -> str:
    """Analyse ``exp`` as ``skilltrial report`` and ``gate`` do and render everything; returns the verdict."""
    r = load_experiment(exp)
    assert r.decision.verdict in GATE_CODES
    paths = write_reports(exp, r)
    assert sorted(paths) == sorted(AB_FILES)
    data = json.loads((exp / DECISION_JSON).read_text())
    assert data["verdict"] == r.decision.verdict
    from_file = gate(exp)
    assert from_file.source == DECISION_JSON and from_file.verdict == r.decision.verdict, from_file.line
    (exp / DECISION_JSON).unlink()
    recomputed = gate(exp)
    assert recomputed.verdict == r.decision.verdict and recomputed.exit_code == GATE_CODES[r.decision.verdict]
    assert recomputed.line
    row = row_for(exp, r.prereg.skill, explicit=True)
    assert row is not None and row.verdict == r.decision.verdict
    ledger.apply(None, ledger.summarize_run(r))
    return r.decision.verdict


# ------------------------------------------------------------------ the reported crash, from records


def test_a_trial_without_a_model_answer_beside_one_with_it_still_decides(tmp_path: Path) -> None:
    # reproduced first: TypeError '<' not supported between 'str' and 'NoneType' in context_from_records
    records = outcome_records({"t1": ("PP", "PP"), "t2": ("PF", "FP"), "t3": ("FF", "PF")})
    i = next(i for i, r in enumerate(records) if r.trial_id == "t1.skill.0")
    records[i] = no_answer(records[i])
    settings_ = DecisionSettings()
    ctx = context_from_records(records, 2, False, planned_task_ids=["t1", "t2", "t3"])
    assert {dict(k).get("resolved_model") for k in ctx.normalized_provenance["skill"]} == {None, "claude-sonnet-x"}
    result = decide(analyze(observations_from_records(records, "verify_and_judge"), settings_), settings_, ctx)
    assert result.verdict == "inconclusive"  # three tasks cannot adopt; "not known" is not a mismatch
    assert "PROVENANCE_MISMATCH" not in result.codes
    exp = write_experiment(tmp_path, {"t1": ("PP", "PP"), "t2": ("PF", "FP"), "t3": ("FF", "PF")}, recs=records)
    assert every_output(exp) == "inconclusive"


def test_a_model_that_did_change_within_an_arm_is_still_invalid(tmp_path: Path) -> None:
    # positive control: the fix compares what is known, so a real change of the resolved model still counts
    records = outcome_records({"t1": ("PP", "PP"), "t2": ("PF", "FP")})
    i = next(i for i, r in enumerate(records) if r.trial_id == "t1.skill.0")
    agent = records[i].agent
    assert agent is not None
    records[i] = records[i].model_copy(update={"agent": agent.model_copy(update={"resolved_model": "other"})})
    records.append(no_answer(records[0]).model_copy(update={"trial_id": "t3.baseline.0", "task_id": "t3"}))
    exp = write_experiment(tmp_path, {"t1": ("PP", "PP"), "t2": ("PF", "FP")}, recs=records)
    assert every_output(exp) == "invalid"
    assert "resolved_model differs within skill" in (exp / SUMMARY_TXT).read_text()


# ------------------------------------------------------------------ any optional field None or absent


@examples(30)
@given(records=result_sets(), design=st.sampled_from(sorted(DESIGNS)))
def test_any_result_set_reaches_a_decision_and_every_output(records: list[TrialRecord], design: str) -> None:
    with scratch() as root:
        rule, decision = DESIGNS[design]
        every_output(write_experiment(root, SPEC, rule=rule, decision=decision, recs=records))


@examples(30)
@given(data=st.data(), design=st.sampled_from(sorted(DESIGNS)))
def test_a_real_result_set_with_holes_anywhere_reaches_a_decision(data: st.DataObject, design: str) -> None:
    base = outcome_records({"t1": ("PFU", "PPI"), "t2": ("FFT", "PFP"), "t3": ("PPP", "PPF")})
    records = data.draw(holed_sets(base))
    with scratch() as root:
        rule, decision = DESIGNS[design]
        every_output(write_experiment(root, SPEC, rule=rule, decision=decision, recs=records))


@examples(15)
@given(data=st.data())
def test_a_calibration_summarises_any_result_set(data: st.DataObject) -> None:
    records = data.draw(st.one_of(result_sets(), holed_sets(outcome_records(SPEC))))
    with scratch() as root:
        exp = write_experiment(root, SPEC, recs=records)
        study = read_experiment(exp).study
        summary = calibrate.summarize(study, records, resamples=10)
        json.dumps(summary, default=str)
        assert calibrate.render(summary)
        calibrate.ledger_entry(summary, LOCK[:12])


@examples(15)
@given(data=st.data())
def test_a_model_matrix_summarises_and_gates_any_result_set(data: st.DataObject) -> None:
    with scratch() as root:
        top = write_matrix(root, {"sonnet": SPEC, "opus": SPEC})
        prov = provenance(lock_hash=LOCK, model="opus")
        records = data.draw(holed_sets(outcome_records(SPEC, prov=prov, resolved="claude-opus-x")))
        sub = top / "models" / "opus"
        meta = json.loads((sub / "experiment.json").read_text())
        write_experiment_dir(sub, meta, records)
        lines = report_matrix(top)
        assert any("MATRIX DECISION" in line for line in lines)
        assert {"models.md", "models.json"} <= {p.name for p in top.iterdir()}
        assert gate_matrix(top).exit_code in (0, 1, 2, 3)


@examples(15)
@given(data=st.data())
def test_a_family_of_variants_reports_and_gates_any_result_set(data: st.DataObject) -> None:
    """Issue 28: one comparison of the family holed anywhere; the family still gets a verdict (or none, exit 3)
    in every one of its outputs, and the gate agrees with decision.json."""
    with scratch() as root:
        top = write_family(root, {"a": SPEC, "b": SPEC}, rule=data.draw(st.sampled_from(["point", "interval"])))
        prov = provenance(lock_hash=LOCK)
        records = data.draw(holed_sets(outcome_records(SPEC, prov=prov)))
        sub = top / "variants" / "b"
        meta = json.loads((sub / "experiment.json").read_text())
        write_experiment_dir(sub, meta, records)
        lines = report_family(top)
        assert any("FAMILY DECISION" in line for line in lines)
        assert {DECISION_JSON, SUMMARY_TXT, REPORT_MD, REPORT_HTML, JUNIT_XML} <= {p.name for p in top.iterdir()}
        decided = json.loads((top / DECISION_JSON).read_text())
        assert decided["kind"] == "family"
        assert family_of(top).exit_code == decided["exit_code"] in (0, 1, 2, 3)


@examples(15)
@given(data=st.data())
def test_a_library_analysis_fits_or_refuses_with_every_output_saying_so(data: st.DataObject) -> None:
    with scratch() as root:
        prereg = make_library(root / "lib")
        lock(prereg, library_entries=library.lock_entries)
        study = load_study(prereg)
        base = complete_records(study, library.design(study))
        records = data.draw(holed_sets(base))
        assert study.prereg.lock is not None
        meta = {"lock_hash": study.prereg.lock.sha256, "preregistration": str(prereg)}
        exp = write_experiment_dir(root / "exp", meta, [r.model_copy(update={"provenance": r.provenance.model_copy(
            update={"lock_hash": study.prereg.lock.sha256})}) for r in records])  # fmt: skip
        refusal: HarnessError | None = None
        try:
            lines = report_library(exp)
        except HarnessError as e:
            refusal = e
        body = json.loads((exp / CONTRIBUTIONS_JSON).read_text())
        if refusal is not None:
            assert refusal.message and body["status"] == "refused" and body["selection"] is None
        else:
            assert lines and body["selection"]["method"]
