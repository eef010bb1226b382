"""The command is ``skilltrial`` everywhere a user is told what to type (issue 23 item 1).

The rename was one mechanical commit; what it missed were commands broken across a line (```harness``
at the end of one line, ``lock``` on the next). This test joins every line break before it looks, over
the README, docs, examples, scripts, the Makefile, CI and every message of the package. The CHANGELOG
keeps the old name where it describes what was true then.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUBCOMMANDS = (
    "init lock eval demo doctor gate report merge images gc calibrate triggers history plan docs schema completion"
)
OLD_COMMAND = re.compile(r"(?<![\w./-])(?:[`\"']|\$ |\| )harness\s+(?:" + "|".join(SUBCOMMANDS.split()) + r")\b")
"""``harness <subcommand>`` right after a backtick, a quote, a shell prompt or a table bar: a command to type
(``python -m harness eval`` still works and is not matched; ``the harness images`` is prose)."""


def _user_facing_files() -> list[Path]:
    out = [ROOT / "README.md", ROOT / "Makefile", ROOT / "Dockerfile.trial"]
    for folder, pattern in (("docs", "*.md"), ("examples", "*"), ("harness", "*.py"), ("scripts", "*"),
                            (".ci", "*"), ("images", "*"), ("tests", "*.py")):  # fmt: skip
        out += sorted(p for p in (ROOT / folder).rglob(pattern) if p.is_file() and "__pycache__" not in p.parts)
    return out


def find_old_commands(text: str) -> list[str]:
    joined = re.sub(r"\s+", " ", text)
    return [joined[max(0, m.start() - 30) : m.end() + 10] for m in OLD_COMMAND.finditer(joined)]


def test_no_file_tells_a_user_to_type_the_old_command() -> None:
    this = Path(__file__).resolve()
    found = {
        str(p.relative_to(ROOT)): hits
        for p in _user_facing_files()
        if p != this and (hits := find_old_commands(p.read_text(encoding="utf-8", errors="replace")))
    }
    assert not found, f"the command is skilltrial now: {found}"


def test_the_check_finds_a_command_broken_across_lines() -> None:
    # the two misses of the rename commit, as they were in the README
    assert find_old_commands("studies through `harness\nlock` by default")
    assert find_old_commands("CLI version); `harness images\nprune` removes it")
    assert find_old_commands('hint="harness gate DIR"')
    assert not find_old_commands("a real `python -m harness eval --scripted` process")
    assert not find_old_commands("the machine's harness images loaded into it")
