"""RunResources without Docker: each set-up step fails in turn and nothing made before it stays behind.

The engine here is a small test double of exactly the runtime methods RunResources calls, over an
in-memory set of labelled objects. (Keep it minimal: it should become tests/fakes.py's FakeRuntime.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError, InfraError, LockError, PrerequisiteError
from harness.experiment.events import NullEvents
from harness.experiment.resources import SCRIPTED_LOG, RunResources, RunSetup
from harness.experiment.upstream import Upstream
from harness.redact import Redactor
from harness.results.store import ExperimentDir
from harness.sandbox import roles
from harness.sandbox.labels import RUN, make_labels
from harness.sandbox.runtime import ContainerSpec, DockerObject, ExitInfo, ObjectKind, Removal
from harness.sandbox.uids import RoleUsers
from harness.study.config import Resources, load_study
from harness.study.lock import lock

KEY = "sk-ant-test-resources"
RUN_ID = "cafe0001"


class FakeEngine:
    """What RunResources calls on the runtime; ``fail`` names the call that raises (InfraError)."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.objects: dict[tuple[ObjectKind, str], dict[str, str]] = {}
        self.calls: list[str] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.fail == name:
            raise InfraError(f"injected: {name} failed")

    def create_network(self, name: str, labels: Mapping[str, str], *, internal: bool, isolated: bool = True) -> None:
        self._call("create_network")
        self.objects[("network", name)] = dict(labels)

    def create(self, spec: ContainerSpec, *, extra_networks: Iterable[str] = ()) -> str:
        self.objects[("container", spec.name)] = dict(spec.labels)  # a failed create can leave the container
        self._call("create")
        return spec.name

    def start(self, name: str) -> None:
        self._call("start")

    def logs(self, name: str, *, stdout: bool = True, stderr: bool = False, cap: int = 0) -> tuple[bytes, bool]:
        self.calls.append("logs")
        if self.fail == "listening":
            return b"Traceback: the scenario is not JSON\n", False
        return b'{"event": "listening", "port": 8080}\n', False

    def is_running(self, name: str) -> bool:
        return self.fail != "listening"

    def run(self, spec: ContainerSpec, *, deadline_s: float, output_cap: int) -> ExitInfo:
        self._call("run")  # like Engine.run, removes its container on every path
        ok = self.fail != "preflight"
        out = b'{"ok": true}\n' if ok else b'{"ok": false, "error": "the proxy refused the tunnel"}\n'
        return ExitInfo(0 if ok else 1, False, False, out, b"", False, 0.1)

    def remove_labelled(self, selector: Mapping[str, str]) -> Removal:
        self._call("remove_labelled")
        return self.remove_objects(
            [
                DockerObject(kind, name, labels)
                for (kind, name), labels in self.objects.items()
                if all(labels.get(k) == v for k, v in selector.items())
            ]
        )

    def remove_objects(self, objects: Iterable[DockerObject]) -> Removal:
        self.calls.append("remove_objects")
        return Removal([o for o in objects if self.objects.pop((o.kind, o.name), None) is not None], [])


@pytest.fixture
def setup(make_study: Any, tmp_path: Path) -> Callable[..., RunSetup]:
    files = make_study()
    lock(files.prereg)
    study = load_study(files.prereg)
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    users = RoleUsers(agent=(1000, 1000), sidecar=(1001, 1001), how="controller-user")
    profile = roles.make_profile(Resources(), "trial:test", "sidecar:test", users, None)

    def build(**kw: Any) -> RunSetup:
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
        }
        return RunSetup(**{**fields, **kw})

    return build


def _store(tmp_path: Path) -> ExperimentDir:
    return ExperimentDir(tmp_path / "out", Redactor([KEY]))


def _resources(engine: FakeEngine, s: RunSetup, tmp_path: Path, store: ExperimentDir | None = None) -> RunResources:
    return RunResources(engine, s, store or _store(tmp_path), NullEvents())  # type: ignore[arg-type]


Snapshot = tuple[list[str], set[tuple[str, str]]]


def _watch_teardown(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine) -> list[Snapshot]:
    """What existed when teardown began (files under the run directory, Docker objects): the positive
    control that the steps before the failure really made something."""
    seen: list[Snapshot] = []
    real = RunResources._tear_down

    def spy(self: RunResources) -> None:
        files = sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*")) if self.root.exists() else []
        seen.append((files, set(engine.objects)))
        real(self)

    monkeypatch.setattr(RunResources, "_tear_down", spy)
    return seen


def _fail_method(name: str, error: BaseException) -> Callable[[pytest.MonkeyPatch], None]:
    def apply(monkeypatch: pytest.MonkeyPatch) -> None:
        def boom(self: RunResources, *args: object) -> Any:
            raise error

        monkeypatch.setattr(RunResources, name, boom)

    return apply


def _no_injection(monkeypatch: pytest.MonkeyPatch) -> None:
    return


NETWORK = ("network", f"hx-{RUN_ID}-up")
SCRIPTED = ("container", f"hx-{RUN_ID}-scripted")
BEFORE_THE_NETWORK = {"owner", "secrets/api-key", "skill/SKILL.md"}

# (step, how it fails, the engine call that fails, files and objects the earlier steps made)
SCRIPTED_STEPS = [
    ("key file", _fail_method("_write_key", OSError("disk full")), None, {"owner"}, set()),
    ("network", _no_injection, "create_network", BEFORE_THE_NETWORK, set()),
    ("scripted create", _no_injection, "create", BEFORE_THE_NETWORK | {"scenario/scenario.json"}, {NETWORK, SCRIPTED}),
    ("scripted start", _no_injection, "start", BEFORE_THE_NETWORK | {"scenario/scenario.json"}, {NETWORK, SCRIPTED}),
    ("scripted listening", _no_injection, "listening", BEFORE_THE_NETWORK, {NETWORK, SCRIPTED}),
    ("interrupted", _fail_method("_make_network", KeyboardInterrupt()), None, BEFORE_THE_NETWORK, set()),
]


@pytest.mark.parametrize(
    ("step", "inject", "fail", "files", "objects"), SCRIPTED_STEPS, ids=[s[0] for s in SCRIPTED_STEPS]
)
def test_a_failed_step_undoes_every_step_before_it(
    setup: Callable[..., RunSetup],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
    inject: Callable[[pytest.MonkeyPatch], None],
    fail: str | None,
    files: set[str],
    objects: set[tuple[str, str]],
) -> None:
    engine = FakeEngine(fail=fail)
    seen = _watch_teardown(monkeypatch, engine)
    inject(monkeypatch)
    s = setup()
    with pytest.raises((HarnessError, OSError, KeyboardInterrupt)), _resources(engine, s, tmp_path):
        raise AssertionError("the body must not run when set-up fails")
    [(made_files, made_objects)] = seen
    assert files <= set(made_files), made_files
    assert made_objects == objects
    assert not (s.work_root / RUN_ID).exists(), "the run directory (and the key file in it) is gone"
    assert engine.objects == {}, "every Docker object the set-up made is gone"


def test_a_skill_changed_after_the_lock_check_undoes_the_key_file(
    setup: Callable[..., RunSetup], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = setup()
    (s.study.skill_dir / "SKILL.md").write_text("# Tidy\nSwapped after the lock check.\n")
    engine = FakeEngine()
    seen = _watch_teardown(monkeypatch, engine)
    with pytest.raises(LockError, match="changed after eval checked its lock"), _resources(engine, s, tmp_path):
        pass
    assert "secrets/api-key" in seen[0][0]
    assert not (s.work_root / RUN_ID).exists() and engine.objects == {}


def test_a_failed_library_copy_undoes_the_copies_made_before_it(
    setup: Callable[..., RunSetup], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def copies(root: Path) -> dict[str, Path]:
        (root / "library" / "first").mkdir(parents=True)
        raise OSError("the second copy failed")

    engine = FakeEngine()
    seen = _watch_teardown(monkeypatch, engine)
    s = setup(library_copies=copies)
    with pytest.raises(OSError, match="second copy"), _resources(engine, s, tmp_path):
        pass
    assert "library/first" in seen[0][0]
    assert not (s.work_root / RUN_ID).exists() and engine.objects == {}


@pytest.mark.parametrize(
    ("step", "route_kw", "fail", "error"),
    [
        ("extra CA unreadable", {"extra_ca": Path("/nonexistent/ca.pem")}, None, PrerequisiteError),
        ("upstream preflight", {}, "preflight", InfraError),
    ],
)
def test_a_real_runs_route_failure_undoes_the_run(
    setup: Callable[..., RunSetup],
    tmp_path: Path,
    step: str,
    route_kw: dict[str, Any],
    fail: str | None,
    error: type[Exception],
) -> None:
    engine = FakeEngine(fail=fail)
    s = setup(scenario=None, route=Upstream(url="https://api.example", **route_kw))
    with pytest.raises(error), _resources(engine, s, tmp_path):
        pass
    assert not (s.work_root / RUN_ID).exists() and engine.objects == {}
    assert ("create_network" in engine.calls) == (step == "upstream preflight")


def test_an_existing_run_directory_is_never_taken_over_or_removed(
    setup: Callable[..., RunSetup], tmp_path: Path
) -> None:
    s = setup()
    theirs = s.work_root / RUN_ID
    theirs.mkdir()
    (theirs / "keep").write_text("not this run's")
    engine = FakeEngine()
    with pytest.raises(FileExistsError), _resources(engine, s, tmp_path):
        pass
    assert (theirs / "keep").read_text() == "not this run's"
    assert not [c for c in engine.calls if not c.startswith("remove_")], engine.calls


def test_a_run_that_ran_is_torn_down_and_keeps_the_scripted_log(setup: Callable[..., RunSetup], tmp_path: Path) -> None:
    engine = FakeEngine()
    store = _store(tmp_path)
    s = setup()
    with _resources(engine, s, tmp_path, store) as site:
        assert site.key_file.read_text() == KEY and site.key_file.stat().st_mode & 0o777 == 0o400
        assert (site.skill_copy / "SKILL.md").is_file() and site.route_env == {} and site.route_mounts == ()
        assert site.upstream == f"http://hx-{RUN_ID}-scripted:{roles.SCRIPTED_PORT}"
        assert site.upstream_network == NETWORK[1] and set(engine.objects) == {NETWORK, SCRIPTED}
        engine.objects[("container", f"hx-{RUN_ID}-t1-agent")] = {RUN: RUN_ID}  # what a trial left
    assert not site.root.exists() and engine.objects == {}
    assert b"listening" in (store.root / SCRIPTED_LOG).read_bytes()


def test_teardown_runs_when_the_trials_raise(setup: Callable[..., RunSetup], tmp_path: Path) -> None:
    engine = FakeEngine()
    s = setup()
    with pytest.raises(KeyboardInterrupt), _resources(engine, s, tmp_path):
        raise KeyboardInterrupt
    assert not (s.work_root / RUN_ID).exists() and engine.objects == {}


def test_when_the_engine_cannot_list_what_the_run_made_is_removed_by_name(
    setup: Callable[..., RunSetup], tmp_path: Path
) -> None:
    engine = FakeEngine(fail="remove_labelled")
    s = setup()
    with _resources(engine, s, tmp_path):
        pass
    assert engine.objects == {} and "remove_objects" in engine.calls


def test_the_users_own_upstream_network_is_used_and_never_removed(
    setup: Callable[..., RunSetup], tmp_path: Path
) -> None:
    engine = FakeEngine(fail="remove_labelled")  # the by-name fallback must not name it either
    engine.objects[("network", "corp-net")] = {}
    s = setup(scenario=None, route=Upstream(url="https://llm.corp.example", network="corp-net"))
    with _resources(engine, s, tmp_path) as site:
        assert site.upstream_network == "corp-net" and site.upstream == "https://llm.corp.example"
    assert "create_network" not in engine.calls
    assert set(engine.objects) == {("network", "corp-net")}
