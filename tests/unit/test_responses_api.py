"""harness.sidecars.responses_api: the gateway's half of the Responses API, checked against requests the pinned
Codex CLI really sent (tests/unit/data/codex-0.171.0-*.json, captured in the hardened container: docs/agents.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from harness.sidecars import responses_api as r
from harness.sidecars import scripted_api, scripted_responses, skilltrace
from harness.sidecars.gateway import DEFAULT_PRICING, Meter
from harness.sidecars.gatewaylog import Usage
from harness.study import prices

DATA = Path(__file__).parent / "data"
SKILL_PATH = "/home/agent/.agents/skills/tidy-notes/SKILL.md"


def captured(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"codex-0.171.0-{name}.json").read_text())
    return data


@pytest.fixture
def first() -> dict[str, Any]:
    body: dict[str, Any] = captured("request-1")["body"]
    return body


@pytest.fixture
def second() -> dict[str, Any]:
    body: dict[str, Any] = captured("request-2")["body"]
    return body


# ------------------------------------------------------------------------------------ policy


def test_what_the_cli_sends_passes() -> None:
    for name in ("request-1", "request-2", "code-mode-request-2"):
        assert r.policy_violation(captured(name)["body"]) is None, name
        assert captured(name)["path"] in r.FORWARD_PATHS


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda b: b.update(tools=[{"type": "web_search"}]), "server-side tool 'web_search'"),
        (lambda b: b.update(tools=[{"type": "file_search", "vector_store_ids": ["vs_1"]}]), "'file_search'"),
        (lambda b: b.update(tools=[{"type": "code_interpreter", "container": {"type": "auto"}}]), "code_interpreter"),
        (lambda b: b.update(tools=[{"type": "mcp", "server_url": "https://x", "server_label": "x"}]), "'mcp'"),
        (lambda b: b.update(tools=[{"type": "computer_use_preview"}]), "computer_use"),
        (lambda b: b.update(tools=[{"type": "image_generation"}]), "image_generation"),
        (lambda b: b.update(tools=[{"type": "tool_search", "execution": "server"}]), "server-side tool search"),
        (lambda b: b["input"][0]["tools"][0]["tools"].append({"type": "web_search"}), "input[0].tools[0].tools[5]"),
        (lambda b: b.update(previous_response_id="resp_1"), "previous_response_id"),
        (lambda b: b.update(conversation="conv_1"), "conversation"),
        (lambda b: b.update(prompt={"id": "pmpt_1"}), "prompt"),
        (lambda b: b.update(store=True), "store must be false"),
        (lambda b: b.pop("store"), "store must be false"),
        (lambda b: b.update(background=True), "background"),
        (lambda b: b.update(service_tier="priority"), "service tier 'priority'"),
        (lambda b: b["input"].append({"type": "item_reference", "id": "msg_1"}), "'item_reference'"),
        (lambda b: b["input"].append({"type": "web_search_call", "id": "ws_1"}), "'web_search_call'"),
        (lambda b: b["input"].append({"type": "mcp_list_tools", "id": "m"}), "'mcp_list_tools'"),
        (
            lambda b: b["input"][-1]["content"].append({"type": "input_image", "image_url": "https://host/i.png"}),
            "only inline data: URLs",
        ),
        (lambda b: b["input"][-1]["content"].append({"type": "input_file", "file_id": "file_1"}), "only inline"),
        (lambda b: b["input"][-1]["content"].append({"type": "input_audio"}), "'input_audio'"),
        (lambda b: b.update(input=7), "neither a string nor a list"),
    ],
)
def test_hosted_tools_server_state_and_fetched_content_are_refused(
    first: dict[str, Any], change: Any, reason: str
) -> None:
    body = copy.deepcopy(first)
    change(body)
    found = r.policy_violation(body)
    assert found is not None and reason in found, found


def test_inline_content_and_a_tool_output_list_pass(second: dict[str, Any]) -> None:
    body = copy.deepcopy(second)
    body["input"][-3]["content"].append({"type": "input_image", "image_url": "data:image/png;base64,AAAA"})
    body["input"][-1]["output"] = [{"type": "input_text", "text": "x"}]
    body["service_tier"] = "auto"
    assert r.policy_violation(body) is None
    body["input"][-1]["output"].append({"type": "input_image", "image_url": "http://169.254.169.254/"})
    assert "only inline data" in str(r.policy_violation(body))
    assert r.policy_violation([]) == "body is not a JSON object"


def test_the_key_goes_upstream_as_a_bearer_token_and_the_clients_credentials_do_not() -> None:
    client = {**captured("request-1")["headers"], "x-api-key": "sk-agent", "OpenAI-Organization": "org-x"}
    sent = r.upstream_headers(client, "sk-real")
    assert sent["authorization"] == "Bearer sk-real"
    assert "sk-harness-placeholder" not in json.dumps(sent) and "sk-agent" not in json.dumps(sent)
    assert set(sent) == {"authorization", "content-type", "accept", "user-agent", "originator"}
    assert r.header_violation(client) is None
    assert "zstd" in str(r.header_violation({"Content-Encoding": "zstd"}))


# ------------------------------------------------------------------------------------ metering


def sse(events: list[dict[str, Any]]) -> list[bytes]:
    return [line for e in events for line in (f"event: {e['type']}".encode(), b"data: " + json.dumps(e).encode(), b"")]


def test_usage_is_metered_in_the_gateway_keys_and_priced_per_kind() -> None:
    usage = {
        "input_tokens": 10_000,
        "input_tokens_details": {"cached_tokens": 6_000, "cache_write_tokens": 1_000},
        "output_tokens": 500,
        "output_tokens_details": {"reasoning_tokens": 200},
    }
    created = {"type": "response.created", "response": {"model": "gpt-6.2-sol", "status": "in_progress", "usage": None}}
    completed = {
        "type": "response.completed",
        "response": {"model": "gpt-6.2-sol", "status": "completed", "usage": usage},
    }
    meter = r.StreamMeter()
    for line in [b": keep-alive", b"data: not json", b"data: []", *sse([created, completed])]:
        meter.feed(line)
    assert meter.ended and meter.model == "gpt-6.2-sol" and meter.status == "completed"
    assert meter.usage == Usage(
        input_tokens=3_000, output_tokens=500, cache_creation_input_tokens=1_000, cache_read_input_tokens=6_000
    )
    cost = Meter(0, {**DEFAULT_PRICING, **r.DEFAULT_PRICING}).add("gpt-6.2-sol", meter.usage)
    assert cost == pytest.approx((3_000 * 2.0 + 500 * 10.0 + 1_000 * 2.5 + 6_000 * 0.1) / 1e6)


def test_a_cut_stream_is_not_ended_and_nonsense_counts_nothing() -> None:
    meter = r.StreamMeter()
    for line in sse([{"type": "response.created", "response": {"status": "in_progress"}}]):
        meter.feed(line)
    assert not meter.ended and meter.usage == Usage()
    nonsense = {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 9}, "output_tokens": True}
    assert r.meter_usage(nonsense) == Usage(cache_read_input_tokens=5)
    body = r.StreamMeter()
    body.feed_body({"usage": {"input_tokens": 3, "output_tokens": 1}})
    assert body.ended and body.usage.input_tokens == 3


def test_the_shipped_price_table_holds_the_openai_models_the_gateway_prices() -> None:
    table = prices.default_table()
    for model, price in r.DEFAULT_PRICING.items():
        assert table[model] == price
    assert prices.priced("gpt-6.2-sol", table)  # the CLI's default model


# ------------------------------------------------------------------------------------ the conversation


def test_the_request_reads_as_a_messages_conversation(first: dict[str, Any], second: dict[str, Any]) -> None:
    view = r.as_messages(second["input"])
    assert [m["role"] for m in view] == ["system", "user", "assistant", "user"]
    prompt = [b["text"] for b in view[1]["content"]]
    assert prompt[-1] == "Write the proof file." and prompt[0].startswith("<environment_context>")
    (call,) = view[2]["content"]
    (result,) = view[3]["content"]
    assert (
        call["type"] == "tool_use" and call["name"] == "exec_command" and call["input"] == {"cmd": f"cat {SKILL_PATH}"}
    )
    assert result == {"type": "tool_result", "tool_use_id": call["id"], "content": second["input"][-1]["output"]}
    assert skilltrace.skeleton(r.as_messages(first["input"])) == skilltrace.skeleton(view[:2])


def test_the_attribution_binds_the_clis_requests_and_not_a_side_request(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    """DESIGN §8 on the Responses API: the second request extends the first by exactly the answer the model
    streamed back (its call_id); a request continuing with a call the model never made is a side request."""
    attribution = skilltrace.Attribution()
    placed = attribution.place({"messages": r.as_messages(first["input"])})
    assert placed.thread == "cli" and placed.root
    answer = [i for i in second["input"] if i.get("type") == "function_call"]
    collector = r.OutputCollector()
    lines = sse(
        [
            {"type": "response.output_item.done", "output_index": 0, "item": answer[0]},
            {"type": "response.completed", "response": {"status": "completed"}},
        ]
    )
    assert [collector.feed(line) for line in lines][-2] is True  # the completing line: registered before it passes
    attribution.answer(placed, collector.blocks())
    assert attribution.place({"messages": r.as_messages(second["input"])}).thread == "cli"
    forged = copy.deepcopy(second)
    forged["input"][-2]["call_id"] = forged["input"][-1]["call_id"] = "call_forged"
    assert attribution.place({"messages": r.as_messages(forged["input"])}).side


# ------------------------------------------------------------------------------------ did the skill fire?


def test_the_listing_names_the_installed_skill_with_its_file(first: dict[str, Any]) -> None:
    assert r.skill_listing(first) == [r.ListedSkill("tidy-notes", "Use when writing proof files.", SKILL_PATH)]
    assert r.skill_listing({"input": [{"type": "message", "role": "user", "content": "hi"}]}) is None


def test_a_read_of_the_skill_file_that_came_back_is_a_load(second: dict[str, Any]) -> None:
    paths = {"tidy-notes": SKILL_PATH}
    blocks = r.answer_blocks([i for i in second["input"] if i.get("type") == "function_call"])
    assert r.skill_reads(blocks, paths) == ["tidy-notes"]
    assert r.loaded_skills(second, paths) == ["tidy-notes"]
    failed = copy.deepcopy(second)
    failed["input"][-1]["output"] = "Process exited with code 1\nOutput:\ncat: No such file or directory\n"
    assert r.loaded_skills(failed, paths) == []  # control: the read failed
    listed_only = copy.deepcopy(second)
    listed_only["input"][-2]["arguments"] = json.dumps({"cmd": "ls /home/agent/.agents/skills/tidy-notes"})
    assert r.loaded_skills(listed_only, paths) == []  # a look at the folder is not a read


def test_a_code_mode_cell_that_reads_the_skill_is_a_load_too() -> None:
    body = captured("code-mode-request-2")["body"]
    call, output = body["input"][-2], body["input"][-1]
    assert call["type"] == "custom_tool_call" and output["type"] == "custom_tool_call_output"
    paths = {"tidy-notes": SKILL_PATH}
    assert r.loaded_skills(body, paths) == []  # the captured cell ran `echo`
    call["input"] = f'const r = await tools.exec_command({{cmd: "cat {SKILL_PATH}"}}); text(r);'
    output["output"][1]["text"] = json.dumps({"exit_code": 0, "output": "---\nname: tidy-notes\ndescription: x\n---\n"})
    assert r.loaded_skills(body, paths) == ["tidy-notes"]


def test_a_skill_the_user_names_is_put_in_by_the_cli(first: dict[str, Any]) -> None:
    """``$tidy-notes`` in the prompt: the CLI adds a ``<skill>`` user message with the file (seen with the
    pinned CLI, docs/agents.md); a message naming another path is not it."""
    body = copy.deepcopy(first)
    injected = f"<skill>\n<name>tidy-notes</name>\n<path>{SKILL_PATH}</path>\n---\nname: tidy-notes\n---\n</skill>"
    body["input"].append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": injected}]})
    assert r.loaded_skills(body, {"tidy-notes": SKILL_PATH}) == ["tidy-notes"]
    assert r.loaded_skills(body, {"tidy-notes": "/elsewhere/SKILL.md"}) == []


# ------------------------------------------------------------------------------------ the scripted side agrees


def test_the_scripted_stream_is_what_the_meter_and_the_collector_read() -> None:
    reply = scripted_api.Reply(
        [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "call_1", "name": "Bash", "input": {"command": "ls"}},
        ],
        "tool_use",
        {"input_tokens": 700, "output_tokens": 30, "cache_read_input_tokens": 200, "cache_creation_input_tokens": 100},
    )
    done = scripted_responses.response_json(reply, "gpt-6.2-sol", {}, "completed")
    meter, collector = r.StreamMeter(), r.OutputCollector()
    for line in sse([{"type": "response.completed", "response": done}]):
        meter.feed(line)
        collector.feed(line)
    assert meter.usage == Usage(
        input_tokens=700, output_tokens=30, cache_creation_input_tokens=100, cache_read_input_tokens=200
    )
    assert [b["type"] for b in collector.blocks()] == ["text", "tool_use"]
    assert collector.blocks()[1]["id"] == "call_1" and collector.blocks()[1]["input"] == {"cmd": "ls"}
