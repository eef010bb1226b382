"""Every byte of decision.json, report.md and summary.txt for one fixed, awkward dataset.

The dataset has every kind of exclusion, a hostile flag, a skipped task and an amber point-only
adoption. The expected files were rendered by the code before the analysis and reporting split; a
change here is a change users see, so make it on purpose: rerun with ``HARNESS_UPDATE_GOLDEN=1`` to
rewrite the files, and say why in the commit.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.reporting.decision_json import decision_json, dumps
from harness.reporting.markdown import markdown
from harness.reporting.text import terminal_summary
from tests import reportkit as kit

GOLDEN = Path(__file__).parent / "data" / "golden"
SPEC = {
    "fix-a": ("FFF", "PPF"),
    "fix-b": ("PFU", "PPT"),
    "fix-c": ("PPF", "PPP"),
    "fix-d": ("PFI", "PPF"),
    "fix-e": ("FFF", "PFF"),
    "fix-f": ("PPF", "PUP"),
}
FLAGS = {"fix-a.skill.0": ["edits_tests", kit.HOSTILE], "fix-c.baseline.1": ["protected | *x*"]}


@pytest.mark.parametrize("name", ["decision.json", "report.md", "summary.txt"])
def test_the_reports_of_a_fixed_dataset_are_byte_identical(name: str) -> None:
    r = kit.make_input(SPEC, flags=FLAGS, skipped=["todo-task"])
    rendered = {
        "decision.json": dumps(decision_json(r)),
        "report.md": markdown(r),
        "summary.txt": terminal_summary(r) + "\n",
    }[name]
    if os.environ.get("HARNESS_UPDATE_GOLDEN") == "1":
        (GOLDEN / name).write_text(rendered, encoding="utf-8")
    assert rendered == (GOLDEN / name).read_text(encoding="utf-8")
