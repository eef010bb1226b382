"""A small, seeded run of ``scripts/simulate_rules.py --efficacy``: the group-sequential design against the fixed
one on the same simulated experiments, and the closing line the README quotes (the full run is
``python3 scripts/simulate_rules.py --efficacy``, about half an hour on two cores)."""

from __future__ import annotations

import re

import pytest

from scripts.simulate_rules import Cell, efficacy_line, main, run_efficacy_cell, shift_for

LINE = re.compile(
    r"^efficacy stop: false adoption <= \d\.\d{3} at every design; trials saved at \+0\.24 \(20 x 3\): \d+\.\d%$"
)


def test_a_strong_skill_stops_early_and_a_null_one_is_not_adopted_more_than_by_the_fixed_design() -> None:
    strong = run_efficacy_cell(Cell(20, 3, 0.45, shift_for(0.45), 8, 7, 1.0, 0.0), "pocock")
    assert sum(strong.sequential.values()) == sum(strong.fixed.values()) == 8
    assert strong.sequential.get("adopt", 0) >= 6 and sum(strong.crossed.values()) >= 4
    assert set(strong.crossed) <= {1, 2}, "only interim looks are counted as crossings"
    assert 0.0 < strong.saved / 8 < 1.0
    null = run_efficacy_cell(Cell(6, 3, 0.0, 0.0, 20, 7, 1.0, 0.0), "obrien-fleming")
    assert null.sequential.get("adopt", 0) == null.adopt_only_sequential == 0
    assert null.futility_stops > 0, "the futility stop beside the looks still fires"


def test_the_efficacy_run_ends_with_the_line_the_readme_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--efficacy", "--efficacy-reps", "4", "--efficacy-tasks", "20", "--efficacy-effects", "0", "0.24",
            "--efficacy-spending", "obrien-fleming", "--jobs", "1"]  # fmt: skip
    assert main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert LINE.match(lines[-1]), lines[-1]
    assert any(line.startswith("| 20 x 3 | obrien-fleming | +0.24 |") for line in lines)
    assert (
        efficacy_line([])
        == "efficacy stop: false adoption <= n/a at every design; trials saved at +0.24 (20 x 3): n/a%"
    )
