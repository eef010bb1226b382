"""The name the Claude Code CLI lists a skill under: SKILL.md's front matter ``name``.

It may differ from the preregistration's ``skill`` and from the skill's folder: the CLI lists
``.claude/skills/<folder>/SKILL.md`` under its front matter name (the folder's only where there is
none). Everything that looks for the skill in what the CLI sends (the listing check, "did it fire?",
the scripted model's skill arm, the mount point of the installed delivery) uses this one name; the lock
records it and ``skilltrial lock`` says it.
"""

from __future__ import annotations

import re
from pathlib import Path

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def front_matter_name(text: str) -> str | None:
    """The ``name`` of SKILL.md's front matter, None when there is none (or it is not a plain name)."""
    if not text.startswith("---"):
        return None
    for line in text.split("\n")[1:40]:
        if line.strip() == "---":
            break
        key, _, value = line.partition(":")
        if key.strip() == "name":
            value = value.strip().strip("'\"")
            return value if NAME.match(value) else None
    return None


def listed_name(skill_dir: Path, fallback: str) -> str:
    """The name the CLI lists the skill in ``skill_dir`` under: the front matter ``name``, else ``fallback``
    (the name of the folder it is mounted in: the preregistration's ``skill``)."""
    try:
        text = (skill_dir / "SKILL.md").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return fallback
    return front_matter_name(text) or fallback
