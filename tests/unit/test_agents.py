"""The agent seam (issue 30 phase two, item 1): one interface in ``harness/trial/agents``, Claude Code its first
implementation (the same argv, environment and parsing as before the seam), Codex its second; and the trial
path running either, on the FakeRuntime (tests/unit/test_trial_run.py's rig)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.errors import ConfigError, HarnessError
from harness.records import AgentResult
from harness.sandbox import roles
from harness.sandbox.runtime import ContainerSpec, Limits
from harness.sidecars import gatewaylog
from harness.study.config import Budgets, Execution, parse_preregistration
from harness.trial import claude, codex, installed
from harness.trial.agents import AGENTS, DEFAULT_AGENT, JUDGE_AGENT, AgentRun, agent_for
from harness.trial.trial import other_api_flags
from tests.fakes import FakeRuntime, Outcome, forwarded, gateway_log
from tests.unit import test_trial_run
from tests.unit.test_trial_run import FIXED, Rig

make_rig = test_trial_run.make_rig
"""The trial rig of tests/unit/test_trial_run.py (a fixture)."""
DATA = Path(__file__).parent / "data"
HARNESS = Path(__file__).resolve().parents[2] / "harness"
PROFILE = roles.Profile("harness-trial:t", "harness-sidecar:t", Limits(), user="1:1", sidecar_user="2:2")
RUN = AgentRun(
    prompt="fix it", model="sonnet", allowed_tools=("Bash", "Read"), max_budget_usd=0.5, timeout_s=300,
    delivery="prompt", gateway_ip="10.9.0.2",
)  # fmt: skip


def test_the_registry_names_both_agents_and_the_default_is_claude_code() -> None:
    assert sorted(AGENTS) == ["claude-code", "codex"] and DEFAULT_AGENT is agent_for("claude-code")
    assert JUDGE_AGENT == "claude-code"
    assert Execution().agent == DEFAULT_AGENT.name


def test_claude_code_behind_the_seam_runs_exactly_what_it_ran_before() -> None:
    cc = agent_for("claude-code")
    assert cc.command(RUN) == claude.agent_command(
        "fix it", model="sonnet", allowed_tools=("Bash", "Read"), max_budget_usd=0.5, timeout_s=300
    )
    installed_run = dataclasses.replace(RUN, delivery="installed")
    assert cc.command(installed_run) == installed.agent_command(
        "fix it", model="sonnet", allowed_tools=("Bash", "Read"), max_budget_usd=0.5, timeout_s=300
    )
    assert cc.env("10.9.0.2") == roles.claude_env("10.9.0.2") and cc.image(PROFILE) == "harness-trial:t"
    assert cc.skill_target("s") == "/workspace/.claude/skills/s" and cc.mountpoint("s") == (".claude", "skills", "s")
    stdout = (DATA / "claude-result.json").read_bytes()
    assert cc.parse_result(stdout, 0) == claude.parse_result(stdout, 0)
    assert cc.says_budget_exceeded(AgentResult(subtype="error_max_budget_usd"))
    assert cc.gateway_env() == {"GATEWAY_APIS": "messages"}


def test_codex_behind_the_seam_talks_to_the_gateway_only_and_mounts_outside_the_workspace() -> None:
    cx = agent_for("codex")
    argv = cx.command(dataclasses.replace(RUN, model="gpt-6.2-sol"))
    assert argv == codex.agent_command(
        "fix it", model="gpt-6.2-sol", base_url=f"http://10.9.0.2:{roles.GATEWAY_PORT}/v1", timeout_s=300
    )
    env = cx.env("10.9.0.2")
    assert env["OPENAI_API_KEY"] == codex.PLACEHOLDER_KEY and not any(k.startswith("ANTHROPIC") for k in env)
    with pytest.raises(HarnessError, match="Codex image"):
        cx.image(PROFILE)
    assert cx.image(dataclasses.replace(PROFILE, codex_image="harness-codex:t")) == "harness-codex:t"
    assert cx.skill_target("s") == "/home/agent/.agents/skills/s" and cx.mountpoint("s") == ()
    events = (DATA / "codex-0.171.0-events.jsonl").read_bytes()
    assert cx.parse_result(events, 0).subtype == "success" and cx.result_json(events) == events
    assert not cx.says_budget_exceeded(AgentResult(subtype="error_max_budget_usd"))
    assert cx.gateway_env() == {"GATEWAY_APIS": "responses,messages"}
    assert cx.provenance() == {
        "agent": "codex",
        "agent_sandbox": "danger-full-access",
        "agent_approval": "never",
        "judge_agent": "claude-code",
    }


def test_nothing_in_the_trial_path_but_the_seam_and_the_judge_names_a_cli() -> None:
    """``claude`` and ``codex`` (the CLI modules) are imported by the agents that wrap them, by the judge's
    step (Claude Code, independent of the agent) and by nothing else of the trial path."""
    users: dict[str, set[str]] = {}
    for path in [*(HARNESS / "trial").rglob("*.py"), *(HARNESS / "experiment").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "harness.trial":
                for alias in node.names:
                    if alias.name in ("claude", "codex"):
                        users.setdefault(alias.name, set()).add(path.relative_to(HARNESS).as_posix())
    assert users == {
        "claude": {"trial/agents/claude_code.py", "trial/trial.py"},  # trial.py: the judge's command
        "codex": {"trial/agents/codex.py"},
    }
    trial = (HARNESS / "trial" / "trial.py").read_text()
    assert "claude.agent_command" not in trial and "installed.agent_command" not in trial


def test_a_messages_request_while_codex_ran_is_flagged() -> None:
    cx, cc = agent_for("codex"), agent_for("claude-code")
    messages = forwarded(0.01)
    assert other_api_flags([messages], cx) == ["agent_used_judge_api: 1 Messages API request(s) while the agent ran"]
    assert other_api_flags([messages], cc) == []
    responses = dataclasses.replace(messages, path="/v1/responses")
    assert other_api_flags([responses], cx) == []


def codex_agent(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
    """A Codex CLI that fixes calc.py through its gateway (the Responses API) and prints its --json events."""
    ws = runtime.mount_path(spec, "/workspace")
    for rel, text in FIXED.items():
        (ws / rel).write_text(text)
    gateway_log(runtime, spec, dataclasses.replace(forwarded(0.02), path="/v1/responses", model="gpt-6.2-sol"))
    return Outcome(stdout=(DATA / "codex-0.171.0-events.jsonl").read_bytes(), seconds=8.0)


def test_a_codex_trial_runs_the_codex_image_with_its_own_argv_and_the_judge_stays_claude_code(
    make_rig: Callable[..., Rig],
) -> None:
    ex = Execution(agent="codex", judge_model="haiku", budgets=Budgets(timeout_s=600))
    assert ex.model == "gpt-6.2-sol"
    rig = make_rig(agent=codex_agent, execution=ex)
    site = dataclasses.replace(rig.ctx.site, profile=dataclasses.replace(rig.ctx.site.profile, codex_image="codex:t"))
    rig.ctx = dataclasses.replace(rig.ctx, site=site)
    rig.runtime.add_image("codex:t")
    seen = rig.specs()
    rec = rig.run()
    assert rec.status == "completed", rec.error
    by_role = {s.labels["harness.role"]: s for s in seen if "harness.role" in s.labels}
    agent_spec, judge_spec = by_role["agent"], by_role["judge"]
    assert agent_spec.image == "codex:t" and "codex" in agent_spec.command and "exec" in agent_spec.command
    assert "OPENAI_API_KEY" in agent_spec.env and "ANTHROPIC_API_KEY" not in agent_spec.env
    assert judge_spec.image == rig.ctx.site.profile.trial_image and "claude" in judge_spec.command
    assert rec.agent is not None and rec.agent.session_id and rec.agent.cost_usd is None
    assert rec.gateway is not None and rec.gateway.cost_usd == pytest.approx(0.02)
    assert rec.judge is not None and rec.judge.verdict == "pass"
    assert rec.flags == ()
    rig.assert_torn_down()


def test_a_codex_trials_messages_request_is_flagged(make_rig: Callable[..., Rig]) -> None:
    def sneaky(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        gateway_log(runtime, spec, forwarded(0.01))  # /v1/messages, while the agent runs
        return codex_agent(spec, runtime)

    ex = Execution(agent="codex", judge_model="haiku", budgets=Budgets(timeout_s=600))
    rig = make_rig(agent=sneaky, execution=ex)
    site = dataclasses.replace(rig.ctx.site, profile=dataclasses.replace(rig.ctx.site.profile, codex_image="codex:t"))
    rig.ctx = dataclasses.replace(rig.ctx, site=site)
    rig.runtime.add_image("codex:t")
    rec = rig.run()
    assert any(f.startswith("agent_used_judge_api") for f in rec.flags)


def test_a_codex_skill_load_is_what_the_gateway_saw_not_its_stdout() -> None:
    """``installed.observe`` reads Codex's loads from the gateway's API-neutral events (a read of the listed
    SKILL.md, named by the gateway), as it reads Claude Code's Skill tool."""
    listing = ("- tidy-notes: Use when writing proof files.",)
    request = gatewaylog.SkillRequest(
        turn=0, tools=("exec_command",), listed=("tidy-notes",), loaded=(), request_bytes=10,
        thread="cli", side=False, root=True, listing=listing,
    )  # fmt: skip
    read = gatewaylog.ModelToolUse(
        uses=(gatewaylog.ToolUse(name="exec_command", skill="tidy-notes"),), thread="cli", side=False
    )
    other = gatewaylog.ModelToolUse(uses=(gatewaylog.ToolUse(name="exec_command"),), thread="cli", side=False)
    fired = installed.observe([request, read], skill="tidy-notes", arm="skill", delivery="installed")
    assert fired.use.invoked == "yes" and fired.use.tool_uses == ("exec_command:tidy-notes",)
    assert (
        installed.observe([request, other], skill="tidy-notes", arm="skill", delivery="installed").use.invoked == "no"
    )


# ------------------------------------------------------------------------------ execution.agent


def prereg_error(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_preregistration(tmp_path / "p.yaml", text)
    return info.value


def test_execution_agent_defaults_to_claude_code_and_codex_takes_its_own_model(tmp_path: Path) -> None:
    base = "skill: tidy\nskill_ref: skill\n"
    assert parse_preregistration(tmp_path / "p.yaml", base).execution.agent == "claude-code"
    codex_ab = parse_preregistration(tmp_path / "p.yaml", base + "execution: {agent: codex}\n").execution
    assert (codex_ab.agent, codex_ab.model) == ("codex", "gpt-6.2-sol")
    named = parse_preregistration(tmp_path / "p.yaml", base + "execution: {agent: codex, model: gpt-6-luna}\n")
    assert named.execution.model == "gpt-6-luna"
    installed_ab = base + "execution: {agent: codex, delivery: installed}\n"
    assert parse_preregistration(tmp_path / "p.yaml", installed_ab).execution.delivery == "installed"
    err = prereg_error(tmp_path, base + "execution: {agent: codex, model: sonnet}\n")
    assert err.field == "execution.model" and "Claude model" in str(err)
    err = prereg_error(tmp_path, base + "execution: {agent: aider}\n")
    assert err.field == "execution.agent"


def test_the_other_experiment_types_refuse_codex_by_name(tmp_path: Path) -> None:
    library = "skill: a\nlibrary: {path: skills}\nexecution: {agent: codex}\n"
    err = prereg_error(tmp_path, library)
    assert err.field == "execution.agent" and "a library experiment runs Claude Code only" in str(err)
    matrix = "skill: tidy\nskill_ref: skill\nexecution: {agent: codex, models: [gpt-6-luna, gpt-6-sol]}\n"
    err = prereg_error(tmp_path, matrix)
    assert err.field == "execution.agent" and "a model matrix" in str(err)


def test_the_reports_name_the_agent_that_ran() -> None:
    from harness.reporting import html as report_html
    from harness.reporting.markdown import markdown
    from tests import reportkit as kit

    claude_run = kit.make_input(kit.WIN)
    assert "· Claude Code `2.1.0` ·" in markdown(claude_run)  # records without an agent: Claude Code
    recs = [
        r.model_copy(
            update={"provenance": r.provenance.model_copy(update={"agent": "codex", "cli_version": "0.171.0"})}
        )
        for r in claude_run.records
    ]
    codex_run = kit.make_input(kit.WIN, recs=recs)
    assert "· Codex CLI `0.171.0` ·" in markdown(codex_run) and "Claude Code `" not in markdown(codex_run)
    assert "Codex CLI" in report_html.render(codex_run)


def test_codex_is_held_to_the_trials_budget_by_the_gateways_meter(make_rig: Callable[..., Rig]) -> None:
    """Codex has no budget of its own and the gateway's cap is the agent's and the judge's together: a Codex run
    the gateway metered above ``per_trial_usd`` is cut (budget_exceeded, not verified or judged), as a Claude
    Code run stopped by --max-budget-usd is."""

    def spender(spec: ContainerSpec, runtime: FakeRuntime) -> Outcome:
        gateway_log(runtime, spec, dataclasses.replace(forwarded(0.55), path="/v1/responses"))
        return codex_agent(spec, runtime)

    ex = Execution(agent="codex", judge_model="haiku", budgets=Budgets(timeout_s=600, per_trial_usd=0.5))
    rig = make_rig(agent=spender, execution=ex)
    site = dataclasses.replace(rig.ctx.site, profile=dataclasses.replace(rig.ctx.site.profile, codex_image="codex:t"))
    rig.ctx = dataclasses.replace(rig.ctx, site=site)
    rig.runtime.add_image("codex:t")
    rec = rig.run()
    assert rec.status == "budget_exceeded" and rec.judge is None
    assert any(f.startswith("agent_over_budget") for f in rec.flags), rec.flags
    # the control: the same trial metered at $0.02 completes (test_a_codex_trial_runs_the_codex_image_...)
