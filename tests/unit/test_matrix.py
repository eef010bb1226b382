"""A model matrix after its runs: the rule over the per-model verdicts, the summary (models.md, models.json,
the terminal section), ``skilltrial gate`` on the top directory and the ledger entry. Data from tests.factories."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import yaml

from harness.analysis.matrix import ModelVerdict, combine
from harness.cli import main
from harness.reporting import ledger
from harness.reporting.gate import gate, gate_matrix
from harness.reporting.matrix import (
    MatrixReport,
    ModelResult,
    json_data,
    markdown,
    matrix_report,
    terminal_lines,
    where_line,
    write_matrix_reports,
)
from harness.reporting.model import ReportInput, load_experiment
from harness.results.matrix import model_dir
from harness.study.config import load_study
from tests import reportkit as kit
from tests.factories import LOCK, provenance, write_matrix

NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
# the tasks of kit.WIN with too many unknown skill trials: inconclusive under either rule
UNCLEAR = {task: ("FFF", "UUP") for task in kit.WIN}
# two tasks where the skill helps nothing: the point rule rejects
NOTHING = {"t1": ("F", "F"), "t2": ("F", "F")}
# six tasks, a noisy win: the point rule adopts, the interval rule does not (amber)
NOISY6 = {
    "t1": ("PFF", "PPF"), "t2": ("PPF", "PFF"), "t3": ("PFF", "PPF"),
    "t4": ("PFF", "PFF"), "t5": ("PFF", "PPF"), "t6": ("PPF", "PPF"),
}  # fmt: skip


# ----------------------------------------------------------------------------- the rule


def _combine(rule: str, **verdicts: str) -> tuple[str, str]:
    v = combine([ModelVerdict(m, w) for m, w in verdicts.items()], rule)  # type: ignore[arg-type]
    return v.verdict, v.reason


@pytest.mark.parametrize(
    ("verdicts", "every", "any_"),
    [
        ({"sonnet": "adopt", "opus": "adopt"}, "adopt", "adopt"),
        ({"sonnet": "adopt", "opus": "inconclusive"}, "inconclusive", "adopt"),
        ({"sonnet": "inconclusive", "opus": "inconclusive"}, "inconclusive", "inconclusive"),
        ({"sonnet": "adopt", "opus": "reject"}, "reject", "reject"),
        ({"sonnet": "invalid", "opus": "reject"}, "reject", "reject"),
        ({"sonnet": "adopt", "opus": "invalid"}, "invalid", "invalid"),
        ({"sonnet": "unavailable", "opus": "adopt"}, "unavailable", "unavailable"),
        ({"sonnet": "unavailable", "opus": "invalid"}, "invalid", "invalid"),
    ],
)
def test_the_rule_over_the_models(verdicts: dict[str, str], every: str, any_: str) -> None:
    assert _combine("every", **verdicts)[0] == every
    assert _combine("any", **verdicts)[0] == any_


def test_the_reason_names_the_models_that_made_the_verdict() -> None:
    assert _combine("every", sonnet="adopt", opus="reject", haiku="reject")[1] == "rejected on opus, haiku"
    assert "not adopted on opus" in _combine("every", sonnet="adopt", opus="inconclusive")[1]
    assert _combine("every", sonnet="adopt", opus="adopt")[1] == "adopted on every model (sonnet, opus)"
    assert _combine("any", sonnet="adopt", opus="inconclusive")[1] == "adopted on sonnet; not adopted on opus"
    assert "opus (unavailable)" in _combine("every", sonnet="adopt", opus="unavailable")[1]
    assert combine([], "every").verdict == "unavailable"


# ----------------------------------------------------------------------------- the summary


def _rows(**specs: dict[str, tuple[str, str]] | None) -> list[ModelResult]:
    rows = []
    for model, spec in specs.items():
        if spec is None:
            rows.append(ModelResult(model, None, "not run"))
        else:
            prov = provenance(model=model)
            rows.append(ModelResult(model, kit.make_input(spec, prov=prov, resolved=f"claude-{model}-x")))
    return rows


def test_the_summary_shows_each_models_verdict_rates_interval_cost_and_judge() -> None:
    m = matrix_report("tidy", LOCK, "every", _rows(sonnet=kit.WIN, opus=kit.LOSS), "out")
    assert (m.verdict.verdict, m.exit_code) == ("reject", 1)
    md = markdown(m)
    assert md.startswith("## ❌ `tidy` on 2 models: **REJECT**")
    assert "> Helps on sonnet (adopt); not on opus (reject)." in md
    sonnet = next(line for line in md.splitlines() if line.startswith("| `sonnet`"))
    win = m.rows[0].report
    assert win is not None
    p, c = win.analysis.paired, win.analysis.cost
    for cell in ("✅ ADOPT", "6/18", "13/18", "haiku: independent", "[report](models/sonnet/report.md)"):
        assert cell in sonnet, (cell, sonnet)
    assert f"{'+' if p.mean and p.mean > 0 else ''}{100 * (p.mean or 0):.1f} pp" in sonnet
    assert f"{c.ratio:.2f}x" in sonnet
    assert "| `opus` | ❌ REJECT | 13/18 | 6/18 |" in md
    assert "`skilltrial gate` on this directory exits 1" in md


def test_a_skill_that_helps_one_model_only_is_inconclusive_by_default_and_adopted_by_any() -> None:
    rows = _rows(sonnet=kit.WIN, opus=NOISY6)
    every = matrix_report("tidy", LOCK, "every", rows, "out")
    any_ = matrix_report("tidy", LOCK, "any", rows, "out")
    assert rows[1].verdict == "adopt" and rows[1].point_only, "NOISY6: adopt by the point rule only"
    assert (every.verdict.verdict, any_.verdict.verdict) == ("adopt", "adopt")
    only_one = _rows(sonnet=kit.WIN, opus=UNCLEAR)
    assert only_one[1].verdict == "inconclusive"
    every, any_ = (matrix_report("tidy", LOCK, r, only_one, "out") for r in ("every", "any"))
    assert (every.verdict.verdict, every.exit_code) == ("inconclusive", 2)
    assert (any_.verdict.verdict, any_.exit_code) == ("adopt", 0)
    assert where_line(only_one) == "Helps on sonnet (adopt); unclear on opus (inconclusive)."
    assert "🟠 ADOPT BY THE POINT RULE" in markdown(matrix_report("tidy", LOCK, "every", rows, "out")).upper()
    assert where_line(rows) == "Helps on every model: sonnet, opus (point rule only)."


def test_a_model_without_results_is_a_row_that_says_so_and_leaves_no_verdict() -> None:
    m = matrix_report("tidy", LOCK, "every", _rows(sonnet=kit.WIN, opus=None), "out")
    assert (m.verdict.verdict, m.exit_code) == ("unavailable", 3)
    assert "| `opus` | ⛔ NO RESULT | n/a | n/a | n/a | n/a |  | not run |" in markdown(m)
    assert where_line(m.rows) == "Helps on sonnet (adopt); no result yet on opus."
    data = json_data(m)
    assert data["models"][1] == {"model": "opus", "directory": "models/opus", "verdict": "unavailable",
                                 "label": "no result", "point_only_adopt": False, "judge_model": None,
                                 "judge_note": None, "error": "not run"}  # fmt: skip


def test_the_judge_note_appears_for_the_model_of_the_judges_family(tmp_path: Path) -> None:
    top = write_matrix(tmp_path, {"sonnet": kit.WIN, "opus": kit.WIN}, judge="sonnet-judge")
    rows = [ModelResult(m, load_experiment(model_dir(top, m))) for m in ("sonnet", "opus")]
    m = matrix_report("tidy", LOCK, "every", rows, top)
    assert rows[0].judge_note is not None and "same family" in rows[0].judge_note
    assert rows[1].judge_note is None
    md = markdown(m)
    assert "sonnet-judge: the judge model (sonnet-judge) is of the same family" in md
    assert "sonnet-judge: independent" in md  # opus's row


def test_models_json_carries_the_figures_and_the_verdict(tmp_path: Path) -> None:
    m = matrix_report("tidy", LOCK, "every", _rows(sonnet=kit.WIN, opus=kit.LOSS), tmp_path)
    paths = write_matrix_reports(tmp_path, m)
    data = json.loads(paths["models.json"].read_text())
    assert (data["verdict"], data["exit_code"], data["models_rule"]) == ("reject", 1, "every")
    assert data["reason"] == "rejected on opus" and data["summary"].startswith("Helps on sonnet")
    sonnet = data["models"][0]
    assert sonnet["baseline"] == {"passes": 6, "valid": 18, "rate": "6/18"}
    assert sonnet["skill"]["rate"] == "13/18" and sonnet["verdict"] == "adopt"
    assert sonnet["paired_difference"]["tasks"] == 6 and sonnet["cost_ratio"]["ratio"] > 0
    assert paths["models.md"].read_text() == markdown(m)


def test_the_terminal_section_is_one_aligned_row_per_model() -> None:
    lines = terminal_lines(matrix_report("tidy", LOCK, "every", _rows(sonnet=kit.WIN, opus=kit.LOSS), "out"))
    assert lines[0].startswith("models: tidy on 2 models (6 tasks x 3 runs per arm), models rule every")
    header, sonnet, opus = lines[1:4]
    assert header.split()[:4] == ["model", "verdict", "baseline", "skill"]
    assert sonnet.index("6/18") == opus.index("13/18") == header.index("baseline")
    assert lines[4] == "Helps on sonnet (adopt); not on opus (reject)."
    assert lines[5] == "MATRIX DECISION (every, preregistered): REJECT: rejected on opus"
    assert "[skilltrial gate out exits 1]" in lines[6]


def test_untrusted_model_names_are_inert_in_markdown() -> None:
    rows = _rows(**{"<img/src=x>": kit.WIN, "opus": kit.WIN})
    md = markdown(matrix_report("tidy", LOCK, "every", rows, "out"))
    assert "<img" not in md.replace("`<img/src=x>`", ""), "only inside a code span"
    assert "[report](models/_img_src_x_/report.md)" in md


# ----------------------------------------------------------------------------- skilltrial gate on the top directory


def test_gate_on_a_matrix_combines_the_models_and_names_the_rejecting_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    top = write_matrix(tmp_path, {"sonnet": kit.WIN, "opus": kit.LOSS})
    g = gate_matrix(top)
    assert (g.verdict.verdict, g.exit_code) == ("reject", 1)
    assert [(x.model, x.verdict) for x in g.models] == [("sonnet", "adopt"), ("opus", "reject")]
    assert main(["gate", str(top)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("gate: REJECT (exit 1) tidy on 2 models (models rule every): rejected on opus")
    assert "  sonnet: ADOPT (exit 0) tidy:" in out and "  opus: REJECT (exit 1) tidy:" in out
    # one model's directory is still gated on its own, as before
    assert main(["gate", str(model_dir(top, "sonnet"))]) == 0
    assert gate(model_dir(top, "opus")).exit_code == 1


@pytest.mark.parametrize(
    ("specs", "models_rule", "code"),
    [
        ({"sonnet": kit.WIN, "opus": kit.WIN}, "every", 0),
        ({"sonnet": kit.WIN, "opus": UNCLEAR}, "every", 2),
        ({"sonnet": kit.WIN, "opus": UNCLEAR}, "any", 0),
        ({"sonnet": kit.WIN, "opus": None}, "every", 3),  # opus has not run: no verdict
        ({"sonnet": NOTHING, "opus": None}, "every", 1),  # ... unless another model rejects
    ],
)
def test_gate_exit_codes_over_the_models(
    tmp_path: Path, specs: dict[str, dict[str, tuple[str, str]] | None], models_rule: str, code: int
) -> None:
    top = write_matrix(tmp_path, specs, models_rule=models_rule)
    assert gate_matrix(top).exit_code == code
    assert main(["gate", str(top)]) == code


def test_gate_on_a_matrix_maps_an_invalid_model_and_a_foreign_directory_to_3(tmp_path: Path) -> None:
    mixed = {"sonnet": provenance(lock_hash=LOCK, model="sonnet", cli_version="2.1.0")}
    top = write_matrix(tmp_path / "a", {"sonnet": kit.WIN, "opus": kit.WIN}, provs=mixed)
    # sonnet's arms ran on another CLI version than its own records elsewhere: make them differ within the arm
    path = model_dir(top, "sonnet") / "results.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[0])
    rec["provenance"]["cli_version"] = "9.9.9"
    path.write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    g = gate_matrix(top)
    assert g.models[0].verdict == "invalid" and (g.verdict.verdict, g.exit_code) == ("invalid", 3)

    top = write_matrix(tmp_path / "b", {"sonnet": kit.WIN, "opus": kit.WIN})
    meta = model_dir(top, "opus") / "experiment.json"
    meta.write_text(meta.read_text().replace(LOCK, "cd" * 32))
    g = gate_matrix(top)
    assert g.models[1].verdict == "unavailable" and "not this matrix's" in (g.models[1].error or "")
    assert g.exit_code == 3


def test_gate_on_a_broken_matrix_json_is_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = write_matrix(tmp_path, {"sonnet": kit.WIN, "opus": kit.WIN})
    (top / "matrix.json").write_text("{not json")
    assert main(["gate", str(top)]) == 3
    assert "matrix.json" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the ledger


def _matrix_for_ledger(tmp_path: Path, sonnet: dict[str, tuple[str, str]], opus: dict[str, tuple[str, str]]):  # type: ignore[no-untyped-def]
    top = write_matrix(tmp_path, {"sonnet": sonnet, "opus": opus})
    study = load_study(tmp_path / "study" / "preregistration.yaml")
    rows = [ModelResult(m, load_experiment(model_dir(top, m))) for m in ("sonnet", "opus")]
    return study, matrix_report("tidy", LOCK, "every", rows, top)


def _reports(m: MatrixReport) -> dict[str, ReportInput]:
    return {row.model: row.report for row in m.rows if row.report is not None}


def test_the_ledger_records_the_combined_verdict_with_each_models(tmp_path: Path) -> None:
    study, m = _matrix_for_ledger(tmp_path, kit.WIN, kit.WIN)
    update = ledger.record_matrix(study, m.verdict, _reports(m), now=NOW)
    entry = yaml.safe_load(update.path.read_text())["skills"]["tidy"]
    assert (entry["status"], entry["verdict"]) == ("adopted", "adopt")
    assert entry["model"] == "sonnet, opus" and entry["baseline"] == "sonnet 6/18; opus 6/18"
    assert entry["rule"] == "point per model, every across models"
    assert entry["models"]["opus"] == {"verdict": "adopt", "baseline": "6/18", "skill": "13/18",
                                       "cost_delta": entry["models"]["opus"]["cost_delta"],
                                       "resolved_model": "claude-opus-x"}  # fmt: skip
    assert entry["reasons"][0] == "models: adopted on every model (sonnet, opus)"
    assert update.lines[0].endswith("tidy new -> adopted (adopt)")


def test_a_matrix_that_rejects_on_one_model_shelves_the_skill_once(tmp_path: Path) -> None:
    study, m = _matrix_for_ledger(tmp_path, kit.WIN, kit.LOSS)
    update = ledger.record_matrix(study, m.verdict, _reports(m), now=NOW)
    assert update.entry.verdict == "reject" and update.shelved_to is not None and not study.skill_dir.exists()
    assert update.entry.models is not None and update.entry.models["sonnet"].verdict == "adopt"
    assert update.entry.reasons[:3] == ("models: rejected on opus", "sonnet: adopt", "opus: reject")


def test_a_later_single_model_run_drops_the_per_model_part(tmp_path: Path) -> None:
    study, m = _matrix_for_ledger(tmp_path, kit.WIN, kit.WIN)
    ledger.record_matrix(study, m.verdict, _reports(m), now=NOW)
    single = kit.make_input(kit.WIN)
    entry = ledger.record(study, single, now=NOW).entry
    assert entry.models is None and entry.status == "adopted"
    assert entry.transitions[-2].why.startswith("model update: model sonnet, opus -> sonnet;"), "another model set"
    assert "models" not in yaml.safe_load(ledger.ledger_path(study).read_text())["skills"]["tidy"]


def test_history_finds_each_models_experiment_of_a_matrix(tmp_path: Path) -> None:
    from harness.reporting.history import discover_in, history

    write_matrix(tmp_path, {"sonnet": kit.WIN, "opus": kit.LOSS})
    rows = history("tidy", discover_in([tmp_path]), explicit=False)
    assert sorted((r.model, r.verdict) for r in rows) == [
        ("opus (claude-opus-x)", "reject"),
        ("sonnet (claude-sonnet-x)", "adopt"),
    ]
