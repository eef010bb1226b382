"""A pool of engines on the fake runtime (issue 29 items 1 and 4's set-up): opening every engine, the same
image ids on each (copied with save and load when missing, an engine holding another image refused), and
``skilltrial doctor``'s per-engine checks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.errors import ConfigError, InfraError, PrerequisiteError
from harness.sandbox.doctor import pool_checks
from harness.sandbox.engine import EngineAddress
from harness.sandbox.images import ImageBuilder, ImageMismatch, ImageOptions, sync_images
from harness.sandbox.pool import EnginePool, open_each
from harness.sandbox.runtime import Runtime
from tests.fakes import FakeRuntime, Outcome

REFS = ["harness-runtime:r", "harness-trial:t"]
A, B, C = (EngineAddress(f"tcp://10.0.0.{i}:2375", name=n) for i, n in ((1, "a"), (2, "b"), (3, "c")))


def _connect(engines: dict[str, FakeRuntime]) -> Callable[[EngineAddress], Runtime]:
    def connect(address: EngineAddress) -> Runtime:
        if address.label not in engines:
            raise PrerequisiteError(f"no Docker engine answers at {address.url}")
        return engines[address.label]

    return connect


def test_missing_images_are_copied_with_the_same_ids_in_one_stream() -> None:
    ref = FakeRuntime(images={"harness-runtime:r": "sha256:" + "1" * 64, "harness-trial:t": "sha256:" + "2" * 64})
    empty = FakeRuntime()
    done = sync_images(ref, empty, REFS, name="b")
    assert done.copied == tuple(REFS) and done.present == ()
    assert {r: empty.image_id(r) for r in REFS} == {r: ref.image_id(r) for r in REFS}
    assert ref.targets("save_images") == [",".join(REFS)], "one save of every missing image together"
    assert sync_images(ref, empty, REFS, name="b").copied == (), "nothing copied the second time"
    assert ref.targets("save_images") == [",".join(REFS)]


def test_only_what_is_missing_is_copied() -> None:
    ref = FakeRuntime(images={"harness-runtime:r": "sha256:r", "harness-trial:t": "sha256:t"})
    half = FakeRuntime(images={"harness-runtime:r": "sha256:r"})
    done = sync_images(ref, half, REFS, name="b")
    assert done.copied == ("harness-trial:t",) and done.present == ("harness-runtime:r",)
    assert ref.targets("save_images") == ["harness-trial:t"]


def test_an_engine_holding_a_tag_as_another_image_is_refused_and_nothing_is_copied() -> None:
    ref = FakeRuntime(images={"harness-runtime:r": "sha256:r", "harness-trial:t": "sha256:t"})
    other = FakeRuntime(images={"harness-trial:t": "sha256:built-there"})
    with pytest.raises(ImageMismatch) as caught:
        sync_images(ref, other, REFS, name="b", reference_name="a")
    assert "engine b holds other images" in str(caught.value)
    assert "harness-trial:t is sha256:built-there" in str(caught.value)
    assert ref.targets("save_images") == [] and other.targets("load_images") == []
    assert caught.value.exit_code == 5


def test_a_copy_that_does_not_give_the_reference_ids_is_an_infra_error() -> None:
    ref = FakeRuntime(images={"harness-trial:t": "sha256:t"})

    class Lossy(FakeRuntime):
        def load_images(self, data):  # type: ignore[no-untyped-def]
            list(data)
            return []  # answered, loaded nothing

    with pytest.raises(InfraError, match="did not give it the reference's ids: harness-trial:t"):
        sync_images(ref, Lossy(), ["harness-trial:t"], name="b")


def test_the_reference_must_hold_every_image() -> None:
    pool = EnginePool.open([A, B], connect=_connect({"a": FakeRuntime(), "b": FakeRuntime()}))
    with pytest.raises(PrerequisiteError, match="the reference engine a does not hold harness-trial:t"):
        pool.prepare_images(["harness-trial:t"])


def test_the_pool_copies_to_every_engine_and_drops_a_refused_one() -> None:
    ids = {"harness-runtime:r": "sha256:r", "harness-trial:t": "sha256:t"}
    engines = {
        "a": FakeRuntime(images=ids),
        "b": FakeRuntime(),
        "c": FakeRuntime(images={"harness-trial:t": "sha256:x"}),
    }
    with EnginePool.open([A, B, C], connect=_connect(engines)) as pool:
        done = pool.prepare_images(REFS)
        assert [s.engine for s in done.synced] == ["b"] and done.synced[0].copied == tuple(REFS)
        assert list(done.refused) == ["c"]
        assert [e.name for e in pool] == ["a", "b"], "the refused engine is not mixed in"
        assert engines["c"].closed and not engines["b"].closed
        assert pool.reference.name == "a"
    assert engines["a"].closed and engines["b"].closed


def test_opening_a_pool_with_an_engine_that_does_not_answer_closes_the_others() -> None:
    engines = {"a": FakeRuntime(), "c": FakeRuntime()}
    with pytest.raises(PrerequisiteError, match=r"tcp://10\.0\.0\.2:2375"):
        EnginePool.open([A, B, C], connect=_connect(engines))
    assert engines["a"].closed and engines["c"].closed


def _disk_probe(spec, runtime):  # type: ignore[no-untyped-def]
    return Outcome(stdout=b"%d\n" % (40 << 30)) if spec.name.endswith("disk-probe") else Outcome()


def test_doctor_checks_each_engine_and_goes_on_past_one_that_does_not_answer() -> None:
    ref = FakeRuntime()
    ref.add_image(ImageBuilder(ref).base_tag(), "sha256:base")
    ImageBuilder(ref).ensure()  # the fake builds the rest: tags and ids
    planned = {tag: ref.image_id(tag) for tag, _ in ImageBuilder(ref).planned().values()}
    same = FakeRuntime(images={t: i for t, i in planned.items() if i}, remote=True)
    trial = next(t for t in planned if t.startswith("harness-trial:"))
    other = FakeRuntime(images={trial: "sha256:built-elsewhere"}, remote=True)
    for rt in (ref, same, other):
        rt.behave("doctor", _disk_probe)
    engines = {"a": ref, "b": same, "c": other}
    d = EngineAddress("tcp://10.0.0.4:2375", name="d")
    opened = open_each([A, B, C, d], connect=_connect(engines))
    reports = {r.name: {c.name: c for c in r.checks} for r in pool_checks(opened, ImageOptions())}
    assert list(reports) == ["a", "b", "c", "d"]
    assert reports["a"]["role"].detail.startswith("reference engine")
    assert reports["b"]["images"].level == "ok" and "the same ids as a" in reports["b"]["images"].detail
    assert reports["b"]["free disk"].detail == "40.0 GiB under its volumes"
    assert reports["b"]["overlay volumes"].level == "ok"
    assert reports["b"]["machine"].level == "info"
    assert reports["c"]["images"].level == "fail" and "refused" in reports["c"]["images"].detail
    assert reports["d"]["reachable"].level == "fail" and "tcp://10.0.0.4:2375" in reports["d"]["reachable"].detail
    for rt in (ref, same, other):
        assert rt.left() == [], "doctor's probes leave nothing behind"


def test_the_cli_refuses_a_bad_engines_file_with_exit_4(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from harness.cli import main

    bad = tmp_path / "engines.yaml"
    bad.write_text("engines:\n  - url: ftp://h\n")
    assert main(["doctor", "--engines-file", str(bad)]) == ConfigError.exit_code
    assert "field 'engines[0].url'" in capsys.readouterr().err


def test_doctor_without_its_reference_still_probes_the_others_and_says_images_were_not_compared() -> None:
    other = FakeRuntime(remote=True)
    other.add_image(ImageBuilder(other).base_tag(), "sha256:base")
    ImageBuilder(other).ensure()
    other.behave("doctor", _disk_probe)
    opened = open_each([A, B], connect=_connect({"b": other}))
    a, b = pool_checks(opened, ImageOptions())
    assert [c.level for c in a.checks] == ["fail"]
    checks = {c.name: c for c in b.checks}
    assert checks["free disk"].level == "ok" and checks["overlay volumes"].level == "ok", "its own sidecar image"
    assert checks["images"].level == "warn" and "the reference engine a does not answer" in checks["images"].detail
