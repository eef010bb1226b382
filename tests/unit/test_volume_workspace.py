"""Volume workspaces without Docker (harness/trial/workspace.py, harness/trial/watchdog.py): what the
controller reads back (:func:`read_out_archive`), the knob, the volumes' names, the scratch fill and its
overlays on the FakeRuntime, the in-engine watchdog (:class:`EngineWatchdog` on the fake, and
:data:`WATCH_SCRIPT` run for real with this machine's ``sh``, GNU ``find``, ``awk`` and ``df``).

collect.sh's volume mode (its listing of the upper directory) is held to its full mode by
tests/integration/test_volume_workspaces.py, on the real engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError, InfraError, Interrupted
from harness.sandbox import lifecycle, roles, volumes
from harness.sandbox.labels import RUN, make_labels
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import ContainerSpec, DockerObject, Limits, VolumeDir, VolumeMount
from harness.trial.basetrees import KIND_VARIABLE, BaseTree, EngineSide, kind_from_env
from harness.trial.watchdog import WATCH_SCRIPT, EngineWatchdog, Trip, WorkspaceLimit, engine_command
from harness.trial.workspace import (
    OUT_FILES,
    Place,
    TrialVolumes,
    VolumeWorkspace,
    prepare_volumes,
    read_out_archive,
)
from tests.fakes import SERVICE, WHITEOUT, FakeRuntime, Outcome, collect

TRIAL_IMAGE, SIDECAR_IMAGE = "harness-trial:fake", "harness-sidecar:fake"
RUN_ID = "vw"
LABELS = make_labels(RUN_ID, role="trial", trial_id="t.baseline.0", ttl_s=600)
PROFILE = roles.Profile(TRIAL_IMAGE, SIDECAR_IMAGE, Limits(), user="1000:1000", sidecar_user="1000:1000")

# ------------------------------------------------------------------ read_out_archive


@dataclass(frozen=True)
class Member:
    name: str
    kind: bytes = tarfile.REGTYPE
    data: bytes = b""
    link: str = ""


def _tar(*members: Member) -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.linkname, info.mode = m.kind, m.link, 0o644
            if m.kind == tarfile.REGTYPE:
                info.size = len(m.data)
                tf.addfile(info, io.BytesIO(m.data))
            else:
                tf.addfile(info)
    return bio.getvalue()


def test_only_regular_files_named_like_an_output_are_read() -> None:
    tar = _tar(
        Member("out", tarfile.DIRTYPE),
        Member("out/status", data=b"ok\n"),
        Member("out/patch.diff", tarfile.SYMTYPE, link="status"),
        Member("out/numstat", tarfile.LNKTYPE, link="out/status"),
        Member("out/raw", tarfile.DIRTYPE),
        Member("out/raw/x", data=b"inside a directory named raw"),
        Member("out/special", tarfile.FIFOTYPE),
        Member("out/nested", data=b""),
        Member("out/add.err", data=b"not an output the controller reads"),
        Member("out/sub/status", data=b"not at the top"),
    )
    assert read_out_archive(tar, 1 << 20) == {"status": b"ok\n", "nested": b""}


def test_the_archives_names_may_come_with_or_without_their_directory() -> None:
    tar = _tar(Member("./status", data=b"ok\n"), Member("raw", data=b"r"), Member("out/numstat", data=b"n"))
    assert read_out_archive(tar, 10) == {"status": b"ok\n", "raw": b"r", "numstat": b"n"}


def test_a_name_given_twice_keeps_the_first() -> None:
    tar = _tar(Member("out/status", data=b"ok\n"), Member("out/status", data=b"planted\n"))
    assert read_out_archive(tar, 10) == {"status": b"ok\n"}


@pytest.mark.parametrize("name", sorted(OUT_FILES))
def test_each_output_is_capped(name: str) -> None:
    patch_cap = 100
    cap = OUT_FILES[name] or patch_cap + 1
    tar = _tar(Member(f"out/{name}", data=b"x" * (cap + 7)), Member("out/status" if name != "status" else "out/raw"))
    got = read_out_archive(tar, patch_cap)
    assert got[name] == b"x" * cap, (name, len(got[name]))


def test_a_cut_archive_yields_what_arrived_whole_and_nothing_else() -> None:
    tar = _tar(
        Member("out/nested", data=b"n" * 700),
        Member("out/numstat", data=b"1\t0\tcalc.py\0" * 300),
        Member("out/patch.diff", data=b"diff --git a/calc.py b/calc.py\n" * 100),
        Member("out/status", data=b"ok\n"),
    )
    whole = read_out_archive(tar, 1 << 20)
    assert set(whole) == {"nested", "numstat", "patch.diff", "status"}
    seen: set[str] = set()
    for cut in range(0, len(tar), 97):
        part = read_out_archive(tar[:cut], 1 << 20)
        assert all(whole[k] == v for k, v in part.items()), f"cut at {cut}: a member arrived partly"
        seen.update(part)
    assert seen == set(whole), "positive control: each member arrives whole at some cut"
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        at = tf.getmember("out/status").offset_data
    assert "status" not in read_out_archive(tar[: at + 2], 1 << 20), "two of its three bytes: not whole"
    assert read_out_archive(tar[: at + 3], 1 << 20) == whole, "all three: whole (the padding after is not needed)"


@pytest.mark.parametrize("data", [None, b"", b"not a tar at all " * 64])
def test_no_archive_or_garbage_is_no_outputs(data: bytes | None) -> None:
    assert read_out_archive(data, 1 << 20) == {}


# --------------------------------------------------------------- the knob and the names


@pytest.mark.parametrize(
    ("value", "kind"),
    [("volume", "volume"), ("overlay", "overlay"), ("copy", "copy"), (" volume\n", "volume"), ("", None)],
)
def test_the_workspace_kind_knob(value: str, kind: str | None) -> None:
    assert kind_from_env({KIND_VARIABLE: value}) == kind
    assert kind_from_env({}) is None


@pytest.mark.parametrize("value", ["Volume", "bind", "overlay,copy", "volumes"])
def test_a_bad_workspace_kind_is_a_config_error_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match=KIND_VARIABLE):
        kind_from_env({KIND_VARIABLE: value})


def test_a_trials_volumes_are_named_from_its_prefix_and_removed_overlays_first() -> None:
    vols = TrialVolumes.of(TrialNames("r1", "fix-b0-a1"))
    assert vols == ("hx-r1-fix-b0-a1-scratch", "hx-r1-fix-b0-a1-ws", "hx-r1-fix-b0-a1-vf")
    assert (vols.scratch, vols.workspace, vols.verify) == vols
    assert vols.objects() == [
        DockerObject("volume", "hx-r1-fix-b0-a1-ws"),
        DockerObject("volume", "hx-r1-fix-b0-a1-vf"),
        DockerObject("volume", "hx-r1-fix-b0-a1-scratch"),
    ]


# --------------------------------------------------------------- the scratch fill


@dataclass
class Side:
    runtime: FakeRuntime
    side: EngineSide
    base: BaseTree
    root: Path
    vols: TrialVolumes

    def prepare(self, mountpoint: tuple[str, ...] = (), owner: tuple[int, int] = (1234, 5678)) -> VolumeWorkspace:
        """The trial's workspace of the volume kind, made (its files owned by ``owner``)."""
        profile = dataclasses.replace(PROFILE, user=f"{owner[0]}:{owner[1]}")
        place = Place(self.runtime, profile, TrialNames(RUN_ID, "trial"), LABELS, contextlib.nullcontext)
        ws = VolumeWorkspace(place, self.side, self.root)
        ws.make(self.base, mountpoint)
        return ws

    def trial_volumes(self) -> list[str]:
        return sorted(n for n in self.runtime.volumes if n != self.base.volume)


@pytest.fixture
def side(tmp_path: Path) -> Iterator[Side]:
    runtime = FakeRuntime(images=[TRIAL_IMAGE, SIDECAR_IMAGE])
    template = tmp_path / "template"
    (template / "src").mkdir(parents=True)
    (template / "src" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (template / "README.md").write_text("calc\n")
    template.chmod(0o750)
    subprocess.run(["git", "init", "-q", str(template)], check=True)
    subprocess.run(["git", "-C", str(template), "add", "-A"], check=True)
    base_volume = f"hx-{RUN_ID}-base-0123456789ab"
    run_labels = make_labels(RUN_ID, role="run", ttl_s=600)
    volumes.make(runtime, base_volume, volumes.tar_tree(template), image=SIDECAR_IMAGE, labels=run_labels)
    base = BaseTree(tmp_path / "checkout", template, template / ".git", base_volume, 2)
    runtime.calls.clear()  # the run's base volume is not the trial's
    yield Side(
        runtime,
        EngineSide(runtime, SIDECAR_IMAGE, run_labels, RUN_ID),
        base,
        tmp_path / "run" / "trial",
        TrialVolumes.of(TrialNames(RUN_ID, "trial")),
    )
    lifecycle.remove_labelled(runtime, {RUN: RUN_ID})


def test_the_scratch_fill_makes_every_directory_with_its_owner_and_the_overlays_stand_on_it(side: Side) -> None:
    ws = side.prepare(mountpoint=(".claude", "skills", "careful"))
    assert ws.kind == "volume" and ws.volumes == side.vols
    assert ws.agent_tree == side.vols.workspace and ws.verify_tree == side.vols.verify
    assert not side.root.exists(), "nothing of a volume trial is a path of the controller's"
    scratch = side.runtime.volumes[side.vols.scratch]
    owner, top = (1234, 5678), 0o750
    assert scratch.meta == {
        "upper": (*owner, top),
        "work": (0, 0, 0o700),
        "verify-upper": (*owner, top),
        "verify-work": (0, 0, 0o700),
        "out": (*owner, 0o755),
        "upper/.claude": (*owner, 0o755),
        "upper/.claude/skills": (*owner, 0o755),
        "upper/.claude/skills/careful": (*owner, 0o755),
    }, "the merged roots take the template root's mode; the skill's mount point is the agent's"
    base = VolumeDir(side.base.volume or "")
    assert side.runtime.volumes[side.vols.workspace].overlay == (
        base,
        VolumeDir(side.vols.scratch, "upper"),
        VolumeDir(side.vols.scratch, "work"),
    )
    assert side.runtime.volumes[side.vols.verify].overlay == (
        base,
        VolumeDir(side.vols.scratch, "verify-upper"),
        VolumeDir(side.vols.scratch, "verify-work"),
    )
    for name in side.vols:
        assert side.runtime.volumes[name].labels == LABELS, "teardown finds them by the trial's labels"
    assert side.runtime.containers == {}, "the filler container is gone"
    assert side.runtime.targets("put_archive") == [f"{side.vols.scratch}-fill"], "one fill"


def test_without_a_skill_the_scratch_holds_only_its_directories(side: Side) -> None:
    side.prepare()
    assert sorted(side.runtime.volumes[side.vols.scratch].meta) == [
        "out",
        "upper",
        "verify-upper",
        "verify-work",
        "work",
    ]


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda t: (t / ".claude").write_text("a file"), ".claude"),
        (lambda t: (t / ".claude").symlink_to("/etc"), ".claude"),
        (lambda t: ((t / ".claude").mkdir(), (t / ".claude" / "skills").write_text("x")), ".claude/skills"),
        (lambda t: ((t / ".claude" / "skills").mkdir(parents=True), (t / ".claude/skills/careful").symlink_to(".")),
         ".claude/skills/careful"),
    ],
    ids=["file", "symlink", "file-below", "symlink-at-the-end"],
)  # fmt: skip
def test_a_mount_point_that_is_not_a_directory_in_the_base_is_refused_before_any_volume(
    side: Side, make: Callable[[Path], object], named: str
) -> None:
    make(side.base.template)
    with pytest.raises(InfraError, match=f"cannot mount the skill: {named} exists in the base and is not a directory"):
        side.prepare(mountpoint=(".claude", "skills", "careful"))
    assert side.trial_volumes() == []


def test_a_base_tree_without_a_volume_is_refused(side: Side) -> None:
    with pytest.raises(InfraError, match="needs its base tree in a volume"):
        prepare_volumes(
            side.side,
            BaseTree(side.base.checkout, side.base.template, side.base.index),
            side.vols,
            {},
            (1, 1),
        )
    assert side.trial_volumes() == []


# ------------------------------------------------- the layout on the fake, as on the engine


def _container(name: str, *mounts: VolumeMount, command: tuple[str, ...] = ("true",)) -> ContainerSpec:
    return ContainerSpec(
        name=f"hx-{RUN_ID}-{name}",
        image=TRIAL_IMAGE,
        command=command,
        labels=LABELS,
        user=PROFILE.user,
        volumes=mounts,
        network="none",
    )


def test_an_agents_writes_land_in_the_scratch_upper_and_collect_makes_verify_base_plus_patch(
    side: Side, tmp_path: Path
) -> None:
    side.prepare()
    vols, base_volume = side.vols, side.base.volume or ""

    def edits(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        ws = runtime.mount_path(spec, "/workspace")
        (ws / "src").mkdir()
        (ws / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        (ws / "NEW.md").write_text("new\n")
        return Outcome()

    side.runtime.behave(f"hx-{RUN_ID}-agent", edits)
    lifecycle.run(
        side.runtime, _container("agent", VolumeMount(vols.workspace, "/workspace", read_only=False)), deadline_s=60
    )
    upper = side.runtime.volumes[vols.scratch].path / "upper"
    assert sorted(p.relative_to(upper).as_posix() for p in upper.rglob("*")) == ["NEW.md", "src", "src/calc.py"]

    spec = roles.collect_volume_spec(
        PROFILE,
        name=f"hx-{RUN_ID}-collect",
        labels=LABELS,
        base_volume=base_volume,
        workspace_volume=vols.workspace,
        scratch_volume=vols.scratch,
        verify_volume=vols.verify,
        protected=("README.md",),
        patch_cap=1 << 20,
    )
    side.runtime.behave("collect", collect)
    run = lifecycle.run(side.runtime, spec, deadline_s=60, archive="/trial/out", archive_cap=16 << 20)
    out = read_out_archive(run.archive, 1 << 20)
    assert run.exit_code == 0 and out["status"] == b"ok\n"
    assert b"+    return a + b" in out["patch.diff"] and b"NEW.md" in out["patch.diff"]
    verify = side.runtime.merged(vols.verify, tmp_path / "verify")
    assert (verify / "src" / "calc.py").read_text().endswith("a + b\n") and (verify / "NEW.md").is_file()
    assert not (verify / ".git").exists() and (verify / "README.md").read_text() == "calc\n"
    verify_upper = side.runtime.volumes[vols.scratch].path / "verify-upper"
    written = sorted(p.relative_to(verify_upper).as_posix() for p in verify_upper.rglob("*"))
    assert written == [f"{WHITEOUT}.git", "NEW.md", "src", "src/calc.py"], "only what changed is written through"
    base = side.runtime.merged(base_volume, tmp_path / "base")
    assert (base / "src" / "calc.py").read_text().endswith("a - b\n") and (base / ".git").is_dir(), "base untouched"
    assert side.runtime.containers == {}


def test_collect_with_its_scratch_read_only_writes_no_status(side: Side) -> None:
    side.prepare()
    vols = side.vols
    spec = roles.collect_volume_spec(
        PROFILE,
        name=f"hx-{RUN_ID}-collect",
        labels=LABELS,
        base_volume=side.base.volume or "",
        workspace_volume=vols.workspace,
        scratch_volume=vols.scratch,
        verify_volume=vols.verify,
        protected=(),
        patch_cap=1 << 20,
    )
    ro = tuple(VolumeMount(v.volume, v.target, read_only=True) if v.target == "/trial" else v for v in spec.volumes)
    side.runtime.behave("collect", collect)
    run = lifecycle.run(
        side.runtime, dataclasses.replace(spec, volumes=ro), deadline_s=60, archive="/trial/out", archive_cap=1 << 20
    )
    assert run.exit_code == 3 and b"not a writable directory" in run.stderr
    assert "status" not in read_out_archive(run.archive, 1 << 20)


def test_an_overlay_whose_upper_is_gone_does_not_start_and_a_volume_in_use_stays(side: Side) -> None:
    side.prepare()
    vols = side.vols
    (side.runtime.volumes[vols.scratch].path / "upper").rmdir()
    spec = _container("agent", VolumeMount(vols.workspace, "/workspace", read_only=False))
    with pytest.raises(InfraError, match="error while mounting volume"):
        lifecycle.run(side.runtime, spec, deadline_s=60)
    assert side.runtime.containers == {}, "run removes the container that did not start"
    holder = _container("holder", VolumeMount(vols.verify, "/workspace", read_only=False))
    side.runtime.create(holder)
    removal = lifecycle.remove_objects(side.runtime, vols.objects())
    assert len(removal.errors) == 1 and "in use" in removal.errors[0] and vols.verify in removal.errors[0]
    assert side.trial_volumes() == [vols.verify]
    lifecycle.remove_objects(
        side.runtime, [DockerObject("container", holder.name), DockerObject("volume", vols.verify)]
    )
    assert side.trial_volumes() == []


# --------------------------------------------------------------- engine_command


def test_the_watch_command_is_the_script_and_its_six_arguments() -> None:
    limit = WorkspaceLimit(max_bytes=4096, max_files=12, max_depth=5, min_free_bytes=1025, interval_s=2.5)
    argv = engine_command("/trial/upper", limit, 3)
    assert argv == ("sh", "-c", WATCH_SCRIPT, "watch", "/trial/upper", "12", "4096", "5", "2", "2.5")


@pytest.mark.parametrize(
    ("min_free", "kib"), [(0, "0"), (1, "1"), (1023, "1"), (1024, "1"), (1025, "2"), (3 << 20, "3072")]
)
def test_the_free_space_floor_is_in_kib_rounded_up(min_free: int, kib: str) -> None:
    assert engine_command("/u", WorkspaceLimit(min_free_bytes=min_free), 0)[8] == kib


@pytest.mark.parametrize(("max_depth", "base_depth", "depth"), [(5, 3, "5"), (5, 9, "9"), (5, 5, "5"), (100, 0, "100")])
def test_the_depth_bound_is_never_below_the_bases_own(max_depth: int, base_depth: int, depth: str) -> None:
    assert engine_command("/u", WorkspaceLimit(max_depth=max_depth), base_depth)[7] == depth


@pytest.mark.parametrize(("interval", "text"), [(1.0, "1"), (0.01, "0.1"), (0.0, "0.1"), (0.25, "0.25")])
def test_the_interval_has_a_floor(interval: float, text: str) -> None:
    assert engine_command("/u", WorkspaceLimit(interval_s=interval), 0)[9] == text


# --------------------------------------------------------------- WATCH_SCRIPT, for real

HUGE_FLOOR = 1 << 62
"""A free-space floor no disk meets: the script then exits 4 once a walk crossed nothing."""


def _watch(upper: Path, limit: WorkspaceLimit, base_depth: int = 0) -> tuple[int, str]:
    run = subprocess.run(
        engine_command(str(upper), limit, base_depth),
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"},
    )
    return run.returncode, run.stdout


def _limit(**kw: Any) -> WorkspaceLimit:
    fields: dict[str, Any] = {"max_files": 1000, "max_bytes": 1 << 40, "max_depth": 100, "min_free_bytes": HUGE_FLOOR}
    return WorkspaceLimit(**{**fields, "interval_s": 0.1, **kw})


@pytest.fixture
def upper(tmp_path: Path) -> Path:
    up = tmp_path / "upper"
    up.mkdir()
    return up


def test_the_script_trips_on_files_past_the_bound_not_at_it(upper: Path) -> None:
    for i in range(5):
        (upper / f"f{i}").write_text("x")
    assert _watch(upper, _limit(max_files=4)) == (3, "files\n")
    assert _watch(upper, _limit(max_files=5)) == (4, "free\n"), "five entries are within a bound of five"


def test_the_script_counts_an_entry_whose_name_holds_a_newline_once(upper: Path) -> None:
    (upper / "a\nb\nc").write_text("x")
    assert _watch(upper, _limit(max_files=1)) == (4, "free\n")
    assert _watch(upper, _limit(max_files=0)) == (3, "files\n")


def test_the_script_trips_on_depth_past_the_bound_or_the_bases(upper: Path) -> None:
    (upper / "a" / "b" / "c" / "d").mkdir(parents=True)
    (upper / "a" / "b" / "c" / "d" / "file").write_text("a file does not deepen")
    assert _watch(upper, _limit(max_depth=3)) == (3, "depth\n")
    assert _watch(upper, _limit(max_depth=4)) == (4, "free\n")
    assert _watch(upper, _limit(max_depth=2), base_depth=4) == (4, "free\n"), "the base's own depth is allowed"


def test_the_script_trips_on_allocated_bytes_past_the_bound(upper: Path) -> None:
    (upper / "big").write_bytes(os.urandom(256 << 10))
    (upper / "dir").mkdir()
    used = sum(os.lstat(p).st_blocks * 512 for p in upper.rglob("*"))
    assert used >= 256 << 10, "positive control: the data is allocated"
    assert _watch(upper, _limit(max_bytes=used - 1)) == (3, "bytes\n")
    assert _watch(upper, _limit(max_bytes=used)) == (4, "free\n")


def test_the_script_stops_on_low_free_space_and_watches_on_otherwise(upper: Path) -> None:
    (upper / "f").write_text("x")
    assert _watch(upper, _limit()) == (4, "free\n")
    with subprocess.Popen(engine_command(str(upper), _limit(min_free_bytes=0), 0), stdout=subprocess.PIPE) as proc:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.5)  # nothing crossed: it walks again every interval, until killed
        proc.kill()
        assert proc.wait(10) != 0 and proc.stdout is not None and proc.stdout.read() == b""


def test_the_script_walks_what_appears_after_it_started(upper: Path) -> None:
    with subprocess.Popen(
        engine_command(str(upper), _limit(max_files=3, min_free_bytes=0), 0), stdout=subprocess.PIPE, text=True
    ) as proc:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)
        for i in range(4):
            (upper / f"late{i}").write_text("x")
        assert proc.wait(timeout=10) == 3
        assert proc.stdout is not None and proc.stdout.read() == "files\n"


# --------------------------------------------------------------- EngineWatchdog on the fake

WATCH = f"hx-{RUN_ID}-t-watch"
LIMIT = WorkspaceLimit(max_files=10, max_bytes=1 << 20, max_depth=5, min_free_bytes=1 << 20, interval_s=0.1)


@dataclass
class Dog:
    runtime: FakeRuntime
    dog: EngineWatchdog
    trips: list[Trip]

    def join(self) -> None:
        thread = self.dog._thread
        assert thread is not None, "started"
        thread.join(10)
        assert not thread.is_alive()


@pytest.fixture
def make_dog() -> Callable[..., Dog]:
    def make(behaviour: Any, *, base_depth: int = 0, gate: Any = None) -> Dog:
        runtime = FakeRuntime({"watch": behaviour}, images=[TRIAL_IMAGE])
        runtime.create_volume("scratch", LABELS)
        spec = roles.watch_spec(
            PROFILE,
            name=WATCH,
            labels=LABELS,
            scratch_volume="scratch",
            command=engine_command("/trial/upper", LIMIT, base_depth),
        )
        trips: list[Trip] = []
        dog = EngineWatchdog(runtime, spec, LIMIT, base_depth, trips.append, deadline_s=60, gate=gate)
        return Dog(runtime, dog, trips)

    return make


def test_a_stop_before_the_watcher_starts_refuses_its_start(make_dog: Callable[..., Dog]) -> None:
    d = make_dog(SERVICE)
    with d.dog:
        pass  # the agent never started (or was done at once)
    d.dog.start()  # a late on_started: refused at the gate
    d.join()
    assert d.runtime.targets("create") == [WATCH], "positive control: it got as far as creating it"
    assert WATCH not in d.runtime.targets("start") and d.runtime.containers == {}
    assert (d.dog.tripped, d.dog.error, d.trips) == (None, None, [])


def test_a_stop_while_the_watcher_is_being_created_refuses_its_start(make_dog: Callable[..., Dog]) -> None:
    d = make_dog(SERVICE)
    creating, release = threading.Event(), threading.Event()
    real_create, real_kill = d.runtime.create, d.runtime.kill

    def create(spec: ContainerSpec, **kw: Any) -> str:
        creating.set()
        assert release.wait(10)
        return real_create(spec, **kw)

    def kill(name: str) -> None:
        release.set()  # the stop has decided: the create goes on only now
        real_kill(name)

    d.runtime.create = create  # type: ignore[method-assign]
    d.runtime.kill = kill  # type: ignore[method-assign]
    d.dog.start()
    assert creating.wait(10)
    d.dog.stop()
    d.join()
    assert WATCH not in d.runtime.targets("start") and d.runtime.containers == {}
    assert (d.dog.tripped, d.dog.error) == (None, None)


@pytest.mark.parametrize(
    ("exit_code", "stdout", "trip"),
    [
        (3, b"files\n", Trip("more than 10 files and directories added to the workspace", True)),
        (3, b"bytes\n", Trip(f"more than {1 << 20} bytes added to the workspace", True)),
        (3, b"depth\n", Trip("directories nested deeper than 9 in the workspace", True)),
        (
            4,
            b"free\n",
            Trip(f"the engine's filesystem holding the workspace has less than {1 << 20} bytes free", False),
        ),
        (3, b"?\n", Trip(f"the engine's filesystem holding the workspace has less than {1 << 20} bytes free", False)),
    ],
    ids=["files", "bytes", "depth", "free", "unknown-is-not-the-agents-fault"],
)
def test_a_trip_calls_on_trip_once(make_dog: Callable[..., Dog], exit_code: int, stdout: bytes, trip: Trip) -> None:
    d = make_dog(Outcome(exit_code=exit_code, stdout=stdout), base_depth=9)
    with d.dog:
        d.dog.start()
        d.join()
    assert d.trips == [trip] and d.dog.tripped == trip and d.dog.error is None
    assert d.runtime.containers == {}


def test_a_stop_kills_a_running_watcher(make_dog: Callable[..., Dog]) -> None:
    d = make_dog(SERVICE)
    with d.dog:
        d.dog.start()
        deadline = time.monotonic() + 10
        while not d.runtime.is_running(WATCH) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert d.runtime.is_running(WATCH), "positive control: it watches while the agent runs"
    d.join()
    assert WATCH in d.runtime.targets("kill") and d.runtime.containers == {}
    assert (d.dog.tripped, d.dog.error, d.trips) == (None, None, [])


def test_a_watcher_that_ends_by_itself_or_cannot_run_says_why(make_dog: Callable[..., Dog]) -> None:
    early = make_dog(Outcome(exit_code=0, stderr=b"find: unknown predicate"))
    early.dog.start()
    early.join()
    assert early.dog.error is not None and "stopped early (exit 0)" in early.dog.error
    assert "unknown predicate" in early.dog.error and early.trips == []

    broken = make_dog(SERVICE)
    broken.runtime.fail("create", "watch", InfraError("creating container failed: no such volume"))
    broken.dog.start()
    broken.join()
    assert broken.dog.error == "the workspace watchdog did not run: creating container failed: no such volume"
    assert broken.runtime.containers == {} and broken.trips == []


def test_the_runs_start_gate_is_entered_around_the_watchers_start(make_dog: Callable[..., Dog]) -> None:
    entered: list[bool] = []

    @contextlib.contextmanager
    def gate() -> Iterator[None]:
        entered.append(True)
        raise Interrupted("interrupted")
        yield

    d = make_dog(SERVICE, gate=gate)
    d.dog.start()
    d.join()
    assert entered == [True]
    assert WATCH not in d.runtime.targets("start") and d.runtime.containers == {}
    assert d.dog.error is not None and "did not run" in d.dog.error


def test_the_watcher_is_the_agents_uid_on_the_scratch_read_only_without_a_network() -> None:
    spec = roles.watch_spec(PROFILE, name=WATCH, labels=LABELS, scratch_volume="s", command=("sh",))
    assert spec.volumes == (VolumeMount("s", "/trial", read_only=True),) and spec.mounts == ()
    assert spec.user == PROFILE.user and spec.network == "none" and spec.labels["harness.role"] == "watch"
