"""``skilltrial confirm`` through the real pipeline (issue 28 item 3): a library run's selected set against the
bare baseline on the held-out split, on the real engine, images, Claude Code CLI and git against the scripted
Messages API. The library run itself is written from records (its own pipeline is tests/integration/test_library.py's):
what is real here is the confirmation: the derived preregistration locked before any trial, the selected skills
mounted and named in the skill arm's prompt, the A/B analysis and the ledger. Small on purpose: 2 held-out tasks
x 2 runs (8 trials: the library's runs_per_arm, which the confirmation keeps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.demo import DemoSetup
from harness.experiment import library_plan as library
from harness.experiment.confirm import confirm
from harness.experiment.options import RunOptions
from harness.reporting import ledger
from harness.results.store import read_results
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import load_study, lock_path
from harness.study.lock import lock
from tests.factories import write_experiment_dir
from tests.integration.helpers import demo_task_scripts, host_paths
from tests.unit.test_library import complete_records

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HELD_OUT = ["fix-mean", "fix-median"]


def test_confirm_runs_the_selected_set_on_held_out_tasks(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    demo = demo_setup.root / "demo"
    tasks = json.loads((demo / "tasks.json").read_text())["tasks"]
    for t in tasks:
        t["split"] = "test" if t["id"] in HELD_OUT else "val"
    (demo / "tasks-split.json").write_text(json.dumps({"tasks": tasks}))
    for name, marker in (("alpha", "alpha-5e1f"), ("beta", "beta-77c2")):
        (demo / "libskills" / name).mkdir(parents=True)
        (demo / "libskills" / name / "SKILL.md").write_text(f"# {name}\n<!-- {marker} -->\nFix the bug.\n")
    prereg = demo / "prereg-lib.yaml"
    prereg.write_text(yaml.safe_dump({
        "skill": "fixers", "tasks": "tasks-split.json", "split": "val",
        "library": {"path": "libskills", "masks": {"balanced": True, "seed": 3}, "top_k": 1, "selection": "positive"},
        "execution": {"runs_per_arm": 2, "repo": "repo", "seed": 1, "max_infra_retries": 0,
                      "budgets": {"per_trial_usd": 0.5, "judge_usd": 0.05, "timeout_s": 120, "verify_timeout_s": 60,
                                  "judge_timeout_s": 60}},
        "decision": {"rule": "point"},
    }, sort_keys=False))  # fmt: skip
    lock(prereg, library_entries=library.lock_entries)
    lib = load_study(prereg)
    assert lib.prereg.lock is not None
    records = [r.model_copy(update={"split": "val"}) for r in complete_records(lib, library.design(lib))]
    run = write_experiment_dir(tmp_path / "library-run", {"lock_hash": lib.prereg.lock.sha256,
                                                          "preregistration": str(prereg)}, records)  # fmt: skip

    scripts = demo_task_scripts(demo_setup.root)
    scenario = demo / "scenario-confirm.yaml"
    scenario.write_text(yaml.safe_dump({
        "seed": 5,
        "defaults": {"usage": {"input_tokens": 1000, "output_tokens": 100}},
        "arms": {"baseline": {"p_success": 0}},
        "library": {"skills": {"alpha": {"p_effect": 1.0, "marker": "alpha-5e1f"},
                               "beta": {"p_effect": -1.0, "marker": "beta-77c2"}}},
        "tasks": {t: dict(scripts[t]) for t in HELD_OUT},
    }, sort_keys=False))  # fmt: skip
    out = tmp_path / "confirmation"

    def options(_study: object) -> RunOptions:
        return RunOptions(
            out=out, jobs=2, scripted=scenario, host_slots=2, paths=host_paths(work_root), preflight=False
        )

    lines = confirm(run, "test", options)

    derived = demo / "prereg-lib-confirm-test.yaml"
    assert lock_path(derived).is_file()
    locked = yaml.safe_load(derived.read_text())
    assert locked["selection"]["skills"] == ["alpha"] and locked["selection"]["library_lock"] == lib.prereg.lock.sha256
    assert locked["split"] == "test"
    done = read_results(out / "results.jsonl").records
    assert {r.status for r in done} == {"completed"}, [(r.trial_id, r.error) for r in done]
    assert {r.task_id for r in done} == set(HELD_OUT) and {r.split for r in done} == {"test"}
    for r in done:  # what each container had, read from its spec: the set in the skill arm, nothing in the baseline
        assert r.skills_mounted is not None
        assert [s.name for s in r.skills_mounted] == (["alpha"] if r.arm == "skill" else []), r.trial_id
    decision = json.loads((out / "decision.json").read_text())
    assert (decision["arms"]["skill"]["rate"], decision["arms"]["baseline"]["rate"]) == ("4/4", "0/4")
    assert decision["skill"] == "fixers-confirm"
    assert any(x.startswith("confirmation ") for x in lines)

    book = ledger.load(ledger.ledger_path(lib))
    assert book.skills["fixers-confirm"].verdict == decision["verdict"]
    (conf,) = book.libraries["fixers"].confirmations
    assert (conf.library_run, conf.split, conf.selected) == (lib.prereg.lock.sha256[:12], "test", ("alpha",))
    capsys.readouterr()
    assert main(["gate", str(out)]) == {"adopt": 0, "reject": 1, "inconclusive": 2}[decision["verdict"]]
