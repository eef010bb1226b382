"""A family of variants (``arms:``, A/B/n) through the real pipeline: two versions of the demo's skill against a
bare baseline, on the real engine, images, Claude Code CLI and git against the scripted Messages API. One version
carries the scenario's marker (the scripted model then follows its script to a pass), the other does not (the
model reads a SKILL.md without the marker and fails). Small on purpose: 2 tasks x 1 run, 6 trials: the baseline
runs once (2 trials) and the second variant reuses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.demo import DemoSetup
from harness.experiment.events import NullEvents
from harness.experiment.family import evaluate_family
from harness.experiment.options import RunOptions
from harness.reporting import ledger
from harness.results.family import variant_dir
from harness.results.store import read_results
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import load_study
from harness.study.lock import lock
from tests.factories import run_git
from tests.integration.helpers import demo_task_scripts, host_paths, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TASKS = ["fix-mean", "fix-median"]


def test_two_variants_share_one_baseline_and_holm_decides_the_family(
    tmp_path: Path,
    engine: Engine,
    images: ImageSet,
    demo_setup: DemoSetup,
    work_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    skills = demo_setup.root / "skills"
    plain = skills / "careful-fixer-plain"
    plain.mkdir()
    (plain / "SKILL.md").write_text("# careful fixer, shortened\nFix the bug; keep the tests as they are.\n")
    scenario = {
        "seed": 5,
        "skill_marker": "careful-fixer-7c1e",
        "defaults": {"usage": {"input_tokens": 1000, "output_tokens": 100}},
        "arms": {"baseline": {"p_success": 0}, "skill": {"p_success": 1}},
        "tasks": {t: dict(scripts) for t, scripts in demo_task_scripts(demo_setup.root).items() if t in TASKS},
    }
    prereg, scen = write_experiment(demo_setup.root, "variants", tasks=TASKS, scenario=scenario,
                                    extra={"decision": {"rule": "point"}})  # fmt: skip
    data = yaml.safe_load(prereg.read_text())
    del data["skill_ref"]
    data["arms"] = {
        "baseline": "bare",
        "versions": {"marked": {"path": "../skills/careful-fixer"}, "plain": {"path": "../skills/careful-fixer-plain"}},
    }
    prereg.write_text(yaml.safe_dump(data, sort_keys=False))
    lock(prereg)

    out = tmp_path / "out"
    shown: list[str] = []
    options = RunOptions(out=out, jobs=2, scripted=scen, host_slots=2, paths=host_paths(work_root), preflight=False)
    lines = evaluate_family(load_study(prereg), options, lambda s: NullEvents(), shown.extend)

    marked = read_results(variant_dir(out, "marked") / "results.jsonl").records
    plain_records = read_results(variant_dir(out, "plain") / "results.jsonl").records
    assert {r.status for r in (*marked, *plain_records)} == {"completed"}, [(r.trial_id, r.error) for r in marked]
    # the baseline ran once: the second comparison's baseline trials are the first one's, copied
    assert all(r.reused_from is None for r in marked)
    reused = [r for r in plain_records if r.arm == "baseline"]
    assert len(reused) == 2 and all(r.reused_from is not None for r in reused)
    assert {r.reused_from.directory for r in reused if r.reused_from} == {str(variant_dir(out, "marked"))}
    first = {r.trial_id: r.artifacts for r in marked if r.arm == "baseline"}
    assert {r.trial_id: r.artifacts for r in reused} == first

    decision = json.loads((out / "decision.json").read_text())
    assert decision["kind"] == "family" and decision["correction"] == "holm"
    by = {v["variant"]: v for v in decision["variants"]}
    assert (by["marked"]["variant_arm"]["rate"], by["marked"]["baseline"]["rate"]) == ("2/2", "0/2")
    assert (by["plain"]["variant_arm"]["rate"], by["plain"]["verdict"]) == ("0/2", "reject")
    assert by["marked"]["verdict"] == "inconclusive", "better, but two tasks can never adopt"
    assert decision["verdict"] == "inconclusive" and decision["best"] == "marked" and decision["adopted"] is None
    assert decision["exit_code"] == 2
    for name in ("summary.txt", "report.md", "report.html", "junit.xml"):
        assert (out / name).is_file()
    assert "| `plain` | REJECT | ❌ REJECT |" in (out / "report.md").read_text()
    assert 'tests="3"' in (out / "junit.xml").read_text()  # the family's decision and one case per variant
    assert any(x.startswith("FAMILY DECISION: INCONCLUSIVE") for x in lines)
    assert "=== variant 2/2: plain ===" in shown

    entry = ledger.load(ledger.ledger_path(load_study(prereg))).skills["careful-fixer"]
    assert entry.variants is not None and set(entry.variants) == {"marked", "plain"}
    assert entry.version is None and entry.verdict == "inconclusive"

    capsys.readouterr()
    assert main(["gate", str(out)]) == 2
    said = capsys.readouterr().out
    assert "INCONCLUSIVE (exit 2) careful-fixer" in said and "plain: REJECT" in said
    assert (
        main(["gate", str(variant_dir(out, "plain"))]) == 1
    )  # a variant gated on its own directory: its verdict in the family


@pytest.mark.parametrize("delivery", ["prompt", "installed"])
def test_version_against_version_gives_each_arm_its_own_version(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path, delivery: str
) -> None:
    """The baseline carries the shipped version (without the scenario's marker: the scripted model reads it and
    fails), the variant the edited one (with it: passes). Both arms get the skill arm's prompt and delivery, each
    its own copy; under the installed delivery both list the skill and neither is a contaminated baseline. Under
    the prompt delivery the shipped version is a git tag of the same folder (read from git, written once into the
    run's directory and checked against the lock)."""
    skills = demo_setup.root / "skills"
    marked = (skills / "careful-fixer" / "SKILL.md").read_text()
    unmarked = marked.replace("careful-fixer-7c1e", "shipped-version")
    if delivery == "prompt":  # the shipped version is a git tag of the skills' repository, the edit the folder now
        (skills / "careful-fixer" / "SKILL.md").write_text(unmarked)
        run_git(skills, "init", "-q")
        run_git(skills, "add", "-A")
        run_git(skills, "commit", "-q", "--no-verify", "-m", "shipped")
        run_git(skills, "tag", "shipped")
        (skills / "careful-fixer" / "SKILL.md").write_text(marked)
        shipped: dict[str, str] = {"path": "../skills/careful-fixer", "ref": "shipped"}
    else:
        (skills / "careful-fixer-shipped").mkdir()
        (skills / "careful-fixer-shipped" / "SKILL.md").write_text(unmarked)
        shipped = {"path": "../skills/careful-fixer-shipped"}
    scripts = demo_task_scripts(demo_setup.root)
    scenario = {
        "seed": 5,
        "skill_marker": "careful-fixer-7c1e",
        "defaults": {"usage": {"input_tokens": 1000, "output_tokens": 100}},
        "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}},
        "tasks": {t: dict(scripts[t]) for t in TASKS},
    }
    if delivery == "installed":  # the model calls the Skill tool when the listing names the skill
        scenario = yaml.safe_load((demo_setup.root / "demo" / "scenario-careful-fixer-installed.yaml").read_text())
        scenario["tasks"] = {t: v for t, v in scenario["tasks"].items() if t in TASKS}
    prereg, scen = write_experiment(demo_setup.root, f"versions-{delivery}", tasks=TASKS, scenario=scenario,
                                    extra={"decision": {"rule": "point"}, "execution": {"delivery": delivery}})  # fmt: skip
    data = yaml.safe_load(prereg.read_text())
    del data["skill_ref"]
    data["arms"] = {
        "baseline": "shipped",
        "versions": {
            "shipped": shipped,
            "edited": {"path": "../skills/careful-fixer"},
        },
    }
    prereg.write_text(yaml.safe_dump(data, sort_keys=False))
    lock(prereg)

    out = tmp_path / "out"
    options = RunOptions(out=out, jobs=2, scripted=scen, host_slots=2, paths=host_paths(work_root), preflight=False)
    evaluate_family(load_study(prereg), options, lambda s: NullEvents(), lambda _lines: None)

    records = read_results(variant_dir(out, "edited") / "results.jsonl").records
    assert {r.status for r in records} == {"completed"}, [(r.trial_id, r.error) for r in records]
    base = [r for r in records if r.arm == "baseline"]
    assert len(base) == 2
    for r in records:  # every trial had a skill; the scripted model saw which version by its marker
        assert r.skill is not None
        if delivery == "prompt":
            assert r.skill.invoked == "forced"
        else:
            assert r.skill.listed and r.provenance.delivery_check == "ok", (r.trial_id, r.skill)
        assert not any(f.startswith("baseline_invoked_skill") for f in r.flags), r.flags
    decision = json.loads((out / "decision.json").read_text())
    (only,) = decision["variants"]
    if delivery == "prompt":
        assert (only["variant_arm"]["rate"], only["baseline"]["rate"]) == ("2/2", "0/2")
    assert decision["baseline"] == "shipped"
    assert json.loads((variant_dir(out, "edited") / "decision.json").read_text())["verdict"] != "invalid"
    if delivery == "prompt":
        assert (out / "versions" / "shipped" / "SKILL.md").read_text() == unmarked
