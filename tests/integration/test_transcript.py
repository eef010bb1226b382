"""The agent's full transcript (real CLI, --output-format stream-json --verbose) is kept, redacted,
and the result object the record is built from still comes out of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.demo import DemoSetup
from harness.reporting import write_reports
from harness.reporting.model import load_experiment
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.integration.helpers import demo_task_scripts, latest, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_each_trial_keeps_its_transcript_and_the_reports_link_it(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup
) -> None:
    scripts = demo_task_scripts(demo_setup.root)
    scenario = {
        "seed": 3,
        "skill_marker": "careful-fixer-7c1e",
        "tasks": {
            "fix-mean": {**scripts["fix-mean"], "arms": {"baseline": {"p_success": 1}, "skill": {"p_success": 1}}}
        },
    }
    prereg, scen = write_experiment(demo_setup.root, "transcript", tasks=["fix-mean"], scenario=scenario)
    out = tmp_path / "out"
    key = "sk-ant-test-transcript-" + "k" * 20
    result = run_experiment(engine, prereg, scen, out, tmp_path / "work", jobs=2, scripted_key=key)
    for record in latest(result).values():
        assert record.status == "completed", (record.status, record.error)
        assert record.agent is not None and record.agent.parse_error is None
        assert record.agent.num_turns and record.agent.num_turns >= 3  # Read, Edit, Bash, then the answer
        transcript = result.experiment_dir.artifacts.get(record.artifacts["transcript.jsonl"])
        messages = [json.loads(line) for line in transcript.splitlines() if line.strip()]
        assert messages[0]["type"] == "system" and messages[-1]["type"] == "result"
        tools = [
            block.get("name")
            for m in messages
            if m["type"] == "assistant"
            for block in m["message"]["content"]
            if block.get("type") == "tool_use"
        ]
        assert tools[-3:] == ["Read", "Edit", "Bash"], tools
        assert any(m["type"] == "user" for m in messages), "tool results are in the transcript"
        assert key.encode() not in transcript
        # agent.json is the result object alone, as before
        agent = json.loads(result.experiment_dir.artifacts.get(record.artifacts["agent.json"]))
        assert agent["type"] == "result" and agent["num_turns"] == record.agent.num_turns

    data = load_experiment(out)
    write_reports(out, data)
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for record in latest(result).values():
        for name in ("patch.diff", "verify.log", "transcript.jsonl"):
            digest = record.artifacts[name]
            link = f"artifacts/{digest[:2]}/{digest}"
            assert (out / link).is_file()
            assert f"]({link})" in md, (name, link)
            assert f'href="{link}"' in html, (name, link)
