"""The overlay-volume probe of volume workspaces (:func:`harness.sandbox.volumes.probe_overlay`), on the
FakeRuntime: an engine that cannot mount an overlay volume stops the run before any trial with a
PrerequisiteError that says what volume workspaces need, and the probe leaves nothing behind."""

from __future__ import annotations

import pytest

from harness.errors import InfraError, PrerequisiteError
from harness.sandbox import volumes
from harness.sandbox.labels import make_labels
from tests.fakes import FakeRuntime, Outcome

IMAGE = "harness-sidecar:fake"
LABELS = make_labels("probe", role="run", ttl_s=60)


def _engine(**behaviours: Outcome) -> FakeRuntime:
    runtime = FakeRuntime(behaviours, images=[IMAGE])
    runtime.create_volume("hx-probe-base", LABELS)
    return runtime


def test_an_engine_that_mounts_overlay_volumes_passes_and_keeps_only_the_base() -> None:
    runtime = _engine(**{"volume-fill": Outcome(exit_code=0)})
    volumes.probe_overlay(runtime, "hx-probe-base", image=IMAGE, labels=LABELS)
    assert "create_overlay_volume" in [c.method for c in runtime.calls], "positive control: it probed"
    assert [o.name for o in runtime.left()] == ["hx-probe-base"]


@pytest.mark.parametrize("method", ["create_overlay_volume", "start", "create_volume"])
def test_an_engine_that_cannot_stops_the_run_with_what_it_needs(method: str) -> None:
    runtime = _engine(**{"volume-fill": Outcome(exit_code=0)})
    # the base volume exists already: a create_volume fault hits only the probe's scratch
    runtime.fail(method, None, InfraError(f"{method}: error while mounting volume: invalid argument"), times=None)
    with pytest.raises(PrerequisiteError, match="cannot mount an overlay volume") as caught:
        volumes.probe_overlay(runtime, "hx-probe-base", image=IMAGE, labels=LABELS)
    assert "overlayfs" in str(caught.value), "the hint says what the engine needs"
    assert [o.name for o in runtime.left()] == ["hx-probe-base"], "nothing of the probe is left"


def test_a_probe_container_that_fails_is_a_prerequisite_error_too() -> None:
    runtime = _engine(**{"volume-fill": Outcome(exit_code=1, stderr=b"mount: permission denied")})
    with pytest.raises(PrerequisiteError, match="probe exited 1"):
        volumes.probe_overlay(runtime, "hx-probe-base", image=IMAGE, labels=LABELS)
    assert [o.name for o in runtime.left()] == ["hx-probe-base"]
