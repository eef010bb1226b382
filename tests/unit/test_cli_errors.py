"""harness.cli: bad input gives a plain message and the right exit code, never a traceback."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import cli
from harness.experiment.options import RunOptions
from harness.study.lock import lock
from tests.factories import DEFAULT_PREREG, StudyFactory, StudyFiles

KEY_ENV = {"ANTHROPIC_API_KEY": "sk-ant-test-key-not-real-0123456789"}


@pytest.fixture(autouse=True)
def _restore_sigterm() -> Iterator[None]:
    """main() installs a SIGTERM handler; do not leave it in the test process."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in these tests may reach an engine: every refusal here comes before one exists (the lock and the
    key are admitted first: harness.experiment.experiment.admit)."""

    def no_engine(*args: object, **kwargs: object) -> None:
        raise AssertionError("an Engine was constructed")

    monkeypatch.setattr("harness.sandbox.engine.Engine", no_engine)
    monkeypatch.setattr("harness.experiment.experiment.Engine", no_engine)


@pytest.fixture
def locked(make_study: StudyFactory) -> StudyFiles:
    s = make_study()
    lock(s.prereg)
    return s


def run(capsys: pytest.CaptureFixture[str], *argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    code = cli.main(list(argv), env={} if env is None else env)
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(err: str, *words: str) -> None:
    assert err.startswith("skilltrial: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------- lock


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda t: t.replace("  model: sonnet", "  modle: sonnet"), ["preregistration.yaml", "execution.modle"]),
        (lambda t: t.replace("skill_ref: skill\n", ""), ["preregistration.yaml", "skill_ref", "missing"]),
        (lambda t: t.replace("judge_model: haiku", "judge_model: sonnet"), ["execution.judge_model"]),
        (lambda t: t.replace("target_tasks: all", "target_tasks: [t1, nope]"), ["target_tasks[1]", "'nope'"]),
        (lambda t: t.replace("skill: tidy", "skill: [tidy"), ["preregistration.yaml", "malformed YAML", "line"]),
        (lambda t: t + "  base_ref: no-such-ref\n", ["execution.base_ref", "no-such-ref"]),
    ],
)
def test_lock_bad_prereg(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str], edit: Callable[[str], str], words: list[str]
) -> None:
    s = make_study(prereg=edit(DEFAULT_PREREG))
    before = snapshot(s.root)
    code, out, err = run(capsys, "lock", str(s.prereg))
    assert code == 4
    assert_clean_error(err, str(s.prereg.resolve().parent), *words)
    assert out == ""
    assert snapshot(s.root) == before  # nothing half-written, no temp files


def test_lock_bad_tasks_names_tasks_file(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = [{"id": "t1", "prompt": "real work", "verify_cmd": ""}]
    s = make_study(tasks=tasks)
    before = s.prereg.read_bytes()
    code, _, err = run(capsys, "lock", str(s.prereg))
    assert code == 4
    assert_clean_error(err, "tasks.json", "field 'tasks[0].verify_cmd'")
    assert s.prereg.read_bytes() == before


def test_lock_malformed_tasks_json(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(tasks='{"tasks": [\n  {"id": "t1",\n}')
    code, _, err = run(capsys, "lock", str(s.prereg))
    assert code == 4
    assert_clean_error(err, "tasks.json", "malformed JSON", "line 3")


def test_lock_symlink_in_skill(make_study: StudyFactory, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    s = make_study()
    (tmp_path / "secret").write_text("key")
    (s.skill / "link").symlink_to(tmp_path / "secret")
    before = s.prereg.read_bytes()
    code, _, err = run(capsys, "lock", str(s.prereg))
    assert code == 4
    assert_clean_error(err, "symlink", "skill_ref")
    assert s.prereg.read_bytes() == before


def test_eval_refuses_a_skill_that_gained_a_symlink_after_locking(
    locked: StudyFiles, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "secret").write_text("key")
    (locked.skill / "link").symlink_to(tmp_path / "secret")
    code, _, err = run(capsys, "eval", str(locked.prereg), env=KEY_ENV)
    assert code == 4
    assert_clean_error(err, "symlink")


def test_lock_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere" / "preregistration.yaml"
    code, _, err = run(capsys, "lock", str(missing))
    assert code == 4
    assert_clean_error(err, str(missing), "file not found")


def test_lock_success(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study()
    code, out, err = run(capsys, "lock", str(s.prereg))
    assert code == 0
    assert out.startswith("locked ")
    assert s.base_sha[:12] in out
    assert err == ""
    assert s.prereg.with_name("preregistration.yaml.lock").is_file()
    assert "\nlock:" not in s.prereg.read_text()  # the preregistration is never rewritten


def test_debug_shows_the_traceback(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=DEFAULT_PREREG.replace("  model: sonnet", "  modle: sonnet"))
    code, _, err = run(capsys, "--debug", "lock", str(s.prereg))
    assert code == 4
    assert "Traceback" in err
    assert "skilltrial: error: " in err


# ---------------------------------------------------------------------------------- eval


def test_eval_bad_prereg(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=DEFAULT_PREREG.replace("runs_per_arm: 2", "runs_per_arm: many"))
    code, _, err = run(capsys, "eval", str(s.prereg), env=KEY_ENV)
    assert code == 4
    assert_clean_error(err, "preregistration.yaml", "execution.runs_per_arm")


def test_eval_missing_target_task(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=DEFAULT_PREREG.replace("target_tasks: all", "target_tasks: [t1, t2, t7]"))
    code, _, err = run(capsys, "eval", str(s.prereg), env=KEY_ENV)
    assert code == 4
    assert_clean_error(err, "preregistration.yaml", "target_tasks[2]")


def test_eval_unlocked(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study()
    code, _, err = run(capsys, "eval", str(s.prereg), env=KEY_ENV)
    assert code == 4
    assert_clean_error(err, "not locked", "skilltrial lock")


def test_eval_changed_after_lock(locked: StudyFiles, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(locked.tasks.read_text())
    data["tasks"][0]["prompt"] = "something else entirely"
    locked.tasks.write_text(json.dumps(data))
    code, _, err = run(capsys, "eval", str(locked.prereg), env=KEY_ENV)
    assert code == 4
    assert_clean_error(err, "changed since lock", "tasks")


def test_eval_without_api_key(
    locked: StudyFiles, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-host-environment-123")  # env is injected, not read
    code, out, err = run(capsys, "eval", str(locked.prereg), env={"PATH": "/usr/bin"})
    assert code == 5
    assert_clean_error(err, "ANTHROPIC_API_KEY")
    assert out == ""


def test_eval_with_empty_api_key(locked: StudyFiles, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "eval", str(locked.prereg), env={"ANTHROPIC_API_KEY": ""})
    assert code == 5
    assert_clean_error(err, "ANTHROPIC_API_KEY")


@pytest.mark.parametrize("shard", ["0/3", "5/4", "x", "1/0", "2-4"])
def test_eval_bad_shard(locked: StudyFiles, capsys: pytest.CaptureFixture[str], shard: str) -> None:
    code, _, err = run(capsys, "eval", str(locked.prereg), "--shard", shard, env=KEY_ENV)
    assert code == 4
    assert_clean_error(err, "--shard", "shard")


def test_eval_scripted_needs_no_key(
    locked: StudyFiles, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, object] = {}

    def fake_evaluate(study: object, options: RunOptions, events: object) -> list[str]:
        seen.update(vars(options))
        return []

    monkeypatch.setattr("harness.experiment.evaluate.evaluate", fake_evaluate)
    scenario = tmp_path / "scenario.yaml"
    code, _, err = run(
        capsys, "eval", str(locked.prereg), "--scripted", str(scenario), "--shard", "2/3", "--out", str(tmp_path / "o")
    )
    assert code == 0, err
    assert seen["api_key"] is None
    assert seen["scripted"] == scenario
    assert seen["shard"] == (2, 3)
    assert seen["env"] == {}


def test_eval_skill_mismatch(locked: StudyFiles, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    other = tmp_path / "other-skill"
    other.mkdir()
    code, _, err = run(capsys, "eval", str(locked.prereg), "--skill", str(other), env=KEY_ENV)
    assert code == 4
    assert_clean_error(err, "skill_ref")


def test_eval_no_prereg_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "eval", env=KEY_ENV)
    assert code == 4
    assert_clean_error(err, "preregistration.yaml", "no preregistration")


def test_eval_finds_prereg_in_skill_folder(
    locked: StudyFiles, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--skill without a path looks for <skill>/preregistration.yaml (here absent: then ./preregistration.yaml)."""
    monkeypatch.chdir(locked.root)
    code, _, err = run(capsys, "eval", "--skill", str(locked.skill), env={})
    assert code == 5  # found ./preregistration.yaml, lock verified, stopped at the missing key
    assert_clean_error(err, "ANTHROPIC_API_KEY")


# ---------------------------------------------------------------------------------- help


def subcommands() -> list[str]:
    return sorted(cli.COMMANDS)


@pytest.mark.parametrize("command", subcommands())
def test_help_of_every_subcommand(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"], env={})
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: skilltrial {command}")


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"], env={})
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in subcommands():
        assert command in out
    assert "exit codes" in out


def test_unknown_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["frobnicate"], env={})
    assert info.value.code == 4
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["gate", "--bogus"], ["nonsense"], ["eval", "--jobs", "many"]])
def test_usage_errors_exit_4_never_2_which_gate_uses_for_inconclusive(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv, env={})
    assert info.value.code == 4
    assert "error:" in capsys.readouterr().err


def test_eval_shows_what_evaluate_returns_and_evaluate_itself_prints_nothing(
    locked: StudyFiles, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from harness.experiment.progress import Progress

    got: dict[str, object] = {}

    def fake_evaluate(study: object, options: RunOptions, events: object) -> list[str]:
        got["events"], got["paths"] = events, options.paths
        return ["", "DECISION: REJECT", "ledger: recorded"]

    monkeypatch.setattr("harness.experiment.evaluate.evaluate", fake_evaluate)
    code, out, err = run(
        capsys, "eval", str(locked.prereg), "--scripted", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o")
    )
    assert code == 0, err
    assert out.endswith("\nDECISION: REJECT\nledger: recorded\n")
    assert isinstance(got["events"], Progress), "the CLI chooses the display"
    assert got["paths"] is not None, "the CLI passes the host paths it read once"
