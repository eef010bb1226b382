"""An experiment: the planned trials of one locked preregistration, run to completion.

    lock check -> plan -> resume state -> gc -> images -> run setup
      -> trials (concurrent, host-wide slots, bounded infra retries, cumulative budget)
      -> run teardown

Crash safety: every attempt is appended to ``results.jsonl`` the moment it
ends, so killing the controller (SIGKILL included) loses at most the trials
that were running; rerunning the same command (or ``--resume``) runs only what
is missing. A different lock hash refuses to resume into the same directory.
Objects a killed controller left behind are reaped by label on the next start.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from harness import __version__, plan, sandbox, scenario
from harness.config import Study
from harness.engine import Engine, Limits, parse_size
from harness.errors import HarnessError, Interrupted, PrerequisiteError, ResumeError
from harness.gateway import wait_listening
from harness.hostslots import HostSlots, default_slots
from harness.images import ImageBuilder, ImageOptions, ImageSet
from harness.labels import RUN, make_labels
from harness.lock import skill_files, verify_lock
from harness.plan import TrialSpec
from harness.records import Provenance, TrialRecord
from harness.redact import Redactor
from harness.retry import backoff_seconds
from harness.store import ExperimentDir
from harness.trial import TrialContext, run_trial
from harness.workspace import container_user, copy_skill

REAL_UPSTREAM = "https://api.anthropic.com"


@dataclass(frozen=True)
class RunOptions:
    out: Path
    jobs: int
    scripted: Path | None = None
    """A scenario file: run against the scripted Messages API (offline, no key)."""
    api_key: str | None = None
    upstream: str = REAL_UPSTREAM
    shard: tuple[int, int] | None = None
    runtime: str | None = None
    images: ImageOptions = field(default_factory=ImageOptions)
    host_slots: int | None = None
    work_root: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)


class Events:
    """What the experiment reports while it runs (the progress display implements this)."""

    def planned(self, specs: Sequence[TrialSpec], done: Sequence[TrialRecord]) -> None: ...
    def message(self, text: str) -> None: ...
    def trial_started(self, spec: TrialSpec, attempt: int) -> None: ...
    def phase(self, trial_id: str, phase: str) -> None: ...
    def trial_finished(self, spec: TrialSpec, record: TrialRecord, spent_usd: float) -> None: ...


@dataclass
class ExperimentResult:
    records: list[TrialRecord]
    planned: tuple[TrialSpec, ...]
    budget_stopped: bool
    experiment_dir: ExperimentDir
    images: ImageSet
    lock_hash: str
    ran: int = 0
    reused: int = 0


def latest_by_trial(records: Sequence[TrialRecord]) -> dict[str, TrialRecord]:
    latest: dict[str, TrialRecord] = {}
    for r in records:
        if r.trial_id not in latest or r.attempt >= latest[r.trial_id].attempt:
            latest[r.trial_id] = r
    return latest


def is_final(record: TrialRecord, max_retries: int) -> bool:
    """A trial is done when its last attempt is not an infra failure, or retries are used up."""
    return record.status != "infra_error" or record.attempt > max_retries


class Experiment:
    def __init__(self, study: Study, engine: Engine, options: RunOptions, events: Events | None = None) -> None:
        self.study = study
        self.engine = engine
        self.options = options
        self.events = events or Events()
        self.stop = threading.Event()
        self.run_id = secrets.token_hex(4)
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- control
    def abort(self) -> None:
        """Called from a signal handler: stop starting trials and kill the running containers."""
        self.stop.set()
        threading.Thread(target=self._kill_running, daemon=True).start()

    def _kill_running(self) -> None:
        try:
            for kind, name, labels in self.engine.labelled({RUN: self.run_id}):
                if kind == "container" and labels.get("harness.role") in ("agent", "collect", "verify", "judge"):
                    self.engine.kill(name)
        except HarnessError:
            pass

    # --------------------------------------------------------------------- run
    def run(self) -> ExperimentResult:
        ex = self.study.prereg.execution
        lock_hash = verify_lock(self.study)
        assert self.study.prereg.lock is not None
        specs = plan.select_shard(
            plan.plan_trials(self.study.target_tasks(), ex.runs_per_arm, ex.seed), self.options.shard
        )
        redactor = Redactor([self.options.api_key or ""])
        store = ExperimentDir(self.options.out, redactor)
        with store.exclusive():
            done = self._resume_state(store, lock_hash)
            self.events.planned(specs, list(done.values()))
            reaped = self.engine.gc(own_pid=os.getpid())
            if reaped:
                self.events.message(f"removed {len(reaped)} object(s) left by an earlier, killed run")
            images = ImageBuilder(self.engine, self.options.images, on_line=self._build_line).ensure()
            todo = [s for s in specs if s.trial_id not in done or not is_final(done[s.trial_id], ex.max_infra_retries)]
            budget_stopped = False
            ran = 0
            if todo:
                budget_stopped, ran = self._run_trials(todo, done, store, images, lock_hash)
            else:
                budget_stopped = any(r.status == "skipped" for r in done.values())
            records = store.results.read().records
        return ExperimentResult(records, specs, budget_stopped, store, images, lock_hash, ran=ran)

    def _build_line(self, line: str) -> None:
        if line.startswith(("building", "no registry")):
            self.events.message(line)

    def _resume_state(self, store: ExperimentDir, lock_hash: str) -> dict[str, TrialRecord]:
        meta = store.read_meta()
        shard = f"{self.options.shard[0]}/{self.options.shard[1]}" if self.options.shard else None
        if meta is not None:
            if meta.get("lock_hash") != lock_hash:
                raise ResumeError(
                    f"{store.root} holds experiment {str(meta.get('lock_hash'))[:12]}, "
                    f"not this preregistration's lock {lock_hash[:12]}",
                    hint="a changed preregistration is a new experiment: use another --out directory",
                )
            if meta.get("shard") != shard:
                raise ResumeError(f"{store.root} was run as shard {meta.get('shard')}, not {shard}")
        else:
            store.write_meta(
                {
                    "lock_hash": lock_hash,
                    "experiment_id": lock_hash[:12],
                    "preregistration": str(self.study.prereg_path),
                    "skill": self.study.prereg.skill,
                    "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "shard": shard,
                    "mode": "scripted" if self.options.scripted else "real",
                    "harness_version": __version__,
                }
            )
        report = store.results.read()
        if store.results.repaired:
            self.events.message("repaired a torn last line in results.jsonl (moved aside; earlier lines kept)")
        for number, err in report.bad_lines:
            self.events.message(f"results.jsonl line {number} is unreadable and ignored: {err}")
        foreign = [r for r in report.records if r.provenance.lock_hash != lock_hash]
        if foreign:
            raise ResumeError(f"{store.root}/results.jsonl holds {len(foreign)} line(s) of another lock")
        return latest_by_trial(report.records)

    # ----------------------------------------------------------- run resources
    def _run_trials(
        self,
        todo: list[TrialSpec],
        done: dict[str, TrialRecord],
        store: ExperimentDir,
        images: ImageSet,
        lock_hash: str,
    ) -> tuple[bool, int]:
        ex = self.study.prereg.execution
        lock = self.study.prereg.lock
        assert lock is not None
        work = self.options.work_root or Path(tempfile.gettempdir()) / f"harness-{os.getuid()}"
        work.mkdir(mode=0o700, parents=True, exist_ok=True)
        run_root = work / self.run_id
        run_root.mkdir(mode=0o700)
        upstream_net = f"hx-{self.run_id}-up"
        run_labels = make_labels(self.run_id, role="run", ttl_s=self._run_ttl(len(todo)))
        uid, gid = container_user()
        sidecar_uid = (65534, 65534) if os.getuid() == 0 else (uid, gid)
        profile = sandbox.Profile(
            trial_image=images.trial,
            sidecar_image=images.sidecar,
            limits=Limits(
                memory=ex.resources.memory,
                cpus=ex.resources.cpus,
                pids=ex.resources.pids,
                nofile=ex.resources.nofile,
                fsize_bytes=parse_size(ex.resources.max_file_size),
                tmpfs_size=ex.resources.tmpfs_size,
            ),
            user=f"{uid}:{gid}",
            sidecar_user=f"{sidecar_uid[0]}:{sidecar_uid[1]}",
            runtime=self.options.runtime,
        )
        scripted_name = f"hx-{self.run_id}-scripted"
        try:
            api_key = self._api_key()
            key_file = self._write_key(run_root, api_key, sidecar_uid)
            skill_copy = copy_skill(skill_files(self.study.skill_dir), run_root / "skill")
            self.engine.create_network(upstream_net, run_labels, internal=self.options.scripted is not None)
            upstream = self.options.upstream
            if self.options.scripted is not None:
                upstream = self._start_scripted(profile, scripted_name, upstream_net, run_root, run_labels)
            ctx = TrialContext(
                engine=self.engine,
                profile=profile,
                execution=ex,
                experiment_id=lock_hash[:12],
                run_id=self.run_id,
                run_root=run_root,
                repo=self.study.repo_path,
                provenance=Provenance(
                    lock_hash=lock_hash,
                    base_sha=lock.base_sha,
                    model=ex.model,
                    judge_model=ex.judge_model,
                    cli_version=images.claude_code_version,
                    image_digest=images.trial_id,
                    prompt_template_sha256=plan.prompt_template_sha256(),
                    harness_version=__version__,
                ),
                skill_copy=skill_copy,
                key_file=key_file,
                upstream=upstream,
                upstream_network=upstream_net,
                artifacts=store.artifacts,
                redactor=Redactor([api_key]),
                stop=self.stop,
                on_phase=self.events.phase,
                shard=f"{self.options.shard[0]}/{self.options.shard[1]}" if self.options.shard else None,
            )
            return self._execute(ctx, todo, done, store)
        finally:
            if self.options.scripted is not None:
                self._save_scripted_log(store, scripted_name)
            for cleanup in (
                lambda: self.engine.remove_container(scripted_name),
                lambda: self.engine.remove_labelled({RUN: self.run_id}),
                lambda: self.engine.remove_network(upstream_net),
            ):
                try:
                    cleanup()
                except HarnessError as e:
                    self.events.message(f"cleanup: {e}")
            shutil.rmtree(run_root, onerror=_force_remove)

    def _save_scripted_log(self, store: ExperimentDir, name: str) -> None:
        """Keep the scripted model's audit trail (metadata only: events, never bodies)."""
        try:
            data, _ = self.engine.logs(name, stdout=True, stderr=True, cap=16 << 20)
        except HarnessError:
            return
        with open(store.root / "scripted-api.log", "ab") as fh:
            fh.write(store.redactor.data(data))

    def _run_ttl(self, n: int) -> float:
        b = self.study.prereg.execution.budgets
        per = b.timeout_s + b.verify_timeout_s + b.judge_timeout_s + 300
        return per * (1 + n / max(1, self.options.jobs)) + 3600

    def _api_key(self) -> str:
        if self.options.scripted is not None:
            return "sk-ant-test-" + secrets.token_urlsafe(24)  # a fake key: tests prove it never leaks
        if not self.options.api_key:
            raise PrerequisiteError(
                "ANTHROPIC_API_KEY is not set", hint="export it, or run `make demo` for the offline scripted model"
            )
        return self.options.api_key

    @staticmethod
    def _write_key(run_root: Path, key: str, owner: tuple[int, int]) -> Path:
        secrets_dir = run_root / "secrets"
        secrets_dir.mkdir(mode=0o700)
        path = secrets_dir / "api-key"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
        if os.getuid() == 0:
            os.chown(path, *owner)
        return path

    def _start_scripted(
        self, profile: sandbox.Profile, name: str, network: str, run_root: Path, labels: dict[str, str]
    ) -> str:
        assert self.options.scripted is not None
        sc = scenario.load_scenario(self.options.scripted)
        data = scenario.compile_scenario(
            self.options.scripted, sc, self.study.target_tasks(), skill=self.study.prereg.skill
        )
        scen_dir = run_root / "scenario"
        scen_dir.mkdir(mode=0o755)
        (scen_dir / "scenario.json").write_bytes(data)
        os.chmod(scen_dir / "scenario.json", 0o444)
        spec = sandbox.scripted_api_spec(
            profile,
            name=name,
            labels={**labels, "harness.role": "scripted-api"},
            network=network,
            scenario_dir=scen_dir,
        )
        self.engine.create(spec)
        self.engine.start(name)
        wait_listening(self.engine, name)
        return f"http://{name}:{sandbox.SCRIPTED_PORT}"

    # ----------------------------------------------------------------- trials
    def _execute(
        self, ctx: TrialContext, todo: list[TrialSpec], done: dict[str, TrialRecord], store: ExperimentDir
    ) -> tuple[bool, int]:
        ex = self.study.prereg.execution
        total_cap = ex.budgets.total_usd
        spent = sum(r.total_cost_usd for r in store.results.read().records)
        slots = HostSlots(self.options.host_slots or default_slots(per_trial_mem=parse_size(ex.resources.memory)))
        budget_stopped = False
        ran = 0
        pending = list(todo)

        def attempt_loop(spec: TrialSpec) -> TrialRecord | None:
            prior = done.get(spec.trial_id)
            attempt = prior.attempt + 1 if prior is not None else 1
            record: TrialRecord | None = None
            while True:
                try:
                    with slots.slot(self.stop):
                        self.events.trial_started(spec, attempt)
                        record = run_trial(ctx, spec, attempt)
                except (Interrupted, InterruptedError):
                    return None
                self._append(store, record)
                if record.status != "infra_error" or attempt > ex.max_infra_retries or self.stop.is_set():
                    return record
                self.events.message(f"{spec.trial_id}: infrastructure failure, retrying ({record.error})")
                self.stop.wait(backoff_seconds(attempt))
                attempt += 1

        with ThreadPoolExecutor(max_workers=max(1, self.options.jobs), thread_name_prefix="trial") as pool:
            running: dict[Future[TrialRecord | None], TrialSpec] = {}
            while pending or running:
                while pending and len(running) < self.options.jobs and not self.stop.is_set() and not budget_stopped:
                    if total_cap is not None and spent >= total_cap:
                        budget_stopped = True
                        break
                    spec = pending.pop(0)
                    running[pool.submit(attempt_loop, spec)] = spec
                if not running:
                    break
                finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in finished:
                    spec = running.pop(fut)
                    record = fut.result()
                    if record is None:
                        continue
                    ran += 1
                    with self._lock:
                        spent += record.total_cost_usd
                    self.events.trial_finished(spec, record, spent)
            if self.stop.is_set():
                raise Interrupted("interrupted: running trials were stopped and torn down; results.jsonl is intact")
        if budget_stopped:
            for spec in pending:
                self._append(store, _skipped(ctx, spec, f"cumulative budget of ${total_cap} reached"))
            self.events.message(f"cumulative budget reached: {len(pending)} trial(s) skipped")
        return budget_stopped, ran

    def _append(self, store: ExperimentDir, record: TrialRecord) -> None:
        with self._lock:
            store.results.append(record)


def _skipped(ctx: TrialContext, spec: TrialSpec, why: str) -> TrialRecord:
    now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    return TrialRecord(
        experiment_id=ctx.experiment_id,
        trial_id=spec.trial_id,
        task_id=spec.task.id,
        arm=spec.arm,
        run_index=spec.run_index,
        attempt=1,
        provenance=ctx.provenance,
        status="skipped",
        error=why,
        started_at=now,
        finished_at=now,
        shard=ctx.shard,
    )


def _force_remove(func: Callable[..., object], path: str, exc: object) -> None:
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass
