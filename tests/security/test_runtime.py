"""The optional stronger runtime and the preflight: `skilltrial doctor` says what this engine offers.

gVisor (runsc) is not installed on the machines this suite is built on: doctor must
say so, ``--runtime runsc`` must fail once with a clear message instead of failing
every trial, and the engine, runc and git versions with known isolation CVEs must
be warned about.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.demo import DemoSetup
from harness.errors import PrerequisiteError
from harness.experiment.experiment import Experiment
from harness.experiment.options import RunOptions
from harness.sandbox.doctor import judge_versions
from harness.sandbox.engine import Engine
from harness.study.config import load_study
from tests.integration.helpers import write_experiment

pytestmark = [pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]


def test_doctor_reports_gvisor_lsm_and_vulnerable_versions(engine: Engine) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "doctor"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    info = engine.info()
    gvisor = next(line for line in lines if "gVisor (runsc)" in line)
    if "runsc" in info.runtimes:
        assert "works" in gvisor or "WARN" in gvisor, gvisor
    else:
        assert gvisor.startswith("[info]") and "not installed" in gvisor, gvisor
    assert any(line.startswith("[ok  ] seccomp") for line in lines), lines
    assert any("] LSM:" in line for line in lines), lines
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.split()[-1]
    expected = judge_versions({"engine": info.server_version, "runc": info.runc_version, "git": git})
    # the same pure judgement, applied to this machine's versions: exactly its warnings, none when it has none
    components = ("engine ", "runc ", "git ")
    version_warnings = [line for line in lines if line.startswith("[WARN] ") and line[7:].startswith(components)]
    assert version_warnings == [f"[WARN] {c.name}: {c.detail}" for c in expected], (version_warnings, expected)
    # positive control: the judgement does warn for a version known to be vulnerable
    assert judge_versions({"runc": "1.1.5"})


def test_runtime_runsc_fails_clearly_where_gvisor_is_not_installed(
    engine: Engine, demo_setup: DemoSetup, tmp_path: Path
) -> None:
    prereg, scenario = write_experiment(
        demo_setup.root, "runsc", tasks=["fix-mean"], scenario={"tasks": {"fix-mean": {"success": []}}}
    )
    study = load_study(prereg)
    registered = Experiment(study, engine, RunOptions(out=tmp_path / "a", jobs=1, scripted=scenario, runtime="runc"))
    registered._check_runtime()  # positive control: a registered runtime passes the check
    if "runsc" in engine.info().runtimes:
        pytest.skip("gVisor is installed here")
    exp = Experiment(study, engine, RunOptions(out=tmp_path / "b", jobs=1, scripted=scenario, runtime="runsc"))
    with pytest.raises(PrerequisiteError, match="runsc"):
        exp.run()
    assert not (tmp_path / "b" / "results.jsonl").exists() or (tmp_path / "b" / "results.jsonl").stat().st_size == 0
