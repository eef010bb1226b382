"""The per-trial gateway's budget cap, end to end on loopback.

``harness/sidecars/gateway.py`` runs as a real subprocess (as in its sidecar
container) in front of a tiny in-test Messages API upstream that answers every
request with a fixed usage and counts what reaches it. Costs are chosen so the
expected meter is known exactly; the gateway's own JSON log is the evidence.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness.sidecars.gatewaylog import GatewayEvent, Usage
from harness.trial import gateway as host_gateway

GATEWAY_SCRIPT = Path(__file__).resolve().parents[2] / "harness" / "sidecars" / "gateway.py"
REAL_KEY = "sk-ant-real-key-held-by-the-gateway-only"
PLACEHOLDER = "sk-ant-placeholder-the-agent-has"
START_TIMEOUT_S = 10.0
EVENT_TIMEOUT_S = 5.0


class Upstream:
    """A loopback Messages API that returns a fixed usage (JSON, or SSE when asked to stream)."""

    def __init__(self) -> None:
        self.usage: dict[str, int] = {}
        self.hits: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or "0"))
                body = json.loads(raw or b"{}")
                with upstream.lock:
                    upstream.hits.append(
                        {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                    )
                    usage = dict(upstream.usage)
                if body.get("stream"):
                    self._sse(body, usage)
                else:
                    self._json(body, usage)

            def _json(self, body: dict[str, Any], usage: dict[str, int]) -> None:
                data = json.dumps(
                    {
                        "id": "msg_test",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model"),
                        "content": [{"type": "text", "text": "ok"}],
                        "stop_reason": "end_turn",
                        "stop_sequence": None,
                        "usage": usage,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("request-id", "req_test")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, body: dict[str, Any], usage: dict[str, int]) -> None:
                # message_start carries the input side and a provisional output count;
                # message_delta carries the final, cumulative output count
                start_usage = {k: v for k, v in usage.items() if k != "output_tokens"} | {"output_tokens": 1}
                events = [
                    (
                        "message_start",
                        {
                            "type": "message_start",
                            "message": {
                                "id": "msg_test",
                                "type": "message",
                                "role": "assistant",
                                "model": body.get("model"),
                                "content": [],
                                "stop_reason": None,
                                "usage": start_usage,
                            },
                        },
                    ),
                    (
                        "content_block_start",
                        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                    ),
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
                    ),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    (
                        "message_delta",
                        {
                            "type": "message_delta",
                            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                            "usage": {"output_tokens": usage.get("output_tokens", 0)},
                        },
                    ),
                    ("message_stop", {"type": "message_stop"}),
                ]
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for name, payload in events:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())
                    self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def hit_count(self) -> int:
        with self.lock:
            return len(self.hits)


class GatewayProcess:
    """gateway.py as a subprocess; its stdout JSON lines are collected as they arrive."""

    def __init__(self, proc: subprocess.Popen[str], port: int, stderr_path: Path) -> None:
        self.proc = proc
        self.port = port
        self.stderr_path = stderr_path
        self.events: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._new: queue.Queue[None] = queue.Queue()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.raw.append(line)
                try:
                    event = json.loads(line)
                except ValueError:
                    event = None
                if isinstance(event, dict):
                    self.events.append(event)
            self._new.put(None)
        self._new.put(None)  # EOF: wake any waiter so it can notice the exit

    def parsed(self) -> list[GatewayEvent]:
        """The log as the controller reads it (:func:`harness.trial.gateway.parsed`)."""
        with self._lock:
            return host_gateway.parsed(self.raw)

    def of(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e.get("event") == name]

    def wait_for(self, name: str, count: int = 1, timeout_s: float = EVENT_TIMEOUT_S) -> list[dict[str, Any]]:
        """Block until at least ``count`` events called ``name`` were logged."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.of(name)
            if len(found) >= count:
                return found
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                raise AssertionError(
                    f"gateway logged {len(found)} {name!r} events, wanted {count}; "
                    f"exit={self.proc.poll()} stdout={''.join(self.raw)[-1500:]!r} stderr={self.stderr()[-1500:]!r}"
                )
            try:
                self._new.get(timeout=min(left, 0.2))
            except queue.Empty:
                pass

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(timeout=5)


@pytest.fixture
def start_gateway(tmp_path: Path, upstream: Upstream) -> Iterator[Callable[..., GatewayProcess]]:
    """Start gateway.py against ``upstream``; every process started is stopped at teardown."""
    started: list[GatewayProcess] = []
    key_file = tmp_path / "api-key"
    key_file.write_text(REAL_KEY + "\n", encoding="utf-8")

    def start(budget_usd: str, pricing: dict[str, list[float]] | None = None) -> GatewayProcess:
        # gateway.py has no "port 0" report, so pick a free port; retry if another process takes it first
        for attempt in range(3):
            port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
            env |= {
                "GATEWAY_UPSTREAM": upstream.url,
                "GATEWAY_KEY_FILE": str(key_file),
                "GATEWAY_BUDGET_USD": budget_usd,
                "GATEWAY_PORT": str(port),
            }
            if pricing is not None:
                env["GATEWAY_PRICING"] = json.dumps(pricing)
            stderr_path = tmp_path / f"gateway-{len(started)}-{attempt}.stderr"
            with stderr_path.open("w", encoding="utf-8") as err:
                proc = subprocess.Popen(
                    [sys.executable, str(GATEWAY_SCRIPT)],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            gw = GatewayProcess(proc, port, stderr_path)
            started.append(gw)
            try:
                gw.wait_for("listening", timeout_s=START_TIMEOUT_S)
            except AssertionError:
                if proc.poll() is not None and "Address already in use" in gw.stderr():
                    continue
                raise
            return gw
        raise AssertionError("could not bind the gateway to a free port in 3 attempts")

    try:
        yield start
    finally:
        for gw in started:
            gw.stop()


def post(
    gw: GatewayProcess, path: str, body: dict[str, Any], *, stream: bool = False
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection, as the agent's CLI sends it (placeholder key)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=EVENT_TIMEOUT_S)
    try:
        data = json.dumps(body | ({"stream": True} if stream else {})).encode()
        conn.request(
            "POST",
            path,
            body=data,
            headers={
                "content-type": "application/json",
                "anthropic-version": "2023-06-01",
                "x-api-key": PLACEHOLDER,
                "authorization": f"Bearer {PLACEHOLDER}",
            },
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


ZERO_USAGE = dataclasses.asdict(Usage())
"""Every field of the logged usage: a count the answer did not carry is logged as 0."""


def message(model: str) -> dict[str, Any]:
    return {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


def test_gateway_forwards_under_budget_then_refuses_with_429_without_forwarding(
    upstream: Upstream, start_gateway: Callable[..., GatewayProcess]
) -> None:
    model = "claude-sonnet-5-5"  # default pricing, USD per Mtok: input 2.0, output 10.0, cache write 2.5, read 0.2
    upstream.usage = {
        "input_tokens": 1200,
        "output_tokens": 300,
        "cache_creation_input_tokens": 400,
        "cache_read_input_tokens": 5000,
    }
    cost = (1200 * 2.0 + 300 * 10.0 + 400 * 2.5 + 5000 * 0.2) / 1e6  # 0.0074
    assert cost == pytest.approx(0.0074)
    # 2 requests leave 0.0148 < 0.0185, so a 3rd is forwarded; after it 0.0222 >= 0.0185.
    # A half-request margin keeps float rounding of the running sum away from the boundary.
    fits = 3
    gw = start_gateway(budget_usd=f"{(fits - 0.5) * cost:.6f}")
    assert gw.of("listening")[0]["budget_usd"] == pytest.approx(0.0185)

    for i in range(1, fits + 1):
        status, _, data = post(gw, "/v1/messages", message(model))
        assert status == 200, data
        assert json.loads(data)["usage"] == upstream.usage  # passed through unchanged
        # the meter is updated after the reply is written: wait for the log line before the next request
        forwarded = gw.wait_for("forwarded", i)
        assert forwarded[-1]["cost_usd"] == pytest.approx(cost, abs=1e-12)
        assert forwarded[-1]["usage"] == upstream.usage
        assert forwarded[-1]["status"] == 200
        assert forwarded[-1]["stream"] is False
        assert forwarded[-1]["model"] == model
    assert upstream.hit_count() == fits
    assert gw.of("refused") == []  # positive control: nothing refused under the budget

    # the budget is spent: the next request is refused locally and never reaches the upstream
    status, headers, data = post(gw, "/v1/messages", message(model))
    assert status == 429, data
    assert headers["content-type"] == "application/json"
    error = json.loads(data)
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert "budget" in error["error"]["message"]
    refused = gw.wait_for("refused", 1)
    assert refused[0]["method"] == "POST"
    assert refused[0]["path"] == "/v1/messages"
    assert refused[0]["reason"] == "trial budget of $0.0185 is spent"

    # count_tokens is free but still behind the cap
    status, _, data = post(gw, "/v1/messages/count_tokens", message(model))
    assert status == 429, data
    assert gw.wait_for("refused", 2)[1]["path"] == "/v1/messages/count_tokens"

    assert upstream.hit_count() == fits
    assert len(gw.of("forwarded")) == fits

    # the real key replaced the placeholder; the client's bearer token was dropped
    for hit in upstream.hits:
        assert hit["path"] == "/v1/messages"
        assert hit["headers"]["x-api-key"] == REAL_KEY
        assert "authorization" not in hit["headers"]
        assert hit["headers"]["anthropic-version"] == "2023-06-01"
        assert PLACEHOLDER not in json.dumps(hit["headers"])
    # the log is metadata only: the key never appears in it
    assert REAL_KEY not in "".join(gw.raw)
    assert PLACEHOLDER not in "".join(gw.raw)

    # the controller's reading of this log: its cost figure and the budget stop
    meter = host_gateway.meter(gw.parsed())
    assert meter.forwarded == fits
    assert meter.requests == fits + 2
    assert len(meter.refused) == 2
    assert meter.budget_stopped is True
    assert meter.cost_usd == pytest.approx(fits * cost, abs=1e-8)
    assert meter.input_tokens == fits * 1200
    assert meter.output_tokens == fits * 300


def test_streamed_usage_is_metered_and_the_cap_holds_at_exactly_the_budget(
    upstream: Upstream, start_gateway: Callable[..., GatewayProcess]
) -> None:
    # prices chosen so each stream costs exactly 0.5 USD (a binary fraction: no float rounding), so a
    # budget of 1.0 is reached exactly after 2 streams: "reaches" means >=, the 3rd is refused
    model = "test-model"
    upstream.usage = {"input_tokens": 1000, "output_tokens": 200}
    pricing = {model: [250.0, 1250.0, 0.0, 0.0]}
    cost = (1000 * 250.0 + 200 * 1250.0) / 1e6
    assert cost == 0.5
    gw = start_gateway(budget_usd="1", pricing=pricing)

    for i in (1, 2):
        status, headers, data = post(gw, "/v1/messages", message(model), stream=True)
        assert status == 200, data
        assert headers["content-type"] == "text/event-stream"
        assert b"event: message_stop" in data  # streamed through whole
        forwarded = gw.wait_for("forwarded", i)
        assert forwarded[-1]["stream"] is True
        assert forwarded[-1]["broken"] is False
        # message_delta's cumulative output count replaces message_start's provisional 1 (not added to it)
        assert forwarded[-1]["usage"] == {**ZERO_USAGE, "input_tokens": 1000, "output_tokens": 200}
        assert forwarded[-1]["cost_usd"] == cost
    assert upstream.hit_count() == 2
    assert gw.of("refused") == []

    status, _, data = post(gw, "/v1/messages", message(model), stream=True)
    assert status == 429, data
    assert gw.wait_for("refused", 1)[0]["reason"] == "trial budget of $1.0000 is spent"
    assert upstream.hit_count() == 2
    assert len(gw.of("forwarded")) == 2
    assert all(hit["headers"]["x-api-key"] == REAL_KEY for hit in upstream.hits)
    assert host_gateway.meter(gw.parsed()).cost_usd == 1.0


def test_a_budget_reached_by_a_float_sum_counts_as_spent() -> None:
    """Seven $0.003 requests add up to 0.020999999999999998: a $0.021 budget must be spent after them."""
    from harness.sidecars.gateway import Meter

    meter = Meter(0.021, {"m": [3.0, 0.0, 0.0, 0.0]})
    for _ in range(6):
        meter.add("m", Usage(input_tokens=1000))
        assert not meter.exhausted()
    meter.add("m", Usage(input_tokens=1000))
    assert meter.cost < 0.021, "the float sum really is under the budget (else this test shows nothing)"
    assert meter.exhausted()


def test_a_body_nested_past_the_parser_s_depth_is_refused_and_logged(
    upstream: Upstream, start_gateway: Callable[..., GatewayProcess]
) -> None:
    """Found by fuzzing the gateway from the agent's side: 10,000 nested arrays raised RecursionError in the
    request's thread, which closed the connection with no answer and nothing in the gateway's log."""
    gw = start_gateway(budget_usd="1")
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=EVENT_TIMEOUT_S)
    try:
        conn.request("POST", "/v1/messages", body=b"[" * 10_000, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        assert (resp.status, json.loads(resp.read())["error"]["message"]) == (400, "harness gateway: body is not JSON")
    finally:
        conn.close()
    assert gw.wait_for("refused")[0]["reason"] == "body is not JSON"
    assert upstream.hit_count() == 0
    status, _, _ = post(gw, "/v1/messages", message("claude-sonnet-5-5"))  # and the gateway still serves
    assert status == 200 and upstream.hit_count() == 1
    assert "Traceback" not in gw.stderr()
