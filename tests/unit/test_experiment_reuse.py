"""Baseline reuse without Docker: the fingerprint, which records qualify, and the adopted copy."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.decide import decide
from harness.analysis.estimates import analyze
from harness.analysis.observations import context_from_records, observations_from_records
from harness.experiment import reuse
from harness.plan import plan_trials
from harness.records import ReusedFrom, TrialRecord
from harness.results.identity import RecordIdentity
from harness.study.config import DecisionSettings, Execution, Task
from tests.factories import PROV, TASKS, make_record

EX = Execution()


def _settings(**over: Any) -> dict[str, Any]:
    base = reuse.baseline_settings(
        EX, provenance=PROV, pass_rule="verify_and_judge", sidecar_image="sha256:side", runtime=None, upstream="u"
    )
    return {**base, **over}


TASK = Task(id="t0", prompt="fix it", verify_cmd="make test", pass_criteria="tests pass", protected_paths=("tests",))


def test_fingerprint_is_stable_and_ignores_the_skill_and_the_lock() -> None:
    fp = reuse.baseline_fingerprint(_settings(), TASK)
    assert fp == reuse.baseline_fingerprint(_settings(), TASK)
    other_lock = PROV.model_copy(update={"lock_hash": "x" * 64})
    same = reuse.baseline_settings(
        EX, provenance=other_lock, pass_rule="verify_and_judge", sidecar_image="sha256:side", runtime=None, upstream="u"
    )
    assert reuse.baseline_fingerprint(same, TASK) == fp, "the lock covers the skill; the baseline fingerprint must not"
    budgets = EX.budgets.model_copy(update={"total_usd": 99.0})
    assert (
        reuse.baseline_fingerprint(
            reuse.baseline_settings(
                EX.model_copy(update={"budgets": budgets}),
                provenance=PROV,
                pass_rule="verify_and_judge",
                sidecar_image="sha256:side",
                runtime=None,
                upstream="u",
            ),
            TASK,
        )
        == fp
    ), "the experiment's cumulative cap does not shape a trial"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("base_sha", "c" * 40),
        ("model", "opus"),
        ("judge_model", "sonnet"),
        ("cli_version", "2.2.0"),
        ("image_digest", "sha256:other"),
        ("sidecar_image", "sha256:other"),
        ("prompt_template_sha256", "q" * 64),
        ("harness_version", "9"),
        ("allowed_tools", ["Bash"]),
        ("budgets", {**EX.budgets.model_dump(mode="json", exclude={"total_usd"}), "timeout_s": 1}),
        ("resources", {**EX.resources.model_dump(mode="json"), "cpus": 2.0}),
        ("pass_rule", "verify"),
        ("runtime", "runsc"),
        ("upstream", "scripted:abc"),
    ],
)
def test_every_baseline_setting_changes_the_fingerprint(field: str, value: Any) -> None:
    assert reuse.baseline_fingerprint(_settings(**{field: value}), TASK) != reuse.baseline_fingerprint(
        _settings(), TASK
    )


def test_what_the_base_tree_is_made_without_changes_the_fingerprint_only_when_there_is_any() -> None:
    """A baseline that ran on the whole tree (the skill and the tasks in it) is not one that ran without them;
    with nothing left out the fingerprint is what it was before the field existed."""
    kwargs: dict[str, Any] = dict(pass_rule="verify_and_judge", sidecar_image="sha256:side", runtime=None, upstream="u")
    plain = reuse.baseline_settings(EX, provenance=PROV, **kwargs)
    assert "base_excluded" not in plain
    assert reuse.baseline_settings(EX, provenance=PROV, base_excluded=(), **kwargs) == plain
    left_out = reuse.baseline_settings(EX, provenance=PROV, base_excluded=("skills/tasks.json",), **kwargs)
    assert reuse.baseline_fingerprint(left_out, TASK) != reuse.baseline_fingerprint(plain, TASK)


@pytest.mark.parametrize(
    "change",
    [
        {"prompt": "fix it now"},
        {"verify_cmd": "make check"},
        {"pass_criteria": "x"},
        {"timeout_s": 5},
        {"protected_paths": ()},
    ],
)
def test_every_task_field_changes_the_fingerprint(change: dict[str, Any]) -> None:
    assert reuse.baseline_fingerprint(_settings(), TASK.model_copy(update=change)) != reuse.baseline_fingerprint(
        _settings(), TASK
    )


def test_scripted_views_drop_the_skill_arm_only() -> None:
    compiled = {
        "seed": 1,
        "skill_marker": "m1",
        "tasks": {"t0": {"prompt": "p", "arms": {"baseline": {"p_success": 0.3}, "skill": {"p_success": 0.9}}}},
    }
    other_skill = json.loads(json.dumps(compiled))
    other_skill["skill_marker"] = "m2"
    other_skill["tasks"]["t0"]["arms"]["skill"] = {"p_success": 0.1}
    a = reuse.scripted_views(json.dumps(compiled).encode())
    b = reuse.scripted_views(json.dumps(other_skill).encode())
    assert a == b
    changed = json.loads(json.dumps(compiled))
    changed["tasks"]["t0"]["arms"]["baseline"]["p_success"] = 0.5
    assert reuse.scripted_views(json.dumps(changed).encode()).tasks != a.tasks


def _source(tmp_path: Path, name: str, records: list[TrialRecord]) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    return d


def test_select_takes_matching_final_baseline_outcomes_only(tmp_path: Path) -> None:
    specs = {s.trial_id: s for s in plan_trials(TASKS, 2, seed=1)}
    fp = "f" * 64
    b = [s for s in specs.values() if s.arm == "baseline"]
    good = make_record(b[0], 1).model_copy(update={"baseline_fingerprint": fp})
    infra = make_record(b[1], 1, "infra_error").model_copy(update={"baseline_fingerprint": fp})
    wrong_fp = make_record(b[2], 1).model_copy(update={"baseline_fingerprint": "0" * 64})
    skipped = make_record(b[3], 1, "skipped").model_copy(update={"baseline_fingerprint": fp, "stopped_by": "budget"})
    src = _source(tmp_path, "a", [good, infra, wrong_fp, skipped])
    wanted = {r.trial_id: fp for r in (good, infra, wrong_fp, skipped)}
    chosen = reuse.select(wanted, reuse.experiment_dirs([tmp_path]), PROV)
    assert set(chosen.found) == {good.trial_id}
    assert chosen.found[good.trial_id].directory == src
    assert chosen.missed == {
        infra.trial_id: "its last attempt ended infra_error, not with an outcome",
        wrong_fp.trial_id: "its baseline fingerprint differs (its directory does not record what went into it: "
        "an earlier harness)",
        skipped.trial_id: "its last attempt ended skipped, not with an outcome",
    }


def test_select_refuses_other_provenance_even_with_the_same_fingerprint(tmp_path: Path) -> None:
    spec = next(s for s in plan_trials(TASKS, 1, seed=1) if s.arm == "baseline")
    rec = make_record(spec, 1).model_copy(update={"baseline_fingerprint": "f" * 64})
    _source(tmp_path, "a", [rec])
    other = PROV.model_copy(update={"cli_version": "9.9.9"})
    chosen = reuse.select({spec.trial_id: "f" * 64}, [tmp_path / "a"], other)
    assert chosen.found == {}
    assert chosen.missed == {spec.trial_id: "Claude Code version 2.1.332 -> 9.9.9"}
    assert reuse.select({spec.trial_id: "f" * 64}, [tmp_path / "a"], PROV.model_copy(update={"lock_hash": "z"})).found


def test_an_installed_delivery_baseline_is_reused_although_its_trial_observed_the_listing(tmp_path: Path) -> None:
    """An installed-delivery record carries what its trial saw of the skill listing in its provenance
    (``listing_sha256``, ``delivery_check``); the run's provenance, made before any trial, cannot know it.
    Reuse compares what the runs share; the decision still compares the listing between the arms."""
    run = PROV.model_copy(update={"delivery": "installed"})
    spec = next(s for s in plan_trials(TASKS, 1, seed=1) if s.arm == "baseline")
    fp = "f" * 64
    identity = RecordIdentity.of_run(run, baseline_fingerprints={spec.task.id: fp})
    seen = identity.of(spec, 1, observed={"listing_sha256": "a" * 64, "delivery_check": "ok"})
    rec = make_record(spec, 1).model_copy(update={"provenance": seen["provenance"], "baseline_fingerprint": fp})
    _source(tmp_path, "a", [rec])
    chosen = reuse.select({spec.trial_id: fp}, [tmp_path / "a"], run)
    assert set(chosen.found) == {spec.trial_id}, chosen.missed
    copy = RecordIdentity.of_run(run.model_copy(update={"lock_hash": "N" * 64})).adopt(rec, "a")
    assert copy.provenance.listing_sha256 == "a" * 64, "the copy keeps what its trial observed"
    other = reuse.select({spec.trial_id: fp}, [tmp_path / "a"], run.model_copy(update={"cli_version": "9.9.9"}))
    assert other.missed == {spec.trial_id: "Claude Code version 2.1.332 -> 9.9.9"}, "what the runs share still counts"


def test_select_uses_the_last_attempt_and_the_first_source(tmp_path: Path) -> None:
    spec = next(s for s in plan_trials(TASKS, 1, seed=1) if s.arm == "baseline")
    fp = "f" * 64
    a1 = make_record(spec, 1).model_copy(update={"baseline_fingerprint": fp})
    a2 = make_record(spec, 2, "infra_error").model_copy(update={"baseline_fingerprint": fp})
    _source(tmp_path, "a", [a1, a2])
    assert reuse.select({spec.trial_id: fp}, [tmp_path / "a"], PROV).found == {}, "the trial's final attempt is infra"
    _source(tmp_path, "b", [a1])
    _source(tmp_path, "c", [a1.model_copy(update={"status": "agent_error"})])
    found = reuse.select({spec.trial_id: fp}, [tmp_path / "b", tmp_path / "c"], PROV).found
    assert found[spec.trial_id].directory == tmp_path / "b"
    excluded = reuse.select({spec.trial_id: fp}, [tmp_path / "b"], PROV, exclude=tmp_path / "b")
    assert excluded.found == {} and excluded.missed == {spec.trial_id: "no record of it"}


def test_a_fingerprint_difference_is_named_by_the_input_the_source_recorded(tmp_path: Path) -> None:
    """Every reuse path names the first input that differs, not only that the fingerprint does."""
    spec = next(s for s in plan_trials(TASKS, 1, seed=1) if s.arm == "baseline")
    then = reuse.BaselineInputs(_settings(), {spec.task.id: reuse.task_parts(spec.task)})
    rec = make_record(spec, 1).model_copy(
        update={"baseline_fingerprint": reuse.baseline_fingerprint(_settings(), spec.task)}
    )
    src = _source(tmp_path, "a", [rec])
    (src / "experiment.json").write_text(json.dumps({"lock_hash": "l" * 64, "baseline_inputs": then.to_json()}))
    budgets = {**EX.budgets.model_dump(mode="json", exclude={"total_usd"}), "timeout_s": 60}
    now_settings = _settings(budgets=budgets)
    now = reuse.BaselineInputs(now_settings, {spec.task.id: reuse.task_parts(spec.task)})
    wanted = {spec.trial_id: reuse.baseline_fingerprint(now_settings, spec.task)}
    chosen = reuse.select(wanted, [src], PROV, inputs=now)
    assert chosen.missed == {spec.trial_id: "budgets.timeout_s 900 -> 60"}
    assert chosen.summary(1) == f"1 of 1: budgets.timeout_s 900 -> 60 ({spec.trial_id})"
    edited = spec.task.model_copy(update={"verify_cmd": "make check"})
    now = reuse.BaselineInputs(_settings(), {spec.task.id: reuse.task_parts(edited)})
    chosen = reuse.select({spec.trial_id: reuse.baseline_fingerprint(_settings(), edited)}, [src], PROV, inputs=now)
    assert chosen.missed[spec.trial_id].startswith("the task's definition in the tasks file ")


@pytest.mark.parametrize(
    ("then", "now", "named"),
    [
        ({"base_sha": "f604634" + "0" * 33}, {"base_sha": "1a2b3c4" + "0" * 33}, "base commit f604634 -> 1a2b3c4"),
        (
            {"image_digest": "sha256:" + "a" * 64},
            {"image_digest": "sha256:" + "b" * 64},
            "trial image sha256:aaaaaaaaaaaa",
        ),
        ({"model": "sonnet", "base_sha": "a" * 40}, {"model": "opus", "base_sha": "b" * 40}, "base commit aaaaaaa"),
        ({"runtime": ""}, {"runtime": "runsc"}, "runtime (none) -> runsc"),
        (
            {"allowed_tools": ["Bash"]},
            {"allowed_tools": ["Bash", "Edit"]},
            'allowed tools ["Bash"] -> ["Bash", "Edit"]',
        ),
        ({"base_excluded": ["a"]}, {}, 'paths left out of the base tree ["a"] -> (none)'),
        ({"x": 1}, {"x": 1}, None),
    ],
)
def test_difference_names_the_first_input_in_order(
    then: dict[str, Any], now: dict[str, Any], named: str | None
) -> None:
    found = reuse.difference(then, now)
    assert (found is None) if named is None else (found is not None and found.startswith(named)), found


def _identity(experiment_id: str, lock_hash: str) -> RecordIdentity:
    """A run's record identity under another lock (everything else of its provenance is PROV's)."""
    return RecordIdentity(experiment_id, PROV.model_copy(update={"lock_hash": lock_hash}))


def test_adopted_copy_joins_the_new_lock_and_names_its_origin() -> None:
    spec = next(s for s in plan_trials(TASKS, 1, seed=1) if s.arm == "baseline")
    rec = make_record(spec, 2).model_copy(update={"baseline_fingerprint": "f" * 64})
    copy = _identity("new", "N" * 64).adopt(rec, "/src")
    assert copy.provenance.lock_hash == "N" * 64 and copy.experiment_id == "new"
    assert copy.reused_from == ReusedFrom(experiment_id="e", lock_hash=PROV.lock_hash, directory="/src")
    assert copy.provenance.model_dump(exclude={"lock_hash"}) == rec.provenance.model_dump(exclude={"lock_hash"})
    assert (copy.attempt, copy.status, copy.agent_cost_usd) == (2, "completed", rec.agent_cost_usd)
    again = _identity("third", "T" * 64).adopt(copy, "/mid")
    assert again.reused_from == copy.reused_from, "a copy of a copy still names where the trial ran"


def _decision_with(records: list[TrialRecord]) -> str:
    settings = DecisionSettings()
    analysis = analyze(observations_from_records(records, settings.pass_rule), settings)
    return decide(analysis, settings, context_from_records(records, 1, False)).verdict


def test_reuse_does_not_make_the_decision_invalid_but_real_provenance_differences_still_do() -> None:
    new_lock = "N" * 64
    records = []
    six = [Task(id=f"t{i}", prompt=f"task {i}", verify_cmd="true") for i in range(7)]  # adoption needs >= 6 tasks
    for spec in plan_trials(six, 1, seed=1):
        rec = make_record(spec, 1, passed=spec.arm == "skill" or spec.task.id == "t0")
        if spec.arm == "baseline":
            rec = _identity("new", new_lock).adopt(rec, "/src")
        else:
            rec = rec.model_copy(update={"provenance": rec.provenance.model_copy(update={"lock_hash": new_lock})})
        records.append(rec)
    assert _decision_with(records) == "adopt"
    tampered = [
        r.model_copy(update={"provenance": r.provenance.model_copy(update={"image_digest": "sha256:old"})})
        if r.reused_from is not None
        else r
        for r in records
    ]
    assert _decision_with(tampered) == "invalid"


def test_artifacts_are_copied_by_content_hash(tmp_path: Path) -> None:
    spec = plan_trials(TASKS, 1, seed=1)[0]
    data = b"diff --git a/x b/x\n"
    digest = hashlib.sha256(data).hexdigest()
    src = tmp_path / "src"
    (src / "artifacts" / digest[:2]).mkdir(parents=True)
    (src / "artifacts" / digest[:2] / digest).write_bytes(data)
    bad = "0" * 64
    (src / "artifacts" / "00").mkdir()
    (src / "artifacts" / "00" / bad).write_bytes(b"corrupted")
    rec = make_record(spec, 1).model_copy(update={"artifacts": {"patch.diff": digest, "verify.log": bad}})
    dst = tmp_path / "dst"
    assert reuse.copy_artifacts(rec, src, dst) == 1
    assert (dst / "artifacts" / digest[:2] / digest).read_bytes() == data
    assert not (dst / "artifacts" / "00" / bad).exists()


def test_the_skill_name_and_its_invocation_rules_do_not_split_baseline_fingerprints() -> None:
    """Found in the merged suite: compile_scenario now records the skill's name (installed delivery),
    which made every skill's baseline fingerprint differ and reuse across skills find nothing."""
    import json

    from harness.experiment.reuse import scripted_views

    def compiled(skill: str) -> bytes:
        return json.dumps(
            {"seed": 1, "skill": skill, "invocation": {skill: {"p_default": 1}}, "tasks": {"t": {"arms": {}}}}
        ).encode()

    assert (
        scripted_views(compiled("careful-fixer")).global_sha256
        == scripted_views(compiled("verbose-planner")).global_sha256
    )
    changed = json.dumps({"seed": 2, "skill": "x", "tasks": {"t": {"arms": {}}}}).encode()
    assert (
        scripted_views(changed).global_sha256 != scripted_views(compiled("x")).global_sha256
    )  # positive control: the seed counts


def test_an_ab_run_says_why_each_baseline_trial_was_not_reused(make_study: Any, tmp_path: Path) -> None:
    """`--reuse-baseline-from` runs what it cannot reuse: the message names the first input that differs."""
    from harness.experiment.events import NullEvents
    from harness.experiment.experiment import Experiment
    from harness.experiment.options import RunOptions
    from harness.redact import Redactor
    from harness.results.store import ExperimentDir
    from harness.study.config import load_study
    from harness.study.lock import lock
    from tests.fakes import FakeRuntime

    class Heard(NullEvents):
        def __init__(self) -> None:
            self.lines: list[str] = []

        def message(self, text: str) -> None:
            self.lines.append(text)

    files = make_study()
    lock(files.prereg)
    specs = [s for s in plan_trials(TASKS, 1, seed=1) if s.arm == "baseline"]
    elsewhere = PROV.model_copy(update={"base_sha": "f604634" + "0" * 33})
    _source(tmp_path, "src", [make_record(s, 1).model_copy(update={"provenance": elsewhere}) for s in specs])
    heard = Heard()
    options = RunOptions(out=tmp_path / "o", jobs=1, reuse_from=(tmp_path / "src",))
    run = Experiment(load_study(files.prereg), FakeRuntime(), options, heard)
    here = PROV.model_copy(update={"base_sha": "1a2b3c4" + "0" * 33})
    store = ExperimentDir(tmp_path / "o", Redactor([]))
    identity = RecordIdentity.of_run(here, baseline_fingerprints={s.task.id: "f" * 64 for s in specs})
    reused, note = run._reuse(store, specs, {}, identity)
    assert reused == () and len(specs) == 3
    assert note == (
        "baseline reuse: 0 of 3 baseline trial(s) copied from 0 earlier experiment(s); 3 to run (not reused: "
        "3 of 3: base commit f604634 -> 1a2b3c4 (t0.baseline.0, t1.baseline.0, t2.baseline.0))"
    )
