"""What one run sets up before its first trial and tears down after its last: one context manager.

    run directory (0700) and owner file -> the gateway's key volume -> the skill copy's volume (an
      experiment's) -> the named skill copies' volumes (a library's skills, a trigger study's variants)
      -> whether the engine sees this machine's trial trees (a probe), then the base trees (an
      experiment's) -> the upstream route (the volume of its CA and proxy) -> the upstream network ->
      the scripted Messages API (its scenario's volume), or, in a real run, the upstream preflight (one
      TLS handshake through the route, no request)

Every file a container is given goes in a volume filled through the engine's archive API
(:mod:`harness.sandbox.volumes`), not a bind mount of the run directory, so a run works on an engine
on another machine: the key (``0400``, the sidecars' uid, mounted only in the gateways), the skill
copies (root's, mounted read-only in the agent), the scenario, the extra CA and the proxy's URL (it may
carry a password: ``0400``, the sidecars' uid, like the key; no secret is ever a container's environment
variable). The run directory keeps the controller's own copies (the skill copy checked against the lock is
what fills its volume).

:class:`RunResources` makes what every run needs in that order in ``__enter__`` and returns a
:class:`~harness.trial.site.RunCore` naming it (a trigger study's run, :mod:`harness.experiment.triggers`);
:class:`StudyResources`, an experiment's, also the locked skill's copy and the base trees, and returns a
:class:`~harness.trial.site.RunSite` (what every trial of the run stands on). When a step fails, ``__enter__``
undoes what the steps before it made and re-raises (the pattern
of cibuildwheel's ``OCIContainer.__enter__``), so a run that never started leaves nothing behind.
``__exit__`` tears everything down on every path (success, an exception, an interrupt): it keeps the
scripted model's log, removes every Docker object carrying the run's label (what the trials left
included, volumes too) or, when the engine cannot list them, what this run made by name; then the run
directory. Objects that cannot be removed are reported (``say``), never raised over the run's own outcome.

What the run's containers share but nothing here makes (the hardening profile, the role uids, the start
gate, the provenance) is decided before and passed in: :class:`RunSetup` (:class:`StudySetup`). The run directory's owner
file (``<pid> <host>``) is what lets a later start or ``skilltrial gc`` remove it after a SIGKILL
(:mod:`harness.sandbox.reaper`). Each trial's own objects are its :class:`~harness.trial.site.TrialSite`'s.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Protocol

from harness.errors import HarnessError
from harness.experiment import upstream
from harness.experiment.library_plan import lock_entries
from harness.experiment.upstream import Upstream
from harness.host.trees import remove_tree
from harness.host.workroots import OWNER_FILE
from harness.plan import TrialSpec
from harness.redact import Redactor
from harness.sandbox import engineview, lifecycle, names, roles, subnets, volumes
from harness.sandbox.labels import RUN
from harness.sandbox.runtime import DockerObject, Runtime, VolumeMount
from harness.study.config import Execution, Study
from harness.study.lock import copy_locked_skill, copy_locked_version
from harness.trial.basetrees import BaseTrees, EngineSide, WorkspaceKind, parse_user
from harness.trial.delivery import SkillCopy, tree_sha256
from harness.trial.gateway import wait_listening
from harness.trial.site import RunCore, RunSite

SCRIPTED_LOG = "scripted-api.log"
SCRIPTED_LOG_CAP = 16 << 20


class Outputs(Protocol):
    """Where a run's outputs go (an experiment directory, a trigger study's): the scripted model's log is
    kept there, through its redactor."""

    @property
    def root(self) -> Path: ...

    @property
    def redactor(self) -> Redactor: ...


@dataclass(frozen=True, kw_only=True)
class RunSetup:
    """Everything a run's set-up makes its resources from (decided before any of them exists)."""

    run_id: str
    work_root: Path
    """The run directory is made here (:func:`harness.host.workroots.prepare` made and recorded it)."""
    labels: Mapping[str, str]
    """The run's labels (with its expiry: :func:`run_ttl_s`) for every object it makes."""
    profile: roles.Profile
    """The hardening profile: the scripted API and the upstream preflight run under its sidecar user."""
    key: str
    """The key the gateways hold (scripted runs: a fake one)."""
    key_owner: tuple[int, int]
    """uid, gid of the sidecars: the key file in its volume is theirs (mode 0400), no other uid's."""
    route: Upstream
    """Real runs: where the gateways send the model traffic (proxy, extra CA, the user's network)."""
    scenario: bytes | None = None
    """Scripted runs: the compiled scenario the scripted Messages API serves (then ``route`` is unused)."""
    skill_copies: Callable[[Path], Mapping[str, Path]] = field(default=lambda _root: {})
    """Makes the run's named skill copies under the run directory: a library experiment's skills, a trigger
    study's variants (none for A/B)."""
    gateway_env: Mapping[str, str] = field(default_factory=dict)
    """The gateways' settings of this run (an experiment's price table; a trigger run's skill to stop at)."""
    root_name: str = ""
    """The run directory's name under ``work_root`` (default: the run id). A run on several engines sets up
    once per engine under one run id (its label on each engine), each in a directory of its own."""

    @property
    def scripted(self) -> bool:
        return self.scenario is not None


@dataclass(frozen=True, kw_only=True)
class StudySetup(RunSetup):
    """An experiment's run: also the locked study whose skill is copied and whose repository the trials stand on."""

    study: Study
    """The locked study whose skill is copied (once, the copy checked against the lock)."""
    base_sha: str | None = None
    """The base commit whose tree is made before any trial starts (:class:`BaseTrees`; once per run)."""
    workspace_kind: WorkspaceKind | None = None
    """``HARNESS_WORKSPACE``: a forced workspace kind; None: volume on a remote engine, else overlay or copy."""
    base_excluded: tuple[str, ...] = ()
    """Paths of the base commit that no trial's tree holds (the lock's ``base_excluded``, and a scripted run's
    scenario when the base holds it)."""


class RunResources:
    """What every run needs, as one context manager (see the module docstring): a trigger study's run."""

    def __init__(self, engine: Runtime, setup: RunSetup, outputs: Outputs, say: Callable[[str], None]) -> None:
        """``outputs``: where the scripted model's log is kept, redacted; ``say``: a line for the person
        watching (cleanup problems)."""
        self.engine = engine
        self.setup = setup
        self.outputs = outputs
        self.say = say
        self.root = setup.work_root / (setup.root_name or setup.run_id)
        self.network = names.run_object(setup.run_id, "up")
        self.scripted_name = names.run_object(setup.run_id, "scripted")
        self._made_root = False
        self._made: list[DockerObject] = []
        """Docker objects this set-up made (or began to make), for removal by name."""

    # ------------------------------------------------------------------ protocol
    def __enter__(self) -> RunCore:
        try:
            return self._set_up()
        except BaseException:
            self._tear_down()
            raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._tear_down()

    # ------------------------------------------------------------------- set-up
    def _set_up(self) -> RunCore:
        self._make_run_dir()
        key_volume = self._key_volume()
        return self._connect(key_volume, self._skill_copies())

    def _key_volume(self) -> str:
        return self._volume("key", roles.key_tar(self.setup.key, self.setup.key_owner))

    def _skill_copies(self) -> dict[str, SkillCopy]:
        """The named skill copies, each in a volume of its own (root's, mounted read-only in the agents)."""
        return {
            name: SkillCopy(self._volume(f"copy-{i}", volumes.tar_tree(path)), tree_sha256(path))
            for i, (name, path) in enumerate(sorted(self.setup.skill_copies(self.root).items()))
        }

    def _connect(self, key_volume: str, copies: Mapping[str, SkillCopy]) -> RunCore:
        """The upstream side (route, network, the scripted model or the preflight), then the run's site."""
        s = self.setup
        mounts = self._stage_route() if s.scenario is None else ()
        network = self._make_network()
        if s.scenario is not None:
            url = self._start_scripted(network, s.scenario)
            route_env: Mapping[str, str] = {}
        else:
            self._check_route(network, mounts)
            url, route_env = s.route.url, s.route.gateway_env()
        return RunCore(
            engine=self.engine,
            run_id=s.run_id,
            profile=s.profile,
            root=self.root,
            key_volume=key_volume,
            upstream=url,
            upstream_network=network,
            gateway_env={**route_env, **s.gateway_env},
            route_mounts=mounts,
            skill_copies=copies,
        )

    def _make_run_dir(self) -> None:
        self.root.mkdir(mode=0o700)  # never an existing directory: teardown removes what this made
        self._made_root = True
        (self.root / OWNER_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")

    def _volume(self, what: str, tar: bytes | BinaryIO) -> str:
        """A volume of the run (labelled: teardown and gc find it), filled with ``tar`` (bytes or a file)."""
        name = names.run_object(self.setup.run_id, what)
        self._made.append(DockerObject("volume", name))  # before create: a fill can fail halfway
        volumes.make(self.engine, name, tar, image=self.setup.profile.sidecar_image, labels=self.setup.labels)
        return name

    def _stage_route(self) -> tuple[VolumeMount, ...]:
        """Real runs: the route's files (extra CA, the proxy's URL with its credentials) in a volume."""
        s = self.setup
        if s.route.extra_ca is None and not s.route.proxy:
            return ()
        name = names.run_object(s.run_id, "route")
        self._made.append(DockerObject("volume", name))
        return upstream.stage_route(
            s.route, self.engine, volume=name, image=s.profile.sidecar_image, labels=s.labels, owner=s.key_owner
        )

    def _make_network(self) -> str:
        """The gateways' upstream side: the run's own network, or the user's (their LLM gateway,
        their proxy), which is used and never made or removed."""
        s = self.setup
        if not s.scripted and s.route.network:
            return s.route.network
        self._made.append(DockerObject("network", self.network))
        self.engine.create_network(self.network, s.labels, internal=s.scripted, hosts=subnets.RUN_HOSTS)
        return self.network

    def _start_scripted(self, network: str, scenario: bytes) -> str:
        spec = roles.scripted_api_spec(
            self.setup.profile,
            name=self.scripted_name,
            labels=self.setup.labels,
            network=network,
            scenario_volume=self._volume("scenario", roles.scenario_tar(scenario)),
        )
        self._made.append(DockerObject("container", self.scripted_name))  # before create: a create can half succeed
        self.engine.create(spec)
        self.engine.start(self.scripted_name)
        wait_listening(self.engine, self.scripted_name)
        return f"http://{self.scripted_name}:{roles.SCRIPTED_PORT}"

    def _check_route(self, network: str, mounts: tuple[VolumeMount, ...]) -> None:
        """Real runs: a wrong CA or a refusing proxy stops the run here, before any trial."""
        s = self.setup
        upstream.preflight(
            self.engine,
            s.route,
            name=names.run_object(s.run_id, "preflight"),
            image=s.profile.sidecar_image,
            user=s.profile.sidecar_user,
            network=network,
            labels=s.labels,
            volumes=mounts,
        )

    # ----------------------------------------------------------------- teardown
    def _tear_down(self) -> None:
        if any(o.kind == "container" and o.name == self.scripted_name for o in self._made):
            self._save_scripted_log()
        # everything the run made carries its label: the trials' leftovers, the scripted API, the network
        try:
            _, errors = lifecycle.remove_labelled(self.engine, {RUN: self.setup.run_id})
        except HarnessError:  # cannot list: what this run made, by name (never the user's network)
            _, errors = lifecycle.remove_objects(self.engine, self._made)
        for error in errors:
            self.say(f"cleanup: {error}")
        self._release()
        if self._made_root:
            remove_tree(self.root)

    def _release(self) -> None:
        """What the run holds outside the engine and its directory (an experiment's: its base trees)."""

    def _save_scripted_log(self) -> None:
        """Keep the scripted model's audit trail (metadata only: events, never bodies)."""
        try:
            data, _ = self.engine.logs(self.scripted_name, stdout=True, stderr=True, cap=SCRIPTED_LOG_CAP)
        except HarnessError:
            return
        with open(self.outputs.root / SCRIPTED_LOG, "ab") as fh:
            fh.write(self.outputs.redactor.data(data))


class StudyResources(RunResources):
    """An experiment's run: a locked study's skill copy and base trees besides what every run needs."""

    setup: StudySetup

    def __init__(self, engine: Runtime, setup: StudySetup, outputs: Outputs, say: Callable[[str], None]) -> None:
        super().__init__(engine, setup, outputs, say)
        self.setup = setup
        self._bases: BaseTrees | None = None

    def __enter__(self) -> RunSite:
        site = super().__enter__()
        assert isinstance(site, RunSite)  # made by this class's _set_up
        return site

    def _set_up(self) -> RunSite:
        s = self.setup
        self._make_run_dir()
        key_volume = self._key_volume()
        # copied once, the copy checked against the lock, only the copy given to the agent (issue 14)
        skill_copy = copy_locked_skill(s.study, self.root / "skill", lock_entries)
        skill_volume = self._volume("skill", volumes.tar_tree(skill_copy))
        version = s.study.baseline_version  # version against version: the baseline's own checked copy
        baseline_skill_volume = (
            self._volume(
                "baseline-skill", volumes.tar_tree(copy_locked_version(s.study, version, self.root / "baseline-skill"))
            )
            if version is not None
            else None
        )
        copies = self._skill_copies()
        bases = self._base_trees()
        core = self._connect(key_volume, copies)
        return RunSite(
            **vars(core), bases=bases, skill_volume=skill_volume, baseline_skill_volume=baseline_skill_volume
        )

    def _base_trees(self) -> BaseTrees:
        """Made once per run, before any trial: the one-off cost of a big repository is paid here (and
        shown), not by each trial. Before it, whether the engine sees the trees this machine makes for
        its trials (:mod:`harness.sandbox.engineview`): a blind engine stops the run here."""
        s = self.setup
        side = EngineSide(self.engine, s.profile.sidecar_image, s.labels, s.run_id)
        self._bases = BaseTrees(
            s.study.repo_path, self.root, parse_user(s.profile.user), s.workspace_kind, side, s.base_excluded
        )
        if self._bases.kind != "volume":  # trees of this machine, bind-mounted: the engine must see them (issue 24)
            engineview.probe(
                self.engine,
                self.root / "engine-probe",
                overlay=self._bases.kind == "overlay",
                image=s.profile.sidecar_image,
                user=s.profile.user,
                labels=s.labels,
                name=names.run_object(s.run_id, "engine-probe"),
            )
        if s.base_sha is not None:
            t0 = time.monotonic()
            self._bases.get(s.base_sha)
            self.say(
                f"base tree of {s.base_sha[:12]} ready in {time.monotonic() - t0:.1f} s ({self._bases.kind} workspaces)"
            )
        return self._bases

    def _release(self) -> None:
        if self._bases is not None:
            self._bases.close()  # the worktree entries in the user's repository go with them


def run_ttl_s(execution: Execution, todo: Sequence[TrialSpec], jobs: int) -> float:
    """How long the run's own objects (scripted API, upstream network) must outlive a crash: the
    plan's longest trial (per-task deadlines included) times its rounds, plus an hour. Past it,
    another harness may reap them even while this process lives."""
    longest = max((execution.trial_deadlines_s(s.task) for s in todo), default=0)
    return (longest + 300) * (1 + len(todo) / max(1, jobs)) + 3600
