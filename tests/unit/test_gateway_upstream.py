"""The gateway's upstream side on loopback: what it records of upstream answers, and its CONNECT proxy.

``gateway.py`` runs as a real subprocess in front of a loopback Messages API that
answers from a script (a 529 with retry-after, a stream reset before
``message_stop``, a complete stream), optionally through the test's CONNECT proxy
(``tests/integration/connect_proxy.py``, also a subprocess). The gateway's JSON log
goes through :func:`harness.trial.apihealth.annotate`, as at a trial's end.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness.sidecars.gatewaylog import Forwarded
from harness.trial import apihealth
from harness.trial import gateway as host_gateway
from tests.unit.test_gateway_sidecar import GATEWAY_SCRIPT, GatewayProcess, free_port

PROXY_SCRIPT = Path(__file__).resolve().parents[1] / "integration" / "connect_proxy.py"
START = {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                              "model": "m", "usage": {"input_tokens": 10, "output_tokens": 1}}}  # fmt: skip


class ScriptedUpstream:
    """Answers each POST with the next behaviour: an int status, "cut" (reset mid-stream) or "ok"."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or "0"))
                with owner.lock:
                    what = owner.script.pop(0) if owner.script else "ok"
                if isinstance(what, int):
                    data = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
                    self.send_response(what)
                    self.send_header("retry-after", "7")
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(f"event: message_start\ndata: {json.dumps(START)}\n\n".encode())
                self.wfile.flush()
                if what == "cut":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                self.wfile.write(b'event: message_stop\ndata: {"type": "message_stop"}\n\n')

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        p.terminate()
        p.wait(timeout=5)
        if p.stdout is not None:
            p.stdout.close()


def start_proxy(
    procs: list[subprocess.Popen[str]], *, refuse: bool, auth_sha256: str = ""
) -> tuple[int, subprocess.Popen[str]]:
    port = free_port()
    env = {**os.environ, "PROXY_REFUSE": "1" if refuse else "0", "PROXY_REQUIRE_AUTH_SHA256": auth_sha256}
    p = subprocess.Popen([sys.executable, str(PROXY_SCRIPT), str(port)], env=env, stdout=subprocess.PIPE, text=True)
    procs.append(p)
    assert p.stdout is not None and "listening" in p.stdout.readline()
    return port, p


def start_gateway(tmp_path: Path, upstream_port: int, extra: dict[str, str], *, proxy: str = "") -> GatewayProcess:
    """``proxy``: its URL goes in a file (``GATEWAY_PROXY_FILE``), as the controller gives it."""
    key = tmp_path / "key"
    key.write_text("sk-ant-test-key")
    port = free_port()
    if proxy:
        (tmp_path / "proxy-url").write_text(proxy)
        extra = {**extra, "GATEWAY_PROXY_FILE": str(tmp_path / "proxy-url")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env |= {
        "GATEWAY_UPSTREAM": f"http://127.0.0.1:{upstream_port}",
        "GATEWAY_KEY_FILE": str(key),
        "GATEWAY_PORT": str(port),
        **extra,
    }
    stderr = tmp_path / f"gw-{port}.stderr"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(GATEWAY_SCRIPT)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=err, text=True,
        )  # fmt: skip
    gw = GatewayProcess(proc, port, stderr)
    gw.wait_for("listening")
    return gw


def post(gw: GatewayProcess) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    body = json.dumps({"model": "claude-sonnet-5-5", "stream": True, "messages": []})
    conn.request("POST", "/v1/messages", body=body, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    try:
        resp.read()
    except (OSError, http.client.HTTPException):
        pass
    conn.close()
    return resp.status


def test_the_gateway_records_every_upstream_answer_through_the_proxy(
    tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    up = ScriptedUpstream([529, "cut", "ok"])
    proxy_port, proxy = start_proxy(procs, refuse=False)
    gw = start_gateway(tmp_path, up.port, {}, proxy=f"http://127.0.0.1:{proxy_port}")
    try:
        assert [post(gw) for _ in range(3)] == [529, 200, 200]
        gw.wait_for("forwarded", 3)
        events = [e for e in gw.parsed() if isinstance(e, Forwarded)]
    finally:
        gw.stop()
    meter = apihealth.annotate(host_gateway.meter(events), events)
    assert meter.upstream_statuses == ("529", "cut", "200")
    assert meter.retry_after_s == 7.0
    assert apihealth.api_failure(meter) is None, "the last answer was complete"
    cut_first = apihealth.annotate(host_gateway.meter(events[:2]), events[:2])
    assert apihealth.api_failure(cut_first) is not None and "cut" in (apihealth.api_failure(cut_first) or "")
    # positive control for "through the proxy": it logged the tunnels
    proxy.terminate()
    out, _ = proxy.communicate(timeout=5)
    connects = [json.loads(line) for line in out.splitlines() if '"connect"' in line]
    assert len(connects) == 3 and connects[0]["target"] == f"127.0.0.1:{up.port}"


def test_the_proxys_credentials_come_from_the_proxy_file(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    """The URL with ``user:password`` is a file (never the gateway's environment); the proxy gets them."""
    up = ScriptedUpstream(["ok", "ok"])
    proxy_port, proxy = start_proxy(procs, refuse=False, auth_sha256=hashlib.sha256(b"alice:p%s@ss").hexdigest())
    gw = start_gateway(tmp_path, up.port, {}, proxy=f"http://alice:p%25s%40ss@127.0.0.1:{proxy_port}")
    try:
        assert post(gw) == 200
    finally:
        gw.stop()
    # positive control: the same proxy refuses a gateway with the wrong password
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    gw = start_gateway(wrong, up.port, {}, proxy=f"http://alice:guess@127.0.0.1:{proxy_port}")
    try:
        assert post(gw) == 502
    finally:
        gw.stop()
    proxy.terminate()
    out, _ = proxy.communicate(timeout=5)
    events = [json.loads(line)["event"] for line in out.splitlines() if line.startswith("{")]
    assert events.count("connect") == 1 and events[-1] == "unauthorized", events


def test_no_proxy_bypasses_the_proxy(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    up = ScriptedUpstream(["ok"])
    proxy_port, _ = start_proxy(procs, refuse=True)  # refuses every tunnel: a 200 means it was bypassed
    gw = start_gateway(
        tmp_path, up.port, {"GATEWAY_NO_PROXY": "localhost,127.0.0.1"}, proxy=f"http://127.0.0.1:{proxy_port}"
    )
    try:
        assert post(gw) == 200
    finally:
        gw.stop()


def test_a_refusing_proxy_is_named_in_the_upstream_error(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> None:
    up = ScriptedUpstream(["ok"])
    proxy_port, _ = start_proxy(procs, refuse=True)
    gw = start_gateway(tmp_path, up.port, {}, proxy=f"http://127.0.0.1:{proxy_port}")
    try:
        assert post(gw) == 502
        gw.wait_for("upstream_error")
        events = gw.parsed()
    finally:
        gw.stop()
    meter = apihealth.annotate(host_gateway.meter(events), events)
    assert meter.upstream_statuses == ("unreachable",)
    assert "proxy refused the tunnel" in meter.upstream_errors[0] and "403" in meter.upstream_errors[0]


def test_preflight_names_the_refusing_proxy_and_passes_without_it(procs: list[subprocess.Popen[str]]) -> None:
    from harness.sidecars.upstream_link import Link

    up = ScriptedUpstream([])
    proxy_port, _ = start_proxy(procs, refuse=True)
    refused = Link(f"http://127.0.0.1:{up.port}", f"http://127.0.0.1:{proxy_port}").preflight(timeout=5)
    assert refused is not None and "proxy refused the tunnel" in refused
    assert Link(f"http://127.0.0.1:{up.port}").preflight(timeout=5) is None  # positive control
