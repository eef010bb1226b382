"""What a run is asked to do (:class:`RunOptions`, from the command line) and whether it may: the one check
of the preregistration's lock and of the API key (:func:`admit`), made before anything of a run happens (no
engine is touched, nothing is written), by every kind of experiment (A/B, A/A calibration, library, each
model of a matrix)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness import plan
from harness.errors import PrerequisiteError
from harness.experiment.library_plan import lock_entries
from harness.experiment.upstream import REAL_UPSTREAM, Upstream
from harness.host.paths import HostPaths
from harness.sandbox.engine import EngineAddress
from harness.sandbox.images import ImageOptions
from harness.study.config import LockBlock, Study
from harness.study.lock import verify_lock
from harness.trial.watchdog import WorkspaceLimit

RESULTS_ROOT = Path("harness-results")
"""Where a run's directory goes when ``--out`` does not say (relative to the working directory)."""


@dataclass(frozen=True)
class RunOptions:
    jobs: int
    out: Path | None = None
    """The experiment directory; None: ``harness-results/<name>-<lock12>[-shard<i>of<n>]``
    (:meth:`Experiment.out_dir`)."""
    scripted: Path | None = None
    """A scenario file: run against the scripted Messages API (offline, no key)."""
    api_key: str | None = None
    upstream: str = REAL_UPSTREAM
    shard: plan.ShardRef | None = None
    runtime: str | None = None
    images: ImageOptions = field(default_factory=ImageOptions)
    host_slots: int | None = None
    """Host-wide concurrent-trial limit (default: HARNESS_HOST_SLOTS, else from cores and memory)."""
    env: Mapping[str, str] = field(default_factory=dict)
    paths: HostPaths | None = None
    """Work root, host slots and the work-roots record (default: from ``env``; :mod:`harness.cli` passes
    the ones it read at start)."""
    reuse_from: tuple[Path, ...] = ()
    """Experiment directories (or folders of them) whose matching baseline trials are reused."""
    scripted_key: str | None = None
    """Scripted mode only: the fake key the gateway holds (must start with ``sk-ant-test-``), so
    tests can look for it everywhere; by default a random one. Never used in real runs."""
    workspace_limit: WorkspaceLimit | None = None
    """Bounds on each trial's bind-mounted /workspace (default: from ``env``, see harness.trial.watchdog)."""
    aa: bool = False
    """A/A calibration (``skilltrial calibrate``): the second arm runs exactly as the baseline (same prompt,
    no skill mounted) and is recorded under the arm name ``skill``, so the usual analysis compares the
    baseline with itself."""
    route: Upstream | None = None
    """Real runs: the gateway's upstream route (URL, proxy, extra CA, network); default: ``upstream``, direct."""
    preflight: bool = True
    """Run each task's verify_cmd at the base commit before any agent (harness.experiment.preflight)."""
    engines: tuple[EngineAddress, ...] = ()
    """A pool of engines (``--engine``, ``--engines-file``; the first is the reference, where images are built
    and the preflight runs): the trials are spread over them (:mod:`harness.experiment.placement`). Empty: the
    one engine ``env`` names. With a pool, ``jobs`` caps the trials at once over all engines (0: what the
    engines hold together) and the host slots do not apply (each engine has its own capacity)."""
    engine_slots: int | None = None
    """Trials at once per engine of a pool, set by hand (``--engine-slots``); None: each engine's capacity
    from its CPUs and memory (:func:`harness.sandbox.pool.capacities`)."""


@dataclass(frozen=True)
class Admission:
    """A study cleared to run (:func:`admit`)."""

    lock: LockBlock
    """The lock, verified against the preregistration, tasks, skill and base tree as they are now."""
    key: str
    """What the run's gateways hold: the API key, or a scripted run's fake one."""


def admit(study: Study, options: RunOptions) -> Admission:
    """The one check of what must hold before anything of a run happens (no engine is touched, nothing is
    written): the preregistration's lock against the files as they are now (a :class:`LockError` naming what
    changed), and for a real run the API key (a :class:`PrerequisiteError`); a scripted run gets a fake key."""
    lock = verify_lock(study, lock_entries)
    if options.scripted is not None:
        key = options.scripted_key or "sk-ant-test-" + secrets.token_urlsafe(24)
        if not key.startswith("sk-ant-test-"):
            raise PrerequisiteError("a scripted run's key must be a fake one starting with sk-ant-test-")
        return Admission(lock, key)  # a fake key: tests prove it never leaks
    if not options.api_key:
        raise PrerequisiteError(
            "ANTHROPIC_API_KEY is not set; a real run calls the Anthropic API",
            hint="export ANTHROPIC_API_KEY=..., or run offline against the scripted model (--scripted SCENARIO, "
            "or `make demo`)",
        )
    return Admission(lock, options.api_key)


def results_dir(name: str, lock_hash: str, shard: plan.ShardRef | None = None) -> Path:
    """The default experiment directory: ``harness-results/<name>-<lock12>[-shard<i>of<n>]``."""
    suffix = f"-shard{shard[0]}of{shard[1]}" if shard else ""
    return RESULTS_ROOT / f"{name}-{lock_hash[:12]}{suffix}"
