"""Pure parts of the installed delivery, "did it fire?" and trigger accuracy (no Docker)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.analysis import skilluse as skillreport
from harness.errors import InfraError
from harness.records import Arm, SkillInvoked, SkillUse, TrialRecord, VerifyResult
from harness.sidecars import gatewaylog, scripted_api, skilltrace
from harness.study.config import Execution
from harness.study.skillname import listed_name
from harness.trial import installed
from harness.trial.workspace import make_mountpoint
from tests.factories import provenance, trial_record

LISTING = (
    "When you launch agents...\n\nThe following skills are available for use with the Skill tool:\n\n"
    "- careful-fixer: Fix a reported bug by reproducing it first.\n- dataviz: Charts.\n- simplify: Review.\n\nmore"
)


def body(listing: bool = True, skill_line: bool = True, extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    text = (
        LISTING if skill_line else LISTING.replace("- careful-fixer: Fix a reported bug by reproducing it first.\n", "")
    )
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "fix the bug"}]}]
    if listing:
        msgs.append({"role": "system", "content": [{"type": "text", "text": text}]})
    return {"messages": msgs + (extra or []), "tools": [{"name": "Bash"}, {"name": "Skill"}]}


def logged() -> tuple[list[gatewaylog.GatewayEvent], skilltrace.Log]:
    """The gateway's log as the controller reads it: each event written as its line, then parsed."""
    events: list[gatewaylog.GatewayEvent] = []

    def log(event: gatewaylog.GatewayEvent) -> None:
        line = gatewaylog.parse(gatewaylog.dump(event))
        assert line == event, "the line reads back as the event written"
        events.append(line)

    return events, log


# ------------------------------------------------------------------ gateway side (skilltrace)


def test_the_listing_is_found_wherever_the_cli_put_it_and_parsed_line_by_line() -> None:
    lines = skilltrace.listing_lines(body())
    assert lines is not None and [skilltrace.line_name(x) for x in lines] == ["careful-fixer", "dataviz", "simplify"]
    assert skilltrace.listing_lines(body(listing=False)) is None


def test_observe_request_logs_turn_tools_listing_and_loads_but_never_the_conversation() -> None:
    events, log = logged()
    attribution = skilltrace.Attribution()
    call = {"type": "tool_use", "id": "toolu_1", "name": "Skill", "input": {"skill": "careful-fixer"}}
    placement = skilltrace.observe_request(body(), log, attribution)
    skilltrace.ResponseTrace(placement, attribution).feed_message({"content": [call]})
    loaded = body(
        extra=[
            {"role": "assistant", "content": [call]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Launching skill: careful-fixer"}
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "USD budget: $0.01/$0.5"}]},
        ]
    )
    skilltrace.observe_request(loaded, log, attribution)
    first, second = events
    assert isinstance(first, gatewaylog.SkillRequest) and isinstance(second, gatewaylog.SkillRequest)
    assert first.turn == 0 and first.listed == ("careful-fixer", "dataviz", "simplify") and first.listing
    assert first.tools == ("Bash", "Skill") and first.loaded == () and first.thread == "cli" and first.root
    assert second.turn == 1 and second.loaded == ("careful-fixer",) and second.listing is None
    assert second.thread == "cli" and not second.side and not second.root
    assert "fix the bug" not in "".join(gatewaylog.dump(e) for e in events)


def test_response_trace_reads_tool_uses_from_sse_and_json() -> None:
    trace = skilltrace.ResponseTrace()
    for event in (
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "name": "Skill", "input": {}},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"ski'}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": 'll": "x"}'}},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "name": "Bash", "input": {}}},
    ):
        trace.feed(b"data: " + json.dumps(event).encode())
    assert trace.uses() == (gatewaylog.ToolUse(name="Skill", skill="x"), gatewaylog.ToolUse(name="Bash"))
    plain = skilltrace.ResponseTrace()
    plain.feed_message({"content": [{"type": "tool_use", "name": "Skill", "input": {"skill": "y"}}]})
    assert plain.uses() == (gatewaylog.ToolUse(name="Skill", skill="y"),)


def test_the_stopper_fires_only_on_the_named_skill() -> None:
    stop = skilltrace.Stopper("careful-fixer")
    stop.saw([gatewaylog.ToolUse(name="Skill", skill="dataviz"), gatewaylog.ToolUse(name="Bash")])
    assert not stop.stopped()
    stop.saw([gatewaylog.ToolUse(name="Skill", skill="careful-fixer")])
    assert stop.stopped()


# ------------------------------------------------------------------ host side (installed.observe)


def gateway_log(
    skill_arm: bool, calls: list[dict[str, Any]], listing_changes: bool = False
) -> list[gatewaylog.GatewayEvent]:
    """The gateway's log of a two-request conversation of the CLI's: ``calls`` answered to the first."""
    events, log = logged()
    attribution = skilltrace.Attribution()
    blocks = [
        {
            "type": "tool_use",
            "id": f"toolu_{i}",
            "name": c["name"],
            "input": {k: v for k, v in c.items() if k != "name"},
        }
        for i, c in enumerate(calls)
    ] or [{"type": "text", "text": "thinking aloud"}]
    first = skilltrace.observe_request(body(skill_line=skill_arm), log, attribution)
    trace = skilltrace.ResponseTrace(first, attribution)
    trace.feed_message({"content": blocks})
    trace.emit(log)
    results = [{"type": "tool_result", "tool_use_id": b["id"], "content": "ok"} for b in blocks if "id" in b]
    second = body(
        skill_line=skill_arm and not listing_changes,
        extra=[{"role": "assistant", "content": blocks}, {"role": "user", "content": results or "go on"}],
    )
    trace = skilltrace.ResponseTrace(skilltrace.observe_request(second, log, attribution), attribution)
    trace.feed_message({"content": [{"type": "text", "text": "done"}]})
    trace.emit(log)
    return events


def test_observe_invoked_listed_and_provenance() -> None:
    use, prov, flags = installed.observe(
        gateway_log(True, [{"name": "Skill", "skill": "careful-fixer"}]),
        skill="careful-fixer",
        arm="skill",
        delivery="installed",
    )
    assert use.invoked == "yes" and use.listed and use.tool_uses == ("Skill:careful-fixer",) and flags == []
    base, base_prov, _ = installed.observe(
        gateway_log(False, []), skill="careful-fixer", arm="baseline", delivery="installed"
    )
    assert base.invoked == "no" and base.listed is False
    assert prov["listing_sha256"] == base_prov["listing_sha256"], "the arms differ by exactly the skill's line"
    assert prov["delivery_check"] == base_prov["delivery_check"] == "ok"
    text = installed.listing_text(gateway_log(True, []))
    assert text is not None and text.decode().splitlines()[0].startswith("- careful-fixer: ")


def test_a_skill_arm_without_its_listing_is_could_not_measure_and_invalid_not_a_miss() -> None:
    use, prov, _ = installed.observe(gateway_log(False, []), skill="careful-fixer", arm="skill", delivery="installed")
    assert use.invoked == "could_not_measure" and use.listed is False and "not listed" in (use.reason or "")
    assert prov["delivery_check"] != "ok"
    nothing, prov2, _ = installed.observe([], skill="careful-fixer", arm="skill", delivery="installed")
    assert nothing.invoked == "could_not_measure" and "no request" in (nothing.reason or "")
    assert "could not measure" in (prov2["delivery_check"] or "")


def test_a_baseline_that_lists_or_calls_the_skill_is_flagged() -> None:
    _use, prov, flags = installed.observe(
        gateway_log(True, [{"name": "Skill", "skill": "careful-fixer"}], listing_changes=True),
        skill="careful-fixer",
        arm="baseline",
        delivery="installed",
    )
    assert prov["delivery_check"] != "ok"
    assert any(f.startswith("baseline_invoked_skill") for f in flags)
    assert any(f.startswith("skill_listing_changed") for f in flags)


def test_prompt_delivery_is_forced_in_the_skill_arm() -> None:
    use, prov, _ = installed.observe([], skill="x", arm="skill", delivery="prompt")
    assert use.invoked == "forced" and prov == {"delivery": "prompt"}


def test_installed_command_is_not_bare_and_loads_only_project_settings() -> None:
    argv = installed.agent_command(
        "do it", model="sonnet", allowed_tools=("Bash", "Read"), max_budget_usd=0.5, timeout_s=60, max_turns=3
    )
    assert "--bare" not in argv and argv[argv.index("--setting-sources") + 1] == "project"
    assert argv[argv.index("--allowedTools") + 1] == "Bash,Read,Skill"
    assert "--strict-mcp-config" in argv and json.loads(argv[argv.index("--settings") + 1]) == {"disableAllHooks": True}
    assert argv[argv.index("--max-turns") + 1] == "3"
    assert Execution().delivery == "prompt"


def test_skill_name_and_mountpoint(tmp_path: Path) -> None:
    skill = tmp_path / "s"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: real-name\ndescription: x\n---\nbody\n")
    assert listed_name(skill, "fallback") == "real-name"
    ws = tmp_path / "ws"
    ws.mkdir()
    make_mountpoint(ws, installed.mountpoint("real-name"))
    assert (ws / ".claude" / "skills" / "real-name").is_dir()
    evil = tmp_path / "evil"
    (evil / ".claude").mkdir(parents=True)
    (evil / ".claude" / "skills").symlink_to("/etc")
    with pytest.raises(InfraError):
        make_mountpoint(evil, installed.mountpoint("x"))


# ------------------------------------------------------------------ reports


def record(arm: Arm, invoked: SkillInvoked, passed: bool, delivery: str = "installed") -> TrialRecord:
    prov = provenance(
        lock_hash="l", base_sha="b", model="m", judge_model="j", cli_version="c", image_digest="i",
        prompt_template_sha256="p", harness_version="h",
    )  # fmt: skip
    return trial_record(
        trial_id=f"t.{arm}.{invoked}.{passed}", task_id="t", arm=arm, provenance=prov, started_at="", finished_at="",
        verify=VerifyResult(exit_code=0 if passed else 1),
        skill=SkillUse(delivery=delivery, invoked=invoked, listed=arm == "skill"),
    )  # fmt: skip


def test_pass_rates_split_by_invoked_and_silent_bypass() -> None:
    recs = [record("skill", "yes", True), record("skill", "no", False), record("baseline", "no", False)]
    rows = {(r.arm, r.invoked): r for r in skillreport.invocation_rows(recs, "verify")}
    assert rows[("skill", "yes")].rate_text == "1/1" and rows[("skill", "no")].rate_text == "0/1"
    assert skillreport.silent_bypass(recs) is None
    bypass = [record("skill", "no", True), record("skill", "no", False), record("baseline", "no", True)]
    assert "silent bypass" in (skillreport.silent_bypass(bypass) or "")
    assert any("silent bypass" in line for line in skillreport.markdown_lines(bypass, "verify"))
    assert skillreport.silent_bypass([record("skill", "forced", True, "prompt")]) is None


# ------------------------------------------------------------------ scripted model


def test_scripted_invoke_probability_depends_on_query_and_description() -> None:
    sc = scripted_api.Scenario(
        {
            "tasks": {},
            "invocation": {
                "s": {"p_default": 0.1, "rules": [{"query_any": ["bug"], "description_any": ["reproduc"], "p": 0.9}]}
            },
        }
    )
    assert scripted_api.invoke_probability(sc, "s", "a BUG here", "Reproduce first") == 0.9
    assert scripted_api.invoke_probability(sc, "s", "a bug here", "Careful helper") == 0.1
    assert scripted_api.skill_listing(body()) == {
        "careful-fixer": "Fix a reported bug by reproducing it first.",
        "dataviz": "Charts.",
        "simplify": "Review.",
    }


def test_api_calls_the_agent_makes_itself_never_count_as_the_skill_firing() -> None:
    events, log = logged()
    attribution = skilltrace.Attribution()
    cli = skilltrace.observe_request(body(skill_line=True), log, attribution)
    skilltrace.ResponseTrace(cli, attribution).emit(log)  # the CLI's turn: no tool use
    forged_body = body(skill_line=True)
    forged_body["messages"][0]["content"][0]["text"] = "curl from inside the sandbox"
    own = skilltrace.observe_request(forged_body, log, attribution)
    trace = skilltrace.ResponseTrace(own, attribution)
    trace.feed_message(
        {"content": [{"type": "tool_use", "id": "t", "name": "Skill", "input": {"skill": "careful-fixer"}}]}
    )
    trace.emit(log)
    assert cli.thread == "cli" and own.side
    use, _prov, flags = installed.observe(events, skill="careful-fixer", arm="skill", delivery="installed")
    assert use.invoked == "no" and use.tool_uses == (), use
    assert any(f.startswith("side_requests: 1 ") for f in flags), flags
    # positive control: the same Skill call in the CLI's own conversation counts
    events2, log2 = logged()
    attribution2 = skilltrace.Attribution()
    t2 = skilltrace.ResponseTrace(skilltrace.observe_request(body(skill_line=True), log2, attribution2), attribution2)
    t2.feed_message(
        {"content": [{"type": "tool_use", "id": "t", "name": "Skill", "input": {"skill": "careful-fixer"}}]}
    )
    t2.emit(log2)
    assert installed.observe(events2, skill="careful-fixer", arm="skill", delivery="installed")[0].invoked == "yes"


# ------------------------------------------------------------------ the name the CLI lists the skill under


def test_front_matter_names_and_what_falls_back() -> None:
    from harness.study.skillname import front_matter_name

    assert front_matter_name("---\nname: 'quoted-name'\ndescription: x\n---\n") == "quoted-name"
    assert front_matter_name("---\ndescription: x\n---\nname: body-not-front-matter\n") is None
    assert front_matter_name("# no front matter\nname: x\n") is None
    assert front_matter_name("---\nname: has spaces\n---\n") is None


def test_the_scripted_model_keys_on_the_listed_name_not_the_preregistrations(tmp_path: Path) -> None:
    from harness.study import scenario as scen
    from harness.study.config import Task

    sc = scen.Scenario.model_validate(
        {
            "tasks": {"t": {"success": [{"tool": "Bash", "input": {"command": "true"}}]}},
            "invocation": {"careful-fixer": {"p_default": 1.0}},  # keyed as the user wrote it
        }
    )
    tasks = (Task(id="t", prompt="fix it", verify_cmd="true", pass_criteria="x"),)
    listing = LISTING.replace("careful-fixer", "renamed-fixer")
    request = {"messages": [{"role": "user", "content": "fix it"}, {"role": "system", "content": listing}]}
    for listed, expect in ((None, "baseline"), ("renamed-fixer", "skill")):
        data = json.loads(scen.compile_scenario(tmp_path, sc, tasks, skill="careful-fixer", listed=listed))
        reply, info = scripted_api.agent_reply(scripted_api.Scenario(data), request)
        assert info["arm"] == expect, (listed, info)
        if expect == "skill":  # the skill arm, and the Skill call names the listed skill
            assert reply.blocks[-1]["name"] == "Skill" and reply.blocks[-1]["input"] == {"skill": "renamed-fixer"}


def test_lock_records_the_listed_name_and_says_it(make_study: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main
    from harness.study.config import load_study

    s = make_study(skill_files={"SKILL.md": "---\nname: renamed-tidy\ndescription: d\n---\nbody\n"})
    assert main(["lock", str(s.prereg)]) == 0
    assert "the CLI lists the skill as 'renamed-tidy' (SKILL.md's name; the preregistration's skill is 'tidy')" in (
        capsys.readouterr().out
    )
    block = load_study(s.prereg).prereg.lock
    assert block is not None and block.listed_name == "renamed-tidy"
    same = make_study()
    assert main(["lock", str(same.prereg)]) == 0
    assert "the CLI lists the skill as 'tidy'\n" in capsys.readouterr().out


def test_the_report_says_which_name_was_listed_and_counts_side_requests() -> None:
    from harness.records import GatewayMeter

    use = SkillUse(delivery="installed", invoked="yes", listed=True, name="renamed-fixer")
    records = [
        trial_record(arm="skill", skill=use, gateway=GatewayMeter(side_requests=2)),
        trial_record(arm="baseline", skill=SkillUse(delivery="installed", invoked="no", listed=False)),
    ]
    text = "\n".join(skillreport.terminal_lines(records, "verify_and_judge"))
    assert "listed as 'renamed-fixer'" in text and "side requests" in text and "skill 2" in text, text
    md = "\n".join(skillreport.markdown_lines(records, "verify_and_judge"))
    assert "The CLI listed the skill as `renamed-fixer`." in md
    assert skillreport.summary(records, "verify_and_judge")["listed_name"] == "renamed-fixer"


def test_scripted_subagents_and_compaction_follow_the_script() -> None:
    from harness.study.scenario import Step

    with pytest.raises(ValueError, match=r"input\.prompt"):
        Step.model_validate({"tool": "Agent", "input": {}})
    with pytest.raises(ValueError, match="only an Agent step"):
        Step.model_validate({"tool": "Bash", "input": {}, "subagent": [{"tool": "Skill", "input": {}}]})
    data = {
        "tasks": {
            "t": {
                "prompt": "fix it",
                "success": [
                    {"tool": "Agent", "input": {"prompt": "<<sub>>"}, "subagent": [{"tool": "Skill", "input": {}}]},
                    {"tool": "Bash", "input": {"command": "a"}},
                    {"tool": "Bash", "input": {"command": "b"}},
                ],
                "arms": {"baseline": {"p_success": 1}},
            }
        }
    }
    sc = scripted_api.Scenario(data)
    reply, info = scripted_api.agent_reply(sc, {"messages": [{"role": "user", "content": "go: <<sub>>"}]})
    assert info["arm"] == "subagent" and reply.blocks[0]["name"] == "Skill"
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a1", "name": "Bash", "input": {}}]}
    asked = [
        {"role": "user", "content": "fix it"},
        call,
        {"role": "user", "content": "summarise: an <analysis> block followed by a <summary> block"},
    ]
    summary, info = scripted_api.agent_reply(sc, {"messages": asked})
    text = summary.blocks[0]["text"]
    assert info["compaction"] == "t" and "[scripted compaction at turn 1 after toolu_a1]" in text and "fix it" in text
    inner = text.split("<summary>", 1)[1].split("</summary>", 1)[0]
    # the compacted conversation goes on at turn 1, whether or not the CLI kept the last answer verbatim
    for kept in ([call, {"role": "user", "content": "ok"}], []):
        reply, info = scripted_api.agent_reply(
            sc, {"messages": [{"role": "user", "content": f"Summary:\n{inner}"}, *kept]}
        )
        assert info["turn"] == 1 and reply.blocks[-1]["input"] == {"command": "a"}, (kept, info)
