"""An experiment: the planned trials of one locked preregistration, run to completion, in two steps.

    admit      the lock against the files as they are now, the key (nothing touched before: no engine,
               no directory)
    prepare    resume state -> gc and sweep -> images -> provenance and baseline fingerprints -> the
               reused baseline's checks -> preflight -> the plan (once) -> trial inputs -> baseline reuse
               chosen -> what is left: a frozen :class:`RunPlan`, with nothing of the directory written
    execute    experiment.json (one write) -> preflight.json -> the reused baseline copied in -> run
               set-up -> trials (concurrent, host-wide slots, bounded infra retries, cumulative budget,
               preregistered early stop) -> run teardown

the shape of cibuildwheel's ``get_build_steps`` (a plan of frozen steps) then ``build``. The run's set-up
and teardown are one context manager (:mod:`harness.experiment.resources`), the scheduling is
:mod:`harness.experiment.loop`, what is left to run is :mod:`harness.experiment.resume`.

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

import contextlib
import dataclasses
import functools
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import __version__, plan
from harness.errors import ConfigError, HarnessError, PrerequisiteError, ResumeError
from harness.experiment import preflight, reuse, trialinputs, upstream
from harness.experiment.events import Events, NullEvents
from harness.experiment.loop import ApiPause, LoopPolicy, TrialLoop, curtailment_check, stop_before_start
from harness.experiment.options import Admission, RunOptions, admit, results_dir
from harness.experiment.placement import Placement, PoolRunner
from harness.experiment.preflight import BaseOutcome
from harness.experiment.resources import StudyResources, StudySetup, run_ttl_s
from harness.experiment.resume import Remaining, SkippedRecords, check_records, check_resumable, plan_remaining
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
from harness.sandbox.engine import Engine, connections_for
from harness.sandbox.engineslots import EngineSlots
from harness.sandbox.images import ImageBuilder, ImageSet
from harness.sandbox.labels import ROLE, RUN, make_labels
from harness.sandbox.pool import EnginePool, Fuse, answers, capacities, connect_for, engine_ref, remember_engines
from harness.sandbox.runtime import Runtime
from harness.study import basetree, prices, scenario
from harness.study.config import LockBlock, Study
from harness.study.lock import copy_skill, locked_version_sha256, skill_files
from harness.study.skillname import listed_name
from harness.trial import basetrees, installed, samepatch
from harness.trial.agents import agent_for
from harness.trial.reaper import TrialReaper
from harness.trial.site import RunSite
from harness.trial.trial import StartGate, TrialContext, run_trial
from harness.trial.watchdog import WorkspaceLimit


@dataclass
class ExperimentResult:
    records: list[TrialRecord]
    planned: tuple[TrialSpec, ...]
    budget_stopped: bool
    experiment_dir: ExperimentDir
    images: ImageSet
    lock_hash: str
    study: Study
    """The study as run: the preflight's trivial tasks left out (``study.excluded``, which the reports name)."""
    ran: int = 0
    """Trials that ran to a final record in this invocation (resumed and reused ones excluded)."""
    reused: int = 0
    """Baseline trials copied from other experiments in this invocation."""
    early_stopped: bool = False


@dataclass(frozen=True)
class RunPlan:
    """Everything decided before the first trial (:meth:`Experiment.prepare`), which :meth:`Experiment.execute`
    carries out: nothing here is decided again, and nothing of the experiment directory is written before."""

    study: Study
    """The study as run: the preflight's trivial tasks left out (``study.excluded``)."""
    specs: tuple[TrialSpec, ...]
    """This shard's planned trials, made once (after the preflight)."""
    images: ImageSet
    identity: RecordIdentity
    """What every record says it belongs to and ran on: provenance, baseline fingerprints, shard."""
    key: str
    scenario: bytes | None
    """A scripted run's compiled scenario."""
    meta: ExperimentMeta | None
    """experiment.json as this start leaves it (started, its trial and baseline inputs); None: as it is."""
    preflight: tuple[BaseOutcome, ...] | None
    """Each task's verify at the base commit (None: switched off), for preflight.json."""
    reused: tuple[reuse.Match, ...]
    """Baseline trials of other experiments that stand in for this one's, adopted into it (their copies, and
    the directories their artifacts are copied from), in plan order."""
    reuse_note: str | None
    """What baseline reuse found, and why the rest was not reused."""
    records: tuple[TrialRecord, ...]
    """What the directory holds (read once), then the reused copies: what the loop starts from."""
    remaining: Remaining


# ================================================================ the experiment


class Experiment:
    def __init__(
        self,
        study: Study,
        engine: Runtime | None,
        options: RunOptions,
        events: Events | None = None,
        *,
        trial_runner: Callable[[TrialContext, TrialSpec, int], TrialRecord] = run_trial,
    ) -> None:
        """``engine``: the runtime to run on; None: the Docker engine ``options.env`` names, made once the
        study is admitted (:func:`admit`), so nothing touches an engine before the lock and key hold."""
        self.study = study
        self._engine = engine
        self.options = options
        self.events: Events = events or NullEvents()
        self.paths = options.paths or HostPaths.from_env(options.env)
        self.stop = threading.Event()
        self.run_id = secrets.token_hex(4)
        self.trial_runner = trial_runner
        self.starts = StartGate(self.stop)
        self._role_users_cache: uids.RoleUsers | None = None
        self._leave_out: tuple[str, ...] = ()
        """What no tree of the run holds (:meth:`_base_excluded`), decided once the lock is verified."""
        self._pool: EnginePool | None = None
        """``options.engines``, opened with the engine (:attr:`engine` is its reference)."""

    @property
    def engine(self) -> Runtime:
        """The engine images are built on and the preflight runs on: the one engine, or a pool's reference."""
        if self._engine is None:
            if self.options.engines:
                self._pool = self._open_pool()
                self._engine = self._pool.reference.runtime
            else:
                self._engine = Engine(self.options.env, max_connections=connections_for(self.options.jobs))
                self.events.message(f"engine: {self._engine.endpoint().describe()}")
        return self._engine

    def _open_pool(self) -> EnginePool:
        jobs = self.options.jobs or 32
        remember_engines(self.options.engines, self.paths.engines)  # before any object: gc reaches them all
        pool = EnginePool.open(self.options.engines, connect=connect_for(connections_for(jobs)))
        try:
            pool.check_distinct()
        except BaseException:
            pool.close()
            raise
        for e in pool:
            self.events.message(f"engine {e.name}: {e.runtime.endpoint().describe()}")
        return pool

    def _engines(self) -> list[Runtime]:
        """Every engine the run uses (the pool's, or the one)."""
        if self._pool is not None:
            return [e.runtime for e in self._pool]
        return [self._engine] if self._engine is not None else []

    # ----------------------------------------------------------------- control
    def abort(self) -> None:
        """Called from a signal handler: stop starting trials and kill the running containers."""
        self.stop.set()
        threading.Thread(target=self._kill_running, daemon=True).start()

    def _kill_running(self) -> None:
        self.starts.close()  # after this, every container of the run that will ever run is running now
        for engine in self._engines():  # none before there is an engine: nothing runs before
            try:
                for kind, name, labels in engine.labelled({RUN: self.run_id}):
                    if kind == "container" and labels.get(ROLE) in ("agent", "collect", "verify", "judge"):
                        engine.kill(name)
            except HarnessError:
                pass

    @property
    def shard_text(self) -> str | None:
        return str(self.options.shard) if self.options.shard else None

    # ------------------------------------------------- hooks (library experiments override them)
    def plan_specs(self, study: Study | None = None) -> tuple[TrialSpec, ...]:
        """Every planned trial of ``study`` (default: the study as preregistered), all shards."""
        study = study or self.study
        ex = study.prereg.execution
        specs = plan.plan_trials(study.target_tasks(), ex.runs_per_arm, ex.seed)
        version = study.baseline_version
        if version is not None:  # version against version: the baseline carries its version (arms.baseline)
            specs = tuple(dataclasses.replace(s, baseline_version=version) if s.arm == "baseline" else s for s in specs)
        selection = study.prereg.selection
        if selection is not None:  # a confirmation: the skill arm gets the whole selected set, as a masked arm would
            chosen = plan.ordered_skills(selection.skills)
            specs = tuple(
                dataclasses.replace(s, treatment="masked", skills=chosen) if s.arm == "skill" else s for s in specs
            )
        return plan.aa_plan(specs) if self.options.aa else specs

    def out_name(self) -> str:
        """The first part of the default experiment directory's name (:func:`results_dir`)."""
        return f"calibration-{self.study.prereg.skill}" if self.options.aa else self.study.prereg.skill

    def prompt_template_sha256(self) -> str:
        return (
            plan.library_template_sha256() if self.study.prereg.selection is not None else plan.prompt_template_sha256()
        )

    def check_reuse(
        self,
        specs: Sequence[TrialSpec],
        latest: Mapping[str, TrialRecord],
        identity: RecordIdentity,
        inputs: reuse.BaselineInputs,
    ) -> None:
        """Checks of the reused baseline that must pass before any container starts (the preflight's
        included); raise to refuse the run. An A/B experiment reuses what it can and runs the rest."""

    def preflight(self, specs: Sequence[TrialSpec], records: Sequence[TrialRecord], provenance: Provenance) -> None:
        """Checks that must pass before any model call (after baseline reuse); raise to refuse the run."""

    def library_copies(self, run_root: Path) -> dict[str, Path]:
        """Controller-owned copies of a library's skills for this run: a confirmation's selected set, copied from
        the run's checked copy of the library (``run_root/skill``, made and checked against the lock first);
        none for an A/B experiment."""
        selection = self.study.prereg.selection
        if selection is None:
            return {}
        checked = run_root / "skill"
        return {n: copy_skill(skill_files(checked / n), run_root / "library" / n) for n in selection.skills}

    def derived_outputs(self) -> tuple[str, ...]:
        """The files this kind of experiment renders from its results (harness.reporting.outputs): removed
        before the run appends its first result line, so none outlives the results it was computed from."""
        return (CALIBRATION_OUTPUTS if self.options.aa else AB_OUTPUTS).files

    # --------------------------------------------------------------------- run
    def run(self) -> ExperimentResult:
        """Run (or resume) the experiment; ``events`` hears ``finished`` however it ends."""
        try:
            admitted = admit(self.study, self.options)  # the one check of lock and key, before anything else
            self._leave_out = self._base_excluded(admitted.lock)
            self._check_runtime()
            scenario = self._compiled_scenario()  # checked before anything of the directory is read or written
            redactor = Redactor([admitted.key, *self._route().secrets()])
            store = ExperimentDir(self.out_dir(admitted.lock.sha256), redactor, derived=self.derived_outputs())
            with store.exclusive():
                return self.execute(self.prepare(store, admitted, scenario), store)
        finally:
            if self._pool is not None:
                self._pool.close()
            self.events.finished()

    def out_dir(self, lock_hash: str) -> Path:
        """Where the results go: ``--out``, else ``harness-results/<name>-<lock12>[-shard<i>of<n>]``."""
        return self.options.out or results_dir(self.out_name(), lock_hash, self.options.shard)

    def prepare(self, store: ExperimentDir, admitted: Admission, scenario: bytes | None) -> RunPlan:
        """Everything decided before the first trial, in one frozen :class:`RunPlan`: what the directory holds
        (read once), the images, the provenance and fingerprints, the preflight and the plan it leaves (made
        once), the trial inputs, the reused baseline and what is left. It refuses what cannot run (a reused
        baseline that cannot serve the plan, before any container; a task that cannot run at the base commit;
        other trial inputs than the directory's) and writes nothing of the directory but the preflight's record
        of a refusal."""
        ex = self.study.prereg.execution
        if ex.agent != "claude-code" and self.options.scripted is None:
            raise ConfigError(
                self.study.prereg_path,
                f"execution.agent {ex.agent!r} runs offline only (--scripted): its real-API mode is not built yet",
                field="execution.agent",
            )
        existing, records = self._resume_state(store, admitted.lock.sha256)
        self._reap_leftovers()
        builder = ImageBuilder(self.engine, self.options.images, on_line=self._build_line)
        images = builder.ensure()
        if ex.agent == "codex":  # the agent's own image beside the trial image (verify and judge run in that one)
            images = dataclasses.replace(images, codex=builder.ensure_codex(images))
        self._pool_images(images)
        provenance = self._provenance(admitted.lock, images)
        inputs, fingerprints = self._baseline_inputs(provenance, images, scenario)
        identity = RecordIdentity.of_run(provenance, shard=self.shard_text, baseline_fingerprints=fingerprints)
        latest = latest_by_trial(records)
        # a reused baseline that cannot serve the plan is refused here, naming why, before any container
        self.check_reuse(plan.select_shard(self.plan_specs(), self.options.shard), latest, identity, inputs)
        outcomes = self._preflight(store, images, admitted.lock.base_sha)
        study = self.study.excluding(self._trivial(outcomes or (), store))
        specs = plan.select_shard(self.plan_specs(study), self.options.shard)
        skipped = {"preflight_skipped": sorted(study.excluded), "base_excluded": list(self._leave_out)}
        meta = self._meta(store, existing, admitted.lock.sha256, self._trial_inputs(images, scenario, skipped), inputs)
        found, reuse_note = self._reuse(store, specs, latest, identity, inputs)
        reused = tuple(reuse.Match(identity.adopt(m.record, str(m.directory)), m.directory) for m in found)
        so_far = (*records, *(m.record for m in reused))
        self.preflight(specs, so_far, provenance)
        return RunPlan(
            study=study,
            specs=specs,
            images=images,
            identity=identity,
            key=admitted.key,
            scenario=scenario,
            meta=meta,
            preflight=None if outcomes is None else tuple(outcomes),
            reused=reused,
            reuse_note=reuse_note,
            records=so_far,
            remaining=plan_remaining(specs, so_far, ex.max_infra_retries),
        )

    def execute(self, run: RunPlan, store: ExperimentDir) -> ExperimentResult:
        """Carry out ``run``: record what was decided (experiment.json, preflight.json, the reused baseline's
        copies), then run what is left; the result is read back from the directory."""
        if run.meta is not None:
            write_meta(store.root, run.meta)  # the one write of experiment.json
        if run.preflight is not None:
            preflight.write_record(store.root, run.preflight)
        for match in run.reused:
            reuse.copy_artifacts(match.record, match.directory, store.root)
            store.results.append(match.record)
        if run.reuse_note is not None:
            self.events.message(run.reuse_note)
        left = run.remaining
        self.events.planned(run.specs, left.finals, spent_usd(run.records))
        note = left.note(len(run.specs))
        if note:
            self.events.message(note)
        ran = self._run_trials(run, store) if left.todo else 0
        records = store.results.read().records
        budget_stopped, early_stopped = stops(records)
        return ExperimentResult(
            records,
            run.specs,
            budget_stopped,
            store,
            run.images,
            run.identity.provenance.lock_hash,
            run.study,
            ran=ran,
            reused=len(run.reused),
            early_stopped=early_stopped,
        )

    def _pool_images(self, images: ImageSet) -> None:
        """A pool's engines hold the reference's image ids (copied when missing); an engine holding a tag as
        another image is dropped from the run, saying why (provenance compares image ids)."""
        if self._pool is None:
            return
        refs = [images.base, images.runtime, images.sidecar, images.trial]
        done = self._pool.prepare_images(refs + ([images.codex.tag] if images.codex is not None else []))
        for synced in done.synced:
            if synced.copied:
                self.events.message(f"engine {synced.engine}: copied {len(synced.copied)} image(s) from the reference")
        for name, error in done.refused.items():
            self.events.message(f"engine {name} is left out of this run: {error}")

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
            cli_version=images.codex.codex_version if images.codex is not None else images.claude_code_version,
            image_digest=images.codex.image_id if images.codex is not None else images.trial_id,
            prompt_template_sha256=self.prompt_template_sha256()
            if ex.delivery == "prompt"
            else installed.prompt_template_sha256(),
            harness_version=__version__,
            delivery=ex.delivery,
            **agent_for(ex.agent).provenance(),
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

    def _resume_state(
        self, store: ExperimentDir, lock_hash: str
    ) -> tuple[ExperimentMeta | None, tuple[TrialRecord, ...]]:
        """What the directory holds (read once): its description (checked: this lock, shard and mode) and its
        result lines (every one of this lock). None and nothing for a directory not started yet."""
        try:
            meta = read_meta(store.root)
        except ConfigError as e:
            raise ResumeError(e.message, hint="move the directory aside") from e
        if meta is not None:
            check_resumable(meta, store.root, lock_hash=lock_hash, shard=self.shard_text, mode=self._mode())
        report = store.results.read()
        if store.results.repaired:
            self.events.message("repaired a torn last line in results.jsonl (moved aside; earlier lines kept)")
        for number, err in report.bad_lines:
            self.events.message(f"results.jsonl line {number} is unreadable and ignored: {err}")
        check_records(report.records, store.root, lock_hash)
        return meta, tuple(report.records)

    def _mode(self) -> Mode:
        return "scripted" if self.options.scripted else "real"

    def _meta(
        self,
        store: ExperimentDir,
        existing: ExperimentMeta | None,
        lock_hash: str,
        current: Mapping[str, object],
        inputs: reuse.BaselineInputs,
    ) -> ExperimentMeta | None:
        """experiment.json as this start leaves it (None: as it is). A directory started with other trial
        inputs is refused (its trials would be mixed with these); the first start records them, and a directory
        started before an input was recorded gets it. The baseline inputs are this start's: what another
        experiment reads to name why a baseline trial of this one cannot stand in for its own."""
        meta = existing or ExperimentMeta.start(
            lock_hash, preregistration=str(self.study.prereg_path), skill=self.study.prereg.skill,
            shard=self.shard_text, mode=self._mode(), model=self.study.matrix_model,
        )  # fmt: skip
        recorded = meta.trial_inputs
        trialinputs.check_resume(store.root, recorded, current)
        if recorded != current:
            meta = meta.model_copy(update={"trial_inputs": {**(recorded or {}), **current}})
        if meta.baseline_inputs != inputs.to_json():
            meta = meta.model_copy(update={"baseline_inputs": inputs.to_json()})
        return None if meta == existing else meta

    def _trial_inputs(self, images: ImageSet, scenario: bytes | None, extra: Mapping[str, object]) -> dict[str, object]:
        """What goes into every trial besides the lock (:mod:`harness.experiment.trialinputs`)."""
        base = self.options.images.trial_base
        return trialinputs.trial_inputs(
            self.study.prereg.execution,
            images,
            base_image=base,
            base_image_id=self.engine.image_id(base) if base else None,
            scenario=scenario,
            upstream=self.options.upstream,
            runtime=self.options.runtime,
            extra=extra,
        )

    def _preflight(self, store: ExperimentDir, images: ImageSet, base_sha: str) -> list[BaseOutcome] | None:
        """Each target task's verify at the base commit (cached): stop when one cannot run (its record is
        written, for the refusal's reader). None when switched off."""
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
        return outcomes

    def _trivial(self, outcomes: Sequence[BaseOutcome], store: ExperimentDir) -> dict[str, str]:
        """The preflight's trivial tasks (their verify passes at the base commit), left out of the plan: task id
        -> why. Every target task trivial is a refusal."""
        trivial = {o.task_id: o.reason for o in outcomes if o.outcome == "passes"}
        if not trivial:
            return {}
        self.events.message(
            f"preflight: skipping {len(trivial)} task(s) whose verify_cmd already passes at the base commit: "
            + ", ".join(sorted(trivial))
        )
        if not self.study.excluding(trivial).target_tasks():
            raise ConfigError(
                self.study.prereg_path,
                "every target task's verify_cmd already passes at the base commit (preflight)",
                field="target_tasks",
                hint="check base_ref and the tasks' verify_cmd; see preflight.json in " + str(store.root),
            )
        return trivial

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

    def _baseline_inputs(
        self, provenance: Provenance, images: ImageSet, scenario: bytes | None
    ) -> tuple[reuse.BaselineInputs, dict[str, str]]:
        """What goes into this run's baseline fingerprints, by name, and each target task's fingerprint."""
        views: dict[str, object] = {}
        if scenario is not None:
            scripted = reuse.scripted_views(scenario)
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
        version = self.study.baseline_version
        if version is not None:  # a baseline carrying a version is never a bare baseline, nor another version's
            settings = {**settings, "baseline_version": locked_version_sha256(self.study, version)}
        tasks = self.study.target_tasks()
        inputs = reuse.BaselineInputs(settings, {t.id: reuse.task_parts(t, views.get(t.id)) for t in tasks})
        return inputs, {t.id: reuse.baseline_fingerprint(settings, t, views.get(t.id)) for t in tasks}

    def _reuse(
        self,
        store: ExperimentDir,
        specs: Sequence[TrialSpec],
        latest: Mapping[str, TrialRecord],
        identity: RecordIdentity,
        inputs: reuse.BaselineInputs | None = None,
    ) -> tuple[tuple[reuse.Match, ...], str | None]:
        """The baseline trials of ``--reuse-baseline-from`` that stand in for this plan's (in plan order), and
        the line that says what was found and why the rest was not."""
        if not self.options.reuse_from:
            return (), None
        wanted = {s.trial_id: fp for s in specs if (fp := identity.fingerprint(s)) and s.trial_id not in latest}
        sources = reuse.experiment_dirs(self.options.reuse_from)
        if not sources:
            where = ", ".join(str(p) for p in self.options.reuse_from)
            return (), f"baseline reuse: no experiment directory found in {where}"
        if not wanted:
            return (), None
        chosen = reuse.select(wanted, sources, identity.provenance, exclude=store.root, inputs=inputs)
        found = chosen.found
        order = {s.trial_id: i for i, s in enumerate(specs)}
        matches = tuple(found[t] for t in sorted(found, key=order.__getitem__))
        return matches, (
            f"baseline reuse: {len(found)} of {len(wanted)} baseline trial(s) copied from "
            f"{len({m.directory for m in found.values()})} earlier experiment(s); {len(wanted) - len(found)} to run"
            + (f" (not reused: {chosen.summary(len(wanted))})" if chosen.missed else "")
        )

    # ------------------------------------------------------------------ the trials
    def _run_trials(self, run: RunPlan, store: ExperimentDir) -> int:
        """Run what is left: set up the run's resources, loop over the trials, tear down. Returns how
        many trials ran to a final record."""
        ex, left = run.study.prereg.execution, run.remaining
        placement = self._placement(run) if self._pool is not None else None
        slots: HostSlots | None = None
        jobs = self.options.jobs
        if placement is not None:  # each engine holds its own capacity; the host's slots are this machine's
            jobs = min(jobs, placement.total) if jobs > 0 else placement.total
        else:
            slots_count = self.options.host_slots or slot_count(
                self.options.env, per_trial_mem=sandbox.trial_memory_limits(ex.resources)
            )
            slots = HostSlots(slots_count, self.paths.slots_dir)
            if jobs > slots.count:
                self.events.message(f"--jobs {jobs}: at most {slots.count} trials run at once on this host")
        # An A/A calibration needs every planned trial: what it measures is the rules' rates on full runs.
        early_stop = None if self.options.aa else curtailment_check(run.study, [t.id for t in run.study.target_tasks()])
        policy = LoopPolicy(
            jobs=jobs,
            max_infra_retries=ex.max_infra_retries,
            total_usd=ex.budgets.total_usd,
            early_stop=early_stop,
        )
        spent = spent_usd(run.records)
        pause = ApiPause(events=self.events)  # told by the loop and, live, by the trials' gateways
        loop = functools.partial(
            TrialLoop,
            append=store.results.append,
            policy=policy,
            skipped=SkippedRecords(run.identity),
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
        if placement is not None:
            return self._run_on_pool(run, store, placement, loop, pause.hold)
        # the reaper is drained (every handed-off teardown done) before the run's own teardown: on every path
        with (
            StudyResources(self.engine, self._run_setup(run), store, self.events.message) as site,
            TrialReaper(self._cleanup) as reaper,
        ):
            context = self._trial_context(site, store, run, reaper, on_api_pause=pause.hold)
            return loop(functools.partial(self.trial_runner, context)).run(left.todo).ran

    def _placement(self, run: RunPlan) -> Placement:
        """Each engine's capacity (the one capacity model per engine, or ``--engine-slots``), said once."""
        assert self._pool is not None
        limits = sandbox.trial_memory_limits(run.study.prereg.execution.resources)
        found = capacities(self._pool, trial_limits_bytes=limits, by_hand=self.options.engine_slots)
        for name, cap in found.items():
            self.events.message(f"engine {name}: {cap.trials} trial(s) at once ({cap.why})")
        return Placement({name: cap.trials for name, cap in found.items()}, self.stop)

    def _run_on_pool(
        self,
        run: RunPlan,
        store: ExperimentDir,
        placement: Placement,
        loop: Callable[[Callable[[TrialSpec, int], TrialRecord]], TrialLoop],
        on_api_pause: Callable[[float], None],
    ) -> int:
        """Every engine of the pool set up as a run of its own (its key volume, skill copies, scenario, base
        trees, upstream network, scripted model), under the run's one id; the trials placed over them, both arms
        of a pair on one engine; each engine torn down on every path."""
        assert self._pool is not None
        setup = self._run_setup(run)
        fuses = {e.name: Fuse(e.runtime, e.name) for e in self._pool}
        with contextlib.ExitStack() as stack:  # left in reverse: the reaper drained before any engine's teardown
            sites = {}
            for i, engine in enumerate(self._pool):
                each = dataclasses.replace(setup, root_name=setup.run_id if i == 0 else f"{setup.run_id}-{i}")
                resources = StudyResources(fuses[engine.name].runtime, each, store, self.events.message)
                sites[engine.name] = stack.enter_context(resources)
            reaper = stack.enter_context(TrialReaper(self._cleanup))
            runners = {
                name: functools.partial(
                    self.trial_runner, self._trial_context(site, store, run, reaper, on_api_pause=on_api_pause)
                )
                for name, site in sites.items()
            }
            shared = {
                name: EngineSlots(fuses[name].runtime, placement.capacities[name], run_id=self.run_id, stop=self.stop)
                for name in sites
            }
            ex = run.study.prereg.execution
            refs = {e.name: engine_ref(e, self.options.runtime) for e in self._pool}
            engines = {e.name: e.runtime for e in self._pool}
            runner = PoolRunner(
                placement,
                runners,
                refs,
                probe=lambda name: answers(engines[name]),
                on_down=lambda name: fuses[name].blow(),
                slots=shared,
                ttl_s=lambda spec: ex.trial_deadlines_s(spec.task) + 600,
                say=self.events.message,
            )
            trials = loop(runner)
            runner.attach(trials.append, trials.resubmit)
            try:
                return trials.run(run.remaining.todo).ran
            finally:
                runner.close()

    def _run_setup(self, run: RunPlan) -> StudySetup:
        """What the run's resources are made from (nothing exists yet)."""
        ex = run.study.prereg.execution
        return StudySetup(
            run_id=self.run_id,
            work_root=self._work_root(),
            labels=make_labels(self.run_id, role="run", ttl_s=run_ttl_s(ex, run.remaining.todo, self.options.jobs)),
            profile=self._profile(run.images),
            key=run.key,
            key_owner=self._users().sidecar,
            study=run.study,
            route=self._route(),
            scenario=run.scenario,
            skill_copies=self.library_copies,
            gateway_env={**prices.gateway_env(prices.effective(ex)), **agent_for(ex.agent).gateway_env()},
            base_sha=run.identity.provenance.base_sha,
            workspace_kind=basetrees.kind_from_env(self.options.env),
            base_excluded=self._leave_out,
        )

    def _trial_context(
        self,
        site: RunSite,
        store: ExperimentDir,
        run: RunPlan,
        reaper: TrialReaper | None = None,
        *,
        on_api_pause: Callable[[float], None] = lambda _seconds: None,
    ) -> TrialContext:
        """Everything every trial of this run shares, the run's resources included."""
        ex = run.study.prereg.execution
        return TrialContext(
            site=site,
            execution=ex,
            identity=run.identity,
            artifacts=store.artifacts,
            redactor=store.redactor,
            stop=self.stop,
            on_phase=self.events.phase,
            workspace_limit=self.options.workspace_limit or WorkspaceLimit.from_env(self.options.env),
            starts=self.starts,
            same_patch=samepatch.SamePatch.seeded(
                run.records,
                run.study.target_tasks(),
                run.identity.provenance,
                verify_image=run.images.trial,
                verify_timeout_s=ex.budgets.verify_timeout_s,
                judge_reuse=run.study.prereg.judge.reuse_identical,
            ),
            skill_name=listed_name(run.study.skill_dir, run.study.prereg.skill),
            reaper=reaper,
            on_api_pause=on_api_pause,
        )

    def _cleanup(self, text: str) -> None:
        self.events.message(f"cleanup: {text}")

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
        profile = sandbox.make_profile(ex.resources, images.trial, images.sidecar, self._users(), self.options.runtime)
        return profile if images.codex is None else dataclasses.replace(profile, codex_image=images.codex.tag)

    def _role_users(self) -> uids.RoleUsers:
        """uids no host account uses (issue 14): a host process as `nobody` must not read the key."""
        return sandbox.role_users(self.engine, os.getuid(), os.getgid())


def _nothing_starts(spec: TrialSpec, attempt: int) -> TrialRecord:
    raise AssertionError("unreachable: a stop applies before any trial starts")
