"""OpenAI's Codex CLI as the agent under test (issue 30): the second implementation of
:class:`~harness.trial.agents.base.Agent`.

Its command line, environment and ``--json`` events are :mod:`harness.trial.codex` (docs/agents.md has the
evidence); its gateway half is the Responses API with :mod:`harness.sidecars.responses_api` (the
``<skills_instructions>`` listing, a skill loaded by the model reading its ``SKILL.md``, the bundled skills
turned off on the command line). Both deliveries run the same command: the prompt delivery's prompt names
``/skill/SKILL.md``, the installed delivery mounts the skill at ``~/.agents/skills/<name>`` (outside the
workspace, so nothing is made inside it first).
"""

from __future__ import annotations

from harness.errors import HarnessError
from harness.records import AgentResult
from harness.sandbox import roles
from harness.trial import codex
from harness.trial.agents.base import Agent, AgentRun


class Codex(Agent):
    name = "codex"
    api = "responses"
    sandbox = "danger-full-access"
    """Its own sandbox (bubblewrap) cannot start in the hardened container (docs/agents.md, "Sandbox")."""
    approval = "never"
    own_budget = False

    def command(self, run: AgentRun) -> tuple[str, ...]:
        base_url = f"http://{run.gateway_ip}:{roles.GATEWAY_PORT}/v1"
        return codex.agent_command(run.prompt, model=run.model, base_url=base_url, timeout_s=run.timeout_s)

    def env(self, gateway_ip: str) -> dict[str, str]:
        return codex.codex_env()

    def image(self, profile: roles.Profile) -> str:
        if profile.codex_image is None:
            raise HarnessError("a Codex trial needs the Codex image (ImageBuilder.ensure_codex), and the run has none")
        return profile.codex_image

    def skill_target(self, skill: str) -> str:
        return f"{codex.SKILLS_DIR}/{skill}"

    def mountpoint(self, skill: str) -> tuple[str, ...]:
        return ()

    def parse_result(self, stdout: bytes, exit_code: int | None) -> AgentResult:
        return codex.parse_result(stdout, exit_code)

    def result_json(self, stdout: bytes) -> bytes:
        return stdout  # its events are its result: the transcript and agent.json hold the same lines

    def says_budget_exceeded(self, result: AgentResult) -> bool:
        return False  # no budget of its own: the gateway's is the only one
