"""One contract for every :mod:`harness.sandbox.runtime` implementation, run against the in-memory
``tests.fakes.FakeRuntime`` (unit speed, no Docker) and the Docker :class:`~harness.sandbox.engine.Engine`
(marker ``docker``), as inspect_ai runs one sandbox self-check against its local and Docker providers.

Each test names its container's program twice: the command the engine runs and the :class:`Outcome` the
fake scripts for it. What is asserted is only what the Protocol's docstrings promise, so a passing fake
is a fake the trial's unit tests may trust.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import secrets
import tarfile
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from harness.errors import InfraError, Interrupted, PrerequisiteError
from harness.sandbox import lifecycle, volumes
from harness.sandbox.labels import RUN, make_labels
from harness.sandbox.runtime import (
    Archive,
    ContainerRuntime,
    ContainerSpec,
    DockerObject,
    EngineInfo,
    Limits,
    Runtime,
    VolumeDir,
    VolumeMount,
)
from harness.sandbox.volumes import Entry, tar_entries
from tests.contract.socket_link import SocketLink, engine_socket
from tests.fakes import Behaviour, FakeRuntime, Outcome

FAKE_IMAGE = "harness-sidecar:contract"


@dataclass(frozen=True)
class Program:
    argv: tuple[str, ...]
    """What the engine runs."""
    fake: Behaviour
    """What the fake does instead."""


EXIT_3 = Program(("sh", "-c", "echo out; echo err >&2; exit 3"), Outcome(exit_code=3, stdout=b"out\n", stderr=b"err\n"))
SLEEP = Program(("sleep", "30"), Outcome(seconds=30, hold_s=30))
LOUD = Program(("sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a; printf END"), Outcome(stdout=b"a" * 5000 + b"END"))
TRUE = Program(("true",), Outcome())
TWO_SECONDS = Program(("sleep", "2"), Outcome(hold_s=2.0))


@dataclass
class Subject:
    """One implementation under test, with what the tests need to drive it the same way."""

    runtime: ContainerRuntime
    image: str
    run_id: str
    cut_during_wait: Callable[[str], None]
    """Called once the container runs: drops the engine connection while the runtime waits for it."""
    fake: FakeRuntime | None = None

    def spec(
        self, what: str, program: Program, *, network: str = "none", labels: dict[str, str] | None = None
    ) -> ContainerSpec:
        name = f"hx-{self.run_id}-{what}"
        if self.fake is not None:
            self.fake.behave(name, program.fake)
        return ContainerSpec(
            name=name,
            image=self.image,
            command=program.argv,
            labels=self.labels(what) if labels is None else labels,
            user="65534:65534",
            network=network,
            limits=Limits(memory="128m", pids=32, tmpfs_size="16m"),
        )

    def labels(self, what: str = "c") -> dict[str, str]:
        return make_labels(self.run_id, role=f"contract-{what}", ttl_s=600, purpose="contract")

    def net(self, what: str) -> str:
        return f"hx-{self.run_id}-{what}-net"

    def names(self) -> list[tuple[str, str]]:
        return [(o.kind, o.name) for o in self.runtime.labelled({RUN: self.run_id})]


def _fake() -> Generator[Subject, None, None]:
    fake = FakeRuntime(images=[FAKE_IMAGE])

    def cut(name: str) -> None:
        fake.fail("wait", name, InfraError(f"waiting for container {name} failed: Connection aborted"))

    yield Subject(fake, FAKE_IMAGE, "ct" + secrets.token_hex(4), cut, fake)


def _engine(request: pytest.FixtureRequest, tmp_path: Path) -> Generator[Subject, None, None]:
    from harness.sandbox.engine import Engine

    upstream = engine_socket()
    image = request.getfixturevalue("images").sidecar
    if upstream is None:  # a remote engine (--engine remote): the same contract, without the cut link
        remote: Engine = request.getfixturevalue("engine")

        def cannot_cut(_name: str) -> None:
            pytest.skip("dropping the connection needs the engine on a local unix socket (SocketLink)")

        yield Subject(remote, image, "ct" + secrets.token_hex(4), cannot_cut)
        return
    link = SocketLink(Path(tmp_path) / "docker.sock", upstream)
    try:
        linked = Engine({"DOCKER_HOST": link.docker_host})

        def cut(_name: str) -> None:
            threading.Timer(0.5, link.cut).start()  # once the wait is under way

        yield Subject(linked, image, "ct" + secrets.token_hex(4), cut)
    finally:
        link.close()


@pytest.fixture(params=["fake", pytest.param("engine", marks=pytest.mark.docker)])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    made = _fake() if request.param == "fake" else _engine(request, tmp_path)
    with contextlib.closing(made):
        s = next(made)
        try:
            yield s
        finally:
            lifecycle.remove_labelled(s.runtime, {RUN: s.run_id})


# ------------------------------------------------------------------- run


def test_a_non_zero_exit_is_a_result_with_its_output(subject: Subject) -> None:
    res = lifecycle.run(subject.runtime, subject.spec("exit3", EXIT_3), deadline_s=60)
    assert (res.exit_code, res.timed_out, res.oom_killed) == (3, False, False)
    assert (res.stdout, res.stderr, res.stdout_truncated) == (b"out\n", b"err\n", False)
    assert subject.names() == [], "run removes its container"


def test_a_deadline_gives_timed_out_and_the_container_is_removed(subject: Subject) -> None:
    t0 = time.monotonic()
    res = lifecycle.run(subject.runtime, subject.spec("sleeper", SLEEP), deadline_s=1)
    assert res.timed_out and res.exit_code is None
    assert time.monotonic() - t0 < 25, "killed at the deadline, not left to finish"
    assert subject.names() == []


def test_seconds_are_how_long_the_container_ran_not_how_long_the_call_took(subject: Subject) -> None:
    """``ExitInfo.seconds`` is the container's own run, from its start to its exit as the engine recorded them:
    what the call spent before the start (a create, the gate) or after the exit (logs, an archive) is not the
    agent's (an exit long before the deadline is read from it: ``trial.integrity_flags``)."""

    @contextlib.contextmanager
    def slow_gate() -> Iterator[None]:
        time.sleep(1.5)
        yield

    quick = lifecycle.run(subject.runtime, subject.spec("quick", TRUE), deadline_s=60, gate=slow_gate)
    assert quick.exit_code == 0 and 0 <= quick.seconds < 1.2, quick.seconds
    slow = lifecycle.run(subject.runtime, subject.spec("slow", TWO_SECONDS), deadline_s=60)
    assert 1.9 <= slow.seconds < 12, f"positive control: a run that takes time says so ({slow.seconds})"


def test_output_is_capped_and_its_tail_kept(subject: Subject) -> None:
    capped = lifecycle.run(subject.runtime, subject.spec("loud", LOUD), deadline_s=60, output_cap=1000)
    assert len(capped.stdout) == 1000 and capped.stdout_truncated
    assert capped.stdout.endswith(b"aaaEND"), "the tail is kept (a CLI's result comes last)"
    whole = lifecycle.run(subject.runtime, subject.spec("loud2", LOUD), deadline_s=60)
    assert whole.stdout == b"a" * 5000 + b"END" and not whole.stdout_truncated


def test_output_reads_both_streams_apart_each_capped_to_its_tail(subject: Subject) -> None:
    """One read of a container's log gives its stdout and its stderr apart (issue 27 item 4: one engine request
    where a run made two), each capped on its own."""
    rt, spec = subject.runtime, subject.spec("both", EXIT_3)
    rt.create(spec)
    try:
        rt.start(spec.name)
        rt.wait(spec.name, 30)
        assert rt.output(spec.name, stdout_cap=100, stderr_cap=100) == ((b"out\n", False), (b"err\n", False))
        assert rt.output(spec.name, stdout_cap=2, stderr_cap=3) == ((b"t\n", True), (b"rr\n", True))
    finally:
        lifecycle.remove_objects(rt, [DockerObject("container", spec.name)])


def test_a_refused_start_gate_removes_the_container_unstarted(subject: Subject) -> None:
    started: list[str] = []

    @contextlib.contextmanager
    def refuse() -> Iterator[None]:
        raise Interrupted("interrupted")
        yield

    with pytest.raises(Interrupted):
        lifecycle.run(
            subject.runtime, subject.spec("gated", TRUE), deadline_s=60, gate=refuse, on_started=started.append
        )
    assert started == []
    assert subject.names() == []


def test_an_open_start_gate_is_entered_around_the_start(subject: Subject) -> None:
    events: list[str] = []

    @contextlib.contextmanager
    def gate() -> Iterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    res = lifecycle.run(subject.runtime, subject.spec("open", TRUE), deadline_s=60, gate=gate, on_started=events.append)
    assert res.exit_code == 0
    assert events == ["enter", "exit", f"hx-{subject.run_id}-open"]


def test_a_failing_on_started_still_removes_the_container(subject: Subject) -> None:
    def boom(_name: str) -> None:
        raise InfraError("the watchdog could not start")

    with pytest.raises(InfraError, match="watchdog"):
        lifecycle.run(subject.runtime, subject.spec("boom", SLEEP), deadline_s=60, on_started=boom)
    assert subject.names() == []


def test_run_removes_what_a_failed_create_made(subject: Subject) -> None:
    with pytest.raises(InfraError):
        lifecycle.run(subject.runtime, subject.spec("nonet", TRUE, network=subject.net("missing")), deadline_s=60)
    assert subject.names() == []


def test_create_halfway_removes_the_container(subject: Subject) -> None:
    """Attached to its network, then the second one is missing: nothing may stay half set up."""
    own = subject.net("own")
    subject.runtime.create_network(own, subject.labels(), internal=True)
    with pytest.raises(InfraError):
        subject.runtime.create(subject.spec("half", SLEEP, network=own), extra_networks=[subject.net("missing")])
    assert subject.names() == [("network", own)]


def test_a_create_under_a_taken_name_fails_and_leaves_the_other_container(subject: Subject) -> None:
    """The engine removed the container holding the name when its own create failed on the name."""
    spec = subject.spec("taken", SLEEP)
    subject.runtime.create(spec)
    with pytest.raises(InfraError):
        subject.runtime.create(spec)
    assert subject.names() == [("container", spec.name)], "the first container is still there"


def test_a_missing_image_is_a_prerequisite_error(subject: Subject) -> None:
    spec = subject.spec("noimage", TRUE)
    missing = dataclasses.replace(spec, image="harness-contract-missing:0000000000000000")
    with pytest.raises(PrerequisiteError, match="not present"):
        lifecycle.run(subject.runtime, missing, deadline_s=60)
    with pytest.raises(PrerequisiteError):
        subject.runtime.create(missing)
    assert subject.names() == []


def test_a_dropped_engine_connection_while_waiting_is_infra_not_a_timeout(subject: Subject) -> None:
    """Issue 9 item 9: the agent's wait losing the engine must become an infra_error trial, never a
    timeout (which would be excluded as truncated and blamed on the agent's pace)."""
    t0 = time.monotonic()
    with pytest.raises(InfraError, match="waiting for container"):
        lifecycle.run(
            subject.runtime, subject.spec("dropped", SLEEP), deadline_s=20, on_started=subject.cut_during_wait
        )
    assert time.monotonic() - t0 < 15, "reported when the connection dropped, not at the deadline"
    assert subject.names() == [], "the container is removed once the engine answers again"


# ------------------------------------------------------- long-running containers


def test_a_started_container_runs_has_an_address_and_a_kill_stops_it(subject: Subject) -> None:
    rt = subject.runtime
    net = subject.net("svc")
    rt.create_network(net, subject.labels(), internal=True)
    spec = subject.spec("svc", SLEEP, network=net)
    rt.create(spec)
    with pytest.raises(InfraError):
        rt.container_ip(spec.name, net)  # created, not started: no address yet
    rt.start(spec.name)
    assert rt.is_running(spec.name)
    assert rt.container_ip(spec.name, net).count(".") == 3
    with pytest.raises(InfraError):
        rt.container_ip(spec.name, subject.net("other"))
    rt.kill(spec.name)
    deadline = time.monotonic() + 10
    while rt.is_running(spec.name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not rt.is_running(spec.name)
    waited = rt.wait(spec.name, 10)
    assert (waited.exit_code, waited.timed_out) == (137, False), "killed by someone else: a result, not a timeout"
    logs = rt.logs(spec.name, stdout=True, stderr=True, cap=100)
    assert logs == (b"", False)
    assert lifecycle.remove_labelled(rt, {RUN: subject.run_id}).errors == []
    assert not rt.is_running(spec.name), "gone: not running, and no exception"
    rt.kill(spec.name)  # a kill of what is gone does not raise
    with pytest.raises(InfraError):
        rt.wait(spec.name, 1)
    with pytest.raises(InfraError):
        rt.logs(spec.name)


def _one_then_two(spec: ContainerSpec, rt: FakeRuntime) -> Outcome:
    """The fake's ``echo one; sleep 1; echo two; sleep 30``."""
    threading.Timer(1.0, rt.append_log, args=(spec.name, b"two\n")).start()
    return Outcome(stdout=b"one\n", hold_s=30)


TWO_LINES = Program(("sh", "-c", "echo one; sleep 1; echo two; sleep 30"), _one_then_two)


def test_followed_logs_come_as_written_and_end_when_closed_or_the_container_exits(subject: Subject) -> None:
    rt = subject.runtime
    spec = subject.spec("follow", TWO_LINES)
    rt.create(spec)
    rt.start(spec.name)
    stream = rt.follow_logs(spec.name)
    seen = b""
    t0 = time.monotonic()
    for chunk in stream:
        seen += chunk
        if b"two" in seen:
            break
    assert seen == b"one\ntwo\n" and time.monotonic() - t0 < 20, seen
    # closed from another thread while a reader waits for more: the reader's loop ends
    reader_done = threading.Event()

    def read_rest() -> None:
        for _ in stream:
            pass
        reader_done.set()

    threading.Thread(target=read_rest, daemon=True).start()
    time.sleep(0.3)
    assert not reader_done.is_set(), "the container still runs: the stream waits for more"
    stream.close()
    assert reader_done.wait(10), "close() ended the iteration"
    # a stream of a container that exits ends by itself
    done = subject.spec("follow-exit", EXIT_3)
    rt.create(done)
    rt.start(done.name)
    assert b"".join(rt.follow_logs(done.name)) == b"out\n"
    with pytest.raises(InfraError):
        rt.follow_logs(f"hx-{subject.run_id}-never-made")


def test_info_describes_the_engine(subject: Subject) -> None:
    info = subject.runtime.info()
    assert isinstance(info, EngineInfo) and info.server_version


# ------------------------------------------------------------ labels and removal


def test_labelled_lists_what_was_created_with_its_labels(subject: Subject) -> None:
    rt = subject.runtime
    net, net_labels = subject.net("listed"), subject.labels("net")
    rt.create_network(net, net_labels, internal=True)
    spec = subject.spec("listed", SLEEP, network=net)
    rt.create(spec)
    other_run = make_labels(subject.run_id + "x", role="contract", ttl_s=600, purpose="contract")
    other = subject.spec("other", SLEEP, labels=other_run)
    rt.create(other)
    try:
        listed = rt.labelled({RUN: subject.run_id})
        assert [(o.kind, o.name) for o in listed] == [("container", spec.name), ("network", net)]
        assert spec.labels.items() <= listed[0].labels.items()
        assert net_labels.items() <= listed[1].labels.items()
        assert other.name in [o.name for o in rt.labelled()], "no selector: every object of the harness"
    finally:
        assert lifecycle.remove_objects(rt, [DockerObject("container", other.name)]).errors == []


def test_removal_takes_containers_first_and_goes_on_past_a_failure(subject: Subject) -> None:
    rt = subject.runtime
    net_a, net_b = subject.net("a"), subject.net("b")
    rt.create_network(net_a, subject.labels(), internal=True)
    rt.create_network(net_b, subject.labels(), internal=True)
    on_a = subject.spec("on-a", SLEEP, network=net_a)
    on_b = subject.spec("on-b", SLEEP, network=net_b)
    for spec in (on_a, on_b):
        rt.create(spec)
        rt.start(spec.name)
    # networks listed first: removed in that order, net_a would still have on_a attached
    asked = [DockerObject("network", net_a), DockerObject("network", net_b), DockerObject("container", on_a.name)]
    removed, errors = lifecycle.remove_objects(rt, asked)
    assert [(o.kind, o.name) for o in removed] == [("container", on_a.name), ("network", net_a)]
    assert len(errors) == 1 and net_b in errors[0], "on_b keeps net_b: reported, and the rest still went"
    assert sorted(subject.names()) == sorted([("container", on_b.name), ("network", net_b)])
    again = lifecycle.remove_objects(rt, [DockerObject("container", on_a.name), DockerObject("network", net_a)])
    assert again.errors == [] and len(again.removed) == 2, "what is gone already counts as removed"
    assert lifecycle.remove_labelled(rt, {RUN: subject.run_id}).errors == []
    assert subject.names() == []


# ------------------------------------------------------------------ volumes and archives

NOBODY = 65534


def _tar(entries: dict[str, bytes | None], uid: int = NOBODY) -> bytes:
    """A tar of directories (None) and files, owned by ``uid`` (PAX: any uid fits)."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.uid = info.gid = uid
            info.mtime = 1_000_000_000
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tf.addfile(info, io.BytesIO(data))
    return bio.getvalue()


def _untar(data: bytes) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        for m in tf.getmembers():
            f = tf.extractfile(m) if m.isfile() else None
            out[m.name] = f.read() if f is not None else None
    return out


def _volume_spec(subject: Subject, what: str, program: Program, volumes: dict[str, tuple[str, bool]]) -> ContainerSpec:
    spec = subject.spec(what, program)
    mounts = tuple(VolumeMount(vol, target, read_only=ro) for target, (vol, ro) in volumes.items())
    return dataclasses.replace(spec, volumes=mounts)


def _got(archive: Archive | None) -> Archive:
    assert archive is not None, "the path is there"
    return archive


def test_creating_a_volume_that_exists_keeps_it_and_its_first_labels(subject: Subject) -> None:
    # the engine answers a second create of one name with the existing volume (what engine slots rely on:
    # the first creator's holder label is what everyone reads back); the fake raised, unlike the engine
    rt = subject.runtime
    vol = f"hx-{subject.run_id}-twice"
    first = {**subject.labels("vol"), "harness.test-holder": "first"}
    rt.create_volume(vol, first)
    rt.create_volume(vol, {**subject.labels("vol"), "harness.test-holder": "second"})
    held = [lb for kind, name, lb in rt.labelled(subject.labels("vol")) if kind == "volume" and name == vol]
    assert len(held) == 1 and held[0]["harness.test-holder"] == "first"


def test_a_volume_takes_an_archive_gives_it_back_and_is_listed_and_removed(subject: Subject) -> None:
    rt = subject.runtime
    vol = f"hx-{subject.run_id}-vol"
    labels = subject.labels("vol")
    rt.create_volume(vol, labels)
    assert isinstance(rt.volume_mountpoint(vol), str) and rt.volume_mountpoint(vol)
    helper = _volume_spec(subject, "helper", TRUE, {"/v": (vol, False)})
    rt.create(helper)  # never started: archives go in and out of a created container
    rt.put_archive(helper.name, "/v", _tar({"d": None, "d/a.txt": b"hello\n"}))
    data, cut = _got(rt.get_archive(helper.name, "/v/d", cap=1 << 20))
    assert not cut and _untar(data) == {"d": None, "d/a.txt": b"hello\n"}
    small, cut = _got(rt.get_archive(helper.name, "/v/d", cap=100))
    assert cut and len(small) == 100, "capped"
    assert rt.get_archive(helper.name, "/v/missing", cap=1 << 20) is None, "a missing path is no archive"
    with pytest.raises(InfraError):
        rt.put_archive(helper.name, "/etc", _tar({"x": b""}))  # the root filesystem is read-only
    listed = [o for o in rt.labelled({RUN: subject.run_id}) if o.kind == "volume"]
    assert [o.name for o in listed] == [vol] and labels.items() <= listed[0].labels.items()
    in_use = lifecycle.remove_objects(rt, [DockerObject("volume", vol)])
    assert in_use.removed == [] and len(in_use.errors) == 1, "a volume a container uses cannot go"
    removed = lifecycle.remove_objects(rt, [DockerObject("volume", vol), DockerObject("container", helper.name)])
    assert removed.errors == [] and [o.kind for o in removed.removed] == ["container", "volume"]
    assert subject.names() == []
    assert lifecycle.remove_objects(rt, [DockerObject("volume", vol)]).errors == [], "what is gone counts as removed"


def _writes_through_the_overlay(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
    w = runtime.mount_path(spec, "/w")
    (w / "new.txt").write_text("new\n")
    (w / "base.txt").write_text("changed\n")
    return Outcome()


WRITES = Program(
    ("sh", "-c", "echo new > /w/new.txt && echo changed > /w/base.txt && cat /w/keep.txt"), _writes_through_the_overlay
)


def test_an_overlay_volume_writes_to_its_upper_and_leaves_the_lower_alone(subject: Subject) -> None:
    rt = subject.runtime
    base, up, ov = (f"hx-{subject.run_id}-{x}" for x in ("base", "up", "ov"))
    for vol in (base, up):
        rt.create_volume(vol, subject.labels("vol"))
    helper = _volume_spec(subject, "prep", TRUE, {"/b": (base, False), "/u": (up, False)})
    rt.create(helper)
    rt.put_archive(helper.name, "/b", _tar({"tree": None, "tree/base.txt": b"base\n", "tree/keep.txt": b"keep\n"}))
    rt.put_archive(helper.name, "/u", _tar({"upper": None, "work": None}))
    lifecycle.remove_objects(rt, [DockerObject("container", helper.name)])
    rt.create_overlay_volume(
        ov,
        subject.labels("vol"),
        lower=VolumeDir(base, "tree"),
        upper=VolumeDir(up, "upper"),
        work=VolumeDir(up, "work"),
    )
    res = lifecycle.run(rt, _volume_spec(subject, "writer", WRITES, {"/w": (ov, False)}), deadline_s=60)
    assert res.exit_code == 0, res.stderr
    reader = _volume_spec(subject, "reader", TRUE, {"/b": (base, True), "/u": (up, True)})
    rt.create(reader)
    upper, _ = _got(rt.get_archive(reader.name, "/u/upper", cap=1 << 20))
    lower, _ = _got(rt.get_archive(reader.name, "/b/tree", cap=1 << 20))
    assert {k: v for k, v in _untar(upper).items() if v is not None} == {
        "upper/new.txt": b"new\n",
        "upper/base.txt": b"changed\n",
    }, "the upper holds exactly what the container changed"
    assert _untar(lower)["tree/base.txt"] == b"base\n"
    assert lifecycle.remove_labelled(rt, {RUN: subject.run_id}).errors == []
    assert subject.names() == []


def test_run_copies_a_path_out_before_it_removes_the_container(subject: Subject) -> None:
    rt = subject.runtime
    vol = f"hx-{subject.run_id}-out"
    rt.create_volume(vol, subject.labels("vol"))
    helper = _volume_spec(subject, "mk", TRUE, {"/o": (vol, False)})
    rt.create(helper)
    rt.put_archive(helper.name, "/o", _tar({"out": None, "out/status": b"ok\n"}))
    lifecycle.remove_objects(rt, [DockerObject("container", helper.name)])
    spec = _volume_spec(subject, "arch", TRUE, {"/o": (vol, False)})
    res = lifecycle.run(rt, spec, deadline_s=60, archive="/o/out")
    assert res.archive is not None and _untar(res.archive)["out/status"] == b"ok\n" and not res.archive_truncated
    missing = lifecycle.run(rt, dataclasses.replace(spec, name=spec.name + "2"), deadline_s=60, archive="/o/nothing")
    assert missing.archive is None
    assert lifecycle.remove_labelled(rt, {RUN: subject.run_id}).errors == []
    assert subject.names() == []


def test_a_volume_filled_through_a_created_container_keeps_the_tars_owners_and_modes(subject: Subject) -> None:
    """How a run gives its containers files (:func:`harness.sandbox.volumes.fill`): the key file keeps
    its 0400 and its owner, and a read-only mount takes no archive."""
    rt = subject.runtime
    vol = f"hx-{subject.run_id}-key"
    rt.create_volume(vol, subject.labels("vol"))
    key = tar_entries([Entry("api-key", b"sk-secret", 0o400, 2100000002, 2100000002), Entry("note", b"hi", 0o444)])
    volumes.fill(rt, vol, key, image=subject.image, labels=subject.labels("fill"))
    assert subject.names() == [("volume", vol)], "the filler container is gone"
    reader = _volume_spec(subject, "reader", TRUE, {"/data": (vol, True)})
    rt.create(reader)
    data, cut = _got(rt.get_archive(reader.name, "/data", cap=1 << 20))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {m.name: (m.mode & 0o7777, m.uid) for m in tar.getmembers() if m.isreg()}
    assert not cut and files == {"data/api-key": (0o400, 2100000002), "data/note": (0o444, 0)}
    with pytest.raises(InfraError):
        rt.put_archive(reader.name, "/data", tar_entries([Entry("x", b"", 0o644)]))
    assert lifecycle.remove_labelled(rt, {RUN: subject.run_id}).errors == []


def test_saved_images_load_back_with_their_ids_and_tags(subject: Subject) -> None:
    """What copies images between engines (issue 29 item 1): ``save_images`` gives an archive that
    ``load_images`` turns back into the same image id under the same tag (here on one engine: the tag is
    removed in between; tests/remote/test_pool_engines.py copies between engines)."""
    store = cast(Runtime, subject.runtime)  # both implementations are whole Runtimes (images too)
    image = store.image_id(subject.image)
    assert image is not None
    tag = f"harness-contract-{subject.run_id}:saved"
    store.tag(image, tag)
    try:
        archive = b"".join(store.save_images([tag]))
        assert store.remove_image(tag) and store.image_id(tag) is None
        loaded = store.load_images(iter([archive[: len(archive) // 2], archive[len(archive) // 2 :]]))
        assert tag in loaded
        assert store.image_id(tag) == image
    finally:
        store.remove_image(tag)
    with pytest.raises(InfraError):
        b"".join(store.save_images([f"harness-contract-{subject.run_id}:absent"]))
