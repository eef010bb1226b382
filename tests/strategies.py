"""Hypothesis strategies for result lines of every shape the schema allows (issue 24 item 3).

:func:`model_fields` draws the keyword arguments of any frozen record model field by field, read from the
model itself (``model_fields``), so a field added to :mod:`harness.records` is drawn without a change
here: every field with a default may be **absent** (left out of the JSON line, so the default applies)
or, where its type allows it, **None**; every value it takes is of its declared type. Nested models
(the agent's result, the gateway's meter, the patch, verify, judge, skill use, ...) are drawn the same
way. :func:`result_sets` draws a list of such :class:`~harness.records.TrialRecord` lines with the
identities a results log needs (unique ``(trial_id, attempt)``, the experiment's lock on every line),
built by :func:`tests.factories.trial_record` like every other record of the suite.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Literal, get_args, get_origin

from hypothesis import strategies as st
from pydantic import BaseModel

from harness.records import ARMS, Provenance, TrialRecord
from tests.factories import LOCK, OUTCOME_PROV, RecordFields, trial_record

ABSENT: Any = object()
"""Drawn for a field with a default: leave it out of the line."""

WORDS = ("", "sonnet", "opus", "claude-sonnet-x", "claude-opus-y", "2.1.0", "x", "scripted", "ok", "yes", "é<&>")
TIMES = ("2026-11-10T10:00:00+00:00", "2026-11-10T10:05:00.000+00:00", "2026-11-11T09:00:00Z", "t", "")
"""Timestamps as the controller writes them, and the strings a hand-edited line may hold instead."""

FLOATS = st.one_of(
    st.sampled_from((0.0, 0.01, 0.03, 0.5, 1.0)),
    st.floats(min_value=0.0, max_value=10.0, allow_nan=False),
    st.floats(min_value=-1.0, max_value=0.0, allow_nan=False),
)
INTS = st.one_of(st.integers(min_value=-2, max_value=6), st.sampled_from((124, 137, 10_000)))
STRINGS = st.one_of(st.sampled_from(WORDS), st.text(max_size=6))


@functools.cache
def _value(annotation: Any, path: str) -> st.SearchStrategy[Any]:
    """A value of ``annotation`` (None where the type allows it); built once per type and place."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is type(None):
        return st.none()
    if origin in (typing.Union, types.UnionType):
        return st.one_of([_value(a, path) for a in args])
    if origin is typing.Annotated:
        return _value(args[0], path)
    if origin is Literal:
        return st.sampled_from(args)
    if origin is tuple:
        return st.lists(_value(args[0], path), max_size=3).map(tuple)
    if origin is dict:
        keys = st.sampled_from(("agent", "verify", "judge", "patch.diff"))
        return st.dictionaries(keys, _value(args[1], path), max_size=3)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_fields(annotation, path).map(annotation.model_validate)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return INTS
    if annotation is float:
        return FLOATS
    if annotation is str:
        return STRINGS
    raise TypeError(f"{path}: no strategy for {annotation!r}: teach tests/strategies.py this type")


@functools.cache
def model_fields(model: type[BaseModel], path: str = "") -> st.SearchStrategy[dict[str, Any]]:
    """The fields of ``model`` as a dict: each one with a default drawn absent, or (where its type allows)
    None, or a value of its type."""
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for name, info in model.model_fields.items():
        value = _value(typing.cast(Any, info.annotation), f"{path}{name}.")
        parts[name] = value if info.is_required() else st.one_of(st.just(ABSENT), value)
    return st.fixed_dictionaries(parts).map(lambda d: {k: v for k, v in d.items() if v is not ABSENT})


TASK_IDS = ("t1", "t2", "t3")
_RECORDED = OUTCOME_PROV.model_dump()


@st.composite
def provenances(draw: st.DrawFn) -> Provenance:
    """The experiment's provenance (its lock), each optional field absent, None or a value, and each
    required one as recorded or another string (so arms often match and sometimes do not)."""
    fields = draw(model_fields(Provenance))
    for name, info in Provenance.model_fields.items():
        if info.is_required() and draw(st.booleans()):
            fields[name] = _RECORDED[name]
    fields["lock_hash"] = LOCK
    return Provenance.model_validate(fields)


@st.composite
def trial_records(draw: st.DrawFn, arms: tuple[str, ...] = ARMS, task_ids: tuple[str, ...] = TASK_IDS) -> TrialRecord:
    """One result line of the experiment under :data:`tests.factories.LOCK`, every optional field of it and
    of its nested models absent, None or a value."""
    task, arm, run = draw(st.sampled_from(task_ids)), draw(st.sampled_from(arms)), draw(st.integers(0, 2))
    fields = draw(model_fields(TrialRecord))
    fields.update(
        schema_version=1,
        experiment_id=LOCK[:12],
        trial_id=f"{task}.{arm}.{run}",
        task_id=task,
        arm=arm,
        run_index=run,
        attempt=draw(st.integers(1, 3)),
        provenance=draw(provenances()),
        started_at=draw(st.sampled_from(TIMES)),
        finished_at=draw(st.sampled_from(TIMES)),
    )
    return trial_record(**typing.cast(RecordFields, fields))


def result_sets(
    arms: tuple[str, ...] = ARMS, task_ids: tuple[str, ...] = TASK_IDS, max_size: int = 14
) -> st.SearchStrategy[list[TrialRecord]]:
    """A results log: 1..``max_size`` lines, one per (trial, attempt)."""
    return st.lists(
        trial_records(arms, task_ids), min_size=1, max_size=max_size, unique_by=lambda r: (r.trial_id, r.attempt)
    )


IDENTITY = frozenset({"schema_version", "experiment_id", "trial_id", "task_id", "arm", "run_index", "attempt"})
"""What places a line in its results log: :func:`with_holes` leaves it as recorded."""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The record model inside ``annotation`` (``GatewayMeter | None`` -> GatewayMeter), if there is one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


@functools.cache
def optional_paths(model: type[BaseModel] = TrialRecord, prefix: str = "") -> tuple[tuple[str, Any], ...]:
    """Every field with a default of ``model`` and of the models nested in it, at any depth, as
    ``(dotted path, annotation)``: what :func:`with_holes` may leave out or set to None."""
    out: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        if not info.is_required() and name not in IDENTITY:
            out.append((path, info.annotation))
        nested = _model_of(info.annotation)
        if nested is not None:
            out.extend(optional_paths(nested, path + "."))
    return tuple(out)


@st.composite
def with_holes(draw: st.DrawFn, record: TrialRecord, keep: frozenset[str] = frozenset()) -> TrialRecord:
    """``record`` with up to six of its optional fields, at any depth (:func:`optional_paths`), left out,
    set to None or given another value of their type; its identity, its lock and the dotted paths in
    ``keep`` stay as recorded. A field inside a nested model the record does not have is skipped."""
    data = record.model_dump()
    paths = [p for p in optional_paths() if p[0] not in keep]
    for path, annotation in draw(st.lists(st.sampled_from(paths), max_size=6, unique=True)):
        *parents, name = path.split(".")
        node: Any = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        value = draw(st.one_of(st.just(ABSENT), st.none(), _value(annotation, path + ".")))
        if value is ABSENT:
            node.pop(name, None)
        elif value is not None or _allows_none(annotation):
            node[name] = value
    return trial_record(**typing.cast(RecordFields, data))


def _allows_none(annotation: Any) -> bool:
    return annotation is type(None) or type(None) in get_args(annotation)


def holed_sets(records: list[TrialRecord], keep: frozenset[str] = frozenset()) -> st.SearchStrategy[list[TrialRecord]]:
    """Every line of ``records`` through :func:`with_holes`."""
    return st.tuples(*(with_holes(r, keep) for r in records)).map(list)
