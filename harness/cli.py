"""``skilltrial``: the command line. The only module that prints errors and exits.

Every subcommand is a small function from parsed arguments to an exit code.
Errors are :class:`~harness.errors.HarnessError` subclasses with their own exit
codes and plain messages; a traceback appears only with ``--debug``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from harness import __version__
from harness.errors import ConfigError, HarnessError, Interrupted, PrerequisiteError, ResultsUnavailable
from harness.host.paths import HostPaths
from harness.records import TRIGGER_RESULTS

if TYPE_CHECKING:  # the commands import lazily: `gate` and `report` start without docker-py
    from harness.experiment.progress import Progress
    from harness.records import TriggerRecord
    from harness.sandbox.engine import EngineAddress
    from harness.sandbox.runtime import Runtime
    from harness.study.config import Study

EPILOG = """\
typical use:
  skilltrial init path/to/skill                       write a commented tasks.json and preregistration.yaml
  skilltrial lock path/to/preregistration.yaml        freeze the plan before any trial runs
  skilltrial eval path/to/preregistration.yaml        run it (needs ANTHROPIC_API_KEY and Docker)
  skilltrial demo                                     the whole pipeline offline, scripted model, no key
  skilltrial calibrate path/to/preregistration.yaml   A/A: the baseline against itself (after model/CLI updates)
  skilltrial plan path/to/preregistration.yaml --pilot DIR   tasks x runs for 80% power, and the cost, before a run
  skilltrial gate harness-results/<skill>-<lock>      exit 0 adopt / 1 reject / 2 inconclusive / 3 error
  skilltrial merge OUT SHARD_DIR...                   combine `eval --shard i/n` results (then gate OUT)
  skilltrial report harness-results/<skill>-<lock>    re-render report.md, report.html and junit.xml
  skilltrial history <skill>                          the skill's results over time, by model and date
  skilltrial triggers path/to/triggers.yaml           trigger accuracy of a skill's description(s)

exit codes: 0 ok, 3 infrastructure error, 4 bad input or lock, 5 missing prerequisite, 130 interrupted
"""


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error; here 2 means 'inconclusive' (skilltrial gate), so bad
    arguments exit 4 like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ConfigError.exit_code, f"{self.prog}: error: {message}\n")


def _parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    p = _Parser(
        prog="skilltrial",
        description="Decide by measurement whether a Claude Code Skill should be adopted: the same tasks run "
        "with and without the skill, several times each, in hardened Docker sandboxes, and a rule "
        "locked before the run decides adopt / reject / inconclusive.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=_VersionAction, env=env)
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    d = sub.add_parser(
        "doctor",
        help="check the engine, cgroups, disk, images, gVisor and known-CVE versions",
        description="Check this machine and its engine (DOCKER_HOST). With --engine or --engines-file, check "
        "each engine of a pool instead: reachable, version and kernel, cgroups, runtimes, CPUs and memory, free "
        "disk, the overlay probe, and whether it holds the reference engine's image ids (the first engine is "
        "the reference). Exit 5 when a check fails.",
    )
    _image_args(d)
    _engine_args(d)

    im = sub.add_parser("images", help="build (or show) the base, runtime, sidecar and trial images")
    im.add_argument(
        "action",
        choices=["build", "status", "prune"],
        nargs="?",
        default="build",
        help="build what is missing (default), show the current tags, or remove earlier builds",
    )
    _image_args(im)
    _engine_args(im)
    im.add_argument(
        "--codex",
        action="store_true",
        help="also build the Codex CLI image (the second agent under test, docs/agents.md)",
    )

    it = sub.add_parser(
        "init",
        help="write a commented tasks.json and preregistration.yaml next to a skill folder (never overwrites)",
    )
    it.add_argument("skill", type=Path, metavar="SKILL_DIR", help="the skill folder (holds SKILL.md)")
    it.add_argument("--out", type=Path, help="directory for the two files (default: the skill folder's parent)")

    lk = sub.add_parser("lock", help="freeze a preregistration: locked_at, base commit and SHA-256 over everything")
    lk.add_argument("prereg", type=Path, help="preregistration.yaml")

    ev = sub.add_parser(
        "eval",
        help="run a locked experiment (rerun the same command to resume)",
        description="Run every planned trial of a locked preregistration and decide. Results go to "
        "--out (default harness-results/<skill>-<lock>); rerunning the same command resumes, "
        "never repeating a completed trial.",
    )
    ev.add_argument(
        "prereg",
        type=Path,
        nargs="?",
        help="preregistration.yaml (default: <skill>/preregistration.yaml, then ./preregistration.yaml)",
    )
    ev.add_argument("--skill", type=Path, help="the skill folder; must be the one the preregistration names")
    _run_args(ev)
    _engine_args(ev)
    ev.add_argument(
        "--engine-slots",
        type=int,
        metavar="N",
        help="with --engine: trials at once on each engine (default: each engine's capacity from its CPUs and "
        "memory, as `skilltrial doctor --engine` prints it); --jobs then caps the total",
    )
    ev.add_argument(
        "--scripted",
        type=Path,
        metavar="SCENARIO",
        help="use the scripted Messages API driven by this scenario file (offline, no key)",
    )
    _route_args(ev)
    ev.add_argument("--shard", help="run only shard i of n (for example 2/4); merge shards with `skilltrial merge`")
    ev.add_argument("--resume", action="store_true", help="accepted for clarity: rerunning always resumes")
    ev.add_argument(
        "--reuse-baseline-from",
        type=Path,
        nargs="+",
        default=[],
        metavar="DIR",
        help="reuse baseline trials with an identical baseline fingerprint from these experiment directories "
        "(or folders of them, e.g. harness-results) instead of re-sampling them",
    )

    _calibrate_parser(sub)
    _confirm_parser(sub)
    pl = sub.add_parser(
        "plan",
        help="size an experiment before it runs: an A/B design's tasks, runs and cost for 80%% power, or a "
        "library's expected SE per coefficient",
        description="A/B preregistration: how many tasks and runs per arm reach 80%% power at the minimum worthwhile "
        "gain (or --gain), with the expected cost, from a pilot run, an A/A calibration run, stated pass rates or "
        "default variances; the power function is the one behind every report's smallest detectable effect. "
        "Library preregistration: the expected SE per coefficient and whether the masks identify every skill.",
    )
    pl.add_argument("prereg", type=Path, help="an A/B or library preregistration.yaml")
    pl.add_argument("--sigma-delta", type=float, default=None, metavar="SD",
                    help="library: assumed SD of R - B per pair (default 0.5, for pass/fail rewards)")  # fmt: skip
    src = pl.add_mutually_exclusive_group()
    src.add_argument("--pilot", type=Path, metavar="DIR",
                     help="A/B: size from a pilot run's directory (its variances and its spend per trial)")  # fmt: skip
    src.add_argument("--calibration", type=Path, metavar="DIR",
                     help="A/B: size from an A/A calibration run's directory (its within-task variance)")  # fmt: skip
    src.add_argument("--baseline-rate", type=float, metavar="P",
                     help="A/B: size from a stated baseline pass rate (variance p(1 - p))")  # fmt: skip
    pl.add_argument("--skill-rate", type=float, metavar="Q",
                    help="A/B, with --baseline-rate: the skill arm's pass rate (default P + the gain)")  # fmt: skip
    pl.add_argument("--omega2", type=float, metavar="V",
                    help="A/B: between-task variance of the skill's effect (default 0; a pilot estimates it)")  # fmt: skip
    pl.add_argument("--gain", type=float, metavar="G",
                    help="A/B: the gain to power, as a fraction (default decision.min_worthwhile_gain)")  # fmt: skip
    pl.add_argument("--cost-per-trial", type=float, metavar="USD",
                    help="A/B: cost of one trial, agents and judges (default: the pilot's or calibration's)")  # fmt: skip

    dm = sub.add_parser("demo", help="the full pipeline on the embedded example, against the scripted model")
    dm.add_argument("--out", type=Path, default=Path("demo-output"), help="work directory (default demo-output)")
    dm.add_argument("--jobs", type=int, default=None, help="concurrent trials (default: from cores and memory)")
    dm.add_argument("--runtime", help="container runtime for untrusted containers, e.g. runsc")
    dm.add_argument(
        "--quick",
        action="store_true",
        help="only the two prompt-delivery A/B experiments (no installed delivery, library or trigger parts)",
    )
    dm.add_argument(
        "--codex",
        action="store_true",
        help="only the Codex A/B: careful-fixer installed, OpenAI's Codex CLI as the agent under test against the "
        "scripted Responses API, the judge Claude Code (builds the Codex image the first time: a few minutes)",
    )
    _preflight_arg(dm)
    _image_args(dm)

    tr = sub.add_parser(
        "triggers",
        help="trigger accuracy: recall and false-trigger rate of a skill's description (installed delivery)",
        description="Run labelled queries (should-trigger / should-not-trigger) N times each with the skill "
        "installed, one fresh sandbox per run, stopping at the first Skill call or the end of the turn; "
        "compare descriptions (variants) side by side, paired by query.",
    )
    tr.add_argument("prereg", type=Path, metavar="PREREG", help="the trigger preregistration (YAML)")
    tr.add_argument("--out", type=Path, help="output directory (default: triggers-<skill> next to PREREG)")
    tr.add_argument("--jobs", type=int, default=None, help="concurrent runs (default 2)")
    tr.add_argument("--scripted", type=Path, metavar="SCENARIO", help="use the scripted Messages API (offline)")
    tr.add_argument("--verbose", action="store_true", help="print every run's verdict")

    rp = sub.add_parser(
        "report",
        help="re-render report.md, report.html, junit.xml and decision.json of an experiment directory",
        description="Re-render every report of an experiment from DIR/results.jsonl and the preregistration "
        "named in DIR/experiment.json. Reads the results, never changes them; needs no Docker.",
    )
    rp.add_argument("dir", type=Path, metavar="DIR", help="experiment directory (harness-results/<skill>-<lock>)")
    rp.add_argument("--prereg", type=Path, help="the preregistration the experiment ran under "
                    "(default: the one experiment.json names)")  # fmt: skip

    gt = sub.add_parser(
        "gate",
        help="exit with the verdict for CI: 0 adopt / 1 reject / 2 inconclusive / 3 infrastructure error",
        description="Print the experiment's verdict and reasons on one line and exit with its code. Reads "
        "DIR/decision.json when it matches DIR/results.jsonl, else recomputes the decision (read-only). On a "
        "model matrix's directory (execution.models): every model gated so, then the preregistered "
        "decision.models_rule over them (a model that rejects rejects; one without a verdict: exit 3). On a "
        "family of variants' directory (arms): every comparison recomputed, then Holm's correction across them; "
        "0 only when the best variant's corrected comparison adopts.",
        epilog="exit codes:\n  0  adopt\n  1  reject\n  2  inconclusive (the data cannot carry a verdict)\n"
        "  3  infrastructure error: DIR or its results are missing or unreadable, the decision cannot be\n"
        "     recomputed, or the comparison is invalid (provenance differs between the arms)\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gt.add_argument("dir", type=Path, nargs="?", metavar="DIR", help="experiment directory (required)")

    hs = sub.add_parser(
        "history",
        help="a skill's results over time, by model and date",
        description="One row per experiment of SKILL: date, model, Claude Code version, baseline k/n, skill k/n, "
        "cost ratio and verdict. Default: every harness-results/*/ and demo-output/results-*/ directory, each "
        "model's of a model matrix and each version's of a family of variants (shown with its verdict after Holm's "
        "correction across the family, its own beside it). Exits 1 when no experiment of SKILL is found.",
    )
    hs.add_argument("--in", dest="in_dirs", type=Path, action="append", metavar="DIR",
                    help="look in DIR instead of the working directory: an experiment directory, a folder of them "
                    "(harness-results) or a directory holding harness-results/ (repeatable)")  # fmt: skip
    hs.add_argument("skill", metavar="SKILL", help="the skill name (as in the preregistration)")
    hs.add_argument("--results", type=Path, action="append", metavar="DIR",
                    help="experiment directory to include (repeatable; replaces the default search)")  # fmt: skip

    mg = sub.add_parser(
        "merge",
        help="combine the result directories of `eval --shard i/n` runs into one experiment (then `gate` it)",
        description="Check that the shard directories ran the same lock, do not overlap and together hold a "
        "final record for every planned trial; then write OUT with the merged results, artifacts and reports. "
        "Shards of a model matrix or a family of variants (their top directories) are merged model by model or "
        "variant by variant, then summarised (a family with Holm's correction over the merged comparisons).",
    )
    mg.add_argument("out", type=Path, metavar="OUT", help="new directory for the merged experiment")
    mg.add_argument("shards", type=Path, nargs="+", metavar="SHARD_DIR", help="the shards' experiment directories")
    mg.add_argument("--prereg", type=Path, help="the preregistration (default: the one experiment.json names)")

    gc = sub.add_parser(
        "gc",
        help="remove what killed runs left: containers, networks and volumes (by label), trial directories, "
        "and their git worktree registrations in your repositories",
    )
    gc.add_argument("--all", action="store_true", help="remove every harness object, even of live runs")
    _engine_args(gc)
    _install_parsers(sub)
    return p


def _image_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-image", help="BASE_IMAGE for the trial image (your CI image, so verify finds its tools)")
    p.add_argument(
        "--extra-ca",
        type=Path,
        help="extra CA bundle for TLS-intercepting proxies (default: the host's /etc/ssl/certs/ca-certificates.crt)",
    )


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        dest="engines",
        action="append",
        default=[],
        metavar="URL",
        help="a Docker engine of the pool (repeatable): unix:///path, tcp://host:port (TLS from DOCKER_TLS_VERIFY "
        "and DOCKER_CERT_PATH), ssh://[user@]host[:port] (the system's ssh client); the first is the reference",
    )
    p.add_argument(
        "--engines-file",
        type=Path,
        metavar="FILE",
        help="a YAML file listing engines (engines: [{url, name, cert_path, ssh_config}]; skilltrial schema engines)",
    )


def _pool_addresses(args: argparse.Namespace, env: Mapping[str, str]):  # type: ignore[no-untyped-def]
    """The engines --engine and --engines-file name (empty: neither was given)."""
    from harness.sandbox.pool import addresses
    from harness.study.engines import load_engines

    listed = load_engines(args.engines_file) if args.engines_file is not None else None
    return addresses(args.engines, listed, env)


def _confirm_parser(sub: Any) -> None:
    cf = sub.add_parser(
        "confirm",
        help="confirm a library run's selected set against the bare baseline on held-out tasks (A/B)",
        description="Recompute the selection of the library run in LIBRARY_DIR, write a derived preregistration "
        "beside the library's (the selected set, the held-out --split, the library run's lock hash) and lock it "
        "before any trial, then run it as an A/B experiment: the skill arm gets every selected skill at once, the "
        "baseline none. A split holding a task the library's estimate used is refused (not held out). The "
        "ledger records the confirmation's verdict and, on the library's entry, which run it confirmed.",
    )
    cf.add_argument("dir", type=Path, metavar="LIBRARY_DIR", help="the library experiment's directory")
    cf.add_argument("--split", required=True, help="the held-out split of tasks.json to confirm on (e.g. test)")
    cf.add_argument(
        "--prereg", type=Path, help="the library's preregistration (default: the one experiment.json names)"
    )
    _run_args(cf)
    cf.add_argument("--scripted", type=Path, metavar="SCENARIO", help="use the scripted Messages API (offline)")


def cmd_confirm(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.experiment.confirm import confirm
    from harness.experiment.evaluate import default_jobs
    from harness.experiment.options import RunOptions
    from harness.study.config import SPLIT_NAME

    if not SPLIT_NAME.fullmatch(args.split):
        raise ConfigError("--split", "must be 1-32 letters, digits, '.', '_' or '-', starting with a letter or digit")

    def options(study: Study) -> RunOptions:  # the derived study's lock and the key are admit's to check
        return RunOptions(out=args.out, jobs=args.jobs or default_jobs(study, env), scripted=args.scripted,
                          api_key=env.get("ANTHROPIC_API_KEY") or None, runtime=args.runtime,
                          images=_image_options(args), env=env, paths=host)  # fmt: skip

    _show(confirm(args.dir, args.split, options, _progress, prereg_path=args.prereg))
    return 0


def _calibrate_parser(sub: Any) -> None:
    cb = sub.add_parser(
        "calibrate",
        help="A/A calibration: run the baseline against itself and report how often each rule is fooled",
        description="Run the preregistration's plan with two identical baseline arms (no skill), then report "
        "how often each rule would adopt or reject (by resampling), the judge's agreement with verify and "
        "the drift between the arms. Writes calibration.json and records the run in the ledger. Recommended "
        "after every model or CLI update.",
    )
    cb.add_argument("prereg", type=Path, help="preregistration.yaml (locked)")
    _run_args(cb)
    cb.add_argument("--scripted", type=Path, metavar="SCENARIO", help="use the scripted Messages API (offline)")
    cb.add_argument("--resamples", type=int, default=400, help="resampled A/A experiments (default 400)")


def cmd_calibrate(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.experiment.calibrate import calibrate
    from harness.experiment.evaluate import default_jobs
    from harness.experiment.options import RunOptions
    from harness.study.config import load_study

    study = load_study(args.prereg)
    if study.prereg.execution.models:
        raise ConfigError(study.prereg_path, "calibrate runs one model's baseline against itself, not a matrix",
                          field="execution.models", hint="calibrate with a preregistration naming one execution.model")  # fmt: skip
    if args.resamples < 1:
        raise ConfigError("--resamples", "must be >= 1")
    # the lock and the key are the run's to check (harness.experiment.experiment.admit), before anything runs
    options = RunOptions(out=args.out, jobs=args.jobs or default_jobs(study, env), scripted=args.scripted,
                         api_key=env.get("ANTHROPIC_API_KEY") or None, runtime=args.runtime,
                         images=_image_options(args), env=env, paths=host, aa=True)  # fmt: skip
    _show(calibrate(study, options, _progress(study), resamples=args.resamples))
    return 0


def _warn_without_recent_calibration(study: Any) -> None:
    """Baseline reuse across weeks hides drift: warn when the ledger holds no recent A/A calibration."""
    from harness.reporting import ledger

    path = ledger.ledger_path(study)
    if ledger.recent_calibration(path, model=study.prereg.execution.model) is None:
        print(
            f"warning: reusing baselines, but {path.name} records no A/A calibration of model "
            f"{study.prereg.execution.model} in the last {ledger.CALIBRATION_MAX_AGE_DAYS} days; "
            f"run `skilltrial calibrate {study.prereg_path.name}` to check for drift",
            file=sys.stderr,
        )


def _route_args(p: argparse.ArgumentParser) -> None:
    """Real runs: where the gateway sends the model traffic (HTTPS_PROXY / NO_PROXY are read from the
    environment and apply to the gateway's upstream connection only)."""
    p.add_argument(
        "--upstream",
        metavar="URL",
        help="the Messages API base URL (default: ANTHROPIC_BASE_URL, else https://api.anthropic.com)",
    )
    p.add_argument(
        "--upstream-ca",
        type=Path,
        metavar="PEM",
        help="CA bundle trusted for the upstream besides the image's (a company gateway's or proxy's CA)",
    )
    p.add_argument(
        "--upstream-network",
        metavar="NAME",
        help="an existing Docker network for the gateway's upstream side (where your proxy or gateway is)",
    )


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="experiment directory (default harness-results/<skill>-<lock>)")
    p.add_argument("--jobs", type=int, default=None, help="concurrent trials (default: from cores and memory)")
    p.add_argument("--runtime", help="container runtime for untrusted containers, e.g. runsc (gVisor)")
    _preflight_arg(p)
    _image_args(p)


def _preflight_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-preflight",
        dest="preflight",
        action="store_false",
        help="do not run each task's verify_cmd at the base commit before the trials (default: run it, cached)",
    )


# ----------------------------------------------------------------------- commands


def _progress(study: Study) -> Progress:
    """The progress display of a run (a live table on a terminal, plain lines otherwise), on stdout."""
    from harness.experiment.progress import Progress

    return Progress(sys.stdout, pass_rule=study.prereg.decision.pass_rule)


def _show(lines: Sequence[str]) -> None:
    for line in lines:
        print(line)


def _image_options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from harness.sandbox.images import ImageOptions

    return ImageOptions(trial_base=args.base_image, extra_ca=args.extra_ca)


def _engine(env: dict[str, str]):  # type: ignore[no-untyped-def]
    from harness.sandbox.engine import Engine

    return Engine(env)


_MARKS = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "info": "info"}


def cmd_doctor(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.sandbox.doctor import gather
    from harness.trial import basetrees

    targets = _pool_addresses(args, env)
    if targets:
        return _doctor_pool(targets, args)
    checks = gather(_engine(env), _image_options(args), workspace_kind=basetrees.kind_from_env(env))
    for c in checks:
        print(f"[{_MARKS[c.level]}] {c.name}: {c.detail}")
    return 5 if any(c.level == "fail" for c in checks) else 0


def _doctor_pool(targets: Sequence[Any], args: argparse.Namespace) -> int:
    from harness.sandbox.doctor import pool_checks
    from harness.sandbox.pool import open_each

    opened = open_each(targets)
    try:
        reports = pool_checks(opened, _image_options(args))
    finally:
        for o in opened:
            if o.engine is not None:
                o.engine.runtime.close()
    for report in reports:
        print(f"engine {report.name} ({report.url})")
        for c in report.checks:
            print(f"  [{_MARKS[c.level]}] {c.name}: {c.detail}")
    failed = [r.name for r in reports if any(c.level == "fail" for c in r.checks)]
    print(
        f"{len(reports) - len(failed)} of {len(reports)} engines usable"
        + (f"; not: {', '.join(failed)}" if failed else "")
    )
    return 5 if failed else 0


def cmd_images(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.sandbox.engine import Engine
    from harness.sandbox.images import ImageBuilder

    targets = _pool_addresses(args, env)
    if targets and args.action == "build":
        return _build_on_pool(targets, args)
    if targets:
        raise ConfigError(
            "--engine", f"`images {args.action}` works on one engine (DOCKER_HOST)", hint="leave --engine out"
        )
    engine: Engine = _engine(env)
    builder = ImageBuilder(engine, _image_options(args), on_line=lambda line: print(line, flush=True))
    if args.action == "prune":
        removed, kept = builder.prune()
        for tag in removed:
            print(f"removed {tag}")
        print(f"{len(removed)} earlier image(s) and build stage(s) removed; {len(kept)} kept (current or in use)")
        return 0
    if args.action == "status":
        for role, (tag, present) in builder.planned().items():
            print(f"{role:8} {tag:48} {'present' if present else 'missing'}")
        return 0
    images = builder.ensure()
    size = engine.image_size(images.trial)
    print(f"trial image {images.trial} ({size / 1e6:.0f} MB, Claude Code {images.claude_code_version})")
    if args.codex:
        codex = builder.ensure_codex(images)
        size = engine.image_size(codex.tag)
        print(f"codex image {codex.tag} ({size / 1e6:.0f} MB, Codex CLI {codex.codex_version})")
    return 0


def _build_on_pool(targets: Sequence[Any], args: argparse.Namespace) -> int:
    """``images build --engine ...``: build on the first engine (the reference), then give every other engine
    the same image ids (copied through the images API when missing; an engine holding another image under one
    of the tags is refused)."""
    from harness.sandbox.images import ImageBuilder
    from harness.sandbox.pool import EnginePool

    with EnginePool.open(targets) as pool:
        reference = pool.reference
        builder = ImageBuilder(reference.runtime, _image_options(args), on_line=lambda line: print(line, flush=True))
        images = builder.ensure()
        refs = [images.base, images.runtime, images.sidecar, images.trial]
        if args.codex:
            refs.append(builder.ensure_codex(images).tag)
        print(f"engine {reference.name}: the reference (trial image {images.trial})")
        done = pool.prepare_images(refs)
        for synced in done.synced:
            what = f"copied {len(synced.copied)} image(s) in {synced.seconds:.0f} s" if synced.copied else "holds them"
            print(f"engine {synced.engine}: {what}")
        for name, error in done.refused.items():
            print(f"engine {name}: refused: {error}")
    if done.refused:
        raise PrerequisiteError(f"engines refused (other images under the same tags): {', '.join(done.refused)}")
    return 0


def cmd_init(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.study.scaffold import init

    made = init(args.skill, args.out)
    print(f"wrote {made.tasks}\nwrote {made.prereg}")
    if made.schemas:
        print(f"wrote {', '.join(p.name for p in made.schemas)} beside them: editors complete and check both files")
    print("next: write real tasks (prompts without TODO, a verify_cmd that fails on the base commit), fill in "
          f"the preregistration, then `skilltrial lock {made.prereg}` and `skilltrial eval {made.prereg}`")  # fmt: skip
    return 0


def cmd_lock(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.experiment.library_plan import lock_entries
    from harness.study.lock import lock

    digest, base = lock(args.prereg, library_entries=lock_entries)
    print(f"locked {args.prereg}: sha256 {digest[:16]}..., base commit {base[:12]}")
    from harness.study.basetree import describe
    from harness.study.config import load_study
    from harness.study.prices import missing_notes

    prereg = load_study(args.prereg).prereg
    block = prereg.lock
    listed = block.listed_name if block is not None else None
    if listed is not None:
        differs = (
            "" if listed == prereg.skill else f" (SKILL.md's name; the preregistration's skill is {prereg.skill!r})"
        )
        print(f"the CLI lists the skill as {listed!r}{differs}")
    if block is not None:
        left_out, visible = describe(block.base_excluded, {}), describe({}, block.base_visible)
        for line in left_out:
            print(f"{line[0].upper()}{line[1:]}. Keep a path in with execution.include_paths.")
        for line in visible:
            print(f"warning: {line}", file=sys.stderr)
    for note in missing_notes(prereg.execution):
        print(f"warning: {note}", file=sys.stderr)
    return 0


def _find_prereg(args: argparse.Namespace) -> Path:
    if args.prereg is not None:
        return Path(args.prereg)
    candidates = ([args.skill / "preregistration.yaml"] if args.skill else []) + [Path("preregistration.yaml")]
    for c in candidates:
        if c.is_file():
            return Path(c)
    raise ConfigError(
        candidates[0], "no preregistration given or found", hint="skilltrial eval path/to/preregistration.yaml"
    )


def cmd_eval(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.plan import parse_shard
    from harness.study.config import check_host_fits, load_study

    study = load_study(_find_prereg(args))
    check_host_fits(study)
    if args.skill is not None and Path(args.skill).resolve() != study.skill_dir:
        raise ConfigError(
            study.prereg_path,
            f"was written for skill {study.skill_dir}, not {Path(args.skill).resolve()}",
            field="skill_ref",
        )
    try:
        shard = parse_shard(args.shard) if args.shard else None
    except ValueError as e:
        raise ConfigError("--shard", str(e)) from None
    from harness.experiment.evaluate import default_jobs, evaluate
    from harness.experiment.options import RunOptions

    if args.reuse_baseline_from:
        _warn_without_recent_calibration(study)
    engines = tuple(_pool_addresses(args, env))
    _check_pool_run(args, study, engines)
    # the lock and the key are the run's to check (harness.experiment.experiment.admit), before anything runs
    options = RunOptions(
        out=args.out,
        jobs=args.jobs or (0 if engines else default_jobs(study, env)),
        scripted=args.scripted,
        api_key=env.get("ANTHROPIC_API_KEY") or None,
        shard=shard,
        runtime=args.runtime,
        images=_image_options(args),
        env=env,
        paths=host,
        reuse_from=tuple(args.reuse_baseline_from or ()),
        route=_route(args, env),
        preflight=args.preflight,
        engines=engines,
        engine_slots=args.engine_slots,
    )
    if study.prereg.library is not None:  # a library experiment: harness.experiment.library
        from harness.experiment.library import evaluate_library

        _show(evaluate_library(study, options, _progress(study)))
    elif study.prereg.execution.models:  # a model matrix: one A/B per model (harness.experiment.matrix)
        from harness.experiment.matrix import evaluate_matrix

        _show(evaluate_matrix(study, options, _progress, _show))
    elif study.prereg.arms is not None:  # versions of the skill: one A/B per variant, Holm across them
        from harness.experiment.family import evaluate_family

        _show(evaluate_family(study, options, _progress, _show))
    else:
        _show(evaluate(study, options, _progress(study)))
    return 0


def _check_pool_run(args: argparse.Namespace, study: Study, engines: Sequence[object]) -> None:
    """What a run on several engines does not do (yet): said before anything runs."""
    if args.engine_slots is not None and (not engines or args.engine_slots < 1):
        raise ConfigError("--engine-slots", "needs --engine or --engines-file, and a whole number >= 1")
    if engines and (study.prereg.library is not None or study.prereg.execution.models):
        raise ConfigError("--engine", "a library experiment or a model matrix runs on one engine (DOCKER_HOST)")


def _route(args: argparse.Namespace, env: dict[str, str]):  # type: ignore[no-untyped-def]
    from harness.experiment import upstream

    if args.scripted is not None:
        given = [f for f in ("upstream", "upstream_ca", "upstream_network") if getattr(args, f) is not None]
        if given:
            raise ConfigError("--" + given[0].replace("_", "-"), "applies to real runs only, not with --scripted")
        return None
    return upstream.from_env(env, url=args.upstream, extra_ca=args.upstream_ca, network=args.upstream_network)


_AB_PLAN_OPTIONS = ("pilot", "calibration", "baseline_rate", "skill_rate", "omega2", "gain", "cost_per_trial")


def cmd_plan(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.analysis.masks import DEFAULT_SIGMA_DELTA
    from harness.experiment.ab_plan import plan_ab_lines, source_from_options
    from harness.experiment.library_plan import plan_lines
    from harness.study.config import load_study

    study = load_study(args.prereg)
    if study.prereg.library is not None:
        given = [o for o in _AB_PLAN_OPTIONS if getattr(args, o) is not None]
        if given:
            raise ConfigError("--" + given[0].replace("_", "-"), "sizes an A/B design; this is a library preregistration",
                              hint="a library's plan takes --sigma-delta")  # fmt: skip
        plan = plan_lines(study, args.sigma_delta or DEFAULT_SIGMA_DELTA)
        print("\n".join(plan.lines))
        return 0 if plan.identifiable else 4
    if args.sigma_delta is not None:
        raise ConfigError("--sigma-delta", "sizes a library experiment; this is an A/B preregistration",
                          hint="an A/B plan takes --pilot, --calibration or --baseline-rate")  # fmt: skip
    gain = args.gain if args.gain is not None else study.prereg.decision.min_worthwhile_gain
    source = source_from_options(pilot=args.pilot, calibration=args.calibration, baseline_rate=args.baseline_rate,
                                 skill_rate=args.skill_rate, omega2=args.omega2, gain=gain)  # fmt: skip
    print("\n".join(plan_ab_lines(study, source, gain=args.gain, cost_per_trial=args.cost_per_trial)))
    return 0


def cmd_demo(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.demo import DEMO_CODEX, DEMO_INSTALLED, prepare_demo
    from harness.experiment.evaluate import default_jobs, evaluate
    from harness.experiment.options import RunOptions
    from harness.study.config import load_study

    setup = prepare_demo(args.out.resolve())
    print(f"demo: example repository, tasks and two skills prepared and locked under {setup.root}")
    runs = setup.preregistrations.items()
    if args.codex:
        if setup.codex is None:
            raise PrerequisiteError("the Codex demo's preregistration is missing", hint="reinstall the harness")
        runs = {DEMO_CODEX: setup.codex}.items()
    for n, (skill, prereg) in enumerate(runs):
        if args.quick and n >= 2:
            break
        print(f"\n=== skill {skill} ===")
        study = load_study(prereg)
        # the installed part has its own scenario; the Codex A/B is the installed part with another agent
        own = setup.root / "demo" / f"scenario-{DEMO_INSTALLED if skill == DEMO_CODEX else skill}.yaml"
        options = RunOptions(
            out=args.out.resolve() / f"results-{skill}",
            jobs=args.jobs or default_jobs(study, env),
            scripted=own if own.is_file() else setup.scenario,
            runtime=args.runtime,
            images=_image_options(args),
            env=env,
            paths=host,
            preflight=args.preflight,
        )
        _show(evaluate(study, options, _progress(study)))
        _print_demo_outcome(args.out.resolve() / f"results-{skill}")
    if args.quick or args.codex:
        return 0
    if setup.library is not None:
        from harness.experiment.library import evaluate_library

        print("\n=== skill library demo-library (4 skills: one helps, one hurts, one only costs, one neutral) ===")
        study = load_study(setup.library)
        lines = evaluate_library(
            study,
            RunOptions(
                out=args.out.resolve() / "results-library",
                jobs=args.jobs or default_jobs(study, env),
                scripted=setup.library_scenario,
                runtime=args.runtime,
                images=_image_options(args),
                env=env,
                paths=host,
            ),
            _progress(study),
        )
        _show(lines)
    _demo_triggers(setup.root, args.out.resolve() / "results-triggers", args.jobs, host)
    return 0


def _demo_triggers(root: Path, out: Path, jobs: int | None, host: HostPaths) -> None:
    """The trigger-accuracy part of the demo: two descriptions of careful-fixer, side by side."""
    import time

    from harness.experiment.triggers import TriggerOptions, run_triggers
    from harness.plan import plan_trigger_runs
    from harness.reporting.triggers import summary_lines
    from harness.sandbox.engine import Engine
    from harness.sandbox.images import ImageBuilder
    from harness.study.triggers import load_trigger_study

    prereg = root / "triggers" / "preregistration.yaml"
    if not prereg.is_file():
        return
    study = load_trigger_study(prereg)
    print(f"\n=== trigger accuracy of careful-fixer: {len(plan_trigger_runs(study.prereg))} runs ===")
    if out.exists():
        shutil.rmtree(out)
    t0 = time.monotonic()
    engine = Engine()
    analysis = run_triggers(
        study,
        engine,
        TriggerOptions(
            out=out,
            paths=host,
            images=ImageBuilder(engine).ensure(),
            jobs=jobs or 2,
            scripted=root / "triggers" / "scenario.yaml",
            say=_print_line,
        ),
    )
    print("\n".join(summary_lines(analysis)))
    print(f"{time.monotonic() - t0:.0f} s; triggers.json and triggers.md in {out}")


def _print_demo_outcome(results: Path) -> None:
    from harness.reporting import REPORT_FILES
    from harness.reporting.gate import gate

    for name in REPORT_FILES:
        print(f"  {results / name}")
    g = gate(results)
    print(f"gate: {g.exit_code} ({g.verdict})   [skilltrial gate {results}]")


def cmd_report(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.experiment.library import is_library_dir, report_library
    from harness.reporting import DECISION_JSON, REPORT_FILES, analyse_and_write
    from harness.reporting.model import load_experiment

    if is_library_dir(args.dir, args.prereg):  # a library experiment: contributions, not a decision
        print("\n".join(report_library(args.dir, args.prereg)))
        return 0
    from harness.results.matrix import is_matrix_dir

    if is_matrix_dir(args.dir):  # a model matrix: every model's reports, then models.md and models.json
        from harness.experiment.matrix import report_matrix

        print("\n".join(report_matrix(args.dir, args.prereg)))
        return 0
    from harness.results.family import is_family_dir

    if is_family_dir(args.dir):  # a family of variants: every variant's reports, then the family's
        from harness.experiment.family import report_family

        print("\n".join(report_family(args.dir, args.prereg)))
        return 0
    # a refused analysis (a result line edited by hand, a re-locked preregistration) leaves reports that say so
    data, paths = analyse_and_write(args.dir, lambda: load_experiment(args.dir, args.prereg))
    print(data.decision.verdict.upper() + f" ({data.decision.rule} rule) {data.prereg.skill}")
    for name in (*REPORT_FILES, DECISION_JSON):
        print(f"  {paths[name]}")
    return 0


def cmd_gate(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.reporting.gate import gate

    if args.dir is None:
        raise ResultsUnavailable("no experiment directory given", hint="skilltrial gate harness-results/<skill>-<lock>")
    from harness.results.matrix import is_matrix_dir

    if is_matrix_dir(args.dir):  # a model matrix's top directory: the preregistered rule over the models
        from harness.reporting.gate import gate_matrix

        matrix = gate_matrix(args.dir)
        print("gate: " + "\n".join(matrix.lines))
        return matrix.exit_code
    from harness.results.family import VARIANTS_DIR, is_family_dir

    top = args.dir.resolve().parent.parent
    if args.dir.resolve().parent.name == VARIANTS_DIR and is_family_dir(top):
        # one variant of a family: its verdict after Holm's correction, never its uncorrected one
        from harness.experiment.family import family_of
        from harness.reporting.family import member_gate_lines

        lines, code = member_gate_lines(family_of(top), args.dir.resolve().name)
        print("gate: " + "\n".join(lines))
        return code
    if is_family_dir(args.dir):  # a family of variants: each comparison recomputed, then Holm across them
        from harness.experiment.family import family_of
        from harness.reporting.family import gate_lines

        family = family_of(args.dir)
        print("gate: " + "\n".join(gate_lines(family)))
        return family.exit_code
    result = gate(args.dir)
    print(f"gate: {result.line}")
    return result.exit_code


def cmd_history(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.experiment.family import variant_verdict
    from harness.reporting.history import discover_in, format_table, history

    if args.in_dirs:  # found, not named: a shard shows only when named with --results
        rows = history(args.skill, discover_in(args.in_dirs), explicit=False, corrected=variant_verdict)
        rows += history(args.skill, args.results, corrected=variant_verdict) if args.results else []
    else:
        rows = history(args.skill, args.results, corrected=variant_verdict)
    if not rows:
        default = "harness-results/*/, demo-output/results-*/"
        where = ", ".join(str(d) for d in [*(args.results or []), *(args.in_dirs or [])]) or default
        print(f"no experiments of skill {args.skill} found in {where}", file=sys.stderr)
        return 1
    print(format_table(rows))
    return 0


def cmd_merge(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.experiment.library_plan import planned_trials
    from harness.reporting import analyse_and_write
    from harness.reporting.model import analyze_records
    from harness.results.family import is_family_dir
    from harness.results.matrix import is_matrix_dir
    from harness.results.merge import merge

    if args.shards and is_matrix_dir(args.shards[0]):  # shards of a model matrix: each model merged
        from harness.experiment.matrix import merge_matrix

        print("\n".join(merge_matrix(args.out, args.shards, args.prereg)))
        return 0
    if args.shards and is_family_dir(args.shards[0]):  # shards of a family of variants: each variant merged
        from harness.experiment.family import merge_family

        print("\n".join(merge_family(args.out, args.shards, args.prereg)))
        return 0
    merged = merge(args.out, args.shards, prereg_path=args.prereg, library_plan=planned_trials)
    if merged.study.prereg.library is not None:
        from harness.experiment.library import report_library

        print(f"merged {len(merged.shards)} shard(s), {len(merged.records)} result line(s) into {args.out}")
        print("\n".join(report_library(args.out, args.prereg)))
        return 0
    data, _ = analyse_and_write(
        args.out,
        lambda: analyze_records(merged.study, merged.records, lock_hash=merged.lock_hash, experiment_dir=args.out),
    )
    print(f"merged {len(merged.shards)} shard(s), {len(merged.records)} result line(s) into {args.out}")
    print(f"{data.decision.verdict.upper()} ({data.decision.rule} rule)   [skilltrial gate {args.out}]")
    return 0


def cmd_gc(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness.sandbox import reaper

    engine = _engine(env)
    if args.all:
        removed, errors = reaper.remove_everything(engine)
        for error in errors:
            print(f"not removed: {error}", file=sys.stderr)
        print(f"removed {len(removed)} harness object(s)" + (f"; {len(errors)} could not be removed" if errors else ""))
        return 3 if errors else 0
    # orphaned objects, then trial directories (agent-written trees, base trees: their worktrees) of killed runs
    reaped = reaper.reap(engine, host, own_pid=os.getpid())
    for target, reason in reaped.objects:
        print(f"removed {target.kind} {target.name} ({reason})")
    print(f"{len(reaped.objects)} orphaned object(s) removed")
    if reaped.trees:
        print(f"removed {reaped.trees} trial directory tree(s) of killed runs (and their git worktree registrations)")
    from harness.sandbox.engine import address_from_env

    return _gc_pool(args, env, host, skip=address_from_env(env).url)


def _engine_at(address: EngineAddress) -> Runtime:
    from harness.sandbox.engine import Engine

    return Engine(address=address, timeout=10)


def _gc_pool(args: argparse.Namespace, env: dict[str, str], host: HostPaths, *, skip: str) -> int:
    """Orphans on every other engine: ``--engine``/``--engines-file`` and every engine a run of a pool
    recorded (:func:`harness.sandbox.pool.remember_engines`). One that does not answer is said and passed."""
    from harness.sandbox.labels import reap_orphans
    from harness.sandbox.pool import remembered_engines

    seen = {skip}
    for address in [*_pool_addresses(args, env), *remembered_engines(host.engines)]:
        if address.url in seen:
            continue
        seen.add(address.url)
        try:
            other = _engine_at(address)
        except HarnessError as e:
            print(f"engine {address.label} ({address.url}): not reached: {e.message}")
            continue
        try:
            removed = reap_orphans(other, own_pid=os.getpid())
        except HarnessError as e:
            print(f"engine {address.label} ({address.url}): not listed: {e.message}")
            continue
        finally:
            other.close()
        for target, reason in removed:
            print(f"engine {address.label}: removed {target.kind} {target.name} ({reason})")
        print(f"engine {address.label}: {len(removed)} orphaned object(s) removed")
    return 0


def cmd_triggers(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    """``skilltrial triggers PREREG``: run, write triggers.json / triggers.md, print the summary."""
    import time

    from harness.experiment.triggers import TriggerOptions, run_triggers
    from harness.plan import plan_trigger_runs
    from harness.reporting.triggers import summary_lines
    from harness.sandbox.engine import Engine
    from harness.sandbox.images import ImageBuilder
    from harness.study.triggers import load_trigger_study

    study = load_trigger_study(args.prereg)
    out = (args.out or study.path.parent / f"triggers-{study.prereg.skill}").resolve()
    if (out / TRIGGER_RESULTS).exists():
        raise ConfigError(out / TRIGGER_RESULTS, "exists: a trigger run is not resumed; use another --out")
    n = len(plan_trigger_runs(study.prereg))
    print(
        f"triggers: {len(study.prereg.queries)} queries x {study.prereg.execution.runs_per_query} runs x "
        f"{len(study.prereg.variants)} variant(s) = {n} runs -> {out}",
        flush=True,
    )
    t0 = time.monotonic()
    engine = Engine()
    analysis = run_triggers(
        study,
        engine,
        TriggerOptions(
            out=out,
            paths=host,
            images=ImageBuilder(engine).ensure(),
            jobs=args.jobs or 2,
            scripted=args.scripted,
            api_key=env.get("ANTHROPIC_API_KEY"),
            on_run=_print_trigger_run if args.verbose else (lambda _r: None),
            say=_print_line,
        ),
    )
    print("\n".join(summary_lines(analysis)))
    print(f"{n} runs in {time.monotonic() - t0:.0f} s; triggers.json and triggers.md in {out}")
    return 0


def _print_line(text: str) -> None:
    print(text, flush=True)


def _print_trigger_run(rec: TriggerRecord) -> None:
    why = f" ({rec.reason})" if rec.reason else ""
    print(f"  {rec.run_id}: {rec.outcome.replace('_', ' ')}{why}", flush=True)


# ------------------------------------------------- the installed tool: version, docs, schemas, completion


class _VersionAction(argparse.Action):
    """``--version``: the tool's version, the pinned Claude Code version and the image tags a run will use.
    The base tag is known offline; the others hash their parent image's id, so they are asked of the engine
    (3 s at most) and printed only when it answers."""

    def __init__(self, option_strings: Sequence[str], dest: str, env: Mapping[str, str] | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, default=argparse.SUPPRESS,
                         help="show the version, the pinned Claude Code version and the image tags, and exit")  # fmt: skip
        self.env = env

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        print("\n".join(version_lines(dict(os.environ if self.env is None else self.env))))
        parser.exit(0)


def version_lines(env: dict[str, str]) -> list[str]:
    from harness.sandbox import images

    lines = [f"skilltrial {__version__} (python -m harness; package {Path(__file__).resolve().parent})",
             f"Claude Code {images.CLAUDE_CODE_VERSION} (pinned in the trial image)",
             f"image base     {images.base_tag()}  (a hash of the debootstrap recipe: the same on every machine)"]  # fmt: skip
    try:
        from harness.sandbox.engine import Engine

        planned = images.ImageBuilder(Engine(env, timeout=3)).planned()
    except HarnessError as e:
        reason = str(e).split(" (")[0]
        return [*lines, f"image runtime, sidecar, trial: each tag hashes its parent image's id, which the engine "
                        f"assigns; not shown ({reason}): `skilltrial images status` with an engine"]  # fmt: skip
    for role, (tag, present) in planned.items():
        if role != "base":
            lines.append(f"image {role:<8} {tag}  ({'present' if present else 'not built yet'})")
    if len(planned) < 4:
        lines.append("image runtime, sidecar, trial: known once their parent image is built (skilltrial images build)")
    return lines


def _install_parsers(sub: Any) -> None:
    """The subcommands that make an install complete: docs, schema, completion."""
    from harness import completion, docs, schemas

    dc = sub.add_parser(
        "docs",
        help="show the documentation shipped with skilltrial (scenario format, statistics, security model, ...)",
        description="Print a documentation page: the same pages as the docs site, from the installed package. "
        "Without TOPIC, list the topics. Rendered on a terminal, plain Markdown when piped.",
    )
    dc.add_argument("topic", nargs="?", choices=[t.name for t in docs.TOPICS], metavar="TOPIC",
                    help="one of: " + ", ".join(t.name for t in docs.TOPICS))  # fmt: skip
    dc.add_argument("--raw", action="store_true", help="plain Markdown even on a terminal")

    sc = sub.add_parser(
        "schema",
        help="print the JSON Schema of an input file (preregistration, tasks, scenario, triggers)",
        description="Print the JSON Schema (draft 2020-12) of an input file, generated from the model that loads "
        "it, for editors: `# yaml-language-server: $schema=preregistration.schema.json` as a YAML file's first "
        'line, "$schema": "tasks.schema.json" in tasks.json (skilltrial init writes both).',
    )
    sc.add_argument("name", nargs="?", choices=[s.name for s in schemas.SCHEMAS], metavar="NAME",
                    help="one of: " + ", ".join(s.name for s in schemas.SCHEMAS))  # fmt: skip
    sc.add_argument("--write", type=Path, metavar="DIR", help="write every schema as DIR/<name>.schema.json")

    cp = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print the completion script for SHELL, made from this command's own options.",
        epilog="install it (then open a new shell):\n"
        + "\n".join(f"  {completion.INSTALL[s]}" for s in completion.SHELLS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cp.add_argument("shell", choices=completion.SHELLS, metavar="SHELL", help="bash, zsh or fish")


def cmd_docs(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness import docs

    if args.topic is None:
        _show(docs.index_lines())
        return 0
    text = docs.page_text(docs.topic(args.topic))
    if args.raw or not sys.stdout.isatty():
        sys.stdout.write(text)
        return 0
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console()
    with console.pager(styles=True):
        console.print(Markdown(text))
    return 0


def cmd_schema(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness import schemas

    if args.write is not None:
        for path in schemas.write_all(args.write):
            print(f"wrote {path}")
        return 0
    if args.name is None:
        raise ConfigError(
            "NAME", "which schema?", hint="skilltrial schema " + "|".join(s.name for s in schemas.SCHEMAS)
        )
    sys.stdout.write(schemas.text(args.name))
    return 0


def cmd_completion(args: argparse.Namespace, env: dict[str, str], host: HostPaths) -> int:
    from harness import completion

    sys.stdout.write(completion.script(_parser(env), args.shell))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, dict[str, str], HostPaths], int]] = {
    "doctor": cmd_doctor,
    "images": cmd_images,
    "init": cmd_init,
    "lock": cmd_lock,
    "eval": cmd_eval,
    "calibrate": cmd_calibrate,
    "confirm": cmd_confirm,
    "demo": cmd_demo,
    "gc": cmd_gc,
    "merge": cmd_merge,
    "report": cmd_report,
    "gate": cmd_gate,
    "history": cmd_history,
    "plan": cmd_plan,
    "triggers": cmd_triggers,
    "docs": cmd_docs,
    "schema": cmd_schema,
    "completion": cmd_completion,
}


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    args = _parser(env).parse_args(argv)
    host = HostPaths.from_env(env)  # the one read of TMPDIR and the shared places (harness.host.paths)
    # SIGTERM unwinds like Ctrl-C (Python would otherwise die without running finally blocks)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return COMMANDS[args.command](args, env, host)
    except (KeyboardInterrupt, Interrupted) as e:
        msg = str(e) if isinstance(e, Interrupted) else "interrupted"
        print(f"skilltrial: {msg}", file=sys.stderr)
        return Interrupted.exit_code
    except HarnessError as e:
        if args.debug:
            traceback.print_exc()
        print(f"skilltrial: error: {e}", file=sys.stderr)
        return e.exit_code
    except Exception:
        traceback.print_exc()
        print("skilltrial: internal error (a bug): please report it with the traceback above", file=sys.stderr)
        return 3
