"""The scripted model on the OpenAI Responses API: what the Codex CLI speaks, driven by the same scenarios.

``scripted_api.py`` serves ``POST /v1/responses`` with what is here (this module imports nothing of it).
Nothing about the script is decided twice: the request is read as the Messages API conversation it is (:func:`responses_api.as_messages`:
the first user message carries the task prompt, each call the model made is a ``tool_use`` whose id is the
call's ``call_id``, each output a ``tool_result``), :func:`scripted_api.agent_reply` decides the step as it
does for Claude Code, and the step is sent back as the call Codex's tools run:

    Bash  {command}                       exec_command {cmd: command}
    Read  {file_path}                     exec_command {cmd: cat -- PATH}
    Write {file_path, content}            exec_command: the content base64-decoded into PATH
    Edit  {file_path, old_string, ...}    exec_command: python3 replaces old_string (once, or every one
                                          with replace_all) and fails when it is absent
    Skill {skill} (installed delivery)    exec_command {cmd: cat -- the listed SKILL.md}

(``exec_command`` is the pinned CLI's shell tool; docs/agents.md.) Codex has no Skill tool: it lists skills
in ``<skills_instructions>`` and the model opens the file. So for the scenario's installed delivery the
listing is read from there, and a read of the listed SKILL.md whose output holds the file is the launch the
scenario checks for (``Launching skill: NAME``, as Claude Code reports it).

Streaming follows the Responses API: ``response.created``, then per output item ``response.output_item.added``,
its deltas (``response.output_text.delta``, ``response.function_call_arguments.delta``) and
``response.output_item.done``, then ``response.completed`` with ``usage`` (the scenario's tokens:
``input_tokens`` counts the cached and cache-written ones too, as the API does).
"""

from __future__ import annotations

import base64
import json
import shlex
import time
import uuid
from collections.abc import Iterator
from typing import Any

try:  # in the sidecar image: a sibling file in /opt/harness
    import responses_api  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # imported as harness.sidecars.scripted_responses (unit tests)
    from harness.sidecars import responses_api

EDIT = (
    "import base64,sys\n"
    "p,o,n=(base64.b64decode(a).decode() for a in sys.argv[1:4])\n"
    "s=open(p,encoding='utf-8').read()\n"
    "if o not in s: sys.exit('old_string not found in '+p)\n"
    "open(p,'w',encoding='utf-8').write(s.replace(o,n,int(sys.argv[4])))\n"
)
DEFAULT_USAGE = {"input_tokens": 1000, "output_tokens": 50}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def shell_command(tool: str, data: dict[str, Any], listing: dict[str, str]) -> str | None:
    """The shell command that does what a scenario step asks (None: no Codex equivalent)."""
    if tool == "Bash":
        return str(data.get("command", ""))
    if tool == "Read":
        return f"cat -- {shlex.quote(str(data.get('file_path', '')))}"
    if tool == "Write":
        path = str(data.get("file_path", ""))
        folder = path.rsplit("/", 1)[0] or "/"
        content = _b64(str(data.get("content", "")))
        return f"mkdir -p -- {shlex.quote(folder)} && printf %s {content} | base64 -d > {shlex.quote(path)}"
    if tool == "Edit":
        args = [_b64(str(data.get(k, ""))) for k in ("file_path", "old_string", "new_string")]
        count = "-1" if data.get("replace_all") else "1"
        return f"python3 -c {shlex.quote(EDIT)} {' '.join(args)} {count}"
    if tool == "Skill":
        listed = listing.get(str(data.get("skill", "")))
        return f"cat -- {shlex.quote(listed)}" if listed else None
    return None


def codex_item(block: dict[str, Any], listing: dict[str, str]) -> dict[str, Any]:
    """One block of a scripted reply as a Responses output item."""
    if block["type"] == "text":
        content = [{"type": "output_text", "text": block["text"], "annotations": []}]
        return {
            "type": "message",
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "role": "assistant",
            "status": "completed",
            "content": content,
        }
    command = shell_command(str(block["name"]), block.get("input") or {}, listing)
    name, arguments = str(block["name"]), block.get("input") or {}
    if command is not None:
        name, arguments = "exec_command", {"cmd": command}
    return {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex[:24]}",
        "call_id": block["id"],
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def responses_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """The scenario's token counts as a Responses ``usage`` object."""
    fresh, out = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    written, cached = int(usage.get("cache_creation_input_tokens", 0)), int(usage.get("cache_read_input_tokens", 0))
    total_in = fresh + written + cached
    return {
        "input_tokens": total_in,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": total_in + out,
    }


LAUNCH = "Launching skill:"


def messages_view(body: dict[str, Any], listing_header: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The request as :func:`scripted_api.agent_reply` reads a Messages API request, and the listed skills
    (name -> SKILL.md path). The listing is rewritten in Claude Code's words (``listing_header`` and one
    ``- name: description`` line a skill) and a read of a listed SKILL.md that brought the file back is
    reported as its launch (module docstring)."""
    messages = [m for m in responses_api.as_messages(body.get("input")) if m["role"] != "system"]
    listed = responses_api.skill_listing(body) or []
    paths = {s.name: s.path for s in listed}
    if listed and messages and messages[0]["role"] == "user":
        lines = "\n".join(f"- {s.name}: {s.description}" for s in listed)
        header = {"type": "text", "text": f"{listing_header}\n{lines}\n"}
        messages[0] = {"role": "user", "content": [header, *messages[0]["content"]]}
    calls = {b["id"]: b for m in messages if m["role"] == "assistant" for b in m["content"] if "id" in b}
    for message in messages if paths else []:
        for block in message["content"]:
            call = calls.get(block.get("tool_use_id")) if block.get("type") == "tool_result" else None
            names = responses_api.read_names(call, str(block["content"]), paths) if call else []
            if names:
                block["content"] = f"{LAUNCH} {names[0]}\n{block['content']}"
    session = str(body.get("prompt_cache_key") or "")
    view = {"model": body.get("model"), "messages": messages}
    if session:
        view["metadata"] = {"user_id": json.dumps({"session_id": session})}
    return view, paths


def response_json(reply: Any, model: str, listing: dict[str, str], status: str) -> dict[str, Any]:
    return {
        "id": f"resp_{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": [codex_item(b, listing) for b in reply.blocks],
        "usage": responses_usage(reply.usage),
    }


def error_body(status: int) -> dict[str, Any]:
    """An injected error in the API's shape (``rate_limit_exceeded`` for 429, else ``server_error``)."""
    kind = "rate_limit_exceeded" if status == 429 else "server_error"
    return {"error": {"message": "scripted error", "type": kind, "code": kind}}


def sse_events(reply: Any, model: str, listing: dict[str, str], *, broken: bool = False) -> Iterator[bytes]:
    """The response's server-sent events, one ``bytes`` each (``broken``: cut off after the first)."""
    done = response_json(reply, model, listing, "completed")
    seq = iter(range(1 << 30))

    def event(name: str, data: dict[str, Any]) -> bytes:
        payload = {"type": name, "sequence_number": next(seq), **data}
        return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()

    yield event("response.created", {"response": dict(done, status="in_progress", output=[], usage=None)})
    if broken:
        yield b'event: response.output_item.added\ndata: {"type": "response.output_'
        return
    for index, item in enumerate(done["output"]):
        if item["type"] == "message":
            opening = dict(item, content=[], status="in_progress")
            delta = ("response.output_text.delta", {"content_index": 0, "delta": item["content"][0]["text"]})
        else:
            opening = dict(item, arguments="", status="in_progress")
            delta = ("response.function_call_arguments.delta", {"delta": item["arguments"]})
        yield event("response.output_item.added", {"output_index": index, "item": opening})
        yield event(delta[0], {"item_id": item["id"], "output_index": index, **delta[1]})
        yield event("response.output_item.done", {"output_index": index, "item": item})
    yield event("response.completed", {"response": done})
