"""Preflight: every task's ``verify_cmd`` at the base commit, before any agent runs.

A task is only worth trials when its check fails on the base and can run at
all. So before the first agent starts, each target task's verify command runs
on the pristine base tree in the verify container (the same hardened spec as a
trial's verify: trial image, ``--network none``, no key, the preregistered
resources and ``verify_timeout_s``). Its base outcome is one of

    fails       the expected case: the task has something to fix
    passes      the task is trivial (the fix is already there, or the check
                checks nothing): it is skipped, with the reason, in both arms
    cannot_run  exit 126/127, "command not found", "No module named": the
                image lacks the task's toolchain, so every trial would fail the
                same way; the run stops before spending anything
    timeout     the check did not finish at the base; recorded, not skipped

Each task's tree is a fresh volume filled through the engine's archive API from a worktree of the base
made as every trial's is (:func:`harness.host.gitops.checkout_base`: without the lock's ``base_excluded``;
``.git`` left out, owned by the verify user), so the preflight runs on a remote engine too; the
volume is removed after its check. Outcomes are cached by fingerprint (task id, verify command, base commit,
verify image id) beside the work root (``<work root>-preflight-cache``), so a
rerun, a resume or another skill on the same tasks does not run them again. Every task's outcome is written to
``preflight.json`` in the experiment directory, which the reports read.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harness.errors import HarnessError, Interrupted, PrerequisiteError
from harness.host import gitops, workroots
from harness.host.files import atomic_write
from harness.host.trees import remove_tree
from harness.redact import Redactor
from harness.results.load import PREFLIGHT_JSON
from harness.sandbox import lifecycle, names, volumes
from harness.sandbox.deadline import host_deadline_s
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import DockerObject
from harness.study.config import Task
from harness.study.lock import canonical_json, sha256_hex
from harness.trial.basetrees import parse_user

if TYPE_CHECKING:  # the reports read preflight.json without importing the Docker layer
    from harness.sandbox import roles as sandbox
    from harness.sandbox.runtime import ContainerRuntime

FORMAT = 1
TAIL = 4096
Outcome = Literal["fails", "passes", "cannot_run", "timeout"]
CANNOT_RUN = re.compile(
    r"command not found|: not found\s*$|No module named|ModuleNotFoundError|can't open file", re.MULTILINE
)


@dataclass(frozen=True)
class BaseOutcome:
    task_id: str
    outcome: Outcome
    exit_code: int | None
    seconds: float
    """Wall time of the check when it ran (0 when it came from the cache: see ``cached``)."""
    cached: bool
    fingerprint: str
    output_tail: str = ""

    @property
    def reason(self) -> str:
        if self.outcome == "passes":
            return "verify_cmd already passes at the base commit (preflight): nothing to fix"
        if self.outcome == "cannot_run":
            return f"verify_cmd cannot run in the trial image (exit {self.exit_code})"
        if self.outcome == "timeout":
            return "verify_cmd did not finish at the base commit (preflight)"
        return f"verify_cmd fails at the base commit (exit {self.exit_code}), as a task should"


def preflight_fingerprint(task: Task, base_sha: str, verify_image_id: str, leave_out: Sequence[str] = ()) -> str:
    """What a base outcome depends on (pure): ``leave_out`` is what the base tree is made without."""
    inputs: dict[str, Any] = {
        "format": FORMAT,
        "task": task.id,
        "verify_cmd": task.verify_cmd,
        "base_sha": base_sha,
        "verify_image": verify_image_id,
    }
    if leave_out:  # only when set: the outcomes cached before it was recorded stay valid for a whole tree
        inputs["leave_out"] = sorted(leave_out)
    return sha256_hex(canonical_json(inputs))


def classify(exit_code: int | None, timed_out: bool, output: str) -> Outcome:
    """The base outcome of one verify run (pure)."""
    if timed_out or exit_code == 124:
        return "timeout"
    if exit_code in (126, 127) or (exit_code != 0 and CANNOT_RUN.search(output)):
        return "cannot_run"
    return "passes" if exit_code == 0 else "fails"


def cannot_run_error(
    outcomes: Sequence[BaseOutcome], base_image: str | None, leave_out: Sequence[str] = ()
) -> PrerequisiteError:
    """``leave_out``: what the base tree is made without (a verify that needs one of those files cannot run)."""
    lines = "; ".join(f"{o.task_id}: exit {o.exit_code}: {_last_line(o.output_tail)}" for o in outcomes)
    image = f"the base image {base_image}" if base_image else "the default trial image (Debian with python3 and git)"
    left_out = ""
    if leave_out:
        # the paths a failing check's output names first: those are the likely cause
        named = sorted(leave_out, key=lambda p: (not any(p in o.output_tail for o in outcomes), p))
        shown = ", ".join(named[:6]) + (f" and {len(named) - 6} more" if len(named) > 6 else "")
        left_out = (
            f"; or verify_cmd needs a file the lock leaves out of every trial's tree ({shown}): keep it in with "
            "execution.include_paths in the preregistration (a copy of the skill or the tasks is then visible "
            "to both arms), or move what verify needs elsewhere"
        )
    return PrerequisiteError(
        f"preflight: the verify command of {len(outcomes)} task(s) cannot run in {image} ({lines}); "
        "every trial would fail the same way, so nothing was run",
        hint="build an image with the tasks' toolchain (your CI image) and pass it with `--base-image IMAGE`, "
        f"or fix verify_cmd in tasks.json{left_out}; `--no-preflight` skips this check",
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "(no output)")[:160]


class Preflight:
    """Runs (or reads from the cache) the base outcome of each task."""

    def __init__(
        self,
        engine: ContainerRuntime,
        profile: sandbox.Profile,
        *,
        repo: Path,
        base_sha: str,
        verify_image_id: str,
        run_id: str,
        work: Path,
        cache_dir: Path,
        timeout_s: int,
        redactor: Redactor,
        on_message: Callable[[str], None] = lambda _m: None,
        stop: threading.Event | None = None,
        leave_out: Sequence[str] = (),
    ) -> None:
        self.engine = engine
        self.profile = profile
        self.repo = repo
        self.base_sha = base_sha
        self.image_id = verify_image_id
        self.run_id = run_id
        self.work = work
        self.cache_dir = cache_dir
        self.timeout_s = timeout_s
        self.redactor = redactor
        self.on_message = on_message
        self.stop = stop or threading.Event()
        self.leave_out = tuple(leave_out)
        """Paths the base tree is made without (the lock's ``base_excluded``): the trials' tree exactly."""

    def run(self, tasks: Sequence[Task]) -> list[BaseOutcome]:
        out: list[BaseOutcome] = []
        todo: list[tuple[Task, str]] = []
        for task in tasks:
            fp = preflight_fingerprint(task, self.base_sha, self.image_id, self.leave_out)
            cached = self._cached(task.id, fp)
            if cached is not None:
                out.append(cached)
            else:
                todo.append((task, fp))
        if todo:
            self.on_message(f"preflight: checking {len(todo)} task(s)' verify_cmd at the base commit")
            out.extend(self._run_all(todo))
        order = {t.id: i for i, t in enumerate(tasks)}
        return sorted(out, key=lambda o: order[o.task_id])

    # ----------------------------------------------------------------- cache
    def _cache_path(self, fp: str) -> Path:
        return self.cache_dir / f"{fp}.json"

    def _cached(self, task_id: str, fp: str) -> BaseOutcome | None:
        try:
            data = json.loads(self._cache_path(fp).read_text())
            return BaseOutcome(**{**data, "task_id": task_id, "cached": True, "fingerprint": fp})
        except (OSError, ValueError, TypeError):
            return None

    def _store(self, outcome: BaseOutcome) -> None:
        if outcome.outcome == "timeout":
            return  # a timeout may be load on a shared machine: try again next time
        self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(self._cache_path(outcome.fingerprint), json.dumps(asdict(outcome), sort_keys=True).encode())

    # ------------------------------------------------------------------- run
    def _run_all(self, todo: Sequence[tuple[Task, str]]) -> list[BaseOutcome]:
        root = self.work / f"{self.run_id}-preflight"
        root.mkdir(mode=0o700, parents=True, exist_ok=False)
        (root / "owner").write_text(f"{os.getpid()} {socket.gethostname()}\n")  # swept like a run directory
        base = root / "base"
        labels = make_labels(self.run_id, role="preflight", ttl_s=len(todo) * (self.timeout_s + 60) + 3600)
        try:
            workroots.note_repository(root, self.repo)  # a gc after a kill prunes its registration
            gitops.checkout_base(self.repo, base, self.base_sha, self.leave_out)
            out = []
            for i, (task, fp) in enumerate(todo):
                if self.stop.is_set():
                    raise Interrupted("interrupted during the preflight; nothing was recorded")
                outcome = self._one(task, fp, base, labels, i)
                self._store(outcome)
                out.append(outcome)
            return out
        finally:
            try:
                gitops.remove_worktree(self.repo, base)
            except HarnessError:
                pass
            remove_tree(root)

    def _one(self, task: Task, fp: str, base: Path, labels: Mapping[str, str], index: int) -> BaseOutcome:
        from harness.sandbox import roles as sandbox

        uid, gid = parse_user(self.profile.user)  # the verify user's, as a trial's verify tree is
        own = names.TrialNames(self.run_id, f"preflight{index}")
        tree = own.container("tree")
        try:
            volumes.make(
                self.engine,
                tree,
                volumes.tar_tree(base, uid=uid, gid=gid, skip_top=[".git"]),
                image=self.profile.sidecar_image,
                labels=labels,
            )
            t0 = time.monotonic()
            run = lifecycle.run(
                self.engine,
                sandbox.verify_spec(
                    self.profile,
                    name=own.container("verify"),
                    labels=labels,
                    verify_tree=tree,
                    verify_cmd=task.verify_cmd,
                    timeout_s=self.timeout_s,
                ),
                deadline_s=host_deadline_s(self.timeout_s),
                output_cap=TAIL,
            )
            seconds = time.monotonic() - t0
        finally:
            lifecycle.remove_objects(self.engine, [DockerObject("volume", tree)])
        tail = self.redactor.text((run.stdout + run.stderr)[-TAIL:].decode("utf-8", "replace"))
        return BaseOutcome(
            task_id=task.id,
            outcome=classify(run.exit_code, run.timed_out, tail),
            exit_code=run.exit_code,
            seconds=round(seconds, 3),
            cached=False,
            fingerprint=fp,
            output_tail=tail,
        )


def write_record(directory: Path, outcomes: Sequence[BaseOutcome], *, enabled: bool = True) -> None:
    """``preflight.json``: every task's base outcome (what the reports and ``skilltrial report`` read)."""
    data: dict[str, Any] = {
        "format": FORMAT,
        "enabled": enabled,
        "tasks": {o.task_id: {**asdict(o), "reason": o.reason} for o in outcomes},
    }
    atomic_write(directory / PREFLIGHT_JSON, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
