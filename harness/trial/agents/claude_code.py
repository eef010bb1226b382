"""Claude Code as the agent under test: the first implementation of :class:`~harness.trial.agents.base.Agent`.

Its command lines are :mod:`harness.trial.claude` (``--bare``, the prompt delivery) and
:mod:`harness.trial.installed` (non-bare, the skill in ``.claude/skills``); its gateway half is the Messages
API with :mod:`harness.sidecars.skilltrace` (the ``Skill`` tool, the listing, the bundled skills).
"""

from __future__ import annotations

from harness.records import AgentResult
from harness.sandbox import roles
from harness.trial import claude, installed
from harness.trial.agents.base import Agent, AgentRun


class ClaudeCode(Agent):
    name = "claude-code"
    api = "messages"
    sandbox = "none"
    """Claude Code has no sandbox of its own in ``-p`` mode: ``--allowedTools`` bounds it, the container contains it."""
    approval = "allowedTools"
    own_budget = True

    def command(self, run: AgentRun) -> tuple[str, ...]:
        if run.delivery == "installed":
            return installed.agent_command(
                run.prompt,
                model=run.model,
                allowed_tools=run.allowed_tools,
                max_budget_usd=run.max_budget_usd,
                timeout_s=run.timeout_s,
            )
        return claude.agent_command(
            run.prompt,
            model=run.model,
            allowed_tools=run.allowed_tools,
            max_budget_usd=run.max_budget_usd,
            timeout_s=run.timeout_s,
        )

    def env(self, gateway_ip: str) -> dict[str, str]:
        return roles.claude_env(gateway_ip)

    def image(self, profile: roles.Profile) -> str:
        return profile.trial_image

    def skill_target(self, skill: str) -> str:
        return installed.skill_target(skill)

    def mountpoint(self, skill: str) -> tuple[str, ...]:
        return installed.mountpoint(skill)

    def parse_result(self, stdout: bytes, exit_code: int | None) -> AgentResult:
        return claude.parse_result(stdout, exit_code)

    def result_json(self, stdout: bytes) -> bytes:
        return claude.result_json(stdout)

    def says_budget_exceeded(self, result: AgentResult) -> bool:
        return claude.cli_says_budget_exceeded(result)
