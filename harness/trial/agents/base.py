"""The agent seam: what the trial asks of the coding agent under test, in one small interface.

Everything that is one agent's own lives behind :class:`Agent`: its command line (both deliveries), its
environment, the image it runs in, where the installed delivery mounts a skill for it to find, how its
stdout is read (the result, the transcript's format, what of it is kept as ``agent.json``), whether it
said its own budget ran out, and what the record says about it (its name, version, sandbox and approval
mode). What the *gateway* sees of it (the API it speaks, its skill listing, how it loads a skill, its
bundled-skill noise) is the gateway's half, in :mod:`harness.sidecars` (``GATEWAY_APIS``): the trial only
names the API (:attr:`Agent.api`) and reads the API-neutral events of :mod:`harness.sidecars.gatewaylog`.

Nothing else in the trial path names a CLI. The judge is not an agent under test: it stays Claude Code
(:mod:`harness.trial.claude`), whatever the agent, and the record names it (``provenance.judge_agent``).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from harness.records import AgentResult
from harness.sandbox.roles import Profile

AgentName = Literal["claude-code", "codex"]
Api = Literal["messages", "responses"]

JUDGE_AGENT: AgentName = "claude-code"
"""The judge's CLI, whatever the agent under test (:mod:`harness.trial.judge`)."""


@dataclass(frozen=True, kw_only=True)
class AgentRun:
    """What the trial gives the agent's command line."""

    prompt: str
    model: str
    allowed_tools: Sequence[str]
    max_budget_usd: float
    timeout_s: int
    delivery: str
    """``prompt`` or ``installed`` (:attr:`harness.study.config.Execution.delivery`)."""
    gateway_ip: str


class Agent(abc.ABC):
    """One coding agent under test (see the module docstring)."""

    name: AgentName
    api: Api
    """The model API it speaks through the gateway: the gateway forwards it (and the judge's Messages API)."""
    sandbox: str
    """Its own sandbox mode inside our container (recorded; the container is the sandbox either way)."""
    approval: str
    """Its approval mode (recorded): headless, nothing waits for a person."""
    own_budget: bool
    """It stops itself at ``budgets.per_trial_usd`` (Claude Code's ``--max-budget-usd``). Without one, the trial
    holds it to that budget from the gateway's meter (:func:`harness.trial.trial.over_budget`)."""

    @abc.abstractmethod
    def command(self, run: AgentRun) -> tuple[str, ...]:
        """The container's argv, under the in-container deadline."""

    @abc.abstractmethod
    def env(self, gateway_ip: str) -> dict[str, str]:
        """The container's complete environment: nothing from the host, a placeholder key."""

    @abc.abstractmethod
    def image(self, profile: Profile) -> str:
        """The image it runs in."""

    @abc.abstractmethod
    def skill_target(self, skill: str) -> str:
        """Installed delivery: where the skill's read-only copy is mounted for the agent to find."""

    @abc.abstractmethod
    def mountpoint(self, skill: str) -> tuple[str, ...]:
        """Installed delivery: the mount point to make inside the workspace first, part by part (empty: the
        target is outside the workspace)."""

    @abc.abstractmethod
    def parse_result(self, stdout: bytes, exit_code: int | None) -> AgentResult:
        """What its stdout says (evidence, never the authority: the gateway's log is)."""

    @abc.abstractmethod
    def result_json(self, stdout: bytes) -> bytes:
        """What is kept as ``agent.json``: its result alone, else stdout as it is."""

    @abc.abstractmethod
    def says_budget_exceeded(self, result: AgentResult) -> bool:
        """Its own words that its budget ran out (an agent without a budget of its own: never)."""

    def gateway_env(self) -> dict[str, str]:
        """The gateway's setting that names the APIs it forwards (its half of the seam, in ``sidecars/``): the
        agent's, and the Messages API the judge speaks after the agent has exited."""
        apis = dict.fromkeys((self.api, "messages"))
        return {"GATEWAY_APIS": ",".join(apis)}

    def provenance(self) -> dict[str, str | None]:
        """What each record says about the agent beyond its CLI's version and image (run-wide), and the judge."""
        return {
            "agent": self.name,
            "agent_sandbox": self.sandbox,
            "agent_approval": self.approval,
            "judge_agent": JUDGE_AGENT,
        }
