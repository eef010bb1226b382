"""The Claude Code CLI as the harness runs it: its argv and its JSON result.

Pure functions: what to run and how to read what came back. Where it runs
(container, network, mounts, its environment: :func:`harness.sandbox.roles.claude_env`) is
:mod:`harness.sandbox`'s business.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness.records import AgentResult
from harness.sandbox.deadline import deadline_argv


def _claude(
    prompt: str,
    *,
    model: str,
    max_budget_usd: float,
    timeout_s: int,
    options: Sequence[str],
    output: Sequence[str] = ("--output-format", "json"),
) -> tuple[str, ...]:
    """``claude --bare -p`` under an in-container deadline (SIGTERM, then SIGKILL after the grace)."""
    deadline = deadline_argv(timeout_s)
    common = (*output, "--model", model, "--max-budget-usd", f"{max_budget_usd:g}")
    return (*deadline, "claude", "--bare", "-p", prompt, *common, *options, "--no-session-persistence")


TRANSCRIPT_OUTPUT = ("--output-format", "stream-json", "--verbose")
"""The agent's stdout is its full transcript: one JSON message per line (init, every assistant and
tool-result message), ending in the same result object ``--output-format json`` prints, which
:func:`find_result` takes from the last line."""


def agent_command(
    prompt: str, *, model: str, allowed_tools: Sequence[str], max_budget_usd: float, timeout_s: int
) -> tuple[str, ...]:
    return _claude(
        prompt,
        model=model,
        max_budget_usd=max_budget_usd,
        timeout_s=timeout_s,
        options=("--allowedTools", ",".join(allowed_tools)),
        output=TRANSCRIPT_OUTPUT,
    )


def judge_command(
    prompt: str, *, model: str, schema: dict[str, Any], max_budget_usd: float, timeout_s: int
) -> tuple[str, ...]:
    """No tools at all; the verdict must come back as structured output matching ``schema``."""
    return _claude(
        prompt,
        model=model,
        max_budget_usd=max_budget_usd,
        timeout_s=timeout_s,
        options=("--tools", "", "--json-schema", json.dumps(schema, separators=(",", ":"))),
    )


def find_result(stdout: bytes) -> dict[str, Any] | None:
    """The CLI's result object, read defensively.

    ``--output-format json`` prints one object, but ``--verbose`` (or a settings
    file) turns it into an array of messages, and anything in the container can
    write to the CLI's stdout. Take the last object with ``type == "result"``.
    """
    text = stdout.decode("utf-8", errors="replace").strip()
    candidates: list[Any] = []
    try:
        candidates.append(json.loads(text))
    except ValueError:
        for line in reversed(text.splitlines()):
            line = line.strip()
            if line.startswith(("{", "[")):
                try:
                    candidates.append(json.loads(line))  # newest first; a later non-result line must not hide it
                except ValueError:
                    continue
    for value in candidates:
        items = value if isinstance(value, list) else [value]
        for item in reversed(items):
            if isinstance(item, dict) and item.get("type") == "result":
                return item
    return None


def result_json(stdout: bytes) -> bytes:
    """The result object alone (what ``agent.json`` held before transcripts), else stdout as it is."""
    data = find_result(stdout)
    return stdout if data is None else json.dumps(data, indent=1).encode()


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def parse_result(stdout: bytes, exit_code: int | None) -> AgentResult:
    data = find_result(stdout)
    if data is None:
        return AgentResult(exit_code=exit_code, parse_error="no result object on stdout")
    raw_usage = data.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    raw_model_usage = data.get("modelUsage")
    model_usage: dict[str, Any] = raw_model_usage if isinstance(raw_model_usage, dict) else {}
    cost = data.get("total_cost_usd")
    denials = data.get("permission_denials")
    result = data.get("result")
    return AgentResult(
        exit_code=exit_code,
        subtype=str(data.get("subtype")) if data.get("subtype") is not None else None,
        is_error=bool(data.get("is_error")) if data.get("is_error") is not None else None,
        num_turns=_int(data.get("num_turns")),
        cost_usd=float(cost) if isinstance(cost, int | float) else None,
        duration_ms=_int(data.get("duration_ms")),
        terminal_reason=str(data["terminal_reason"]) if data.get("terminal_reason") else None,
        stop_reason=str(data["stop_reason"]) if data.get("stop_reason") else None,
        permission_denials=len(denials) if isinstance(denials, list) else 0,
        session_id=str(data["session_id"]) if data.get("session_id") else None,
        resolved_model=next(iter(model_usage), None) if model_usage else None,
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        result_excerpt=str(result)[:500] if result is not None else "",
    )


def structured_output(stdout: bytes) -> dict[str, Any] | None:
    data = find_result(stdout)
    if data is None:
        return None
    value = data.get("structured_output")
    return value if isinstance(value, dict) else None


def cli_says_budget_exceeded(result: AgentResult) -> bool:
    return (result.subtype or "").startswith("error_max_budget") or result.terminal_reason == "budget_exhausted"
