"""A family of variants' top directory as data (``arms:``): ``family.json``, and where each comparison lives.

``skilltrial eval`` on a preregistration with ``arms`` runs one complete paired A/B per variant against the
baseline, each in its own experiment directory ``<top>/variants/<name>/`` (its ``experiment.json`` names the
variant). The top directory holds ``family.json``, written once when the family starts (this module: one
writer, one reader), and the family's reports (:mod:`harness.reporting.family`): the Holm-corrected verdict
over the variants, which version won. ``family.json`` is what resume, ``skilltrial gate`` and
``skilltrial report`` read: the lock, the variants in order, the baseline, so the gate needs neither the
preregistration nor reports that may be stale.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from harness import __version__
from harness.errors import HarnessError
from harness.results.meta import Mode
from harness.results.topdir import TopDirMeta, read_top, start_or_resume_top, write_top
from harness.study.config import BARE, Study

FAMILY_JSON = "family.json"
VARIANTS_DIR = "variants"
"""The folder of the per-variant experiment directories inside the top directory."""
VERSIONS_DIR = "versions"
"""Where a run writes the versions named by a git ref (controller-owned, read-only, checked against the lock)."""
FAMILY_VERSION = 1


class FamilyMeta(TopDirMeta):
    """The description of a family's top directory."""

    meta_version: int = FAMILY_VERSION
    baseline: str = BARE
    """``bare``, or the version the baseline arm carries (version against version)."""
    variants: tuple[str, ...]
    """The versions compared with the baseline, in the preregistration's order (the order they run in)."""
    confidence: float = 0.95
    """``decision.confidence``: the family's alpha is 1 - confidence (Holm's correction)."""

    @classmethod
    def start(cls, study: Study, lock_hash: str, *, shard: str | None, mode: Mode | None) -> FamilyMeta:
        prereg = study.locked_prereg
        assert prereg.arms is not None
        return cls(
            lock_hash=lock_hash,
            preregistration=str(study.prereg_path),
            skill=prereg.skill,
            baseline=prereg.arms.baseline,
            variants=prereg.arms.variants,
            confidence=prereg.decision.confidence,
            shard=shard,
            mode=mode,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            harness_version=__version__,
        )

    @property
    def experiment_id(self) -> str:
        return self.lock_hash[:12]


def variant_dir(root: Path, variant: str) -> Path:
    """Where ``variant``'s comparison of the family at ``root`` lives (names are checked: letters, digits, ._-)."""
    return root / VARIANTS_DIR / variant


def is_family_dir(root: Path) -> bool:
    """``root`` is a family's top directory (it has a ``family.json``)."""
    return (root / FAMILY_JSON).is_file()


@dataclass(frozen=True)
class Membership:
    """A comparison's place in a family: its reports carry the verdict before Holm's correction, and say so."""

    variant: str
    variants: tuple[str, ...]
    """The family's variants as ``family.json`` lists them (empty when it cannot be read)."""


def membership(root: Path) -> Membership | None:
    """The family whose variant's comparison ``root`` is (``<top>/variants/<name>/``), or None when it stands
    alone."""
    root = root.resolve()
    top = root.parent.parent
    if root.parent.name != VARIANTS_DIR or not is_family_dir(top):
        return None
    try:
        meta = read_family_meta(top)
    except HarnessError:
        meta = None
    return Membership(root.name, meta.variants if meta is not None else ())


def read_family_meta(root: Path) -> FamilyMeta | None:
    """``root/family.json``, or None when there is none; a :class:`ConfigError` naming the file (and the field)
    when it cannot be read or is not a family description."""
    return read_top(root / FAMILY_JSON, FamilyMeta, FAMILY_VERSION, "a family of variants description")


def write_family_meta(root: Path, meta: FamilyMeta) -> None:
    write_top(root / FAMILY_JSON, meta)


def start_or_resume(root: Path, wanted: FamilyMeta) -> FamilyMeta:
    """The top directory's description: written when the family starts, else checked against ``wanted``."""
    return start_or_resume_top(
        root, root / FAMILY_JSON, wanted, lambda: read_family_meta(root), kind="family of variants",
        single="a single experiment", hint="a preregistration with arms runs into its own --out directory",
    )  # fmt: skip
