"""One trial, end to end (docs/design.md#one-trial-end-to-end), in the order it happens:

    workspace -> gateway -> agent -> extract patch -> verify -> judge -> record -> teardown

Every container is fresh and hardened (see :mod:`harness.sandbox.engine`); the agent's
only way out is the trial's gateway; the patch is extracted in a
``--network none`` container and treated as hostile data; verify runs on base +
patch in another fresh container and its exit code comes from the controller's
own wait; the judge sees only task, criteria, exit code and capped diff.
The gateway comes up on its own thread while the workspace is made (the one step that needs neither's
output). Teardown runs on every path. An environment failure becomes an ``infra_error``
record (retried by the experiment loop), never a verdict against an arm.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from harness.errors import HarnessError, InfraError, Interrupted, NeedsLocalEngine
from harness.plan import TrialSpec
from harness.records import (
    AgentResult,
    GatewayMeter,
    JudgeResult,
    MountedSkill,
    PatchInfo,
    SkillUse,
    TrialRecord,
    TrialStatus,
    VerifyResult,
)
from harness.redact import Redactor
from harness.results.identity import Identity, RecordIdentity
from harness.results.store import ArtifactStore
from harness.sandbox import lifecycle
from harness.sandbox import roles as sandbox
from harness.sandbox.deadline import host_deadline_s
from harness.sandbox.labels import make_labels
from harness.sandbox.names import TrialNames, trial_key
from harness.sandbox.runtime import ContainerRuntime, ContainerSpec, ExitInfo
from harness.sidecars.gatewaylog import Forwarded, GatewayEvent
from harness.study.config import Execution, Task
from harness.trial import apihealth, claude, delivery, gateway, installed, judge, patch, samepatch, watchdog
from harness.trial.agents import DEFAULT_AGENT, Agent, AgentRun, agent_for
from harness.trial.basetrees import WorkspaceKind
from harness.trial.reaper import TrialReaper
from harness.trial.site import RunSite, TrialSite

PATCH_CAP = 8 << 20
AGENT_OUTPUT_CAP = 4 << 20
VERIFY_TAIL = 8192


class StartGate:
    """Containers start only while the run is not stopping.

    A stop is a flag and one sweep that kills the run's running containers. Without this gate a
    container created before the sweep and started just after it would run to its full deadline (the
    race behind a flaky signal test). :meth:`close` sets the flag and waits for starts in flight, so
    every container the sweep then lists was started before it, and no container starts after it.
    """

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._cond = threading.Condition()
        self._starting = 0

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        with self._cond:
            if self._stop.is_set():
                raise Interrupted("interrupted")
            self._starting += 1
        try:
            yield
        finally:
            with self._cond:
                self._starting -= 1
                self._cond.notify_all()

    def close(self) -> None:
        """Stop: no container starts after this returns, and none is half-started."""
        with self._cond:
            self._stop.set()
            self._cond.wait_for(lambda: self._starting == 0)


@dataclass(frozen=True)
class TrialContext:
    """Everything a trial needs that is the same for every trial of one run."""

    site: RunSite
    """What the run's set-up made: the engine, the profile, the base trees, volumes, the upstream."""
    execution: Execution
    identity: RecordIdentity
    """What every record of the run says it belongs to and ran on (its provenance, its baseline fingerprints)."""
    artifacts: ArtifactStore
    redactor: Redactor
    stop: threading.Event
    on_phase: Callable[[str, str], None] = lambda _trial, _phase: None
    workspace_limit: watchdog.WorkspaceLimit = field(default_factory=watchdog.WorkspaceLimit)
    """Bounds on the bind-mounted /workspace (no Docker flag bounds a bind mount)."""
    starts: StartGate = field(default_factory=lambda: StartGate(threading.Event()))
    """Shared by the run's trials and its stop (the experiment passes one built on ``stop``)."""
    same_patch: samepatch.SamePatch = field(default_factory=samepatch.SamePatch)
    """Verify (and, if preregistered, judge) results shared between identical patches of one run."""
    skill_name: str = ""
    """The name the CLI lists the skill under (installed delivery: its mount's directory name)."""
    reaper: TrialReaper | None = None
    """The run's reaper: teardown is handed to it, off the next trial's critical path
    (:mod:`harness.trial.reaper`); None: each trial tears itself down before its record is returned."""
    on_api_pause: Callable[[float], None] = lambda _seconds: None
    """Told, the moment a trial's gateway forwards an upstream failure with ``retry-after``, how many seconds
    the API asked for (:class:`harness.experiment.loop.ApiPause`: no trial starts before they pass)."""

    @property
    def engine(self) -> ContainerRuntime:
        return self.site.engine

    @property
    def agent(self) -> Agent:
        """The agent under test (``execution.agent``): everything of its own is behind this seam."""
        return agent_for(self.execution.agent)


@dataclass
class _TrialState:
    """What the trial has learned so far; becomes the record whatever happens."""

    durations: dict[str, float] = field(default_factory=dict)
    status: TrialStatus = "completed"
    error: str | None = None
    agent: AgentResult | None = None
    meter: GatewayMeter | None = None
    patch: PatchInfo | None = None
    verify: VerifyResult | None = None
    judge: JudgeResult | None = None
    artifacts: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    oom: bool = False
    skills_mounted: tuple[MountedSkill, ...] | None = None
    skill: SkillUse | None = None
    provenance: dict[str, str | None] = field(default_factory=dict)
    """What the trial observed of its own provenance (the installed delivery's skill listing)."""
    workspace_kind: WorkspaceKind | None = None
    started_at: str = field(default_factory=lambda: _now())

    def record(self, identity: Identity, redactor: Redactor) -> TrialRecord:
        """The trial's record: whose it is (``identity``), then what it learned (its error redacted)."""
        return TrialRecord(
            **identity,
            status=self.status,
            error=redactor.text(self.error) if self.error else None,
            started_at=self.started_at,
            finished_at=_now(),
            durations_s={k: round(v, 3) for k, v in self.durations.items()},
            agent=self.agent,
            gateway=self.meter,
            patch=self.patch,
            verify=self.verify,
            judge=self.judge,
            artifacts=self.artifacts,
            flags=tuple(self.flags),
            oom_killed=self.oom,
            skills_mounted=self.skills_mounted,
            skill=self.skill,
            workspace=self.workspace_kind,
        )


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def run_trial(ctx: TrialContext, spec: TrialSpec, attempt: int) -> TrialRecord:
    done = _TrialState()
    phase = _phases(ctx, spec, done)
    site = _site(ctx, spec, attempt, phase)  # its names: nothing of it exists yet
    try:
        with site:  # removed on every path, or handed to the run's reaper
            with phase("workspace"):  # the gateway's network and container come up on their own thread meanwhile
                mountpoint = ctx.agent.mountpoint(ctx.skill_name) if _installs_skill(ctx, spec) else ()
                site.make(ctx.identity.provenance.base_sha, mountpoint=mountpoint)
                done.workspace_kind = site.workspace.kind

            with phase("gateway"):  # the run learns of the API's retry-after when the gateway sees it
                gateway_ip = site.open_gateway(functools.partial(_tell_api_pause, ctx))

            with phase("agent"):
                timeout_s = ctx.execution.agent_timeout_s(spec.task)
                agent = _agent_spec(ctx, spec, site, gateway_ip, timeout_s)
                if ctx.site.skill_copies:  # what the container is given, read from its spec: not the plan's
                    done.skills_mounted = delivery.mounted_skills(agent, ctx.site.skill_copies)
                dog = site.workspace.watchdog(ctx.workspace_limit, timeout_s, lambda _trip: ctx.engine.kill(agent.name))
                with dog:
                    run = lifecycle.run(
                        ctx.engine,
                        agent,
                        deadline_s=host_deadline_s(timeout_s),
                        output_cap=AGENT_OUTPUT_CAP,
                        on_started=lambda _name: dog.start(),
                        gate=ctx.starts.starting,
                    )
                _stop_if_asked(ctx)
                agent_events = gateway.events(ctx.engine, site.names.container("gateway"))
                _agent_done(ctx, spec, done, run, agent_events, dog, timeout_s)

            with phase("extract"):
                collect, out = site.workspace.collect(spec.task.protected_paths, PATCH_CAP)
                _stop_if_asked(ctx)
                done.patch, diff = _read_patch(out, spec.task, collect)
                done.artifacts["patch.diff"] = ctx.artifacts.put(diff)

            truncated = done.status in ("timeout", "budget_exceeded")
            with phase("verify"):
                done.verify = _verify(ctx, spec, site, done.patch, truncated)
                if done.verify.output_tail:
                    done.artifacts["verify.log"] = ctx.artifacts.put(done.verify.output_tail.encode())

            with phase("judge"):
                if truncated:
                    done.judge = None
                else:
                    done.judge = _judge(ctx, spec, site, done, diff)
                    if done.judge is not None:
                        done.artifacts["judge.json"] = ctx.artifacts.put(done.judge.model_dump_json().encode())
                judge_events = gateway.events(ctx.engine, site.names.container("gateway"))[len(agent_events) :]
                done.flags.extend(f"judge_gateway_refused: {r}" for r in gateway.meter(judge_events).refused)
    except _SkipRest:
        pass
    except (Interrupted, NeedsLocalEngine):  # a remote engine cannot run this trial at all: stop the run
        raise
    except HarnessError as e:
        done.status, done.error = "infra_error", str(e)
    if site.leftovers:
        done.flags.append("teardown_incomplete: " + "; ".join(site.leftovers)[:500])
    return done.record(ctx.identity.of(spec, attempt, observed=done.provenance), ctx.redactor)


def _agent_done(
    ctx: TrialContext,
    spec: TrialSpec,
    done: _TrialState,
    run: ExitInfo,
    events: list[GatewayEvent],
    dog: watchdog.Watchdog | watchdog.EngineWatchdog,
    timeout_s: int,
) -> None:
    """What the agent's run says, read from places it cannot write first (the gateway's log, the engine's
    wait, the watchdog), then from its stdout: the meter, whether the skill fired, the CLI's result, the
    transcript, and the agent phase's status and flags. A watchdog trip skips the rest of the trial."""
    done.meter = apihealth.annotate(gateway.meter(events), events)
    # a baseline carrying a version (arms) is measured as a skill arm: its own version must be listed, and calling
    # it is that version at work, not a contaminated baseline (docs/design.md, "Version against version")
    done.skill, done.provenance, skill_flags = installed.observe(
        events, skill=ctx.skill_name, arm="skill" if spec.carries_skill or _confirms(spec) else spec.treated_as,
        delivery=ctx.execution.delivery,
    )  # fmt: skip
    done.flags.extend(skill_flags)
    listing = installed.listing_text(events) if ctx.execution.delivery == "installed" else None
    if listing is not None:
        done.artifacts["skill-listing.txt"] = ctx.artifacts.put(listing)
    done.agent = ctx.agent.parse_result(run.stdout, run.exit_code)
    done.artifacts["transcript.jsonl"] = ctx.artifacts.put(run.stdout)  # the agent's JSON lines, redacted
    done.artifacts["agent.json"] = ctx.artifacts.put(ctx.agent.result_json(run.stdout))
    if run.stdout_truncated:
        done.flags.append(f"agent_output_truncated: more than {AGENT_OUTPUT_CAP} bytes on stdout")
    done.oom = run.oom_killed
    if isinstance(dog, watchdog.EngineWatchdog) and dog.error is not None:
        done.flags.append(f"workspace_unwatched: {dog.error}")
    if dog.tripped is not None:
        _workspace_limit(dog.tripped, done)
        raise _SkipRest  # not extracted (it may hold millions of files), verified or judged
    done.status = classify_agent(run, done.agent, done.meter, timeout_s=timeout_s, agent=ctx.agent)
    if done.status == "completed" and over_budget(ctx.agent, done.meter, ctx.execution.budgets.per_trial_usd):
        done.status = "budget_exceeded"
        done.flags.append(f"agent_over_budget: the gateway metered ${done.meter.cost_usd:.6f} for the agent")
    done.flags.extend(integrity_flags(run, done.agent, done.meter, timeout_s=timeout_s))
    done.flags.extend(other_api_flags(events, ctx.agent))


# ---------------------------------------------------------------------- the steps


class _SkipRest(Exception):
    """Internal: the trial's remaining phases do not run (the record is already decided)."""


def _tell_api_pause(ctx: TrialContext, event: GatewayEvent) -> None:
    """One line of the gateway's log, the moment it is written: an upstream failure's ``retry-after`` pauses
    the run's trial starts now (:attr:`TrialContext.on_api_pause`)."""
    seconds = apihealth.pause_asked_s(event)
    if seconds > 0:
        ctx.on_api_pause(seconds)


def _workspace_limit(trip: watchdog.Trip, done: _TrialState) -> None:
    """The watchdog killed the agent: the workspace is not extracted (it may hold millions of
    files); the trial fails through a rejected patch, or is an infra error when the host's
    disk ran low for reasons the workspace does not show."""
    done.flags.append(f"workspace_limit: {trip.reason}")
    if not trip.agent_fault:
        raise InfraError(f"the agent was stopped: {trip.reason}")
    done.status = "agent_error"
    done.error = f"the agent was killed by the workspace watchdog: {trip.reason}"
    done.verify = VerifyResult(skipped_reason="workspace limit exceeded")
    done.patch = PatchInfo(
        sha256=hashlib.sha256(b"").hexdigest(),
        bytes=0,
        files_changed=0,
        insertions=0,
        deletions=0,
        flags=("workspace_limit",),
        rejected=f"workspace_limit: {trip.reason}",
    )


def _installs_skill(ctx: TrialContext, spec: TrialSpec) -> bool:
    """The installed delivery's skill arm (or versioned baseline): its skill copy is mounted inside the workspace."""
    return ctx.execution.delivery == "installed" and spec.carries_skill


def _site(
    ctx: TrialContext, spec: TrialSpec, attempt: int, phase: Callable[[str], contextlib.AbstractContextManager[None]]
) -> TrialSite:
    """The attempt's place on the engine: its names and labels (the attempt's own, so a retry never meets
    what the reaper may still be removing), its gateway's budget (agent plus judge), the run's start gate and
    reaper; teardown is timed as the ``teardown`` phase."""
    return TrialSite(
        ctx.site,
        TrialNames(ctx.site.run_id, trial_key(spec.task.id, spec.arm, spec.run_index, attempt)),
        make_labels(ctx.site.run_id, role="trial", trial_id=spec.trial_id, ttl_s=_ttl(ctx.execution, spec.task)),
        gateway_budget_usd=ctx.execution.budgets.per_trial_usd + ctx.execution.budgets.judge_usd,
        gate=ctx.starts.starting,
        reaper=ctx.reaper,
        trial_id=spec.trial_id,
        timed=phase,
    )


def _agent_spec(ctx: TrialContext, spec: TrialSpec, site: TrialSite, gateway_ip: str, timeout_s: int) -> ContainerSpec:
    """The agent's container: the agent's own argv, environment and image (:mod:`harness.trial.agents`), where
    its skill copy is mounted by the preregistered delivery, and what its arm's treatment gives it (the skill
    copy, a library mask's skills)."""
    ex, given, agent = ctx.execution, spec.treated_as, ctx.agent
    installed_delivery = ex.delivery == "installed"
    command = agent.command(
        AgentRun(
            prompt=spec.task.prompt if installed_delivery else spec.prompt,  # installed: no prefix, both arms alike
            model=ex.model,
            allowed_tools=ex.allowed_tools,
            max_budget_usd=ex.budgets.per_trial_usd,
            timeout_s=timeout_s,
            delivery=ex.delivery,
            gateway_ip=gateway_ip,
        )
    )
    return sandbox.agent_spec(
        ctx.site.profile,
        name=site.names.container("agent"),
        labels=site.labels,
        network=site.network,
        gateway_ip=gateway_ip,
        workspace=site.workspace.agent_tree,
        skill_volume=_skill_volume(ctx, spec),
        command=command,
        skill_mounts=delivery.mounts(spec.skills, ctx.site.skill_copies) if given == "masked" else (),
        skill_target=agent.skill_target(ctx.skill_name) if installed_delivery else "/skill",
        image=agent.image(ctx.site.profile),
        env=agent.env(gateway_ip),
    )


def over_budget(agent: Agent, meter: GatewayMeter, budget_usd: float) -> bool:
    """An agent without a budget of its own spent more than the trial's (the gateway's cap is the agent's and
    the judge's together, so it stops such an agent only later): the trial is cut as Claude Code's would be."""
    return not agent.own_budget and budget_usd > 0 and meter.cost_usd > budget_usd + 1e-9


def other_api_flags(events: Sequence[GatewayEvent], agent: Agent) -> list[str]:
    """The gateway of an agent that does not speak the Messages API forwards it too, for the judge after the
    agent has exited; a Messages request while the agent ran is the agent reaching for another model."""
    if agent.api == "messages":
        return []
    other = [e for e in events if isinstance(e, Forwarded) and e.path.startswith("/v1/messages")]
    return [f"agent_used_judge_api: {len(other)} Messages API request(s) while the agent ran"] if other else []


def _confirms(spec: TrialSpec) -> bool:
    """A confirmation's skill trial: recorded as the skill arm, given the selected set as a masked arm is."""
    return spec.arm == "skill" and spec.treated_as == "masked"


def _skill_volume(ctx: TrialContext, spec: TrialSpec) -> str | None:
    """The skill copy the agent is given: the skill arm's, a versioned baseline's (arms), else none."""
    if spec.treated_as == "skill":
        return ctx.site.skill_volume
    if spec.treated_as == "baseline" and spec.baseline_version is not None:
        if ctx.site.baseline_skill_volume is None:  # the plan and the run's resources disagree: never run it bare
            raise InfraError(f"{spec.trial_id} carries version {spec.baseline_version}, but the run has no copy of it")
        return ctx.site.baseline_skill_volume
    return None


def integrity_flags(run: ExitInfo, result: AgentResult, meter: GatewayMeter, *, timeout_s: float) -> list[str]:
    """Signs that the agent tampered with its own record (its own processes and stdout are in reach)."""
    flags: list[str] = []
    if _self_terminated(run, result, timeout_s):
        flags.append(
            f"self_terminated: exit {run.exit_code} after {run.seconds:.0f} s, before the {timeout_s} s deadline"
        )
    if result.cost_usd is not None and meter.forwarded and result.cost_usd + 1e-6 < meter.cost_usd * 0.99:
        # the CLI's result is read from the container's stdout, which the agent can write to
        flags.append(
            f"cost_mismatch: the CLI reported ${result.cost_usd:.6f}, the gateway metered ${meter.cost_usd:.6f}"
        )
    return flags


DEADLINE_SLACK_S = 2.0
"""How much shorter than its deadline a container's recorded run may be and still have met it. The engine
stamps ``StartedAt`` when it has handled the start, after the container's process already runs; on a loaded
machine that came up to a second late, so a CLI the in-container timer stopped at exactly its deadline
was recorded as having run less and counted as self-terminated."""


def _self_terminated(run: ExitInfo, result: AgentResult, timeout_s: float | None) -> bool:
    """Exit 124 (timeout's own code, also produced by SIGALRM) or 137 (SIGKILL) long before the
    deadline: the agent killed its CLI or the timer. A real deadline takes at least timeout_s, less the
    engine's stamping slack (:data:`DEADLINE_SLACK_S`, or 2% of a long deadline: too little to matter to
    a skill that would cut its own trial short)."""
    return (
        timeout_s is not None
        and not run.timed_out
        and not run.oom_killed
        and run.exit_code in (124, 137)
        and result.subtype is None
        and run.seconds < timeout_s - max(DEADLINE_SLACK_S, 0.02 * timeout_s)
    )


def classify_agent(
    run: ExitInfo,
    result: AgentResult,
    meter: GatewayMeter,
    *,
    timeout_s: float | None = None,
    agent: Agent = DEFAULT_AGENT,
) -> TrialStatus:
    """The agent phase's status. The CLI's own words win where it gave them, except on whether
    the API failed: that comes from the gateway's record of upstream answers only
    (:func:`harness.trial.apihealth.api_failure`), so a skill cannot print an ``api_error`` result and
    turn its failures into excluded infrastructure errors.

    With ``timeout_s``, an in-container "timeout" that came before the deadline (the agent
    sent SIGALRM to ``timeout`` or killed its CLI) is an ``agent_error``, not a ``timeout``:
    otherwise a skill could turn its failures into excluded, truncated trials."""
    oom = run.oom_killed
    if _self_terminated(run, result, timeout_s):
        return "agent_error"
    _raise_if_api_failed(run, result, meter)
    if run.timed_out or (run.exit_code in (124, 137) and result.subtype is None and not oom):
        return "timeout"
    if agent.says_budget_exceeded(result) or meter.budget_stopped:
        return "budget_exceeded"
    if result.subtype is None and meter.forwarded == 0 and not oom:
        # the CLI never got an answer through: the environment, not the agent
        why = f": {upstream}" if (upstream := apihealth.api_failure(meter)) else ""
        raise InfraError(f"the agent produced no result and no API call got through (exit {run.exit_code}){why}")
    if oom or run.exit_code not in (0, None) or result.is_error:
        return "agent_error"
    return "completed"


def _raise_if_api_failed(run: ExitInfo, result: AgentResult, meter: GatewayMeter) -> None:
    """The CLI did not finish (an error, no result, a deadline) and the gateway's last upstream
    answer was a failure: the API kept failing, whatever the agent's stdout says."""
    upstream = apihealth.api_failure(meter)
    unfinished = result.is_error or result.subtype is None or run.exit_code not in (0, None) or run.timed_out
    if upstream and unfinished and not run.oom_killed:
        raise InfraError(f"the model API kept failing: {upstream}")


def _read_patch(out: Mapping[str, bytes], task: Task, collect: ExitInfo) -> tuple[PatchInfo, bytes]:
    status = out.get("status", b"").decode("utf-8", "replace").strip()
    if collect.timed_out:
        status = "extraction timed out (workspace too large?)"
    elif not status and collect.archive_truncated:  # outputs past the archive cap: cut before status, the last
        status = "extraction outputs larger than the archive cap (too many changes?)"
    elif not status:
        raise InfraError(f"patch extraction failed (exit {collect.exit_code}): {collect.stderr[-500:]!r}")
    diff = out.get("patch.diff", b"")
    info = patch.analyze(
        diff,
        out.get("raw", b""),
        out.get("numstat", b""),
        protected_paths=task.protected_paths,
        cap=PATCH_CAP,
        special=out.get("special", b""),
        nested=out.get("nested", b""),
        links=out.get("links", b""),
        extract_status=status,
    )
    return info, diff[:PATCH_CAP]


def _verify(ctx: TrialContext, spec: TrialSpec, site: TrialSite, info: PatchInfo, truncated: bool) -> VerifyResult:
    if truncated:
        return VerifyResult(skipped_reason="the agent did not finish (deadline or budget)")
    if info.rejected:
        return VerifyResult(skipped_reason=f"patch rejected: {info.rejected}")
    task = spec.task
    timeout_s = ctx.execution.budgets.verify_timeout_s

    def run_verify() -> VerifyResult:
        run = lifecycle.run(
            ctx.engine,
            sandbox.verify_spec(
                ctx.site.profile,
                name=site.names.container("verify"),
                labels=site.labels,
                verify_tree=site.workspace.verify_tree,
                verify_cmd=task.verify_cmd,
                timeout_s=timeout_s,
            ),
            deadline_s=host_deadline_s(timeout_s),
            output_cap=VERIFY_TAIL,
            gate=ctx.starts.starting,
        )
        _stop_if_asked(ctx)
        tail = (run.stdout + run.stderr)[-VERIFY_TAIL:].decode("utf-8", "replace")
        timed_out = run.timed_out or run.exit_code == 124
        return VerifyResult(
            exit_code=None if run.timed_out else run.exit_code,
            timed_out=timed_out,
            output_tail=ctx.redactor.text(tail),
            oom_killed=run.oom_killed,
        )

    key = samepatch.verify_key(
        task, ctx.identity.provenance.base_sha, ctx.site.profile.trial_image, info.sha256, timeout_s
    )
    result, source = ctx.same_patch.verify.get(key, spec.trial_id, run_verify)
    return result if source is None else result.model_copy(update={"reused_from": source})


def _judge(ctx: TrialContext, spec: TrialSpec, site: TrialSite, done: _TrialState, diff: bytes) -> JudgeResult:
    task = spec.task
    exit_code = done.verify.exit_code if done.verify is not None else None
    prompt = judge.judge_prompt(task, exit_code, diff.decode("utf-8", "replace"), done.patch)
    timeout_s = ctx.execution.budgets.judge_timeout_s

    def run_judge() -> JudgeResult:
        command = claude.judge_command(
            prompt,
            model=ctx.execution.judge_model,
            schema=judge.VERDICT_SCHEMA,
            max_budget_usd=ctx.execution.budgets.judge_usd,
            timeout_s=timeout_s,
        )
        run = lifecycle.run(
            ctx.engine,
            sandbox.judge_spec(
                ctx.site.profile,
                name=site.names.container("judge"),
                labels=site.labels,
                network=site.network,
                gateway_ip=site.gateway_ip,
                command=command,
            ),
            deadline_s=host_deadline_s(timeout_s),
            output_cap=1 << 20,
            gate=ctx.starts.starting,
        )
        _stop_if_asked(ctx)
        result = claude.parse_result(run.stdout, run.exit_code)
        error = None if run.exit_code == 0 else f"judge exit {run.exit_code}: {result.result_excerpt[:200]}"
        verdict = judge.verdict_from(
            claude.structured_output(run.stdout), cost_usd=result.cost_usd, model=ctx.execution.judge_model, error=error
        )
        return verdict.model_copy(update={"duration_ms": result.duration_ms})

    if not ctx.same_patch.judge_reuse:
        return run_judge()
    key = samepatch.judge_key(task, exit_code, ctx.execution.judge_model, prompt)
    verdict, source = ctx.same_patch.judge.get(key, spec.trial_id, run_judge)
    if source is None:
        return verdict
    return verdict.model_copy(update={"reused_from": source, "cost_usd": 0.0, "duration_ms": 0})


def _stop_if_asked(ctx: TrialContext) -> None:
    if ctx.stop.is_set():
        raise Interrupted("interrupted")


def _ttl(execution: Execution, task: Task) -> float:
    return execution.trial_deadlines_s(task) + 900


def _phases(
    ctx: TrialContext, spec: TrialSpec, done: _TrialState
) -> Callable[[str], contextlib.AbstractContextManager[None]]:
    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        if name != "teardown":
            _stop_if_asked(ctx)
        ctx.on_phase(spec.trial_id, name)
        t0 = time.monotonic()
        try:
            yield
        finally:
            done.durations[name] = done.durations.get(name, 0.0) + time.monotonic() - t0

    return phase
