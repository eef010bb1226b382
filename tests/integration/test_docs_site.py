"""The docs site (issue 23 item 5): built strictly, self-contained, and rendered by a real browser that
asks no other host for anything.

The site is built from docs/ with ``mkdocs build --strict`` (every link between pages, and every anchor,
checked; the README and its security section pulled in by the hooks). The start page is then served on
loopback and opened in Debian's headless chromium, whose every request for another host goes to a
recording proxy of the test's own (also on loopback) that answers 403: so nothing leaves the machine, and
each attempt is seen. A positive control page that loads a font, a script and an image from other hosts
shows the proxy does see them. The screenshot must show the page: not blank, the theme's header colour.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from scripts.check_site import foreign_references
from tests.integration.test_report_browser import decode_png

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = next((c for c in ("chromium", "chromium-browser") if shutil.which(c)), None)
HEADER = (0x40, 0x51, 0xB5)
"""Material's indigo header (mkdocs.yml: palette primary indigo)."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


def test_the_site_has_every_page_and_pulls_text_in_instead_of_copying_it(site: Path) -> None:
    for page in ("getting-started", "reference", "scenario", "security", "statistics", "ci", "troubleshooting"):
        assert (site / page / "index.html").is_file(), page
    start = (site / "index.html").read_text()
    assert "Decide <strong>by measurement</strong>" in start, "the start page is the README"
    security = (site / "security" / "index.html").read_text()
    assert "positive control" in security and "BEGIN security-model" not in security
    reference = (site / "reference" / "index.html").read_text()
    assert "runs_per_arm" in reference and "verify_cmd" in reference and "p_success" in reference
    assert (site / "examples" / "github-actions" / "skill-eval.yml").is_file(), "the README's linked example"
    assert "schema-reference:" not in reference and "include:" not in start, "every directive expanded"


def test_the_site_references_no_other_host(site: Path, tmp_path: Path) -> None:
    assert foreign_references(site) == []
    # positive control: the check sees what the theme would add with fonts on, a CDN script, a footer link
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "index.html").write_text(
        '<link href="https://fonts.googleapis.com/css?family=Roboto" rel="stylesheet">'
        '<script src="//unpkg.com/mermaid.js"></script><style>@import "https://x.example/a.css";</style>'
        '<a href="https://squidfunk.github.io/mkdocs-material/">Made with</a><code>https://in.text/ok</code>'
    )
    assert len(foreign_references(probe)) == 4


class _RecordingProxy(BaseHTTPRequestHandler):
    """An HTTP proxy that forwards nothing: it records the request line and answers 403."""

    seen: list[str]

    def _refuse(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_HEAD = do_CONNECT = do_OPTIONS = _refuse

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def _serving(server: ThreadingHTTPServer) -> Iterator[str]:
    """``host:port`` of ``server`` (bound to 127.0.0.1) while it serves in a thread."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Proxy", (_RecordingProxy,), {"seen": seen})
    with _serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as address:
        yield address, seen


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class Browser:
    """Headless chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: commands
    on its fd 3, answers and events on its fd 4, each a JSON text ending in NUL), so the requests a page
    makes are told apart from the browser's own background traffic (update checks, sign-in), which the
    recording proxy also receives and refuses."""

    def __init__(self, profile: Path, proxy: str) -> None:
        assert CHROMIUM is not None
        flags = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-pings",
            f"--proxy-server=http://{proxy}", "--proxy-bypass-list=127.0.0.1",  # the site direct, the rest refused
            f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank",
        ]  # fmt: skip
        # the shell puts our stdin/stdout pipes on the fds the protocol uses
        self.proc = subprocess.Popen(["sh", "-c", 'exec "$@" 3<&0 4>&1 </dev/null >/dev/null', "sh", CHROMIUM, *flags],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read(self, deadline: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            assert chunk, "chromium closed the DevTools pipe"
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)  # type: ignore[no-any-return]

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.next_id += 1
        command: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            command["sessionId"] = session
        self.proc.stdin.write(json.dumps(command).encode() + b"\0")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 60
        while (message := self._read(deadline)) is not None:
            if message.get("id") == self.next_id:
                assert "error" not in message, f"{method}: {message['error']}"
                return message.get("result", {})  # type: ignore[no-any-return]
            self.events.append(message)
        raise AssertionError(f"chromium did not answer {method} within 60 s")

    def wait_for(self, method: str, session: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self.events):
            message = self._read(deadline)
            assert message is not None, f"no {method} within {timeout_s} s"
            self.events.append(message)

    def settle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (message := self._read(deadline)) is not None:
            self.events.append(message)

    def visit(self, url: str, png: Path) -> list[str]:
        """Open ``url`` in a new 1200x900 tab, wait for its load and what comes late (fonts, the search index),
        save a screenshot; every URL the page requested."""
        self.events.clear()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Network.enable", session)
        self.call("Page.enable", session)
        self.call("Emulation.setDeviceMetricsOverride", session, width=1200, height=900, deviceScaleFactor=1,
                  mobile=False)  # fmt: skip
        self.call("Page.navigate", session, url=url)
        self.wait_for("Page.loadEventFired", session, 60)
        self.settle(3)
        png.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", session, format="png")["data"]))
        self.call("Target.closeTarget", targetId=target)
        return [str(e["params"]["request"]["url"]) for e in self.events
                if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == session]  # fmt: skip

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/ensure-chromium.sh installs it)")
def test_the_start_page_renders_and_asks_no_other_host(
    site: Path, tmp_path: Path, proxy: tuple[str, list[str]]
) -> None:
    address, proxied = proxy
    control = site / "control-probe.html"  # removed below: the built site itself has no such page
    control.write_text(
        '<html><head><link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
        '<script src="http://cdn.example.invalid/x.js"></script></head>'
        '<body><img src="http://img.example.invalid/a.png">control</body></html>'
    )
    served: list[str] = []

    class Site(_Quiet):
        def do_GET(self) -> None:
            served.append(self.path)
            super().do_GET()

    browser = Browser(tmp_path / "profile", address)
    try:
        with _serving(ThreadingHTTPServer(("127.0.0.1", 0), partial(Site, directory=str(site)))) as origin:
            control_urls = browser.visit(f"http://{origin}/control-probe.html", tmp_path / "control.png")
            png = tmp_path / "start.png"
            urls = browser.visit(f"http://{origin}/", png)
    finally:
        browser.close()
        control.unlink()
    foreign = [u for u in control_urls if not u.startswith(f"http://{origin}/")]
    assert len(foreign) == 3, f"positive control: the control page's three foreign requests were seen: {control_urls}"
    assert any("fonts.googleapis.com" in s for s in proxied), f"and reached the proxy, which refused them: {proxied}"
    outbound = [u for u in urls if not u.startswith(f"http://{origin}/") and not u.startswith("data:")]
    assert outbound == [], f"the start page asked other hosts: {outbound}"
    assert f"http://{origin}/" in urls and any("/assets/" in u for u in urls), f"the page and its assets: {urls}"
    assert "/" in served
    width, height, rows, bpp = decode_png(png)
    assert (width, height) == (1200, 900)
    colours = {row[i : i + 3] for row in rows[::8] for i in range(0, width * bpp, bpp * 8)}
    assert len(colours) > 20, "the screenshot is not blank"
    header = [row[i : i + 3] for row in rows[5:40] for i in range(0, width * bpp, bpp * 16)]
    assert sum(bytes(HEADER) == px for px in header) > len(header) // 2, "the theme's header is drawn"
    print(f"docs start page screenshot: {png}")
