"""The gateway's log, typed once: one JSON line per event, written by the gateway, parsed by the controller.

Standard library only: this file runs in the sidecar image beside ``gateway.py`` and ``skilltrace.py``
(which write it) and is imported by the controller (which reads it: the meter, the API's health, "did the
skill fire?", a trigger run's verdict, the live retry-after). Each event is a frozen dataclass whose
``event`` field is its ``Literal`` discriminator, and :data:`GatewayEvent` is their union (the shape of
inspect_ai's ``event/_sandbox.py`` and the union of ``event/_event.py``, without pydantic). A field read
or written under a wrong name is a type error (mypy strict), not a key that silently reads as zero.

:func:`parse` turns one line into an event once, where the line is read; after that every reader has
attributes, not string keys. A line that is not a JSON object, or an object of a kind this module does
not know (the scripted Messages API's own lines), is not an event (None); a known kind whose fields do
not fit is a :class:`LogFormatError` (the gateway and this parser ship in one image, so that is a bug to
show, never a line to skip).

The events describe what the gateway did in terms of no one API: :class:`Usage` is the tokens of one
answer as the meter prices them, and :class:`ToolUse` one tool call of the model, each filled by the
gateway from what its API sends (``gateway.py``: the Messages API's ``usage`` and ``tool_use`` blocks). A
second API through the same gateway fills the same records from its own fields (OpenAI's Responses API:
``input_tokens - input_tokens_details.cached_tokens`` as input, ``cached_tokens`` as cache reads,
``output_tokens``; its ``function_call`` items as tool uses), and every reader on the controller stays as it is.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin


class LogFormatError(ValueError):
    """A line of a known event kind whose fields do not fit its class."""


# ---------------------------------------------------------------- records inside events


@dataclass(frozen=True, kw_only=True)
class Usage:
    """The tokens of one model answer, whatever API carried it, by how the meter prices them."""

    input_tokens: int = 0
    """Input tokens read neither from nor into the prompt cache (the input price)."""
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    """Input tokens written to the prompt cache (the cache-write price)."""
    cache_read_input_tokens: int = 0
    """Input tokens read from the prompt cache (the cache-read price)."""


@dataclass(frozen=True, kw_only=True)
class ToolUse:
    """One tool call the model made in an answer."""

    name: str
    skill: str | None = None
    """The skill the call loads: Claude Code's ``Skill`` tool names it; a Codex shell call that reads a listed
    skill's ``SKILL.md`` (``responses_api.AnswerTrace``)."""


# ---------------------------------------------------------------- the events


@dataclass(frozen=True, kw_only=True)
class Listening:
    """A sidecar serves: the gateway's first line (and the scripted Messages API's, which logs its port)."""

    event: Literal["listening"] = "listening"
    upstream_scheme: str | None = None
    budget_usd: float | None = None
    port: int | None = None


@dataclass(frozen=True, kw_only=True)
class Fatal:
    """The gateway could not start (it exits after this line)."""

    event: Literal["fatal"] = "fatal"
    reason: str


@dataclass(frozen=True, kw_only=True)
class Refused:
    """A request the gateway answered itself with an error and did not forward (its policy, the budget)."""

    event: Literal["refused"] = "refused"
    method: str
    path: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class UpstreamError:
    """A request the gateway forwarded and got no answer to (TLS, the proxy, DNS, a refused connection)."""

    event: Literal["upstream_error"] = "upstream_error"
    path: str
    error: str
    """The exception's class name."""
    detail: str
    """What went wrong, in words (:meth:`upstream_link.Link.describe`)."""


@dataclass(frozen=True, kw_only=True)
class Forwarded:
    """A request the gateway forwarded and the answer it passed back, metered."""

    event: Literal["forwarded"] = "forwarded"
    path: str
    status: int
    """The upstream's HTTP status."""
    model: str
    """The model the request asked for (what the meter priced)."""
    stream: bool
    usage: Usage
    cost_usd: float
    broken: bool
    """The client's side of a stream went away before its end (the agent's doing, not the API's)."""
    complete: bool
    """A stream reached its end event (``message_stop``); always true for an answer that is not a stream."""
    retry_after: str | None = None
    """The upstream's ``retry-after`` header, as sent."""


@dataclass(frozen=True, kw_only=True)
class SkillRequest:
    """What one model request shows about skills, and whose request it is (``skilltrace.py``)."""

    event: Literal["skill_request"] = "skill_request"
    turn: int
    """The model's answers the request carries (0: the conversation's first request)."""
    tools: tuple[str, ...]
    """The tool names offered."""
    listed: tuple[str, ...] | None
    """The skills the request's listing names; None: no listing in this request."""
    loaded: tuple[str, ...]
    """Skills whose load the CLI reported back since the model's last answer ("Launching skill: NAME")."""
    request_bytes: int
    thread: str | None
    """The CLI's conversation the request belongs to (``cli``, ``agent-N``, ``compact-N``); None: a side request."""
    side: bool
    root: bool
    """The first request of its thread."""
    forked: bool = False
    """A second, different continuation of one answer of the model's (a side request)."""
    listing: tuple[str, ...] | None = None
    """The listing's ``- name: description`` lines: on the CLI's first request only (provenance)."""


@dataclass(frozen=True, kw_only=True)
class ModelToolUse:
    """The tool calls of one model answer, read as it streamed past."""

    event: Literal["model_tool_use"] = "model_tool_use"
    uses: tuple[ToolUse, ...]
    thread: str | None
    side: bool


GatewayEvent = Listening | Fatal | Refused | UpstreamError | Forwarded | SkillRequest | ModelToolUse
"""One line of a gateway's log."""

_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """The field types of a dataclass of this module, resolved once."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


EVENT_TYPES: tuple[type[GatewayEvent], ...] = get_args(GatewayEvent)
KINDS: dict[str, type[GatewayEvent]] = {get_args(_hints(cls)["event"])[0]: cls for cls in EVENT_TYPES}
"""The discriminator's value (``event``) -> its class."""


# ---------------------------------------------------------------- writing and reading


def dump(event: GatewayEvent) -> str:
    """The event's line (without its newline): JSON, keys sorted."""
    return json.dumps(dataclasses.asdict(event), sort_keys=True)


def parse(line: bytes | str) -> GatewayEvent | None:
    """One line of a gateway's log as its event; None for a line that is no event of the gateway's.
    Raises :class:`LogFormatError` for an event whose fields do not fit its class."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    kind = data.get("event")
    if not isinstance(kind, str) or kind not in KINDS:
        return None
    event: GatewayEvent = _build(KINDS[kind], data, kind)
    return event


def _build(cls: type[Any], data: dict[str, Any], where: str) -> Any:
    """An instance of the dataclass ``cls`` from a decoded JSON object, each field checked by its type."""
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = _value(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise LogFormatError(f"{where}: no field {f.name!r}")
    return cls(**values)


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` (decoded JSON) as the type ``hint`` names, or a LogFormatError naming the field."""
    origin = get_origin(hint)
    if origin is Literal:
        if value in get_args(hint):
            return value
    elif origin in (Union, types.UnionType):
        for arg in get_args(hint):
            try:
                return _value(arg, value, where)
            except LogFormatError:
                continue
    elif origin is tuple:
        item = get_args(hint)[0]
        if isinstance(value, list):
            return tuple(_value(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if isinstance(value, dict):
            return _build(hint, value, where)
    elif hint is type(None):
        if value is None:
            return None
    elif hint is bool or hint is str:
        if isinstance(value, hint):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    else:  # pragma: no cover - a field of a type this parser was not taught
        raise TypeError(f"{where}: no parser for {hint!r}")
    raise LogFormatError(f"{where}: {type(value).__name__} {str(value)[:80]!r} is not {hint}")
