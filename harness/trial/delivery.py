"""How a library experiment's masked arm is given its skills: the mounts, and reading back what was mounted.

``prompt`` delivery (the article's mechanism, extended to several skills): each skill of the
mask is a read-only copy mounted at ``/skills/<name>/`` (a volume the run filled from its
controller-owned copy, :class:`SkillCopy`), and the prompt
starts with a prefix naming every one of them, in a stable (sorted) order. The prompt, like
every trial's, is the plan's (:func:`harness.plan.library_prefix`, pure); this module mounts
what it names and reads back what was mounted. Another delivery (``installed``: real project
skills under ``.claude/skills``) plugs in here: :func:`mounts` and the plan's prefix are the
only things the trial asks of a delivery.

Pure: no Docker, no I/O except :func:`tree_sha256`, which hashes the controller's copy a volume is filled from.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.plan import SKILLS_ROOT, ordered_skills
from harness.records import MountedSkill
from harness.sandbox.runtime import ContainerSpec, VolumeMount

DELIVERIES = ("prompt",)


@dataclass(frozen=True)
class SkillCopy:
    """One skill of a library as the run holds it: the volume its copy went into, and the hash of that
    copy's files (:func:`tree_sha256`, taken from the controller's copy the volume was filled from;
    nothing writes to the volume after)."""

    volume: str
    sha256: str


def mounts(skills: Sequence[str], copies: Mapping[str, SkillCopy]) -> tuple[VolumeMount, ...]:
    """Read-only mounts of the run's copies of exactly ``skills``."""
    return tuple(VolumeMount(copies[n].volume, f"{SKILLS_ROOT}/{n}", read_only=True) for n in ordered_skills(skills))


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


def mounted_skills(spec: ContainerSpec, copies: Mapping[str, SkillCopy]) -> tuple[MountedSkill, ...]:
    """What the agent container was given, read from the container spec handed to the engine (not from
    the plan): every read-only volume under /skills/, with the hash of the copy that volume holds."""
    by_volume = {c.volume: c.sha256 for c in copies.values()}
    out = []
    for m in spec.volumes:
        target = m.target
        if target.startswith(SKILLS_ROOT + "/") and m.read_only:
            out.append(MountedSkill(name=target[len(SKILLS_ROOT) + 1 :], sha256=by_volume[m.volume]))
    return tuple(sorted(out, key=lambda s: s.name))
