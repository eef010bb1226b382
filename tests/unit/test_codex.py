"""harness.trial.codex: the Codex CLI's argv and its --json events (captured from the pinned CLI in the hardened
container: tests/unit/data/codex-0.171.0-events.jsonl)."""

from __future__ import annotations

from pathlib import Path

from harness.trial import codex

DATA = Path(__file__).parent / "data"


def test_the_command_is_headless_unsandboxed_inside_the_container_and_talks_only_to_the_gateway() -> None:
    argv = codex.agent_command("fix it", model="gpt-6.2-sol", base_url="http://10.1.2.3:8080/v1", timeout_s=600)
    assert argv[:4] == ("timeout", "-k", "10", "600") and argv[4:6] == ("codex", "exec")
    assert argv[-2:] == ("--", "fix it")  # a prompt starting with '-' is not an option
    pairs = {argv[i + 1] for i, a in enumerate(argv) if a == "-c"}
    assert {*codex.OFF, 'approval_policy="never"', 'model_provider="harness"'} <= pairs
    provider = next(p for p in pairs if p.startswith("model_providers.harness="))
    assert 'base_url="http://10.1.2.3:8080/v1"' in provider and 'wire_api="responses"' in provider
    assert (
        argv[argv.index("--sandbox") + 1] == "danger-full-access" and argv[argv.index("--model") + 1] == "gpt-6.2-sol"
    )
    assert {"--json", "--ephemeral", "--strict-config", "--skip-git-repo-check"} <= set(argv)
    env = codex.codex_env()
    assert env["OPENAI_API_KEY"] == codex.PLACEHOLDER_KEY and "CODEX_HOME" not in env and env["HOME"] == "/home/agent"


def test_the_events_of_a_session_give_the_result() -> None:
    stdout = (DATA / "codex-0.171.0-events.jsonl").read_bytes()
    result = codex.parse_result(b"noise before\n" + stdout + b"{not json\n", 0)
    assert result.exit_code == 0 and result.subtype == "success" and result.is_error is False
    assert result.session_id == "01a2431a-87ca-7262-b639-5b3099eb5fec"
    assert (result.input_tokens, result.output_tokens) == (2000, 100)
    assert result.num_turns == 2 and result.result_excerpt == "All done." and result.cost_usd is None


def test_a_failed_turn_and_no_events() -> None:
    failed = b'{"type":"thread.started","thread_id":"t"}\n{"type":"turn.failed","error":{"message":"quota"}}\n'
    result = codex.parse_result(failed, 1)
    assert result.is_error is True and result.subtype == "error" and result.terminal_reason == "quota"
    assert codex.parse_result(b"", 1).parse_error == "no --json events on stdout"
