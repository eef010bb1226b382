"""A container's life, and the removal of the harness's objects, written once over the runtime's primitives.

    run(runtime, spec)              create -> start (through the gate) -> on_started -> wait (the host
                                    deadline) -> logs -> archive -> remove; the container never outlives
                                    the call, on any path
    remove_objects(runtime, objs)   containers, then networks, then volumes, going on past failures
    remove_labelled(runtime, sel)   remove_objects of everything carrying the labels

The Docker engine (:class:`harness.sandbox.engine.Engine`) and the fake (``tests.fakes.FakeRuntime``)
implement only the primitives of :class:`harness.sandbox.runtime.ContainerRuntime` (create, start, wait,
logs, get_archive, remove, labelled...), so what these composites promise is one piece of code, held to the
contract on both (``tests/contract/test_runtime.py``): the shape of docker-py, whose ``containers.run`` is
written once over its API client, and of httpx, whose tests fake only the transport.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping

from harness.errors import InfraError
from harness.sandbox.runtime import ContainerRuntime, ContainerSpec, DockerObject, ExitInfo, Gate, Removal

STDERR_CAP = 256 << 10
"""How much of a container's stderr a run keeps (its tail)."""


def run(
    runtime: ContainerRuntime,
    spec: ContainerSpec,
    *,
    deadline_s: float,
    output_cap: int = 4 << 20,
    on_started: Callable[[str], None] | None = None,
    gate: Gate | None = None,
    archive: str | None = None,
    archive_cap: int = 32 << 20,
) -> ExitInfo:
    """Create, start, wait at most ``deadline_s`` (then kill: ``timed_out``), read the output (stdout capped
    at ``output_cap``, its tail kept), remove. The container never outlives this call, on any path: a
    deadline, a refused gate, a failed create or start, an exception from ``on_started``.

    ``gate`` is entered around the start and may refuse it by raising (the exception passes through:
    :class:`harness.trial.trial.StartGate`); ``on_started`` is called with the name once the container runs.
    ``archive``: a path inside one of the spec's volume mounts, copied out as a tar after the container
    exited and before it is removed (``ExitInfo.archive``, at most ``archive_cap`` bytes; None when the path
    is missing). Raises PrerequisiteError (image missing) and InfraError (the runtime broke, a dropped
    connection while waiting included: that is never reported as a timeout)."""
    runtime.create(spec)  # a create that fails removes what it made itself
    try:
        with gate() if gate is not None else contextlib.nullcontext():
            runtime.start(spec.name)
        if on_started is not None:
            on_started(spec.name)
        waited = runtime.wait(spec.name, deadline_s)
        (stdout, truncated), (stderr, _) = runtime.output(spec.name, stdout_cap=output_cap, stderr_cap=STDERR_CAP)
        tar = runtime.get_archive(spec.name, archive, cap=archive_cap) if archive is not None else None
        return ExitInfo(
            exit_code=None if waited.timed_out else waited.exit_code,
            timed_out=waited.timed_out,
            oom_killed=waited.oom_killed,
            stdout=stdout,
            stderr=stderr,
            stdout_truncated=truncated,
            seconds=waited.ran_s,
            archive=tar.data if tar is not None else None,
            archive_truncated=tar is not None and tar.truncated,
        )
    finally:
        runtime.remove(DockerObject("container", spec.name))


def removal_order(obj: DockerObject) -> int:
    """Containers first (a network or a volume a container uses cannot go), then networks, then volumes."""
    return {"container": 0, "network": 1, "volume": 2}[obj.kind]


def remove_objects(runtime: ContainerRuntime, objects: Iterable[DockerObject]) -> Removal:
    """Remove the objects in :func:`removal_order`, going on past failures. Idempotent: an object already gone
    counts as removed. Never raises for one object's failure: each is one text of ``Removal.errors``."""
    done = Removal(removed=[], errors=[])
    for obj in sorted(objects, key=removal_order):
        try:
            runtime.remove(obj)
        except InfraError as e:
            done.errors.append(str(e))
            continue
        done.removed.append(obj)
    return done


def remove_labelled(runtime: ContainerRuntime, selector: Mapping[str, str]) -> Removal:
    """:func:`remove_objects` of everything :meth:`~harness.sandbox.runtime.ContainerRuntime.labelled` lists for
    ``selector``. Raises InfraError when the listing fails (then nothing was removed)."""
    return remove_objects(runtime, runtime.labelled(selector))
