"""Resume safety without Docker: what refuses to resume, what is final, what a killed run left behind."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ResumeError
from harness.experiment.experiment import Experiment
from harness.experiment.options import RunOptions
from harness.experiment.resume import SkippedRecords, plan_remaining
from harness.host.workroots import OWNER_FILE
from harness.plan import ShardRef, plan_trials
from harness.records import ReusedFrom
from harness.results.attempts import DuplicateAttemptError, is_final, latest_by_trial, spent_usd, stops
from harness.results.identity import RecordIdentity
from harness.sandbox.reaper import sweep_work_root
from harness.study.config import load_study
from harness.study.lock import lock
from tests.factories import PROV, TASKS, make_record, write_experiment_dir
from tests.fakes import FakeRuntime

KEY = "sk-ant-test-resume"
"""A real run's key (the study is admitted, lock and key, before the resume checks)."""


def _run(study_files: Any, out: Path, **options: Any) -> None:
    """Run the experiment on the fake runtime: resume checks happen before any engine call."""
    runtime = FakeRuntime()
    try:
        options.setdefault("api_key", KEY)
        Experiment(load_study(study_files.prereg), runtime, RunOptions(out=out, jobs=1, **options)).run()
    finally:
        assert runtime.calls == [], f"the engine was used before the checks: {runtime.calls[:3]}"


def _write_meta(out: Path, **meta: Any) -> None:
    write_experiment_dir(out, meta)


def test_a_changed_lock_refuses_to_resume(make_study: Any, tmp_path: Path) -> None:
    files = make_study()
    lock(files.prereg)
    out = tmp_path / "out"
    _write_meta(out, lock_hash="0" * 64, shard=None, mode="real")
    with pytest.raises(ResumeError, match="holds experiment 000000000000, not this preregistration's lock"):
        _run(files, out)


def test_another_shard_refuses_to_resume(make_study: Any, tmp_path: Path) -> None:
    files = make_study()
    digest, _ = lock(files.prereg)
    out = tmp_path / "out"
    _write_meta(out, lock_hash=digest, shard="1/2", mode="real")
    with pytest.raises(ResumeError, match="was run as shard 1/2, not 2/2"):
        _run(files, out, shard=ShardRef(2, 2))


def test_scripted_and_real_trials_never_share_a_directory(make_study: Any, tmp_path: Path) -> None:
    files = make_study()
    digest, _ = lock(files.prereg)
    out = tmp_path / "out"
    _write_meta(out, lock_hash=digest, shard=None, mode="scripted")
    with pytest.raises(ResumeError, match="scripted model, not the real one"):
        _run(files, out)


def test_lines_of_another_lock_refuse_to_resume(make_study: Any, tmp_path: Path) -> None:
    files = make_study()
    digest, _ = lock(files.prereg)
    out = tmp_path / "out"
    _write_meta(out, lock_hash=digest, shard=None, mode="real")
    spec = plan_trials(TASKS, 1, seed=1)[0]
    (out / "results.jsonl").write_text(make_record(spec, 1).model_dump_json() + "\n")  # PROV has another lock
    with pytest.raises(ResumeError, match="holds 1 line"):
        _run(files, out)


def test_an_edited_preregistration_is_refused_before_anything_runs(make_study: Any, tmp_path: Path) -> None:
    from harness.errors import LockError

    files = make_study()
    lock(files.prereg)
    files.prereg.write_text(files.prereg.read_text().replace("runs_per_arm: 2", "runs_per_arm: 3"))
    with pytest.raises(LockError, match="edited after it was locked"):
        _run(files, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_final_means_an_outcome_or_retries_used_up() -> None:
    spec = plan_trials(TASKS, 1, seed=1)[0]
    assert is_final(make_record(spec, 1, "completed"), 2)
    assert is_final(make_record(spec, 1, "agent_error"), 2)
    assert not is_final(make_record(spec, 2, "infra_error"), 2)
    assert is_final(make_record(spec, 3, "infra_error"), 2)
    assert is_final(make_record(spec, 1, "skipped"), 2)


def test_latest_attempt_wins_and_ties_are_refused() -> None:
    spec = plan_trials(TASKS, 1, seed=1)[0]
    a1 = make_record(spec, 1, "infra_error")
    a2 = make_record(spec, 2, "completed")
    assert latest_by_trial([a2, a1])[spec.trial_id] is a2
    dup = make_record(spec, 2, "agent_error")
    with pytest.raises(DuplicateAttemptError, match="attempt 2"):  # issue 12: never settled by file order
        latest_by_trial([a1, a2, dup])


def test_stops_and_spend_are_read_from_the_records() -> None:
    specs = plan_trials(TASKS, 1, seed=1)
    ran = make_record(specs[0], 1, cost=0.3)
    budget = make_record(specs[1], 1, "skipped", 0).model_copy(update={"stopped_by": "budget"})
    early = make_record(specs[2], 1, "skipped", 0).model_copy(update={"stopped_by": "early_stop"})
    legacy = make_record(specs[3], 1, "skipped", 0)
    reused = make_record(specs[4], 1, cost=7.0).model_copy(
        update={"reused_from": ReusedFrom(experiment_id="e0", lock_hash="l0", directory="/d")}
    )
    assert stops([ran, early]) == (False, True)
    assert stops([ran, budget]) == (True, False)
    assert stops([ran, legacy]) == (True, False), "a skipped line from before stopped_by existed is a budget stop"
    assert spent_usd([ran, reused]) == pytest.approx(0.3)
    assert PROV.lock_hash  # the helper's provenance is what the records carry


def test_sweep_removes_run_directories_of_dead_controllers_only(tmp_path: Path) -> None:
    host = socket.gethostname()
    dead = tmp_path / "deadbeef"
    (dead / "t1" / "base").mkdir(parents=True)
    (dead / "skill").mkdir()
    (dead / "skill" / "SKILL.md").write_text("x")
    os.chmod(dead / "skill", 0o555)
    (dead / OWNER_FILE).write_text(f"999999 {host}\n")
    alive = tmp_path / "cafe"
    alive.mkdir()
    (alive / OWNER_FILE).write_text(f"{os.getpid()} {host}\n")
    other_host = tmp_path / "f00d"
    other_host.mkdir()
    (other_host / OWNER_FILE).write_text("999999 some-other-host\n")
    unknown = tmp_path / "0123"
    unknown.mkdir()
    removed = sweep_work_root(tmp_path, alive=lambda pid: pid != 999999)
    assert removed == 1
    assert not dead.exists() and alive.exists() and other_host.exists() and unknown.exists()


def test_what_is_left_is_every_planned_trial_without_a_final_record() -> None:
    specs = plan_trials(TASKS, 1, seed=1)
    done, retry, broken = specs[0], specs[1], specs[2]
    records = [make_record(done, 1), make_record(retry, 1, "infra_error"), make_record(broken, 3, "infra_error")]
    left = plan_remaining(specs, records, max_infra_retries=2)
    assert [s.trial_id for s in left.todo] == [s.trial_id for s in specs if s not in (done, broken)]
    assert {r.trial_id for r in left.finals} == {done.trial_id, broken.trial_id}
    assert left.retries == 1
    assert left.note(len(specs)) == (
        f"resuming: 2 of {len(specs)} trial(s) have a final record; {len(specs) - 2} to run "
        "(1 retry of infrastructure failures)"
    )
    assert plan_remaining(specs, [], 2).note(len(specs)) is None, "a fresh directory does not resume"


def test_a_resumed_installed_delivery_run_shares_the_verify_results_it_already_has(
    make_study: Any, tmp_path: Path
) -> None:
    """The identical-patch cache is seeded from the directory's records of this run's provenance; an
    installed-delivery record's carries what its trial observed of the skill listing, which the run's does
    not know before any trial: it is still this run's record."""
    from harness.records import PatchInfo
    from harness.redact import Redactor
    from harness.results.store import ExperimentDir
    from harness.sandbox.images import ImageSet
    from harness.study.config import load_study
    from harness.study.lock import lock
    from harness.trial import samepatch

    files = make_study()
    lock(files.prereg)
    study = load_study(files.prereg)
    run = PROV.model_copy(update={"delivery": "installed"})
    spec = plan_trials(study.target_tasks(), 1, seed=1)[0]
    seen = RecordIdentity.of_run(run).of(spec, 1, observed={"listing_sha256": "a" * 64, "delivery_check": "ok"})
    patch = PatchInfo(sha256="p" * 64, bytes=1, files_changed=1, insertions=1, deletions=0)
    rec = make_record(spec, 1).model_copy(update={"provenance": seen["provenance"], "patch": patch})
    store = ExperimentDir(tmp_path / "o", Redactor([]))
    store.results.append(rec)
    images = ImageSet("b", "r", "s", "harness-trial:x", "sha256:t", "sha256:s", "2.1.332")
    timeout_s = study.prereg.execution.budgets.verify_timeout_s
    same = samepatch.SamePatch.seeded(
        store.results.read().records, study.target_tasks(), run, verify_image=images.trial, verify_timeout_s=timeout_s
    )
    key = samepatch.verify_key(spec.task, run.base_sha, images.trial, patch.sha256, timeout_s)

    def not_again() -> Any:
        raise AssertionError("verified again: the record's result was not seeded")

    assert same.verify.get(key, "t.other.0", not_again).source == rec.trial_id


def test_a_skipped_baseline_record_carries_its_fingerprint_from_birth() -> None:
    specs = plan_trials(TASKS, 1, seed=1)
    fingerprints = {t.id: f"fp-{t.id}" for t in TASKS}
    make = SkippedRecords(RecordIdentity("e1", PROV, None, fingerprints))
    for spec in specs:
        rec = make(spec, 1, "budget", "the budget is reached")
        assert rec.status == "skipped" and rec.stopped_by == "budget" and rec.error == "the budget is reached"
        assert rec.baseline_fingerprint == (f"fp-{spec.task.id}" if spec.arm == "baseline" else None)


def test_the_events_hear_finished_when_the_run_is_refused(make_study: Any, tmp_path: Path) -> None:
    from harness.experiment.events import NullEvents

    class Finished(NullEvents):
        calls = 0

        def finished(self) -> None:
            Finished.calls += 1

    files = make_study()
    lock(files.prereg)
    out = tmp_path / "out"
    _write_meta(out, lock_hash="0" * 64, shard=None, mode="real")
    exp = Experiment(load_study(files.prereg), FakeRuntime(), RunOptions(out=out, jobs=1, api_key=KEY), Finished())
    with pytest.raises(ResumeError):
        exp.run()
    assert Finished.calls == 1, "a live display stops however the run ends"
