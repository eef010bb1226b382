"""The OpenAI Codex CLI as the harness runs it: its argv, its environment and its ``--json`` events.

Pure functions, as :mod:`harness.trial.claude` is for Claude Code; the agent seam (issue 30, item 1) will
put both behind one interface. docs/agents.md has the evidence for every choice here:

- ``codex exec`` (headless), ``--json`` (one event per line on stdout), ``--ephemeral`` (no session
  files), ``--skip-git-repo-check``, ``--strict-config`` (a setting this version does not know stops
  the run instead of being ignored);
- ``--sandbox danger-full-access`` and ``approval_policy="never"``: the container is the sandbox. Codex's
  own Linux sandbox (bubblewrap) needs user namespaces, which the hardened container refuses, so any other
  mode fails every command it runs;
- a custom provider ``harness`` pointed at the gateway (``wire_api = "responses"``, the key from
  ``OPENAI_API_KEY``, a placeholder: the gateway holds the real one). The built-in ``openai`` provider
  talks WebSocket to api.openai.com and ignores ``OPENAI_BASE_URL`` in this version;
- everything that would contact another host turned off: the update check, analytics, feedback, OpenTelemetry
  export, the plugin marketplace sync (``features.plugins``, which looks up api.github.com at start),
  the hosted ``web_search`` tool; and the bundled system skills (``skills.bundled``), which would be listed
  in both arms beside the skill under test.
"""

from __future__ import annotations

import json
from typing import Any

from harness.records import AgentResult
from harness.sandbox.deadline import deadline_argv

PROVIDER = "harness"
PLACEHOLDER_KEY = "sk-harness-placeholder"
"""What the CLI sends as its key: the gateway drops it and sends the real one (or the scripted API's)."""
CODEX_HOME = "/home/agent/.codex"
"""``$HOME/.codex``, the CLI's default, which it makes itself on the tmpfs HOME; not set as ``CODEX_HOME`` (a
``CODEX_HOME`` that does not exist yet stops the CLI)."""
SKILLS_DIR = "/home/agent/.agents/skills"
"""Where the installed delivery mounts a skill (``SKILLS_DIR/<name>``): a user-scope skill folder the CLI lists,
outside the workspace (so outside the patch) and outside ``CODEX_HOME`` (a mount there would make the engine
create ``~/.codex`` as root, and the CLI could not write its state)."""

OFF = (
    "check_for_update_on_startup=false",
    "analytics.enabled=false",
    "feedback.enabled=false",
    'otel.exporter="none"',
    "otel.log_user_prompt=false",
    'web_search="disabled"',
    "features.plugins=false",
    "skills.bundled.enabled=false",
)
"""``-c`` settings that keep the CLI from contacting anything but its provider, and from listing its
bundled skills (docs/agents.md, "What it contacts")."""


def provider_args(base_url: str) -> tuple[str, ...]:
    """``-c`` settings that make the gateway (``base_url``, ending in ``/v1``) the CLI's only provider."""
    table = (
        f'{{name="harness gateway", base_url={json.dumps(base_url)}, env_key="OPENAI_API_KEY", wire_api="responses"}}'
    )
    return ("-c", f'model_provider="{PROVIDER}"', "-c", f"model_providers.{PROVIDER}={table}")


def agent_command(prompt: str, *, model: str, base_url: str, timeout_s: int) -> tuple[str, ...]:
    """``codex exec`` under the in-container deadline (SIGTERM, then SIGKILL after the grace)."""
    settings = [arg for setting in OFF for arg in ("-c", setting)]
    return (
        *deadline_argv(timeout_s),
        "codex",
        "exec",
        "--json",
        "--ephemeral",
        "--skip-git-repo-check",
        "--strict-config",
        "--sandbox",
        "danger-full-access",
        "-c",
        'approval_policy="never"',
        "--model",
        model,
        *provider_args(base_url),
        *settings,
        "--",
        prompt,
    )


def codex_env() -> dict[str, str]:
    """The complete environment of a Codex container: nothing is inherited from the host (the gateway's
    address is on the command line, :func:`provider_args`)."""
    return {
        "HOME": "/home/agent",
        "OPENAI_API_KEY": PLACEHOLDER_KEY,
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
    }


def events(stdout: bytes) -> list[dict[str, Any]]:
    """The JSON objects of ``--json``'s stdout, one a line; anything else on a line is skipped (anything
    in the container can write to the CLI's stdout: the events are evidence, never the authority)."""
    out: list[dict[str, Any]] = []
    for line in stdout.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            out.append(value)
    return out


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def parse_result(stdout: bytes, exit_code: int | None) -> AgentResult:
    """What the CLI's events said. ``turn.completed`` carries the turn's token usage (``input_tokens``
    counts the cached ones too, as the API does); Codex reports no cost, so ``cost_usd`` stays None and the
    gateway's meter is the only cost figure. ``num_turns`` counts the model's tool calls and answers."""
    seen = events(stdout)
    if not seen:
        return AgentResult(exit_code=exit_code, parse_error="no --json events on stdout")
    thread = next((e.get("thread_id") for e in seen if e["type"] == "thread.started"), None)
    done = [e for e in seen if e["type"] == "turn.completed"]
    failed = [e for e in seen if e["type"] == "turn.failed"]
    items: list[dict[str, Any]] = [
        e["item"] for e in seen if e["type"] == "item.completed" and isinstance(e.get("item"), dict)
    ]
    answers = [str(i.get("text", "")) for i in items if i.get("type") == "agent_message"]
    last = done[-1].get("usage") if done else None
    usage: dict[str, Any] = last if isinstance(last, dict) else {}
    error = None
    if failed:
        raw = failed[-1].get("error")
        error = str(raw.get("message", "")) if isinstance(raw, dict) else str(raw)
    return AgentResult(
        exit_code=exit_code,
        subtype="error" if failed else "success" if done else None,
        is_error=bool(failed) or not done,
        num_turns=sum(1 for i in items if i.get("type") in ("command_execution", "file_change", "agent_message")),
        session_id=str(thread) if thread else None,
        terminal_reason=error[:200] if error else None,
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        result_excerpt=(answers[-1] if answers else error or "")[:500],
    )
