"""``skilltrial docs [TOPIC]``: the documentation a pip user needs, from the installed package.

The pages are the repository's ``docs/*.md`` and ``README.md``, which a wheel carries in
``harness/assets/`` (setup.py copies them; a checkout reads them in place: :func:`assets_root`). A page
may pull text from another file instead of repeating it, with one of three directives on a line of its
own; the same expansion serves this command and the docs site (``docs/hooks.py``), so nothing is
written twice:

    <!-- include: README.md#security-model -->      README's section between its BEGIN/END markers
    <!-- include: CHANGELOG.md -->                  a whole file
    <!-- include-code: examples/x.yml yaml -->      a file as a fenced code block
    <!-- schema-reference: preregistration -->      field tables of a schema (:mod:`harness.schemas`)

Paths are relative to the repository root (the assets root of an installed wheel).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError, PrerequisiteError


@dataclass(frozen=True)
class Topic:
    name: str
    page: str
    """The page under docs/ (the same page on the docs site)."""
    about: str


TOPICS: tuple[Topic, ...] = (
    Topic("start", "getting-started.md", "from install to a first decision in five minutes"),
    Topic("reference", "reference.md", "every field of preregistration.yaml, tasks.json and a scenario file"),
    Topic("scenario", "scenario.md", "scenario files: scripting the model for dry runs, CI smoke tests, the demo"),
    Topic("statistics", "statistics.md", "the formulas and decision rules the code implements"),
    Topic("security", "security.md", "the security model: what a hostile skill can and cannot do, and the tests"),
    Topic("ci", "ci.md", "CI recipes: gate exit codes, GitHub Actions, shards"),
    Topic("troubleshooting", "troubleshooting.md", "exit codes, common errors and what to do about them"),
    Topic("design", "design.md", "how the code is built: one trial end to end, isolation, a run, the decision"),
)
DIRECTIVE = re.compile(r"^<!-- (include|include-code|schema-reference): (\S+)(?: (\S+))? -->[ \t]*$", re.MULTILINE)
SECTION = "<!-- BEGIN {name}"
SECTION_END = "<!-- END {name} -->"


def topic(name: str) -> Topic:
    for t in TOPICS:
        if t.name == name:
            return t
    raise ConfigError("TOPIC", f"no topic {name!r}", hint="one of: " + ", ".join(t.name for t in TOPICS))


def section(text: str, name: str, *, source: str = "README.md") -> str:
    """The text between ``<!-- BEGIN name ... -->`` and ``<!-- END name -->`` (markers excluded)."""
    start = text.find(SECTION.format(name=name))
    end = text.find(SECTION_END.format(name=name))
    if start < 0 or end < start:
        raise PrerequisiteError(f"{source} has no section {name!r} (its BEGIN/END markers are missing)")
    return text[text.index("\n", start) + 1 : end].rstrip() + "\n"


def expand(text: str, root: Path, *, links: Callable[[str], str] | None = None) -> str:
    """``text`` with every directive replaced by what it names (files read under ``root``). ``links``, when
    given, rewrites each included Markdown text (not code): the docs site points its links at site pages."""

    def one(m: re.Match[str]) -> str:
        kind, target, extra = m.group(1), m.group(2), m.group(3)
        if kind == "schema-reference":
            from harness.schemas import reference_markdown

            return reference_markdown(target)
        rel, _, name = target.partition("#")
        path = root / rel
        if not path.is_file():
            raise PrerequisiteError(f"{path} is missing (included by a docs page)", hint="reinstall skilltrial")
        body = path.read_text(encoding="utf-8")
        if kind == "include-code":
            return f"```{extra or ''}\n{body.rstrip()}\n```"
        included = section(body, name, source=rel) if name else body
        return links(included) if links is not None else included

    return DIRECTIVE.sub(one, text)


def assets_root() -> Path:
    from harness.sandbox.images import assets_root as root  # the wheel's copy, else the checkout

    return root()


def docs_root() -> Path:
    return assets_root() / "docs"


def page_text(t: Topic) -> str:
    """The topic's page with its directives expanded: what ``skilltrial docs TOPIC`` prints."""
    path = docs_root() / t.page
    if not path.is_file():
        raise PrerequisiteError(f"{path} is missing", hint="reinstall skilltrial (the wheel carries docs/)")
    return expand(path.read_text(encoding="utf-8"), assets_root())


def index_lines() -> list[str]:
    width = max(len(t.name) for t in TOPICS)
    lines = ["skilltrial docs TOPIC shows one of these pages (plain Markdown when piped):", ""]
    lines += [f"  {t.name:<{width}}  {t.about}" for t in TOPICS]
    lines += ["", f"the pages: {docs_root()}", "the JSON Schemas of the inputs: skilltrial schema --help"]
    return lines
