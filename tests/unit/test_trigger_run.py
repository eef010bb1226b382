"""A trigger study's run on the fake runtime (:class:`tests.fakes.FakeRuntime`): every planned run gets its own
gateway and agent, its verdict comes from the gateway's log, and nothing of the run is left behind.

The agent is scripted by its query (read from its command line): it asks the gateway once, and a query about a
bug makes the model call the skill, after which the gateway refuses the CLI's next request (a trigger run ends
at its verdict). What the docker suite proves with the real CLI (``tests/integration/test_triggers.py``), this
proves for the run's own logic, in seconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from harness.errors import InfraError, PrerequisiteError
from harness.experiment.resources import SCRIPTED_LOG
from harness.experiment.triggers import TriggerOptions, run_triggers
from harness.host.paths import HostPaths
from harness.plan import paired_session_id
from harness.records import TRIGGER_RESULTS, TriggerRecord
from harness.sandbox import roles
from harness.sandbox.images import ImageSet
from harness.sandbox.runtime import ContainerSpec
from harness.sidecars.gatewaylog import ModelToolUse, Refused, SkillRequest, ToolUse
from harness.study.triggers import TriggerStudy, load_trigger_study
from tests.fakes import FakeRuntime, Outcome, cli_result, forwarded, gateway_log, listening

SKILL = "careful-fixer"
IMAGES = ImageSet(
    base="base:test",
    runtime="runtime:test",
    sidecar="sidecar:test",
    trial="trial:test",
    trial_id="sha256:trial",
    sidecar_id="sha256:sidecar",
    claude_code_version="2.1.332",
)
QUERIES = {"yes-a": "fix the bug in mean", "yes-b": "a bug in median", "no": "add docstrings"}
LISTING = (f"- {SKILL}: Fix a reported bug by reproducing it first.", "- dataviz: Charts.")


def _query(spec: ContainerSpec) -> str:
    return spec.command[spec.command.index("-p") + 1]


def agent(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
    """The CLI in the skill's installed delivery: one request, and the model's answer to it."""
    AGENTS.append(spec)
    first = SkillRequest(
        turn=0,
        tools=("Bash", "Skill"),
        listed=tuple(line[2:].split(":")[0] for line in LISTING),
        loaded=(),
        request_bytes=4096,
        thread="cli",
        side=False,
        root=True,
        listing=LISTING,
    )
    calls = (ToolUse(name="Skill", skill=SKILL),) if "bug" in _query(spec) else ()
    gateway_log(runtime, spec, first, forwarded(0.01), ModelToolUse(uses=calls, thread="cli", side=False))
    if calls:  # the CLI's next request: refused, the verdict is known
        reason = "trigger run: the skill was called, the verdict is known"
        gateway_log(runtime, spec, Refused(method="POST", path="/v1/messages", reason=reason))
    return Outcome(stdout=cli_result(), seconds=2.0)


SERVICE = Outcome(stdout=listening(), hold_s=math.inf)
AGENTS: list[ContainerSpec] = []
"""The specs of the agents the last runtime() started."""


def runtime() -> FakeRuntime:
    AGENTS.clear()
    return FakeRuntime(
        {"gateway": SERVICE, "scripted-api": SERVICE, "agent": agent}, images=[IMAGES.sidecar, IMAGES.trial]
    )


def write_study(root: Path, runs: int = 2) -> TriggerStudy:
    """Two descriptions of one skill, three queries, and a scenario for the scripted model."""
    for variant, description in (("current", "Fix a reported bug by reproducing it first."), ("terse", "Fixes.")):
        (root / variant).mkdir()
        (root / variant / "SKILL.md").write_text(f"---\nname: {SKILL}\ndescription: {description}\n---\nBody.\n")
    prereg = {
        "skill": SKILL,
        "variants": {"current": "current", "terse": "terse"},
        "queries": [{"id": q, "query": text, "should_trigger": q.startswith("yes")} for q, text in QUERIES.items()],
        "execution": {"runs_per_query": runs, "seed": 3, "budgets": {"timeout_s": 60}},
    }
    (root / "prereg.yaml").write_text(yaml.safe_dump(prereg, sort_keys=False))
    (root / "scenario.yaml").write_text(yaml.safe_dump({"seed": 3, "tasks": {}}))
    return load_trigger_study(root / "prereg.yaml")


@pytest.fixture
def paths(tmp_path: Path) -> HostPaths:
    return HostPaths(
        work_root=tmp_path / "work",
        slots_dir=tmp_path / "slots",
        locks_dir=tmp_path / "locks",
        work_roots=tmp_path / "work-roots",
    )


def options(tmp_path: Path, paths: HostPaths, **kw: object) -> TriggerOptions:
    fields: dict[str, object] = {
        "out": tmp_path / "out",
        "paths": paths,
        "images": IMAGES,
        "jobs": 2,
        "scripted": tmp_path / "study" / "scenario.yaml",
    }
    return TriggerOptions(**{**fields, **kw})  # type: ignore[arg-type]


@pytest.fixture
def study(tmp_path: Path) -> TriggerStudy:
    (tmp_path / "study").mkdir()
    return write_study(tmp_path / "study")


def test_every_planned_run_is_measured_from_its_gateways_log_and_nothing_stays(
    tmp_path: Path, paths: HostPaths, study: TriggerStudy
) -> None:
    rt = runtime()
    seen: list[TriggerRecord] = []
    analysis = run_triggers(study, rt, options(tmp_path, paths, on_run=seen.append))

    assert len(seen) == 3 * 2 * 2, "every query, every run, every variant"
    for r in seen:
        want = "triggered" if r.query_id.startswith("yes") else "not_triggered"
        assert r.outcome == want and r.listed is True and r.requests == 1, r
        assert r.stopped_at_skill is (want == "triggered") and r.cost_usd == 0.01
        assert r.tool_uses == ((f"Skill:{SKILL}",) if want == "triggered" else ())
    assert analysis.variants["current"].recall.rate == 1.0
    assert analysis.variants["terse"].false_trigger_rate.rate == 0.0

    out = tmp_path / "out"
    lines = [TriggerRecord.model_validate_json(x) for x in (out / TRIGGER_RESULTS).read_text().splitlines()]
    assert sorted(r.run_id for r in lines) == sorted(r.run_id for r in seen)
    assert json.loads((out / "triggers.json").read_text())["skill"] == SKILL
    assert (out / "triggers.md").read_text().startswith(f"## Trigger accuracy: `{SKILL}`")

    assert rt.left() == [], "every container, network and volume of the run is removed"
    assert list(paths.work_root.iterdir()) == [], "and its run directory"


def test_each_query_and_run_has_one_session_id_in_every_variant(
    tmp_path: Path, paths: HostPaths, study: TriggerStudy
) -> None:
    rt = runtime()
    run_triggers(study, rt, options(tmp_path, paths))
    sessions: dict[tuple[str, str], set[str]] = {}
    for spec in AGENTS:
        command = spec.command
        session = command[command.index("--session-id") + 1]
        sessions.setdefault((_query(spec), session), set()).add(spec.name)
    expected = {paired_session_id(3, q, i) for q in QUERIES for i in range(2)}
    assert {session for _, session in sessions} == expected
    assert all(len(names) == 2 for names in sessions.values()), "the same session in both variants"


def test_a_run_whose_gateway_never_listens_could_not_be_measured_and_the_rest_go_on(
    tmp_path: Path, paths: HostPaths, study: TriggerStudy
) -> None:
    rt = runtime()
    broken: list[str] = []

    def gateway(spec: ContainerSpec, _rt: FakeRuntime) -> Outcome:
        if not broken:  # the first run's gateway dies at start
            broken.append(spec.name)
            return Outcome(exit_code=1, stderr=b"Traceback: no key\n")
        return SERVICE

    rt.behave("gateway", gateway)
    seen: list[TriggerRecord] = []
    run_triggers(study, rt, options(tmp_path, paths, on_run=seen.append, jobs=1))
    failed = [r for r in seen if r.outcome == "could_not_measure"]
    assert len(failed) == 1 and (failed[0].reason or "").startswith("infrastructure:"), failed
    assert "exited before listening" in (failed[0].reason or "")
    assert len(seen) == 12 and rt.left() == []


def test_a_real_run_without_a_key_stops_before_anything_is_made(
    tmp_path: Path, paths: HostPaths, study: TriggerStudy
) -> None:
    rt = runtime()
    with pytest.raises(PrerequisiteError, match="ANTHROPIC_API_KEY"):
        run_triggers(study, rt, options(tmp_path, paths, scripted=None, api_key=None))
    assert rt.left() == [] and not [p for p in paths.work_root.glob("*") if p.is_dir()]


# ------------------------------------------------------------------ on the shared resources


def test_a_set_up_that_fails_halfway_on_an_engine_that_cannot_list_is_undone(
    tmp_path: Path, paths: HostPaths, study: TriggerStudy
) -> None:
    """The scripted model dies before it listens, after the key, the variants' copies, the network and the
    scenario were made; and the engine cannot list by label. What the set-up made is removed by name, the
    run directory too, and the error is the set-up's own."""
    rt = runtime()
    rt.behave("scripted-api", Outcome(exit_code=1, stderr=b"Traceback: the scenario is not JSON\n"))
    rt.fail("labelled", times=None)
    made: list[str] = []
    real_create_volume = rt.create_volume

    def create_volume(name: str, labels: Mapping[str, str]) -> None:
        made.append(name)
        real_create_volume(name, labels)

    rt.create_volume = create_volume  # type: ignore[method-assign]
    with pytest.raises(InfraError, match="exited before listening"):
        run_triggers(study, rt, options(tmp_path, paths))
    assert len(made) >= 4, "positive control: the key, two copies and the scenario were made before it failed"
    assert rt.left() == [], "nothing the set-up made stays"
    assert list(paths.work_root.iterdir()) == [], "nor its run directory"


def test_the_scripted_models_log_is_kept_redacted(tmp_path: Path, paths: HostPaths, study: TriggerStudy) -> None:
    """What the scripted model logged is kept in the output directory, through the run's redactor: a key it
    saw (here: one a gateway echoed to it) never lands in a file."""
    rt = runtime()
    keys: list[str] = []

    def gateway(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        key = (runtime.mount_path(spec, roles.KEY_MOUNT) / "api-key").read_text()
        keys.append(key)
        scripted = next(c.spec.name for c in runtime.containers.values() if c.role == "scripted-api")
        runtime.append_log(scripted, f'{{"event": "unauthorized", "echo": "{key[::-1]}|{key}"}}\n'.encode())
        return SERVICE

    rt.behave("gateway", gateway)
    run_triggers(study, rt, options(tmp_path, paths))
    log = (tmp_path / "out" / SCRIPTED_LOG).read_text()
    assert keys and keys[0].startswith("sk-ant-test-"), "positive control: the gateways held the run's key"
    assert "listening" in log and log.count("[REDACTED]") == len(keys), "the log is kept, each key redacted"
    assert keys[0] not in log and keys[0][::-1] in log
