"""mkdocs hooks for the docs site (mkdocs.yml ``hooks:``): pages pull text in, they never copy it.

A page's directives (``<!-- include: README.md#security-model -->`` and the others :mod:`harness.docs`
lists) are expanded by the same function ``skilltrial docs`` uses. Text included from the repository root
(the README, the CHANGELOG) links relative to that root, so its links are pointed at the site: ``docs/X``
at page ``X``, the README and CHANGELOG at their pages, and any other repository file it links to (an
example workflow) is published beside the pages under the same path, so strict link checking sees it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from harness import docs

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(\]\()([^)#\s]*)(#[^)\s]*)?(\))")
PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md"}


def _site_target(target: str) -> str:
    if not target or "://" in target or target.startswith(("/", "mailto:")):
        return target
    if target.startswith("docs/"):
        return target.removeprefix("docs/")
    return PAGES.get(target, target)


def site_links(text: str) -> str:
    """Links of text written at the repository root, pointed at the site."""
    return LINK.sub(lambda m: m.group(1) + _site_target(m.group(2)) + (m.group(3) or "") + m.group(4), text)


def repository_files_linked() -> list[str]:
    """Files outside docs/ that the included texts link to (published beside the pages)."""
    out = []
    for name in PAGES:
        for m in LINK.finditer((ROOT / name).read_text(encoding="utf-8")):
            target = _site_target(m.group(2))
            if target and not target.endswith(".md") and "://" not in target and (ROOT / target).is_file():
                out.append(target)
    return sorted(set(out))


def on_files(files: Files, config: Any) -> Files:
    for rel in repository_files_linked():
        if files.get_file_from_path(rel) is None:
            files.append(File.generated(config, rel, abs_src_path=str(ROOT / rel)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return docs.expand(markdown, ROOT, links=site_links)
