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

A run on the pool (``skilltrial eval --engine ...``) asks each engine's capacity of the one capacity model
(:func:`capacities`, :mod:`harness.host.capacity`, from the engine's own CPUs and memory, or set by hand),
refuses one engine reached by two URLs (:meth:`EnginePool.check_distinct`), and names the engine in every
record (:func:`engine_ref`); placing the trials is :mod:`harness.experiment.placement`'s.
"""

from __future__ import annotations

import contextlib
import json
import threading
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from harness.errors import ConfigError, HarnessError, InfraError
from harness.host import workroots
from harness.host.capacity import capacity
from harness.records import EngineRef
from harness.sandbox.engine import Engine, EngineAddress, address_from_env
from harness.sandbox.images import ImageMismatch, ImageSync, reference_ids, sync_images
from harness.sandbox.runtime import Runtime
from harness.study.engines import EnginesFile

Connect = Callable[[EngineAddress], Runtime]
"""Opens one engine (default :class:`Engine`; unit tests pass fakes). Raises HarnessError when it cannot."""


def connect_engine(address: EngineAddress) -> Runtime:
    return Engine(address=address)


def connect_for(max_connections: int) -> Connect:
    """Opens an engine keeping ``max_connections`` open (a run's: :func:`harness.sandbox.engine.connections_for`)."""

    def connect(address: EngineAddress) -> Runtime:
        return Engine(address=address, max_connections=max_connections)

    return connect


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

    def check_distinct(self) -> None:
        """One engine reached by two URLs (the same ``docker info`` ID) would be counted, filled and torn down
        twice: a ConfigError naming both (exit 4)."""
        seen: dict[str, str] = {}
        for engine in self._engines:
            engine_id = engine.runtime.info().engine_id
            if engine_id and engine_id in seen:
                raise ConfigError(
                    "--engine",
                    f"{seen[engine_id]} and {engine.name} are one engine (ID {engine_id})",
                    hint="name each engine once",
                )
            seen[engine_id] = engine.name

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


@dataclass(frozen=True)
class EngineCapacity:
    trials: int
    why: str


def capacities(pool: EnginePool, *, trial_limits_bytes: int, by_hand: int | None = None) -> dict[str, EngineCapacity]:
    """How many trials each engine holds at once: ``by_hand`` for every engine when given, else the one
    capacity model (:func:`harness.host.capacity.capacity`) over the engine's own CPUs and memory."""
    out: dict[str, EngineCapacity] = {}
    for engine in pool:
        if by_hand is not None:
            out[engine.name] = EngineCapacity(by_hand, "set by hand")
            continue
        info = engine.runtime.info()
        cap = capacity(cpus=float(info.cpus or 1), mem_bytes=info.memory_bytes, trial_limits_bytes=trial_limits_bytes)
        out[engine.name] = EngineCapacity(cap.trials, cap.describe())
    return out


def engine_ref(engine: PoolEngine, runtime: str | None) -> EngineRef:
    """What a record says of the engine it ran on (``runtime``: the run's ``--runtime``; None: runc, the
    engine's default)."""
    info = engine.runtime.info()
    return EngineRef(
        name=engine.name,
        engine_id=info.engine_id,
        server_version=info.server_version,
        kernel=info.kernel,
        runtime=runtime or "runc",
    )


def remember_engines(targets: Sequence[EngineAddress], registry: Path | None) -> None:
    """Record each engine a run uses (once, in the per-user registry of
    :attr:`harness.host.paths.HostPaths.engines`): ``skilltrial gc`` reaches every one of them."""
    if registry is None:
        return
    for a in targets:
        entry = {"url": a.url, "name": a.name, "tls_verify": a.tls_verify}
        if a.cert_path is not None:
            entry["cert_path"] = str(a.cert_path)
        if a.ssh_config is not None:
            entry["ssh_config"] = str(a.ssh_config)
        workroots.remember_line(json.dumps(entry, sort_keys=True), registry)


def remembered_engines(registry: Path | None) -> list[EngineAddress]:
    """The engines runs recorded (:func:`remember_engines`), each URL once (its latest entry); unreadable
    lines are skipped."""
    found: dict[str, EngineAddress] = {}
    for line in workroots.recorded_lines(registry) if registry is not None else []:
        try:
            entry = json.loads(line)
            url = str(entry["url"])
        except (ValueError, KeyError, TypeError):
            continue
        found[url] = EngineAddress(
            url,
            name=str(entry.get("name") or ""),
            cert_path=Path(entry["cert_path"]) if entry.get("cert_path") else None,
            tls_verify=bool(entry.get("tls_verify", True)),
            ssh_config=Path(entry["ssh_config"]) if entry.get("ssh_config") else None,
        )
    return list(found.values())


PROBE_S = 10.0
"""How long an engine has to answer ``docker info`` before a run counts it as down."""


def answers(runtime: Runtime, timeout_s: float = PROBE_S) -> bool:
    """Whether the engine answers ``docker info`` within ``timeout_s`` (asked on a thread of its own, so a
    host that drops packets costs ``timeout_s``, not the connection's own timeout)."""
    answered = threading.Event()

    def ask() -> None:
        with contextlib.suppress(Exception):
            runtime.info()
            answered.set()

    threading.Thread(target=ask, daemon=True, name="engine-probe").start()
    return answered.wait(timeout_s)


class Fuse:
    """An engine of a run, with a fuse: once :meth:`blow` is called (the engine was lost), every call fails at
    once with an InfraError instead of waiting out a connection to a host that is gone (the trials still on
    it, their teardown and the run's teardown there then end in seconds). Calls in flight are not cut.
    :attr:`runtime` is what the run's resources and trials are given."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        self._inner = runtime
        self.name = name
        self.blown = threading.Event()
        self.runtime = cast(Runtime, _Guarded(self))

    def blow(self) -> None:
        self.blown.set()

    def call(self, attr: str) -> Any:
        target = getattr(self._inner, attr)
        if not callable(target):
            return target

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.blown.is_set():
                raise InfraError(f"engine {self.name} is down (lost during the run)")
            return target(*args, **kwargs)

        return guarded


class _Guarded:
    def __init__(self, fuse: Fuse) -> None:
        self._fuse = fuse

    def __getattr__(self, attr: str) -> Any:
        return self._fuse.call(attr)
