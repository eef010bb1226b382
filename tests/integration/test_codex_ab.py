"""A Codex A/B end to end (issue 30 phase two, item 3): the demo repository and tasks, the installed delivery,
the real engine, images and git, the real pinned Codex CLI (``harness-codex``) as the agent under test
against the scripted Responses API through each trial's gateway, and the real Claude Code CLI as the judge.

Two tasks x two arms x one run: fix-mean's wording makes the scripted model load the skill (it reads the
listed SKILL.md, then fixes the bug); fix-slugify's does not (the skill is listed, not read). The baseline
fails both. What is checked comes from the records the run wrote: the gateway's meter and skill
observation, the provenance, verify and the judge.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from harness.records import TrialRecord
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageBuilder, ImageSet
from harness.trial import codex
from tests.integration.helpers import demo_task_scripts, latest, run_experiment, write_experiment

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SKILL = "careful-fixer"
MARKER = "careful-fixer-7c1e"
MODEL = "gpt-6.2-sol"


@pytest.fixture(scope="module")
def codex_ab(tmp_path_factory: pytest.TempPathFactory, engine: Engine, images: ImageSet) -> dict[str, Any]:
    from harness.demo import prepare_demo

    codex_image = ImageBuilder(engine).ensure_codex(images)  # built once (3 minutes); then a tag lookup
    tmp = tmp_path_factory.mktemp("codex-ab")
    setup = prepare_demo(tmp / "demo")
    scripts = demo_task_scripts(setup.root)
    scenario = {
        "seed": 5,
        "skill_marker": MARKER,
        "defaults": {"usage": {"input_tokens": 2000, "output_tokens": 100, "cache_read_input_tokens": 500}},
        "judge": {"mode": "follow_verify"},
        "invocation": {SKILL: {"p_default": 0.0, "rules": [{"query_any": ["mean("], "p": 1.0}], "marker": MARKER}},
        "tasks": {
            "fix-mean": {**scripts["fix-mean"], "arms": {"baseline": {"p_success": 0}, "skill": {"p_success": 1}}},
            "fix-slugify": {
                **scripts["fix-slugify"],
                "arms": {"baseline": {"p_success": 0}, "skill": {"p_success": 1}},
            },
        },
    }
    prereg, scen = write_experiment(
        setup.root,
        "codex",
        tasks=["fix-mean", "fix-slugify"],
        scenario=scenario,
        extra={"execution": {"agent": "codex", "model": MODEL, "delivery": "installed"}},
    )
    work_root = tmp / "trials"
    work_root.mkdir(mode=0o700)
    result = run_experiment(engine, prereg, scen, tmp / "out", work_root, jobs=2)
    return {"records": latest(result), "out": tmp / "out", "image": codex_image, "work_root": work_root}


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "scripted-api.log").read_text().splitlines() if line.startswith("{")]


def test_every_codex_trial_completed_and_names_its_agent_and_the_judge(codex_ab: dict[str, Any]) -> None:
    records: dict[str, TrialRecord] = codex_ab["records"]
    assert len(records) == 4
    assert {r.status for r in records.values()} == {"completed"}, [(r.trial_id, r.error) for r in records.values()]
    for r in records.values():
        p = r.provenance
        assert (p.agent, p.judge_agent, p.model) == ("codex", "claude-code", MODEL)
        assert (p.agent_sandbox, p.agent_approval) == ("danger-full-access", "never")
        assert p.cli_version == codex_ab["image"].codex_version and p.image_digest == codex_ab["image"].image_id
        assert p.delivery == "installed" and p.delivery_check == "ok", (r.trial_id, p.delivery_check)
        assert r.flags == (), (r.trial_id, r.flags)
        assert r.agent is not None and r.agent.session_id and r.agent.subtype == "success"
        assert r.judge is not None and r.judge.verdict is not None  # the Claude Code judge ran, same gateway
    assert list(codex_ab["work_root"].iterdir()) == []


def test_the_gateway_metered_the_responses_usage_and_the_key_was_replaced(codex_ab: dict[str, Any]) -> None:
    for r in codex_ab["records"].values():
        meter = r.gateway
        assert meter is not None and meter.forwarded >= 2 and meter.refused == ()
        # per request: 2000 input tokens of which 500 cached, 100 output (the scripted usage); gpt-6.2-sol prices
        # plus the judge's haiku request (Messages API) on the same gateway
        assert meter.cache_read_input_tokens >= 500 and meter.cost_usd > 0
        assert (
            r.agent is not None and r.agent.cost_usd is None
        )  # Codex reports no dollars: the gateway's meter is the cost
    requests = [e for e in _events(codex_ab["out"]) if e.get("event") == "request" and e.get("path") == "/v1/responses"]
    assert requests and all(e["has_authorization"] for e in requests)
    placeholder = hashlib.sha256(codex.PLACEHOLDER_KEY.encode()).hexdigest()
    assert placeholder not in {e["key_sha256"] for e in requests}, "the CLI's placeholder never reaches the API"


def test_the_skill_fired_where_the_model_read_it_and_the_baseline_never_listed_it(codex_ab: dict[str, Any]) -> None:
    records = codex_ab["records"]
    fired = records["fix-mean.skill.0"].skill
    assert fired is not None and fired.listed and fired.invoked == "yes" and fired.loaded, fired
    assert fired.listing == (SKILL,)  # the bundled system skills are off: only the skill under test
    listed_only = records["fix-slugify.skill.0"].skill
    assert listed_only is not None and listed_only.listed and listed_only.invoked == "no", listed_only
    for tid in ("fix-mean.baseline.0", "fix-slugify.baseline.0"):
        base = records[tid].skill
        assert base is not None and not base.listed and base.invoked == "no" and base.listing == (), base
    loads = [e for e in _events(codex_ab["out"]) if e.get("event") == "skill_loaded"]
    assert [e["ok"] for e in loads] == [True], loads  # the scripted model saw the marker come back


def test_verify_and_the_patch_follow_what_the_codex_cli_did(codex_ab: dict[str, Any]) -> None:
    records = codex_ab["records"]
    fixed = records["fix-mean.skill.0"]
    assert fixed.verify is not None and fixed.verify.exit_code == 0 and fixed.judge is not None
    assert fixed.judge.verdict == "pass"
    assert fixed.patch is not None and fixed.patch.files_changed == 1 and fixed.patch.rejected is None
    for r in records.values():
        assert r.patch is not None and ".agents" not in str(r.patch), "the skill is mounted outside the workspace"
    assert records["fix-mean.baseline.0"].verify is not None and records["fix-mean.baseline.0"].verify.exit_code != 0
