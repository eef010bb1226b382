"""Per-trial API gateway: the agent container's only way out.

Runs *inside a trusted sidecar container* (stdlib only, no harness imports),
dual-homed: on the trial's internal network (where the agent reaches it by IP)
and on the upstream network. It holds the real API key, read from a file
mounted read-only from a controller-private directory; the agent only has a
placeholder.

Policy:
- ``HEAD``/``GET /api/hello`` is answered locally (the CLI's connectivity probe);
- only the APIs ``GATEWAY_APIS`` names are forwarded (:data:`API_PATHS`): ``POST /v1/messages`` and
  ``POST /v1/messages/count_tokens`` (Claude Code, and the judge in every trial), ``POST /v1/responses``
  (the Codex CLI: policy, key, meter and "did the skill fire?" from ``responses_api.py``);
- the client's ``x-api-key`` / ``authorization`` are dropped and the real key injected;
- bodies asking for ``mcp_servers``, a ``container``, or server-side tools (any tool
  with a ``type`` other than ``custom``) are refused, as are bodies over the cap and content
  outside an allow-list of block and source types (no URL-sourced images or documents);
- SSE is streamed through unchanged while usage is metered; once the metered cost
  reaches the trial's budget, further requests are refused.

Every request and every refusal is one JSON line on stdout (metadata only: never
headers, never bodies), an event of ``gatewaylog.py`` (the typed model the controller
parses). The controller reads this log at teardown: it is the trial's second,
independent cost figure and its record of refused attempts.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import sys
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

try:
    import upstream_link  # type: ignore[import-not-found,unused-ignore]  # the sidecar image: a sibling file in /opt/harness
except ImportError:  # imported as harness.sidecars.gateway (unit tests)
    from harness.sidecars import upstream_link
if TYPE_CHECKING:  # the events are checked where they are written, as where they are read
    from harness.sidecars import gatewaylog
else:
    try:  # in the sidecar: a sibling file in /opt/harness; on the host: the package module
        import gatewaylog
    except ImportError:  # pragma: no cover - host-side import of this file
        from harness.sidecars import gatewaylog
try:  # in the sidecar: a sibling file in /opt/harness; on the host: the package module
    import skilltrace  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - host-side import of this file
    from harness.sidecars import skilltrace
try:  # in the sidecar: a sibling file in /opt/harness; on the host: the package module
    import responses_api  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - host-side import of this file
    from harness.sidecars import responses_api

MESSAGES_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})
API_PATHS = {"messages": MESSAGES_PATHS, "responses": responses_api.FORWARD_PATHS}
"""The gateway's half of the agent seam: the APIs it can forward, by the name ``GATEWAY_APIS`` lists (the
agent's, then the judge's Messages API; :meth:`harness.trial.agents.base.Agent.gateway_env`)."""


def forward_paths(apis: str) -> frozenset[str]:
    """The paths of the APIs named in ``apis`` (comma-separated; empty: the Messages API alone)."""
    names = [a.strip() for a in apis.split(",") if a.strip()] or ["messages"]
    unknown = [a for a in names if a not in API_PATHS]
    if unknown:
        raise ValueError(f"GATEWAY_APIS names an API this gateway does not speak: {unknown[0][:40]!r}")
    return frozenset(p for a in names for p in API_PATHS[a])


FORWARD_PATHS = MESSAGES_PATHS
FORWARD_HEADERS = {"anthropic-version", "anthropic-beta", "content-type", "accept", "user-agent", "x-app"}
MAX_BODY = int(os.environ.get("GATEWAY_MAX_BODY", str(32 << 20)))
DEFAULT_PRICING = {
    # USD per million tokens: input, output, cache write, cache read
    "claude-sonnet-5-5": [2.0, 10.0, 2.5, 0.2],
    "claude-haiku-5-5": [0.1, 0.5, 0.125, 0.01],
    "claude-opus-5-5": [10.0, 50.0, 12.5, 1.0],
}
FALLBACK_PRICE = [15.0, 75.0, 18.75, 1.5]  # unknown model: price high so the cap errs on the safe side


def log(event: gatewaylog.GatewayEvent) -> None:
    sys.stdout.write(gatewaylog.dump(event) + "\n")
    sys.stdout.flush()


class Meter:
    def __init__(self, budget_usd: float, pricing: dict[str, list[float]]) -> None:
        self.budget = budget_usd
        self.pricing = pricing
        self.cost = 0.0
        self.lock = threading.Lock()

    def price(self, model: str) -> list[float]:
        if model in self.pricing:
            return self.pricing[model]
        for name, price in self.pricing.items():
            if name in model or model in name:
                return price
        return FALLBACK_PRICE

    def add(self, model: str, usage: gatewaylog.Usage) -> float:
        p = self.price(model)
        cost = (
            usage.input_tokens * p[0]
            + usage.output_tokens * p[1]
            + usage.cache_creation_input_tokens * p[2]
            + usage.cache_read_input_tokens * p[3]
        ) / 1e6
        with self.lock:
            self.cost += cost
        return cost

    def exhausted(self) -> bool:
        # a sum of float prices lands just under a budget it has reached (7 x 0.003 < 0.021)
        with self.lock:
            return self.budget > 0 and self.cost >= self.budget - 1e-9


def policy_violation(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "body is not a JSON object"
    if "mcp_servers" in body:
        return "mcp_servers (MCP connector) is not allowed"
    if "container" in body:
        return "server-side containers are not allowed"
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        return "tools is not a list"
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") not in (None, "custom"):
            return f"server-side tool {str(tool.get('type'))[:60]!r} is not allowed"
    return content_violation(body)


# The content the Claude Code CLI really sends (bare and with installed skills: its captured requests
# are checked by tests/unit/test_isolation_round2.py), as an allow-list: anything else is refused, not
# forwarded. A URL (or Files API) source would make the API fetch a host of the agent's choosing server-side.
MESSAGE_BLOCKS = frozenset({"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"})
TOOL_RESULT_BLOCKS = frozenset({"text", "image", "document"})
SOURCE_TYPES = {"image": frozenset({"base64"}), "document": frozenset({"base64", "text"})}
MAX_BLOCK_DEPTH = 4


def _blocks_violation(content: Any, allowed: frozenset[str], where: str, depth: int) -> str | None:
    """Check a ``content`` value (a string or a list of blocks), recursing into tool results."""
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"{where} is neither a string nor a list of blocks"
    if depth > MAX_BLOCK_DEPTH:
        return f"{where} nests content blocks too deeply"
    for i, block in enumerate(content):
        at = f"{where}[{i}]"
        if not isinstance(block, dict):
            return f"{at} is not a content block"
        kind = block.get("type")
        if kind not in allowed:
            return f"content block type {str(kind)[:40]!r} is not allowed ({at})"
        if kind in SOURCE_TYPES:
            source = block.get("source")
            source_type = source.get("type") if isinstance(source, dict) else None
            if source_type not in SOURCE_TYPES[kind]:
                return f"{kind} source type {str(source_type)[:40]!r} is not allowed ({at}: only inline data)"
        if kind == "tool_result" and "content" in block:
            found = _blocks_violation(block["content"], TOOL_RESULT_BLOCKS, f"{at}.content", depth + 1)
            if found:
                return found
    return None


def content_violation(body: dict[str, Any]) -> str | None:
    """The body's messages and system prompt hold only block and source types the CLI sends."""
    system = body.get("system")
    if system is not None:
        found = _blocks_violation(system, frozenset({"text"}), "system", 0)
        if found:
            return found
    messages = body.get("messages", [])
    if not isinstance(messages, list):
        return "messages is not a list"
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages[{i}] is not an object"
        found = _blocks_violation(message.get("content", ""), MESSAGE_BLOCKS, f"messages[{i}].content", 0)
        if found:
            return found
    return None


class Gateway(BaseHTTPRequestHandler):
    server_version = "harness-gateway/1"
    protocol_version = "HTTP/1.1"
    upstream: urllib.parse.SplitResult
    api_key: str
    meter: Meter
    link: upstream_link.Link
    forward_paths: frozenset[str] = FORWARD_PATHS

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _reply(self, status: int, payload: dict[str, Any], *, close: bool = False) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if close:
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self, status: int, reason: str, *, close: bool = False) -> None:
        log(gatewaylog.Refused(method=self.command, path=self.path.split("?", 1)[0][:200], reason=reason))
        kind = "permission_error" if status == 403 else "invalid_request_error"
        self._reply(
            status, {"type": "error", "error": {"type": kind, "message": f"harness gateway: {reason}"}}, close=close
        )

    def do_HEAD(self) -> None:
        self.send_response(200 if self.path.split("?", 1)[0] in ("/", "/api/hello") else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/api/hello":
            self._reply(200, {"ok": True})
            return
        self._refuse(403, self._only())

    def _only(self) -> str:
        return (
            "only the Responses API is forwarded"
            if self.forward_paths == responses_api.FORWARD_PATHS
            else (
                "only the Messages API is forwarded"
                if self.forward_paths == MESSAGES_PATHS
                else "only the Responses and Messages APIs are forwarded"
            )
        )

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def do_CONNECT(self) -> None:
        self._refuse(403, "CONNECT is not allowed", close=True)

    def do_POST(self) -> None:
        parsed = urllib.parse.urlsplit(self.path)
        if parsed.scheme or parsed.netloc:
            # absolute-form request line (proxy use): never forward to a client-chosen host
            self._refuse(403, "absolute-form requests are not allowed", close=True)
            return
        path = parsed.path
        if path not in self.forward_paths:
            self._refuse(403, self._only())
            return
        responses = path in responses_api.FORWARD_PATHS
        if responses and (found := responses_api.header_violation(dict(self.headers.items()))):
            self._refuse(400, found, close=True)
            return
        try:
            length = int(self.headers.get("content-length") or "0")
        except ValueError:
            length = -1
        if length < 0:
            # a negative length would make rfile.read(-1) wait for the client to close the socket
            self._refuse(400, "bad content-length", close=True)
            return
        if self.headers.get("transfer-encoding"):
            self._refuse(400, "chunked request bodies are not accepted", close=True)
            return
        if length > MAX_BODY:
            self._refuse(413, f"body larger than {MAX_BODY} bytes", close=True)
            return
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError):  # nested past the parser's depth: refused and logged, as bad JSON
            self._refuse(400, "body is not JSON")
            return
        violation = responses_api.policy_violation(body) if responses else policy_violation(body)
        if violation:
            self._refuse(403, violation)
            return
        if self.meter.exhausted():
            self._refuse(429, f"trial budget of ${self.meter.budget:.4f} is spent")
            return
        if path == "/v1/messages" and skilltrace.STOPPER.stopped():
            self._refuse(400, "trigger run: the skill was called, the verdict is known")
            return
        if path == "/v1/messages":
            self.skill_placement = skilltrace.observe_request(body, log, skilltrace.ATTRIBUTION)
        if responses:
            placement = responses_api.observe_request(body, log, skilltrace.ATTRIBUTION, responses_api.SKILL_FILES)
            self.forward_responses(path, raw, str(body.get("model", "")), placement)
            return
        self.forward(path, parsed.query, raw, str(body.get("model", "")))

    def relay(
        self,
        resp: http.client.HTTPResponse,
        headers: tuple[str, ...],
        on_line: Callable[[bytes], None],
        on_body: Callable[[Any], None],
    ) -> tuple[bool, bool]:
        """The upstream's answer to the client, either API: its ``headers``, then an SSE stream chunk by chunk,
        each complete line handed to ``on_line`` *before* the chunk is forwarded (the answer is the CLI's,
        skilltrace.Attribution, before the CLI has the line that completes it and can continue it), or a
        JSON body handed to ``on_body`` once parsed. Returns (streamed, the client went away)."""
        stream = "text/event-stream" in (resp.getheader("content-type") or "")
        self.send_response(resp.status)
        for key in headers:
            value = resp.getheader(key)
            if value:
                self.send_header(key, value)
        if not stream:
            data = resp.read()
            try:
                on_body(json.loads(data))
            except ValueError:
                pass
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return False, False
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.close_connection = True
        self.end_headers()
        buffer = b""
        try:
            while True:
                try:
                    chunk = resp.read1(65536)
                except (OSError, http.client.HTTPException):
                    break  # the upstream cut the stream (a reset): no end event, so not complete
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    on_line(line)
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:
            return True, True
        return True, False

    def forward_responses(self, path: str, raw: bytes, model: str, placement: skilltrace.Placement) -> None:
        """``POST /v1/responses``: the real key as a bearer token, the usage of the stream's final event metered,
        the answer registered with the attribution before the line that completes it reaches the CLI."""
        up = self.upstream
        conn = self.link.connection(timeout=600)
        headers = responses_api.upstream_headers(dict(self.headers.items()), self.api_key)
        headers["content-length"] = str(len(raw))
        try:
            conn.request("POST", up.path.rstrip("/") + path, body=raw, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            log(gatewaylog.UpstreamError(path=path, error=type(e).__name__, detail=self.link.describe(e)))
            self._reply(502, {"error": {"type": "api_error", "message": "gateway: upstream unreachable"}})
            return
        meter = responses_api.StreamMeter()
        trace = responses_api.AnswerTrace(placement, skilltrace.ATTRIBUTION, responses_api.SKILL_FILES)

        def line(data: bytes) -> None:
            meter.feed(data)
            trace.feed(data)

        def body(parsed: Any) -> None:
            if resp.status == 200:
                meter.feed_body(parsed)
                trace.feed_body(parsed)

        stream, broken = self.relay(resp, ("content-type", "x-request-id", "retry-after"), line, body)
        conn.close()
        trace.emit(log)
        cost = self.meter.add(meter.model or model, meter.usage)
        log(
            gatewaylog.Forwarded(
                path=path,
                status=resp.status,
                model=meter.model or model,
                stream=stream,
                usage=meter.usage,
                cost_usd=round(cost, 8),
                broken=broken,
                complete=meter.ended,
                retry_after=resp.getheader("retry-after"),
            )
        )

    def forward(self, path: str, query: str, raw: bytes, model: str) -> None:
        up = self.upstream
        conn = self.link.connection(timeout=600)  # TLS trust and the CONNECT proxy: upstream_link.py
        headers = {k: v for k, v in self.headers.items() if k.lower() in FORWARD_HEADERS}
        headers["x-api-key"] = self.api_key
        headers["content-length"] = str(len(raw))
        target = (up.path.rstrip("/") + path) + (f"?{query}" if query else "")
        try:
            conn.request("POST", target, body=raw, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            log(gatewaylog.UpstreamError(path=path, error=type(e).__name__, detail=self.link.describe(e)))
            self._reply(
                502, {"type": "error", "error": {"type": "api_error", "message": "gateway: upstream unreachable"}}
            )
            return
        placement = getattr(self, "skill_placement", None) if path == "/v1/messages" else None
        trace = skilltrace.ResponseTrace(placement, skilltrace.ATTRIBUTION if placement is not None else None)
        usage, ended = gatewaylog.Usage(), False  # a stream is complete only once message_stop arrived

        def line(data: bytes) -> None:
            nonlocal usage, ended
            usage = meter_sse_line(data, usage)
            ended = ended or upstream_link.stream_ended(data)
            trace.feed(data)

        def body(parsed: Any) -> None:
            nonlocal usage
            if isinstance(parsed, dict) and isinstance(parsed.get("usage"), dict):
                usage = messages_usage(usage, parsed["usage"])
            if resp.status == 200:
                trace.feed_message(parsed)

        headers_back = ("content-type", "request-id", "anthropic-ratelimit-requests-remaining", "retry-after")
        stream, broken = self.relay(resp, headers_back, line, body)
        ended = ended or not stream
        conn.close()
        if path == "/v1/messages":
            trace.emit(log)
        cost = self.meter.add(model, usage) if path == "/v1/messages" else 0.0
        log(
            gatewaylog.Forwarded(
                path=path,
                status=resp.status,
                model=model,
                stream=stream,
                usage=usage,
                cost_usd=round(cost, 8),
                broken=broken,
                complete=ended,
                retry_after=resp.getheader("retry-after"),
            )
        )


MESSAGES_USAGE = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
"""The Messages API's usage fields: its names are the meter's (:class:`gatewaylog.Usage`)."""


def messages_usage(usage: gatewaylog.Usage, new: dict[str, Any]) -> gatewaylog.Usage:
    """``usage`` updated by a Messages API ``usage`` object: each count it carries replaces the one before
    (``message_delta`` carries the cumulative output count)."""
    counts = {
        key: value for key in MESSAGES_USAGE if isinstance(value := new.get(key), int) and not isinstance(value, bool)
    }
    return dataclasses.replace(usage, **counts) if counts else usage


def meter_sse_line(line: bytes, usage: gatewaylog.Usage) -> gatewaylog.Usage:
    """``usage`` updated by one line of a Messages API stream (``message_start``, ``message_delta``)."""
    event = skilltrace.sse_event(line)
    if event is None:
        return usage
    if event.get("type") == "message_start":
        message = event.get("message") or {}
        if isinstance(message.get("usage"), dict):
            return messages_usage(usage, message["usage"])
    elif event.get("type") == "message_delta" and isinstance(event.get("usage"), dict):
        return messages_usage(usage, event["usage"])
    return usage


def main() -> int:
    upstream = os.environ.get("GATEWAY_UPSTREAM", "https://api.anthropic.com")
    key_file = os.environ.get("GATEWAY_KEY_FILE", "/run/harness/api-key")
    budget = float(os.environ.get("GATEWAY_BUDGET_USD", "0") or 0)
    pricing = {**DEFAULT_PRICING, **responses_api.DEFAULT_PRICING}
    if os.environ.get("GATEWAY_PRICING"):
        pricing.update(json.loads(os.environ["GATEWAY_PRICING"]))
    with open(key_file, encoding="utf-8") as fh:
        api_key = fh.read().strip()
    if not api_key:
        log(gatewaylog.Fatal(reason="empty key file"))
        return 2
    Gateway.upstream = urllib.parse.urlsplit(upstream)
    Gateway.api_key = api_key
    Gateway.meter = Meter(budget, pricing)
    Gateway.link = upstream_link.Link.from_env(os.environ)
    try:
        Gateway.forward_paths = forward_paths(os.environ.get("GATEWAY_APIS", ""))
    except ValueError as e:
        log(gatewaylog.Fatal(reason=str(e)))
        return 2
    server = ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("GATEWAY_PORT", "8080"))), Gateway)
    server.daemon_threads = True
    log(gatewaylog.Listening(upstream_scheme=Gateway.upstream.scheme, budget_usd=budget))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
