"""The preflight on the real engine: verify at the base commit, in the verify container, before any agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.demo import DemoSetup
from harness.errors import PrerequisiteError
from harness.reporting import write_reports
from harness.reporting.model import load_experiment
from harness.results.load import PREFLIGHT_JSON
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.integration.helpers import run_experiment
from tests.security.helpers import HostileTask, mean_task, write_hostile

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_verify_that_cannot_run_stops_the_run_before_any_agent(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup
) -> None:
    tasks = [
        mean_task(demo_setup.root, "fix-mean-p"),
        HostileTask("needs-pytest", baseline=[], verify_cmd="python3 -m pytest -q tests"),
        HostileTask("needs-make", baseline=[], verify_cmd="make check"),
    ]
    prereg, scen = write_hostile(demo_setup.root, "pf-broken", tasks)
    out = tmp_path / "out"
    with pytest.raises(PrerequisiteError) as err:
        run_experiment(engine, prereg, scen, out, tmp_path / "work", preflight=True)
    text = str(err.value)
    assert "needs-pytest: exit 1: /usr/bin/python3: No module named pytest" in text
    assert "needs-make: exit 127" in text
    assert "fix-mean-p" not in text.split("(")[1], "a task whose verify runs is not blamed"
    assert "--base-image" in text
    assert not (out / "results.jsonl").exists() or not (out / "results.jsonl").read_bytes(), "no trial ran"
    recorded = json.loads((out / PREFLIGHT_JSON).read_text())["tasks"]
    assert {t: r["outcome"] for t, r in recorded.items()} == {
        "fix-mean-p": "fails",
        "needs-pytest": "cannot_run",
        "needs-make": "cannot_run",
    }


def test_a_trivial_task_is_skipped_with_its_reason_and_the_outcome_is_cached(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup
) -> None:
    tasks = [mean_task(demo_setup.root, "fix-mean-p"), HostileTask("already-fine", baseline=[], verify_cmd="true")]
    prereg, scen = write_hostile(demo_setup.root, "pf-trivial", tasks)
    out = tmp_path / "out"
    result = run_experiment(engine, prereg, scen, out, tmp_path / "work", preflight=True)
    assert {r.task_id for r in result.records} == {"fix-mean-p"}, "the trivial task was not planned"
    assert result.ran == 2
    recorded = json.loads((out / PREFLIGHT_JSON).read_text())["tasks"]
    assert recorded["already-fine"]["outcome"] == "passes"
    assert recorded["fix-mean-p"]["outcome"] == "fails"
    assert recorded["fix-mean-p"]["exit_code"] == 1
    assert "FAILED" in recorded["fix-mean-p"]["output_tail"]
    assert not any(r["cached"] for r in recorded.values())
    assert list((tmp_path / "work").iterdir()) == [], "the work root holds only run directories"
    assert len(list((tmp_path / "work-preflight-cache").glob("*.json"))) == 2
    seconds = [r["seconds"] for r in recorded.values()]
    assert all(s > 0 for s in seconds)
    print(f"preflight seconds per task (uncached): {seconds}")

    data = load_experiment(out)
    assert "already-fine" in data.skipped_tasks
    assert "already passes at the base commit" in data.skip_reason("already-fine")
    assert "INCOMPLETE" not in [r.code for r in data.decision.reasons], "a skipped task is not a missing one"
    write_reports(out, data)
    assert (
        "| `already-fine` | skipped | skipped | n/a | n/a | verify\\_cmd already passes at the base commit"
        in (out / "report.md").read_text()
    )
    assert "already-fine (verify_cmd already passes at the base commit" in (out / "summary.txt").read_text()
    assert 'message="verify_cmd already passes at the base commit' in (out / "junit.xml").read_text()

    # rerun (resume): the base outcomes come from the cache, nothing else changes
    again = run_experiment(engine, prereg, scen, out, tmp_path / "work", preflight=True)
    assert again.ran == 0
    recorded = json.loads((out / PREFLIGHT_JSON).read_text())["tasks"]
    assert all(r["cached"] for r in recorded.values())
    assert recorded["already-fine"]["outcome"] == "passes"
