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

Every ``/v1/messages`` request is placed by :class:`Attribution` (docs/design.md, "Only the CLI's
conversation counts"): the CLI's own requests carry the name of their ``thread`` (``cli``, a subagent's
``agent-N``, a compacted conversation's ``compact-N``); any other request is a *side request*
(``side: true``): forwarded and metered like every request, never evidence that the skill fired.

With ``GATEWAY_STOP_ON_SKILL=<name>`` (trigger runs) the gateway refuses every
request after the model called ``Skill`` on that skill: the verdict is known,
the run ends without paying for the rest of the turn.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the events are checked where they are written, as where they are read
    from harness.sidecars import gatewaylog
else:
    try:  # in the sidecar: a sibling file in /opt/harness; on the host: the package module
        import gatewaylog
    except ImportError:  # pragma: no cover - host-side import of this file
        from harness.sidecars import gatewaylog

LISTING_HEADER = "The following skills are available for use with the Skill tool:"
LAUNCH_PREFIX = "Launching skill:"
LISTING_CAP = 64
LINE_CAP = 2048

Log = Callable[[gatewaylog.GatewayEvent], None]
"""Writes one event to the gateway's log (``gateway.log``)."""


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

    def saw(self, uses: Sequence[gatewaylog.ToolUse]) -> None:
        if self.skill and any(u.name == "Skill" and u.skill == self.skill for u in uses):
            with self.lock:
                self.fired = True

    def stopped(self) -> bool:
        with self.lock:
            return self.fired


STOPPER = Stopper(os.environ.get("GATEWAY_STOP_ON_SKILL", ""))


# ---------------------------------------------------------------- whose request is it?

SEED_TOOLS = frozenset({"Agent", "Task"})
"""The CLI's subagent tools: the prompt of such a ``tool_use`` opens the subagent's own conversation."""
SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL)
"""A compaction's answer: the CLI continues in a new conversation whose first message carries this text."""
TEXT_CAP = 8 << 20

Skeleton = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]


def _digest(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8", "replace")).hexdigest()[:32]


def _items(content: Any) -> tuple[tuple[str, str], ...]:
    """What identifies one message's content across the CLI's requests: each text's digest, each
    ``tool_use`` id, each ``tool_result``'s ``tool_use_id`` (not its content, which the CLI may clear
    later), each image or document's digest. ``cache_control`` markers, thinking blocks and empty
    texts are left out: the CLI moves, drops or reformats them between requests."""
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    out: list[tuple[str, str]] = []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and str(block.get("text", "")).strip():
            out.append(("t", _digest(str(block.get("text", "")))))
        elif kind == "tool_use":
            out.append(("u", str(block.get("id", ""))[:200]))
        elif kind == "tool_result":
            out.append(("r", str(block.get("tool_use_id", ""))[:200]))
        elif kind in ("image", "document"):
            out.append(("i", _digest(json.dumps(block.get("source"), sort_keys=True, default=str))))
    return tuple(out)


def skeleton(messages: Any) -> Skeleton:
    """The conversation a request carries, as the CLI keeps it from one request to the next: user and
    assistant turns only (the CLI rewrites its own ``system``-role messages each request), adjacent
    messages of one role merged (the CLI merges a tool result and the text that follows it)."""
    out: list[tuple[str, list[tuple[str, str]]]] = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            continue
        role = str(message["role"])
        items = _items(message.get("content"))
        if out and out[-1][0] == role:
            out[-1][1].extend(items)
        else:
            out.append((role, list(items)))
    return tuple((role, tuple(items)) for role, items in out)


def prefix_keys(skel: Skeleton) -> list[str]:
    """``keys[k]``: a hash of the first ``k`` turns (``keys[0]`` is the empty conversation)."""
    keys = [""]
    for turn in skel:
        keys.append(hashlib.sha256((keys[-1] + json.dumps(turn)).encode()).hexdigest()[:32])
    return keys


class Placement(NamedTuple):
    """Where :class:`Attribution` put one request."""

    thread: str | None
    """``cli``, ``agent-N``, ``compact-N``; None: a side request."""
    key: str = ""
    """The hash of the conversation the request carries (the CLI's requests only)."""
    root: bool = False
    """The first request of its thread."""
    forked: bool = False
    """A second, different continuation of one model answer (the first one seen is the CLI's)."""

    @property
    def side(self) -> bool:
        return self.thread is None


class Attribution:
    """Which requests are the CLI's (DESIGN §8): the trial's conversation is the first request's
    messages, and each later request that extends a request of it by exactly the answer the model
    gave to that request (the assistant turn the gateway itself streamed back: its ``tool_use`` ids and
    texts), then the CLI's own turn (tool results, text); a request equal to one of them is the CLI's
    retry. Two more ways a conversation of the CLI's begins, both bound to what the model answered on
    a conversation of the CLI's, once each:

    - a subagent (the non-bare CLI's ``Agent``/``Task`` tool): a new conversation whose first user
      message carries the prompt of such a ``tool_use``;
    - a compaction: the CLI asks for a summary on its conversation (an extension like any other), then
      goes on in a new conversation whose first user message carries the answer's ``<summary>`` and
      whose assistant turns are answers the model gave the CLI.

    Everything else is a side request. A process beside the CLI cannot extend the CLI's conversation
    without the model's ``tool_use`` ids of it, which only the CLI's own connection carried; what it can
    reproduce (the first request's messages, a prompt) is the CLI's only while nothing else was bound
    to it. A second, different continuation of one answer is flagged ``forked`` and is a side request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.threads: dict[str, str] = {}
        """Conversation hash of each of the CLI's requests -> its thread."""
        self.answers: dict[str, set[tuple[tuple[str, str], ...]]] = {}
        """Conversation hash of each of the CLI's requests -> what the model answered to it."""
        self.answered: set[tuple[tuple[str, str], ...]] = set()
        self.continued: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        """(request, answer) -> the conversation hash of the first request that continued that answer."""
        self.seeds: list[tuple[str, str]] = []
        """(text, kind) of each subagent prompt and compaction summary not yet bound to a conversation."""
        self.opened: dict[str, int] = {}

    def place(self, body: dict[str, Any]) -> Placement:
        messages = body.get("messages")
        skel = skeleton(messages)
        keys = prefix_keys(skel)
        with self.lock:
            if not self.threads:
                if not skel:
                    return Placement(None)
                return self._accept(keys[-1], "cli", root=True)
            for k in range(len(skel), 0, -1):
                thread = self.threads.get(keys[k])
                if thread is None:
                    continue
                rest = skel[k:]
                if not rest:
                    return Placement(thread, keys[k])  # a retry of the CLI's request
                answer = rest[0][1]
                if rest[0][0] != "assistant" or answer not in self.answers.get(keys[k], set()):
                    return Placement(None)
                if any(role == "assistant" for role, _ in rest[1:]):
                    return Placement(None)
                first = self.continued.setdefault((keys[k], answer), keys[-1])
                if first != keys[-1]:
                    return Placement(None, forked=True)
                return self._accept(keys[-1], thread)
            return self._root(messages, skel, keys[-1])

    def _root(self, messages: Any, skel: Skeleton, key: str) -> Placement:
        if not skel or skel[0][0] != "user":
            return Placement(None)
        if any(role == "assistant" and items not in self.answered for role, items in skel):
            return Placement(None)
        first = next(m for m in messages if isinstance(m, dict) and m.get("role") == "user")
        text = "\n".join(_texts(first.get("content")))
        for i, (seed, kind) in enumerate(self.seeds):
            if seed in text:
                del self.seeds[i]
                self.opened[kind] = self.opened.get(kind, 0) + 1
                return self._accept(key, f"{kind}-{self.opened[kind]}", root=True)
        return Placement(None)

    def _accept(self, key: str, thread: str, *, root: bool = False) -> Placement:
        self.threads.setdefault(key, thread)
        return Placement(thread, key, root=root)

    def answer(self, placement: Placement, blocks: list[dict[str, Any]]) -> None:
        """The model's answer to one of the CLI's requests (called before its last byte reaches the CLI)."""
        if placement.side:
            return
        items = answer_items(blocks)
        with self.lock:
            self.answers.setdefault(placement.key, set()).add(items)
            self.answered.add(items)
            for block in blocks:
                if block.get("type") == "tool_use" and block.get("name") in SEED_TOOLS:
                    prompt = block.get("input", {}).get("prompt") if isinstance(block.get("input"), dict) else None
                    if isinstance(prompt, str) and prompt.strip():
                        self.seeds.append((prompt.strip(), "agent"))
                elif block.get("type") == "text":
                    for summary in SUMMARY.findall(str(block.get("text", ""))):
                        if summary.strip():
                            self.seeds.append((summary.strip(), "compact"))


def answer_items(blocks: list[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """An answer's blocks as :func:`skeleton` sees the assistant turn the CLI sends back."""
    content = [
        {"type": "tool_use", "id": b.get("id", "")} if b.get("type") == "tool_use" else b
        for b in blocks
        if b.get("type") in ("text", "tool_use")
    ]
    return _items(content)


ATTRIBUTION = Attribution()
"""One per gateway process (one gateway per trial)."""


def observe_request(body: Any, log: Log, attribution: Attribution) -> Placement:
    """Log what this request shows about skills (metadata and the listing; never the conversation),
    and where ``attribution`` placed it. The response's ``model_tool_use`` line carries the same place."""
    if not isinstance(body, dict):
        return Placement(None)
    placement = attribution.place(body)
    messages: list[Any] = body["messages"] if isinstance(body.get("messages"), list) else []
    turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    tools = [str(t.get("name"))[:80] for t in body.get("tools") or [] if isinstance(t, dict)]
    lines = listing_lines(body)
    log(
        gatewaylog.SkillRequest(
            turn=turn,
            tools=tuple(tools[:64]),
            listed=None if lines is None else tuple(line_name(x) for x in lines),
            loaded=tuple(loaded_skills(body)),
            # the request's size: the non-bare CLI's extra tools, system text and listing cost input tokens
            request_bytes=len(json.dumps(body, separators=(",", ":"))),
            thread=placement.thread,
            side=placement.side,
            root=placement.root,
            forked=placement.forked,
            listing=tuple(lines) if placement.root and placement.thread == "cli" and lines is not None else None,
        )
    )
    return placement


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
    """Collect the blocks of one model response (``tool_use`` names, inputs and ids; texts) as its SSE
    lines stream past; at ``message_stop`` the answer is registered with the attribution, before the
    gateway forwards the line that completes it (the CLI cannot continue an answer not yet known)."""

    def __init__(self, placement: Placement | None = None, attribution: Attribution | None = None) -> None:
        self.placement = placement if placement is not None else Placement(None)
        self.attribution = attribution
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial: dict[int, str] = {}
        self.finished = False

    def feed(self, line: bytes) -> None:
        event = sse_event(line)
        if event is None:
            return
        kind = event.get("type")
        if kind == "message_stop":
            self.finish()
            return
        index = event.get("index")
        if not isinstance(index, int):
            return
        if kind == "content_block_start":
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self.blocks[index] = {
                    "type": "tool_use",
                    "id": str(block.get("id", ""))[:200],
                    "name": str(block.get("name"))[:80],
                    "input": block.get("input") or {},
                }
                self.partial[index] = ""
            elif isinstance(block, dict) and block.get("type") == "text":
                self.blocks[index] = {"type": "text", "text": str(block.get("text", ""))[:TEXT_CAP]}
        elif kind == "content_block_delta" and index in self.blocks:
            delta = event.get("delta")
            if not isinstance(delta, dict):
                return
            if delta.get("type") == "input_json_delta" and index in self.partial:
                self.partial[index] += str(delta.get("partial_json", ""))[: 1 << 20]
            elif delta.get("type") == "text_delta" and self.blocks[index]["type"] == "text":
                text = self.blocks[index]["text"] + str(delta.get("text", ""))
                self.blocks[index]["text"] = text[:TEXT_CAP]

    def feed_message(self, message: Any) -> None:
        """A non-streamed response body."""
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            return
        for i, block in enumerate(message["content"]):
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self.blocks[i] = {
                    "type": "tool_use",
                    "id": str(block.get("id", ""))[:200],
                    "name": str(block.get("name"))[:80],
                    "input": block.get("input") or {},
                }
            elif isinstance(block, dict) and block.get("type") == "text":
                self.blocks[i] = {"type": "text", "text": str(block.get("text", ""))[:TEXT_CAP]}
        self.finish()

    def answer(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = dict(self.blocks[index])
            text = self.partial.get(index, "")
            if text:
                try:
                    block["input"] = json.loads(text)
                except ValueError:
                    block["input"] = {}
            out.append(block)
        return out

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self.attribution is not None:
            self.attribution.answer(self.placement, self.answer())

    def uses(self) -> tuple[gatewaylog.ToolUse, ...]:
        """The answer's tool calls as the log records them (for ``Skill``, the skill it was called on)."""
        out: list[gatewaylog.ToolUse] = []
        for block in self.answer():
            if block["type"] != "tool_use":
                continue
            data = block.get("input")
            skill = str(data.get("skill", ""))[:200] if block["name"] == "Skill" and isinstance(data, dict) else None
            out.append(gatewaylog.ToolUse(name=block["name"], skill=skill))
        return tuple(out)

    def emit(self, log: Log) -> None:
        uses = self.uses()
        if not self.placement.side:  # a side request's Skill call never ends a trigger run
            STOPPER.saw(uses)
        log(gatewaylog.ModelToolUse(uses=uses, thread=self.placement.thread, side=self.placement.side))
