"""run_trial on the FakeRuntime: every path of one trial, without Docker.

The workspace is real (host git: a worktree of a tiny repository, the agent's one-commit copy), the
patch is extracted from it with host git the way collect.sh does, and every container is the fake's.
Each test scripts one role differently from a passing trial and checks the record, and that teardown
left nothing: no container, network or volume of the trial, no trial directory, no worktree.

Volume workspaces (``workspace_kind="volume"``, the remote engine's) run on the fake's volumes: the base
template in one volume per run, the trial's scratch and overlay volumes over it, collect's outputs read
from its archive, and the in-engine watchdog as the fake's ``watch`` container.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from harness.errors import InfraError, Interrupted, NeedsLocalEngine
from harness.host.trees import mounts_below, overlay_available
from harness.host.workroots import REPOSITORIES_FILE
from harness.plan import TrialSpec, plan_trials
from harness.records import TrialRecord
from harness.redact import Redactor
from harness.results.identity import RecordIdentity
from harness.results.store import ArtifactStore
from harness.sandbox import roles, volumes
from harness.sandbox.deadline import host_deadline_s
from harness.sandbox.labels import ROLE, RUN, TRIAL, make_labels
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import Archive, ContainerSpec, DockerObject, Limits, VolumeMount
from harness.study.config import Budgets, Execution, Task
from harness.trial import workspace
from harness.trial.basetrees import BaseTrees, EngineSide, WorkspaceKind
from harness.trial.reaper import TrialReaper
from harness.trial.site import RunSite
from harness.trial.trial import PATCH_CAP, StartGate, TrialContext, run_trial
from harness.trial.watchdog import WorkspaceLimit, engine_command
from tests.factories import PROV, init_repo
from tests.fakes import (
    FakeRuntime,
    Outcome,
    agent,
    cli_result,
    collect,
    forwarded,
    gateway_log,
    judge,
    refused,
    trial_behaviours,
)

TRIAL_IMAGE, SIDECAR_IMAGE = "harness-trial:fake", "harness-sidecar:fake"
RUN_ID = "r1"
UPSTREAM_NET = f"hx-{RUN_ID}-up"
KEY_VOLUME = f"hx-{RUN_ID}-key"
SKILL_VOLUME = f"hx-{RUN_ID}-skill"
BASE_VOLUME = f"hx-{RUN_ID}-base-"
"""The prefix of a volume workspace's base volume (one per base commit and run)."""
KEY = "fix-b0-a1"
"""The trial key of the first attempt of the baseline (its containers' and volumes' names)."""
TASK = Task(
    id="fix",
    prompt="make add() add",
    verify_cmd="python3 -m unittest",
    pass_criteria="add(2, 2) == 4",
    protected_paths=("tests",),
    timeout_s=600,
)
FILES = {"calc.py": "def add(a, b):\n    return a - b\n", "tests/test_calc.py": "# the tests\n", "README.md": "calc\n"}
FIXED = {"calc.py": "def add(a, b):\n    return a + b\n"}


@dataclass
class Rig:
    runtime: FakeRuntime
    ctx: TrialContext
    spec: TrialSpec
    repo: Path

    def run(self, attempt: int = 1) -> TrialRecord:
        return run_trial(self.ctx, self.spec, attempt)

    def assert_torn_down(self) -> None:
        left = sorted((o.kind, o.name) for o in self.runtime.left())
        run_own = [("network", UPSTREAM_NET), ("volume", KEY_VOLUME), ("volume", SKILL_VOLUME)]
        bases = [("volume", name) for kind, name in left if kind == "volume" and name.startswith(BASE_VOLUME)]
        assert left == sorted(run_own + bases), "only the run's own network and volumes may be left"
        assert not bases or self.ctx.site.bases.kind == "volume", "a base volume is made for volume workspaces only"
        # the run's own: its base trees, and the note of the repository they are worktrees of (for gc)
        left_dirs = [p.name for p in self.ctx.site.root.iterdir() if p.name != REPOSITORIES_FILE]
        assert all(name.startswith("base-") for name in left_dirs), f"the trial directory is removed: {left_dirs}"
        assert not mounts_below(self.ctx.site.root), "no overlay of the trial is left mounted"
        self.ctx.site.bases.close()  # the run's base trees go with the run (RunResources)
        assert not [p for p in self.ctx.site.root.iterdir() if p.name != REPOSITORIES_FILE], (
            "the base trees are removed"
        )
        assert sorted((o.kind, o.name) for o in self.runtime.left()) == run_own, "the base volume goes with them"
        worktrees = subprocess.run(
            ["git", "-C", str(self.repo), "worktree", "list", "--porcelain"], capture_output=True, text=True, check=True
        ).stdout
        assert worktrees.count("worktree ") == 1, worktrees

    def created(self) -> list[str]:
        """The roles of the trial's containers created, in order: not the never-started ones that fill
        volumes, nor those that make the run's base volume (made on first use)."""
        return [name.rsplit("-", 1)[1] for name in self._created() if not name.endswith("-fill")]

    def fills(self) -> list[str]:
        """The trial's volumes filled through a created, never-started container (:func:`volumes.fill`)."""
        return sorted(name.removesuffix("-fill") for name in self._created() if name.endswith("-fill"))

    def _created(self) -> list[str]:
        return [name for name in self.runtime.targets("create") if not name.startswith(BASE_VOLUME)]

    def specs(self) -> list[ContainerSpec]:
        """Every container spec created from now on (call before :meth:`run`)."""
        seen: list[ContainerSpec] = []
        real = self.runtime.create

        def create(spec: ContainerSpec, **kw: Any) -> str:
            seen.append(spec)
            return real(spec, **kw)

        self.runtime.create = create  # type: ignore[method-assign]
        return seen


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    rigs: list[Rig] = []

    def make(
        arm: str = "baseline",
        *,
        task: Task = TASK,
        workspace_kind: WorkspaceKind | None = "copy",
        files: dict[str, str] = FILES,
        remote: bool = False,
        **roles_and_ctx: Any,
    ) -> Rig:
        """``workspace_kind`` None: chosen as a run chooses it (``remote``: an engine on another machine)."""
        ctx_fields = {k: roles_and_ctx.pop(k) for k in list(roles_and_ctx) if k in TrialContext.__dataclass_fields__}
        site_fields = {k: roles_and_ctx.pop(k) for k in list(roles_and_ctx) if k in RunSite.__dataclass_fields__}
        root = tmp_path / f"rig{len(rigs)}"
        repo = root / "repo"
        sha = init_repo(repo, files)
        runtime = FakeRuntime(trial_behaviours(**roles_and_ctx), images=[TRIAL_IMAGE, SIDECAR_IMAGE], remote=remote)
        run_labels = make_labels(RUN_ID, role="run", ttl_s=600)
        runtime.create_network(UPSTREAM_NET, run_labels, internal=True)
        skill = volumes.tar_entries([volumes.Entry("SKILL.md", b"# careful\n", 0o444)])
        volumes.make(runtime, SKILL_VOLUME, skill, image=SIDECAR_IMAGE, labels=run_labels)
        key = roles.key_tar("sk-ant-test-key", (os.getuid(), os.getgid()))
        volumes.make(runtime, KEY_VOLUME, key, image=SIDECAR_IMAGE, labels=run_labels)
        runtime.calls.clear()  # the run's set-up is not the trial's
        stop = threading.Event()
        user = f"{os.getuid()}:{os.getgid()}"
        side = EngineSide(runtime, SIDECAR_IMAGE, run_labels, RUN_ID)
        ctx_fields.setdefault(
            "execution", Execution(model="sonnet", judge_model="haiku", budgets=Budgets(timeout_s=600))
        )
        site = RunSite(
            engine=runtime,
            run_id=RUN_ID,
            profile=roles.Profile(TRIAL_IMAGE, SIDECAR_IMAGE, Limits(), user=user, sidecar_user=user),
            root=root / "run",
            bases=BaseTrees(repo, root / "run", (os.getuid(), os.getgid()), kind=workspace_kind, side=side),
            key_volume=KEY_VOLUME,
            skill_volume=SKILL_VOLUME,
            upstream=f"http://hx-{RUN_ID}-scripted:8080",
            upstream_network=UPSTREAM_NET,
            **site_fields,
        )
        ctx = TrialContext(
            site=site,
            identity=RecordIdentity("e1", PROV.model_copy(update={"base_sha": sha}), None, {TASK.id: "fp-fix"}),
            artifacts=ArtifactStore(root / "artifacts", Redactor()),
            redactor=Redactor(["sk-ant-test-key"]),
            stop=stop,
            starts=StartGate(stop),
            **ctx_fields,
        )
        (root / "run").mkdir()
        spec = next(s for s in plan_trials([task], 1, seed=1) if s.arm == arm)
        rigs.append(rig := Rig(runtime, ctx, spec, repo))
        return rig

    yield make
    for rig in rigs:
        rig.ctx.site.bases.close()
        assert not mounts_below(rig.ctx.site.root)


# ------------------------------------------------------------------- success


KINDS = [
    "copy",
    pytest.param(
        "overlay",
        marks=pytest.mark.skipif(not overlay_available(Path("/tmp")), reason="overlay mounts need root here"),
    ),
    "volume",
]


@pytest.mark.parametrize("kind", KINDS)
def test_a_passing_trial_runs_every_phase_and_leaves_nothing(make_rig: Callable[..., Rig], kind: str) -> None:
    rig = make_rig(agent=agent(FIXED), workspace_kind=kind)
    rec = rig.run()
    assert rec.status == "completed" and rec.error is None, rec.error
    assert rec.workspace == kind
    watch = ["watch"] if kind == "volume" else []  # the in-engine watchdog, next to the agent
    assert rig.created() == ["gateway", "agent", *watch, "collect", "verify", "judge"]
    assert rig.fills() == ([f"hx-{RUN_ID}-{KEY}-scratch"] if kind == "volume" else [])
    base_volume = ("volume", f"{BASE_VOLUME}{rig.ctx.identity.provenance.base_sha[:12]}")
    assert (base_volume in [(o.kind, o.name) for o in rig.runtime.left()]) == (kind == "volume")
    assert rec.patch is not None and rec.patch.files_changed == 1 and rec.patch.rejected is None
    assert rec.verify is not None and rec.verify.exit_code == 0
    assert rec.judge is not None and rec.judge.verdict == "pass"
    assert rec.gateway is not None and rec.gateway.forwarded == 1
    assert rec.agent is not None and rec.agent.subtype == "success"
    assert set(rec.artifacts) >= {"transcript.jsonl", "agent.json", "patch.diff", "verify.log", "judge.json"}
    assert list(rec.durations_s) == ["workspace", "gateway", "agent", "extract", "verify", "judge", "teardown"]
    assert rec.flags == ()
    assert b"return a + b" in rig.ctx.artifacts.get(rec.artifacts["patch.diff"])
    rig.assert_torn_down()


def test_an_aa_skill_trial_runs_as_the_baseline_and_is_recorded_as_the_skill_arm(make_rig: Callable[..., Rig]) -> None:
    seen: list[ContainerSpec] = []

    def watching(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        seen.append(spec)
        return agent(FIXED)(spec, runtime)

    rig = make_rig("skill", agent=watching)
    rig.spec = replace(rig.spec, treatment="baseline")  # an A/A calibration's skill trial (plan.aa_plan)
    rec = rig.run()
    assert rec.status == "completed" and (rec.arm, rec.trial_id) == ("skill", rig.spec.trial_id)
    assert rec.baseline_fingerprint is None, "only a baseline record carries a fingerprint"
    assert not [m for m in seen[0].volumes if m.target == "/skill"], "no skill is mounted"
    assert "SKILL.md" not in " ".join(seen[0].command), "the baseline's prompt"
    rig.assert_torn_down()


def test_a_baseline_trial_records_its_tasks_fingerprint(make_rig: Callable[..., Rig]) -> None:
    assert make_rig("baseline", agent=agent(FIXED)).run().baseline_fingerprint == "fp-fix"


def test_the_skill_arm_mounts_the_skill_copy_read_only(make_rig: Callable[..., Rig]) -> None:
    seen: list[ContainerSpec] = []

    def watching(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        seen.append(spec)
        return agent(FIXED)(spec, runtime)

    rig = make_rig("skill", agent=watching)
    assert rig.run().status == "completed"
    (mount,) = [m for m in seen[0].volumes if m.target == "/skill"]
    assert mount == VolumeMount(SKILL_VOLUME, "/skill", read_only=True)
    assert (rig.runtime.mount_path(seen[0], "/skill") / "SKILL.md").read_text() == "# careful\n"
    assert "/skill/SKILL.md" in " ".join(seen[0].command)


def test_the_key_volume_is_mounted_in_the_gateway_only(make_rig: Callable[..., Rig]) -> None:
    specs: list[ContainerSpec] = []
    rig = make_rig("skill")
    real = rig.runtime.create

    def create(spec: ContainerSpec, **kw: Any) -> str:
        specs.append(spec)
        return real(spec, **kw)

    rig.runtime.create = create  # type: ignore[method-assign]
    assert rig.run().status == "completed"
    holders = [s.labels[ROLE] for s in specs if any(v.volume == KEY_VOLUME for v in s.volumes)]
    assert holders == ["gateway"]
    data, (uid, _gid, mode) = rig.runtime.volume_file(KEY_VOLUME, "api-key")
    assert data == b"sk-ant-test-key" and mode == 0o400 and uid == os.getuid()


@pytest.mark.parametrize("kind", ["copy", "volume"])
def test_the_agent_edits_to_protected_paths_are_flagged_and_restored_for_verify(
    make_rig: Callable[..., Rig], tmp_path: Path, kind: str
) -> None:
    verified: list[tuple[str, str, bool]] = []

    def verify(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        tree = runtime.view(spec, "/workspace", tmp_path / "verify-view")  # a volume: lower + upper
        verified.append(
            ((tree / "tests" / "test_calc.py").read_text(), (tree / "calc.py").read_text(), (tree / ".git").exists())
        )
        return Outcome(exit_code=0)

    rig = make_rig(
        agent=agent({**FIXED, "tests/test_calc.py": "# no tests any more\n"}), verify=verify, workspace_kind=kind
    )
    rec = rig.run()
    assert rec.patch is not None
    assert any("protected" in f for f in rec.patch.flags), rec.patch.flags
    assert verified == [("# the tests\n", FIXED["calc.py"], False)], "base + patch, protected paths restored, no .git"
    rig.assert_torn_down()


# ----------------------------------------------------------- failure classes


@pytest.mark.parametrize(
    ("method", "role", "phase"),
    [
        ("create_network", None, "gateway"),
        ("create", "gateway", "gateway"),
        ("start", "agent", "agent"),
        ("create", "collect", "extract"),
        ("create", "verify", "verify"),
        ("create", "judge", "judge"),
        ("output", "judge", "judge"),
    ],
)
def test_an_engine_failure_in_any_phase_is_an_infra_error(
    make_rig: Callable[..., Rig], method: str, role: str | None, phase: str
) -> None:
    rig = make_rig()
    rig.runtime.fail(method, role, InfraError(f"{method} failed: the engine said no"))
    rec = rig.run()
    assert rec.status == "infra_error"
    assert rec.error == f"{method} failed: the engine said no"
    assert list(rec.durations_s)[-2:] == [phase, "teardown"], "the trial stopped in that phase"
    rig.assert_torn_down()


def test_a_gateway_that_exits_before_listening_is_an_infra_error(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(gateway=Outcome(exit_code=1, stderr=b"Traceback: no key\n"))
    rec = rig.run()
    assert rec.status == "infra_error"
    assert rec.error is not None and "exited before listening" in rec.error and "no key" in rec.error
    assert "agent" not in rig.created()
    rig.assert_torn_down()


def test_an_agent_that_got_no_api_call_through_is_an_infra_error(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(agent=Outcome(exit_code=1, stderr=b"fetch failed"))
    rec = rig.run()
    assert rec.status == "infra_error"
    assert rec.error is not None and "no API call got through" in rec.error
    rig.assert_torn_down()


def test_a_failed_extraction_is_an_infra_error(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(collect=Outcome(exit_code=3, stderr=b"sh: git: not found"))
    rec = rig.run()
    assert rec.status == "infra_error"
    assert rec.error is not None and "patch extraction failed (exit 3)" in rec.error
    assert "verify" not in rig.created()
    rig.assert_torn_down()


def test_an_agent_that_fails_is_an_agent_error_and_still_verified_and_judged(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(agent=agent({}, result={"subtype": "error_during_execution", "is_error": True}))
    rig.runtime.behave("verify", Outcome(exit_code=1, stdout=b"FAILED (failures=1)\n"))
    rig.runtime.behave("judge", judge("fail", "add still subtracts"))
    rec = rig.run()
    assert rec.status == "agent_error"
    assert rec.verify is not None and rec.verify.exit_code == 1
    assert rec.judge is not None and rec.judge.verdict == "fail"
    rig.assert_torn_down()


def test_the_host_deadline_is_a_timeout_neither_verified_nor_judged(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(agent=Outcome(seconds=host_deadline_s(600) + 1))
    rec = rig.run()
    assert rec.status == "timeout"
    assert rec.verify is not None and rec.verify.skipped_reason == "the agent did not finish (deadline or budget)"
    assert rec.judge is None
    assert "verify" not in rig.created() and "judge" not in rig.created()
    rig.assert_torn_down()


def test_the_in_container_deadline_is_a_timeout(make_rig: Callable[..., Rig]) -> None:
    def slow(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        gateway_log(runtime, spec, forwarded())
        return Outcome(exit_code=124, seconds=605.0)  # timeout -k's own code, after the deadline

    assert make_rig(agent=slow).run().status == "timeout"


def test_a_deadline_the_engine_stamped_a_moment_short_is_still_a_timeout(make_rig: Callable[..., Rig]) -> None:
    # the engine stamps StartedAt after the process already runs: under load the recorded run of a CLI the
    # in-container timer stopped at its 600 s deadline came out shorter (test_infra_forgery failed on it)
    def stamped_late(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        gateway_log(runtime, spec, forwarded())
        return Outcome(exit_code=124, seconds=599.2)

    rec = make_rig(agent=stamped_late).run()
    assert rec.status == "timeout"
    assert not any(f.startswith("self_terminated") for f in rec.flags)


def test_an_early_exit_124_is_the_agents_fault_not_a_timeout(make_rig: Callable[..., Rig]) -> None:
    def killed_its_timer(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        gateway_log(runtime, spec, forwarded())
        return Outcome(exit_code=124, seconds=30.0)

    rec = make_rig(agent=killed_its_timer).run()
    assert rec.status == "agent_error"
    assert any(f.startswith("self_terminated") for f in rec.flags)


@pytest.mark.parametrize(
    "who",
    ["cli", "gateway"],
)
def test_a_spent_budget_is_budget_exceeded_and_not_judged(make_rig: Callable[..., Rig], who: str) -> None:
    def over_budget(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        gateway_log(runtime, spec, forwarded(0.9))
        if who == "gateway":
            gateway_log(runtime, spec, refused("budget"))
            return Outcome(exit_code=1, stdout=cli_result(subtype="error_during_execution", is_error=True))
        return Outcome(exit_code=1, stdout=cli_result(subtype="error_max_budget_usd", is_error=True))

    rig = make_rig(agent=over_budget)
    rec = rig.run()
    assert rec.status == "budget_exceeded"
    assert rec.judge is None
    rig.assert_torn_down()


def test_a_model_api_that_kept_failing_is_an_infra_error_whatever_the_agent_printed(
    make_rig: Callable[..., Rig],
) -> None:
    def overloaded(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        gateway_log(runtime, spec, forwarded(), forwarded(0.0, status=529))
        return Outcome(exit_code=1, stdout=cli_result(subtype="success", is_error=True, result="API Error: 529"))

    rec = make_rig(agent=overloaded).run()
    assert rec.status == "infra_error"
    assert rec.error is not None and "the model API kept failing" in rec.error and "was 529" in rec.error


def test_the_run_learns_of_a_retry_after_while_the_agent_still_runs(make_rig: Callable[..., Rig]) -> None:
    """Issue 24 item 10: a 429's ``retry-after`` pauses the run when the gateway forwards it, not when the
    trial ends (here the CLI retries and completes: the record alone would never have paused anything)."""
    told: list[tuple[float, bool]] = []  # (seconds, whether the agent was still running then)
    agents: list[str] = []

    def limited_then_fine(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        agents.append(spec.name)
        gateway_log(runtime, spec, forwarded(0.0, status=429, retry_after="20"))
        threading.Timer(1.0, gateway_log, args=(runtime, spec, forwarded())).start()  # the CLI's retry
        return Outcome(stdout=cli_result(), hold_s=2.0)

    rigs: list[Rig] = []
    rig = make_rig(
        agent=limited_then_fine, on_api_pause=lambda s: told.append((s, rigs[0].runtime.is_running(agents[0])))
    )
    rigs.append(rig)
    rec = rig.run()
    assert rec.status == "completed" and rec.gateway is not None
    assert rec.gateway.upstream_statuses == ("429", "200")
    assert told == [(20.0, True)], "told once, while the agent ran"
    rig.assert_torn_down()


def test_a_dropped_engine_connection_while_waiting_for_the_agent_is_infra_not_timeout(
    make_rig: Callable[..., Rig],
) -> None:
    """Issue 9 item 9: a timeout is excluded as truncated; an infra error is retried. Losing the engine
    mid-wait is the environment's failure (the Engine raises it: tests/contract/test_runtime.py)."""
    rig = make_rig(agent=Outcome(hold_s=math.inf))
    rig.runtime.fail("wait", "agent", InfraError("waiting for container agent failed: Connection aborted"))
    rec = rig.run()
    assert rec.status == "infra_error", "never a timeout"
    assert rec.error is not None and "Connection aborted" in rec.error
    assert rec.verify is None and rec.judge is None
    rig.assert_torn_down()


# ------------------------------------------------------------- the watchdog


def _flood(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
    ws = runtime.mount_path(spec, "/workspace")
    for i in range(60):
        (ws / f"junk{i}").write_text("x")
    gateway_log(runtime, spec, forwarded())
    return Outcome(hold_s=math.inf)  # writes on until something kills it


def test_the_workspace_watchdog_kills_the_agent_and_the_patch_is_rejected(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(agent=_flood, workspace_limit=WorkspaceLimit(max_files=50, interval_s=0.01, min_free_bytes=0))
    rec = rig.run()
    assert rec.status == "agent_error"
    assert rec.error is not None and "killed by the workspace watchdog" in rec.error
    assert any(f.startswith("workspace_limit:") for f in rec.flags)
    assert rec.patch is not None and rec.patch.rejected is not None
    assert rec.verify is not None and rec.verify.skipped_reason == "workspace limit exceeded"
    assert rig.runtime.targets("kill")[:1] == [f"hx-{RUN_ID}-fix-b0-a1-agent"]
    assert "collect" not in rig.created(), "a flooded workspace is never extracted"
    rig.assert_torn_down()


def test_a_host_running_low_on_disk_stops_the_agent_as_an_infra_error(make_rig: Callable[..., Rig]) -> None:
    limit = WorkspaceLimit(interval_s=0.01, min_free_bytes=1 << 62)
    rig = make_rig(agent=Outcome(hold_s=math.inf), workspace_limit=limit)
    rec = rig.run()
    assert rec.status == "infra_error"
    assert rec.error is not None and rec.error.startswith("the agent was stopped")
    rig.assert_torn_down()


# ------------------------------------------------------- volume workspaces


def _trial_objects() -> tuple[str, str, str]:
    """The scratch, workspace and verify volumes of the first attempt."""
    return workspace.TrialVolumes.of(TrialNames(RUN_ID, KEY))


def test_a_volume_trial_mounts_no_path_of_the_controller(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(agent=agent(FIXED), workspace_kind="volume")
    specs = rig.specs()
    archives: list[tuple[str, str]] = []
    real = rig.runtime.get_archive

    def get_archive(name: str, path: str, *, cap: int) -> Archive | None:
        archives.append((name, path))
        return real(name, path, cap=cap)

    rig.runtime.get_archive = get_archive  # type: ignore[method-assign]
    rec = rig.run()
    assert rec.status == "completed" and rec.workspace == "volume", rec.error
    scratch, ws, vf = _trial_objects()
    by_role = {s.labels[ROLE]: s for s in specs if s.labels.get(TRIAL) == rig.spec.trial_id}
    assert set(by_role) >= {"gateway", "agent", "watch", "collect", "verify", "judge"}, set(by_role)
    assert all(s.mounts == () for s in specs), [(s.name, s.mounts) for s in specs if s.mounts]
    assert [v for v in by_role["agent"].volumes if v.target == "/workspace"] == [VolumeMount(ws, "/workspace", False)]
    assert by_role["verify"].volumes == (VolumeMount(vf, "/workspace", read_only=False),)
    base = rig.ctx.site.bases.get(rig.ctx.identity.provenance.base_sha).volume
    assert base is not None
    assert set(by_role["collect"].volumes) == {
        VolumeMount(base, "/base", read_only=True),
        VolumeMount(ws, "/workspace", read_only=True),
        VolumeMount(scratch, "/trial", read_only=False),
        VolumeMount(vf, "/verify", read_only=False),
    }
    assert by_role["watch"].volumes == (VolumeMount(scratch, "/trial", read_only=True),)
    assert by_role["watch"].network == "none" and by_role["collect"].network == "none"
    collect = f"hx-{RUN_ID}-{KEY}-collect"
    assert archives == [(collect, "/trial/out")], "collect's outputs come back as one archive"
    assert b"return a + b" in rig.ctx.artifacts.get(rec.artifacts["patch.diff"])
    rig.assert_torn_down()


def test_a_volume_trial_runs_whole_on_a_remote_engine(make_rig: Callable[..., Rig]) -> None:
    """A remote engine refuses every path of the controller (the fake, as Docker, with NeedsLocalEngine):
    the run picks volume workspaces for it, and the whole trial runs."""
    rig = make_rig(agent=agent(FIXED), workspace_kind=None, remote=True)
    rec = rig.run()
    assert rec.status == "completed" and rec.error is None, rec.error
    assert rec.workspace == "volume"
    assert rec.verify is not None and rec.verify.exit_code == 0
    assert b"return a + b" in rig.ctx.artifacts.get(rec.artifacts["patch.diff"])
    rig.assert_torn_down()


def _waits_for_the_kill(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
    gateway_log(runtime, spec, forwarded())
    return Outcome(hold_s=math.inf)


@pytest.mark.parametrize(
    ("fault", "role", "roles_", "phase", "error"),
    [
        (None, None, {"agent": Outcome(exit_code=1, stderr=b"fetch failed")}, "agent", "no API call got through"),
        ("start", "agent", {}, "agent", "the engine said no"),
        ("wait", "agent", {"agent": _waits_for_the_kill}, "agent", "the engine said no"),
        ("put_archive", f"hx-{RUN_ID}-{KEY}-scratch-fill", {}, "workspace", "the engine said no"),
        ("create_overlay_volume", f"hx-{RUN_ID}-{KEY}-vf", {}, "workspace", "the engine said no"),
        ("create", "collect", {}, "extract", "the engine said no"),
        ("get_archive", "collect", {}, "extract", "the engine said no"),
    ],
    ids=["no-api-call", "agent-start", "agent-wait", "scratch-fill", "overlay", "collect-create", "collect-archive"],
)
def test_a_failing_volume_trial_is_an_infra_error_and_leaves_no_container_network_or_volume(
    make_rig: Callable[..., Rig], fault: str | None, role: str | None, roles_: dict[str, Any], phase: str, error: str
) -> None:
    rig = make_rig(workspace_kind="volume", **roles_)
    if fault is not None:
        rig.runtime.fail(fault, role, InfraError(f"{fault} failed: the engine said no"))
    rec = rig.run()
    assert rec.status == "infra_error" and rec.error is not None and error in rec.error, rec.error
    assert list(rec.durations_s)[-2:] == [phase, "teardown"]
    made = set(rig.runtime.targets("create_volume")) | set(rig.runtime.targets("create_overlay_volume"))
    mine = set(_trial_objects())
    assert made & mine, "positive control: the trial made volumes before it failed"
    rig.assert_torn_down()


@pytest.mark.parametrize("phase", ["agent", "collect", "verify", "judge"])
@pytest.mark.parametrize("reaped", [False, True], ids=["inline", "reaper"])
def test_an_interrupted_volume_trial_leaves_nothing(make_rig: Callable[..., Rig], phase: str, reaped: bool) -> None:
    def signalled(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        outcome = trial_behaviours(agent=agent(FIXED))[phase]
        result = outcome(spec, runtime) if callable(outcome) else outcome
        rig.ctx.stop.set()
        return result

    rig = make_rig(workspace_kind="volume", **{phase: signalled})
    events: list[str] = []
    with pytest.raises(Interrupted), _reaped(rig, events) if reaped else contextlib.nullcontext():
        rig.run()
    assert events == []
    assert rig.created()[-1] in (phase, "watch"), "no container is created after the stop"
    rig.assert_torn_down()


def test_a_volume_trials_teardown_that_cannot_list_removes_its_volumes_by_name(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(workspace_kind="volume")
    rig.runtime.fail("labelled", error=InfraError("listing harness objects failed: engine busy"))
    rec = rig.run()
    assert rec.status == "completed" and not any(f.startswith("teardown_incomplete") for f in rec.flags)
    assert set(_trial_objects()) <= set(rig.runtime.targets("remove_volume"))
    rig.assert_torn_down()


def _links_its_status(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
    """collect, then its status replaced by a symlink to a file saying "ok" (never followed)."""
    outcome = collect(spec, runtime)
    out = runtime.path_in(spec, spec.env.get("COLLECT_OUT", "/out"))
    (out / "status").rename(out / "elsewhere")
    (out / "status").symlink_to("elsewhere")
    return outcome


@pytest.mark.parametrize("kind", ["copy", "volume"])
def test_a_collect_output_that_is_a_link_is_not_followed(make_rig: Callable[..., Rig], kind: str) -> None:
    rec = make_rig(agent=agent(FIXED), collect=_links_its_status, workspace_kind=kind).run()
    assert rec.status == "infra_error" and rec.error is not None and "patch extraction failed" in rec.error


def _huge_numstat(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
    """collect, then a numstat past the outputs' archive cap (collect.sh caps only patch.diff: numstat and
    raw grow with the number of changed paths and their length, up to the watchdog's file bound)."""
    outcome = collect(spec, runtime)
    out = runtime.path_in(spec, spec.env.get("COLLECT_OUT", "/out"))
    (out / "numstat").write_bytes(b"1\t0\tx\0" * ((PATCH_CAP + (10 << 20)) // 6 + 1))
    return outcome


def test_collect_outputs_cut_at_the_archive_cap_reject_the_patch_not_the_trial(make_rig: Callable[..., Rig]) -> None:
    """The archive comes in name order and ``status`` is its last file: outputs past the cap lose it. That is
    the agent's change being too large (as a timed-out extraction is), never an infra_error to exclude."""
    rec = make_rig(agent=agent(FIXED), collect=_huge_numstat, workspace_kind="volume").run()
    assert rec.status == "completed", rec.error
    assert rec.patch is not None and rec.patch.rejected is not None and "archive" in rec.patch.rejected
    assert rec.verify is not None and rec.verify.skipped_reason is not None
    copy = make_rig(agent=agent(FIXED), collect=_huge_numstat).run()
    assert copy.status == "completed" and copy.patch is not None, "positive control: bind mounts read each file capped"


@pytest.mark.parametrize("arm", ["skill", "baseline"])
def test_the_installed_skill_arm_gets_its_mount_point_in_the_scratch_fill(
    make_rig: Callable[..., Rig], arm: str
) -> None:
    seen: list[tuple[bool, dict[str, tuple[int, int, int]], tuple[VolumeMount, ...]]] = []
    scratch, _ws, _vf = workspace.TrialVolumes.of(TrialNames(RUN_ID, f"fix-{arm[0]}0-a1"))

    def looks(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        upper = runtime.mount_path(spec, "/workspace")  # the overlay's upper: scratch/upper
        meta = {k: v for k, v in runtime.volumes[scratch].meta.items() if k.startswith("upper/.claude")}
        seen.append(((upper / ".claude" / "skills" / "careful").is_dir(), meta, spec.volumes))
        return agent(FIXED)(spec, runtime)

    execution = Execution(model="sonnet", judge_model="haiku", budgets=Budgets(timeout_s=600), delivery="installed")
    rig = make_rig(arm, agent=looks, workspace_kind="volume", execution=execution, skill_name="careful")
    rec = rig.run()
    assert rec.status == "completed", rec.error
    ((made, meta, mounts),) = seen
    owner = (os.getuid(), os.getgid())
    if arm == "baseline":
        assert not made and meta == {}, "the baseline's workspace is the base: no mount point"
        assert not any(v.target.startswith("/workspace/") for v in mounts)
        return
    assert made, "the mount point is in the workspace before the agent starts"
    assert meta == {
        "upper/.claude": (*owner, 0o755),
        "upper/.claude/skills": (*owner, 0o755),
        "upper/.claude/skills/careful": (*owner, 0o755),
    }, "made by the scratch fill, owned by the agent's uid"
    assert VolumeMount(SKILL_VOLUME, "/workspace/.claude/skills/careful", read_only=True) in mounts
    assert b".claude" not in rig.ctx.artifacts.get(rec.artifacts["patch.diff"]), "the mount point is not a change"
    rig.assert_torn_down()


def test_a_base_whose_claude_is_a_file_is_refused_before_any_volume_of_the_trial(
    make_rig: Callable[..., Rig],
) -> None:
    execution = Execution(model="sonnet", judge_model="haiku", budgets=Budgets(timeout_s=600), delivery="installed")
    rig = make_rig(
        "skill",
        workspace_kind="volume",
        execution=execution,
        skill_name="careful",
        files={**FILES, ".claude": "a file, not a directory\n"},
    )
    rec = rig.run()
    assert rec.status == "infra_error"
    assert rec.error is not None and ".claude exists in the base and is not a directory" in rec.error, rec.error
    assert "agent" not in rig.created()
    trial = f"hx-{RUN_ID}-fix-s0-a1-"
    assert not [v for v in rig.runtime.targets("create_volume") if v.startswith(trial)], "refused before any volume"
    rig.assert_torn_down()


# ------------------------------------------------------ the in-engine watchdog


def test_the_watch_container_walks_the_upper_with_the_runs_limits(make_rig: Callable[..., Rig]) -> None:
    limit = WorkspaceLimit(max_files=7, max_bytes=1 << 20, max_depth=3, min_free_bytes=4096, interval_s=0.5)
    rig = make_rig(workspace_kind="volume", workspace_limit=limit)
    specs = rig.specs()
    assert rig.run().status == "completed"
    (watch,) = [s for s in specs if s.labels.get(ROLE) == "watch"]
    base = rig.ctx.site.bases.get(rig.ctx.identity.provenance.base_sha)
    assert watch.command == engine_command("/trial/upper", limit, base.depth)
    assert watch.user == rig.ctx.site.profile.user and watch.network == "none"
    assert watch.name == f"hx-{RUN_ID}-{KEY}-watch"
    rig.assert_torn_down()


@pytest.mark.parametrize(
    ("exit_code", "stdout", "status", "reason"),
    [
        (3, b"files\n", "agent_error", "more than 200000 files and directories added to the workspace"),
        (3, b"bytes\n", "agent_error", f"more than {4 << 30} bytes added to the workspace"),
        (3, b"depth\n", "agent_error", "directories nested deeper than 100 in the workspace"),
        (4, b"free\n", "infra_error", "the engine's filesystem holding the workspace has less than"),
    ],
    ids=["files", "bytes", "depth", "free"],
)
def test_a_tripped_watch_container_kills_the_agent(
    make_rig: Callable[..., Rig], exit_code: int, stdout: bytes, status: str, reason: str
) -> None:
    rig = make_rig(
        agent=_waits_for_the_kill, watch=Outcome(exit_code=exit_code, stdout=stdout), workspace_kind="volume"
    )
    rec = rig.run()
    assert rec.status == status
    (flag,) = [f for f in rec.flags if f.startswith("workspace_limit:")]
    assert reason in flag
    assert rec.error is not None and reason in rec.error
    if status == "agent_error":
        assert "killed by the workspace watchdog" in rec.error
        assert rec.patch is not None and rec.patch.rejected is not None
    else:
        assert rec.error.startswith("the agent was stopped")
    assert f"hx-{RUN_ID}-{KEY}-agent" in rig.runtime.targets("kill")
    assert "collect" not in rig.created(), "a flooded workspace is never extracted"
    rig.assert_torn_down()


def _agent_outlives_the_watchdog(rig: Rig) -> None:
    """The agent's wait returns only once the watchdog's thread is done: the trial then always sees what
    the watcher did while the agent ran (not a stop that came first)."""
    real_wait = rig.runtime.wait
    thread_name = f"watchdog-hx-{RUN_ID}-{KEY}-watch"

    def wait(name: str, deadline_s: float) -> Any:
        if name.endswith("-agent"):
            for thread in threading.enumerate():
                if thread.name == thread_name:
                    thread.join(10)
        return real_wait(name, deadline_s)

    rig.runtime.wait = wait  # type: ignore[method-assign]


@pytest.mark.parametrize("method", ["create", "start"])
def test_a_watch_container_that_cannot_start_is_flagged_and_the_trial_completes(
    make_rig: Callable[..., Rig], method: str
) -> None:
    rig = make_rig(agent=agent(FIXED), workspace_kind="volume")
    watch = f"hx-{RUN_ID}-{KEY}-watch"
    rig.runtime.fail(method, "watch", InfraError(f"{method} {watch} failed: no such image"))
    _agent_outlives_the_watchdog(rig)
    rec = rig.run()
    assert rec.status == "completed", rec.error
    (flag,) = [f for f in rec.flags if f.startswith("workspace_unwatched:")]
    assert "the workspace watchdog did not run" in flag and "no such image" in flag
    assert rec.verify is not None and rec.verify.exit_code == 0
    rig.assert_torn_down()


def test_a_watch_container_that_exits_early_is_flagged(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(agent=agent(FIXED), workspace_kind="volume", watch=Outcome(exit_code=2, stderr=b"find: not found"))
    _agent_outlives_the_watchdog(rig)
    rec = rig.run()
    assert rec.status == "completed", rec.error
    (flag,) = [f for f in rec.flags if f.startswith("workspace_unwatched:")]
    assert "stopped early (exit 2)" in flag and "find: not found" in flag
    rig.assert_torn_down()


# ------------------------------------------------------------------ the judge


@pytest.mark.parametrize(
    "never_answers",
    [
        judge(verdict=""),  # finished without calling StructuredOutput
        Outcome(seconds=host_deadline_s(300) + 1),  # past its deadline
        Outcome(exit_code=1, stderr=b"crashed"),
    ],
    ids=["no-structured-output", "deadline", "crash"],
)
def test_a_judge_that_never_answers_is_unknown_not_fail(make_rig: Callable[..., Rig], never_answers: Any) -> None:
    rig = make_rig(agent=agent(FIXED), judge=never_answers)
    rec = rig.run()
    assert rec.status == "completed"
    assert rec.judge is not None and rec.judge.verdict == "unknown"
    rig.assert_torn_down()


# --------------------------------------------------------------- interruption


@pytest.mark.parametrize("phase", ["agent", "collect", "verify", "judge"])
def test_a_stop_during_a_phase_interrupts_the_trial_and_tears_down(make_rig: Callable[..., Rig], phase: str) -> None:
    def signalled(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        outcome = trial_behaviours(agent=agent(FIXED))[phase]
        result = outcome(spec, runtime) if callable(outcome) else outcome
        rig.ctx.stop.set()  # SIGINT arrives while this container runs
        return result

    rig = make_rig(**{phase: signalled})
    with pytest.raises(Interrupted):
        rig.run()
    later = ["agent", "collect", "verify", "judge"]
    assert rig.created()[-1] == phase, "no container is created after the stop"
    assert not set(rig.created()) & set(later[later.index(phase) + 1 :])
    rig.assert_torn_down()


def test_a_stop_kills_the_running_agent_and_no_container_starts_after_it(make_rig: Callable[..., Rig]) -> None:
    """What Experiment.abort does from a signal handler: close the start gate, kill what runs."""
    running = threading.Event()

    def waits_for_the_signal(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        running.set()
        return Outcome(hold_s=math.inf)

    rig = make_rig(agent=waits_for_the_signal)

    def abort() -> None:
        assert running.wait(10)
        rig.ctx.starts.close()
        for obj in rig.runtime.labelled({RUN: RUN_ID}):
            if obj.kind == "container" and obj.labels.get("harness.role") == "agent":
                rig.runtime.kill(obj.name)

    signal = threading.Thread(target=abort)
    signal.start()
    with pytest.raises(Interrupted):
        rig.run()
    signal.join(10)
    assert rig.created() == ["gateway", "agent"]
    rig.assert_torn_down()


def test_a_stop_before_the_trial_starts_makes_nothing(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    rig.ctx.stop.set()
    with pytest.raises(Interrupted):
        rig.run()
    assert rig.created() == []
    rig.assert_torn_down()


# ------------------------------------------------------------------- teardown


def test_teardown_removes_every_container_and_the_network_by_label(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    rec = rig.run()
    names = {f"hx-{RUN_ID}-fix-b0-a1-{role}" for role in ("gateway", "agent", "collect", "verify", "judge")}
    assert set(rig.runtime.targets("remove_container")) == names
    assert rig.runtime.targets("remove_network") == [f"hx-{RUN_ID}-fix-b0-a1-net"]
    assert not any(f.startswith("teardown_incomplete") for f in rec.flags)
    rig.assert_torn_down()


def test_teardown_that_cannot_list_removes_every_role_by_name(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    rig.runtime.fail("labelled", error=InfraError("listing harness objects failed: engine busy"))
    rec = rig.run()
    assert rec.status == "completed"
    rig.assert_torn_down()


def test_leftovers_of_teardown_are_flagged_on_the_record(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    gateway = f"hx-{RUN_ID}-fix-b0-a1-gateway"
    rig.runtime.fail("remove_container", gateway, InfraError(f"removing container {gateway} failed: busy"), times=None)
    rec = rig.run()
    assert rec.status == "completed", "a leftover is flagged, not an outcome"
    (flag,) = [f for f in rec.flags if f.startswith("teardown_incomplete")]
    assert gateway in flag and "network" in flag, "the gateway stayed, so its network could not go either"
    run_own = [UPSTREAM_NET, KEY_VOLUME, SKILL_VOLUME]
    assert sorted(o.name for o in rig.runtime.left()) == sorted([*run_own, gateway, f"hx-{RUN_ID}-fix-b0-a1-net"])
    assert not (rig.ctx.site.root / "fix-b0-a1").exists(), "the host side is torn down all the same"


def test_teardown_runs_when_the_workspace_cannot_be_made(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    elsewhere = rig.ctx.identity.provenance.model_copy(update={"base_sha": "0" * 40})
    bad = replace(rig.ctx, identity=replace(rig.ctx.identity, provenance=elsewhere))
    rec = run_trial(bad, rig.spec, 1)
    assert rec.status == "infra_error"
    assert rig.created() in ([], ["gateway"]), "the gateway may have come up meanwhile; nothing else"
    rig.assert_torn_down()


def test_on_a_remote_engine_a_bind_mount_stops_the_run_and_the_trial_is_torn_down(
    make_rig: Callable[..., Rig],
) -> None:
    """What a remote engine cannot give (a path of this machine) is not an infra_error to retry: the
    error names the path and ends the run, after the trial's teardown."""
    rig = make_rig()
    rig.runtime.remote = True
    with pytest.raises(NeedsLocalEngine, match="controller's path"):
        rig.run()
    assert rig.created() == ["gateway", "agent"], "the gateway's volumes work remotely; the agent's workspace not yet"
    rig.assert_torn_down()


# ------------------------------------------------------------- overlapped steps


def test_the_gateway_comes_up_while_the_workspace_is_prepared(
    make_rig: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace's preparation waits here until the gateway listens: it can finish only if the
    gateway was brought up at the same time, on another thread."""
    rig = make_rig(agent=agent(FIXED))
    gateway = f"hx-{RUN_ID}-fix-b0-a1-gateway"
    real = workspace.prepare
    seen: list[bool] = []

    def prepare(*args: Any, **kw: Any) -> workspace.TrialDirs:
        deadline = time.monotonic() + 10
        while not rig.runtime.is_running(gateway) and time.monotonic() < deadline:
            time.sleep(0.005)
        seen.append(rig.runtime.is_running(gateway))
        return real(*args, **kw)

    monkeypatch.setattr(workspace, "prepare", prepare)
    rec = rig.run()
    assert seen == [True], "the gateway ran before the workspace was ready"
    assert rec.status == "completed"
    assert list(rec.durations_s)[:2] == ["workspace", "gateway"]
    rig.assert_torn_down()


def test_a_gateway_failing_while_the_workspace_is_prepared_is_an_infra_error_of_the_gateway_phase(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(gateway=Outcome(exit_code=1, stderr=b"Traceback: no key\n"))
    rig.runtime.fail("create_network", None, InfraError("create_network failed: no address pool left"))
    rec = rig.run()
    assert rec.status == "infra_error" and rec.error == "create_network failed: no address pool left"
    assert list(rec.durations_s)[-2:] == ["gateway", "teardown"]
    assert rig.created() == []
    rig.assert_torn_down()


def test_a_workspace_that_fails_while_the_gateway_comes_up_waits_for_it_then_tears_it_down(
    make_rig: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's thread is joined before teardown lists the trial's objects: nothing it makes
    after the failure is left behind."""
    rig = make_rig()
    slow = threading.Event()
    real_create = rig.runtime.create

    def create(spec: ContainerSpec, **kw: Any) -> str:
        slow.wait(5)  # the gateway is still being made when the workspace fails
        return real_create(spec, **kw)

    def prepare(*_args: Any, **_kw: Any) -> workspace.TrialDirs:
        threading.Timer(0.2, slow.set).start()
        raise InfraError("preparing the workspace failed: disk full")

    rig.runtime.create = create  # type: ignore[method-assign]
    monkeypatch.setattr(workspace, "prepare", prepare)
    rec = rig.run()
    assert rec.status == "infra_error" and rec.error == "preparing the workspace failed: disk full"
    assert rig.created() == ["gateway"], "made after the failure, and still removed"
    rig.assert_torn_down()


def test_a_stop_while_the_gateway_comes_up_interrupts_and_tears_down(
    make_rig: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = make_rig()
    real = workspace.prepare

    def prepare(*args: Any, **kw: Any) -> workspace.TrialDirs:
        dirs = real(*args, **kw)
        rig.ctx.starts.close()  # SIGINT arrives while the workspace is made
        return dirs

    monkeypatch.setattr(workspace, "prepare", prepare)
    with pytest.raises(Interrupted):
        rig.run()
    assert "agent" not in rig.created()
    rig.assert_torn_down()


# ------------------------------------------------------------- the run's reaper


def _reaped(rig: Rig, events: list[str], *, backlog: int = 4) -> TrialReaper:
    reaper = TrialReaper(events.append, backlog=backlog)
    rig.ctx = replace(rig.ctx, reaper=reaper)
    return reaper


def test_with_the_runs_reaper_the_record_comes_before_the_teardown_and_nothing_is_left(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(agent=agent(FIXED))
    events: list[str] = []
    hold = threading.Event()
    real = rig.runtime.labelled

    def labelled(selector: Any = None) -> list[DockerObject]:  # the teardown's first step: it lists what to remove
        assert hold.wait(10)
        return real(selector)

    rig.runtime.labelled = labelled  # type: ignore[method-assign]
    with _reaped(rig, events):
        rec = rig.run()
        assert rec.status == "completed" and "teardown" in rec.durations_s
        assert f"hx-{RUN_ID}-fix-b0-a1-gateway" in rig.runtime.containers, "still there: the reaper's now"
        hold.set()
    assert events == []
    rig.assert_torn_down()


@pytest.mark.parametrize("phase", ["agent", "collect", "verify", "judge"])
def test_an_interrupted_trial_handed_to_the_reaper_is_torn_down_when_it_closes(
    make_rig: Callable[..., Rig], phase: str
) -> None:
    def signalled(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        outcome = trial_behaviours(agent=agent(FIXED))[phase]
        result = outcome(spec, runtime) if callable(outcome) else outcome
        rig.ctx.stop.set()
        return result

    rig = make_rig(**{phase: signalled})
    events: list[str] = []
    with pytest.raises(Interrupted), _reaped(rig, events):
        rig.run()
    assert events == []
    rig.assert_torn_down()


def test_the_reapers_leftovers_are_reported_to_the_run_not_on_the_record(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig()
    gateway = f"hx-{RUN_ID}-fix-b0-a1-gateway"
    rig.runtime.fail("remove_container", gateway, InfraError(f"removing container {gateway} failed: busy"), times=None)
    events: list[str] = []
    with _reaped(rig, events):
        rec = rig.run()
    assert rec.status == "completed" and not any(f.startswith("teardown_incomplete") for f in rec.flags)
    assert any(gateway in e and e.startswith(f"trial {rec.trial_id}: ") for e in events), events
    assert not (rig.ctx.site.root / "fix-b0-a1").exists(), "the host side is torn down all the same"


def test_the_reaper_removes_only_its_attempts_objects_not_the_next_attempts(make_rig: Callable[..., Rig]) -> None:
    """A retry (attempt 2) of the same trial may start before attempt 1's teardown ran: they share the
    trial's label, so the reaper removes attempt 1's objects by name."""
    rig = make_rig(agent=agent(FIXED))
    hold = threading.Event()
    real = rig.runtime.labelled
    events: list[str] = []

    def labelled(selector: Any = None) -> Any:
        if threading.current_thread().name == "trial-reaper":
            assert hold.wait(10)
        return real(selector)

    rig.runtime.labelled = labelled  # type: ignore[method-assign]
    with _reaped(rig, events):
        rig.run(attempt=1)
        labels = make_labels(RUN_ID, role="trial", trial_id=rig.spec.trial_id, ttl_s=600)
        rig.runtime.create_network(f"hx-{RUN_ID}-fix-b0-a2-net", labels, internal=True)  # attempt 2 is under way
        hold.set()
    assert {o.name for o in rig.runtime.left()} == {
        UPSTREAM_NET,
        KEY_VOLUME,
        SKILL_VOLUME,
        f"hx-{RUN_ID}-fix-b0-a2-net",
    }


def test_the_reaper_drains_on_close_runs_late_work_inline_and_bounds_its_backlog() -> None:
    events: list[str] = []
    gate = threading.Event()
    done: list[str] = []

    def job(name: str) -> Callable[[], list[str]]:
        def run() -> list[str]:
            gate.wait(10)
            done.append(name)
            return []

        return run

    reaper = TrialReaper(events.append, backlog=1)
    reaper.submit("t1", job("t1"))  # taken by the worker, which waits on the gate
    time.sleep(0.05)
    reaper.submit("t2", job("t2"))  # fills the backlog
    third = threading.Thread(target=reaper.submit, args=("t3", job("t3")))
    third.start()
    third.join(0.2)
    assert third.is_alive(), "a full backlog makes the hand-off wait"
    gate.set()
    third.join(10)
    reaper.close()
    assert done == ["t1", "t2", "t3"]

    def broken() -> list[str]:
        raise InfraError("the engine went away")

    reaper.submit("t4", lambda: ["network x: busy"])  # after close: on the caller's thread
    reaper.submit("t5", broken)
    reaper.close()
    assert events == ["trial t4: network x: busy", "trial t5: InfraError: the engine went away"]
