"""Benchmarks of the harness, measured in one run on this machine, as ratios against baselines of the same run.

    python3 scripts/bench.py            # make bench; about 35 minutes on 2 cores (20 of them: throughput)
    python3 scripts/bench.py --quick    # fewer trials, for a smoke check

Every experiment runs the real pipeline (real CLI, containers, git, verify,
judge) against the scripted Messages API, so costs are exact and nothing leaves
the machine. Prints a Markdown table:

1. per-trial harness overhead: a trial at model latency 0 (so everything but
   the model's time) against the same number of bare ``docker run --rm IMAGE
   true`` starts as the trial uses containers (5: gateway, agent, collect,
   verify, judge);
2. ``--jobs 8`` over ``--jobs 1`` on 16 trials with 2 s model latency per turn;
3. dollars and trials saved by baseline reuse over 3 skills, and by the
   preregistered early stops for a skill with no effect (measured runs, plus the
   expectation over simulated runs of the same design): the point rule's
   curtailment, and the interval rule's futility stop (6 tasks, the smallest
   plan it is armed for);
4. the trial image's size against a plain Debian + npm install of the same CLI
   (the trial image's own build stage, built here or taken from the build
   cache), and the time from ``skilltrial demo`` start to its first trial with
   the images cached.

5. issue 17's scaling row: the per-trial harness overhead (phases minus the agent's and the judge's CLI
   run time) with 0 / 20k / 100k / 500k small files added to the repository, the largest disk any one
   running trial holds, and the one-off cost of the run's base tree (``--scaling-files`` to choose).
6. issue 15's remote row: a trial's phase times on a docker-in-docker engine reached over TCP (volume
   workspaces: nothing of the trial is a path of the controller's) against the machine's engine
   (overlay workspaces), and the machine's engine with volume workspaces (``--only remote``).
8. issue 29's pool row (``--only pool``): the same latency-bound design on 1, 2 and 3 docker-in-docker
   engines (tests/remote/dind.py: TCP, TLS, ssh) with the same per-engine slot limit, as wall-time ratios of
   one run. All engines share this machine's cores, so it measures dispatch, not added hardware.
7. issue 27's throughput rows (``--only throughput``, root and cgroup v1; :mod:`scripts.throughput`): the CPU
   one trial costs the machine by part against the two Claude Code processes, a trial's peak memory, and
   64 trials with 10 s model latency per turn at ``--jobs 32`` against ``--jobs 1``. ``--only cpu``: the first
   of them alone (about a minute), for an A/B of a change: run it in the two checkouts in turn.

Trials hold slots of a private slot directory, so trials of other harness
processes on the machine do not block the bench (they still share its cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.analysis.curtail import early_stop_verdict
from harness.analysis.estimates import analyze
from harness.analysis.observations import Observation
from harness.demo import prepare_demo
from harness.experiment.events import Events, NullEvents
from harness.experiment.experiment import Experiment, ExperimentResult
from harness.experiment.options import RunOptions
from harness.host.paths import HostPaths
from harness.results.attempts import spent_usd
from harness.sandbox.engine import Engine, EngineAddress
from harness.sandbox.images import ImageBuilder, ImageSet, project_root
from harness.study.config import DecisionSettings, load_study
from harness.study.lock import lock

ROOT = project_root()
CONTAINERS_PER_TRIAL = 5
TASKS = ["fix-mean", "fix-median", "fix-slugify", "add-word-count", "fix-title-case"]
FUTILITY_TASKS = [*TASKS, "fix-spread"]
"""Every demo task with a scripted solution: the interval rule's futility stop needs a plan of 6 tasks."""


@dataclass
class Row:
    figure: str
    measured: str
    baseline: str
    ratio: str
    target: str


BUDGETS = {"per_trial_usd": 0.5, "judge_usd": 0.05, "timeout_s": 300, "verify_timeout_s": 120}
"""Every bench experiment's budgets (the simulation bounds future costs by the same cap)."""


def log(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------- setup


class Bench:
    def __init__(self, work: Path, quick: bool) -> None:
        self.work = work
        self.quick = quick
        self.engine = Engine()
        self.images: ImageSet = ImageBuilder(self.engine).ensure()
        self.setup = prepare_demo(work / "demo")
        self.scripts = self._task_scripts()
        self.trials_root = work / "trials"
        self.trials_root.mkdir(mode=0o700, exist_ok=True)
        self.slots = work / "slots"
        third = self.setup.root / "skills" / "terse-reviewer"
        third.mkdir(exist_ok=True)
        (third / "SKILL.md").write_text("---\nname: terse-reviewer\n---\nReview tersely. terse-reviewer-5a1f\n")
        self.n = 0
        self.scenarios: dict[Path, Path] = {}
        self.scaling_files: tuple[int, ...] = ()
        self.steps_asked = False
        """``--only`` named the steps (a step that cannot run here stops the bench instead of being left out)."""
        self.notes: list[str] = []
        """Tables a step prints after the rows (the throughput part's CPU by part)."""

    def _task_scripts(self) -> dict[str, Any]:
        data = yaml.safe_load((self.setup.root / "demo" / "scenario.yaml").read_text())
        return {t: {k: v for k, v in s.items() if k in ("success", "failure")} for t, s in data["tasks"].items()}

    def experiment(
        self,
        *,
        skill: str,
        tasks: Sequence[str],
        runs: int,
        scenario: dict[str, Any],
        decision_settings: dict[str, Any] | None = None,
        repo: str = "repo",
    ) -> Path:
        self.n += 1
        demo = self.setup.root / "demo"
        prereg = {
            "skill": skill,
            "skill_ref": f"../skills/{skill}",
            "tasks": "tasks.json",
            "target_tasks": list(tasks),
            "execution": {
                "runs_per_arm": runs,
                "model": "sonnet",
                "judge_model": "haiku",
                "repo": repo,
                "seed": 11,
                "allowed_tools": ["Bash", "Edit", "Read"],
                "max_infra_retries": 1,
                "budgets": BUDGETS,
            },
            "decision": decision_settings or {},
        }
        path = demo / f"bench-{self.n}-{skill}.yaml"
        path.write_text(yaml.safe_dump(prereg, sort_keys=False))
        lock(path)
        self.scenarios[path] = demo / f"bench-{self.n}-scenario.yaml"
        self.scenarios[path].write_text(yaml.safe_dump(scenario, sort_keys=False))
        return path

    def scenario(
        self, tasks: Sequence[str], *, latency_ms: int, baseline_p: float, skills: dict[str, float]
    ) -> dict[str, Any]:
        markers = {
            "careful-fixer": "careful-fixer-7c1e",
            "verbose-planner": "verbose-planner-2b9d",
            "terse-reviewer": "terse-reviewer-5a1f",
        }
        usage = {"input_tokens": 3000, "output_tokens": 400}
        return {
            "seed": 7,
            "defaults": {"usage": usage, "latency_ms": latency_ms},
            "arms": {"baseline": {"p_success": baseline_p, "usage": usage}},
            "skills": {s: {"marker": markers[s], "p_success": p, "usage": usage} for s, p in skills.items()},
            "judge": {"mode": "follow_verify", "usage": {"input_tokens": 1500, "output_tokens": 80}},
            "tasks": {t: dict(self.scripts[t]) for t in tasks},
        }

    def run(
        self,
        prereg: Path,
        *,
        jobs: int,
        out: str,
        reuse_from: Sequence[Path] = (),
        events: Events | None = None,
        engine: Engine | None = None,
        env: dict[str, str] | None = None,
        engines: Sequence[EngineAddress] = (),
        engine_slots: int | None = None,
    ) -> tuple[ExperimentResult, float]:
        """``engine``: another engine than the machine's (the remote row); ``env``: the run's environment
        knobs (e.g. ``HARNESS_WORKSPACE``); ``engines``: a pool instead (the pool row), each holding
        ``engine_slots`` trials at once."""
        study = load_study(prereg)
        scenario = self.scenarios[prereg]
        options = RunOptions(
            out=self.work / out,
            jobs=jobs,
            scripted=scenario,
            paths=dataclasses.replace(
                HostPaths.from_env(os.environ),
                work_root=self.trials_root,
                slots_dir=self.slots,
                engines=self.work / "engines-record",  # its engines are gone after it: gc need not look for them
            ),
            host_slots=max(jobs, 8),
            reuse_from=tuple(reuse_from),
            preflight=False,  # per-trial figures: the preflight is measured by tests/integration/test_preflight.py
            env=env or {},
            engines=tuple(engines),
            engine_slots=engine_slots,
        )
        t0 = time.monotonic()
        result = Experiment(study, None if engines else engine or self.engine, options, events).run()
        wall = time.monotonic() - t0
        bad = [r for r in result.records if r.status == "infra_error"]
        if bad:
            log(f"{out}: {len(bad)} infrastructure failure(s), e.g. {bad[0].error}")
        return result, wall


# ------------------------------------------------------------------------ figures


def bare_docker_run(image: str, n: int) -> list[float]:
    """Seconds of each of ``n`` ``docker run --rm IMAGE true`` (the docker CLI, as a user would type it)."""
    docker = shutil.which("docker")
    if docker is None:
        raise SystemExit("bench: the docker CLI is needed for the bare-start floor")
    subprocess.run([docker, "run", "--rm", image, "true"], check=True, capture_output=True)  # warm
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run([docker, "run", "--rm", image, "true"], check=True, capture_output=True)
        times.append(time.monotonic() - t0)
    return times


def overhead(bench: Bench) -> list[Row]:
    tasks = TASKS[:2] if bench.quick else TASKS[:4]
    prereg = bench.experiment(
        skill="careful-fixer",
        tasks=tasks,
        runs=1,
        scenario=bench.scenario(tasks, latency_ms=0, baseline_p=1, skills={"careful-fixer": 1}),
    )
    # the floor is measured half before and half after the trials, and its median taken: a shared
    # machine's load drifts over a minute, and one side alone can be off by 2x
    n_floor = 10 if bench.quick else 24
    floor_times = bare_docker_run(bench.images.trial, n_floor // 2)
    result, wall = bench.run(prereg, jobs=1, out="overhead")
    floor_times += bare_docker_run(bench.images.trial, n_floor // 2)
    trials = [r for r in result.records if r.status == "completed"]
    per_trial = statistics.mean(sum(r.durations_s.values()) for r in trials)
    cli = statistics.mean((r.agent.duration_ms or 0) / 1000 for r in trials if r.agent is not None)
    judge_cli = statistics.mean((r.judge.duration_ms or 0) / 1000 for r in trials if r.judge is not None)
    floor_one = statistics.median(floor_times)
    floor = CONTAINERS_PER_TRIAL * floor_one
    phases = {p: statistics.mean(r.durations_s.get(p, 0.0) for r in trials) for p in trials[0].durations_s}
    log("phases (mean s): " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
    return [
        Row(
            f"per-trial time at model latency 0, `--jobs 1` ({len(trials)} trials)",
            f"{per_trial:.2f} s",
            f"{CONTAINERS_PER_TRIAL} x `docker run --rm IMAGE true` = {floor:.2f} s",
            f"{per_trial / floor:.2f}x",
            "<= 1.5x",
        ),
        Row(
            "same, minus the agent CLI's own run time (its duration_ms)",
            f"{per_trial - cli:.2f} s",
            f"{floor:.2f} s",
            f"{(per_trial - cli) / floor:.2f}x",
            "",
        ),
        Row(
            "same, minus both CLI processes' run time (agent and judge duration_ms)",
            f"{per_trial - cli - judge_cli:.2f} s",
            f"{floor:.2f} s",
            f"{(per_trial - cli - judge_cli) / floor:.2f}x",
            "",
        ),
        Row(
            "experiment wall time per trial (setup and scheduling included)",
            f"{wall / len(result.records):.2f} s",
            f"{floor:.2f} s",
            f"{wall / len(result.records) / floor:.2f}x",
            "",
        ),
    ]


def speedup(bench: Bench) -> list[Row]:
    tasks = TASKS[:2] if bench.quick else TASKS[:4]
    runs = 2
    latency = 2000
    scen = bench.scenario(tasks, latency_ms=latency, baseline_p=1, skills={"careful-fixer": 1})
    walls = {}
    n = 0
    for jobs in (1, 8):
        prereg = bench.experiment(skill="careful-fixer", tasks=tasks, runs=runs, scenario=scen)
        result, wall = bench.run(prereg, jobs=jobs, out=f"speedup-j{jobs}")
        walls[jobs] = wall
        n = len(result.records)
        log(f"--jobs {jobs}: {n} trials in {wall:.1f} s")
    return [
        Row(
            f"{n} trials, {latency / 1000:g} s model latency per turn: `--jobs 8` wall time",
            f"{walls[8]:.1f} s",
            f"`--jobs 1`: {walls[1]:.1f} s",
            f"{walls[1] / walls[8]:.2f}x faster",
            ">= 5x",
        )
    ]


def reuse_savings(bench: Bench) -> list[Row]:
    tasks = TASKS[:2] if bench.quick else TASKS[:4]
    skills = ["careful-fixer", "verbose-planner", "terse-reviewer"]
    scen = bench.scenario(tasks, latency_ms=0, baseline_p=0.4, skills=dict.fromkeys(skills, 0.6))
    fresh_trials = 0
    spent = 0.0
    saved_usd = 0.0
    saved_trials = 0
    outs: list[Path] = []
    for skill in skills:
        prereg = bench.experiment(skill=skill, tasks=tasks, runs=2, scenario=scen)
        result, _ = bench.run(prereg, jobs=8, out=f"reuse-{skill}", reuse_from=outs)
        outs.append(bench.work / f"reuse-{skill}")
        spent += spent_usd(result.records)
        fresh_trials += sum(1 for r in result.records if r.reused_from is None)
        reused = [r for r in result.records if r.reused_from is not None]
        saved_trials += len(reused)
        saved_usd += sum(r.total_cost_usd for r in reused)
    total_trials = fresh_trials + saved_trials
    return [
        Row(
            f"3 skills x {len(tasks)} tasks x 2 runs, baseline reused across skills",
            f"{fresh_trials} trials, ${spent:.4f}",
            f"without reuse: {total_trials} trials, ${spent + saved_usd:.4f}",
            f"{saved_trials} trials ({saved_trials / total_trials:.0%}) and ${saved_usd:.4f} "
            f"({saved_usd / (spent + saved_usd):.0%}) saved",
            "",
        )
    ]


def early_stop_savings(bench: Bench) -> list[Row]:
    tasks = TASKS[:3] if bench.quick else TASKS
    runs = 3
    scen = bench.scenario(tasks, latency_ms=0, baseline_p=0.5, skills={"careful-fixer": 0.5})
    spent: dict[str, float] = {}
    counts: dict[str, tuple[int, int]] = {}
    verdicts: dict[str, str] = {}
    for mode in ("none", "curtail"):
        prereg = bench.experiment(
            skill="careful-fixer",
            tasks=tasks,
            runs=runs,
            scenario=scen,
            decision_settings={"rule": "point", "early_stop": mode},
        )
        result, _ = bench.run(prereg, jobs=2, out=f"early-{mode}")
        spent[mode] = spent_usd(result.records)
        skipped = sum(1 for r in result.records if r.status == "skipped")
        counts[mode] = (len(result.records) - skipped, skipped)
        from harness.reporting.model import analyze_records

        study = load_study(prereg)
        data = analyze_records(study, result.records, lock_hash=result.lock_hash, experiment_dir=bench.work)
        verdicts[mode] = data.decision.verdict
    ran, skipped = counts["curtail"]
    saved = spent["none"] - spent["curtail"]
    sim_mean, sim_share_stopped = simulate_null_curtailment(len(tasks), runs, reps=100 if bench.quick else 400)
    return [
        Row(
            f"skill with no effect ({len(tasks)} tasks x {runs} runs, p=0.5 both arms), early stop: curtail",
            f"{ran} trials run, ${spent['curtail']:.4f} (verdict {verdicts['curtail']})",
            f"full plan: {sum(counts['none'])} trials, ${spent['none']:.4f} (verdict {verdicts['none']})",
            f"{skipped} trials ({skipped / sum(counts['none']):.0%}) and ${saved:.4f} saved",
            "",
        ),
        Row(
            "same design, expectation over simulated null runs (curtailment after every trial)",
            f"{sim_mean:.1%} of trials saved on average",
            f"stopped early in {sim_share_stopped:.0%} of runs",
            "",
            "",
        ),
        *futility_savings(bench),
    ]


FUTILITY = DecisionSettings(rule="interval", futility_stop=True)


def futility_savings(bench: Bench) -> list[Row]:
    """The interval rule's futility stop on a skill with no effect, against the same plan run in full."""
    tasks, runs = FUTILITY_TASKS, 2 if bench.quick else 3
    scen = bench.scenario(tasks, latency_ms=0, baseline_p=0.5, skills={"careful-fixer": 0.5})
    spent: dict[bool, float] = {}
    counts: dict[bool, tuple[int, int]] = {}
    verdicts: dict[bool, str] = {}
    for stop in (False, True):
        prereg = bench.experiment(
            skill="careful-fixer",
            tasks=tasks,
            runs=runs,
            scenario=scen,
            decision_settings={"rule": "interval", "futility_stop": stop},
        )
        result, _ = bench.run(prereg, jobs=2, out=f"futility-{'on' if stop else 'off'}")
        spent[stop] = spent_usd(result.records)
        skipped = sum(1 for r in result.records if r.status == "skipped")
        counts[stop] = (len(result.records) - skipped, skipped)
        from harness.reporting.model import analyze_records

        data = analyze_records(
            load_study(prereg), result.records, lock_hash=result.lock_hash, experiment_dir=bench.work
        )
        verdicts[stop] = data.decision.verdict
    ran, skipped = counts[True]
    planned = sum(counts[False])
    sim_mean, sim_share_stopped = simulate_null_curtailment(
        len(tasks), runs, reps=100 if bench.quick else 400, settings=FUTILITY
    )
    return [
        Row(
            f"skill with no effect ({len(tasks)} tasks x {runs} runs, p=0.5 both arms), interval rule, futility stop",
            f"{ran} trials run, ${spent[True]:.4f} (verdict {verdicts[True]})",
            f"full plan: {planned} trials, ${spent[False]:.4f} (verdict {verdicts[False]})",
            f"{skipped} trials ({skipped / planned:.0%}) and ${spent[False] - spent[True]:.4f} saved",
            "",
        ),
        Row(
            "same design, expectation over simulated null runs (futility stop after every trial)",
            f"{sim_mean:.1%} of trials saved on average",
            f"stopped early in {sim_share_stopped:.0%} of runs",
            "",
            "",
        ),
    ]


def simulate_null_curtailment(
    tasks: int, runs: int, *, reps: int, seed: int = 20261130, settings: DecisionSettings | None = None
) -> tuple[float, float]:
    """Mean share of planned trials the preregistered early stop saves for a null skill (p=0.5, equal
    costs), checked after every trial in plan order: the same check the loop makes with --jobs 1. The
    point rule's curtailment unless ``settings`` preregister another stop (:data:`FUTILITY`)."""
    from harness.plan import plan_trials
    from harness.study.config import Task

    settings = settings or DecisionSettings(rule="point", early_stop="curtail")
    rng = random.Random(seed)
    task_objs = [Task(id=f"t{i}", prompt=f"p{i}", verify_cmd="true") for i in range(tasks)]
    task_ids = [t.id for t in task_objs]
    cap = BUDGETS["per_trial_usd"] + BUDGETS["judge_usd"]  # the gateway's per-trial cap in the measured runs
    saved: list[float] = []
    stopped = 0
    for _ in range(reps):
        specs = plan_trials(task_objs, runs, rng.randrange(1 << 30))
        obs: list[Observation] = []
        used = len(specs)
        for i, spec in enumerate(specs):
            out = "pass" if rng.random() < 0.5 else "fail"
            obs.append(Observation(task_id=spec.task.id, arm=spec.arm, outcome=out, cost_usd=0.01))  # type: ignore[arg-type]
            if {o.arm for o in obs} != {"baseline", "skill"}:
                continue
            analysis = analyze(obs, settings)
            verdict, _ = early_stop_verdict(analysis, settings, runs, task_ids, max_cost_per_trial=cap)
            if verdict is not None:
                used = i + 1
                break
        if used < len(specs):
            stopped += 1
        saved.append(1 - used / len(specs))
    return statistics.mean(saved), stopped / reps


def image_sizes(bench: Bench) -> list[Row]:
    trial_size = bench.engine.image_size(bench.images.trial)
    naive_size, how = naive_image_size(bench)
    return [
        Row(
            "trial image size (the pinned CLI's native binary on Debian slim + git)",
            f"{trial_size / 1e9:.2f} GB",
            f"Debian + npm install of the same CLI: {naive_size / 1e9:.2f} GB ({how})",
            f"{trial_size / naive_size:.2f}x ({naive_size / trial_size:.1f}x smaller)",
            "much smaller than 1.83 GB",
        )
    ]


def naive_image_size(bench: Bench) -> tuple[float, str]:
    """The trial image's own build stage, on its own: Debian, apt nodejs + npm, npm install -g of the CLI."""
    text = (ROOT / "Dockerfile.trial").read_text()
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("FROM ${BUILDER_IMAGE} AS cli"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("FROM "))
    stage = "ARG BUILDER_IMAGE\n" + "".join(lines[start:end]).replace(" AS cli", "")
    tag = "harness-bench-naive:latest"
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        ctx = Path(tmp)
        (ctx / "Dockerfile").write_text(stage)
        ca = Path("/etc/ssl/certs/ca-certificates.crt")
        (ctx / "extra-ca.crt").write_bytes(ca.read_bytes() if ca.is_file() else b"")
        t0 = time.monotonic()
        try:
            bench.engine.build(
                ctx,
                dockerfile="Dockerfile",
                tag=tag,
                buildargs={"BUILDER_IMAGE": bench.images.runtime},
                labels={"harness.owner": "skill-harness", "harness.purpose": "bench"},
            )
        except Exception as e:  # a registry that cannot be reached: cite the measurement instead
            log(f"naive image build failed ({e}); citing the 1.83 GB measured once")
            return 1.83e9, "cited, not built here"
        took = time.monotonic() - t0
    size = float(bench.engine.image_size(tag))
    bench.engine.remove_image(tag)  # its layers are the trial build's npm stage, which `images prune` removes
    return size, ("from the build cache" if took < 20 else f"built in {took:.0f} s")


def demo_first_trial(bench: Bench) -> list[Row]:
    out = bench.work / "demo-run"
    env = {**os.environ, "HARNESS_SLOTS_DIR": str(bench.slots)}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "demo", "--out", str(out), "--jobs", "4"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    first: float | None = None
    try:
        while time.monotonic() - t0 < 180 and proc.poll() is None:
            objects = bench.engine.labelled({"harness.pid": str(proc.pid)})
            if any(lb.get("harness.role") == "gateway" for kind, _, lb in objects if kind == "container"):
                first = time.monotonic() - t0
                break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if first is None:
        raise SystemExit("bench: the demo started no trial within 180 s")
    return [Row("`skilltrial demo` start to its first trial, images cached", f"{first:.1f} s", "", "", "")]


class _Messages(NullEvents):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


class _DiskSampler:
    """The largest ``du -sx`` of any one trial directory while the run is live (``-x``: an overlay's
    merged view is another filesystem and not counted; its upper directory, what the trial wrote, is)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _DiskSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            for run in self.root.glob("*/"):
                for trial in run.iterdir():
                    if trial.name.startswith("base-") or not trial.is_dir():
                        continue
                    out = subprocess.run(["du", "-sxk", str(trial)], capture_output=True, text=True, check=False)
                    if out.returncode == 0 and out.stdout.split():
                        self.peak_kib = max(self.peak_kib, int(out.stdout.split()[0]))


def _scaled_repo(bench: Bench, files: int) -> str:
    """A copy of the demo repository with ``files`` small files more, committed; its path relative to the
    demo directory (where the bench's preregistrations live)."""
    demo = bench.setup.root / "demo"
    repo = demo / f"repo-{files}"
    if repo.exists():
        return repo.name
    subprocess.run(["git", "clone", "-q", str(demo / "repo"), str(repo)], check=True)
    for i in range(files):
        d = repo / "vendor" / f"d{i // 1000:04d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", f"{files} files"], check=True, env=env)
    return repo.name


def scaling(bench: Bench) -> list[Row]:
    """Issue 17: a trial's cost against the size of the user's repository (one task, 2 runs per arm,
    ``--jobs 1``). Overhead is a trial's phases minus the agent's and the judge's CLI run time."""
    sizes = bench.scaling_files or ((0, 20_000) if bench.quick else (0, 20_000, 100_000, 500_000))
    sizes = (0, *sorted({n for n in sizes if n}))
    task = TASKS[:1]
    found: dict[int, tuple[float, float, str, str]] = {}
    zeros: list[float] = []
    # 0 files is measured first and again last, and the two averaged: a shared machine's load drifts
    for i, files in enumerate((*sizes, 0)):
        log(f"scaling: {files} files ...")
        prereg = bench.experiment(
            skill="careful-fixer",
            tasks=task,
            runs=2,
            scenario=bench.scenario(task, latency_ms=0, baseline_p=1, skills={"careful-fixer": 1}),
            repo=_scaled_repo(bench, files) if files else "repo",
        )
        events = _Messages()
        with _DiskSampler(bench.trials_root) as disk:
            result, _wall = bench.run(prereg, jobs=1, out=f"scaling-{i}-{files}", events=events)
        trials = [r for r in result.records if r.status == "completed"]
        if not trials:
            raise SystemExit(f"bench: no trial completed at {files} files: {result.records[0].error}")
        over = statistics.mean(
            sum(r.durations_s.values())
            - (r.agent.duration_ms or 0) / 1000
            - ((r.judge.duration_ms or 0) / 1000 if r.judge is not None else 0)
            for r in trials
            if r.agent is not None
        )
        ready = next((line for line in events.lines if line.startswith("base tree of")), "base tree: not reported")
        one_off = ready.split(" ready in ")[-1].split(" s")[0] if " ready in " in ready else "?"
        kinds = ",".join(sorted({r.workspace or "?" for r in trials}))
        log(f"scaling: {files} files: overhead {over:.2f} s, peak trial disk {disk.peak_kib} KiB, {ready}")
        if files == 0:
            zeros.append(over)
            if len(zeros) == 2:  # the second measurement at 0 files: keep the first's one-off and disk
                found[0] = (statistics.mean(zeros), *found[0][1:])
                continue
        found[files] = (over, disk.peak_kib / 1024, one_off, kinds)
    zero = found[0][0]
    return [
        Row(
            f"per-trial harness overhead at {files:,} files ({kinds} workspace; one-off base tree {one_off} s)"
            + (" (measured first and last, averaged)" if files == 0 else ""),
            f"{over:.2f} s, trial disk peak {mib:.1f} MiB",
            f"{zero:.2f} s at 0 files",
            f"{over / zero:.2f}x",
            "<= 1.5x at 500,000" if files == max(sizes) else "",
        )
        for files, (over, mib, one_off, kinds) in found.items()
    ]


PHASES = ("workspace", "gateway", "agent", "extract", "verify", "judge", "teardown")


def _phase_means(result: ExperimentResult) -> dict[str, float]:
    trials = [r for r in result.records if r.status == "completed"]
    if not trials:
        raise SystemExit(f"bench: no trial completed: {result.records[0].error if result.records else 'no records'}")
    means = {p: statistics.mean(r.durations_s.get(p, 0.0) for r in trials) for p in PHASES}
    means["total"] = statistics.mean(sum(r.durations_s.values()) for r in trials)
    return means


def remote(bench: Bench) -> list[Row]:
    """Issue 15 item 7: a trial's phase times on an engine that shares no filesystem with the controller
    (docker-in-docker reached over TCP on a network the bench creates, tests/remote/dind.py; volume
    workspaces) against the machine's engine (overlay workspaces on the controller's disk), and the
    machine's engine with volume workspaces (what the volumes cost, apart from the engine). The same
    design on each (2 tasks x 2 runs per arm, model latency 0, ``--jobs 1``), run local, volume, remote,
    then local again (a shared machine's load drifts; the two local runs are averaged)."""
    from tests.remote import dind

    tasks = TASKS[:1] if bench.quick else TASKS[:2]
    runs = 1 if bench.quick else 2

    def design() -> Path:
        return bench.experiment(
            skill="careful-fixer",
            tasks=tasks,
            runs=runs,
            scenario=bench.scenario(tasks, latency_ms=0, baseline_p=1, skills={"careful-fixer": 1}),
        )

    images = bench.images
    t0 = time.monotonic()
    with dind.remote_engine(images.runtime, [images.base, images.runtime, images.sidecar, images.trial]) as far:
        log(f"remote: inner engine at {far.docker_host} ready in {time.monotonic() - t0:.0f} s ({far.seconds})")
        inner = Engine({"DOCKER_HOST": far.docker_host})
        ImageBuilder(inner).ensure()  # the loaded images: nothing is built
        local_a = _phase_means(bench.run(design(), jobs=1, out="remote-local-a")[0])
        volume = _phase_means(bench.run(design(), jobs=1, out="remote-volume", env={"HARNESS_WORKSPACE": "volume"})[0])
        far_result, _ = bench.run(design(), jobs=1, out="remote-far", engine=inner)
        kinds = {r.workspace for r in far_result.records}
        far_means = _phase_means(far_result)
        local_b = _phase_means(bench.run(design(), jobs=1, out="remote-local-b")[0])
    local = {p: (local_a[p] + local_b[p]) / 2 for p in local_a}
    log("remote: phases (mean s) local " + ", ".join(f"{p} {v:.2f}" for p, v in local.items()))
    log("remote: phases (mean s) volume " + ", ".join(f"{p} {v:.2f}" for p, v in volume.items()))
    log("remote: phases (mean s) remote " + ", ".join(f"{p} {v:.2f}" for p, v in far_means.items()))
    n = len(tasks) * runs * 2
    rows = []
    for phase in (*PHASES, "total"):
        ratio = far_means[phase] / local[phase] if local[phase] >= 0.005 else float("nan")
        rows.append(
            Row(
                f"remote engine ({'/'.join(sorted(k or '?' for k in kinds))} workspaces, {n} trials): "
                + ("per-trial total" if phase == "total" else f"{phase} phase"),
                f"{far_means[phase]:.2f} s (local engine, volume workspaces: {volume[phase]:.2f} s)",
                f"{local[phase]:.2f} s on the local engine (overlay workspaces)",
                f"{ratio:.2f}x",
                "",
            )
        )
    return rows


def pool(bench: Bench) -> list[Row]:
    """Issue 29 item 5: one latency-bound design (model latency per turn, so a trial mostly waits) on 1, 2 and
    3 docker-in-docker engines, each holding the same number of trials at once: the wall-time ratios of one
    run. All three engines run on this machine's cores: the row measures how well the pool dispatches, not
    added hardware."""
    from tests.remote import dind

    tasks = TASKS[:2] if bench.quick else TASKS[:4]
    runs, latency, slots = 2, 4000, 2
    images = bench.images
    t0 = time.monotonic()
    with dind.dind_engines(images.runtime, [images.base, images.runtime, images.sidecar, images.trial]) as far:
        log(f"pool: three inner engines ready in {time.monotonic() - t0:.0f} s")
        walls: dict[int, float] = {}
        n = 0
        for k in (1, 2, 3):
            scen = bench.scenario(tasks, latency_ms=latency, baseline_p=1, skills={"careful-fixer": 1})
            prereg = bench.experiment(skill="careful-fixer", tasks=tasks, runs=runs, scenario=scen)
            result, walls[k] = bench.run(
                prereg, jobs=0, out=f"pool-{k}", engines=[e.address for e in far[:k]], engine_slots=slots
            )
            n = len(result.records)
            log(f"pool: {k} engine(s), {n} trials in {walls[k]:.1f} s")
    shared = "all engines share this 2-core host: this measures dispatch"
    return [
        Row(
            f"{n} trials, {latency / 1000:g} s model latency per turn, {slots} trials at once per engine: "
            f"{k} engines wall time ({shared})",
            f"{walls[k]:.1f} s",
            f"1 engine: {walls[1]:.1f} s",
            f"{walls[1] / walls[k]:.2f}x faster",
            ">= 1.8x" if k == 2 else ">= 2.5x",
        )
        for k in (2, 3)
    ]


def _measured_here(
    bench: Bench, step: str, rows: Callable[[Bench, Sequence[str], Callable[[str], None]], Any]
) -> list[Row]:
    """A step of :mod:`scripts.throughput`: it needs root and cgroup v1, so a whole ``make bench`` elsewhere
    leaves it out and says so (``--only`` that names it stops instead)."""
    from scripts.throughput import measurable

    why = measurable()
    if why is not None:
        if bench.steps_asked:
            raise SystemExit(f"bench: --only {step} {why}")
        log(f"{step}: left out, it {why}")
        return []
    return [Row(*row) for row in rows(bench, TASKS, log)]


def throughput(bench: Bench) -> list[Row]:
    """Issue 27: CPU per trial by part, memory per trial, 32 trials at once (:mod:`scripts.throughput`)."""
    from scripts.throughput import throughput_rows

    return _measured_here(bench, "throughput", throughput_rows)


def cpu(bench: Bench) -> list[Row]:
    """Issue 27 item 4: the CPU row of :func:`throughput` alone, with its tables of parts and requests."""
    from scripts.throughput import cpu_rows

    return _measured_here(bench, "cpu", cpu_rows)


def table(rows: Sequence[Row]) -> str:
    out = ["| figure | measured | baseline (same run) | ratio | target |", "| --- | --- | --- | --- | --- |"]
    out += [f"| {r.figure} | {r.measured} | {r.baseline} | {r.ratio} | {r.target} |" for r in rows]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer trials (a smoke check, not the figures)")
    parser.add_argument("--out", type=Path, default=Path("bench-output"), help="work directory (default bench-output)")
    parser.add_argument(
        "--only",
        choices=[
            "overhead",
            "speedup",
            "reuse",
            "early",
            "image",
            "demo",
            "scaling",
            "remote",
            "pool",
            "throughput",
            "cpu",
        ],
        action="append",
        help="run only these",
    )
    parser.add_argument(
        "--scaling-files",
        type=lambda text: tuple(int(n) for n in text.split(",")),
        default=(),
        help="repository sizes of the scaling row, e.g. 0,500000 (default 0,20000,100000,500000)",
    )
    args = parser.parse_args(argv)
    work = args.out.resolve()
    marker = work / ".harness-bench"
    if work.exists() and any(work.iterdir()):
        if not marker.exists():
            raise SystemExit(f"bench: {work} exists and is not a bench directory; choose another --out")
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    marker.write_text("scratch directory of scripts/bench.py; removed by the next run\n")
    bench = Bench(work, args.quick)
    bench.scaling_files = args.scaling_files
    bench.steps_asked = bool(args.only)
    t0 = time.monotonic()
    rows: list[Row] = []
    steps = {
        "overhead": overhead,
        "speedup": speedup,
        "reuse": reuse_savings,
        "early": early_stop_savings,
        "image": image_sizes,
        "demo": demo_first_trial,
        "scaling": scaling,
        "remote": remote,
        "pool": pool,
        "throughput": throughput,
    }
    if args.only and "cpu" in args.only:  # a part of throughput: never run twice in a whole bench
        steps["cpu"] = cpu
    for name, step in steps.items():
        if args.only and name not in args.only:
            continue
        log(f"{name} ...")
        rows.extend(step(bench))
    load = os.getloadavg()[0]
    print(table(rows))
    print()
    for note in bench.notes:
        print(note)
        print()
    print(
        f"Measured by `make bench` (`python3 scripts/bench.py`) in {time.monotonic() - t0:.0f} s on "
        f"{os.cpu_count()} cores, load average {load:.1f} at the end; Claude Code {bench.images.claude_code_version}, "
        "scripted Messages API."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
