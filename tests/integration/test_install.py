"""Install anywhere: a wheel in a fresh venv outside the checkout builds its images and runs the demo.

The wheel is built offline (``--no-build-isolation``) and installed with ``--no-deps`` into a new
venv; the dependencies come from this checkout's venv through a ``.pth`` line (a site directory
added that way does not process its own ``.pth`` files, so the checkout's editable ``harness`` package stays
out of reach: the test asserts that the imported package is the venv's). Everything then runs with
the working directory outside the checkout. Image tags are content hashes, so the wheel's
Dockerfiles must hash to the checkout's tags: the demo reuses the images the suite already built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_a_wheel_installed_outside_the_checkout_runs_the_demo(tmp_path: Path, engine: Engine, images: ImageSet) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)],
         cwd=tmp_path, env=env)  # fmt: skip
    (wheel,) = wheels.glob("skilltrial-*.whl")

    t0 = time.monotonic()
    venv = tmp_path / "fresh"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=env)
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path, env=env)
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=tmp_path, env=env)
    (Path(site.stdout.strip()) / "checkout-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    installed = time.monotonic() - t0

    where = _run(
        [str(py), "-c", "import harness, harness.sandbox.images as i; print(harness.__file__); print(i.assets_root())"],
        cwd=tmp_path,
        env=env,
    ).stdout.split()
    assert where[0].startswith(str(venv)), f"imported {where[0]}, not the installed wheel"
    assert where[1].startswith(str(venv)) and where[1].endswith("harness/assets")

    # the wheel's image inputs are the checkout's bytes: the same content-hash tags
    from harness.sandbox.images import ImageBuilder

    checkout_tags = {role: tag for role, (tag, _) in ImageBuilder(engine).planned().items()}
    probe = "import json; from harness.sandbox.engine import Engine; from harness.sandbox.images import ImageBuilder; " \
        "print(json.dumps({r: t for r, (t, _) in ImageBuilder(Engine()).planned().items()}))"  # fmt: skip
    wheel_tags = json.loads(_run([str(py), "-c", probe], cwd=tmp_path, env=env).stdout)
    assert wheel_tags == checkout_tags
    assert wheel_tags["trial"] == images.trial

    # every part of the demo ships (`demo --quick` below runs only the first two; the library and trigger
    # demos were once left out of the wheel, and the full demo silently ran without them)
    parts = "import sys; from pathlib import Path; from harness.demo import prepare_demo; " \
        "s = prepare_demo(Path(sys.argv[1])); print(s.library is not None, (s.root / 'triggers' / 'preregistration.yaml').is_file())"  # fmt: skip
    shipped = _run([str(py), "-c", parts, str(tmp_path / "parts")], cwd=tmp_path, env=env).stdout.split()
    assert shipped == ["True", "True"], "the wheel carries the library and the trigger demo"
    assert (ROOT / "examples" / "library").is_dir() and (ROOT / "examples" / "triggers").is_dir(), "positive control"

    t1 = time.monotonic()
    demo = _run([str(venv / "bin" / "skilltrial"), "demo", "--quick", "--out", str(tmp_path / "demo"), "--jobs", "4"],
                cwd=tmp_path, env=env)  # fmt: skip
    ran = time.monotonic() - t1
    for skill in ("careful-fixer", "verbose-planner"):
        decision = json.loads((tmp_path / "demo" / f"results-{skill}" / "decision.json").read_text())
        assert decision["verdict"] in ("adopt", "reject", "inconclusive")
    assert demo.stdout.count("gate: ") == 2
    assert not (ROOT / "demo-output").exists() or (ROOT / "demo-output").stat().st_mtime < t1, "nothing in the checkout"
    print(f"wheel install into a fresh venv {installed:.1f} s; demo from there {ran:.1f} s")
