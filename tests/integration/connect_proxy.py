"""A minimal HTTP CONNECT proxy (stdlib only) for the real-mode test, run in a sidecar-image container.

It tunnels bytes and logs one JSON line per CONNECT (target only: it never sees
plaintext of a TLS tunnel). With ``PROXY_REFUSE=1`` it answers every CONNECT with
403, as a company proxy that does not allow the destination does. With
``PROXY_REQUIRE_AUTH_SHA256`` it asks for Basic credentials (407) unless the
``Proxy-Authorization`` header's ``user:password`` has that SHA-256 (the proxy itself
never holds the password).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import select
import socket
import sys
import threading

REFUSE = os.environ.get("PROXY_REFUSE") == "1"
AUTH_SHA256 = os.environ.get("PROXY_REQUIRE_AUTH_SHA256", "")


def authorized(head: bytes) -> bool:
    """No credentials needed, or the request's Basic ``user:password`` is the expected one."""
    if not AUTH_SHA256:
        return True
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        scheme, _, token = value.strip().partition(b" ")
        if name.strip().lower() == b"proxy-authorization" and scheme.lower() == b"basic":
            try:
                return hashlib.sha256(base64.b64decode(token, validate=True)).hexdigest() == AUTH_SHA256
            except (binascii.Error, ValueError):
                return False
    return False


def log(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def pump(a: socket.socket, b: socket.socket) -> int:
    moved = 0
    socks = [a, b]
    while True:
        readable, _, _ = select.select(socks, [], [], 120)
        if not readable:
            return moved
        for s in readable:
            data = s.recv(65536)
            if not data:
                return moved
            (b if s is a else a).sendall(data)
            moved += len(data)


def handle(client: socket.socket) -> None:
    with client:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(4096)
            if not chunk:
                return
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        if method != "CONNECT" or REFUSE:
            client.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            log(event="refused", method=method, target=target)
            return
        if not authorized(head):
            client.sendall(b'HTTP/1.1 407 Proxy Authentication Required\r\nproxy-authenticate: Basic realm="test"\r\n'
                           b"content-length: 0\r\nconnection: close\r\n\r\n")  # fmt: skip
            log(event="unauthorized", target=target)
            return
        host, _, port = target.rpartition(":")
        try:
            upstream = socket.create_connection((host, int(port)), timeout=10)
        except OSError as e:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            log(event="unreachable", target=target, error=type(e).__name__)
            return
        with upstream:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            log(event="connect", target=target, authenticated=bool(AUTH_SHA256))
            if rest:
                upstream.sendall(rest)
            moved = pump(client, upstream)
            log(event="closed", target=target, bytes=moved)


def main() -> int:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", int(sys.argv[1]) if len(sys.argv) > 1 else 3128))
    server.listen(64)
    log(event="listening", refuse=REFUSE)
    while True:
        client, _ = server.accept()
        threading.Thread(target=handle, args=(client,), daemon=True).start()


if __name__ == "__main__":
    raise SystemExit(main())
