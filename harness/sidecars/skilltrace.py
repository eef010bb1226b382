""" "Did the skill fire?", seen from the gateway (stdlib only; runs in the sidecar next to gateway.py).

The gateway sees what nothing in the agent container can rewrite: every request
body the CLI sends and every response the model streams back. This module turns
them into metadata lines of the gateway's log:

- ``skill_request``: per ``/v1/messages`` request, the turn number (assistant
  messages so far), the tool names offered, the skills listed ("The following
  skills are available for use with the Skill tool:" block, wherever the CLI put
  it), and the skills whose body came back in a ``tool_result`` ("Launching
  skill: NAME"). On the first turn the listing lines themselves are logged (the
  listing is provenance: the arms must differ by exactly one line).
- ``model_tool_use``: per response, every ``tool_use`` block the model emitted
  (name; for ``Skill`` the ``skill`` input), parsed from the SSE stream as it
  passes through, or from a plain JSON body.

With ``GATEWAY_STOP_ON_SKILL=<name>`` (trigger runs) the gateway refuses every
request after the model called ``Skill`` on that skill: the verdict is known,
the run ends without paying for the rest of the turn.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from typing import Any

LISTING_HEADER = "The following skills are available for use with the Skill tool:"
LAUNCH_PREFIX = "Launching skill:"
LISTING_CAP = 64
LINE_CAP = 2048

Log = Callable[..., None]


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                if block.get("type") == "text":
                    out.append(str(block.get("text", "")))
                elif block.get("type") == "tool_result":
                    out.extend(_texts(block.get("content", "")))
    return out


def listing_lines(body: dict[str, Any]) -> list[str] | None:
    """The ``- name: description`` lines of the skill listing (None: no listing in this request)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for message in messages:
        if not isinstance(message, dict):
            continue
        for text in _texts(message.get("content")):
            if LISTING_HEADER not in text:
                continue
            lines: list[str] = []
            for line in text.split(LISTING_HEADER, 1)[1].lstrip("\n").split("\n"):
                if not line.startswith("- "):
                    break
                lines.append(line[:LINE_CAP])
            return lines[:LISTING_CAP]
    return None


def line_name(line: str) -> str:
    return line[2:].split(":", 1)[0].strip()


def loaded_skills(body: dict[str, Any]) -> list[str]:
    """Skills whose load the CLI reported back in the last user message ("Launching skill: NAME")."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    # what came back since the model's last turn (the CLI may append a system message after it)
    tail: list[Any] = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") == "assistant":
            break
        content = message.get("content")
        if isinstance(content, list):
            tail.extend(content)
    names: list[str] = []
    if tail:
        for block in tail:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                for text in _texts(block.get("content", "")):
                    if text.startswith(LAUNCH_PREFIX):
                        names.append(text[len(LAUNCH_PREFIX) :].strip()[:200])
    return names


class Stopper:
    """Trigger runs: once the model called ``Skill`` on the named skill, refuse what follows."""

    def __init__(self, skill: str) -> None:
        self.skill = skill
        self.fired = False
        self.lock = threading.Lock()

    def saw(self, uses: list[dict[str, Any]]) -> None:
        if self.skill and any(u.get("name") == "Skill" and u.get("skill") == self.skill for u in uses):
            with self.lock:
                self.fired = True

    def stopped(self) -> bool:
        with self.lock:
            return self.fired


STOPPER = Stopper(os.environ.get("GATEWAY_STOP_ON_SKILL", ""))


def observe_request(body: Any, log: Log) -> str | None:
    """Log what this request shows about skills (metadata and the listing; never the conversation).
    Returns the conversation's hash, which the response's ``model_tool_use`` line carries too."""
    if not isinstance(body, dict):
        return None
    messages: list[Any] = body["messages"] if isinstance(body.get("messages"), list) else []
    turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    tools = [str(t.get("name"))[:80] for t in body.get("tools") or [] if isinstance(t, dict)]
    lines = listing_lines(body)
    fields: dict[str, Any] = {
        "turn": turn,
        "tools": tools[:64],
        "listed": None if lines is None else [line_name(x) for x in lines],
        "loaded": loaded_skills(body),
        # the request's size: the non-bare CLI's extra tools, system text and listing cost input tokens
        "bytes": len(json.dumps(body, separators=(",", ":"))),
    }
    first_user = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
    if first_user is not None:
        # which conversation this is (the agent could open its own): a hash, never the text
        prompt = "\n".join(_texts(first_user.get("content")))
        fields["conversation"] = hashlib.sha256(prompt.encode("utf-8", "replace")).hexdigest()[:16]
    if turn == 0 and lines is not None:
        fields["listing"] = lines
    log("skill_request", **fields)
    conversation = fields.get("conversation")
    return str(conversation) if conversation else None


def sse_event(line: bytes) -> dict[str, Any] | None:
    """The JSON object of one ``data:`` line of a server-sent event stream, or None for any other line
    (comments, ``event:`` lines, a malformed or non-object payload): the gateway meters and traces
    what the model sends, and neither may fail on it."""
    if not line.startswith(b"data:"):
        return None
    try:
        event = json.loads(line[5:].strip() or b"{}")
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


class ResponseTrace:
    """Collect the ``tool_use`` blocks of one model response as its SSE lines stream past."""

    def __init__(self, conversation: str | None = None) -> None:
        self.conversation = conversation
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial: dict[int, str] = {}

    def feed(self, line: bytes) -> None:
        event = sse_event(line)
        if event is None:
            return
        kind = event.get("type")
        index = event.get("index")
        if not isinstance(index, int):
            return
        if kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self.blocks[index] = {"name": str(block.get("name"))[:80], "input": block.get("input") or {}}
                self.partial[index] = ""
        elif kind == "content_block_delta" and index in self.blocks:
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "input_json_delta":
                self.partial[index] += str(delta.get("partial_json", ""))[: 1 << 20]

    def feed_message(self, message: Any) -> None:
        """A non-streamed response body."""
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            return
        for i, block in enumerate(message["content"]):
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self.blocks[i] = {"name": str(block.get("name"))[:80], "input": block.get("input") or {}}

    def uses(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            data: Any = block["input"]
            text = self.partial.get(index, "")
            if text:
                try:
                    data = json.loads(text)
                except ValueError:
                    data = {}
            use: dict[str, Any] = {"name": block["name"]}
            if block["name"] == "Skill" and isinstance(data, dict):
                use["skill"] = str(data.get("skill", ""))[:200]
            out.append(use)
        return out

    def emit(self, log: Log) -> None:
        uses = self.uses()
        STOPPER.saw(uses)
        log("model_tool_use", uses=uses, conversation=self.conversation)
