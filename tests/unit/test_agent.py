"""harness.trial.claude: the CLI's argv and reading its JSON result defensively; the CLI container's environment
(harness.sandbox.roles.claude_env) and deadline (harness.sandbox.deadline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.records import AgentResult
from harness.sandbox.deadline import KILL_GRACE_S
from harness.sandbox.roles import GATEWAY_PORT, PLACEHOLDER_KEY, claude_env
from harness.trial.claude import (
    agent_command,
    cli_says_budget_exceeded,
    find_result,
    judge_command,
    parse_result,
    structured_output,
)
from harness.trial.judge import VERDICT_SCHEMA

DATA = Path(__file__).parent / "data"
RESULT_BYTES = (DATA / "claude-result.json").read_bytes()
RESULT: dict[str, Any] = json.loads(RESULT_BYTES)


def after(argv: tuple[str, ...], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


# ------------------------------------------------------------------------------- results


def test_parse_reference_result() -> None:
    r = parse_result(RESULT_BYTES, 0)
    assert r.parse_error is None
    assert r.exit_code == 0
    assert r.subtype == "success"
    assert r.is_error is False
    assert r.num_turns == 2
    assert r.cost_usd == pytest.approx(0.005)
    assert r.duration_ms == 155
    assert r.terminal_reason == "completed"
    assert r.stop_reason == "end_turn"
    assert r.permission_denials == 1
    assert r.session_id == "5694eae2-a3df-4736-ade0-1a45ff822147"
    assert r.resolved_model == "claude-sonnet-5-5"
    assert (r.input_tokens, r.output_tokens) == (2000, 100)
    assert r.result_excerpt == "Done: wrote out.txt"
    assert not cli_says_budget_exceeded(r)


def test_parse_single_line_form() -> None:
    r = parse_result(json.dumps(RESULT).encode() + b"\n", 0)
    assert r.subtype == "success" and r.num_turns == 2


def test_parse_verbose_array_form() -> None:
    messages = [
        {"type": "system", "subtype": "init", "session_id": "s"},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "hi"}]}},
        {"type": "result", "subtype": "early", "num_turns": 1},
        {"type": "user", "message": {}},
        {**RESULT, "num_turns": 7},
    ]
    r = parse_result(json.dumps(messages).encode(), 0)
    assert r.parse_error is None
    assert r.num_turns == 7  # the last result wins
    assert r.cost_usd == pytest.approx(0.005)


def test_parse_garbage_then_result_line() -> None:
    stdout = b"npm WARN something\nnot json {\n[also not json\n" + json.dumps(RESULT).encode() + b"\n"
    r = parse_result(stdout, 0)
    assert r.parse_error is None
    assert r.subtype == "success"
    assert r.session_id == RESULT["session_id"]


def test_result_line_followed_by_other_json_lines() -> None:
    """The docstring's promise: the last object with type == result, whatever follows it."""
    stdout = b"noise\n" + json.dumps(RESULT).encode() + b'\n{"type": "log", "msg": "bye"}\n[1, 2]\n'
    r = parse_result(stdout, 0)
    assert r.parse_error is None
    assert r.num_turns == 2


def test_last_of_several_result_lines_wins() -> None:
    stdout = json.dumps({**RESULT, "num_turns": 1}).encode() + b"\n" + json.dumps(RESULT).encode() + b"\n"
    assert parse_result(stdout, 0).num_turns == 2


@pytest.mark.parametrize(
    "stdout",
    [b"", b"   \n", b"Error: something broke\n", b'{"type": "assistant"}', b"[1, 2, 3]", b"\xff\xfe\x00garbage"],
)
def test_no_result_sets_parse_error(stdout: bytes) -> None:
    r = parse_result(stdout, 137)
    assert r.parse_error is not None
    assert r.exit_code == 137
    assert r.subtype is None and r.cost_usd is None


def test_wrong_types_are_ignored_not_trusted() -> None:
    bad = {
        "type": "result",
        "num_turns": "many",
        "total_cost_usd": "0.5",
        "usage": [1, 2],
        "modelUsage": "x",
        "permission_denials": "none",
        "duration_ms": True,
    }
    r = parse_result(json.dumps(bad).encode(), 0)
    assert r.num_turns is None
    assert r.cost_usd is None
    assert r.input_tokens is None
    assert r.resolved_model is None
    assert r.permission_denials == 0
    assert r.duration_ms is None
    assert r.subtype is None


def test_result_excerpt_is_capped() -> None:
    r = parse_result(json.dumps({"type": "result", "result": "x" * 5000}).encode(), 0)
    assert len(r.result_excerpt) == 500


def test_find_result_prefers_whole_document() -> None:
    assert find_result(RESULT_BYTES) == RESULT


def test_structured_output_extraction() -> None:
    verdict = {"verdict": "pass", "reason": "tests fixed properly"}
    stdout = json.dumps({**RESULT, "structured_output": verdict}).encode()
    assert structured_output(stdout) == verdict


def test_structured_output_missing_or_wrong_type() -> None:
    assert structured_output(RESULT_BYTES) is None
    assert structured_output(b"") is None
    assert structured_output(json.dumps({**RESULT, "structured_output": "pass"}).encode()) is None
    assert structured_output(json.dumps({**RESULT, "structured_output": ["pass"]}).encode()) is None


def test_structured_output_from_array_form() -> None:
    verdict = {"verdict": "fail", "reason": "hard-coded"}
    stdout = json.dumps([{"type": "system"}, {**RESULT, "structured_output": verdict}]).encode()
    assert structured_output(stdout) == verdict


@pytest.mark.parametrize(
    ("result", "exceeded"),
    [
        (AgentResult(subtype="error_max_budget_usd"), True),
        (AgentResult(terminal_reason="budget_exhausted"), True),
        (AgentResult(subtype="success"), False),
        (AgentResult(subtype="error_max_turns"), False),
        (AgentResult(), False),
    ],
)
def test_cli_says_budget_exceeded(result: AgentResult, exceeded: bool) -> None:
    assert cli_says_budget_exceeded(result) is exceeded


# ---------------------------------------------------------------------------------- argv


def test_agent_command() -> None:
    argv = agent_command(
        "fix the bug", model="sonnet", allowed_tools=("Bash", "Edit", "Read"), max_budget_usd=1.5, timeout_s=900
    )
    assert argv[:4] == ("timeout", "-k", str(KILL_GRACE_S), "900")
    assert argv[4] == "claude"
    assert "--bare" in argv
    assert after(argv, "-p") == "fix the bug"
    assert after(argv, "--output-format") == "stream-json" and "--verbose" in argv  # the transcript
    assert after(argv, "--model") == "sonnet"
    assert after(argv, "--allowedTools") == "Bash,Edit,Read"
    assert after(argv, "--max-budget-usd") == "1.5"
    assert "--tools" not in argv
    assert "--json-schema" not in argv
    assert "--dangerously-skip-permissions" not in argv
    assert all(isinstance(a, str) for a in argv)


def test_prompt_is_one_argv_element_never_shell() -> None:
    prompt = "do it; rm -rf / && echo $(whoami) 'quoted' \"double\"\nnext line"
    argv = agent_command(prompt, model="m", allowed_tools=("Bash",), max_budget_usd=1, timeout_s=5)
    assert after(argv, "-p") == prompt
    assert "sh" not in argv and "-c" not in argv


def test_judge_command() -> None:
    argv = judge_command("grade this", model="haiku", schema=VERDICT_SCHEMA, max_budget_usd=0.25, timeout_s=300)
    assert argv[:4] == ("timeout", "-k", str(KILL_GRACE_S), "300")
    assert "--bare" in argv
    assert after(argv, "-p") == "grade this"
    assert after(argv, "--output-format") == "json"
    assert after(argv, "--model") == "haiku"
    assert after(argv, "--tools") == ""
    assert json.loads(after(argv, "--json-schema")) == VERDICT_SCHEMA
    assert after(argv, "--max-budget-usd") == "0.25"
    assert "--allowedTools" not in argv


# ----------------------------------------------------------------------------- environment


def test_claude_env_inherits_nothing_from_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-host-real-key-0123456789")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "host-secret")
    monkeypatch.setenv("HOME", "/home/host-user")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock")
    env = claude_env("172.30.0.2")
    assert env["ANTHROPIC_API_KEY"] == PLACEHOLDER_KEY
    assert env["ANTHROPIC_BASE_URL"] == f"http://172.30.0.2:{GATEWAY_PORT}"
    assert env["HOME"] == "/home/agent"
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert "SSH_AUTH_SOCK" not in env
    assert "host" not in " ".join(env.values())
    assert "sk-ant" not in " ".join(env.values())
    # the only credential-like variable is the placeholder
    secrets = [k for k in env if any(w in k for w in ("KEY", "TOKEN", "SECRET", "AUTH"))]
    assert secrets == ["ANTHROPIC_API_KEY"]
    assert set(env) == {
        "HOME",
        "CLAUDE_CONFIG_DIR",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_AUTOUPDATER",
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
        "PATH",
        "LANG",
        "TZ",
    }


def test_claude_env_is_fresh_each_call() -> None:
    a = claude_env("10.0.0.1")
    a["EXTRA"] = "x"
    assert "EXTRA" not in claude_env("10.0.0.1")


def test_a_stream_json_transcript_yields_its_final_result_object() -> None:
    from harness.trial.claude import result_json

    lines = [
        {"type": "system", "subtype": "init", "session_id": "s1", "tools": ["Bash", "Edit", "Read"]},
        {"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Read", "input": {}}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": "x"}]}},
        {"type": "result", "subtype": "success", "num_turns": 2, "total_cost_usd": 0.01, "usage": {}},
    ]
    stdout = "\n".join(json.dumps(line) for line in lines).encode() + b"\n"
    result = parse_result(stdout, 0)
    assert result.num_turns == 2 and result.cost_usd == 0.01 and result.parse_error is None
    assert json.loads(result_json(stdout))["type"] == "result"
    assert result_json(b"garbage") == b"garbage"
