"""An experiment: the planned trials of one locked preregistration, run to completion.

    lock check -> plan -> resume state -> gc and sweep -> images -> baseline reuse
      -> run set-up -> trials (concurrent, host-wide slots, bounded infra retries,
         cumulative budget, preregistered early stop) -> run teardown

The run's set-up and teardown are one context manager (:mod:`harness.experiment.resources`), the
scheduling is :mod:`harness.experiment.loop`, what is left to run is :mod:`harness.experiment.resume`.

Crash safety: every attempt is appended to ``results.jsonl`` the moment it
ends, so killing the controller (SIGKILL included) loses at most the trials
that were running; rerunning the same command (or ``--resume``) runs only what
is missing and never re-runs a trial whose last attempt is final. A different
lock hash (or shard, or mode, or any trial input: harness.study.inputs) refuses to resume into the same directory.
Objects a killed controller left behind (containers and networks by label,
trial directories and git worktrees by owner pid) are reaped on the next start.

Stops: when the cumulative budget (``budgets.total_usd``) is reached, or the
preregistered early stop (``decision.early_stop: curtail``) finds that no
outcome of the remaining trials can change the point rule's verdict, no new
trial starts, running ones finish, and every trial that did not run gets a
``skipped`` record naming what stopped it (``stopped_by``).
"""

from __future__ import annotations

import functools
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import __version__, plan
from harness.errors import ConfigError, HarnessError, PrerequisiteError, ResumeError
from harness.experiment import preflight, reuse, trialinputs, upstream
from harness.experiment.events import Events, NullEvents
from harness.experiment.library_plan import lock_entries
from harness.experiment.loop import ApiPause, LoopPolicy, TrialLoop, curtailment_check, stop_before_start
from harness.experiment.preflight import BaseOutcome
from harness.experiment.resources import RunResources, RunSetup, run_ttl_s
from harness.experiment.resume import Remaining, SkippedRecords, check_records, check_resumable, plan_remaining
from harness.experiment.upstream import Upstream
from harness.host import gitops, workroots
from harness.host.paths import HostPaths
from harness.host.slots import HostSlots, slot_count
from harness.plan import TrialSpec
from harness.records import Provenance, TrialRecord
from harness.redact import Redactor
from harness.reporting.outputs import AB_OUTPUTS, CALIBRATION_OUTPUTS
from harness.results.attempts import latest_by_trial, spent_usd, stops
from harness.results.identity import RecordIdentity
from harness.results.meta import ExperimentMeta, Mode, read_meta, write_meta
from harness.results.store import ExperimentDir
from harness.sandbox import reaper, uids
from harness.sandbox import roles as sandbox
from harness.sandbox.images import ImageBuilder, ImageOptions, ImageSet
from harness.sandbox.labels import ROLE, RUN, make_labels
from harness.sandbox.runtime import Runtime
from harness.study import basetree, prices, scenario
from harness.study.config import LockBlock, Study
from harness.study.lock import verify_lock
from harness.study.skillname import listed_name
from harness.trial import basetrees, installed, samepatch
from harness.trial.reaper import TrialReaper
from harness.trial.site import RunSite
from harness.trial.trial import StartGate, TrialContext, run_trial
from harness.trial.watchdog import WorkspaceLimit

REAL_UPSTREAM = "https://api.anthropic.com"


@dataclass(frozen=True)
class RunOptions:
    out: Path
    jobs: int
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


@dataclass
class ExperimentResult:
    records: list[TrialRecord]
    planned: tuple[TrialSpec, ...]
    budget_stopped: bool
    experiment_dir: ExperimentDir
    images: ImageSet
    lock_hash: str
    ran: int = 0
    """Trials that ran to a final record in this invocation (resumed and reused ones excluded)."""
    reused: int = 0
    """Baseline trials copied from other experiments in this invocation."""
    early_stopped: bool = False


# ================================================================ the experiment


class Experiment:
    def __init__(
        self,
        study: Study,
        engine: Runtime,
        options: RunOptions,
        events: Events | None = None,
        *,
        trial_runner: Callable[[TrialContext, TrialSpec, int], TrialRecord] = run_trial,
    ) -> None:
        self.study = study
        self.engine = engine
        self.options = options
        self.events: Events = events or NullEvents()
        self.paths = options.paths or HostPaths.from_env(options.env)
        self.stop = threading.Event()
        self.run_id = secrets.token_hex(4)
        self.trial_runner = trial_runner
        self.starts = StartGate(self.stop)
        self._role_users_cache: uids.RoleUsers | None = None
        self._leave_out: tuple[str, ...] = ()
        self.baseline_inputs: reuse.BaselineInputs | None = None
        """What goes into this run's baseline fingerprints, by name (:meth:`_fingerprints`)."""
        """What no tree of the run holds (:meth:`_base_excluded`), decided once the lock is verified."""

    # ----------------------------------------------------------------- control
    def abort(self) -> None:
        """Called from a signal handler: stop starting trials and kill the running containers."""
        self.stop.set()
        threading.Thread(target=self._kill_running, daemon=True).start()

    def _kill_running(self) -> None:
        self.starts.close()  # after this, every container of the run that will ever run is running now
        try:
            for kind, name, labels in self.engine.labelled({RUN: self.run_id}):
                if kind == "container" and labels.get(ROLE) in ("agent", "collect", "verify", "judge"):
                    self.engine.kill(name)
        except HarnessError:
            pass

    @property
    def shard_text(self) -> str | None:
        return str(self.options.shard) if self.options.shard else None

    # ------------------------------------------------- hooks (library experiments override them)
    def plan_specs(self) -> tuple[TrialSpec, ...]:
        """Every planned trial of the experiment (all shards)."""
        ex = self.study.prereg.execution
        specs = plan.plan_trials(self.study.target_tasks(), ex.runs_per_arm, ex.seed)
        return plan.aa_plan(specs) if self.options.aa else specs

    def prompt_template_sha256(self) -> str:
        return plan.prompt_template_sha256()

    def check_reuse(
        self,
        specs: Sequence[TrialSpec],
        latest: Mapping[str, TrialRecord],
        fingerprints: Mapping[str, str],
        provenance: Provenance,
    ) -> None:
        """Checks of the reused baseline that must pass before any container starts (the preflight's
        included); raise to refuse the run. An A/B experiment reuses what it can and runs the rest."""

    def preflight(self, specs: Sequence[TrialSpec], records: Sequence[TrialRecord], provenance: Provenance) -> None:
        """Checks that must pass before any model call (after baseline reuse); raise to refuse the run."""

    def library_copies(self, run_root: Path) -> dict[str, Path]:
        """Controller-owned copies of a library's skills for this run (none for an A/B experiment)."""
        return {}

    def derived_outputs(self) -> tuple[str, ...]:
        """The files this kind of experiment renders from its results (harness.reporting.outputs): removed
        before the run appends its first result line, so none outlives the results it was computed from."""
        return (CALIBRATION_OUTPUTS if self.options.aa else AB_OUTPUTS).files

    # --------------------------------------------------------------------- run
    def run(self) -> ExperimentResult:
        """Run (or resume) the experiment; ``events`` hears ``finished`` however it ends."""
        try:
            return self._run()
        finally:
            self.events.finished()

    def _run(self) -> ExperimentResult:
        ex = self.study.prereg.execution
        lock = verify_lock(self.study, lock_entries)
        lock_hash = lock.sha256
        self._leave_out = self._base_excluded(lock)
        self._check_runtime()
        specs = plan.select_shard(self.plan_specs(), self.options.shard)
        # every input is checked (the scenario too) before the resume state, experiment.json, is written
        compiled = self._compiled_scenario()
        redactor = Redactor([self.options.api_key or "", *self._route().secrets()])
        store = ExperimentDir(self.options.out, redactor, derived=self.derived_outputs())
        with store.exclusive():
            latest = self._resume_state(store, lock_hash)
            self._reap_leftovers()
            images = ImageBuilder(self.engine, self.options.images, on_line=self._build_line).ensure()
            provenance = self._provenance(lock, images)
            fingerprints = self._fingerprints(provenance, images, compiled)
            identity = RecordIdentity.of_run(provenance, shard=self.shard_text, baseline_fingerprints=fingerprints)
            # a reused baseline that cannot serve the plan is refused here, naming why, before any container
            self.check_reuse(specs, latest, fingerprints, provenance)
            base_outcomes = self._preflight(store, images, lock.base_sha)
            if self.study.excluded:  # the preflight's trivial tasks are not planned
                specs = plan.select_shard(self.plan_specs(), self.options.shard)
            self._check_trial_inputs(
                store,
                images,
                compiled,
                {"preflight_skipped": sorted(self.study.excluded), "base_excluded": list(self._leave_out)},
            )
            self._record_baseline_inputs(store)
            if base_outcomes is not None:
                preflight.write_record(store.root, base_outcomes)
            reused = self._reuse(store, specs, latest, identity)
            so_far = store.results.read().records
            self.preflight(specs, so_far, provenance)
            left = plan_remaining(specs, so_far, ex.max_infra_retries)
            self.events.planned(specs, left.finals, spent_usd(so_far))
            note = left.note(len(specs))
            if note:
                self.events.message(note)
            ran = 0
            if left.todo:
                ran = self._run_trials(left, store, images, identity, compiled)
            records = store.results.read().records
        budget_stopped, early_stopped = stops(records)
        return ExperimentResult(
            records,
            specs,
            budget_stopped,
            store,
            images,
            lock_hash,
            ran=ran,
            reused=reused,
            early_stopped=early_stopped,
        )

    def _base_excluded(self, lock: LockBlock) -> tuple[str, ...]:
        """What no tree of this run holds: the lock's ``base_excluded`` and, in a scripted run, the scenario
        file when the base commit's tree holds it (the experiment's own file, given only now)."""
        out = set(lock.base_excluded)
        if self.options.scripted is not None:
            repo = self.study.repo_path
            rel = basetree.relative_to_top(repo, self.options.scripted)
            inside = rel is not None and any(rel == q or rel.startswith(q + "/") for q in out)
            if rel is not None and not inside and basetree.in_base_tree(repo, lock.base_sha, rel):
                out.add(rel)
                self.events.message(f"the scenario {rel} is in the base commit: no trial's tree holds it")
        return tuple(sorted(out))

    def _reap_leftovers(self) -> None:
        """What killed runs left: Docker objects by label, run directories by owner, stale worktrees."""
        self._work_root()  # made and recorded first, so a gc running now already sees it
        reaped = reaper.reap(self.engine, self.paths, own_pid=os.getpid())
        if reaped.objects:
            self.events.message(f"removed {len(reaped.objects)} object(s) left by an earlier, killed run")
        # always: `skilltrial gc` may have swept a killed run's worktrees without this repository at hand
        gitops.prune_worktrees(self.study.repo_path)
        if reaped.trees:
            self.events.message(f"removed {reaped.trees} trial directory tree(s) left by an earlier, killed run")

    def _provenance(self, lock: LockBlock, images: ImageSet) -> Provenance:
        """What every record of this run says it ran on (arms that differ here are not comparable)."""
        ex = self.study.prereg.execution
        return Provenance(
            lock_hash=lock.sha256,
            base_sha=lock.base_sha,
            model=ex.model,
            judge_model=ex.judge_model,
            cli_version=images.claude_code_version,
            image_digest=images.trial_id,
            prompt_template_sha256=self.prompt_template_sha256()
            if ex.delivery == "prompt"
            else installed.prompt_template_sha256(),
            harness_version=__version__,
            delivery=ex.delivery,
            **self._route_provenance(),
        )

    def _check_runtime(self) -> None:
        """``--runtime runsc`` where gVisor is not installed fails here, once, not as N infra errors."""
        wanted = self.options.runtime
        if wanted and wanted not in self.engine.info().runtimes:
            raise PrerequisiteError(
                f"the container runtime {wanted!r} is not registered with this Docker engine",
                hint="install gVisor (runsc) and register it in /etc/docker/daemon.json, then check with "
                "`skilltrial doctor`; or run without --runtime",
            )

    def _build_line(self, line: str) -> None:
        if line.startswith(("building", "no registry")):
            self.events.message(line)

    def _work_root(self) -> Path:
        return workroots.prepare(self.paths)  # so gc finds a killed run's directories under any TMPDIR

    def _resume_state(self, store: ExperimentDir, lock_hash: str) -> dict[str, TrialRecord]:
        try:
            meta = read_meta(store.root)
        except ConfigError as e:
            raise ResumeError(e.message, hint="move the directory aside") from e
        shard = self.shard_text
        mode: Mode = "scripted" if self.options.scripted else "real"
        if meta is not None:
            check_resumable(meta, store.root, lock_hash=lock_hash, shard=shard, mode=mode)
        else:
            write_meta(
                store.root,
                ExperimentMeta.start(
                    lock_hash, preregistration=str(self.study.prereg_path), skill=self.study.prereg.skill,
                    shard=shard, mode=mode, model=self.study.matrix_model,
                ),
            )  # fmt: skip
        report = store.results.read()
        if store.results.repaired:
            self.events.message("repaired a torn last line in results.jsonl (moved aside; earlier lines kept)")
        for number, err in report.bad_lines:
            self.events.message(f"results.jsonl line {number} is unreadable and ignored: {err}")
        check_records(report.records, store.root, lock_hash)
        return latest_by_trial(report.records)

    def _check_trial_inputs(
        self, store: ExperimentDir, images: ImageSet, compiled: bytes | None, extra: Mapping[str, object]
    ) -> None:
        """Refuse to resume a directory started with other trial inputs; record them on the first start."""
        base = self.options.images.trial_base
        current = trialinputs.trial_inputs(
            self.study.prereg.execution,
            images,
            base_image=base,
            base_image_id=self.engine.image_id(base) if base else None,
            scenario=compiled,
            upstream=self.options.upstream,
            runtime=self.options.runtime,
            extra=extra,
        )
        meta = read_meta(store.root)  # written (and checked) by _resume_state
        recorded = meta.trial_inputs if meta is not None else None
        trialinputs.check_resume(store.root, recorded, current)
        # first start, or a directory started before an input was recorded
        if meta is not None and recorded != current:
            write_meta(store.root, meta.model_copy(update={"trial_inputs": {**(recorded or {}), **current}}))

    def _preflight(self, store: ExperimentDir, images: ImageSet, base_sha: str) -> list[BaseOutcome] | None:
        """Each target task's verify at the base commit (cached): stop when one cannot run, leave
        trivial ones out of the plan (``study.excluded``). None when switched off."""
        if not self.options.preflight:
            return None
        work = self._work_root()
        outcomes = preflight.Preflight(
            self.engine,
            self._profile(images),
            repo=self.study.repo_path,
            base_sha=base_sha,
            verify_image_id=images.trial_id,
            run_id=self.run_id,
            work=work,
            # beside the work root, which holds only run directories (swept by owner)
            cache_dir=work.parent / f"{work.name}-preflight-cache",
            timeout_s=self.study.prereg.execution.budgets.verify_timeout_s,
            redactor=store.redactor,
            on_message=self.events.message,
            stop=self.stop,
            leave_out=self._leave_out,
        ).run(self.study.target_tasks())
        ran = [o for o in outcomes if not o.cached]
        if ran:
            self.events.message(
                f"preflight: {len(ran)} task(s) checked at the base commit in {sum(o.seconds for o in ran):.1f} s "
                f"({sum(o.seconds for o in ran) / len(ran):.2f} s per task); {len(outcomes) - len(ran)} from the cache"
            )
        broken = [o for o in outcomes if o.outcome == "cannot_run"]
        if broken:
            preflight.write_record(store.root, outcomes)
            raise preflight.cannot_run_error(broken, self.options.images.trial_base, self._leave_out)
        trivial = {o.task_id: o.reason for o in outcomes if o.outcome == "passes"}
        if trivial:
            self.events.message(
                f"preflight: skipping {len(trivial)} task(s) whose verify_cmd already passes at the base commit: "
                + ", ".join(sorted(trivial))
            )
            self.study.excluded = {**self.study.excluded, **trivial}
            if not self.study.target_tasks():
                raise ConfigError(
                    self.study.prereg_path,
                    "every target task's verify_cmd already passes at the base commit (preflight)",
                    field="target_tasks",
                    hint="check base_ref and the tasks' verify_cmd; see preflight.json in " + str(store.root),
                )
        return outcomes

    # ------------------------------------------------------------ baseline reuse
    def _compiled_scenario(self) -> bytes | None:
        if self.options.scripted is None:
            return None
        sc = scenario.for_model(scenario.load_scenario(self.options.scripted), self.study.prereg.execution.model)
        for warning in scenario.scenario_warnings(sc, skill=self.study.prereg.skill):
            self.events.message(f"warning: {self.options.scripted}: {warning}")
        return scenario.compile_scenario(
            self.options.scripted,
            sc,
            self.study.target_tasks(),
            skill=self.study.prereg.skill,
            listed=listed_name(self.study.skill_dir, self.study.prereg.skill)
            if self.study.prereg.library is None
            else None,
        )

    def _fingerprints(self, provenance: Provenance, images: ImageSet, compiled: bytes | None) -> dict[str, str]:
        views: dict[str, object] = {}
        if compiled is not None:
            scripted = reuse.scripted_views(compiled)
            server = f"scripted:{scripted.global_sha256}"
            views = dict(scripted.tasks)
        else:
            server = self._route().url
        settings = reuse.baseline_settings(
            self.study.prereg.execution,
            provenance=provenance,
            pass_rule=self.study.prereg.decision.pass_rule,
            sidecar_image=images.sidecar_id,
            runtime=self.options.runtime,
            upstream=server,
            base_excluded=self._leave_out,
        )
        tasks = self.study.target_tasks()
        self.baseline_inputs = reuse.BaselineInputs(
            settings, {t.id: reuse.task_parts(t, views.get(t.id)) for t in tasks}
        )
        return {t.id: reuse.baseline_fingerprint(settings, t, views.get(t.id)) for t in tasks}

    def _record_baseline_inputs(self, store: ExperimentDir) -> None:
        """``experiment.json``'s ``baseline_inputs``: what another experiment reads to name why a baseline
        trial of this one cannot stand in for its own."""
        meta = read_meta(store.root)
        recorded = self.baseline_inputs.to_json() if self.baseline_inputs is not None else None
        if meta is not None and meta.baseline_inputs != recorded:
            write_meta(store.root, meta.model_copy(update={"baseline_inputs": recorded}))

    def _reuse(
        self,
        store: ExperimentDir,
        specs: Sequence[TrialSpec],
        latest: Mapping[str, TrialRecord],
        identity: RecordIdentity,
    ) -> int:
        if not self.options.reuse_from:
            return 0
        wanted = {s.trial_id: fp for s in specs if (fp := identity.fingerprint(s)) and s.trial_id not in latest}
        sources = reuse.experiment_dirs(self.options.reuse_from)
        if not wanted or not sources:
            if not sources:
                self.events.message(
                    "baseline reuse: no experiment directory found in "
                    + ", ".join(str(p) for p in self.options.reuse_from)
                )
            return 0
        chosen = reuse.select(wanted, sources, identity.provenance, exclude=store.root, inputs=self.baseline_inputs)
        found = chosen.found
        order = {s.trial_id: i for i, s in enumerate(specs)}
        for trial_id in sorted(found, key=order.__getitem__):
            match = found[trial_id]
            reuse.copy_artifacts(match.record, match.directory, store.root)
            store.results.append(identity.adopt(match.record, str(match.directory)))
        self.events.message(
            f"baseline reuse: {len(found)} of {len(wanted)} baseline trial(s) copied from "
            f"{len({m.directory for m in found.values()})} earlier experiment(s); {len(wanted) - len(found)} to run"
            + (f" (not reused: {chosen.summary(len(wanted))})" if chosen.missed else "")
        )
        return len(found)

    # ------------------------------------------------------------------ the trials
    def _run_trials(
        self, left: Remaining, store: ExperimentDir, images: ImageSet, identity: RecordIdentity, compiled: bytes | None
    ) -> int:
        """Run what is left: set up the run's resources, loop over the trials, tear down. Returns how
        many trials ran to a final record."""
        ex = self.study.prereg.execution
        slots_count = self.options.host_slots or slot_count(
            self.options.env, per_trial_mem=sandbox.trial_memory_limits(ex.resources)
        )
        slots = HostSlots(slots_count, self.paths.slots_dir)
        if self.options.jobs > slots.count:
            self.events.message(f"--jobs {self.options.jobs}: at most {slots.count} trials run at once on this host")
        # An A/A calibration needs every planned trial: what it measures is the rules' rates on full runs.
        early_stop = (
            None if self.options.aa else curtailment_check(self.study, [t.id for t in self.study.target_tasks()])
        )
        policy = LoopPolicy(
            jobs=self.options.jobs,
            max_infra_retries=ex.max_infra_retries,
            total_usd=ex.budgets.total_usd,
            early_stop=early_stop,
        )
        spent = spent_usd(store.results.read().records)
        pause = ApiPause(events=self.events)  # told by the loop and, live, by the trials' gateways
        loop = functools.partial(
            TrialLoop,
            append=store.results.append,
            policy=policy,
            skipped=SkippedRecords(identity),
            prior=left.latest,
            finals=left.finals,
            spent=spent,
            stop=self.stop,
            slots=slots,
            events=self.events,
            pause=pause,
        )
        if stop_before_start(policy, left.finals, spent) is not None:
            # no trial may start, so no run set-up at all: the loop only writes the skipped lines
            return loop(_nothing_starts).run(left.todo).ran
        setup = self._run_setup(images, left.todo, compiled, identity.provenance.base_sha)
        store.redactor.add(setup.key)
        # the reaper is drained (every handed-off teardown done) before the run's own teardown: on every path
        with RunResources(self.engine, setup, store, self.events) as site, TrialReaper(self._cleanup) as reaper:
            context = self._trial_context(site, store, images, identity, reaper, on_api_pause=pause.hold)
            run_one = functools.partial(self.trial_runner, context)
            return loop(run_one).run(left.todo).ran

    def _run_setup(
        self, images: ImageSet, todo: Sequence[TrialSpec], compiled: bytes | None, base_sha: str
    ) -> RunSetup:
        """What the run's resources are made from (nothing exists yet; a missing key stops here)."""
        ex = self.study.prereg.execution
        return RunSetup(
            run_id=self.run_id,
            work_root=self._work_root(),
            labels=make_labels(self.run_id, role="run", ttl_s=run_ttl_s(ex, todo, self.options.jobs)),
            profile=self._profile(images),
            key=self._api_key(),
            key_owner=self._users().sidecar,
            study=self.study,
            route=self._route(),
            scenario=compiled,
            library_copies=self.library_copies,
            base_sha=base_sha,
            workspace_kind=basetrees.kind_from_env(self.options.env),
            base_excluded=self._leave_out,
        )

    def _trial_context(
        self,
        site: RunSite,
        store: ExperimentDir,
        images: ImageSet,
        identity: RecordIdentity,
        reaper: TrialReaper | None = None,
        *,
        on_api_pause: Callable[[float], None] = lambda _seconds: None,
    ) -> TrialContext:
        """Everything every trial of this run shares, the run's resources included."""
        return TrialContext(
            site=site,
            execution=self.study.prereg.execution,
            identity=identity,
            artifacts=store.artifacts,
            redactor=store.redactor,
            stop=self.stop,
            on_phase=self.events.phase,
            workspace_limit=self.options.workspace_limit or WorkspaceLimit.from_env(self.options.env),
            starts=self.starts,
            same_patch=self._same_patch(store, identity.provenance, images),
            skill_name=listed_name(self.study.skill_dir, self.study.prereg.skill),
            reaper=reaper,
            on_api_pause=on_api_pause,
        )

    def _cleanup(self, text: str) -> None:
        self.events.message(f"cleanup: {text}")

    def _same_patch(self, store: ExperimentDir, provenance: Provenance, images: ImageSet) -> samepatch.SamePatch:
        """The run's identical-patch caches, seeded with the verify results already in the directory."""
        same = samepatch.SamePatch(judge_reuse=self.study.prereg.judge.reuse_identical)
        tasks = {t.id: t for t in self.study.target_tasks()}
        timeout_s = self.study.prereg.execution.budgets.verify_timeout_s
        for rec in store.results.read().records:
            task = tasks.get(rec.task_id)
            if task is None or rec.patch is None or rec.verify is None or rec.provenance.of_run() != provenance:
                continue
            key = samepatch.verify_key(task, provenance.base_sha, images.trial, rec.patch.sha256, timeout_s)
            same.verify.seed(key, rec.verify, rec.trial_id)
        return same

    def _route(self) -> upstream.Upstream:
        return self.options.route or upstream.Upstream(url=self.options.upstream)

    def _route_provenance(self) -> dict[str, str]:
        """The route's provenance fields: where the model traffic went (scripted: the scripted model)."""
        table = {"price_table_sha256": prices.table_sha256(prices.effective(self.study.prereg.execution))}
        if self.options.scripted is not None:
            return {"upstream_host": "scripted", "upstream_proxy": "no", **table}
        return {**self._route().provenance(), **table}

    def _users(self) -> uids.RoleUsers:
        """The run's role uids, picked once (trials and preflight run under the same ones)."""
        if self._role_users_cache is None:
            self._role_users_cache = self._role_users()
        return self._role_users_cache

    def _profile(self, images: ImageSet) -> sandbox.Profile:
        """The hardening profile of every container of this run (trials and preflight)."""
        ex = self.study.prereg.execution
        return sandbox.make_profile(ex.resources, images.trial, images.sidecar, self._users(), self.options.runtime)

    def _api_key(self) -> str:
        if self.options.scripted is not None:
            key = self.options.scripted_key or "sk-ant-test-" + secrets.token_urlsafe(24)
            if not key.startswith("sk-ant-test-"):
                raise PrerequisiteError("a scripted run's key must be a fake one starting with sk-ant-test-")
            return key  # a fake key: tests prove it never leaks
        if not self.options.api_key:
            raise PrerequisiteError(
                "ANTHROPIC_API_KEY is not set", hint="export it, or run `make demo` for the offline scripted model"
            )
        return self.options.api_key

    def _role_users(self) -> uids.RoleUsers:
        """uids no host account uses (issue 14): a host process as `nobody` must not read the key."""
        return sandbox.role_users(self.engine, os.getuid(), os.getgid())


def _nothing_starts(spec: TrialSpec, attempt: int) -> TrialRecord:
    raise AssertionError("unreachable: a stop applies before any trial starts")
