"""The result line: one schema-versioned JSON object per trial attempt.

``results.jsonl`` is append-only; every attempt of every trial is one
:class:`TrialRecord`, infrastructure failures included (they are retried, and
every attempt is kept). :func:`outcome` turns a record into the three-valued
outcome the decision uses, under the preregistered pass rule.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 2
"""2: ``gateway.side_requests`` (requests the CLI did not send). Lines of version 1 read as before."""
RESULTS = "results.jsonl"
"""The file of result lines in an experiment directory (written by :mod:`harness.results.store`)."""
TRIGGER_RESULTS = "triggers.jsonl"
"""The file of a trigger study's result lines, one :class:`TriggerRecord` per run."""

Arm = Literal["baseline", "skill", "masked"]
"""A/B: baseline and skill. Library experiments: baseline (the bare arm) and masked."""
ARMS: tuple[Arm, Arm] = ("baseline", "skill")
TrialStatus = Literal["completed", "agent_error", "timeout", "budget_exceeded", "infra_error", "skipped"]
JudgeVerdict = Literal["pass", "fail", "unknown"]
Outcome = Literal["pass", "fail", "unknown", "truncated", "infra", "skipped"]
PassRule = Literal["verify_and_judge", "verify", "judge"]
StopReason = Literal["budget", "early_stop"]
"""Why a ``skipped`` trial never started: the cumulative budget, or the preregistered early stop."""
TriggerOutcome = Literal["triggered", "not_triggered", "could_not_measure"]
"""A trigger run's verdict: could-not-measure runs are never counted as misses."""


class FrozenModel(BaseModel):
    """The base of every frozen, strict model of the harness (results, ledger; inputs add ``allow_inf_nan=False``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Provenance(FrozenModel):
    """Everything that must be identical between arms for the comparison to be valid."""

    lock_hash: str
    base_sha: str
    model: str
    judge_model: str
    cli_version: str
    image_digest: str
    prompt_template_sha256: str
    harness_version: str
    upstream_host: str | None = None
    """The model server the gateway forwarded to: a URL's host[:port], or ``scripted``."""
    upstream_proxy: str | None = None
    """``yes`` when the gateway reached the upstream through an HTTP CONNECT proxy, else ``no``."""
    upstream_ca_sha256: str | None = None
    """SHA-256 of the extra CA bundle the gateway trusted for the upstream (empty bundle: of b"")."""
    price_table_sha256: str | None = None
    """SHA-256 of the price table the gateway metered with (see :mod:`harness.study.prices`)."""
    delivery: str | None = None
    """How the skill reached the agent: ``prompt`` (``--bare``, told to read /skill/SKILL.md) or ``installed``
    (non-bare CLI, ``.claude/skills``). Arms of different deliveries are never comparable (None: old records)."""
    listing_sha256: str | None = None
    """Installed delivery: sha256 of the skill listing the gateway saw in the first request, the skill
    under test's own line removed. Equal in both arms, or the arms saw different distractors."""
    delivery_check: str | None = None
    """Installed delivery: ``ok`` when the arm saw what it should (skill arm: its skill listed; baseline: not
    listed); anything else makes the comparison invalid (a skill arm without its listing is not a miss)."""

    agent: str | None = None
    """The coding agent under test: ``claude-code`` or ``codex`` (None: old records, Claude Code). ``cli_version``
    and ``image_digest`` are its CLI's and its image's."""
    agent_sandbox: str | None = None
    """The agent's own sandbox mode inside the container (Codex: ``danger-full-access``; Claude Code: ``none``)."""
    agent_approval: str | None = None
    """The agent's approval mode (Codex: ``never``; Claude Code: ``allowedTools``)."""
    judge_agent: str | None = None
    """The judge's CLI (always ``claude-code``: independent of the agent under test)."""

    def of_run(self) -> Provenance:
        """What the run knew of this before any trial: without what a trial observes of itself
        (:data:`OBSERVED_PROVENANCE`). A record and the run it belongs to are compared on this."""
        return self.model_copy(update=dict.fromkeys(OBSERVED_PROVENANCE))


OBSERVED_PROVENANCE = ("listing_sha256", "delivery_check")
"""Provenance fields a trial observes of itself (the installed delivery's skill listing, in its first request),
unknown to the run before it: the decision compares them between the arms, never a record with a run."""


class AgentResult(FrozenModel):
    """What the CLI's ``--output-format json`` result said (absent fields stay None)."""

    exit_code: int | None = None
    subtype: str | None = None
    is_error: bool | None = None
    num_turns: int | None = None
    cost_usd: float | None = None
    duration_ms: int | None = None
    terminal_reason: str | None = None
    stop_reason: str | None = None
    permission_denials: int = 0
    session_id: str | None = None
    resolved_model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    result_excerpt: str = ""
    parse_error: str | None = None


class GatewayMeter(FrozenModel):
    """The gateway's independent count of the trial's API traffic."""

    requests: int = 0
    forwarded: int = 0
    refused: tuple[str, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cost_usd: float = 0.0
    budget_stopped: bool = False
    upstream_statuses: tuple[str, ...] = ()
    """What the gateway got from upstream for each forwarded request, in order: the HTTP status,
    ``cut`` (a stream that ended before message_stop) or ``unreachable`` (no answer at all).
    The authority on whether the API failed (:func:`is_upstream_failure`, :mod:`harness.trial.apihealth`),
    not the agent's stdout."""
    upstream_errors: tuple[str, ...] = ()
    """Distinct descriptions of failed upstream connections (a certificate, a proxy refusing)."""
    retry_after_s: float | None = None
    """The last ``retry-after`` the upstream sent with a failure (seconds)."""
    side_requests: int | None = None
    """``/v1/messages`` requests the CLI did not send (a process beside it in the agent container): in
    ``requests``, the tokens and the cost like any other, never evidence that the skill fired
    (:class:`harness.sidecars.skilltrace.Attribution`). None: records of schema version 1."""

    @property
    def failed_answers(self) -> tuple[str, ...]:
        """The upstream answers that were the API failing (:func:`is_upstream_failure`), the CLI's retries included."""
        return tuple(o for o in self.upstream_statuses if is_upstream_failure(o))

    @property
    def last_answer_failed(self) -> bool:
        """The last upstream answer the gateway forwarded was a failure: how an attempt the API ended is told
        (:func:`harness.trial.apihealth.api_failure`)."""
        return bool(self.upstream_statuses) and is_upstream_failure(self.upstream_statuses[-1])


UPSTREAM_CUT = "cut"
UPSTREAM_UNREACHABLE = "unreachable"
UPSTREAM_FAILURE_CODES = frozenset({401, 408, 429})


def is_upstream_failure(status: str) -> bool:
    """Whether one of :attr:`GatewayMeter.upstream_statuses` is the API failing: 401 (the controller's key),
    408, 429, any 5xx, a cut stream or no answer. A 400 or 413 is the request's fault, not the API's.
    The trial (was this attempt an API failure?) and the report (failures per arm) read it alike."""
    if status in (UPSTREAM_CUT, UPSTREAM_UNREACHABLE):
        return True
    try:
        code = int(status)
    except ValueError:
        return False
    return code >= 500 or code in UPSTREAM_FAILURE_CODES


class PatchInfo(FrozenModel):
    sha256: str
    bytes: int
    files_changed: int
    insertions: int
    deletions: int
    files: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    """Reasons to look closer: tests or protected paths edited, .claude/, CLAUDE.md, CI files, symlinks."""
    rejected: str | None = None
    """Set when the patch is unsafe to apply (path traversal, .git/ paths, too large): verify is skipped."""
    special_files: tuple[str, ...] = ()
    """FIFOs, sockets, device nodes or setuid files found in the workspace (not part of the patch)."""


class VerifyResult(FrozenModel):
    exit_code: int | None = None
    timed_out: bool = False
    output_tail: str = ""
    skipped_reason: str | None = None
    oom_killed: bool = False
    reused_from: str | None = None
    """Trial id whose verify ran on a byte-identical patch of the same task (see harness.trial.samepatch)."""


class JudgeResult(FrozenModel):
    verdict: JudgeVerdict
    reason: str = ""
    cost_usd: float | None = None
    model: str | None = None
    error: str | None = None
    duration_ms: int | None = None
    """The judge CLI's own run time (its result's duration_ms)."""
    reused_from: str | None = None
    """Trial id whose judge saw the identical input (only with ``judge.reuse_identical``); this trial paid nothing."""


SkillInvoked = Literal["yes", "no", "forced", "could_not_measure"]


class SkillUse(FrozenModel):
    """ "Did it fire?", from the gateway (the model's responses and the CLI's requests), never from stdout."""

    delivery: str = "prompt"
    invoked: SkillInvoked = "could_not_measure"
    """yes / no: a ``Skill`` tool_use naming the skill anywhere in the turn; forced: the prompt delivery
    tells the agent to read it; could_not_measure: the gateway saw no request (``reason`` says why)."""
    listed: bool | None = None
    """The skill's line was in the first request's skill listing (None: prompt delivery or not measured)."""
    loaded: bool = False
    """A later request carried the CLI's "Launching skill: NAME" tool_result: the body was loaded."""
    tool_uses: tuple[str, ...] = ()
    """Every tool_use the model emitted, in order; ``Skill:<name>`` for Skill calls."""
    listing: tuple[str, ...] = ()
    """The names in the first request's skill listing, in order."""
    name: str | None = None
    """Installed delivery: the name the skill under test is listed under (SKILL.md's front matter
    ``name``, which may differ from the preregistration's ``skill``). None: prompt delivery, old records."""
    reason: str | None = None
    request_bytes: tuple[int, ...] = ()
    """Size of each request body the gateway forwarded (compact JSON): the per-turn input overhead of a
    delivery, measured the same way in both (the scripted model's token counts are scripted)."""


class ReusedFrom(FrozenModel):
    """Where a reused baseline trial first ran (baseline reuse across skills, see :mod:`harness.experiment.reuse`)."""

    experiment_id: str
    lock_hash: str
    """The lock of the experiment that ran it (the copy carries the new experiment's lock in provenance)."""
    directory: str


class EngineRef(FrozenModel):
    """The Docker engine a trial ran on (runs on a pool of engines, ``--engine``; issue 29): what reports
    group trials by, and what tells two engines apart however they were reached."""

    name: str
    """What the run called it (``--engine``'s host, or the engines file's ``name``)."""
    engine_id: str
    """The engine's own id (``docker info`` ID)."""
    server_version: str
    kernel: str
    runtime: str
    """The OCI runtime the trial's containers ran under (``runc``, ``runsc``)."""


class MountedSkill(FrozenModel):
    """One skill the agent container was given (library experiments): its name and a SHA-256 over the
    files of the mounted, controller-owned copy, taken when the container was created."""

    name: str
    sha256: str


class TrialRecord(FrozenModel):
    schema_version: int = SCHEMA_VERSION
    experiment_id: str
    trial_id: str
    task_id: str
    arm: Arm
    run_index: int
    attempt: int = 1
    provenance: Provenance
    status: TrialStatus
    error: str | None = None
    started_at: str
    finished_at: str
    durations_s: dict[str, float] = {}
    agent: AgentResult | None = None
    gateway: GatewayMeter | None = None
    patch: PatchInfo | None = None
    verify: VerifyResult | None = None
    judge: JudgeResult | None = None
    artifacts: dict[str, str] = {}
    """Artifact name -> sha256 of the content-addressed file under artifacts/."""
    flags: tuple[str, ...] = ()
    oom_killed: bool = False
    shard: str | None = None
    stopped_by: StopReason | None = None
    """On ``skipped`` records: what stopped the run before this trial started (None: a TODO task)."""
    baseline_fingerprint: str | None = None
    """Baseline trials: a hash of every setting that shapes a baseline trial, the key for reuse."""
    workspace: Literal["overlay", "copy", "volume"] | None = None
    """How the agent's /workspace was made: an overlay over the run's base tree (copy-on-write: the
    trial's cost follows what the agent changes) or a copy of it (where overlay is not available), both
    directories of this machine; or ``volume``: an overlay volume on the engine's machine (a remote
    engine, or ``HARNESS_WORKSPACE=volume``). None: records of older harness versions, or a trial that failed before its workspace existed."""
    reused_from: ReusedFrom | None = None
    """Set when this baseline trial was copied from another experiment instead of re-sampled."""
    skills_mounted: tuple[MountedSkill, ...] | None = None
    """Library experiments: the skills the agent container actually had (None outside library runs)."""
    skill: SkillUse | None = None
    """Whether the skill was listed and invoked, as the gateway saw it (None: old records)."""
    split: str | None = None
    """The task's split in tasks.json when the trial ran (None: the task had none, or an older record): a
    library pairs a masked trial with the bare one of the same (split, task, sample) only."""
    engine: EngineRef | None = None
    """The engine the trial ran on, in a run on several engines (None: one engine, or records before it)."""

    @property
    def is_outcome(self) -> bool:
        """The trial ran to an outcome of its arm: not an infrastructure failure, not skipped.
        Only such records speak for the model, CLI and image the arm actually used."""
        return self.status not in ("infra_error", "skipped")

    @property
    def agent_cost_usd(self) -> float:
        """The arm's cost figure: the larger of the CLI's own figure and the gateway's meter.

        The CLI's result is read from the container's stdout, which the agent can write to, so
        its figure alone could be forged lower; the gateway's meter cannot be touched from inside.
        Taking the larger means a skill can never look cheaper than it was (a disagreement is
        flagged ``cost_mismatch`` on the trial)."""
        cli = self.agent.cost_usd if self.agent is not None and self.agent.cost_usd is not None else None
        metered = self.gateway.cost_usd if self.gateway is not None and self.gateway.forwarded else None
        figures = [max(0.0, x) for x in (cli, metered) if x is not None and x == x]  # x == x drops NaN
        return max(figures) if figures else 0.0

    @property
    def total_cost_usd(self) -> float:
        """Everything this attempt spent, judge included (what the cumulative budget counts)."""
        judge = self.judge.cost_usd if self.judge is not None and self.judge.cost_usd else 0.0
        return self.agent_cost_usd + judge


def outcome(record: TrialRecord, rule: PassRule = "verify_and_judge") -> Outcome:
    """Three-valued outcome of one trial under the preregistered pass rule.

    Kleene logic for ``verify_and_judge``: fail and unknown is fail; pass and
    unknown is unknown. A trial the agent never finished (deadline or per-trial
    budget) is ``truncated``; an infrastructure failure is ``infra``. Neither
    counts for or against an arm; both are counted and shown.
    """
    if record.status == "infra_error":
        return "infra"
    if record.status == "skipped":
        return "skipped"
    if record.status in ("timeout", "budget_exceeded"):
        return "truncated"
    verify: JudgeVerdict
    if record.verify is None or record.verify.exit_code is None:
        verify = "fail" if record.patch is not None and record.patch.rejected else "unknown"
    else:
        verify = "pass" if record.verify.exit_code == 0 else "fail"
    judge: JudgeVerdict = record.judge.verdict if record.judge is not None else "unknown"
    if rule == "verify":
        return verify
    if rule == "judge":
        return judge
    if "fail" in (verify, judge):
        return "fail"
    if "unknown" in (verify, judge):
        return "unknown"
    return "pass"


class TriggerRecord(FrozenModel):
    """One run of a trigger study (``skilltrial triggers``): its query, variant and verdict, from the gateway's log."""

    run_id: str
    variant: str
    query_id: str
    should_trigger: bool
    run_index: int
    outcome: TriggerOutcome
    reason: str | None = None
    listed: bool | None = None
    tool_uses: tuple[str, ...] = ()
    input_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    listing_sha256: str | None = None
    requests: int = 0
    """API calls the gateway forwarded in this run."""
    stopped_at_skill: bool = False
    """The gateway refused the CLI's next request after the Skill call: the run ended at its verdict."""
