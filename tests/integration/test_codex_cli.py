"""The real, pinned Codex CLI in the hardened agent container against the scripted Responses API (issue 30).

No gateway yet (phase two wires it): the CLI's provider is the scripted API itself, on an isolated internal
network whose only other member it is. Each test runs one real ``codex exec`` session (docs/agents.md):
what the CLI ran comes from its ``--json`` events, what it sent from the scripted API's log.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from harness.sandbox import lifecycle, roles, volumes
from harness.sandbox.engine import Engine
from harness.sandbox.images import CodexImage, ImageBuilder, ImageSet
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import ContainerSpec, ExitInfo, Limits, VolumeMount
from harness.trial import codex

pytestmark = [pytest.mark.docker]

MODEL = "gpt-6.2-sol"
USAGE = {"input_tokens": 900, "output_tokens": 40, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 0}
MARKER = "CODEX-SKILL-MARKER-7f3a"
SKILL_MD = f"---\nname: tidy-notes\ndescription: Use when writing proof files.\n---\n\n# Tidy notes\n{MARKER}\n"


@pytest.fixture(scope="module")
def codex_image(engine: Engine, images: ImageSet) -> CodexImage:
    return ImageBuilder(engine).ensure_codex(images)


def scenario(steps: list[dict[str, Any]], **extra: Any) -> bytes:
    task = {
        "prompt": "Write the proof file.",
        "final_text": "Done.",
        "success": steps,
        "failure": [],
        "arms": {"baseline": {"p_success": 1.0}, "skill": {"p_success": 1.0}},
    }
    data = {"seed": 1, "skill": "tidy-notes", "skill_marker": MARKER, "defaults": {"usage": USAGE}, "judge": {}}
    return json.dumps({**data, "tasks": {"proof": task}, **extra}).encode()


@dataclass
class Session:
    exit: ExitInfo
    events: list[dict[str, Any]]
    api_log: list[dict[str, Any]]

    def commands(self) -> list[dict[str, Any]]:
        return [
            e["item"] for e in self.events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"
        ]

    def log(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.api_log if e.get("event") == event]


@pytest.fixture
def run_codex(engine: Engine, images: ImageSet, codex_image: CodexImage) -> Iterator[Any]:
    """Run one ``codex exec`` session: ``prompt``, the scenario's bytes, an optional SKILL.md mounted read-only
    at ``skill_at``, and ``edit`` to change the argv (a sandbox mode)."""
    made: list[tuple[str, str]] = []
    labels = make_labels(f"codex-{secrets.token_hex(3)}", role="test", ttl_s=900, purpose="test")

    def run(prompt: str, data: bytes, *, skill_at: str | None = None, sandbox: str | None = None) -> Session:
        name = f"hx-codex-{secrets.token_hex(4)}"
        engine.create_network(name, labels, internal=True)
        made.append(("network", name))
        volumes.make(engine, f"{name}-scen", roles.scenario_tar(data), image=images.sidecar, labels=labels)
        made.append(("volume", f"{name}-scen"))
        api = ContainerSpec(
            name=f"{name}-api",
            image=images.sidecar,
            command=("python3", "/opt/harness/scripted_api.py", "/etc/scripted/scenario.json", "8080"),
            labels=labels,
            user="65534:65534",
            volumes=(VolumeMount(f"{name}-scen", "/etc/scripted"),),
            network=name,
            limits=Limits(memory="256m", pids=64, tmpfs_size="16m"),
        )
        engine.create(api)
        made.append(("container", api.name))
        engine.start(api.name)
        ip = engine.container_ip(api.name, name)
        mounts: tuple[VolumeMount, ...] = ()
        if skill_at is not None:
            skill = volumes.tar_entries([volumes.Entry("SKILL.md", SKILL_MD.encode(), 0o444)])
            volumes.make(engine, f"{name}-skill", skill, image=images.sidecar, labels=labels)
            made.append(("volume", f"{name}-skill"))
            mounts = (VolumeMount(f"{name}-skill", skill_at),)
        argv = list(codex.agent_command(prompt, model=MODEL, base_url=f"http://{ip}:8080/v1", timeout_s=120))
        if sandbox is not None:
            argv[argv.index("danger-full-access")] = sandbox
        setup = 'cd /workspace && git init -q && git commit -q --allow-empty -m base && exec "$@"'
        agent = ContainerSpec(
            name=f"{name}-agent",
            image=codex_image.tag,
            command=("sh", "-c", setup, "sh", *argv),
            labels=labels,
            user="1000:1000",
            env={
                **codex.codex_env(),
                "GIT_AUTHOR_NAME": "a",
                "GIT_AUTHOR_EMAIL": "a@b",
                "GIT_COMMITTER_NAME": "a",
                "GIT_COMMITTER_EMAIL": "a@b",
            },
            volumes=mounts,
            network=name,
            limits=Limits(memory="1g", pids=256, tmpfs_size="256m"),
            tmpfs=("/tmp", "/home/agent", "/workspace"),
            workdir="/workspace",
            dns=(ip,),
        )
        exit = lifecycle.run(engine, agent, deadline_s=180)
        out, _ = engine.logs(api.name, cap=4 << 20)
        api_log = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
        return Session(exit, codex.events(exit.stdout), api_log)

    yield run
    for kind, name in reversed(made):
        if kind == "container":
            engine.remove_container(name)
        elif kind == "volume":
            engine.remove_volume(name)
        else:
            engine.remove_network(name)


def test_a_two_turn_session_with_one_shell_call(run_codex: Any) -> None:
    """The CLI sends the task, runs the scripted model's shell call in the container, sends its output back
    and ends on the model's answer: two requests, metered as scripted, the placeholder key on both."""
    s = run_codex(
        "Write the proof file.", scenario([{"tool": "Bash", "input": {"command": "echo proof > p && cat p"}}])
    )
    assert s.exit.exit_code == 0, s.exit.stderr.decode()[-2000:]
    (command,) = s.commands()
    assert command["exit_code"] == 0 and command["aggregated_output"] == "proof\n", command
    requests = s.log("request")
    assert [r["path"] for r in requests] == ["/v1/responses"] * 2
    placeholder = hashlib.sha256(codex.PLACEHOLDER_KEY.encode()).hexdigest()
    assert {r["key_sha256"] for r in requests} == {placeholder}
    assert [(r["turn"], r["stop"], r["model"]) for r in s.log("reply")] == [
        (0, "tool_use", MODEL),
        (1, "end_turn", MODEL),
    ]
    result = codex.parse_result(s.exit.stdout, s.exit.exit_code)
    assert result.result_excerpt == "Done." and result.is_error is False
    assert result.input_tokens == 2 * 1000 and result.output_tokens == 2 * 40  # the scripted usage, both turns


def test_the_skill_arm_reads_the_read_only_skill_and_the_model_sees_it(run_codex: Any) -> None:
    """Prompt delivery: the scripted model reads /skill/SKILL.md with the CLI's shell tool; the check that
    the file's marker came back passes, and fails for a prompt that names a file without it (control)."""
    steps = [{"tool": "Bash", "input": {"command": "echo ok > p"}}]
    s = run_codex("Write the proof file. First read /skill/SKILL.md.", scenario(steps), skill_at="/skill")
    assert s.exit.exit_code == 0, s.exit.stderr.decode()[-2000:]
    assert [e["ok"] for e in s.log("skill_read")] == [True]
    assert (
        s.commands()[0]["command"].endswith("cat -- /skill/SKILL.md'")
        and MARKER in s.commands()[0]["aggregated_output"]
    )
    control = run_codex("Write the proof file. First read /skill/SKILL.md.", scenario(steps))  # nothing mounted
    assert [e["ok"] for e in control.log("skill_read")] == [False]


def test_an_installed_skill_is_listed_and_loaded_by_reading_its_file(run_codex: Any) -> None:
    """Installed delivery: a skill in ~/.agents/skills is in the CLI's listing; the scripted model's Skill
    step is a read of the listed SKILL.md, and the load check sees the file come back."""
    extra = {"invocation": {"tidy-notes": {"p_default": 1.0, "marker": MARKER}}}
    steps = [{"tool": "Bash", "input": {"command": "echo ok > p"}}]
    s = run_codex("Write the proof file.", scenario(steps, **extra), skill_at=f"{codex.SKILLS_DIR}/tidy-notes")
    assert s.exit.exit_code == 0, s.exit.stderr.decode()[-2000:]
    assert [(e["skill"], e["invoke"]) for e in s.log("skill_decision")] == [("tidy-notes", True)]
    assert [(e["skill"], e["ok"], e["launched"]) for e in s.log("skill_loaded")] == [("tidy-notes", True, True)]
    read = s.commands()[0]
    assert f"{codex.SKILLS_DIR}/tidy-notes/SKILL.md" in read["command"] and MARKER in read["aggregated_output"]


def test_codex_own_sandbox_cannot_run_in_the_hardened_container(run_codex: Any) -> None:
    """Why the harness runs Codex with --sandbox danger-full-access: its own sandbox needs what the hardened
    container refuses, so every command fails under it (the same step succeeds without it: the first test)."""
    s = run_codex(
        "Write the proof file.",
        scenario([{"tool": "Bash", "input": {"command": "echo proof"}}]),
        sandbox="workspace-write",
    )
    assert s.exit.exit_code == 0, s.exit.stderr.decode()[-2000:]
    (command,) = s.commands()
    assert command["exit_code"] != 0 and "proof" not in command["aggregated_output"], command
    assert "bwrap: No permissions to create a new namespace" in command["aggregated_output"], command
