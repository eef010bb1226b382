"""Fail when the built docs site references another host: ``python3 scripts/check_site.py [SITE_DIR]``.

Every page must work offline and tell no one it was opened: no font, script, style, image or link that
points off the site. Checked: every URL-carrying attribute of every element in every HTML page (``href``,
``src``, ``srcset``, ``action``, ``poster``, ``data``, ``content`` of a meta refresh), ``url()`` and
``@import`` in inline styles and in the site's CSS files. Text is not checked: a code block may show an
address (``ANTHROPIC_BASE_URL=https://...``) without anything fetching it. The browser test
(tests/integration/test_docs_site.py) records the requests a real browser makes, which also covers scripts.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

URL_ATTRIBUTES = frozenset(
    {"href", "src", "srcset", "action", "formaction", "poster", "data", "xlink:href", "manifest"}
)
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""")
FOREIGN = re.compile(r"^\s*(?:https?:)?//", re.IGNORECASE)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_style = tag == "style"
        for name, value in attrs:
            if value is None:
                continue
            if name in URL_ATTRIBUTES:
                self.urls += [part.strip().split(" ")[0] for part in value.split(",")] if name == "srcset" else [value]
            elif name == "style":
                self.urls += [a or b for a, b in CSS_URL.findall(value)]
            elif name == "content" and (dict(attrs).get("http-equiv") or "").lower() == "refresh":
                self.urls.append(value.partition("url=")[2])

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.urls += [a or b for a, b in CSS_URL.findall(data)]


def foreign_references(site: Path) -> list[str]:
    """``file: url`` for each reference to another host (empty: the site is self-contained)."""
    found = []
    for page in sorted(site.rglob("*.html")):
        collector = _Collector()
        collector.feed(page.read_text(encoding="utf-8"))
        found += [f"{page.relative_to(site)}: {u}" for u in collector.urls if FOREIGN.match(u)]
    for sheet in sorted(site.rglob("*.css")):
        for a, b in CSS_URL.findall(sheet.read_text(encoding="utf-8", errors="replace")):
            if FOREIGN.match(a or b):
                found.append(f"{sheet.relative_to(site)}: {a or b}")
    return found


def main(argv: list[str]) -> int:
    site = Path(argv[1] if len(argv) > 1 else "site")
    pages = list(site.rglob("*.html"))
    if not pages:
        print(f"check_site: no HTML pages under {site} (build it first: make docs)", file=sys.stderr)
        return 4
    found = foreign_references(site)
    for line in found:
        print(f"check_site: references another host: {line}", file=sys.stderr)
    if found:
        return 1
    print(f"check_site: {len(pages)} pages, no reference to another host")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
