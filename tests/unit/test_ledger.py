"""harness.reporting.ledger: every status transition, shelving (move, never delete, never overwrite), and eval's update."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.errors import ConfigError, HarnessError
from harness.experiment import evaluate as run
from harness.plan import ShardRef
from harness.reporting import ledger
from harness.reporting.ledger import RunSummary, SkillEntry, apply, record, shelve
from harness.reporting.model import ReportInput
from harness.study.config import Study, load_study
from tests import reportkit as kit
from tests.factories import LOCK, write_experiment

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def run_summary(verdict: str, *, model: str = "sonnet", resolved: str | None = "claude-sonnet-x",
                cli: str = "2.1.0", run_id: str = "run2") -> RunSummary:  # fmt: skip
    return RunSummary(skill="tidy", verdict=verdict, rule="point", baseline="3/10", skill_rate="7/10",
                      cost_delta="+20%", run_id=run_id, model=model, resolved_model=resolved, cli_version=cli,
                      reasons=("CODE: message",), date="2026-11-30")  # fmt: skip


def entry(status: str, *, model: str = "sonnet", resolved: str | None = "claude-sonnet-x",
          cli: str = "2.1.0") -> SkillEntry:  # fmt: skip
    return SkillEntry(status=status, verdict="adopt", rule="point", baseline="1/10", skill="9/10",
                      cost_delta="+5%", last_run="run1", model=model, resolved_model=resolved, cli_version=cli,
                      date="2026-11-01")  # fmt: skip


# --------------------------------------------------------------------- transitions


@pytest.mark.parametrize(
    ("before", "verdict", "after"),
    [
        (None, "adopt", "adopted"),
        (None, "reject", "candidate"),
        (None, "inconclusive", "candidate"),
        (None, "invalid", "candidate"),
        ("candidate", "adopt", "adopted"),
        ("candidate", "reject", "candidate"),
        ("candidate", "inconclusive", "candidate"),
        ("adopted", "adopt", "adopted"),
        ("adopted", "reject", "retired"),  # a regression run rejects an adopted skill
        ("adopted", "inconclusive", "adopted"),
        ("adopted", "invalid", "adopted"),
        ("retired", "inconclusive", "retired"),
        ("retired", "reject", "retired"),
        ("retired", "adopt", "adopted"),
    ],
)
def test_transition_same_model(before: str | None, verdict: str, after: str) -> None:
    new = apply(entry(before) if before else None, run_summary(verdict))
    assert new.status == after
    assert new.verdict == verdict and new.last_run == "run2"
    assert (new.baseline, new.skill, new.cost_delta) == ("3/10", "7/10", "+20%")
    changed = (before or "candidate") != after
    assert len(new.transitions) == (1 if changed else 0)
    if changed:
        assert new.transitions[0].change == f"{before or 'candidate'} -> {after}"


@pytest.mark.parametrize("status", ["adopted", "retired"])
@pytest.mark.parametrize(
    "update",
    [{"model": "opus"}, {"resolved": "claude-sonnet-y"}, {"cli": "2.2.0"}],
)
def test_model_update_returns_to_candidate_before_the_verdict(status: str, update: dict[str, Any]) -> None:
    new = apply(entry(status), run_summary("inconclusive", **update))
    assert new.status == "candidate"
    assert new.transitions[-1].change == f"{status} -> candidate"
    assert new.transitions[-1].why.startswith("model update:")
    # the new model's verdict applies to a candidate: a reject keeps it a candidate (not retired)
    assert apply(entry(status), run_summary("reject", **update)).status == "candidate"
    # an adopt re-adopts it, after the demotion
    readopted = apply(entry(status), run_summary("adopt", **update))
    assert readopted.status == "adopted"
    assert [t.change for t in readopted.transitions] == [f"{status} -> candidate", "candidate -> adopted"]


def test_invalid_run_is_no_model_update() -> None:
    assert apply(entry("adopted"), run_summary("invalid", model="opus, sonnet")).status == "adopted"


def test_unknown_resolved_model_is_not_a_change() -> None:
    assert apply(entry("adopted", resolved=None), run_summary("inconclusive")).status == "adopted"


def test_candidate_with_new_model_stays_candidate_without_a_transition() -> None:
    new = apply(entry("candidate"), run_summary("inconclusive", model="opus"))
    assert new.status == "candidate" and not new.transitions


# ------------------------------------------------------------------------ shelving


def _skill(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "SKILL.md").write_text("# skill\n")
    (path / "refs").mkdir()
    (path / "refs" / "notes.md").write_text("notes\n")
    return path


def test_shelve_moves_and_never_overwrites(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    first = shelve(_skill(tmp_path / "a" / "tidy"), shelf, "run1")
    assert first == (shelf / "tidy").resolve()
    assert not (tmp_path / "a" / "tidy").exists()
    assert (first / "SKILL.md").read_text() == "# skill\n" and (first / "refs" / "notes.md").is_file()
    second = shelve(_skill(tmp_path / "b" / "tidy"), shelf, "run1")
    assert second.name == "tidy-run1"
    third = shelve(_skill(tmp_path / "c" / "tidy"), shelf, "run1")
    assert third.name == "tidy-run1-2"
    fourth = shelve(_skill(tmp_path / "d" / "tidy"), shelf, "run1")
    assert fourth.name == "tidy-run1-3"
    # every earlier entry is intact
    for d in (first, second, third, fourth):
        assert (d / "SKILL.md").read_text() == "# skill\n"


def test_shelve_refuses_a_shelf_inside_the_skill(tmp_path: Path) -> None:
    skill = _skill(tmp_path / "tidy")
    with pytest.raises(ConfigError, match="inside the skill folder"):
        shelve(skill, skill / "shelf", "run1")
    assert (skill / "SKILL.md").is_file()


# ------------------------------------------------------------------ ledger on disk


def _study(tmp_path: Path, spec: dict[str, tuple[str, str]], **prereg_extra: Any) -> tuple[Study, ReportInput]:
    exp = write_experiment(tmp_path, spec)
    path = tmp_path / "study" / "preregistration.yaml"
    if prereg_extra:
        data = yaml.safe_load(path.read_text())
        data.update(prereg_extra)
        path.write_text(yaml.safe_dump(data))
    from harness.reporting.model import load_experiment

    return load_study(path), load_experiment(exp)


def test_record_adopt_writes_the_ledger(tmp_path: Path) -> None:
    study, r = _study(tmp_path, kit.WIN)
    update = record(study, r, now=NOW)
    path = tmp_path / "study" / "skills-ledger.yaml"
    assert update.path == path and update.previous_status is None and update.shelved_to is None
    text = path.read_text()
    assert text.startswith("# skills-ledger.yaml")
    data = yaml.safe_load(text)["skills"]["tidy"]
    assert data["status"] == "adopted" and data["verdict"] == "adopt"
    assert (data["baseline"], data["skill"]) == ("6/18", "13/18")
    assert data["cost_delta"].endswith("%") and data["last_run"] == LOCK[:12]
    assert (data["model"], data["resolved_model"], data["cli_version"]) == ("sonnet", "claude-sonnet-x", "2.1.0")
    assert data["date"] == "2026-11-30" and data["skill_path"] == "skill"
    assert any(x.startswith("SKILL_BETTER: ") for x in data["reasons"])
    assert not list(path.parent.glob(".skills-ledger.yaml.tmp*"))
    assert ledger.load(path).skills["tidy"].status == "adopted"  # round-trips
    assert "tidy new -> adopted (adopt)" in update.lines[0]


def test_record_reject_shelves_the_skill(tmp_path: Path) -> None:
    study, r = _study(tmp_path, kit.LOSS)
    skill_dir = study.skill_dir
    update = record(study, r, now=NOW)
    assert not skill_dir.exists()
    assert update.shelved_to == (tmp_path / "study" / "shelf" / "skill").resolve()
    assert (update.shelved_to / "SKILL.md").is_file()
    data = yaml.safe_load((tmp_path / "study" / "skills-ledger.yaml").read_text())["skills"]["tidy"]
    assert data["status"] == "candidate" and data["verdict"] == "reject"
    assert data["shelved_to"] == "shelf/skill" and data["skill_path"] == "shelf/skill"
    assert data["transitions"][-1]["change"] == "shelved"
    assert any("shelved" in line for line in update.lines)


def test_record_reject_of_an_adopted_skill_retires_and_shelves_next_to_an_old_entry(tmp_path: Path) -> None:
    study, r = _study(tmp_path, kit.LOSS)
    (tmp_path / "study" / "shelf" / "skill").mkdir(parents=True)
    (tmp_path / "study" / "shelf" / "skill" / "SKILL.md").write_text("an older shelved version\n")
    ledger.save(study.root / ledger.LEDGER_NAME, ledger.Ledger(skills={"tidy": entry("adopted")}))
    update = record(study, r, now=NOW)
    assert update.entry.status == "retired"
    assert update.shelved_to is not None and update.shelved_to.name == f"skill-{LOCK[:12]}"
    assert (tmp_path / "study" / "shelf" / "skill" / "SKILL.md").read_text() == "an older shelved version\n"


def test_record_reject_with_keep_leaves_the_skill(tmp_path: Path) -> None:
    study, r = _study(tmp_path, kit.LOSS, on_rejection="keep")
    update = record(study, r, now=NOW)
    assert update.shelved_to is None and study.skill_dir.is_dir()
    assert update.entry.status == "candidate" and update.entry.shelved_to is None


def test_record_keeps_other_skills(tmp_path: Path) -> None:
    study, r = _study(tmp_path, kit.WIN)
    other = entry("adopted").model_copy(update={"model": "opus"})
    ledger.save(study.root / ledger.LEDGER_NAME, ledger.Ledger(skills={"other": other}))
    record(study, r, now=NOW)
    skills = ledger.load(study.root / ledger.LEDGER_NAME).skills
    assert set(skills) == {"other", "tidy"} and skills["other"] == other


def test_malformed_ledger_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "skills-ledger.yaml"
    path.write_text("skills:\n  tidy:\n    status: famous\n")
    with pytest.raises(ConfigError) as e:
        ledger.load(path)
    assert "skills-ledger.yaml" in str(e.value) and "status" in str(e.value)


# ------------------------------------------------------------- skilltrial eval's tail


class _FakeExperiment:
    def __init__(self, result: Any) -> None:
        self.result = result
        self.stop = threading.Event()

    def run(self) -> Any:
        return self.result


@pytest.mark.parametrize("shard", [None, ShardRef(1, 2)])
def test_eval_updates_the_ledger_only_for_a_whole_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard: ShardRef | None
) -> None:
    from contextlib import nullcontext

    from harness.experiment.experiment import ExperimentResult
    from harness.experiment.options import RunOptions
    from harness.redact import Redactor
    from harness.results.store import ExperimentDir
    from harness.sandbox.images import ImageOptions

    study, r = _study(tmp_path, kit.LOSS)
    store = ExperimentDir(tmp_path / "out", Redactor([]))
    result = ExperimentResult(list(r.records), (), False, store, None, LOCK, study)  # type: ignore[arg-type]
    monkeypatch.setattr(run, "Experiment", lambda *a, **k: _FakeExperiment(result))
    monkeypatch.setattr(run, "_signals", lambda e: nullcontext())
    lines = run.evaluate(study, RunOptions(out=store.root, jobs=1, shard=shard, images=ImageOptions()))
    for name in ("report.md", "report.html", "junit.xml", "decision.json", "summary.txt"):
        assert (store.root / name).is_file()
    out = "\n".join(lines)
    assert "DECISION (point rule, preregistered): REJECT" in out and "report.html" in out
    ledger_file = study.root / ledger.LEDGER_NAME
    if shard is None:
        assert ledger_file.is_file() and not study.skill_dir.exists() and "shelved" in out
    else:
        assert not ledger_file.exists() and study.skill_dir.is_dir()


def test_a_failed_shelving_still_saves_the_ledger(tmp_path: Path) -> None:
    study, r = _study(tmp_path, kit.LOSS, shelf="skill/shelf")  # a shelf inside the skill folder
    with pytest.raises(HarnessError, match="was not shelved"):
        record(study, r, now=NOW)
    assert study.skill_dir.is_dir() and (study.skill_dir / "SKILL.md").is_file()
    saved = ledger.load(study.root / ledger.LEDGER_NAME).skills["tidy"]
    assert saved.verdict == "reject" and saved.shelved_to is None


def test_ledger_lives_outside_the_skill_folder(tmp_path: Path) -> None:
    study, _ = _study(tmp_path, kit.WIN)
    assert ledger.ledger_path(study) == (tmp_path / "study" / "skills-ledger.yaml").resolve()
    inside = Study(study.skill_dir / "preregistration.yaml", study.prereg.model_copy(update={"skill_ref": "."}),
                   study.task_file)  # fmt: skip
    assert ledger.ledger_path(inside) == (tmp_path / "study" / "skills-ledger.yaml").resolve()
