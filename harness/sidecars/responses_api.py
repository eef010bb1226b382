"""The gateway's half of the OpenAI Responses API (the API the Codex CLI speaks): pure, standard library.

What the gateway does for Codex is what it does for Claude Code, on another wire format
(docs/agents.md has the captured requests this module is written against):

- forward only ``POST /v1/responses`` (:data:`FORWARD_PATHS`; the pinned CLI, pointed at a custom
  provider, sends nothing else: no ``/v1/models``, no WebSocket, no ``/v1/responses/compact``);
- drop the client's credentials and send the real key as ``Authorization: Bearer`` (:func:`upstream_headers`);
- refuse what would leave the sandbox or keep state outside it (:func:`policy_violation`): hosted tools
  (web search, file search, code interpreter, remote MCP, computer use, image generation: any tool the
  server would run), server-side state (``previous_response_id``, ``conversation``, ``store`` other than
  false, ``background``, stored ``prompt`` templates, ``item_reference``), content the server would fetch
  (image or file URLs, uploaded file ids), a request body it cannot read (``content-encoding``), and
  service tiers the meter does not price;
- meter tokens from the stream's ``usage`` (:class:`StreamMeter`) as the log's API-neutral
  ``gatewaylog.Usage``, so the price table's four numbers (input, output, cache write, cache read) apply as
  they do to Claude;
- see "did the skill fire?" (:func:`skill_listing`, :func:`skill_reads`, :func:`loaded_skills`): Codex has
  no Skill tool. It lists skills in a ``<skills_instructions>`` developer message and the model loads one
  by reading its ``SKILL.md`` with a shell command (or the user names it as ``$name`` and the CLI puts the
  file into the conversation as a ``<skill>`` message);
- place each request in the CLI's conversation or call it a side request: :func:`as_messages` and
  :func:`answer_blocks` give :class:`skilltrace.Attribution` the shape it already binds (DESIGN §8), so
  one rule holds for both APIs.

Nothing here does I/O; the gateway calls it (see docs/agents.md, "What phase two wires").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

try:  # in the sidecar image: a sibling file in /opt/harness
    import skilltrace  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # imported as harness.sidecars.responses_api
    from harness.sidecars import skilltrace
if TYPE_CHECKING:  # the events are checked where they are written, as where they are read
    from harness.sidecars import gatewaylog
else:
    try:  # in the sidecar: a sibling file in /opt/harness; on the host: the package module
        import gatewaylog
    except ImportError:  # pragma: no cover - host-side import of this file
        from harness.sidecars import gatewaylog

FORWARD_PATHS = frozenset({"/v1/responses"})
FORWARD_HEADERS = frozenset({"content-type", "accept", "user-agent", "originator", "openai-beta"})
"""What the CLI sends that the API may need. Not forwarded: its credentials, ``accept-encoding`` (the gateway
reads the stream it meters), and the CLI's session metadata headers (``x-codex-turn-metadata`` carries
container paths and the commit hash of the workspace, which the API does not need)."""

DEFAULT_PRICING = {
    # USD per million tokens: input, output, cache write, cache read (docs/agents.md, "Prices")
    "gpt-6.2-sol": [2.0, 10.0, 2.5, 0.1],
    "gpt-6-sol": [2.0, 10.0, 2.5, 0.2],
    "gpt-6-luna": [0.1, 0.5, 0.125, 0.01],
    "gpt-6-astra": [10.0, 50.0, 12.5, 1.0],
}

CLIENT_TOOLS = frozenset({"function", "custom", "local_shell", "namespace", "tool_search"})
"""Tool types the client runs (``namespace`` groups them; ``tool_search`` only with ``execution: client``).
Every other type (``web_search``, ``file_search``, ``code_interpreter``, ``mcp``, ``computer_use``,
``image_generation``, ...) is run by the server: refused by name."""

INPUT_ITEMS = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "tool_search_call",
        "tool_search_output",
        "reasoning",
        "additional_tools",
        "compaction",
    }
)
"""Conversation items the CLI sends (an allow-list: a hosted tool's call or output, an ``item_reference``
to a stored item, anything new is refused)."""
CONTENT_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file", "refusal", "summary_text"})
OUTPUT_PARTS = frozenset({"input_text", "input_image", "input_file", "output_text"})
"""What a tool output given as a list may hold."""
STATE_FIELDS = ("previous_response_id", "conversation", "prompt")
SERVICE_TIERS = frozenset({"auto", "default"})
MAX_DEPTH = 4
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})


# --------------------------------------------------------------------------- forwarding


def upstream_headers(client: Mapping[str, str], api_key: str) -> dict[str, str]:
    """The headers sent upstream: the allowed ones the client sent, and the real key."""
    out = {k.lower(): v for k, v in client.items() if k.lower() in FORWARD_HEADERS}
    out["authorization"] = f"Bearer {api_key}"
    return out


def header_violation(client: Mapping[str, str]) -> str | None:
    """A compressed body could not be checked: it is refused rather than forwarded unread."""
    encoding = next((v for k, v in client.items() if k.lower() == "content-encoding"), "")
    if encoding.strip().lower() not in ("", "identity"):
        return f"compressed request bodies ({encoding.strip()[:40]}) are not accepted"
    return None


# --------------------------------------------------------------------------- policy


def policy_violation(body: Any) -> str | None:
    """Why this ``/v1/responses`` body is refused (None: it may be forwarded)."""
    if not isinstance(body, dict):
        return "body is not a JSON object"
    for name in STATE_FIELDS:
        if body.get(name) is not None:
            return f"{name} (state kept on the server) is not allowed"
    if body.get("store") is not False:
        return "store must be false (the API stores responses unless told not to)"
    if body.get("background"):
        return "background mode (a response run and kept on the server) is not allowed"
    tier = body.get("service_tier")
    if tier is not None and tier not in SERVICE_TIERS:
        return f"service tier {str(tier)[:40]!r} is priced differently from what the gateway meters"
    found = tools_violation(body.get("tools"), "tools", 0)
    if found:
        return found
    items = body.get("input")
    if isinstance(items, str):
        return None
    if not isinstance(items, list):
        return "input is neither a string nor a list of items"
    for i, item in enumerate(items):
        found = item_violation(item, f"input[{i}]")
        if found:
            return found
    return None


def tools_violation(tools: Any, where: str, depth: int) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return f"{where} is not a list"
    if depth > MAX_DEPTH:
        return f"{where} nests tool namespaces too deeply"
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            return f"{where}[{i}] is not a tool"
        kind = tool.get("type")
        if kind not in CLIENT_TOOLS:
            return f"server-side tool {str(kind)[:60]!r} is not allowed ({where}[{i}])"
        if kind == "tool_search" and tool.get("execution") != "client":
            return f"server-side tool search is not allowed ({where}[{i}])"
        if kind == "namespace":
            found = tools_violation(tool.get("tools"), f"{where}[{i}].tools", depth + 1)
            if found:
                return found
    return None


def item_violation(item: Any, where: str) -> str | None:
    if not isinstance(item, dict):
        return f"{where} is not an item"
    kind = item.get("type", "message")  # a bare {"role", "content"} is a message
    if kind not in INPUT_ITEMS:
        return f"input item type {str(kind)[:40]!r} is not allowed ({where})"
    if kind == "additional_tools":
        return tools_violation(item.get("tools"), f"{where}.tools", 0)
    if kind == "message":
        return parts_violation(item.get("content"), CONTENT_PARTS, f"{where}.content")
    if kind in ("function_call_output", "custom_tool_call_output") and isinstance(item.get("output"), list):
        return parts_violation(item["output"], OUTPUT_PARTS, f"{where}.output")
    return None


def parts_violation(content: Any, allowed: frozenset[str], where: str) -> str | None:
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"{where} is neither a string nor a list of parts"
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        if not isinstance(part, dict):
            return f"{at} is not a content part"
        kind = part.get("type")
        if kind not in allowed:
            return f"content part type {str(kind)[:40]!r} is not allowed ({at})"
        if kind == "input_image":
            url = part.get("image_url")
            if part.get("file_id") is not None or not (isinstance(url, str) and url.startswith("data:")):
                return f"an image the server would fetch is not allowed ({at}: only inline data: URLs)"
        if kind == "input_file" and (part.get("file_id") is not None or part.get("file_url") is not None):
            return f"a file the server would fetch is not allowed ({at}: only inline file_data)"
    return None


# --------------------------------------------------------------------------- metering


sse_event = skilltrace.sse_event
"""The JSON object of one ``data:`` line, or None for any other line (the meter never fails on one)."""


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def meter_usage(usage: Any) -> gatewaylog.Usage:
    """A Responses ``usage`` object as the meter's :class:`gatewaylog.Usage`. ``input_tokens`` counts every input token,
    the cached (``input_tokens_details.cached_tokens``) and the cache-written (``cache_write_tokens``)
    ones included; the meter prices the three kinds apart. Reasoning tokens are part of ``output_tokens``."""
    if not isinstance(usage, dict):
        return gatewaylog.Usage()
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, dict) else {}
    total, cached, written = (
        _count(usage.get("input_tokens")),
        _count(details.get("cached_tokens")),
        _count(details.get("cache_write_tokens")),
    )
    cached, written = min(cached, total), min(written, max(0, total - cached))
    return gatewaylog.Usage(
        input_tokens=total - cached - written,
        output_tokens=_count(usage.get("output_tokens")),
        cache_creation_input_tokens=written,
        cache_read_input_tokens=cached,
    )


class StreamMeter:
    """The usage and the end of one streamed response, from its SSE lines as they pass.

    The usage is the one the final event carries (``response.completed``, ``response.incomplete`` or
    ``response.failed``: each has the ``response`` object with its ``usage``); ``ended`` says a terminal
    event arrived (a stream cut before it is incomplete, like a Messages stream without ``message_stop``)."""

    def __init__(self) -> None:
        self.usage = gatewaylog.Usage()
        self.model = ""
        self.ended = False
        self.status = ""

    def feed(self, line: bytes) -> None:
        event = sse_event(line)
        if event is None:
            return
        kind = str(event.get("type", ""))
        response = event.get("response")
        if isinstance(response, dict):
            if isinstance(response.get("model"), str):
                self.model = response["model"][:120]
            if isinstance(response.get("usage"), dict):
                self.usage = meter_usage(response["usage"])
            if isinstance(response.get("status"), str):
                self.status = response["status"][:40]
        if kind in TERMINAL:
            self.ended = True

    def feed_body(self, body: Any) -> None:
        """A response that was not streamed (``stream: false``)."""
        if isinstance(body, dict):
            self.usage = meter_usage(body.get("usage"))
            self.ended = True


# --------------------------------------------------------------------------- the conversation, as Messages


def _text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return str(part["text"])
    return ""


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [t for t in (_text(p) for p in content) if t] if isinstance(content, list) else []


def output_text(output: Any) -> str:
    """A tool output (a string, or a list of parts) as text."""
    return output if isinstance(output, str) else "\n".join(_texts(output))


CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call", "tool_search_call"})
RESULTS = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output", "tool_search_output"}
)


def call_input(item: dict[str, Any]) -> Any:
    """What a tool call asks for: the parsed JSON arguments of a function call, a custom tool's text, a
    local shell call's action."""
    if item.get("type") == "function_call":
        raw = item.get("arguments")
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return {"_raw": raw}
        return parsed if isinstance(parsed, dict) else {"_value": parsed}
    if item.get("type") == "custom_tool_call":
        return {"input": item.get("input", "")}
    return item.get("action") or item.get("arguments") or {}


def as_messages(items: Any) -> list[dict[str, Any]]:
    """The conversation of a ``/v1/responses`` body in the Messages API's shape: user messages, assistant
    turns (texts and ``tool_use`` blocks whose id is the call's ``call_id``) and tool results. Developer
    and system messages become ``system`` messages (the CLI rewrites them; :func:`skilltrace.skeleton`
    leaves them out as it leaves out Claude Code's); reasoning items are dropped (encrypted, and carried
    again in every request, as thinking blocks are). Adjacent items of one side form one message."""
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    out: list[dict[str, Any]] = []

    def add(role: str, block: dict[str, Any]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].append(block)
        else:
            out.append({"role": role, "content": [block]})

    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = str(item.get("role", "user"))
            role = "system" if role in ("developer", "system") else role
            for text in _texts(item.get("content")):
                add(role, {"type": "text", "text": text})
        elif kind in CALLS:
            name = str(item.get("name") or kind.removesuffix("_call"))
            add(
                "assistant",
                {"type": "tool_use", "id": str(item.get("call_id", "")), "name": name, "input": call_input(item)},
            )
        elif kind in RESULTS:
            add(
                "user",
                {
                    "type": "tool_result",
                    "tool_use_id": str(item.get("call_id", "")),
                    "content": output_text(item.get("output", "")),
                },
            )
    return out


def answer_blocks(output: Iterable[Any]) -> list[dict[str, Any]]:
    """The model's output items as the assistant blocks :func:`as_messages` will see sent back."""
    blocks: list[dict[str, Any]] = []
    for item in output:
        for message in as_messages([item]):
            if message["role"] == "assistant":
                blocks.extend(message["content"])
    return blocks


class OutputCollector:
    """The output items of one streamed response (``response.output_item.done``), complete once a
    terminal event arrived: the gateway registers the answer (``Attribution.answer``) before it forwards
    the line that completes it, as it does for a Messages stream."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.finished = False

    def feed(self, line: bytes) -> bool:
        """Returns True on the line that completes the response."""
        event = sse_event(line)
        if event is None or self.finished:
            return False
        kind = event.get("type")
        if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            self.items.append(event["item"])
        elif kind in TERMINAL:
            response = event.get("response")
            if not self.items and isinstance(response, dict) and isinstance(response.get("output"), list):
                self.items = [i for i in response["output"] if isinstance(i, dict)]
            self.finished = True
            return True
        return False

    def blocks(self) -> list[dict[str, Any]]:
        return answer_blocks(self.items)


# --------------------------------------------------------------------------- did the skill fire?

SKILLS_BLOCK = re.compile(r"<skills_instructions>(.*?)</skills_instructions>", re.DOTALL)
ROOT_LINE = re.compile(r"^- `(r\d+)` = `([^`]+)`\s*$")
SKILL_LINE = re.compile(r"^- ([^:]+): (.*) \(file: ([^)]+)\)\s*$")
INJECTED = re.compile(r"<skill>\s*<name>([^<]{1,200})</name>\s*<path>([^<]{1,4096})</path>")
LISTING_CAP = 64


class ListedSkill(NamedTuple):
    name: str
    description: str
    path: str
    """The SKILL.md's absolute path (the roots table's alias expanded)."""


def skill_listing(body: Any) -> list[ListedSkill] | None:
    """The skills the CLI listed to the model (None: no ``<skills_instructions>`` in this request)."""
    items = body.get("input") if isinstance(body, dict) else None
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue
        for text in _texts(item.get("content")):
            found = SKILLS_BLOCK.search(text)
            if found:
                return parse_listing(found.group(1))
    return None


def parse_listing(block: str) -> list[ListedSkill]:
    roots: dict[str, str] = {}
    out: list[ListedSkill] = []
    for line in block.splitlines():
        root = ROOT_LINE.match(line)
        if root:
            roots[root.group(1)] = root.group(2).rstrip("/")
            continue
        skill = SKILL_LINE.match(line)
        if skill and len(out) < LISTING_CAP:
            alias, _, rest = skill.group(3).partition("/")
            path = f"{roots[alias]}/{rest}" if alias in roots and rest else skill.group(3)
            out.append(ListedSkill(skill.group(1).strip()[:200], skill.group(2).strip()[:2048], path[:4096]))
    return out


def _call_text(block: dict[str, Any]) -> str:
    data = block.get("input")
    return data if isinstance(data, str) else json.dumps(data, sort_keys=True)


def skill_reads(blocks: Iterable[dict[str, Any]], paths: Mapping[str, str]) -> list[str]:
    """The skills (``paths``: name -> SKILL.md path) whose file one of the model's tool calls names: how
    Codex loads a skill (its listing tells the model to open the file). A call that names the skill's
    folder but not SKILL.md (``ls``) is not a read."""
    names: list[str] = []
    for block in blocks:
        if block.get("type") != "tool_use":
            continue
        text = _call_text(block)
        names.extend(n for n, p in paths.items() if p and p in text and n not in names)
    return names


def read_names(call: dict[str, Any], output: str, paths: Mapping[str, str]) -> list[str]:
    """The skills one call's output brought back: the call read the SKILL.md and the output holds the
    file's ``name:`` front matter line (an error, an empty file or another file does not)."""
    text = output.replace("\\n", "\n")  # a code-mode cell returns the shell's output JSON-escaped
    return [
        name
        for name in skill_reads([call], paths)
        if re.search(rf"(?m)^name:\s*['\"]?{re.escape(name)}['\"]?\s*$", text)
    ]


def loaded_skills(body: Any, paths: Mapping[str, str]) -> list[str]:
    """Skills whose body came back to the model in this request: in what the CLI sent since the model's last
    turn, the output of a call of the model's that read the SKILL.md (:func:`read_names`), or the file put
    in by the CLI as a ``<skill>`` message (the user named the skill as ``$name``)."""
    messages = as_messages(body.get("input") if isinstance(body, dict) else None)
    tail: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message["role"] == "assistant":
            break
        tail[:0] = message["content"]
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    calls = {str(b.get("id")): b for b in (last["content"] if last else []) if b.get("type") == "tool_use"}
    names: list[str] = []
    for block in tail:
        if block.get("type") == "tool_result" and str(block.get("tool_use_id")) in calls:
            names.extend(read_names(calls[str(block.get("tool_use_id"))], str(block.get("content", "")), paths))
        elif block.get("type") == "text":
            for name, path in INJECTED.findall(str(block.get("text", ""))):
                if name.strip() in paths and path.strip() == paths[name.strip()]:
                    names.append(name.strip())
    return list(dict.fromkeys(names))


# --------------------------------------------------------------------------- the gateway's log for one request


class SkillFiles:
    """The listed skills' files (name -> ``SKILL.md`` path), from the first listing of a request of the CLI's:
    what a read is matched against for the rest of the trial. A side request cannot set them (its listing
    could name another file to make an unrelated read count as a load)."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}

    def learn(self, listing: list[ListedSkill] | None, placement: skilltrace.Placement) -> None:
        if listing is not None and not self.paths and not placement.side:
            self.paths = {s.name: s.path for s in listing}


SKILL_FILES = SkillFiles()
"""One per gateway process (one gateway per trial), beside :data:`skilltrace.ATTRIBUTION`."""


def _tool_names(tools: Any) -> list[str]:
    return (
        [str(t.get("name") or t.get("type"))[:80] for t in tools if isinstance(t, dict)]
        if isinstance(tools, list)
        else []
    )


def observe_request(
    body: Any, log: skilltrace.Log, attribution: skilltrace.Attribution, files: SkillFiles
) -> skilltrace.Placement:
    """The request's ``skill_request`` line, in the fields the Messages API's has (:func:`skilltrace.observe_request`):
    where the attribution placed it, the skills listed (each listing line as ``- name: description``, on the
    CLI's first request), the skills whose file came back to the model since its last answer. Metadata only."""
    if not isinstance(body, dict):
        return skilltrace.Placement(None)
    messages = as_messages(body.get("input"))
    placement = attribution.place({"messages": messages})
    listing = skill_listing(body)
    files.learn(listing, placement)
    lines = None if listing is None else [f"- {s.name}: {s.description}" for s in listing]
    log(
        gatewaylog.SkillRequest(
            turn=sum(1 for m in messages if m["role"] == "assistant"),
            tools=tuple(_tool_names(body.get("tools"))[:64]),
            listed=None if listing is None else tuple(s.name for s in listing),
            loaded=tuple(loaded_skills(body, files.paths)),
            request_bytes=len(json.dumps(body, separators=(",", ":"))),
            thread=placement.thread,
            side=placement.side,
            root=placement.root,
            forked=placement.forked,
            listing=tuple(lines) if placement.root and placement.thread == "cli" and lines is not None else None,
        )
    )
    return placement


class AnswerTrace:
    """One response's output items as its SSE lines pass (:class:`OutputCollector`); on the completing line the
    answer is registered with the attribution, before the gateway forwards that line (the CLI cannot continue an
    answer not yet known). Its ``model_tool_use`` line names each call, and for a call that reads a listed
    ``SKILL.md`` the skill it loads: Codex's "Skill tool" (:func:`skill_reads`)."""

    def __init__(
        self, placement: skilltrace.Placement, attribution: skilltrace.Attribution | None, files: SkillFiles
    ) -> None:
        self.placement = placement
        self.attribution = attribution
        self.files = files
        self.collector = OutputCollector()
        self.registered = False

    def feed(self, line: bytes) -> None:
        if self.collector.feed(line):
            self.finish()

    def feed_body(self, body: Any) -> None:
        """A response that was not streamed."""
        if isinstance(body, dict) and isinstance(body.get("output"), list):
            self.collector.items = [i for i in body["output"] if isinstance(i, dict)]
            self.collector.finished = True
            self.finish()

    def finish(self) -> None:
        if self.registered:
            return
        self.registered = True
        if self.attribution is not None:
            self.attribution.answer(self.placement, self.collector.blocks())

    def uses(self) -> tuple[gatewaylog.ToolUse, ...]:
        out: list[gatewaylog.ToolUse] = []
        for block in self.collector.blocks():
            if block.get("type") != "tool_use":
                continue
            read = skill_reads([block], self.files.paths)
            out.append(gatewaylog.ToolUse(name=str(block.get("name"))[:80], skill=read[0][:200] if read else None))
        return tuple(out)

    def emit(self, log: skilltrace.Log) -> None:
        log(gatewaylog.ModelToolUse(uses=self.uses(), thread=self.placement.thread, side=self.placement.side))
