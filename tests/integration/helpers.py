"""Building small real experiments for integration tests (real engine, images, CLI, git)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from harness.experiment.events import Events
from harness.experiment.experiment import Experiment, ExperimentResult
from harness.experiment.options import RunOptions
from harness.host.paths import HostPaths
from harness.records import TrialRecord
from harness.results.attempts import latest_by_trial
from harness.sandbox.engine import Engine
from harness.sandbox.roles import Profile
from harness.sandbox.runtime import ContainerSpec, VolumeMount
from harness.study.config import load_study
from harness.study.lock import lock


def write_experiment(
    setup_root: Path,
    name: str,
    *,
    tasks: list[str],
    runs: int = 1,
    skill: str = "careful-fixer",
    skill_ref: str | None = None,
    scenario: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """A locked preregistration and a scenario file inside a prepared demo setup."""
    demo = setup_root / "demo"
    prereg: dict[str, Any] = {
        "skill": skill,
        "skill_ref": skill_ref or f"../skills/{skill}",
        "tasks": "tasks.json",
        "target_tasks": tasks,
        "execution": {
            "runs_per_arm": runs,
            "model": "sonnet",
            "judge_model": "haiku",
            "repo": "repo",
            "seed": 1,
            "allowed_tools": ["Bash", "Edit", "Read"],
            "max_infra_retries": 0,
            "budgets": {
                "per_trial_usd": 0.5,
                "judge_usd": 0.05,
                "timeout_s": 120,
                "verify_timeout_s": 60,
                "judge_timeout_s": 60,
            },
        },
    }
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(prereg.get(key), dict):
            prereg[key] = {**prereg[key], **value}
        else:
            prereg[key] = value
    prereg_path = demo / f"prereg-{name}.yaml"
    prereg_path.write_text(yaml.safe_dump(prereg, sort_keys=False))
    lock(prereg_path)
    scenario_path = demo / f"scenario-{name}.yaml"
    scenario_path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return prereg_path, scenario_path


def demo_task_scripts(setup_root: Path) -> dict[str, Any]:
    """The demo scenario's per-task tool scripts (success and failure)."""
    data = yaml.safe_load((setup_root / "demo" / "scenario.yaml").read_text())
    return {tid: {k: v for k, v in t.items() if k in ("success", "failure")} for tid, t in data["tasks"].items()}


def host_paths(work_root: Path) -> HostPaths:
    """This machine's host paths with the test's own trial root, and host slots beside it: another
    harness on this machine (a developer's demo, a parallel CI job) must not hold back a test whose
    arms have to run at the same time."""
    paths = HostPaths.from_env(os.environ)
    return dataclasses.replace(paths, work_root=work_root, slots_dir=work_root.parent / "host-slots")


def run_experiment(
    engine: Engine,
    prereg: Path,
    scenario: Path,
    out: Path,
    work_root: Path,
    *,
    jobs: int = 4,
    events: Events | None = None,
    **options: Any,
) -> ExperimentResult:
    study = load_study(prereg)
    options.setdefault("host_slots", jobs)
    options.setdefault("paths", host_paths(work_root))
    # the preflight has its own tests (test_preflight.py); hostile tasks check nothing on purpose
    options.setdefault("preflight", False)
    opts = RunOptions(out=out, jobs=jobs, scripted=scenario, **options)
    return Experiment(study, engine, opts, events).run()


def latest(result: ExperimentResult) -> dict[str, TrialRecord]:
    """The final attempt of each trial."""
    return latest_by_trial(result.records)


def volume_probe_spec(
    profile: Profile, name: str, labels: Mapping[str, str], command: tuple[str, ...], *mounts: VolumeMount
) -> ContainerSpec:
    """A hardened ``--network none`` container of the agent's uid on the trial image, with only ``mounts``
    (volumes): how the volume workspace tests write and read a volume without a path of the controller's."""
    return ContainerSpec(
        name=name,
        image=profile.trial_image,
        command=command,
        labels=labels,
        user=profile.user,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        volumes=mounts,
        network="none",
        limits=profile.limits,
        tmpfs=("/tmp",),
        workdir="/",
    )
