"""Issue 13's corpus: every reproduced bad input to `skilltrial lock` ends as one clean error (exit 4) naming
the file and the field, never a traceback, a hang or a write; every valid YAML style locks and verifies."""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml

from harness import cli
from harness.errors import ConfigError, LockError
from harness.experiment.experiment import Experiment
from harness.experiment.options import RunOptions
from harness.study.config import TASK_TEXT_MAX_BYTES, load_study, lock_path, parse_preregistration, parse_tasks
from harness.study.lock import LOCK_COMMENT, lock, lock_digest, verify_lock
from tests.factories import DEFAULT_PREREG, DEFAULT_TASKS, StudyFactory, StudyFiles
from tests.fakes import FakeRuntime

HANG_BACKSTOP_S = 60  # not a timing assertion: a hang fails the test instead of blocking the suite


@pytest.fixture(autouse=True)
def _restore_sigterm_and_alarm() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGTERM, previous)


def _hang(signum: int, frame: FrameType | None) -> None:
    raise AssertionError(f"skilltrial lock still running after {HANG_BACKSTOP_S}s: it hangs")


def run_lock(capsys: pytest.CaptureFixture[str], prereg: Path) -> tuple[int, str]:
    signal.signal(signal.SIGALRM, _hang)
    signal.alarm(HANG_BACKSTOP_S)
    try:
        code = cli.main(["lock", str(prereg)], env={})
    finally:
        signal.alarm(0)
    _, err = capsys.readouterr()
    return code, err


def snapshot(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        if ".git" in p.parts:
            continue
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            out[str(p.relative_to(root))] = "-> " + os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            out[str(p.relative_to(root))] = p.read_bytes()
        else:
            out[str(p.relative_to(root))] = f"mode {stat.S_IFMT(st.st_mode):o}"
    return out


def assert_refused(capsys: pytest.CaptureFixture[str], s: StudyFiles, file: str, field: str | None, *words: str) -> str:
    before = snapshot(s.root)
    code, err = run_lock(capsys, s.prereg)
    assert code == 4, err
    assert err.startswith("skilltrial: error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) <= 2, err
    assert file in err, err
    if field is not None:
        assert f"field '{field}'" in err, err
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    assert snapshot(s.root) == before, "a refused input must leave every file as it was"
    assert not os.path.lexists(lock_path(s.prereg))
    return err


def prereg_with(extra: str = "", **replace: str) -> str:
    text = DEFAULT_PREREG
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text + extra


def tasks_json(**fields: Any) -> str:
    tasks = [dict(t) for t in DEFAULT_TASKS]
    tasks[0].update(fields)
    return json.dumps({"tasks": tasks})


# ------------------------------------------------------------------------ 1. tracebacks


def test_deeply_nested_tasks_json(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(tasks="[" * 100_000)
    assert_refused(capsys, s, "tasks.json", None, "nested more than")


def test_deeply_nested_tasks_json_inside_a_valid_file(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_study(tasks=tasks_json(pass_criteria=None).replace("null", "[" * 5000 + "]" * 5000))
    assert_refused(capsys, s, "tasks.json", None, "nested more than")


def test_deep_flow_yaml(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with("side_effects_to_watch: " + "[" * 100_000 + "]" * 100_000 + "\n"))
    assert_refused(capsys, s, "preregistration.yaml", None, "malformed YAML", "nested more than")


def test_deep_block_yaml(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    # 3000 nested block sequences on one line, and 3000 nested block mappings with one-space indents
    s = make_study(prereg=prereg_with("side_effects_to_watch:\n  " + "- " * 3000 + "x\n"))
    assert_refused(capsys, s, "preregistration.yaml", None, "nested more than")
    deep = "".join(" " * i + "a:\n" for i in range(500)) + " " * 500 + "b: 1\n"
    s = make_study(prereg=prereg_with("decision:\n" + "".join(" " + line + "\n" for line in deep.splitlines())))
    assert_refused(capsys, s, "preregistration.yaml", None, "nested more than")


def test_huge_integer_in_tasks_json(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(tasks=tasks_json(timeout_s=0).replace('"timeout_s": 0', '"timeout_s": ' + "9" * 5000))
    assert_refused(capsys, s, "tasks.json", None, "digits")


def test_huge_integer_in_yaml(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with("  seed: " + "7" * 5000 + "\n"))
    assert_refused(capsys, s, "preregistration.yaml", None, "digits")


def test_a_large_integer_is_a_bounded_field_error(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with("  seed: " + "7" * 30 + "\n"))
    assert_refused(capsys, s, "preregistration.yaml", "execution.seed", "less than")


@pytest.mark.parametrize("field", ["tasks", "skill_ref"])
def test_symlink_loop_as_a_path(make_study: StudyFactory, capsys: pytest.CaptureFixture[str], field: str) -> None:
    s = make_study()
    (s.root / "loop").symlink_to("loop")
    text = s.prereg.read_text().replace(f"{field}: {'tasks.json' if field == 'tasks' else 'skill'}", f"{field}: loop")
    s.prereg.write_text(text)
    assert_refused(capsys, s, "preregistration.yaml", field)


def test_symlink_loop_as_the_repository(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with(**{"  repo: repo": "  repo: loop/x"}))
    (s.root / "loop").symlink_to("loop")
    assert_refused(capsys, s, "preregistration.yaml", "execution.repo")


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("tasks: tasks.json", 'tasks: "tasks\\0.json"', "tasks"),
        ("skill_ref: skill", 'skill_ref: "sk\\0ill"', "skill_ref"),
        ("  repo: repo", '  repo: "re\\0po"', "execution.repo"),
        ("  repo: repo", '  repo: repo\n  base_ref: "HEAD\\0"', "execution.base_ref"),
    ],
)
def test_nul_byte_in_a_path_or_ref(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str], old: str, new: str, field: str
) -> None:
    s = make_study(prereg=prereg_with(**{old: new}))
    assert_refused(capsys, s, "preregistration.yaml", field, "NUL")


@pytest.mark.parametrize("field", ["skill_ref", "tasks", "shelf"])
def test_a_path_too_long_is_a_field_error(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    """Found by the fuzz: `skill_ref: xxx...` (300 characters) raised ENAMETOOLONG from is_dir()."""
    s = make_study(prereg=prereg_with(f"{field}: {'x' * 300}\n").replace(
        {"skill_ref": "skill_ref: skill\n", "tasks": "tasks: tasks.json\n", "shelf": "\0"}[field], ""))  # fmt: skip
    assert_refused(capsys, s, "preregistration.yaml", field, "too long")


def test_lone_surrogate_in_a_prompt(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(tasks=tasks_json(prompt="Fix it \ud800 now"))
    assert "\\ud800" in s.tasks.read_text()
    assert_refused(capsys, s, "tasks.json", "tasks[0].prompt", "surrogate")


def test_lone_surrogate_in_yaml(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with('side_effects_to_watch: ["x\\ud800"]\n'))
    assert_refused(capsys, s, "preregistration.yaml", "side_effects_to_watch[0]", "surrogate")


def test_dev_zero_as_tasks(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with(**{"tasks: tasks.json": "tasks: /dev/zero"}))
    assert_refused(capsys, s, "/dev/zero", "tasks", "not a regular file", "device")


def test_a_directory_as_tasks(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with(**{"tasks: tasks.json": "tasks: skill"}))
    assert_refused(capsys, s, "skill", "tasks", "is a directory")


def test_an_oversized_tasks_file(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(tasks=tasks_json(pass_criteria="x" * (5 << 20)))
    assert_refused(capsys, s, "tasks.json", None, "more than")


# ----------------------------------------------------------------------------- 2. hangs


def test_fifo_as_the_preregistration(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study()
    s.prereg.unlink()
    os.mkfifo(s.prereg)
    code, err = run_lock(capsys, s.prereg)
    assert code == 4
    assert "preregistration.yaml" in err and "FIFO" in err, err


def test_fifo_as_the_tasks_file(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study()
    s.tasks.unlink()
    os.mkfifo(s.tasks)
    assert_refused(capsys, s, "tasks.json", "tasks", "FIFO")


# ------------------------------------------------------------------------ 3. alias bomb


def test_yaml_alias_bomb(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    big = "x" * 200_000
    bomb = f"expected_effect: &big {big}\nside_effects_to_watch: [" + ", ".join(["*big"] * 20_000) + "]\n"
    s = make_study(prereg=prereg_with(bomb))
    assert 200_000 < s.prereg.stat().st_size < 400_000
    assert_refused(capsys, s, "preregistration.yaml", None, "aliases")


def test_even_a_small_alias_is_refused(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with("expected_effect: &e fewer\nside_effects_to_watch: [*e]\n").replace(
        "expected_effect: fewer failed verifies\n", ""))  # fmt: skip
    assert_refused(capsys, s, "preregistration.yaml", None, "line 13", "aliases")


def test_merge_keys_are_refused(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with("decision:\n  <<: {rule: point}\n"))
    assert_refused(capsys, s, "preregistration.yaml", None, "merge keys")


# ------------------------------------------------------------------ 5. accepted though invalid


@pytest.mark.parametrize(
    ("fields", "field", "word"),
    [
        ({"id": "t1\n"}, "tasks[0].id", "1-64 characters"),
        ({"prompt": ""}, "tasks[0].prompt", "blank"),
        ({"prompt": " \n\t"}, "tasks[0].prompt", "blank"),
        ({"timeout_s": True}, "tasks[0].timeout_s", "integer"),
        ({"timeout_s": 1e400}, None, "out of range"),
        ({"protected_paths": ["."]}, "tasks[0].protected_paths", "not '.'"),
        ({"protected_paths": ["./"]}, "tasks[0].protected_paths", "not '.'"),
        ({"protected_paths": ["src/\u0000x"]}, "tasks[0].protected_paths[0]", "NUL"),
        # issue 24 item 10: a newline would split every list of paths the protected path is written into
        ({"protected_paths": ["tests\n"]}, "tasks[0].protected_paths", "control character ('\\n')"),
        ({"protected_paths": ["a\rb"]}, "tasks[0].protected_paths", "control character ('\\r')"),
        # issue 24 item 10: accepted, then every trial an infra error (one argument holds 131,071 bytes)
        ({"prompt": "x" * 200_000}, "tasks[0].prompt", "MAX_ARG_STRLEN"),
        ({"pass_criteria": "y" * 120_000}, "tasks[0].pass_criteria", "the judge's prompt repeats all three"),
    ],
)
def test_bad_task_fields(
    make_study: StudyFactory,
    capsys: pytest.CaptureFixture[str],
    fields: dict[str, Any],
    field: str | None,
    word: str | None,
) -> None:
    text = tasks_json(**fields)
    if fields.get("timeout_s") == 1e400:
        text = text.replace("Infinity", "1e400")
    s = make_study(tasks=text)
    assert_refused(capsys, s, "tasks.json", field, *([word] if word else []))


def _task_text(total: int, verify_cmd: str = "python -m pytest -q") -> dict[str, str]:
    """A task's prompt, pass criteria and verify command of ``total`` UTF-8 bytes together, the prompt
    made of 4-byte characters where it can be (the limit counts bytes, not characters)."""
    criteria = "fixed, tests not edited"
    left = total - len(verify_cmd) - len(criteria)
    prompt = "\U0001f600" * (left // 4) + "x" * (left % 4)
    assert len((prompt + criteria + verify_cmd).encode()) == total
    return {"prompt": prompt, "pass_criteria": criteria, "verify_cmd": verify_cmd}


def test_a_task_whose_text_fills_one_argument_exactly_locks(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_study(tasks=tasks_json(**_task_text(TASK_TEXT_MAX_BYTES)))
    code, err = run_lock(capsys, s.prereg)
    assert code == 0, err


def test_one_byte_past_the_argument_is_refused(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(tasks=tasks_json(**_task_text(TASK_TEXT_MAX_BYTES + 1)))
    err = assert_refused(capsys, s, "tasks.json", "tasks[0].prompt", f"{TASK_TEXT_MAX_BYTES + 1:,} bytes together")
    assert f"more than the {TASK_TEXT_MAX_BYTES:,} that fit" in err


@pytest.mark.parametrize(
    ("text", "field", "word"),
    [
        ('{"tasks": [], "tasks": [{"id": "a", "prompt": "p", "verify_cmd": "v"}]}', None, "duplicate key 'tasks'"),
        ('{"tasks": [{"id": "a", "id": "b", "prompt": "p", "verify_cmd": "v"}]}', None, "duplicate key 'id'"),
        ('{"tasks": [{"id": "a", "prompt": "p", "verify_cmd": "v", "timeout_s": NaN}]}', None, "NaN"),
        ('{"tasks": [{"id": "a", "prompt": "p", "verify_cmd": "v", "timeout_s": -Infinity}]}', None, "Infinity"),
    ],
)
def test_strict_json(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str], text: str, field: str | None, word: str
) -> None:
    s = make_study(tasks=text, prereg=prereg_with(**{"target_tasks: all": "target_tasks: all"}))
    assert_refused(capsys, s, "tasks.json", field, word)


@pytest.mark.parametrize(
    ("replace", "extra", "field", "word"),
    [
        ({"skill: tidy": 'skill: "tidy\\n"'}, "", "skill", "short name"),
        ({"target_tasks: all": 'target_tasks: ["t1\\n"]'}, "", "target_tasks[0]", "does not exist"),
        ({}, "  allowed_tools: ['Bash\\n']\n", "execution.allowed_tools", "tool name"),
        ({}, "  budgets:\n    per_trial_usd: .inf\n", "execution.budgets.per_trial_usd", "finite"),
        ({}, "  budgets:\n    total_usd: .nan\n", "execution.budgets.total_usd", "finite"),
        ({}, "  budgets:\n    timeout_s: true\n", "execution.budgets.timeout_s", "integer"),
        ({}, "  budgets:\n    judge_usd: yes\n", "execution.budgets.judge_usd", "number"),
        ({"runs_per_arm: 2": "runs_per_arm: true"}, "", "execution.runs_per_arm", "integer"),
        ({}, "  resources:\n    memory: 1k\n", "execution.resources.memory", "outside 64m..1t"),
        ({}, "  resources:\n    memory: 99999999999999g\n", "execution.resources.memory", "outside"),
        ({}, "  resources:\n    tmpfs_size: 12\n", "execution.resources.tmpfs_size", None),
        ({}, "  resources:\n    max_file_size: 1k\n", "execution.resources.max_file_size", "outside"),
        ({}, '  resources:\n    memory: "2g\\n"\n', "execution.resources.memory", "not a size"),
        ({}, "  resources:\n    cpus: 100000\n", "execution.resources.cpus", "less than or equal"),
        ({"model: sonnet": "model: ''"}, "", "execution.model", "model name"),
        ({"model: sonnet": "model: '   '"}, "", "execution.model", "model name"),
        ({"judge_model: haiku": "judge_model: ''"}, "", "execution.judge_model", "model name"),
        ({"judge_model: haiku": "judge_model: 'hai ku'"}, "", "execution.judge_model", "model name"),
        ({}, "  base_ref: --output=/tmp/x\n", "execution.base_ref", "not a git"),
        ({"skill: tidy": "skill: tidy\nskill: other"}, "", None, "duplicate key 'skill'"),
        ({}, "  model: opus\n", None, "duplicate key 'model'"),
    ],
)
def test_bad_preregistration_fields(
    make_study: StudyFactory,
    capsys: pytest.CaptureFixture[str],
    replace: dict[str, str],
    extra: str,
    field: str | None,
    word: str | None,
) -> None:
    s = make_study(prereg=prereg_with(extra, **replace))
    assert_refused(capsys, s, "preregistration.yaml", field, *([word] if word else []))


def test_cpus_above_the_host_cores(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    cores = os.cpu_count() or 1
    s = make_study(prereg=prereg_with(f"  resources:\n    cpus: {cores + 1}\n"))
    assert_refused(capsys, s, "preregistration.yaml", "execution.resources.cpus", f"{cores} CPU core")


def test_cpus_at_the_host_cores_are_fine(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study(prereg=prereg_with(f"  resources:\n    cpus: {os.cpu_count() or 1}\n"))
    code, err = run_lock(capsys, s.prereg)
    assert code == 0, err


def test_positive_control_the_default_study_locks(make_study: StudyFactory, capsys: pytest.CaptureFixture[str]) -> None:
    s = make_study()
    code, err = run_lock(capsys, s.prereg)
    assert code == 0, err
    verify_lock(load_study(s.prereg))


# ----------------------------------------------------------------------------- 6. minor


def test_union_field_message_has_no_pydantic_internals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_preregistration(tmp_path / "p.yaml", "skill: tidy\nskill_ref: s\ntarget_tasks: 5\n")
    assert info.value.field == "target_tasks"
    msg = str(info.value)
    assert "tuple[" not in msg and "literal[" not in msg, msg
    assert "'all'" in msg and "tuple" in msg
    with pytest.raises(ConfigError) as info:
        parse_preregistration(tmp_path / "p.yaml", "skill: tidy\nskill_ref: s\nadoption_criteria: [1]\n")
    assert info.value.field in ("adoption_criteria", "adoption_criteria[0]")
    assert "tuple[" not in str(info.value)


def test_a_refused_scenario_leaves_no_experiment_json(make_study: StudyFactory, tmp_path: Path) -> None:
    s = make_study()
    lock(s.prereg)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("tasks:\n  nope: {}\n")
    out = tmp_path / "out"

    runtime = FakeRuntime()
    runtime.fail("*", error=AssertionError("the engine was used before the scenario was checked"), times=None)
    options = RunOptions(out=out, jobs=1, scripted=scenario)
    with pytest.raises(ConfigError) as info:
        Experiment(load_study(s.prereg), runtime, options).run()
    assert info.value.field == "tasks.nope"
    assert not (out / "experiment.json").exists() and runtime.calls == []
    # positive control: the same check runs on a scenario that is fine and gets past it to the engine
    scenario.write_text("tasks:\n  t1: {}\n")
    with pytest.raises(AssertionError, match="the engine was used"):
        Experiment(load_study(s.prereg), runtime, options).run()
    assert runtime.calls


# ----------------------------------------------------------------- 4. the lock format

STYLES: dict[str, Callable[[dict[str, Any]], str]] = {
    "block": lambda d: yaml.safe_dump(d, sort_keys=False),
    "flow": lambda d: yaml.safe_dump(d, sort_keys=False, default_flow_style=True),
    "json": lambda d: json.dumps(d, indent=2),
    "json-one-line": lambda d: json.dumps(d),
    "document-end": lambda d: "---\n" + yaml.safe_dump(d, sort_keys=False) + "...\n",
    "document-end-then-comment": lambda d: yaml.safe_dump(d, sort_keys=False) + "...\n# trailing words\n",
    "no-final-newline": lambda d: yaml.safe_dump(d, sort_keys=False).rstrip("\n"),
    "crlf": lambda d: yaml.safe_dump(d, sort_keys=False).replace("\n", "\r\n"),
    "keep-chomping-last": lambda d: yaml.safe_dump({k: v for k, v in d.items() if k != "expected_effect"},
                                                   sort_keys=False) + "expected_effect: |+\n  more passes\n\n\n",
    "tabs-and-comments": lambda d: "# top\n" + yaml.safe_dump(d, sort_keys=False) + "# end\n#\n",
    "indented-sequence-last": lambda d: yaml.safe_dump(d, sort_keys=False) + "side_effects_to_watch:\n  - cost\n",
    "explicit-tags": lambda d: yaml.safe_dump(d, sort_keys=False).replace("skill: tidy", "skill: !!str tidy"),
    "lock-null": lambda d: yaml.safe_dump(d, sort_keys=False) + "lock: null\n",
    "lock-word-inside": lambda d: yaml.safe_dump(d, sort_keys=False) + "expected_effect: |\n  lock: not a key\n",
}  # fmt: skip


def base_prereg() -> dict[str, Any]:
    data = yaml.safe_load(DEFAULT_PREREG)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("style", sorted(STYLES))
def test_every_yaml_style_stays_valid_and_verifies_after_lock(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str], style: str
) -> None:
    text = STYLES[style](base_prereg())
    if style == "lock-word-inside":
        text = text.replace("expected_effect: fewer failed verifies\n", "")
    s = make_study(prereg=text)
    s.prereg.write_bytes(text.encode())  # keep CRLF as written
    before = s.prereg.read_bytes()
    parsed = parse_preregistration(s.prereg, before.decode())
    code, err = run_lock(capsys, s.prereg)
    assert code == 0, err
    assert s.prereg.read_bytes() == before, "lock must not touch the preregistration"
    verify_lock(load_study(s.prereg))
    assert parse_preregistration(s.prereg, s.prereg.read_text()) == parsed
    code, err = run_lock(capsys, s.prereg)  # and it can be locked again
    assert code == 0, err
    verify_lock(load_study(s.prereg))


def test_a_preregistration_locked_by_the_earlier_format_still_verifies_and_relocks(make_study: StudyFactory) -> None:
    s = make_study()
    study = load_study(s.prereg)
    digest, files = lock_digest(study, s.base_sha)
    block = {"lock": {"locked_at": "2026-01-01T00:00:00Z", "sha256": digest, "base_sha": s.base_sha, "files": files}}
    s.prereg.write_text(DEFAULT_PREREG + f"\n{LOCK_COMMENT}\n" + yaml.safe_dump(block, sort_keys=False))
    assert verify_lock(load_study(s.prereg)).sha256 == digest
    # an edit is still noticed in the earlier format
    s.prereg.write_text(s.prereg.read_text().replace("runs_per_arm: 2", "runs_per_arm: 3"))
    with pytest.raises(LockError, match=r"changed since lock: .*preregistration"):
        verify_lock(load_study(s.prereg))
    # re-locking moves the lock out of the file and leaves the rest as written
    lock(s.prereg)
    assert s.prereg.read_text() == DEFAULT_PREREG.replace("runs_per_arm: 2", "runs_per_arm: 3")
    assert lock_path(s.prereg).is_file()
    verify_lock(load_study(s.prereg))


def test_a_lock_file_that_is_not_a_regular_file_is_refused(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_study()
    os.mkfifo(lock_path(s.prereg))
    code, err = run_lock(capsys, s.prereg)
    assert code == 4
    assert "preregistration.yaml.lock" in err and "not a regular file" in err, err
    # and eval, which reads it, does not block on it either
    with pytest.raises(ConfigError, match="FIFO"):
        load_study(s.prereg)


def test_parse_tasks_refuses_a_trailing_newline_id_directly(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_tasks(tmp_path / "tasks.json", json.dumps({"tasks": [{"id": "a\n", "prompt": "p", "verify_cmd": "v"}]}))
    assert info.value.field == "tasks[0].id"


def test_a_control_character_in_yaml_is_one_line_naming_the_line(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_study(prereg=prereg_with("side_effects_to_watch: [a\x1fb]\n"))
    err = assert_refused(capsys, s, "preregistration.yaml", None, "line 13", "#x001f")
    assert len(err.strip().splitlines()) == 1


def test_validator_messages_have_no_pydantic_prefix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_preregistration(tmp_path / "p.yaml", "skill: 'a b'\nskill_ref: s\n")
    assert "Value error" not in str(info.value)
    assert str(info.value).endswith("field 'skill': must be a short name of letters, digits, '.', '_' or '-'")


# ------------------------------------------------------------------------ scenario files


def test_a_scenario_may_use_aliases_within_a_bound(tmp_path: Path) -> None:
    from harness.study.scenario import load_scenario

    path = tmp_path / "scenario.yaml"
    steps = [{"tool": "Bash", "input": {"command": "true"}}]
    path.write_text(yaml.safe_dump({"tasks": {"t1": {"success": steps, "failure": steps}}}))
    assert "*id001" in path.read_text()  # what yaml.safe_dump writes for a shared object
    assert load_scenario(path).tasks["t1"].failure[0].tool == "Bash"
    big = "x" * 200_000
    path.write_text(f"seed: 1\nskill_marker: &big {big}\ntasks: {{}}\nx: [" + ", ".join(["*big"] * 20_000) + "]\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert "expands to more than" in str(info.value)


def test_a_scenario_refuses_inf(tmp_path: Path) -> None:
    from harness.study.scenario import load_scenario

    path = tmp_path / "scenario.yaml"
    path.write_text("probe_wait_s: .inf\ntasks: {}\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert info.value.field == "probe_wait_s"


def test_a_damaged_lock_file_is_named_by_eval_and_replaced_by_lock(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_study()
    lock(s.prereg)
    path = lock_path(s.prereg)
    path.write_text(path.read_text()[:40])  # torn
    with pytest.raises(ConfigError) as info:
        load_study(s.prereg)
    assert info.value.path == str(path) and "malformed JSON" in str(info.value)
    code, err = run_lock(capsys, s.prereg)
    assert code == 0, err
    verify_lock(load_study(s.prereg))


def test_a_preregistration_name_too_long_for_its_lock_file_is_a_clean_error(
    make_study: StudyFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_study()
    long_name = s.prereg.with_name("p" * 240 + ".yaml")
    s.prereg.rename(long_name)
    before = snapshot(s.root)
    code, err = run_lock(capsys, long_name)
    assert code == 4, err
    assert "cannot be written" in err and ".lock" in err, err
    assert snapshot(s.root) == before
