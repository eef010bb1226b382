"""An experiment's run resources (StudyResources) without Docker: each set-up step fails in turn and nothing
made before it stays behind.

The engine is :class:`tests.fakes.FakeRuntime`: every container and network the set-up makes is in it
until removed, so "nothing stays behind" is checked against what the runtime still holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError, InfraError, LockError, PrerequisiteError
from harness.experiment import upstream
from harness.experiment.events import NullEvents
from harness.experiment.resources import SCRIPTED_LOG, StudyResources, StudySetup
from harness.experiment.upstream import Upstream
from harness.redact import Redactor
from harness.results.store import ExperimentDir
from harness.sandbox import roles
from harness.sandbox.engineview import PROBE_ROLE
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import ContainerSpec
from harness.sandbox.uids import RoleUsers
from harness.study import prices
from harness.study.config import Resources, load_study
from harness.study.lock import lock
from tests.fakes import FakeRuntime, Outcome, listening

KEY = "sk-ant-test-resources"
RUN_ID = "cafe0001"
IMAGES = ("trial:test", "sidecar:test")
SCRIPTED_OK = Outcome(stdout=listening(), hold_s=math.inf)
PREFLIGHT_OK = Outcome(stdout=b'{"ok": true}\n')


def _runtime(fail: str | None = None) -> FakeRuntime:
    """The run's engine: a scripted API that listens, a preflight that passes, and ``fail``: the runtime
    call that raises (InfraError), or ``listening`` (the scripted API exits before it listens) or
    ``preflight`` (the upstream handshake fails). A failed ``create`` leaves its container, the worst
    case teardown must handle (see :meth:`FakeRuntime.fail`)."""
    runtime = FakeRuntime({"scripted-api": SCRIPTED_OK, "preflight": PREFLIGHT_OK}, images=IMAGES)
    if fail == "listening":
        runtime.behave("scripted-api", Outcome(exit_code=1, stdout=b"Traceback: the scenario is not JSON\n"))
    elif fail == "preflight":
        runtime.behave("preflight", Outcome(exit_code=1, stdout=b'{"ok": false, "error": "the proxy refused"}\n'))
    elif fail == "create":  # the scripted API's: a volume's filler is created before it
        runtime.fail("create", f"hx-{RUN_ID}-scripted", after=True)
    elif fail == "start":  # the scripted API's: the engine probe's container starts before it
        runtime.fail("start", f"hx-{RUN_ID}-scripted", times=None)
    elif fail == "blind":  # the engine does not see the controller's files (issue 24)
        runtime.behave(PROBE_ROLE, Outcome(exit_code=1, stderr=b"cat: /workspace/engine-probe-token: No such file\n"))
    elif fail is not None:
        runtime.fail(fail, times=None)
    return runtime


def _objects(runtime: FakeRuntime) -> set[tuple[str, str]]:
    """Every container, network and volume still there, labelled or not."""
    return {(o.kind, o.name) for o in runtime.left()}


@pytest.fixture
def setup(make_study: Any, tmp_path: Path) -> Callable[..., StudySetup]:
    files = make_study()
    lock(files.prereg)
    study = load_study(files.prereg)
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    users = RoleUsers(agent=(1000, 1000), sidecar=(1001, 1001), how="controller-user")
    profile = roles.make_profile(Resources(), "trial:test", "sidecar:test", users, None)

    def build(**kw: Any) -> StudySetup:
        fields: dict[str, Any] = {
            "run_id": RUN_ID,
            "work_root": work,
            "labels": make_labels(RUN_ID, role="run", ttl_s=3600),
            "profile": profile,
            "key": KEY,
            "key_owner": (1001, 1001),
            "study": study,
            "route": Upstream(url="https://api.example"),
            "scenario": b'{"tasks": {}}',
            "gateway_env": prices.gateway_env(prices.effective(study.prereg.execution)),  # as the experiment's
        }
        return StudySetup(**{**fields, **kw})

    return build


def _store(tmp_path: Path) -> ExperimentDir:
    return ExperimentDir(tmp_path / "out", Redactor([KEY]))


def _resources(
    runtime: FakeRuntime, s: StudySetup, tmp_path: Path, store: ExperimentDir | None = None
) -> StudyResources:
    return StudyResources(runtime, s, store or _store(tmp_path), NullEvents().message)


Snapshot = tuple[list[str], set[tuple[str, str]]]


def _watch_teardown(monkeypatch: pytest.MonkeyPatch, runtime: FakeRuntime) -> list[Snapshot]:
    """What existed when teardown began (files under the run directory, Docker objects): the positive
    control that the steps before the failure really made something."""
    seen: list[Snapshot] = []
    real = StudyResources._tear_down

    def spy(self: StudyResources) -> None:
        files = sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*")) if self.root.exists() else []
        seen.append((files, _objects(runtime)))
        real(self)

    monkeypatch.setattr(StudyResources, "_tear_down", spy)
    return seen


def _fail_method(name: str, error: BaseException) -> Callable[[pytest.MonkeyPatch], None]:
    def apply(monkeypatch: pytest.MonkeyPatch) -> None:
        def boom(self: StudyResources, *args: object) -> Any:
            raise error

        monkeypatch.setattr(StudyResources, name, boom)

    return apply


def _no_injection(monkeypatch: pytest.MonkeyPatch) -> None:
    return


NETWORK = ("network", f"hx-{RUN_ID}-up")
SCRIPTED = ("container", f"hx-{RUN_ID}-scripted")
KEY_VOLUME = ("volume", f"hx-{RUN_ID}-key")
VOLUMES = {KEY_VOLUME, ("volume", f"hx-{RUN_ID}-skill")}
SCENARIO = ("volume", f"hx-{RUN_ID}-scenario")
BEFORE_THE_NETWORK = {"owner", "skill/SKILL.md"}
SCRIPTED_UP = VOLUMES | {NETWORK, SCENARIO, SCRIPTED}

# (step, how it fails, the engine call that fails, files and objects the earlier steps made)
SCRIPTED_STEPS = [
    ("key volume", _no_injection, "create_volume", {"owner"}, set()),
    ("key fill", _no_injection, "put_archive", {"owner"}, {KEY_VOLUME}),  # its filler container went at once
    ("engine cannot see", _no_injection, "blind", {"owner", "skill/SKILL.md"}, VOLUMES),
    ("network", _no_injection, "create_network", BEFORE_THE_NETWORK, VOLUMES),
    ("scripted create", _no_injection, "create", BEFORE_THE_NETWORK, SCRIPTED_UP),
    ("scripted start", _no_injection, "start", BEFORE_THE_NETWORK, SCRIPTED_UP),
    ("scripted listening", _no_injection, "listening", BEFORE_THE_NETWORK, SCRIPTED_UP),
    ("interrupted", _fail_method("_make_network", KeyboardInterrupt()), None, BEFORE_THE_NETWORK, VOLUMES),
]


@pytest.mark.parametrize(
    ("step", "inject", "fail", "files", "objects"), SCRIPTED_STEPS, ids=[s[0] for s in SCRIPTED_STEPS]
)
def test_a_failed_step_undoes_every_step_before_it(
    setup: Callable[..., StudySetup],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
    inject: Callable[[pytest.MonkeyPatch], None],
    fail: str | None,
    files: set[str],
    objects: set[tuple[str, str]],
) -> None:
    runtime = _runtime(fail)
    seen = _watch_teardown(monkeypatch, runtime)
    inject(monkeypatch)
    s = setup()
    with pytest.raises((HarnessError, OSError, KeyboardInterrupt)), _resources(runtime, s, tmp_path):
        raise AssertionError("the body must not run when set-up fails")
    [(made_files, made_objects)] = seen
    assert files <= set(made_files), made_files
    assert made_objects == objects
    assert not (s.work_root / RUN_ID).exists(), "the run directory is gone"
    assert runtime.left() == [], "every Docker object the set-up made is gone, volumes included"


def test_a_skill_changed_after_the_lock_check_undoes_the_key_volume(
    setup: Callable[..., StudySetup], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = setup()
    (s.study.skill_dir / "SKILL.md").write_text("# Tidy\nSwapped after the lock check.\n")
    runtime = _runtime()
    seen = _watch_teardown(monkeypatch, runtime)
    with pytest.raises(LockError, match="changed after eval checked its lock"), _resources(runtime, s, tmp_path):
        pass
    assert KEY_VOLUME in seen[0][1]
    assert not (s.work_root / RUN_ID).exists() and runtime.left() == []


def test_a_failed_library_copy_undoes_the_copies_made_before_it(
    setup: Callable[..., StudySetup], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def copies(root: Path) -> dict[str, Path]:
        (root / "library" / "first").mkdir(parents=True)
        raise OSError("the second copy failed")

    runtime = _runtime()
    seen = _watch_teardown(monkeypatch, runtime)
    s = setup(skill_copies=copies)
    with pytest.raises(OSError, match="second copy"), _resources(runtime, s, tmp_path):
        pass
    assert "library/first" in seen[0][0]
    assert not (s.work_root / RUN_ID).exists() and runtime.left() == []


@pytest.mark.parametrize(
    ("step", "route_kw", "fail", "error"),
    [
        ("extra CA unreadable", {"extra_ca": Path("/nonexistent/ca.pem")}, None, PrerequisiteError),
        ("upstream preflight", {}, "preflight", InfraError),
    ],
)
def test_a_real_runs_route_failure_undoes_the_run(
    setup: Callable[..., StudySetup],
    tmp_path: Path,
    step: str,
    route_kw: dict[str, Any],
    fail: str | None,
    error: type[Exception],
) -> None:
    runtime = _runtime(fail)
    s = setup(scenario=None, route=Upstream(url="https://api.example", **route_kw))
    with pytest.raises(error), _resources(runtime, s, tmp_path):
        pass
    assert not (s.work_root / RUN_ID).exists() and runtime.left() == []
    assert bool(runtime.targets("create_network")) == (step == "upstream preflight")


def test_an_existing_run_directory_is_never_taken_over_or_removed(
    setup: Callable[..., StudySetup], tmp_path: Path
) -> None:
    s = setup()
    theirs = s.work_root / RUN_ID
    theirs.mkdir()
    (theirs / "keep").write_text("not this run's")
    runtime = _runtime()
    with pytest.raises(FileExistsError), _resources(runtime, s, tmp_path):
        pass
    assert (theirs / "keep").read_text() == "not this run's"
    # teardown only: it lists what carries the run's label (nothing) and makes nothing
    assert {c.method for c in runtime.calls} <= {"labelled"}, runtime.calls


def test_a_run_that_ran_is_torn_down_and_keeps_the_scripted_log(
    setup: Callable[..., StudySetup], tmp_path: Path
) -> None:
    runtime = _runtime()
    store = _store(tmp_path)
    s = setup()
    with _resources(runtime, s, tmp_path, store) as site:
        key, (uid, gid, mode) = runtime.volume_file(site.key_volume, "api-key")
        assert (key, uid, gid, mode) == (KEY.encode(), 1001, 1001, 0o400), "the sidecars' alone"
        skill, (uid, _, mode) = runtime.volume_file(site.skill_volume, "SKILL.md")
        assert skill.startswith(b"#") and (uid, mode) == (0, 0o444), "root's, read-only"
        assert not list(site.root.rglob("api-key")), "the key is in its volume only, never in the run directory"
        price_table = prices.gateway_env(prices.effective(s.study.prereg.execution))
        assert site.gateway_env == price_table and site.route_mounts == (), "no route: only the run's price table"
        assert site.upstream == f"http://hx-{RUN_ID}-scripted:{roles.SCRIPTED_PORT}"
        assert site.upstream_network == NETWORK[1] and _objects(runtime) == SCRIPTED_UP
        left = roles.verify_spec(
            s.profile, name=f"hx-{RUN_ID}-t1-verify", labels=make_labels(RUN_ID, role="trial", ttl_s=60),
            verify_tree=tmp_path, verify_cmd="true", timeout_s=1,
        )  # fmt: skip
        runtime.create(left)  # what a trial left
    assert not site.root.exists() and runtime.left() == []
    assert b"listening" in (store.root / SCRIPTED_LOG).read_bytes()


def test_teardown_runs_when_the_trials_raise(setup: Callable[..., StudySetup], tmp_path: Path) -> None:
    runtime = _runtime()
    s = setup()
    with pytest.raises(KeyboardInterrupt), _resources(runtime, s, tmp_path):
        raise KeyboardInterrupt
    assert not (s.work_root / RUN_ID).exists() and runtime.left() == []


def test_when_the_engine_cannot_list_what_the_run_made_is_removed_by_name(
    setup: Callable[..., StudySetup], tmp_path: Path
) -> None:
    runtime = _runtime("labelled")
    s = setup()
    with _resources(runtime, s, tmp_path):
        pass
    assert runtime.left() == []
    fillers = [f"hx-{RUN_ID}-{v}-fill" for v in ("key", "skill", "scenario")]  # each removed once it filled
    probe = f"hx-{RUN_ID}-engine-probe"  # removed once it ran
    assert runtime.targets("remove_container") == [*fillers[:2], probe, fillers[2], SCRIPTED[1]]
    assert runtime.targets("remove_network") == [NETWORK[1]]
    assert sorted(runtime.targets("remove_volume")) == sorted(n for _, n in {*VOLUMES, SCENARIO})


def test_the_users_own_upstream_network_is_used_and_never_removed(
    setup: Callable[..., StudySetup], tmp_path: Path
) -> None:
    runtime = _runtime("labelled")  # the by-name fallback must not name it either
    runtime.create_network("corp-net", {}, internal=False)  # the user's, unlabelled
    runtime.calls.clear()
    s = setup(scenario=None, route=Upstream(url="https://llm.corp.example", network="corp-net"))
    with _resources(runtime, s, tmp_path) as site:
        assert site.upstream_network == "corp-net" and site.upstream == "https://llm.corp.example"
    assert not runtime.targets("create_network")
    assert _objects(runtime) == {("network", "corp-net")}


def test_a_proxys_password_reaches_the_sidecars_as_a_file_of_theirs_never_an_environment_variable(
    setup: Callable[..., StudySetup], tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    route = Upstream(url="https://api.example", proxy="http://alice:s3cret@proxy:3128", extra_ca=ca)
    runtime = _runtime()
    seen: list[ContainerSpec] = []

    def record_preflight(spec: ContainerSpec, _rt: FakeRuntime) -> Outcome:
        seen.append(spec)
        return PREFLIGHT_OK

    runtime.behave("preflight", record_preflight)
    s = setup(scenario=None, route=route)
    with _resources(runtime, s, tmp_path) as site:
        (mount,) = site.route_mounts
        assert mount.target == upstream.ROUTE_MOUNT and mount.read_only
        proxy, (uid, gid, mode) = runtime.volume_file(mount.volume, upstream.PROXY_FILE.rpartition("/")[2])
        assert (proxy, uid, gid, mode) == (route.proxy.encode(), 1001, 1001, 0o400), "the sidecars' alone, as the key"
        _, (uid, _, mode) = runtime.volume_file(mount.volume, upstream.CA_MOUNT.rpartition("/")[2])
        assert (uid, mode) == (0, 0o444)
        assert site.gateway_env["GATEWAY_PROXY_FILE"] == upstream.PROXY_FILE
        assert "s3cret" not in repr(site.gateway_env)
        # the preflight container got the file, not the password
        (preflight,) = seen
        assert "s3cret" not in repr(preflight.env) and mount in preflight.volumes
    assert runtime.left() == []
