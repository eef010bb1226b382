"""The installed delivery: the skill as users run it, and "did it fire?" from the gateway.

``execution.delivery: installed`` runs the Claude Code CLI *without* ``--bare`` in
the same hardened container as the prompt delivery (empty tmpfs HOME, telemetry,
auto-update and non-essential traffic off, the pinned model), with:

- ``--setting-sources project``: the narrowest source that still loads a project
  skill. Checked with the real CLI 2.1.332 in the trial image (offline, a local
  Messages API): with the skill at ``/workspace/.claude/skills/<name>/SKILL.md``,
  ``project`` lists it; ``user``, ``local`` and ``""`` (no source) do not (``user``
  reads only ``~/.claude/skills``, which is an empty tmpfs here); ``--add-dir``
  does not load skills without a source either. The bundled skills (8 in this
  build: dataviz, update-config, keybindings-help, code-review, simplify,
  fewer-permission-prompts, loop, claude-api) are listed whatever the source.
- ``--strict-mcp-config`` (no MCP server at all) and ``--settings
  {"disableAllHooks": true}`` (no hook of the repository runs);
- ``--allowedTools`` = the preregistered tools plus ``Skill``, in both arms.

The skill arm gets the controller-owned copy of the skill mounted read-only at
``/workspace/.claude/skills/<name>`` (its real name); the mount point is an empty
directory made by the controller before the agent starts, which git never
records, so the skill is never in the patch, and a write to it fails with EROFS.
The baseline runs in the same mode with the same tools and the same bundled
listing, only without that mount: the arms' first requests differ by exactly the
skill's listing line, which :func:`observe` checks from the gateway's log and
records as provenance.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import NamedTuple

from harness.records import Arm, SkillInvoked, SkillUse
from harness.sandbox.deadline import deadline_argv
from harness.sidecars.gatewaylog import GatewayEvent, ModelToolUse, SkillRequest

SETTING_SOURCES = "project"
SKILLS_DIR = "/workspace/.claude/skills"
NO_HOOKS = json.dumps({"disableAllHooks": True}, separators=(",", ":"))


def installed_options(allowed_tools: Sequence[str], max_turns: int | None = None) -> tuple[str, ...]:
    tools = [*allowed_tools, *(() if "Skill" in allowed_tools else ("Skill",))]
    options = (
        "--allowedTools",
        ",".join(tools),
        "--setting-sources",
        SETTING_SOURCES,
        "--strict-mcp-config",
        "--settings",
        NO_HOOKS,
    )
    return options + (("--max-turns", str(max_turns)) if max_turns else ())


def agent_command(
    prompt: str,
    *,
    model: str,
    allowed_tools: Sequence[str],
    max_budget_usd: float,
    timeout_s: int,
    max_turns: int | None = None,
    session_id: str | None = None,
) -> tuple[str, ...]:
    """``claude -p`` without ``--bare`` under the same in-container deadline as the prompt delivery.
    ``session_id`` (a UUID) pins the session id the CLI sends: trigger runs use one per (query, run),
    the same for every variant, so a seeded model can pair them."""
    common: tuple[str, ...] = ("--output-format", "json", "--model", model, "--max-budget-usd", f"{max_budget_usd:g}")
    if session_id:
        common += ("--session-id", session_id)
    return (
        *deadline_argv(timeout_s),
        "claude",
        "-p",
        prompt,
        *common,
        *installed_options(allowed_tools, max_turns),
        "--no-session-persistence",
    )


def prompt_template_sha256() -> str:
    """Both arms get the task's prompt unchanged; what differs from the prompt delivery is the mode."""
    return hashlib.sha256(f"installed\x00{' '.join(installed_options(()))}".encode()).hexdigest()


def skill_target(name: str) -> str:
    return f"{SKILLS_DIR}/{name}"


def mountpoint(name: str) -> tuple[str, ...]:
    """The skill's mount point in the workspace, part by part: ``.claude/skills/<name>``."""
    return (".claude", "skills", name)


# ---------------------------------------------------------------- what the gateway saw


def _requests(evts: Sequence[GatewayEvent]) -> list[SkillRequest]:
    return [e for e in evts if isinstance(e, SkillRequest)]


def _first(requests: Sequence[SkillRequest]) -> SkillRequest | None:
    """The CLI's first request (the root of its own thread): the listing the arms are compared on."""
    return next((r for r in requests if r.thread == "cli" and r.root), None)


def listing_text(evts: Sequence[GatewayEvent]) -> bytes | None:
    """The first request's skill listing, one ``- name: description`` line each (kept as an artifact:
    the listing is provenance; ``listing_sha256`` in the record is its hash without the skill's line)."""
    first = _first(_requests(evts))
    if first is not None and first.listing is not None:
        return "".join(f"{line}\n" for line in first.listing).encode()
    return None


def listing_sha256(lines: Sequence[str], skill: str) -> str:
    """The listing without the skill under test's own line: equal in both arms when nothing else differs."""
    rest = [line for line in lines if line[2:].split(":", 1)[0].strip() != skill]
    return hashlib.sha256("\n".join(rest).encode()).hexdigest()


class Observed(NamedTuple):
    """What the gateway's log says about the skill in one trial."""

    use: SkillUse
    provenance: dict[str, str | None]
    """Additions to the record's provenance: the delivery, its check, the listing's hash."""
    flags: list[str]


def observe(evts: Sequence[GatewayEvent], *, skill: str, arm: Arm, delivery: str) -> Observed:
    """The trial's :class:`SkillUse`, its provenance additions and flags, from the gateway's log.

    A trigger is a call the gateway names the skill on (Claude Code: a ``Skill`` tool_use naming it; Codex: a
    shell call reading its listed ``SKILL.md``) anywhere in the CLI's conversation (its
    subagents' and its compacted continuation included), not a mention in text, not the listing.
    Side requests (the gateway's attribution: the CLI did not send them) are counted and flagged and
    play no other part; nor does the agent's stdout."""
    all_requests = _requests(evts)
    requests = [r for r in all_requests if not r.side]
    responses = [e for e in evts if isinstance(e, ModelToolUse) and not e.side]
    flags: list[str] = []
    side = len(all_requests) - len(requests)
    if side:
        flags.append(
            f"side_requests: {side} request(s) through the gateway that the CLI did not send (metered; "
            "never counted as the skill firing)"
        )
    if any(r.forked for r in all_requests):
        flags.append("conversation_forked: a second request continued one of the model's answers (a side request)")
    calls = [u for r in responses for u in r.uses]
    uses = [f"{u.name}:{u.skill or ''}" if u.name == "Skill" or u.skill else u.name for u in calls]
    called = any(u.skill == skill for u in calls)  # Claude Code's Skill tool; Codex: a read of the listed SKILL.md
    sizes = tuple(r.request_bytes for r in requests)
    loaded = any(skill in r.loaded for r in requests)
    if delivery != "installed":
        invoked: SkillInvoked = "forced" if arm == "skill" else ("yes" if called else "no")
        return Observed(
            SkillUse(delivery=delivery, invoked=invoked, tool_uses=tuple(uses), loaded=loaded, request_bytes=sizes),
            {"delivery": delivery},
            flags,
        )
    first = _first(requests)
    if first is None:
        use = SkillUse(delivery=delivery, tool_uses=tuple(uses), reason="the gateway saw no request from the CLI")
        return Observed(use, {"delivery": delivery, "delivery_check": "could not measure: no request seen"}, flags)
    names = list(first.listed or ())
    lines = list(first.listing or ())
    listed = skill in names
    for r in requests:
        if r.listed is not None and list(r.listed) != names:
            flags.append("skill_listing_changed: a later request listed other skills than the first")
            break
    if arm == "baseline" and called:
        flags.append(f"baseline_invoked_skill: the baseline called the skill {skill!r}")
    reason = None
    if first.listed is None:
        reason = "no skill listing in the first request"
    check = "ok"
    if arm == "skill" and not listed:
        check = "the skill under test was not listed (invalid, not a miss)"
    elif arm == "baseline" and listed:
        check = "the baseline's listing names the skill under test"
    invoked = "yes" if called else "no"
    if arm == "skill" and not listed:
        invoked, reason = "could_not_measure", reason or "the skill under test was not listed in the first request"
    use = SkillUse(
        delivery=delivery,
        invoked=invoked,
        listed=listed,
        loaded=loaded,
        tool_uses=tuple(uses),
        listing=tuple(names),
        name=skill,
        reason=reason,
        request_bytes=sizes,
    )
    prov: dict[str, str | None] = {
        "delivery": delivery,
        "listing_sha256": listing_sha256(lines, skill),
        "delivery_check": check,
    }
    return Observed(use, prov, flags)
