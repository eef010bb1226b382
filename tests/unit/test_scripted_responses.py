"""The scripted model on the Responses API (harness.sidecars.scripted_responses), served by scripted_api.py on
loopback: the SSE events Codex reads, the calls its tools run (executed here by a real shell), and the
scenario logic reached through the Messages view. The real CLI against it: tests/integration/test_codex_cli.py."""

from __future__ import annotations

import http.client
import json
import shlex
import subprocess
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness.sidecars import responses_api, scripted_api, scripted_responses

DATA = Path(__file__).parent / "data"
PROMPT = "Write the proof file."


def scenario(**arm: Any) -> dict[str, Any]:
    task = {
        "prompt": PROMPT,
        "final_text": "Done.",
        "success": [{"tool": "Bash", "input": {"command": "echo ok"}, "say": "Running."}],
        "failure": [],
        "arms": {"baseline": {"p_success": 1.0, **arm}, "skill": {"p_success": 1.0}},
    }
    usage = {
        "input_tokens": 800,
        "output_tokens": 20,
        "cache_read_input_tokens": 150,
        "cache_creation_input_tokens": 50,
    }
    return {
        "seed": 3,
        "skill": "not-listed",
        "skill_marker": "MARK",
        "defaults": {"usage": usage},
        "judge": {},
        "tasks": {"proof": task},
    }


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(data: dict[str, Any]) -> int:
        handler = type("H", (scripted_api.Handler,), {"scenario": scripted_api.Scenario(data)})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return int(server.server_address[1])

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def post(port: int, body: dict[str, Any]) -> tuple[int, list[dict[str, Any]], dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST", "/v1/responses", json.dumps(body), {"authorization": "Bearer sk-x", "content-type": "application/json"}
    )
    resp = conn.getresponse()
    raw = resp.read()
    headers = {k.lower(): v for k, v in resp.getheaders()}
    conn.close()
    if "text/event-stream" not in headers.get("content-type", ""):
        return resp.status, [json.loads(raw)], headers
    events = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data:"):
            try:
                events.append(json.loads(line[5:]))
            except ValueError:
                events.append({"type": "<cut>"})
    return resp.status, events, headers


def first_request() -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / "codex-0.171.0-request-1.json").read_text())["body"]
    return body


def test_a_tool_call_then_the_answer_as_the_cli_reads_them(serve: Any) -> None:
    port = serve(scenario())
    body = first_request()
    status, events, _ = post(port, body)
    assert status == 200
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in done] == ["message", "function_call"]
    assert done[1]["name"] == "exec_command" and json.loads(done[1]["arguments"]) == {"cmd": "echo ok"}
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert deltas[0]["delta"] == done[1]["arguments"]
    usage = events[-1]["response"]["usage"]
    assert usage["input_tokens"] == 1000 and usage["input_tokens_details"] == {
        "cached_tokens": 150,
        "cache_write_tokens": 50,
    }
    assert responses_api.policy_violation(body) is None
    # the CLI sends the call and its output back: the scripted model answers and the turn ends
    body["input"] += [done[1], {"type": "function_call_output", "call_id": done[1]["call_id"], "output": "ok\n"}]
    _, events, _ = post(port, body)
    final = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [(i["type"], i["content"][0]["text"]) for i in final] == [("message", "Done.")]


def test_injected_errors_and_a_broken_stream(serve: Any) -> None:
    port = serve(scenario(errors=[{"at_turn": 0, "status": 429, "retry_after_s": 2}]))
    status, (payload,), headers = post(port, first_request())
    assert status == 429 and headers["retry-after"] == "2" and payload["error"]["type"] == "rate_limit_exceeded"
    status, events, _ = post(port, first_request())  # `times` 1: the retry gets through
    assert status == 200 and events[-1]["type"] == "response.completed"
    port = serve(scenario(errors=[{"at_turn": 0, "status": "broken_stream"}]))
    _, events, _ = post(port, first_request())
    assert [e["type"] for e in events] == ["response.created", "<cut>"]  # cut mid-event: no response.completed


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=30)


def test_the_steps_become_shell_commands_that_do_what_the_step_says(tmp_path: Path) -> None:
    target = tmp_path / "sub dir" / "f's.py"
    content = "def f():\n    return 'EOF' $HOME `x`\n"
    cmd = scripted_responses.shell_command("Write", {"file_path": str(target), "content": content}, {})
    assert cmd is not None and run(cmd, tmp_path).returncode == 0 and target.read_text() == content
    edit = {"file_path": str(target), "old_string": "'EOF'", "new_string": '"done"\n    # two lines'}
    cmd = scripted_responses.shell_command("Edit", edit, {})
    assert cmd is not None and run(cmd, tmp_path).returncode == 0
    assert target.read_text() == 'def f():\n    return "done"\n    # two lines $HOME `x`\n'
    missing = scripted_responses.shell_command("Edit", {**edit, "old_string": "absent"}, {})
    assert missing is not None
    failed = run(missing, tmp_path)
    assert failed.returncode == 1 and "old_string not found" in failed.stderr
    cmd = scripted_responses.shell_command("Read", {"file_path": str(target)}, {})
    assert cmd is not None and run(cmd, tmp_path).stdout == target.read_text()
    assert (
        scripted_responses.shell_command("Skill", {"skill": "x"}, {"x": str(target)})
        == f"cat -- {shlex.quote(str(target))}"
    )
    assert scripted_responses.shell_command("Skill", {"skill": "y"}, {"x": str(target)}) is None
    assert scripted_responses.shell_command("Agent", {"prompt": "p"}, {}) is None


def test_the_messages_view_lists_and_launches_as_claude_code_would() -> None:
    """What scripted_api's installed delivery reads: the listing in Claude Code's words, and the read of the
    listed SKILL.md that brought the file back reported as its launch."""
    body: dict[str, Any] = json.loads((DATA / "codex-0.171.0-request-2.json").read_text())["body"]
    view, listing = scripted_responses.messages_view(body, scripted_api.LISTING_HEADER)
    assert listing == {"tidy-notes": "/home/agent/.agents/skills/tidy-notes/SKILL.md"}
    assert scripted_api.skill_listing(view) == {"tidy-notes": "Use when writing proof files."}
    assert json.loads(view["metadata"]["user_id"]) == {"session_id": body["prompt_cache_key"]}
    (result,) = view["messages"][-1]["content"]
    assert result["content"].startswith("Launching skill: tidy-notes\n")
    body["input"][-1]["output"] = "cat: permission denied"
    view, _ = scripted_responses.messages_view(body, scripted_api.LISTING_HEADER)
    assert not view["messages"][-1]["content"][0]["content"].startswith("Launching")
