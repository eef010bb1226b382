"""``skilltrial eval`` on a model matrix without Docker: each model's A/B is run by a fake runner that writes what
a real one writes (records from tests.factories); what is checked is the matrix around it: one narrowed study
and one directory per model, in order, progress saying which, the summary, the ledger once, stops, resume,
``skilltrial report`` and ``skilltrial merge`` of a sharded matrix."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import plan
from harness.cli import main
from harness.errors import Interrupted, ResumeError
from harness.experiment.evaluate import Evaluated
from harness.experiment.events import Events, NullEvents
from harness.experiment.matrix import evaluate_matrix, reuse_sources
from harness.experiment.options import RunOptions
from harness.records import RESULTS
from harness.reporting import ledger, write_reports
from harness.reporting.gate import gate_matrix
from harness.reporting.model import analyze_records
from harness.results.matrix import MATRIX_JSON, model_dir, read_matrix_meta
from harness.results.meta import ExperimentMeta, write_meta
from harness.study.config import Study, load_study
from harness.study.lock import lock, verify_lock
from tests.factories import DEFAULT_PREREG, OUTCOME_PROV, StudyFactory, outcome_records, provenance

MATRIX = DEFAULT_PREREG.replace("  model: sonnet\n", "  models: [sonnet, claude-opus-4-1]\n").replace(
    "runs_per_arm: 2", "runs_per_arm: 1"
)
SPECS = {"sonnet": {"t1": ("F", "P"), "t2": ("F", "P")}, "claude-opus-4-1": {"t1": ("F", "F"), "t2": ("F", "F")}}
"""sonnet: better but too few tasks to adopt (inconclusive); opus: no better (the point rule rejects)."""
KEY = "sk-ant-test-matrix"
"""A real run's key: the matrix admits its study (the lock and the key) before any model runs."""


class Messages(NullEvents):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def message(self, text: str) -> None:
        self.log.append(text)


class FakeRunner:
    """Runs "one model's experiment": writes experiment.json and the model's records into ``options.out``
    under the matrix's lock, then analyses and reports them as run_and_report does."""

    def __init__(self, specs: Mapping[str, Mapping[str, tuple[str, str]]], stop_after: str | None = None) -> None:
        self.specs = specs
        self.stop_after = stop_after
        self.calls: list[tuple[str, Path, tuple[Path, ...], str | None]] = []

    def __call__(self, study: Study, options: RunOptions, events: Events | None) -> Evaluated:
        model = study.prereg.execution.model
        assert study.prereg.execution.models == () and study.matrix_model == model
        assert options.out is not None, "the matrix names every model's directory"
        self.calls.append((model, options.out, options.reuse_from, study.locked_prereg.execution.models[0]))
        lock_hash = verify_lock(study).sha256
        out = options.out
        out.mkdir(parents=True, exist_ok=True)
        write_meta(out, ExperimentMeta.start(lock_hash, preregistration=str(study.prereg_path), skill="tidy",
                                             shard=None, mode="scripted", model=study.matrix_model))  # fmt: skip
        prov = provenance(OUTCOME_PROV, lock_hash=lock_hash, model=model)
        records = outcome_records(self.specs[model], prov=prov)
        (out / RESULTS).write_text("".join(r.model_dump_json() + "\n" for r in records))
        data = analyze_records(study, records, lock_hash=lock_hash, experiment_dir=out)
        write_reports(out, data)
        return Evaluated(data, ["", f"summary of {model}"], stopped=model == self.stop_after)


def _matrix(make_study: StudyFactory) -> Study:
    files = make_study(MATRIX.replace("expected_effect", "decision: {rule: point}\nexpected_effect"))
    lock(files.prereg)
    return load_study(files.prereg)


def _run(
    study: Study, out: Path, runner: FakeRunner, log: list[str] | None = None, **options: Any
) -> tuple[list[str], list[str]]:
    shown: list[str] = []
    events_log = log if log is not None else []
    lines = evaluate_matrix(study, RunOptions(out=out, jobs=1, api_key=KEY, **options), lambda s: Messages(events_log),
                            shown.extend, run_model=runner)  # fmt: skip
    return lines, shown


def test_each_model_runs_in_order_into_its_own_directory_then_one_summary_and_one_ledger_entry(
    make_study: StudyFactory, tmp_path: Path
) -> None:
    study = _matrix(make_study)
    runner = FakeRunner(SPECS)
    log: list[str] = []
    out = tmp_path / "out"
    lines, shown = _run(study, out, runner, log, scripted=tmp_path / "scenario.yaml")
    assert [(c[0], c[1]) for c in runner.calls] == [
        ("sonnet", out / "models" / "sonnet"),
        ("claude-opus-4-1", out / "models" / "claude-opus-4-1"),
    ]
    assert log == [f"model 1/2: sonnet -> {out / 'models' / 'sonnet'}",
                   f"model 2/2: claude-opus-4-1 -> {out / 'models' / 'claude-opus-4-1'}"]  # fmt: skip
    assert "=== model 1/2: sonnet ===" in shown and "summary of claude-opus-4-1" in shown
    meta = read_matrix_meta(out)
    assert meta is not None and meta.models == ("sonnet", "claude-opus-4-1") and meta.mode == "scripted"
    assert (out / "models.md").is_file() and (out / "models.json").is_file()
    for m in ("sonnet", "claude-opus-4-1"):
        assert (model_dir(out, m) / "decision.json").is_file()
    text = "\n".join(lines)
    assert "MATRIX DECISION (every, preregistered): REJECT: rejected on claude-opus-4-1" in text
    assert "ledger " in text and gate_matrix(out).exit_code == 1
    entry = ledger.load(ledger.ledger_path(study)).skills["tidy"]
    assert entry.verdict == "reject" and entry.models is not None and set(entry.models) == set(SPECS)
    assert entry.shelved_to is not None, "the combined reject shelves the skill, once, after every model ran"


def test_a_stop_during_one_model_starts_no_later_model_and_writes_no_ledger(
    make_study: StudyFactory, tmp_path: Path
) -> None:
    study = _matrix(make_study)
    runner = FakeRunner(SPECS, stop_after="sonnet")
    with pytest.raises(Interrupted, match="interrupted after model sonnet: claude-opus-4-1 did not start"):
        _run(study, tmp_path / "out", runner)
    assert [c[0] for c in runner.calls] == ["sonnet"]
    assert not (tmp_path / "out" / "models.md").exists()
    assert not ledger.ledger_path(study).exists() and study.skill_dir.is_dir()
    # rerunning resumes: the same top directory is accepted, every model runs to a summary
    lines, _ = _run(study, tmp_path / "out", FakeRunner(SPECS))
    assert any(line.startswith("MATRIX DECISION") for line in lines)


def test_a_shard_writes_the_summary_but_never_the_ledger(make_study: StudyFactory, tmp_path: Path) -> None:
    study = _matrix(make_study)
    lines, _ = _run(study, tmp_path / "out", FakeRunner(SPECS), shard=(1, 2))
    meta = read_matrix_meta(tmp_path / "out")
    assert meta is not None and meta.shard == "1/2"
    assert not any(line.startswith("ledger ") for line in lines) and not ledger.ledger_path(study).exists()


def test_another_lock_or_a_single_experiment_refuses_the_top_directory(
    make_study: StudyFactory, tmp_path: Path
) -> None:
    study = _matrix(make_study)
    out = tmp_path / "out"
    _run(study, out, FakeRunner(SPECS), shard=(1, 2))
    with pytest.raises(ResumeError, match="was run as shard 1/2"):
        _run(study, out, FakeRunner(SPECS))
    data = (out / MATRIX_JSON).read_text().replace(verify_lock(study).sha256, "ab" * 32)
    (out / MATRIX_JSON).write_text(data)
    with pytest.raises(ResumeError, match="not this preregistration's lock"):
        _run(study, out, FakeRunner(SPECS), shard=(1, 2))
    single = tmp_path / "single"
    single.mkdir()
    (single / "experiment.json").write_text('{"lock_hash": "x"}')
    with pytest.raises(ResumeError, match="single-model experiment"):
        _run(study, single, FakeRunner(SPECS))


def test_baseline_reuse_looks_into_earlier_matrices(tmp_path: Path) -> None:
    results = tmp_path / "harness-results"
    (results / "tidy-aaa" / "models").mkdir(parents=True)
    (results / "tidy-aaa" / MATRIX_JSON).write_text("{}")
    (results / "tidy-bbb").mkdir()
    assert reuse_sources([results]) == (results, results / "tidy-aaa" / "models")
    assert reuse_sources([results / "tidy-aaa"]) == (results / "tidy-aaa", results / "tidy-aaa" / "models")


def test_each_model_is_given_the_expanded_reuse_sources(make_study: StudyFactory, tmp_path: Path) -> None:
    study = _matrix(make_study)
    earlier = tmp_path / "earlier"
    _run(study, earlier, FakeRunner(SPECS), shard=(1, 2))
    runner = FakeRunner(SPECS)
    _run(study, tmp_path / "out", runner, reuse_from=(earlier,))
    assert {c[2] for c in runner.calls} == {(earlier, earlier / "models")}


def test_report_rerenders_every_model_and_the_summary(
    make_study: StudyFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = _matrix(make_study)
    out = tmp_path / "out"
    _run(study, out, FakeRunner(SPECS))
    (out / "models.md").unlink()
    (model_dir(out, "sonnet") / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "sonnet: INCONCLUSIVE (point rule)" in printed and "MATRIX DECISION" in printed
    assert (out / "models.md").is_file() and (model_dir(out, "sonnet") / "report.md").is_file()


def _split(records: Sequence[Any], specs: Sequence[plan.TrialSpec], i: int) -> list[Any]:
    owner = {s.trial_id: plan.shard_of(s, 2) for s in specs}
    return [r for r in records if owner[r.trial_id] == i]


def test_merge_combines_a_sharded_matrix_model_by_model_and_gates_it(
    make_study: StudyFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = _matrix(make_study)
    lock_hash = verify_lock(study).sha256
    planned = plan.plan_trials(study.target_tasks(), 1, study.prereg.execution.seed)
    shards = []
    for i in (1, 2):
        top = tmp_path / f"shard{i}"
        from harness.results.matrix import MatrixMeta, write_matrix_meta

        write_matrix_meta(top, MatrixMeta.start(study, lock_hash, shard=f"{i}/2", mode="scripted"))
        for model, spec in SPECS.items():
            sub = model_dir(top, model)
            sub.mkdir(parents=True)
            write_meta(sub, ExperimentMeta.start(lock_hash, preregistration=str(study.prereg_path), skill="tidy",
                                                 shard=f"{i}/2", mode="scripted", model=model))  # fmt: skip
            records = outcome_records(spec, prov=provenance(OUTCOME_PROV, lock_hash=lock_hash, model=model))
            part = [r.model_copy(update={"shard": f"{i}/2"}) for r in _split(records, planned, i)]
            (sub / RESULTS).write_text("".join(r.model_dump_json() + "\n" for r in part))
        shards.append(top)
    merged = tmp_path / "merged"
    assert main(["merge", str(merged), *map(str, shards)]) == 0
    printed = capsys.readouterr().out
    assert "sonnet: merged 2 shard(s), 4 result line(s): INCONCLUSIVE" in printed
    meta = read_matrix_meta(merged)
    assert meta is not None and meta.shard is None and meta.merged_from is not None
    assert (merged / "models.md").is_file()
    assert main(["gate", str(merged)]) == 1
    assert main(["merge", str(tmp_path / "half"), str(shards[0])]) == 4, "a missing shard is refused"
    assert not (tmp_path / "half").exists(), "before anything is written"
    broken = tmp_path / "broken"
    shutil.copytree(shards[1], broken)
    (model_dir(broken, "claude-opus-4-1") / RESULTS).write_text("")  # the second model's half missing
    assert main(["merge", str(tmp_path / "partial"), str(shards[0]), str(broken)]) == 4
    assert not (tmp_path / "partial").exists(), "the first model's merge is not written either"
    data = yaml.safe_load((model_dir(merged, "sonnet") / "experiment.json").read_text())
    assert data["model"] == "sonnet"
