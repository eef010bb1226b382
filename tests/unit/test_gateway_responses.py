"""The gateway's Responses half, wired (issue 30 phase two): gateway.py as a real subprocess in front of the
scripted Responses API (scripted_api.py, in-process on loopback), driven with the requests the pinned Codex
CLI sent (tests/unit/data/codex-0.171.0-*.json). The gateway's own log, read as the controller reads it, is
the evidence: the key it sent, the usage it metered, what it refused, and whether the skill fired."""

from __future__ import annotations

import copy
import http.client
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness.sidecars import gateway, scripted_api
from harness.sidecars.gatewaylog import Forwarded, ModelToolUse, SkillRequest, Usage
from harness.trial import installed
from tests.unit.test_gateway_sidecar import START_TIMEOUT_S, GatewayProcess, free_port

DATA = Path(__file__).parent / "data"
GATEWAY_SCRIPT = Path(gateway.__file__)
REAL_KEY = "sk-real-openai-key-held-by-the-gateway-only"
PLACEHOLDER = "sk-harness-placeholder"
SKILL = "tidy-notes"
SKILL_PATH = "/home/agent/.agents/skills/tidy-notes/SKILL.md"


def scenario() -> dict[str, Any]:
    """The scripted model reads the listed skill, then runs one command, then answers."""
    steps = [{"tool": "Skill", "input": {"skill": SKILL}}, {"tool": "Bash", "input": {"command": "echo ok"}}]
    task = {
        "prompt": "Write the proof file.",
        "final_text": "Done.",
        "success": steps,
        "failure": [],
        "arms": {"baseline": {"p_success": 1.0}, "skill": {"p_success": 1.0}},
    }
    usage = {
        "input_tokens": 800,
        "output_tokens": 20,
        "cache_read_input_tokens": 150,
        "cache_creation_input_tokens": 50,
    }
    return {
        "seed": 3,
        "skill": SKILL,
        "skill_marker": "MARK",
        "defaults": {"usage": usage},
        "judge": {},
        "tasks": {"proof": task},
    }


@pytest.fixture
def scripted() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """The scripted API on loopback; the headers of every request that reached it."""
    seen: list[dict[str, str]] = []

    class Recording(scripted_api.Handler):
        scenario = scripted_api.Scenario(scenario())

        def do_POST(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            super().do_POST()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def start(tmp_path: Path, scripted: tuple[str, list[dict[str, str]]]) -> Iterator[Callable[[str], GatewayProcess]]:
    started: list[GatewayProcess] = []
    key_file = tmp_path / "api-key"
    key_file.write_text(REAL_KEY + "\n")

    def run(apis: str) -> GatewayProcess:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        env |= {
            "GATEWAY_UPSTREAM": scripted[0],
            "GATEWAY_KEY_FILE": str(key_file),
            "GATEWAY_BUDGET_USD": "1",
            "GATEWAY_PORT": str(port),
            "GATEWAY_APIS": apis,
        }
        stderr = tmp_path / f"gateway-{len(started)}.stderr"
        with stderr.open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, str(GATEWAY_SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=err, text=True
            )
        gw = GatewayProcess(proc, port, stderr)
        started.append(gw)
        if apis != "bogus":
            gw.wait_for("listening", timeout_s=START_TIMEOUT_S)
        return gw

    yield run
    for gw in started:
        gw.stop()


def post(gw: GatewayProcess, path: str, body: dict[str, Any], **headers: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body).encode(),
            headers={"content-type": "application/json", "authorization": f"Bearer {PLACEHOLDER}", **headers},
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def first_request() -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / "codex-0.171.0-request-1.json").read_text())["body"]
    return body


def output_items(sse: bytes) -> list[dict[str, Any]]:
    events = [json.loads(line[5:]) for line in sse.split(b"\n") if line.startswith(b"data:")]
    return [e["item"] for e in events if e["type"] == "response.output_item.done"]


def continued(body: dict[str, Any], sse: bytes, output: str) -> dict[str, Any]:
    """The CLI's next request: the model's call and its output appended."""
    call = next(i for i in output_items(sse) if i["type"] == "function_call")
    nxt = copy.deepcopy(body)
    nxt["input"] += [call, {"type": "function_call_output", "call_id": call["call_id"], "output": output}]
    return nxt


SKILL_FILE = (
    "Process exited with code 0\nOutput:\n---\nname: tidy-notes\ndescription: Use when writing proof files.\n---\n"
)


def test_a_codex_conversation_through_the_gateway_key_meter_and_the_skill_read(
    start: Callable[[str], GatewayProcess], scripted: tuple[str, list[dict[str, str]]]
) -> None:
    gw = start("responses,messages")
    body = first_request()
    status, sse = post(gw, "/v1/responses", body)
    assert status == 200
    second = continued(body, sse, SKILL_FILE)
    status, sse = post(gw, "/v1/responses", second)
    assert status == 200
    gw.wait_for("forwarded", 2)
    # the key: the real one as a bearer token upstream, never the placeholder the CLI holds
    assert [h["authorization"] for h in scripted[1]] == [f"Bearer {REAL_KEY}"] * 2
    events = gw.parsed()
    forwarded = [e for e in events if isinstance(e, Forwarded)]
    assert [f.path for f in forwarded] == ["/v1/responses"] * 2 and all(f.complete for f in forwarded)
    # usage: 1000 input of which 150 cached and 50 cache-written, priced apart (gpt-6.2-sol: 2, 10, 2.5, 0.1)
    assert forwarded[0].usage == Usage(
        input_tokens=800, output_tokens=20, cache_creation_input_tokens=50, cache_read_input_tokens=150
    )
    assert forwarded[0].cost_usd == pytest.approx((800 * 2 + 20 * 10 + 50 * 2.5 + 150 * 0.1) / 1e6)
    requests = [e for e in events if isinstance(e, SkillRequest)]
    assert [(r.thread, r.root, r.listed) for r in requests] == [("cli", True, (SKILL,)), ("cli", False, (SKILL,))]
    assert requests[0].listing == (f"- {SKILL}: Use when writing proof files.",) and requests[1].loaded == (SKILL,)
    uses = [e for e in events if isinstance(e, ModelToolUse)]
    assert uses[0].uses[0].name == "exec_command" and uses[0].uses[0].skill == SKILL  # the read of SKILL.md
    assert all(u.skill is None for e in uses[1:] for u in e.uses)  # nothing else loads it
    observed = installed.observe(events, skill=SKILL, arm="skill", delivery="installed")
    assert observed.use.invoked == "yes" and observed.use.loaded and observed.provenance["delivery_check"] == "ok"
    baseline = installed.observe(events, skill=SKILL, arm="baseline", delivery="installed")
    assert any(f.startswith("baseline_invoked_skill") for f in baseline.flags)  # control: the check can fail


def test_a_side_request_cannot_make_the_skill_fire(start: Callable[[str], GatewayProcess]) -> None:
    """A process beside the CLI sends a forged continuation reading the SKILL.md: it is a side request, and
    neither its call nor its output counts (DESIGN §8, the same rule as for Claude Code)."""
    gw = start("responses,messages")
    body = first_request()
    _, sse = post(gw, "/v1/responses", body)
    forged = continued(body, sse, SKILL_FILE)
    forged["input"][-2]["call_id"] = forged["input"][-1]["call_id"] = "call_forged"
    assert post(gw, "/v1/responses", forged)[0] == 200
    gw.wait_for("forwarded", 2)
    events = gw.parsed()
    assert [r.side for r in events if isinstance(r, SkillRequest)] == [False, True]
    observed = installed.observe(events, skill=SKILL, arm="skill", delivery="installed")
    assert observed.use.invoked == "yes"  # the CLI's own first answer read the file ...
    assert not observed.use.loaded  # ... but its output only came back in the side request
    assert any(f.startswith("side_requests: 1") for f in observed.flags)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda b: b["tools"].append({"type": "web_search"}), "web_search"),
        (lambda b: b.update(previous_response_id="resp_1"), "previous_response_id"),
        (lambda b: b.update(store=True), "store"),
        (lambda b: b.update(background=True), "background"),
        (lambda b: b.update(conversation="conv_1"), "conversation"),
        (lambda b: b["tools"].append({"type": "mcp", "server_url": "https://example.invalid"}), "mcp"),
    ],
)
def test_hosted_tools_and_server_side_state_are_refused_before_the_upstream(
    start: Callable[[str], GatewayProcess],
    scripted: tuple[str, list[dict[str, str]]],
    change: Callable[[dict[str, Any]], None],
    reason: str,
) -> None:
    gw = start("responses,messages")
    body = first_request()
    body.setdefault("tools", [])
    change(body)
    status, _ = post(gw, "/v1/responses", body)
    assert status == 403
    refused = gw.wait_for("refused")
    assert reason in refused[0]["reason"] and scripted[1] == []
    assert post(gw, "/v1/responses", first_request())[0] == 200  # control: the CLI's own request goes through


def test_each_trial_gateway_forwards_only_its_agents_api_and_the_judges(
    start: Callable[[str], GatewayProcess], scripted: tuple[str, list[dict[str, str]]]
) -> None:
    claude_trial = start("messages")
    assert post(claude_trial, "/v1/responses", first_request())[0] == 403
    assert "only the Messages API" in claude_trial.wait_for("refused")[0]["reason"] and scripted[1] == []
    codex_trial = start("responses,messages")
    assert post(codex_trial, "/v1/chat/completions", first_request())[0] == 403
    judge = {"model": "haiku", "max_tokens": 64, "messages": [{"role": "user", "content": "judge"}]}
    assert post(codex_trial, "/v1/messages", judge, **{"anthropic-version": "2023-06-01"})[0] == 200
    assert post(codex_trial, "/v1/responses", first_request(), **{"content-encoding": "gzip"})[0] == 400
    bogus = start("bogus")
    assert bogus.proc.wait(timeout=10) == 2 and "GATEWAY_APIS" in bogus.wait_for("fatal")[0]["reason"]


def test_forward_paths_name_the_apis() -> None:
    assert gateway.forward_paths("") == gateway.MESSAGES_PATHS
    assert gateway.forward_paths("responses,messages") == {*gateway.MESSAGES_PATHS, "/v1/responses"}
    with pytest.raises(ValueError, match="chat"):
        gateway.forward_paths("chat")
