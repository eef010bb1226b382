"""harness.reporting.history: one row per experiment of a skill, by model and date."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import cli
from harness.reporting import write_reports
from harness.reporting.history import discover, format_table, history
from harness.reporting.model import load_experiment
from tests import reportkit as kit
from tests.factories import write_experiment


def _layout(tmp_path: Path) -> dict[str, Path]:
    """Three experiments of `tidy` (two models, two Claude Code versions), one of another skill, one shard."""
    out = {}
    out["old"] = write_experiment(tmp_path / "w-old", kit.WIN, lock="1" * 64, day=3, model="sonnet", cli="2.1.0")
    out["new"] = write_experiment(tmp_path / "w-new", kit.LOSS, lock="2" * 64, day=20, model="opus", cli="2.2.0")
    out["mid"] = write_experiment(tmp_path / "w-mid", kit.NOISY, lock="3" * 64, day=12, rule="interval")
    out["other"] = write_experiment(tmp_path / "w-other", kit.WIN, lock="4" * 64, skill="other")
    out["shard"] = write_experiment(tmp_path / "w-shard", kit.WIN, lock="5" * 64, shard="1/2")
    write_reports(out["old"], load_experiment(out["old"]))  # one row from decision.json
    results = tmp_path / "harness-results"
    results.mkdir()
    for name, exp in out.items():
        exp.rename(results / f"tidy-{name}")
        out[name] = results / f"tidy-{name}"
    return out


def test_history_rows_by_date_with_models_rates_and_verdicts(tmp_path: Path) -> None:
    dirs = _layout(tmp_path)
    assert len(discover(tmp_path)) == 5
    rows = history("tidy", cwd=tmp_path)
    assert [r.path for r in rows] == [dirs["old"], dirs["mid"], dirs["new"]]
    old, mid, new = rows
    assert old.date.startswith("2026-11-03") and new.date.startswith("2026-11-20")
    assert (old.model, old.cli_version) == ("sonnet (claude-sonnet-x)", "2.1.0")
    assert (new.model, new.cli_version) == ("opus (claude-sonnet-x)", "2.2.0")
    assert (old.baseline, old.skill, old.verdict) == ("6/18", "13/18", "adopt")
    assert (new.baseline, new.skill, new.verdict) == ("13/18", "6/18", "reject")
    assert mid.verdict == "inconclusive" and mid.baseline == "5/12"
    assert old.cost_ratio.endswith("x") and old.experiment == "1" * 12


def test_history_explicit_dirs_include_a_shard_and_skip_other_skills(tmp_path: Path) -> None:
    dirs = _layout(tmp_path)
    rows = history("tidy", [dirs["shard"], dirs["other"]])
    assert len(rows) == 1 and rows[0].verdict.endswith("(shard 1/2)")


def test_history_row_says_why_when_it_cannot_recompute(tmp_path: Path) -> None:
    dirs = _layout(tmp_path)
    (tmp_path / "w-new" / "study" / "preregistration.yaml").unlink()
    row = history("tidy", [dirs["new"]])[0]
    assert row.verdict.startswith("n/a (") and row.model.startswith("opus")


def test_history_table_and_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    _layout(tmp_path)
    table = format_table(history("tidy", cwd=tmp_path))
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["date", "(UTC)", "model"] and len(lines) == 5
    monkeypatch.chdir(tmp_path)
    assert cli.main(["history", "tidy"]) == 0
    out = capsys.readouterr().out
    assert "13/18" in out and "reject" in out and "opus" in out
    assert cli.main(["history", "nobody"]) == 1, "nothing found is not a success"
    assert "no experiments of skill nobody" in capsys.readouterr().err


def test_history_in_another_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    _layout(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli.main(["history", "tidy"]) == 1, "the working directory holds nothing"
    capsys.readouterr()
    assert cli.main(["history", "tidy", "--in", str(tmp_path)]) == 0
    from_root = capsys.readouterr().out
    assert "13/18" in from_root and "opus" in from_root
    # a folder of experiment directories, and one experiment directory, work too
    assert cli.main(["history", "tidy", "--in", str(tmp_path / "harness-results")]) == 0
    assert capsys.readouterr().out.count("\n") >= 3
    assert cli.main(["history", "tidy", "--in", str(tmp_path / "harness-results" / "tidy-old")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # header, rule, one row
    assert cli.main(["history", "nobody", "--in", str(tmp_path)]) == 1
    assert f"found in {tmp_path}" in capsys.readouterr().err
