"""The agents under test behind one seam (:mod:`.base`): Claude Code (:mod:`.claude_code`), the first, and
the Codex CLI (:mod:`.codex`). :func:`agent_for` is the only place that maps a preregistered name to one."""

from __future__ import annotations

from harness.trial.agents.base import JUDGE_AGENT, Agent, AgentName, AgentRun, Api
from harness.trial.agents.claude_code import ClaudeCode
from harness.trial.agents.codex import Codex

AGENTS: dict[str, Agent] = {agent.name: agent for agent in (ClaudeCode(), Codex())}


DEFAULT_AGENT: Agent = AGENTS["claude-code"]
"""``execution.agent``'s default."""


def agent_for(name: str) -> Agent:
    """The agent ``execution.agent`` names (the config has checked the name)."""
    return AGENTS[name]


__all__ = ["AGENTS", "DEFAULT_AGENT", "JUDGE_AGENT", "Agent", "AgentName", "AgentRun", "Api", "agent_for"]
