"""How a library experiment's masked arm is given its skills: the one place that decides it.

``prompt`` delivery (the article's mechanism, extended to several skills): each skill of the
mask is a read-only, controller-owned copy mounted at ``/skills/<name>/``, and the prompt
starts with a prefix naming every one of them, in a stable (sorted) order. An empty mask gets
the same prefix without any skill line, so the masked arm's instructions differ from the bare
arm's only by the skills. Another delivery (``installed``: real project skills under
``.claude/skills``) plugs in here: :func:`mounts` and :func:`prompt_prefix` are the only things
the trial asks of a delivery.

Pure: no Docker, no I/O except :func:`tree_sha256`, which hashes a mounted copy.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.records import MountedSkill
from harness.sandbox.runtime import BindMount, ContainerSpec

SKILLS_ROOT = "/skills"
DELIVERIES = ("prompt",)

LIBRARY_PREFIX_HEAD = (
    "Before you start, read these skill files and follow their guidance where it applies to this task:\n"
)
LIBRARY_PREFIX_TAIL = "Do not ask questions: when something is unclear, state your assumption and continue.\n\n"


def ordered(skills: Sequence[str]) -> tuple[str, ...]:
    """The stable delivery order: sorted by name (a mask's order never depends on the plan)."""
    return tuple(sorted(set(skills)))


def skill_path(name: str) -> str:
    return f"{SKILLS_ROOT}/{name}/SKILL.md"


def library_prefix(skills: Sequence[str]) -> str:
    """The masked arm's prompt prefix; names each skill of the mask. An empty mask: no skill line."""
    names = ordered(skills)
    if not names:
        return LIBRARY_PREFIX_TAIL
    lines = "".join(f"- {skill_path(n)}\n" for n in names)
    return LIBRARY_PREFIX_HEAD + lines + LIBRARY_PREFIX_TAIL


def template_sha256() -> str:
    """Identity of the library prompt template (provenance of both arms of a library experiment)."""
    return hashlib.sha256(
        f"\x00{LIBRARY_PREFIX_HEAD}\x00{skill_path('{name}')}\x00{LIBRARY_PREFIX_TAIL}".encode()
    ).hexdigest()


def mounts(skills: Sequence[str], copies: Mapping[str, Path]) -> tuple[BindMount, ...]:
    """Read-only bind mounts of the controller-owned copies of exactly ``skills``."""
    return tuple(BindMount(copies[n], f"{SKILLS_ROOT}/{n}", read_only=True) for n in ordered(skills))


def tree_sha256(root: Path) -> str:
    """A SHA-256 over a skill copy's regular files (relative path and content), links not followed."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            data = path.read_bytes()
            h.update(f"{rel}\x00{len(data)}\x00".encode())
            h.update(data)
    return h.hexdigest()


def mounted_skills(spec: ContainerSpec) -> tuple[MountedSkill, ...]:
    """What the agent container was given, read from the container spec handed to the engine (not from
    the plan): every read-only mount under /skills/, with a hash of the mounted copy's files."""
    out = []
    for m in spec.mounts:
        target = m.target
        if target.startswith(SKILLS_ROOT + "/") and m.read_only:
            out.append(MountedSkill(name=target[len(SKILLS_ROOT) + 1 :], sha256=tree_sha256(Path(m.source))))
    return tuple(sorted(out, key=lambda s: s.name))
