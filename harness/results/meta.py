"""``experiment.json``: what an experiment directory is, as one model written and read in one place.

An experiment directory is described once, when it is started (:meth:`ExperimentMeta.start`, by
``skilltrial eval`` or ``skilltrial merge``); the first start of a run adds the trial inputs it ran with
(see :mod:`harness.experiment.trialinputs`). Everything that opens a directory (resume, reports,
gate, history, merge, library re-renders) reads it through :func:`read_meta`, which raises one
error type, :class:`~harness.errors.ConfigError`, naming the file and the field; callers that need
another exit story (resume, merge) translate it.

Versions: ``meta_version`` is written since version 1. A file without it was written before the
field existed and is read as version 1 (the shape has not changed since). A file of a newer version
is refused by name instead of being half understood.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from harness import __version__
from harness.errors import ConfigError
from harness.host.files import atomic_write, read_json_document
from harness.records import FrozenModel
from harness.study.config import validate

META = "experiment.json"
META_VERSION = 1
"""The shape :class:`ExperimentMeta` writes; bump it when a field changes meaning or becomes required."""

Mode = Literal["scripted", "real"]


class ExperimentMeta(FrozenModel):
    """The description of one experiment directory. Only ``lock_hash`` is required: directories
    written by earlier harness versions (and by tests) may lack any other field."""

    meta_version: int = META_VERSION
    lock_hash: str
    experiment_id: str = ""
    """The lock hash's first 12 characters (filled in when a file does not say)."""
    preregistration: str | None = None
    """Path of the preregistration the run was started from (reports re-read it)."""
    skill: str | None = None
    created_at: str | None = None
    shard: str | None = None
    """``i/n`` for one shard of a split run, None for a whole (or merged) experiment."""
    mode: Mode | None = None
    """Against the scripted model or the real one; None: not recorded (never compared)."""
    harness_version: str | None = None
    trial_inputs: dict[str, Any] | None = None
    """What went into every trial (images, base image, scenario, ...), recorded on the first start."""
    merged_from: tuple[str, ...] | None = None
    """The shard directories ``skilltrial merge`` combined (None for a directory a run wrote)."""
    baseline_inputs: dict[str, Any] | None = None
    """What went into the baseline fingerprints, by name (settings, and per task the hashes of its parts:
    :class:`harness.experiment.reuse.BaselineInputs`), so another experiment that cannot reuse a baseline
    trial from here can say which input differs. Rewritten by each start of a run."""
    model: str | None = None
    """One model's experiment of a model matrix (``execution.models``): its executor model, so a report reads
    the preregistration narrowed to it. None: the experiment is the preregistration as written."""

    @model_validator(mode="before")
    @classmethod
    def _default_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("experiment_id") and isinstance(data.get("lock_hash"), str):
            return {**data, "experiment_id": data["lock_hash"][:12]}
        return data

    @classmethod
    def start(
        cls,
        lock_hash: str,
        *,
        preregistration: str,
        skill: str,
        shard: str | None,
        mode: Mode | None,
        merged_from: tuple[str, ...] | None = None,
        model: str | None = None,
    ) -> ExperimentMeta:
        """The description of a directory started now by this harness."""
        return cls(
            model=model,
            lock_hash=lock_hash,
            experiment_id=lock_hash[:12],
            preregistration=preregistration,
            skill=skill,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            shard=shard,
            mode=mode,
            harness_version=__version__,
            merged_from=merged_from,
        )


def read_meta(root: Path) -> ExperimentMeta | None:
    """``root/experiment.json``, or None when there is none (a directory not started yet).

    Raises :class:`ConfigError` (naming the file, and the field when one is wrong) when the file
    cannot be read, is not JSON, is not an experiment description, or is of a newer version."""
    path = root / META
    data = read_json_document(path)
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("lock_hash"), str):
        raise ConfigError(path, "is not an experiment description (no lock_hash)")
    version = data.get("meta_version", 1)
    if isinstance(version, int) and version > META_VERSION:
        raise ConfigError(
            path,
            f"was written by a newer harness (meta_version {version}; this one reads up to {META_VERSION})",
            field="meta_version",
            hint="use the harness version that wrote the directory, or a newer one",
        )
    return validate(path, ExperimentMeta, data, "an experiment description")


def require_meta(root: Path) -> ExperimentMeta:
    """``root/experiment.json`` of a directory that must be an experiment: as :func:`read_meta`, and a
    missing file is a :class:`ConfigError` too."""
    meta = read_meta(root)
    if meta is None:
        raise ConfigError(root / META, "not found: is this an experiment directory (harness-results/<skill>-<lock>)?")
    return meta


def write_meta(root: Path, meta: ExperimentMeta) -> None:
    """Write ``root/experiment.json`` atomically (every field, in a stable order)."""
    text = json.dumps(meta.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    atomic_write(root / META, text.encode())
