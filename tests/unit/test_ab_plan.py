"""``skilltrial plan`` on an A/B preregistration: tasks x runs for 80% power and the cost, from a pilot run, a
calibration run, stated rates or the defaults, with the report's own power function."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import cli
from harness.analysis import sizing, stats
from harness.reporting.model import cost_per_trial, load_experiment
from tests.factories import write_experiment

PILOT = {f"t{i}": ("PFF", "PPF") for i in range(6)} | {"t6": ("PPP", "PPF"), "t7": ("FFF", "PFF")}


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["plan", *args], env={})
    out = capsys.readouterr()
    return code, out.out, out.err


def _row(out: str, runs: int) -> tuple[int, int]:
    """(tasks, trials) of the table row for ``runs`` per arm."""
    m = re.search(rf"^\s+{runs}( \*)?\s+([\d,]+)\s+([\d,]+)\s", out, re.M)
    assert m, out
    return int(m.group(2).replace(",", "")), int(m.group(3).replace(",", ""))


def test_stated_rates_size_every_runs_option_with_the_reports_power_function(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = write_experiment(tmp_path, PILOT, rule="interval")
    prereg = tmp_path / "study" / "preregistration.yaml"
    code, out, _ = _plan(capsys, str(prereg), "--baseline-rate", "0.6", "--gain", "0.15", "--cost-per-trial", "0.5")
    assert code == 0 and exp.is_dir()
    v = stats.Variances(0.75 * 0.25, 0.6 * 0.4, 0.0)
    for runs in sizing.RUNS_OPTIONS:
        tasks = sizing.tasks_needed(0.15, runs, alpha=0.05, variances=v)
        assert tasks is not None and _row(out, runs) == (tasks, 2 * tasks * runs)
        assert stats.power(0.15, tasks, runs, variances=v) >= 0.8 > stats.power(0.15, tasks - 1, runs, variances=v)
    assert "80% power at +15.0 pp" in out and "(as stated)" in out
    _, n3 = _row(out, 3)
    assert f"${n3 * 0.5:,.0f}" in out or f"${n3 * 0.5:,.2f}" in out


def test_a_pilot_run_gives_its_variances_and_its_cost_per_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = write_experiment(tmp_path, PILOT, rule="interval")
    prereg = tmp_path / "study" / "preregistration.yaml"
    code, out, _ = _plan(capsys, str(prereg), "--pilot", str(exp))
    assert code == 0
    r = load_experiment(exp)
    v = r.analysis.mde_variances
    assert r.analysis.mde_source == "pilot"
    assert f"baseline {v.sigma2_baseline:.3f}, skill {v.sigma2_skill:.3f}" in out and f"omega2 {v.omega2:.3f}" in out
    per_trial = cost_per_trial(r)
    assert per_trial is not None
    tasks = sizing.tasks_needed(0.05, 3, alpha=0.05, variances=v)
    assert tasks is not None and _row(out, 3) == (tasks, 6 * tasks)
    assert "(the minimum worthwhile gain)" in out and "pilot's spend per trial" in out
    # the preregistered design's MDE is the one the pilot's own report shows when the designs agree
    assert f"smallest detectable effect {100 * stats.mde(8, 3, variances=v):.1f} pp" in out


def test_a_calibration_run_gives_the_within_task_variance_for_both_arms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aa = {f"t{i}": ("PFF", "FPF") for i in range(4)} | {f"u{i}": ("PPF", "PFP") for i in range(4)}
    exp = write_experiment(tmp_path, aa, rule="interval")
    prereg = tmp_path / "study" / "preregistration.yaml"
    code, out, _ = _plan(capsys, str(prereg), "--calibration", str(exp), "--omega2", "0.01")
    assert code == 0
    v = load_experiment(exp).analysis.mde_variances
    within = (v.sigma2_baseline + v.sigma2_skill) / 2
    assert f"baseline {within:.3f}, skill {within:.3f}; between-task omega2 0.010" in out
    assert "an A/A run cannot see it" in out


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--sigma-delta", "0.5"], "--sigma-delta"),
        (["--skill-rate", "0.5"], "--skill-rate"),
        (["--baseline-rate", "1.5"], "--baseline-rate"),
        (["--gain", "0"], "--gain"),
        (["--omega2", "-1"], "--omega2"),
        (["--cost-per-trial", "-2", "--baseline-rate", "0.5"], "--cost-per-trial"),
    ],
)
def test_bad_options_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str
) -> None:
    write_experiment(tmp_path, PILOT, rule="interval")
    code, _, err = _plan(capsys, str(tmp_path / "study" / "preregistration.yaml"), *args)
    assert code == 4 and field in err


def test_pilot_and_calibration_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        cli.main(["plan", "p.yaml", "--pilot", "a", "--calibration", "b"], env={})
