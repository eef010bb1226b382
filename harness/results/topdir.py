"""A top directory of several experiments (a model matrix, a family of variants): its one description file.

Both kinds write a description once when they start (``matrix.json``, ``family.json``) and check it on every
rerun: another lock (which covers what the experiments are), another shard or another mode refuses, as a single
experiment's ``experiment.json`` does. This is the one reader, writer and resume check of such a file; each kind
keeps its own model and names (:mod:`harness.results.matrix`, :mod:`harness.results.family`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from harness.errors import ConfigError, MergeError, ResumeError
from harness.host.files import atomic_write, read_json_document
from harness.records import FrozenModel
from harness.results.meta import META, Mode
from harness.study.config import validate


class TopDirMeta(FrozenModel):
    """What every top directory's description says (its kind adds the rest)."""

    lock_hash: str
    preregistration: str | None = None
    skill: str
    shard: str | None = None
    mode: Mode | None = None
    created_at: str | None = None
    harness_version: str | None = None
    merged_from: tuple[str, ...] | None = None
    """The shards' top directories ``skilltrial merge`` combined into this one (None: it ran here)."""


M = TypeVar("M", bound=FrozenModel)


def read_top(path: Path, model: type[M], newest: int, shape: str) -> M | None:
    """``path`` as ``model``, or None when there is none; a :class:`ConfigError` naming the file (and the field)
    when it cannot be read, was written by a newer harness (``meta_version`` > ``newest``) or is not ``shape``."""
    data = read_json_document(path)
    if data is None:
        return None
    if isinstance(data, dict) and isinstance(data.get("meta_version"), int) and data["meta_version"] > newest:
        raise ConfigError(path, f"was written by a newer harness (meta_version {data['meta_version']})",
                          field="meta_version")  # fmt: skip
    return validate(path, model, data, shape)


def write_top(path: Path, meta: FrozenModel) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(meta.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    atomic_write(path, text.encode())


T = TypeVar("T", bound=TopDirMeta)


def start_or_resume_top(
    root: Path, path: Path, wanted: T, read: Callable[[], T | None], *, kind: str, single: str, hint: str
) -> T:
    """The top directory's description: ``wanted`` written to ``path`` when ``read`` finds none, else what it
    finds, checked against ``wanted``. ``kind`` names the top directory (``model matrix``), ``single`` what a
    single experiment's directory is called in the refusal, ``hint`` how such a preregistration is run."""
    if (root / META).exists():
        raise ResumeError(f"{root} holds {single} (experiment.json), not a {kind}", hint=hint)
    try:
        found = read()
    except ConfigError as e:
        raise ResumeError(e.message, hint="move the directory aside") from e
    if found is None:
        write_top(path, wanted)
        return wanted
    if found.lock_hash != wanted.lock_hash:
        raise ResumeError(
            f"{root} holds {kind} {found.lock_hash[:12]}, not this preregistration's lock {wanted.lock_hash[:12]}",
            hint="a changed preregistration is a new experiment: use another --out directory",
        )
    if found.shard != wanted.shard:
        raise ResumeError(f"{root} was run as shard {found.shard}, not {wanted.shard}")
    if (found.mode or wanted.mode) != wanted.mode:
        raise ResumeError(f"{root} was run against the {found.mode} model, not the {wanted.mode} one",
                          hint="scripted and real trials never share an experiment: use another --out directory")  # fmt: skip
    return found


def check_shard_tops(out: Path, out_file: str, shard_tops: list[Path], metas: list[T], *, kind: str) -> T:
    """``skilltrial merge OUT SHARD...`` of a top directory (``kind``): every shard ran the first's lock and
    ``out`` holds no such top directory yet (``out_file``); returns the first shard's description. Each
    experiment inside is then merged with every check of :mod:`harness.results.merge`."""
    first = metas[0]
    for where, meta in zip(shard_tops[1:], metas[1:], strict=True):
        if meta.lock_hash != first.lock_hash:
            raise MergeError(f"{where} ran lock {meta.lock_hash[:12]}, {shard_tops[0]} ran {first.lock_hash[:12]}: "
                             "shards of different preregistrations cannot be merged")  # fmt: skip
    if (out / out_file).exists():
        raise MergeError(f"{out} already holds a {kind}", hint="merge into a new directory")
    if out.resolve() in {s.resolve() for s in shard_tops}:
        raise MergeError(f"{out} is one of the shard directories")
    return first
