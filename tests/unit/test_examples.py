"""The shipped example preregistrations say what they choose (issue 24 item 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PREREGS = sorted(EXAMPLES.rglob("preregistration*.yaml"))


def test_the_examples_are_found() -> None:
    assert len(PREREGS) >= 4


@pytest.mark.parametrize("path", PREREGS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_an_example_choosing_the_point_rule_says_it_is_the_articles(path: Path) -> None:
    """The point rule adopts a skill that does nothing about 45% of the time (20 tasks x 3 runs): an example
    that uses it must say, on its line, that it is the source article's rule, not the harness's default."""
    for line in path.read_text().splitlines():
        code = line.split("#", 1)[0]
        if code.strip().replace(" ", "") == "rule:point":
            assert "article" in line, f"{path.name}: {line.strip()!r} does not say it is the article's rule"
