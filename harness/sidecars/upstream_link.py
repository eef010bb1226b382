"""The gateway's upstream connection: TLS trust, an HTTP CONNECT proxy, and what went wrong.

Runs in the gateway sidecar next to ``gateway.py`` (stdlib only, no harness
imports). :func:`bypass_proxy` is also the controller's (``harness.experiment.upstream``
records whether the gateway will use the proxy): it stays a pure function. Settings come from the gateway's own environment, written by the
controller; the agent never sees any of them:

    GATEWAY_UPSTREAM   the Messages API base URL (https://api.anthropic.com, a company gateway, ...)
    GATEWAY_PROXY_FILE a file holding an http:// CONNECT proxy's URL for the upstream connection (optional;
                       it may carry user:password, so it is a 0400 file of the sidecar's uid, never a variable
                       that `docker inspect` shows)
    GATEWAY_NO_PROXY   hosts that bypass the proxy (NO_PROXY syntax: a,b,.suffix,*)
    GATEWAY_EXTRA_CA   a PEM bundle trusted in addition to the image's bundle (optional)

Errors are described in words that name the problem (a certificate that does
not verify, a proxy that refused the tunnel) and never carry credentials.
``python3 upstream_link.py`` is the preflight: one TLS handshake to the
upstream through the proxy, no request, no key; exit 0 when it worked.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import sys
import urllib.parse

FAILURE_STATUSES = frozenset({401, 408, 429})
"""Upstream answers (besides every 5xx) that mean the API, not the agent's request, failed."""


def bypass_proxy(host: str, no_proxy: str) -> bool:
    """NO_PROXY matching: ``*``, exact host, or a domain suffix (``.corp.example`` or ``corp.example``)."""
    host = host.lower().rstrip(".")
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        entry = entry.split(":", 1)[0] if entry.count(":") == 1 else entry
        entry = entry.lstrip(".")
        if host == entry or host.endswith("." + entry):
            return True
    return False


class Link:
    """How to open one connection to the upstream."""

    def __init__(self, upstream: str, proxy: str = "", no_proxy: str = "", extra_ca: str = "") -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.host = self.upstream.hostname or ""
        self.port = self.upstream.port or (443 if self.upstream.scheme == "https" else 80)
        self.proxy = urllib.parse.urlsplit(proxy) if proxy and not bypass_proxy(self.host, no_proxy) else None
        self.context: ssl.SSLContext | None = None
        if self.upstream.scheme == "https":
            self.context = ssl.create_default_context()  # the image's bundle (SSL_CERT_FILE)
            if extra_ca:
                self.context.load_verify_locations(cafile=extra_ca)

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str]) -> Link:
        proxy = ""
        if env.get("GATEWAY_PROXY_FILE"):
            with open(env["GATEWAY_PROXY_FILE"], encoding="utf-8") as fh:
                proxy = fh.read().strip()
        return cls(
            env.get("GATEWAY_UPSTREAM", "https://api.anthropic.com"),
            proxy,
            env.get("GATEWAY_NO_PROXY", ""),
            env.get("GATEWAY_EXTRA_CA", ""),
        )

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        """A connection to the upstream, through the proxy's CONNECT tunnel when one applies."""
        conn: http.client.HTTPConnection
        if self.proxy is None:
            host, port = self.host, self.port
        else:
            host, port = self.proxy.hostname or "", self.proxy.port or 80
        if self.context is not None:
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=self.context)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        if self.proxy is not None:
            headers = {}
            if self.proxy.username:
                user = urllib.parse.unquote(self.proxy.username)
                password = urllib.parse.unquote(self.proxy.password or "")
                token = base64.b64encode(f"{user}:{password}".encode()).decode()
                headers["Proxy-Authorization"] = f"Basic {token}"
            conn.set_tunnel(self.host, self.port, headers=headers)
        return conn

    def describe(self, error: BaseException) -> str:
        """What went wrong with the upstream connection, naming the certificate or proxy problem."""
        via = f" (through the proxy {self.proxy.hostname}:{self.proxy.port or 80})" if self.proxy else ""
        target = f"{self.host}:{self.port}{via}"
        if isinstance(error, ssl.SSLCertVerificationError):
            return f"TLS certificate verification failed for {target}: {error.verify_message or error.reason}"
        if isinstance(error, ssl.SSLError):
            return f"TLS handshake with {target} failed: {error.reason or error}"
        text = str(error)
        if text.startswith("Tunnel connection failed"):
            return f"the proxy refused the tunnel to {self.host}:{self.port}: {text}"
        if isinstance(error, socket.gaierror):
            name = self.proxy.hostname if self.proxy else self.host
            return f"cannot resolve {name}{via}: {error.strerror or error}"
        if isinstance(error, ConnectionRefusedError):
            return f"connection refused by {(self.proxy.hostname if self.proxy else self.host)}{via}"
        if isinstance(error, TimeoutError | socket.timeout):
            return f"connection to {target} timed out"
        return f"connection to {target} failed: {type(error).__name__}: {text[:200]}"

    def preflight(self, timeout: float = 20.0) -> str | None:
        """Open the tunnel and finish the TLS handshake; None when it worked, else what failed."""
        conn = self.connection(timeout)
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as e:
            return self.describe(e)
        finally:
            conn.close()
        return None


def is_api_failure(status: int) -> bool:
    return status >= 500 or status in FAILURE_STATUSES


def stream_ended(line: bytes) -> bool:
    """True for the SSE line that closes a complete Messages API stream."""
    return line.startswith(b"data:") and b'"message_stop"' in line


def main() -> int:
    link = Link.from_env(os.environ)
    problem = link.preflight()
    sys.stdout.write(json.dumps({"event": "preflight", "ok": problem is None, "error": problem}) + "\n")
    return 0 if problem is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
