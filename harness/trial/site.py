"""Where trials run: what a run's set-up made for all of them (:class:`RunCore`, :class:`RunSite`), and one
attempt's own place on the engine (:class:`GatewaySite`, :class:`TrialSite`), made when it starts and removed
when it ends.

    RunCore      made once per run by :class:`harness.experiment.resources.RunResources`: the engine, the
                 hardening profile, the run directory, the key's and the skill copies' volumes, the upstream
                 network and URL the gateways forward to, their environment. A trigger study's run is this.
    RunSite      an experiment's run (:class:`~harness.experiment.resources.StudyResources`): also the base
                 trees every workspace stands on and the skill copy checked against the lock
    GatewaySite  one attempt with a gateway, as a context manager (the pattern of inspect_ai's per-sample
                 sandbox: init, yield, cleanup): its names and labels on construction
                 (:mod:`harness.sandbox.names`); :meth:`~GatewaySite.start_gateway` starts its network and
                 gateway on a thread of their own; :meth:`~GatewaySite.open_gateway` waits for the gateway and
                 follows its log; ``__exit__`` removes everything of the attempt, on every path, or hands that to
                 the run's reaper (:mod:`harness.trial.reaper`). A trigger run's agent needs no more (its
                 workspace is a tmpfs).
    TrialSite    a trial's: a gateway site with a workspace, which :meth:`~TrialSite.make` makes while the
                 gateway comes up, and teardown removes with the rest

Making the site is a step of the trial, not of ``__enter__``: the trial times it as its workspace phase and
may be stopped before it; entering the ``with`` first is what puts every path (a set-up that failed halfway
included) through the teardown. The workspace's kind (overlay, copy or volume) is one object,
:class:`harness.trial.workspace.TrialWorkspace`: nothing here or in the trial branches on it.

The interface, for a step that runs containers on the site: ``names`` (its containers' names), ``labels``
(what every object of the attempt carries), ``network`` (the trial's internal network), ``gateway_ip`` (the
gateway's address there, once :meth:`~GatewaySite.open_gateway` returned), ``workspace`` (a trial's), ``gate``
(the run's start gate, for every container it starts) and ``run`` (the :class:`RunCore` or :class:`RunSite`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Generic, Self, TypeVar, cast

from harness.errors import HarnessError
from harness.sandbox import lifecycle, roles
from harness.sandbox.labels import RUN, TRIAL
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import ContainerRuntime, DockerObject, Gate, VolumeMount
from harness.sidecars.gatewaylog import GatewayEvent
from harness.trial import gateway, workspace
from harness.trial.basetrees import BaseTree, BaseTrees
from harness.trial.delivery import SkillCopy
from harness.trial.reaper import TrialReaper


@dataclass(frozen=True, kw_only=True)
class RunCore:
    """What every run's set-up made (or chose) for every attempt of the run: an experiment's trials, a trigger
    study's runs."""

    engine: ContainerRuntime
    run_id: str
    profile: roles.Profile
    """The hardening profile of every container of the run (images, role uids, limits, runtime)."""
    root: Path
    """The run directory (0700): trial directories are made in it."""
    key_volume: str
    """Holds the key (:data:`harness.sandbox.roles.KEY_MOUNT`); mounted in the gateways only."""
    upstream: str
    """The URL the gateways forward to (the scripted API's, or the route's)."""
    upstream_network: str
    """The network the gateways' upstream side joins (the run's own, or the user's)."""
    gateway_env: Mapping[str, str] = field(default_factory=dict)
    """The gateways' settings beyond their role's own: the upstream route (proxy, extra CA: a real run's)
    and the run's own (an experiment's price table; a trigger run's skill to stop at)."""
    route_mounts: tuple[VolumeMount, ...] = ()
    """The route's volume (real runs with an extra CA or a proxy); empty otherwise."""
    skill_copies: Mapping[str, SkillCopy] = field(default_factory=dict)
    """Read-only skill copies by name (:mod:`harness.trial.delivery`): a library experiment's skills, a
    trigger study's variants."""


@dataclass(frozen=True, kw_only=True)
class RunSite(RunCore):
    """An experiment's run: a locked study's, whose trials have workspaces."""

    bases: BaseTrees
    """The run's base trees: every trial's workspace stands on one."""
    skill_volume: str
    """The skill copy, root's: mounted read-only in the skill arm's agent."""
    baseline_skill_volume: str | None = None
    """Version against version (``arms``): the baseline version's copy, root's: mounted read-only in the baseline
    arm's agent exactly where the skill arm's copy is mounted in its own. None: the bare baseline."""


R = TypeVar("R", bound=RunCore)


class GatewaySite(Generic[R]):
    """One attempt's gateway on the engine (see the module docstring); ``R``: what the run made for it."""

    ROLES: ClassVar[tuple[str, ...]] = ("gateway", "agent")
    """The attempt's container roles (a teardown that cannot list removes them by name)."""

    def __init__(
        self,
        run: R,
        names: TrialNames,
        labels: Mapping[str, str],
        *,
        gateway_budget_usd: float,
        trial_id: str,
        gateway_env: Mapping[str, str] | None = None,
        gate: Gate | None = None,
        reaper: TrialReaper | None = None,
        timed: Callable[[str], AbstractContextManager[None]] = lambda _phase: nullcontext(),
    ) -> None:
        """``labels``: the attempt's (with its trial id); ``gateway_budget_usd``: what its gateway lets through;
        ``gateway_env``: its gateway's settings beyond the run's (``RunSite.gateway_env``); ``gate``: entered
        around every container start;
        ``reaper``: the run's, which ``__exit__`` hands the teardown to (None: done before it returns);
        ``timed``: the trial's phase timer, which ``__exit__`` times the ``teardown`` phase with."""
        self.run = run
        self.names = names
        self.labels = dict(labels)
        self.network = names.network
        self.gate = gate
        self.trial_id = trial_id
        self._gateway_ip: str | None = None
        self.leftovers: list[str] = []
        """What teardown could not remove (empty when it was handed to the reaper, which reports its own)."""
        self._budget_usd = gateway_budget_usd
        self._gateway_env = {**run.gateway_env, **(gateway_env or {})}
        self._reaper = reaper
        self._timed = timed
        self._gateway_up: _InBackground[str] | None = None
        self._follower: gateway.Follower | None = None

    # ------------------------------------------------------------------ protocol
    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._follower is not None:
            self._follower.stop()
        if self._gateway_up is not None:
            self._gateway_up.join()  # nothing of the attempt is still being made when teardown lists it
        with self._timed("teardown"):
            if self._reaper is not None:  # its leftovers are the run's to report (and remove)
                self._reaper.submit(self.trial_id, lambda: self._tear_down(this_attempt=True))
            else:
                self.leftovers = self._tear_down()

    # ----------------------------------------------------------------- gateway
    def start_gateway(self) -> None:
        """Start the attempt's network and gateway on a thread of their own (:meth:`open_gateway` waits)."""
        self._gateway_up = _InBackground("gateway-up", self._start_gateway)

    def open_gateway(self, on_event: Callable[[GatewayEvent], None] | None = None) -> str:
        """Wait until the gateway listens (raising its start's error); with ``on_event``, follow its log: it hears
        each event the moment it is written, until the site closes. Returns its address on the trial network."""
        assert self._gateway_up is not None, "open_gateway before start_gateway"
        self._gateway_ip = self._gateway_up.result()
        if on_event is not None:
            self._follower = gateway.Follower(self.run.engine, self.names.container("gateway"), on_event).start()
        return self._gateway_ip

    @property
    def gateway_ip(self) -> str:
        """The gateway's address on the trial network (once :meth:`open_gateway` returned)."""
        assert self._gateway_ip is not None, "the gateway is not open"
        return self._gateway_ip

    def gateway_events(self) -> list[GatewayEvent]:
        """The gateway's log so far, parsed (:func:`harness.trial.gateway.events`)."""
        return gateway.events(self.run.engine, self.names.container("gateway"))

    def _start_gateway(self) -> str:
        """The trial's internal network and its gateway, listening; returns the gateway's address there."""
        run, name = self.run, self.names.container("gateway")
        run.engine.create_network(self.network, self.labels, internal=True)
        spec = roles.gateway_spec(
            run.profile,
            name=name,
            labels=self.labels,
            upstream_network=run.upstream_network,
            upstream=run.upstream,
            key_volume=run.key_volume,
            budget_usd=self._budget_usd,
            route_env=self._gateway_env,
            route_volumes=run.route_mounts,
        )
        run.engine.create(spec, extra_networks=[self.network])
        run.engine.start(name)
        gateway.wait_listening(run.engine, name)
        return run.engine.container_ip(name, self.network)

    # ----------------------------------------------------------------- teardown
    def _objects(self) -> list[DockerObject]:
        """Everything of the attempt by name, for a teardown that cannot list by label."""
        return [
            *(DockerObject("container", self.names.container(role)) for role in self.ROLES),
            DockerObject("network", self.network),
        ]

    def _remove_host_side(self) -> None:
        """What the attempt has on this machine (nothing: a trial's workspace, see :class:`TrialSite`)."""

    def _tear_down(self, *, this_attempt: bool = False) -> list[str]:
        """The attempt's containers, then its network and volumes (all carry its label), and what it has on this
        machine at the same time, on another thread. Each step removes its own container on success, so
        normally only the gateway and the network are left. Returns one text per thing it could not remove.

        ``this_attempt`` (a teardown handed to the run's reaper, which may run after the next attempt of the
        same trial started): of what carries the trial's label, only this attempt's objects (by name)."""
        errors: list[str] = []
        engine = self.run.engine

        def remove_host_side() -> None:
            try:
                self._remove_host_side()
            except HarnessError as e:
                errors.append(str(e))

        named = self._objects()  # before the host side's thread: what both read is made on this one
        host_side = threading.Thread(target=remove_host_side, name="teardown-host")
        host_side.start()
        try:
            selector = {RUN: self.run.run_id, TRIAL: self.trial_id}
            try:
                if this_attempt:
                    mine = {(o.kind, o.name) for o in named}
                    listed = engine.labelled(selector)
                    _, failed = lifecycle.remove_objects(engine, [o for o in listed if (o.kind, o.name) in mine])
                else:
                    _, failed = lifecycle.remove_labelled(engine, selector)
            except HarnessError:  # cannot list: try every role's name, the network and the volumes
                _, failed = lifecycle.remove_objects(engine, named)
            errors.extend(failed)
        finally:
            host_side.join()
        return errors


class TrialSite(GatewaySite[RunSite]):
    """One trial's attempt: a gateway site with the trial's workspace (see the module docstring)."""

    ROLES = ("gateway", "agent", "watch", "collect", "verify", "judge")

    @functools.cached_property
    def workspace(self) -> workspace.TrialWorkspace:
        """Of the run's kind, named on first use and made by :meth:`make` (teardown removes it on every path)."""
        run = self.run
        place = workspace.Place(run.engine, run.profile, self.names, self.labels, self.gate or _no_gate)
        return workspace.for_trial(run.bases, run.root / self.names.key, place)

    def make(self, base_sha: str, *, mountpoint: tuple[str, ...] = ()) -> BaseTree:
        """The trial's network and gateway on their own thread, and meanwhile its workspace on the base tree
        of ``base_sha`` (returned), with the empty directories ``mountpoint`` inside it. (An attempt without a
        workspace is a :class:`GatewaySite`.)"""
        self.start_gateway()
        base = self.run.bases.get(base_sha)
        self.workspace.make(base, mountpoint)
        return base

    def _objects(self) -> list[DockerObject]:
        return [*super()._objects(), *self.workspace.objects()]

    def _remove_host_side(self) -> None:
        self.workspace.remove()


T = TypeVar("T")


def _no_gate() -> AbstractContextManager[None]:
    return nullcontext()


class _InBackground(Generic[T]):
    """One step on its own thread while the trial goes on. :meth:`result` waits for it and returns its value
    or raises its exception on the trial's thread; :meth:`join` only waits (teardown joins every step first,
    so nothing is still being made when it lists what to remove)."""

    def __init__(self, name: str, step: Callable[[], T]) -> None:
        self._step = step
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._step()
        except BaseException as e:  # handed to the trial's thread by result()
            self._error = e

    def join(self) -> None:
        self._thread.join()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return cast(T, self._value)
