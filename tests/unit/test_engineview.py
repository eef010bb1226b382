"""harness.sandbox.engineview without Docker: what the probe writes, what it accepts, and what it says.

The real blind engine (a controller in a private mount namespace) is tests/integration/test_engine_view.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import InfraError
from harness.host.trees import mounts_below, overlay_available
from harness.sandbox.engineview import PROBE_ROLE, EngineCannotSee, probe
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import ContainerSpec
from tests.fakes import FakeRuntime, Outcome, read_probe_token

IMAGE = "sidecar:test"


def _probe(runtime: FakeRuntime, root: Path, *, overlay: bool = False) -> None:
    probe(
        runtime,
        root,
        overlay=overlay,
        image=IMAGE,
        user="1000:1000",
        labels=make_labels("probe", role="run", ttl_s=60),
        name="hx-probe-engine-probe",
    )


@pytest.mark.parametrize("overlay", [False, pytest.param(True, id="overlay")])
def test_an_engine_that_sees_the_token_passes_and_the_probe_leaves_nothing(tmp_path: Path, overlay: bool) -> None:
    if overlay and not overlay_available(tmp_path):
        pytest.skip("overlay mounts need a root controller")
    seen: list[ContainerSpec] = []

    def cat(spec: ContainerSpec, rt: FakeRuntime) -> Outcome:
        seen.append(spec)
        return read_probe_token(spec, rt)

    runtime = FakeRuntime({PROBE_ROLE: cat}, images=[IMAGE])
    _probe(runtime, tmp_path / "probe", overlay=overlay)
    (spec,) = seen
    (mount,) = spec.mounts
    assert mount.target == "/workspace" and mount.read_only and spec.network == "none"
    assert spec.user == "1000:1000", "read as the agent reads its workspace"
    assert not (tmp_path / "probe").exists() and not mounts_below(tmp_path), "removed, unmounted"
    assert runtime.left() == []


def test_an_engine_that_sees_something_else_stops_the_run_naming_the_remedy(tmp_path: Path) -> None:
    runtime = FakeRuntime(
        {PROBE_ROLE: Outcome(exit_code=1, stderr=b"cat: No such file or directory\n")}, images=[IMAGE]
    )
    with pytest.raises(EngineCannotSee) as info:
        _probe(runtime, tmp_path / "probe")
    assert isinstance(info.value, InfraError) and info.value.exit_code == 3
    assert "cannot see" in str(info.value) and "HARNESS_WORKSPACE=volume" in str(info.value)
    assert "No such file" in str(info.value), "what the container said"
    # another directory of the same name (a stale token): read, but not this run's token
    runtime.behave(PROBE_ROLE, Outcome(stdout=b"0123456789abcdef\n"))
    with pytest.raises(EngineCannotSee, match="read '0123456789abcdef' instead"):
        _probe(runtime, tmp_path / "probe")
    assert not (tmp_path / "probe").exists() and runtime.left() == []


def test_an_engine_that_refuses_the_mount_is_named_as_blind_too(tmp_path: Path) -> None:
    runtime = FakeRuntime(images=[IMAGE])
    runtime.fail("create", "hx-probe-engine-probe", InfraError("bind source path does not exist: /x"))
    with pytest.raises(EngineCannotSee, match="bind source path does not exist"):
        _probe(runtime, tmp_path / "probe")
    assert not (tmp_path / "probe").exists()


def test_the_token_is_new_each_time(tmp_path: Path) -> None:
    tokens: list[bytes] = []

    def cat(spec: ContainerSpec, rt: FakeRuntime) -> Outcome:
        out = read_probe_token(spec, rt)
        tokens.append(out.stdout)
        return out

    runtime = FakeRuntime({PROBE_ROLE: cat}, images=[IMAGE])
    _probe(runtime, tmp_path / "a")
    _probe(runtime, tmp_path / "b")
    assert len(set(tokens)) == 2 and all(len(t) == 32 for t in tokens)
