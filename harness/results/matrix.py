"""A model matrix's top directory as data: ``matrix.json``, and where each model's experiment lives.

``skilltrial eval`` on a preregistration with ``execution.models`` runs one complete A/B per model, each in its
own experiment directory ``<top>/models/<name>/`` (``name`` from :func:`harness.study.config.model_dir_name`),
exactly as a single-model experiment (its ``experiment.json`` names the model). The top directory holds
``matrix.json``, written once when the matrix starts (this module: one writer, one reader), and the summary
over the models (``models.md``, ``models.json``; :mod:`harness.reporting.matrix`).

``matrix.json`` is what resume, ``skilltrial gate`` and ``skilltrial merge`` read: the lock, the preregistered models
in order with their directories, and the preregistered rule over their verdicts, so the gate needs neither
the preregistration nor a summary that may be stale. It is not an experiment description: the top directory
has no ``experiment.json`` and no results of its own.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Literal

from harness import __version__
from harness.results.meta import Mode
from harness.results.topdir import TopDirMeta, read_top, start_or_resume_top, write_top
from harness.study.config import Study, model_dir_name

MATRIX_JSON = "matrix.json"
MODELS_DIR = "models"
"""The folder of the per-model experiment directories inside the top directory."""
MATRIX_VERSION = 1


class MatrixMeta(TopDirMeta):
    """The description of a model matrix's top directory."""

    meta_version: int = MATRIX_VERSION
    models: tuple[str, ...]
    """The preregistered executor models, in the preregistration's order (the order they run in)."""
    rule: Literal["every", "any"] = "every"
    """``decision.models_rule``: how the per-model verdicts combine (harness.analysis.matrix)."""

    @classmethod
    def start(
        cls,
        study: Study,
        lock_hash: str,
        *,
        shard: str | None,
        mode: Mode | None,
        merged_from: tuple[str, ...] | None = None,
    ) -> MatrixMeta:
        prereg = study.locked_prereg
        return cls(
            lock_hash=lock_hash,
            preregistration=str(study.prereg_path),
            skill=prereg.skill,
            models=prereg.execution.models,
            rule=prereg.decision.models_rule,
            shard=shard,
            mode=mode,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            harness_version=__version__,
            merged_from=merged_from,
        )

    @property
    def experiment_id(self) -> str:
        return self.lock_hash[:12]


def model_dir(root: Path, model: str) -> Path:
    """Where ``model``'s experiment of the matrix at ``root`` lives."""
    return root / MODELS_DIR / model_dir_name(model)


def is_matrix_dir(root: Path) -> bool:
    """``root`` is a matrix's top directory (it has a ``matrix.json``)."""
    return (root / MATRIX_JSON).is_file()


def read_matrix_meta(root: Path) -> MatrixMeta | None:
    """``root/matrix.json``, or None when there is none; a :class:`ConfigError` naming the file (and the field)
    when it cannot be read or is not a matrix description."""
    return read_top(root / MATRIX_JSON, MatrixMeta, MATRIX_VERSION, "a model matrix description")


def write_matrix_meta(root: Path, meta: MatrixMeta) -> None:
    write_top(root / MATRIX_JSON, meta)


def start_or_resume(root: Path, wanted: MatrixMeta) -> MatrixMeta:
    """The top directory's description: written when the matrix starts, else checked against ``wanted``
    (another lock, which covers the models, another shard or mode refuses, as a single experiment's does)."""
    return start_or_resume_top(
        root, root / MATRIX_JSON, wanted, lambda: read_matrix_meta(root), kind="model matrix",
        single="a single-model experiment", hint="a preregistration with execution.models runs into its own --out directory",
    )  # fmt: skip
