"""Every output tells the same story (issue 24 item 5): after any path, each file of an experiment's output
set reflects the results as they now are, or is gone; none is left from before.

The paths: an analysis that succeeds; one that is refused (a result line edited by hand) for an A/B
experiment, a library experiment and one model of a matrix; a renderer that crashes; a run that appends
results (the set is removed before its first line); a calibration whose summary cannot be made; and the
gate, which trusts decision.json only while the result lines are the ones it was computed from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.errors import ConfigError, HarnessError
from harness.experiment import calibrate
from harness.experiment import library_plan as library
from harness.experiment.events import NullEvents
from harness.experiment.experiment import Experiment
from harness.experiment.library import LibraryExperiment
from harness.experiment.matrix import evaluate_matrix, report_matrix
from harness.experiment.options import RunOptions
from harness.records import RESULTS, TrialRecord
from harness.redact import Redactor
from harness.reporting import html, write_reports
from harness.reporting.gate import gate, gate_matrix
from harness.reporting.model import load_experiment
from harness.reporting.outputs import (
    AB_OUTPUTS,
    CALIBRATION_OUTPUTS,
    DECISION_JSON,
    LIBRARY_OUTPUTS,
    MATRIX_OUTPUTS,
    REPORT_HTML,
    OutputSet,
)
from harness.results.store import ExperimentDir
from harness.study.config import load_study
from tests import reportkit as kit
from tests.factories import outcome_records, write_experiment, write_matrix
from tests.unit.test_library import library_dir, make_library
from tests.unit.test_matrix_run import SPECS, FakeRunner, _matrix

SPEC = {"t1": ("PF", "PP"), "t2": ("FF", "PF"), "t3": ("PP", "PP")}


def contents(root: Path, outputs: OutputSet) -> dict[str, str]:
    """The files of ``outputs`` that exist in ``root``, by name."""
    return {n: (root / n).read_text() for n in outputs.files if (root / n).exists()}


def rewrite_line(exp: Path, index: int, **update: Any) -> list[TrialRecord]:
    """Edit one result line by hand (in place: the number of lines stays the same)."""
    records = [TrialRecord.model_validate_json(x) for x in (exp / RESULTS).read_text().splitlines()]
    records[index] = records[index].model_copy(update=update)
    (exp / RESULTS).write_text("".join(r.model_dump_json() + "\n" for r in records))
    return records


# ------------------------------------------------------------------------------ a library experiment


def test_a_refused_library_reanalysis_rewrites_every_output_report_html_included(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # reproduced first: report.html kept the old selection and chart while the other three said REFUSED
    _study, records, out = library_dir(tmp_path)
    assert main(["report", str(out)]) == 0
    before = contents(out, LIBRARY_OUTPUTS)
    assert set(before) == set(LIBRARY_OUTPUTS.files) and "<svg" in before[REPORT_HTML]
    i = next(i for i, r in enumerate(records) if r.arm == "masked" and r.skills_mounted)
    rewrite_line(out, i, skills_mounted=())
    assert main(["report", str(out)]) == library.LibraryCheckError.exit_code
    capsys.readouterr()
    after = contents(out, LIBRARY_OUTPUTS)
    assert set(after) == set(LIBRARY_OUTPUTS.files)
    for name, text in after.items():
        assert text != before[name], f"{name} was left from before"
        assert "refused" in text.lower() or "REFUSED" in text, name
    assert "<svg" not in after[REPORT_HTML] and "alpha" not in after[REPORT_HTML]
    assert json.loads(after["contributions.json"])["selection"] is None


def test_a_library_analysis_that_crashes_leaves_no_output_from_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _study, _records, out = library_dir(tmp_path)
    assert main(["report", str(out)]) == 0

    def broken(*_a: object, **_k: object) -> str:
        raise RuntimeError("a renderer bug")

    monkeypatch.setattr("harness.experiment.library.html_report", broken)
    from harness.experiment.library import report_library

    with pytest.raises(RuntimeError):
        report_library(out)
    assert contents(out, LIBRARY_OUTPUTS) == {}


# --------------------------------------------------------------------------------- an A/B experiment


def test_a_refused_ab_reanalysis_says_no_verdict_everywhere_and_the_gate_agrees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = write_experiment(tmp_path, kit.LOSS)
    assert main(["report", str(exp)]) == 0
    assert gate(exp).exit_code == 1
    records = [TrialRecord.model_validate_json(x) for x in (exp / RESULTS).read_text().splitlines()]
    # a line moved from another experiment by hand: same number of lines, so an old decision.json looked current
    rewrite_line(exp, 0, provenance=records[0].provenance.model_copy(update={"lock_hash": "f" * 64}))
    assert main(["report", str(exp)]) == ConfigError.exit_code
    assert "another lock" in capsys.readouterr().err
    after = contents(exp, AB_OUTPUTS)
    assert DECISION_JSON not in after  # no verdict to record
    assert set(after) == set(AB_OUTPUTS.files) - {DECISION_JSON}
    for name, text in after.items():
        assert "another lock" in text and "REJECT" not in text, name
    assert 'type="refused"' in after["junit.xml"]
    with pytest.raises(HarnessError, match="another lock"):  # the gate: exit 3 with the same cause
        gate(exp)
    assert main(["gate", str(exp)]) == 3


def test_the_gate_does_not_trust_a_decision_json_whose_result_lines_were_edited(tmp_path: Path) -> None:
    # same lock, same number of lines, a verdict edited from fail to pass: decision.json no longer fits
    exp = write_experiment(tmp_path, kit.LOSS)
    write_reports(exp, load_experiment(exp))
    assert gate(exp).source == DECISION_JSON
    records = [TrialRecord.model_validate_json(x) for x in (exp / RESULTS).read_text().splitlines()]
    i = next(i for i, r in enumerate(records) if r.judge is not None and r.judge.verdict == "fail")
    rewrite_line(exp, i, judge=records[i].judge.model_copy(update={"verdict": "pass"}))  # type: ignore[union-attr]
    assert gate(exp).source.startswith("recomputed")


def test_a_renderer_that_crashes_leaves_no_report_from_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = write_experiment(tmp_path, SPEC)
    r = load_experiment(exp)
    write_reports(exp, r)
    assert set(contents(exp, AB_OUTPUTS)) == set(AB_OUTPUTS.files)

    def broken(*_a: object) -> str:
        raise RuntimeError("a renderer bug")

    monkeypatch.setattr(html, "render", broken)
    with pytest.raises(RuntimeError):
        write_reports(exp, r)
    assert contents(exp, AB_OUTPUTS) == {}


def test_a_refused_analysis_in_a_directory_that_does_not_exist_writes_nothing(tmp_path: Path) -> None:
    from harness.reporting import analyse_and_write

    def refused() -> Any:
        raise ConfigError(tmp_path / "x", "unreadable")

    with pytest.raises(ConfigError):
        analyse_and_write(tmp_path / "missing", refused)
    assert not (tmp_path / "missing").exists()


# ------------------------------------------------------------------------------------------- runs


def test_a_run_removes_the_set_before_its_first_result_line_and_only_then(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    root.mkdir()
    for name in AB_OUTPUTS.files:
        (root / name).write_text("from before\n")
    store = ExperimentDir(root, Redactor(), derived=AB_OUTPUTS.files)
    assert set(contents(root, AB_OUTPUTS)) == set(AB_OUTPUTS.files)  # opening a directory changes nothing
    first, second = outcome_records({"t1": ("P", "P")})
    store.results.append(first)
    assert contents(root, AB_OUTPUTS) == {}  # the results changed: nothing from before describes them
    (root / "report.md").write_text("new\n")
    store.results.append(second)
    assert (root / "report.md").read_text() == "new\n"  # once only: a report of this run stays
    plain = ExperimentDir(tmp_path / "other", Redactor())  # no derived names: nothing is removed
    (plain.root / "report.md").write_text("kept\n")
    plain.results.append(first)
    assert (plain.root / "report.md").read_text() == "kept\n"


def test_each_kind_of_run_names_its_own_set(tmp_path: Path) -> None:
    prereg = make_library(tmp_path / "lib")
    study = load_study(prereg)
    options = RunOptions(out=tmp_path / "out", jobs=1)
    assert Experiment(study, None, options).derived_outputs() == AB_OUTPUTS.files
    aa = RunOptions(out=tmp_path / "out", jobs=1, aa=True)
    assert Experiment(study, None, aa).derived_outputs() == CALIBRATION_OUTPUTS.files
    lib = LibraryExperiment(study, None, options, design=library.design(study))
    assert lib.derived_outputs() == LIBRARY_OUTPUTS.files


def test_a_calibration_that_cannot_be_summarised_leaves_no_calibration_json(tmp_path: Path) -> None:
    (tmp_path / "calibration.json").write_text("{}\n")

    def refused() -> dict[str, Any]:
        raise ConfigError(tmp_path / "results.jsonl", "holds no readable trial result")

    with pytest.raises(ConfigError):
        calibrate.write(tmp_path, refused)
    assert contents(tmp_path, CALIBRATION_OUTPUTS) == {}
    summary, path = calibrate.write(tmp_path, lambda: {"kind": "aa_calibration"})
    assert json.loads(path.read_text()) == summary


# -------------------------------------------------------------------------------------- a matrix


def test_a_model_of_a_matrix_whose_reanalysis_is_refused_says_so_in_its_reports_and_the_summary(
    tmp_path: Path,
) -> None:
    top = write_matrix(tmp_path, {"sonnet": SPEC, "opus": SPEC})
    report_matrix(top)
    opus = top / "models" / "opus"
    assert set(contents(opus, AB_OUTPUTS)) == set(AB_OUTPUTS.files)
    records = [TrialRecord.model_validate_json(x) for x in (opus / RESULTS).read_text().splitlines()]
    rewrite_line(opus, 0, provenance=records[0].provenance.model_copy(update={"lock_hash": "f" * 64}))
    lines = report_matrix(top)
    assert any(line.startswith("opus: no report") for line in lines)
    after = contents(opus, AB_OUTPUTS)
    assert DECISION_JSON not in after and all("another lock" in t for t in after.values())
    assert "NO RESULT" in (top / "models.md").read_text()
    assert gate_matrix(top).exit_code == 3


def test_a_matrix_run_removes_its_summary_before_any_model_runs(tmp_path: Path, make_study: Any) -> None:
    study = _matrix(make_study)
    top = tmp_path / "out"
    inconclusive = {m: SPECS["sonnet"] for m in SPECS}  # no reject: the skill stays where the lock found it
    evaluate_matrix(study, RunOptions(out=top, jobs=1, api_key="sk-ant-test-matrix"), lambda _s: NullEvents(), lambda _l: None,
                    run_model=FakeRunner(inconclusive))  # fmt: skip
    assert set(contents(top, MATRIX_OUTPUTS)) == set(MATRIX_OUTPUTS.files)
    seen: list[bool] = []

    def run_model(own: Any, options: RunOptions, events: Any) -> Any:
        seen.append(any((top / n).exists() for n in MATRIX_OUTPUTS.files))
        raise HarnessError("the engine went away")

    with pytest.raises(HarnessError, match="the engine went away"):
        evaluate_matrix(study, RunOptions(out=top, jobs=1, api_key="sk-ant-test-matrix"), lambda _s: NullEvents(), lambda _l: None,
                        run_model=run_model)  # fmt: skip
    assert seen == [False] and contents(top, MATRIX_OUTPUTS) == {}
