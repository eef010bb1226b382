"""The engine must see the workspace (issue 24 item 7).

A trial's ``/workspace`` is a directory of the controller bind-mounted into the agent's container. An
engine that does not see the controller's mounts (the controller in a private mount namespace, a rootless
engine, a remote engine that looks local) mounts an empty directory instead: every agent then worked on
nothing, every patch was rejected, every trial was ``completed`` and the run ended INCONCLUSIVE with exit 0.

The test makes such a controller for real: ``python -m harness eval`` runs in its own mount namespace
(``unshare -m``) with a tmpfs over its work root, so every file of its trials lives where the engine cannot
see it. Before the first trial the run writes a random token into a trial-shaped directory of its own work
root and reads it back inside a container; the blind controller stops there (exit 3, naming
``HARNESS_WORKSPACE=volume``), and with that setting (workspaces the engine makes itself) the same
controller completes. The positive control is the ordinary controller, whose probe passes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.demo import DemoSetup
from harness.host.trees import overlay_available
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.integration.helpers import demo_task_scripts, write_experiment

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"),
]

ROOT = Path(__file__).resolve().parents[2]
BLIND = {
    "tmpfs": 'mount -t tmpfs -o mode=0700 tmpfs "$1" && shift && exec "$@"',
    "namespace": 'shift && exec "$@"',
}
"""What the controller runs in its own mount namespace: ``tmpfs`` hides the whole work root from the engine
(the bind sources do not exist there), ``namespace`` only the mounts the controller makes (an overlay
workspace's merged directory: the engine binds the empty directory under it)."""


def _experiment(demo_setup: DemoSetup) -> tuple[Path, Path]:
    fix = demo_task_scripts(demo_setup.root)["fix-mean"]
    return write_experiment(
        demo_setup.root,
        "engine-view",
        tasks=["fix-mean"],
        scenario={"tasks": {"fix-mean": {**fix, "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}}}}},
    )


def _eval(
    experiment: tuple[Path, Path], tmp: Path, name: str, *, blind: str | None, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``python -m harness eval`` with TMPDIR (so its work root) under ``tmp``; ``blind``: in a mount
    namespace of its own (:data:`BLIND`)."""
    prereg, scenario = experiment
    tmpdir = tmp / f"tmp-{name}"
    work = tmpdir / f"harness-{os.getuid()}"
    work.mkdir(mode=0o700, parents=True)
    out = tmp / f"out-{name}"
    argv = [sys.executable, "-m", "harness", "eval", str(prereg), "--scripted", str(scenario), "--out", str(out)]
    if blind is not None:
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", BLIND[blind], "sh", str(work), *argv]
    run_env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "HARNESS_WORKSPACE")}
    run_env.update({"PYTHONPATH": str(ROOT), "TMPDIR": str(tmpdir), **(env or {})})
    proc = subprocess.run(argv, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=900)
    return proc, out


def _records(out: Path) -> list[dict[str, Any]]:
    path = out / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("blind", sorted(BLIND))
def test_a_controller_whose_files_the_engine_cannot_see_stops_before_the_first_trial(
    engine: Engine, images: ImageSet, demo_setup: DemoSetup, tmp_path: Path, blind: str
) -> None:
    if engine.endpoint().remote:
        pytest.skip("the blind controller is made with a mount namespace of this machine")
    if blind == "namespace" and not overlay_available(tmp_path):
        pytest.skip("without overlay workspaces the controller mounts nothing the engine could miss")
    experiment = _experiment(demo_setup)
    proc, out = _eval(experiment, tmp_path, "blind", blind=blind)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3, said[-3000:]
    assert "cannot see" in said and "HARNESS_WORKSPACE=volume" in said, said[-3000:]
    assert _records(out) == [], "no trial ran"

    # the remedy it names works from the same blind controller: the engine makes the workspaces itself
    proc, out = _eval(experiment, tmp_path, "blind-volume", blind=blind, env={"HARNESS_WORKSPACE": "volume"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    records = _records(out)
    assert len(records) == 2 and all(r["status"] == "completed" for r in records), records
    assert all(r["workspace"] == "volume" for r in records)
    assert all(not (r["patch"] or {}).get("rejected") for r in records), [r["patch"] for r in records]


def test_positive_control_an_ordinary_controller_passes_the_probe(
    engine: Engine, images: ImageSet, demo_setup: DemoSetup, tmp_path: Path
) -> None:
    proc, out = _eval(_experiment(demo_setup), tmp_path, "seeing", blind=None)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    records = _records(out)
    assert len(records) == 2 and all(r["status"] == "completed" for r in records), records
    kind = "overlay" if overlay_available(tmp_path) else "copy"
    assert all(r["workspace"] == kind for r in records), [r["workspace"] for r in records]
    assert all(not (r["patch"] or {}).get("rejected") for r in records), [r["patch"] for r in records]
