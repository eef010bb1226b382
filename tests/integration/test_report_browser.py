"""report.html in a real headless browser: Debian's chromium renders it offline and we read the pixels.

The page is made from a hand-built analysis (no Docker). The screenshot is
decoded with the standard library (zlib + struct, PNG filters undone by hand)
and checked for its size, for not being blank, and for the colours that carry
the message: the verdict banner and both arms' marks in the charts. The PNG
stays in the test's tmp directory; its path is printed (``pytest -s``).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from harness.reporting import REPORT_HTML, write_reports
from harness.reporting import html as report_html
from tests import reportkit as kit

WIDTH, HEIGHT = 1200, 2000
CHROMIUM = next((c for c in ("chromium", "chromium-browser") if shutil.which(c)), None)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed (as root on Debian `make test` installs it: scripts/ensure-chromium.sh)",
    ),
]


def decode_png(path: Path) -> tuple[int, int, list[bytes], int]:
    """(width, height, rows of raw pixel bytes, bytes per pixel) of an 8-bit RGB/RGBA, non-interlaced PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, chunks = 8, []
    width = height = colour_type = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour_type in (2, 6), (depth, colour_type, interlace)
        elif kind == b"IDAT":
            chunks.append(body)
        elif kind == b"IEND":
            break
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind_byte, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind_byte == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind_byte == 2:  # Up
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
        elif kind_byte == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind_byte == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def _rgb(hex_colour: str) -> bytes:
    return bytes.fromhex(hex_colour.lstrip("#"))


def screenshot(page: Path, png: Path, profile: Path) -> None:
    assert CHROMIUM is not None
    argv = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}", page.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert png.is_file(), f"chromium wrote no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"


@pytest.mark.parametrize(("spec", "verdict"), [(kit.WIN, "adopt"), (kit.LOSS, "reject")])
def test_report_html_renders_in_headless_chromium(tmp_path: Path, spec: dict[str, tuple[str, str]],
                                                  verdict: str) -> None:  # fmt: skip
    r = kit.make_input(spec, flags={"fix-a.skill.0": [kit.HOSTILE, "edits_tests"]}, skipped=["later"])
    assert r.decision.verdict == verdict
    page = tmp_path / "report.html"
    page.write_text(report_html.render(r), encoding="utf-8")
    png = tmp_path / f"report-{verdict}.png"
    screenshot(page, png, tmp_path / "chromium-profile")
    print(f"\nscreenshot of the {verdict} report: {png}")

    width, height, rows, bpp = decode_png(png)
    assert (width, height) == (WIDTH, HEIGHT)
    colours: set[bytes] = set()
    for row in rows[::2]:
        colours.update(row[i : i + 3] for i in range(0, len(row), bpp * 2))
    assert len(colours) > 200, f"the page looks blank: {len(colours)} distinct colours"

    # the banner: the verdict's colour fills the top of the page
    banner = _rgb(report_html.VERDICT_COLOURS[verdict])
    top = [rows[y][x * bpp : x * bpp + 3] for y in range(40, 140, 10) for x in range(80, 1100, 40)]
    assert top.count(banner) > len(top) // 2, "the verdict banner is missing"
    # both arms' marks are drawn in the charts (solid dot fills)
    for arm, hex_colour in report_html.ARM_COLOURS.items():
        assert _rgb(hex_colour) in colours or _has(rows, bpp, _rgb(hex_colour)), f"no {arm} marks in the charts"


def _has(rows: list[bytes], bpp: int, colour: bytes) -> bool:
    return any(row[i : i + 3] == colour for row in rows for i in range(0, len(row), bpp))


def test_written_report_files_render_too(tmp_path: Path) -> None:
    """The file `skilltrial report` writes (via write_reports) is what the browser gets."""
    r = kit.make_input(kit.NOISY, rule="interval")
    paths = write_reports(tmp_path, r)
    png = tmp_path / "written.png"
    screenshot(paths[REPORT_HTML], png, tmp_path / "profile")
    width, height, _, _ = decode_png(png)
    assert (width, height) == (WIDTH, HEIGHT)
