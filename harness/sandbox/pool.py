"""A pool of Docker engines: the engines a user named, opened, with the same images on each.

Where the engines come from (:func:`addresses`): ``--engine URL`` (repeatable; a ``tcp://`` URL takes
Docker's TLS variables, ``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH``) and the entries of an engines file
(:mod:`harness.study.engines`, each with its own ``cert_path`` or ``ssh_config``), in that order; the first
is the *reference* engine. :meth:`EnginePool.open` connects to each (:class:`harness.sandbox.engine.Engine`:
``unix://``, ``tcp://`` with or without TLS, ``ssh://`` through the system's ssh client);
:meth:`EnginePool.prepare_images` makes every engine hold the reference's images under the same ids,
copying what is missing through the images API, and refuses (drops from the pool, saying why) an engine
that holds a tag as another image; ``skilltrial doctor`` checks each engine
(:func:`harness.sandbox.doctor.pool_checks`).

Not here yet (issue 29, phase two): placing trials on the engines (both arms of a pair on one), per-engine
capacity and slots, an engine lost mid-run.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError, HarnessError
from harness.sandbox.engine import Engine, EngineAddress, address_from_env
from harness.sandbox.images import ImageMismatch, ImageSync, reference_ids, sync_images
from harness.sandbox.runtime import Runtime
from harness.study.engines import EnginesFile

Connect = Callable[[EngineAddress], Runtime]
"""Opens one engine (default :class:`Engine`; unit tests pass fakes). Raises HarnessError when it cannot."""


def connect_engine(address: EngineAddress) -> Runtime:
    return Engine(address=address)


def addresses(urls: Sequence[str], engines_file: EnginesFile | None, env: Mapping[str, str]) -> list[EngineAddress]:
    """The engines ``--engine`` and the engines file name, in that order; the same URL twice, or two engines
    of one name, is a ConfigError (exit 4)."""
    out = [address_from_env(env, url) for url in urls]
    for entry in engines_file.engines if engines_file is not None else ():
        out.append(
            EngineAddress(
                entry.url,
                name=entry.name or "",
                cert_path=Path(entry.cert_path) if entry.cert_path else None,
                ssh_config=Path(entry.ssh_config) if entry.ssh_config else None,
            )
        )
    seen: dict[str, str] = {}
    for a in out:
        if a.url in seen.values():
            raise ConfigError("--engine", f"{a.url} is named twice (on the command line or in the engines file)")
        if a.label in seen:
            raise ConfigError(
                "--engine", f"two engines are called {a.label!r}: {seen[a.label]} and {a.url}", hint="name one"
            )
        seen[a.label] = a.url
    return out


@dataclass(frozen=True)
class PoolEngine:
    address: EngineAddress
    runtime: Runtime

    @property
    def name(self) -> str:
        return self.address.label


@dataclass(frozen=True)
class Opened:
    """One engine's connection attempt (:func:`open_each`): the engine, or why it could not be opened."""

    address: EngineAddress
    engine: PoolEngine | None
    error: HarnessError | None


def open_each(targets: Sequence[EngineAddress], *, connect: Connect = connect_engine) -> list[Opened]:
    """Try every engine, going on past the ones that do not answer (``skilltrial doctor``)."""
    out = []
    for a in targets:
        try:
            out.append(Opened(a, PoolEngine(a, connect(a)), None))
        except HarnessError as e:
            out.append(Opened(a, None, e))
    return out


@dataclass(frozen=True)
class PoolImages:
    synced: tuple[ImageSync, ...]
    """Every engine but the reference: what was copied there, what it held already."""
    refused: Mapping[str, ImageMismatch]
    """Engines dropped from the pool because they hold a tag as another image, by name."""


class EnginePool:
    """Open engines, the reference first. A context manager: leaving it closes every connection."""

    def __init__(self, engines: Sequence[PoolEngine]) -> None:
        if not engines:
            raise ValueError("a pool needs at least one engine")
        self._engines = list(engines)

    @classmethod
    def open(cls, targets: Sequence[EngineAddress], *, connect: Connect = connect_engine) -> EnginePool:
        """Connect to every engine; when one cannot be opened, close the others and raise its error."""
        opened = open_each(targets, connect=connect)
        failed = next((o for o in opened if o.error is not None), None)
        if failed is not None and failed.error is not None:
            for o in opened:
                if o.engine is not None:
                    o.engine.runtime.close()
            raise failed.error
        return cls([o.engine for o in opened if o.engine is not None])

    @property
    def engines(self) -> tuple[PoolEngine, ...]:
        return tuple(self._engines)

    @property
    def reference(self) -> PoolEngine:
        return self._engines[0]

    def prepare_images(self, refs: Sequence[str]) -> PoolImages:
        """Every engine holds ``refs`` with the reference engine's ids (:func:`sync_images`); an engine that
        holds one as another image is closed and dropped, never mixed in. Raises PrerequisiteError when the
        reference lacks a ref, InfraError when a copy fails."""
        ref = self.reference
        reference_ids(ref.runtime, refs, name=ref.name)  # the reference's own gap first, named as such
        synced: list[ImageSync] = []
        refused: dict[str, ImageMismatch] = {}
        for engine in self._engines[1:]:
            try:
                synced.append(sync_images(ref.runtime, engine.runtime, refs, name=engine.name, reference_name=ref.name))
            except ImageMismatch as e:
                refused[engine.name] = e
        if refused:
            for engine in [e for e in self._engines if e.name in refused]:
                engine.runtime.close()
            self._engines = [e for e in self._engines if e.name not in refused]
        return PoolImages(tuple(synced), types.MappingProxyType(refused))

    def close(self) -> None:
        for engine in self._engines:
            with contextlib.suppress(
                Exception
            ):  # close() never raises by contract; a broken one must not stop the rest
                engine.runtime.close()

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[PoolEngine]:
        return iter(self._engines)
