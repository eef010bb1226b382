"""Issue 12 item 7: A/A calibration (pure parts, the A/A trial wrapper, the ledger and the reuse warning)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.experiment import calibrate
from harness.plan import aa_plan, plan_trials
from harness.reporting import ledger
from harness.results.identity import RecordIdentity
from tests.factories import PROV, TASKS, outcome_records, write_experiment

AA = {f"t{i}": ("PPF", "PFP") for i in range(6)} | {"t6": ("FFF", "FFF"), "t7": ("PPP", "PPP")}


def _study(tmp_path: Path, spec: dict[str, tuple[str, str]]) -> Any:
    from harness.study.config import load_study

    write_experiment(tmp_path, spec, rule="interval")
    return load_study(tmp_path / "study" / "preregistration.yaml")


def test_summary_reports_rule_rates_judge_agreement_and_drift(tmp_path: Path) -> None:
    study = _study(tmp_path, AA)
    recs = outcome_records(AA)
    s = calibrate.summarize(study, recs, resamples=60, seed=1)
    assert set(s["rules"]) == {"point", "interval"}
    for rates in s["rules"].values():
        assert sum(rates.values()) == pytest.approx(1.0)
    assert s["rules"]["interval"]["adopt"] <= s["rules"]["point"]["adopt"]
    assert s["drift"]["mean"] == pytest.approx(0.0) and not s["drift"]["detected"]
    assert s["judge"]["trials"] == 48 and s["judge"]["agreement"] == pytest.approx(1.0)
    assert "would adopt a do-nothing skill" in calibrate.render(s)
    _, path = calibrate.write(tmp_path, lambda: s)
    assert json.loads(path.read_text())["kind"] == "aa_calibration"


def test_a_preregistered_group_sequential_design_is_calibrated_beside_the_fixed_rules(tmp_path: Path) -> None:
    """The fixed rules stay fixed (the design is dropped for them); the design gets its own rate, every look
    decided on the resampled runs (their run indices kept)."""
    from harness.study.config import DecisionSettings, Study

    plain_study = _study(tmp_path, AA)
    seq = plain_study.prereg.model_copy(
        update={"decision": DecisionSettings.model_validate({"rule": "interval", "sequential": {}})}
    )
    study = Study(plain_study.prereg_path, seq, plain_study.task_file)
    recs = outcome_records(AA)
    s = calibrate.summarize(study, recs, resamples=60, seed=1)
    plain = calibrate.summarize(plain_study, recs, resamples=60, seed=1)
    assert set(s["rules"]) == {"point", "interval", "sequential"}
    assert s["rules"]["point"] == plain["rules"]["point"] and s["rules"]["interval"] == plain["rules"]["interval"]
    assert sum(s["rules"]["sequential"].values()) == pytest.approx(1.0)
    assert "group-sequential design would adopt it" in calibrate.render(s)
    assert "group-sequential" not in calibrate.render(plain)


def test_drift_between_identical_arms_is_flagged(tmp_path: Path) -> None:
    drifted = {f"t{i}": ("PPP", "FFF") for i in range(8)}
    study = _study(tmp_path, drifted)
    s = calibrate.summarize(study, outcome_records(drifted), resamples=20)
    assert s["drift"]["detected"]
    assert any("differ beyond noise" in w for w in s["warnings"])


def test_judge_disagreement_is_measured() -> None:
    recs = outcome_records({"t": ("PU", "PF")})
    # U: verify passes, judge unknown (left out); the judge agrees on the rest
    j = calibrate.judge_agreement(recs)
    assert j["trials"] == 3
    flipped = [r.model_copy(update={"judge": r.judge.model_copy(update={"verdict": "fail"})})  # type: ignore[union-attr]
               if r.trial_id == "t.baseline.0" else r for r in recs]  # fmt: skip
    assert calibrate.judge_agreement(flipped)["agreement"] == pytest.approx(2 / 3)


def test_the_aa_plan_gives_the_skill_arm_the_baseline_treatment_and_records_it_as_the_skill_arm() -> None:
    planned = plan_trials(TASKS, 1, seed=1)
    twins = aa_plan(planned)
    assert [s.trial_id for s in twins] == [s.trial_id for s in planned], "the same trials, in the same order"
    spec = next(s for s in twins if s.arm == "skill")
    baseline = next(s for s in twins if s.arm == "baseline" and s.task == spec.task)
    assert spec.treated_as == "baseline" and spec.prompt == baseline.prompt, "no SKILL.md in the A/A arm's prompt"
    identity = RecordIdentity.of_run(PROV, baseline_fingerprints={t.id: "fp" for t in TASKS})
    got = identity.of(spec, 1)
    assert (got["arm"], got["trial_id"], got["run_index"]) == ("skill", spec.trial_id, spec.run_index)
    assert got["baseline_fingerprint"] is None, "an A/A skill record is never reused as a baseline"
    # positive control: without A/A the skill arm is treated as the skill arm
    own = next(s for s in planned if s.trial_id == spec.trial_id)
    assert own.treated_as == "skill" and own.prompt != baseline.prompt


def test_calibrations_are_kept_in_the_ledger_and_reuse_warns_without_a_recent_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = _study(tmp_path, AA)
    path = ledger.ledger_path(study)
    assert ledger.recent_calibration(path) is None
    cli._warn_without_recent_calibration(study)
    assert "no A/A calibration" in capsys.readouterr().err
    s = calibrate.summarize(study, outcome_records(AA), resamples=10)
    ledger.record_calibration(path, calibrate.ledger_entry(s, "abc"))
    assert "calibrations:" in path.read_text()
    assert ledger.recent_calibration(path, model="sonnet") is not None
    cli._warn_without_recent_calibration(study)
    assert capsys.readouterr().err == ""
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=30)
    assert ledger.recent_calibration(path, now=later) is None


def test_calibrate_is_a_command_with_scripted_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["calibrate", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--scripted" in out and "--resamples" in out and "A/A" in out
