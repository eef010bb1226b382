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
import json
from pathlib import Path
from typing import Literal

from harness import __version__
from harness.errors import ConfigError, ResumeError
from harness.host.files import atomic_write, read_json_document
from harness.records import FrozenModel
from harness.results.meta import META, Mode
from harness.study.config import Study, model_dir_name, validate

MATRIX_JSON = "matrix.json"
MODELS_DIR = "models"
"""The folder of the per-model experiment directories inside the top directory."""
MATRIX_VERSION = 1


class MatrixMeta(FrozenModel):
    """The description of a model matrix's top directory."""

    meta_version: int = MATRIX_VERSION
    lock_hash: str
    preregistration: str | None = None
    skill: str
    models: tuple[str, ...]
    """The preregistered executor models, in the preregistration's order (the order they run in)."""
    rule: Literal["every", "any"] = "every"
    """``decision.models_rule``: how the per-model verdicts combine (harness.analysis.matrix)."""
    shard: str | None = None
    mode: Mode | None = None
    created_at: str | None = None
    harness_version: str | None = None
    merged_from: tuple[str, ...] | None = None

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
    path = root / MATRIX_JSON
    data = read_json_document(path)
    if data is None:
        return None
    if isinstance(data, dict) and isinstance(data.get("meta_version"), int) and data["meta_version"] > MATRIX_VERSION:
        raise ConfigError(path, f"was written by a newer harness (meta_version {data['meta_version']})",
                          field="meta_version")  # fmt: skip
    return validate(path, MatrixMeta, data, "a model matrix description")


def write_matrix_meta(root: Path, meta: MatrixMeta) -> None:
    root.mkdir(parents=True, exist_ok=True)
    text = json.dumps(meta.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    atomic_write(root / MATRIX_JSON, text.encode())


def start_or_resume(root: Path, wanted: MatrixMeta) -> MatrixMeta:
    """The top directory's description: written when the matrix starts, else checked against ``wanted``
    (another lock, which covers the models, another shard or mode refuses, as a single experiment's does)."""
    if (root / META).exists():
        raise ResumeError(
            f"{root} holds a single-model experiment (experiment.json), not a model matrix",
            hint="a preregistration with execution.models runs into its own --out directory",
        )
    try:
        meta = read_matrix_meta(root)
    except ConfigError as e:
        raise ResumeError(e.message, hint="move the directory aside") from e
    if meta is None:
        write_matrix_meta(root, wanted)
        return wanted
    if meta.lock_hash != wanted.lock_hash:
        raise ResumeError(
            f"{root} holds model matrix {meta.lock_hash[:12]}, not this preregistration's lock {wanted.lock_hash[:12]}",
            hint="a changed preregistration is a new experiment: use another --out directory",
        )
    if meta.shard != wanted.shard:
        raise ResumeError(f"{root} was run as shard {meta.shard}, not {wanted.shard}")
    if (meta.mode or wanted.mode) != wanted.mode:
        raise ResumeError(f"{root} was run against the {meta.mode} model, not the {wanted.mode} one",
                          hint="scripted and real trials never share an experiment: use another --out directory")  # fmt: skip
    return meta
