"""Building hostile experiments for the attack suite.

A hostile agent is a scenario of the scripted Messages API whose steps are Bash
tool calls: the real Claude Code CLI runs them in the real, hardened agent
container, and a step marked ``probe`` has its tool result (what the sandbox
answered) logged by the scripted API to ``scripted-api.log`` in the experiment
directory, where :func:`probes` reads it back.

Every attack is paired with a positive control: the same probe succeeding where
it should (a write to /tmp, a reachable canary, the key inside the gateway), so
that a broken probe cannot pass by failing silently.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.sandbox.engine import Engine
from harness.sandbox.labels import make_labels
from tests.integration.helpers import demo_task_scripts, write_experiment

SKILL_MARKER = "careful-fixer-7c1e"


def bash(command: str, probe: str | None = None, description: str = "probe") -> dict[str, Any]:
    step: dict[str, Any] = {"tool": "Bash", "input": {"command": command, "description": description}}
    if probe:
        step["probe"] = probe
    return step


@dataclass(frozen=True)
class HostileTask:
    id: str
    baseline: list[dict[str, Any]]
    skill: list[dict[str, Any]] = field(default_factory=list)
    verify_cmd: str = "true"
    protected_paths: tuple[str, ...] = ()
    timeout_s: int | None = None
    read_skill: bool = False

    @property
    def prompt(self) -> str:
        return f"Security probe task <<{self.id}>>: follow your instructions."


MEAN_VERIFY = "python3 -m unittest -q tests.test_stats.MeanTests"
"""The demo repository's fix-mean check: fails on the base, passes after the honest fix."""


def mean_task(setup_root: Path, task_id: str, baseline: list[dict[str, Any]] | None = None) -> HostileTask:
    """A fix-mean task with its tests protected: the skill arm makes the honest fix (the positive
    control for verify and judge); the baseline arm runs ``baseline`` (the attack), else the same fix."""
    fix = demo_task_scripts(setup_root)["fix-mean"]["success"]
    return HostileTask(task_id, baseline=baseline or fix, skill=fix, verify_cmd=MEAN_VERIFY, protected_paths=("tests",))


def write_hostile(
    setup_root: Path,
    name: str,
    tasks: list[HostileTask],
    *,
    budgets: Mapping[str, Any] | None = None,
    resources: Mapping[str, Any] | None = None,
    scenario_extra: Mapping[str, Any] | None = None,
    execution_extra: Mapping[str, Any] | None = None,
) -> tuple[Path, Path]:
    """A locked experiment over ``tasks``: the baseline arm runs ``baseline`` steps, the skill arm ``skill``."""
    demo = setup_root / "demo"
    tasks_file = demo / f"tasks-{name}.json"
    tasks_file.write_text(
        json.dumps(
            {
                "tasks": [
                    {
                        "id": t.id,
                        "prompt": t.prompt,
                        "verify_cmd": t.verify_cmd,
                        "pass_criteria": "n/a",
                        "protected_paths": list(t.protected_paths),
                        **({"timeout_s": t.timeout_s} if t.timeout_s else {}),
                    }
                    for t in tasks
                ]
            }
        )
    )
    scenario: dict[str, Any] = {
        "seed": 1,
        "skill_marker": SKILL_MARKER,
        "defaults": {"usage": {"input_tokens": 1000, "output_tokens": 20}},
        "judge": {"mode": "follow_verify", "usage": {"input_tokens": 500, "output_tokens": 20}},
        "tasks": {
            t.id: {
                "success": t.baseline,
                "failure": t.skill,
                "arms": {
                    "baseline": {"p_success": 1},
                    "skill": {"p_success": 0, "read_skill": t.read_skill},
                },
            }
            for t in tasks
        },
        **(scenario_extra or {}),
    }
    execution: dict[str, Any] = {
        "budgets": {
            "per_trial_usd": 0.5,
            "judge_usd": 0.05,
            "timeout_s": 60,
            "verify_timeout_s": 30,
            "judge_timeout_s": 30,
            **(budgets or {}),
        }
    }
    if resources:
        execution["resources"] = dict(resources)
    execution.update(execution_extra or {})
    return write_experiment(
        setup_root,
        name,
        tasks=[t.id for t in tasks],
        scenario=scenario,
        # an attack is judged by what each trial records, so every planned trial runs: no early stop
        extra={"tasks": tasks_file.name, "execution": execution, "decision": {"futility_stop": False}},
    )


def scripted_events(out: Path) -> list[dict[str, Any]]:
    path = out / "scripted-api.log"
    events = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def probes(out: Path) -> dict[tuple[str, str, str], str]:
    """(task, arm, probe name) -> the tool result the CLI sent back for that probe step."""
    found: dict[tuple[str, str, str], str] = {}
    for e in scripted_events(out):
        if e.get("event") == "probe":
            found[(str(e["task"]), str(e["arm"]), str(e["name"]))] = str(e.get("output", ""))
    return found


def kv(output: str) -> dict[str, str]:
    """``key=value`` lines of a probe's output."""
    out: dict[str, str] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


class Inspector:
    """Watches the containers this test process's harness starts: ``docker inspect`` of each
    (while it exists) and optional per-role callbacks that run once per container."""

    def __init__(self, engine: Engine, hooks: Mapping[str, Callable[[str, dict[str, Any]], None]] | None = None):
        self.engine = engine
        self.hooks = dict(hooks or {})
        self.seen: dict[str, dict[str, Any]] = {}
        self.networks: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.errors: list[str] = []

    def _loop(self) -> None:
        selector = {"harness.pid": str(os.getpid())}
        while not self._stop.is_set():
            try:
                objects = self.engine.labelled(selector)
            except HarnessError:
                objects = []
            for kind, name, labels in objects:
                if kind == "network":
                    if name not in self.networks:
                        try:
                            self.networks[name] = self.engine.client.api.inspect_network(name)
                        except Exception:
                            pass
                    continue
                if name in self.seen:
                    continue
                try:
                    data = self.engine.inspect(name)
                except HarnessError:
                    continue
                self.seen[name] = data
                hook = self.hooks.get(labels.get("harness.role", ""))
                if hook is not None:
                    threading.Thread(target=self._call, args=(hook, name, data), daemon=True).start()
            self._stop.wait(0.1)

    def _call(self, hook: Callable[[str, dict[str, Any]], None], name: str, data: dict[str, Any]) -> None:
        try:
            hook(name, data)
        except Exception as e:  # recorded, asserted by the test
            self.errors.append(f"{name}: {type(e).__name__}: {e}")

    def by_role(self, role: str) -> list[dict[str, Any]]:
        return [d for d in self.seen.values() if d["Config"]["Labels"].get("harness.role") == role]

    @contextmanager
    def running(self) -> Iterator[Inspector]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=10)


def files_containing(root: Path, needle: bytes) -> list[str]:
    """Every regular file under root whose bytes contain needle (symlinks not followed)."""
    hits = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            try:
                if needle in path.read_bytes():
                    hits.append(str(path))
            except OSError:
                continue
    return hits


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def control_run(
    image: str, argv: list[str], *, extra: list[str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """A plain ``docker run`` (no harness hardening): the positive control for in-container probes.
    Labelled like every harness object so a crash leaves nothing the test fixtures would miss."""
    labels = make_labels("sec-control", role="control", ttl_s=600, purpose="test")
    label_args = [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]
    name = f"hxsec-control-{secrets.token_hex(4)}"
    try:
        return subprocess.run(
            ["docker", "run", "--name", name, "--network", "none", *label_args, *(extra or []), image, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
