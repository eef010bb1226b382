"""Scripted Messages API: a model server that speaks enough of the Anthropic
Messages API (SSE streaming) for the real Claude Code CLI to run its tool loop.

It runs *inside a container* (stdlib only, no harness imports) and is driven by
a compiled scenario (JSON, produced and validated by ``harness.scenario``):

- per task and arm, the tool calls to make on success and on failure, and a
  seeded chance of success; the k-th conversation of a (task, arm) pair draws
  its outcome from ``Random(f"{seed}:{task}:{arm}:{k}")`` so a run's outcome
  counts do not depend on the order in which concurrent trials arrive;
- token usage per turn (the CLI computes ``total_cost_usd`` from it, so cost is
  exact), latency, injected API errors and broken streams;
- judge behaviour: follow the verify exit code, a fixed verdict, or never call
  ``StructuredOutput`` (the harness must record ``unknown``);
- probes, for the security tests' hostile agents: a step with ``"probe": NAME``
  has its tool result (what the real CLI sent back after running the command in
  the sandbox) logged as a ``probe`` event, capped; a later step's input may
  contain ``{{probe:NAME}}``, replaced by that output (waiting for it up to
  ``probe_wait_s``), so one trial's agent can be aimed at what another trial's
  agent reported (its address, for example).

Every notable observation (skill file read or not, request headers seen, judge
verdict given) is printed as one JSON line on stdout: the container log is the
server's audit trail that tests read.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import socket
import ssl
import struct
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:  # in the sidecar image: a sibling file in /opt/harness
    import scripted_responses  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # imported as harness.sidecars.scripted_api
    from harness.sidecars import scripted_responses

SKILL_PATH = "/skill/SKILL.md"
VERIFY_LINE = re.compile(r"VERIFY_EXIT_CODE:\s*(-?\d+|none)")
PROBE_REF = re.compile(r"\{\{probe:([A-Za-z0-9_.-]+)\}\}")
PROBE_CAP = 65536


def log(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}, sort_keys=True) + "\n")
    sys.stdout.flush()


class Scenario:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.seed = str(data.get("seed", 0))
        self.tasks: dict[str, dict[str, Any]] = data.get("tasks", {})
        self.judge: dict[str, Any] = data.get("judge", {})
        self.defaults: dict[str, Any] = data.get("defaults", {})
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}
        self._sessions: dict[str, dict[str, Any]] = {}
        self._error_counts: dict[str, int] = {}
        self._probes: dict[str, str] = {}
        self._probe_cond = threading.Condition(self._lock)
        self.probe_wait_s = float(data.get("probe_wait_s", 60))

    # -- probes ---------------------------------------------------------------
    def record_probe(self, name: str, output: str) -> None:
        with self._probe_cond:
            self._probes[name] = output
            self._probe_cond.notify_all()

    def probe_value(self, name: str) -> str | None:
        deadline = time.monotonic() + self.probe_wait_s
        with self._probe_cond:
            while name not in self._probes:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._probe_cond.wait(left)
            return self._probes[name]

    # -- conversation identity ---------------------------------------------
    def find_task(self, prompt: str) -> tuple[str, dict[str, Any]] | None:
        best: tuple[str, dict[str, Any]] | None = None
        for task_id, task in self.tasks.items():
            needle = task.get("prompt", "")
            if needle and needle in prompt and (best is None or len(needle) > len(best[1]["prompt"])):
                best = (task_id, task)
        return best

    def session_state(self, session: str, task_id: str, arm: str, kind: str, shared: bool = False) -> dict[str, Any]:
        """``shared``: the k-th conversation of every arm of a task draws the same number (library runs)."""
        with self._lock:
            state = self._sessions.get(session)
            if state is None:
                key = f"{kind}:{task_id}:{arm}"
                k = self._counters.get(key, 0)
                self._counters[key] = k + 1
                rng = random.Random(f"{self.seed}:{task_id}:{'pair' if shared else arm}:{k}")
                state = {"draw": rng.random(), "index": k, "skill_read": None}
                self._sessions[session] = state
            return state

    def take_error(self, key: str, limit: int) -> bool:
        with self._lock:
            used = self._error_counts.get(key, 0)
            if used >= limit:
                return False
            self._error_counts[key] = used + 1
            return True


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_result":
                parts.append(text_of(block.get("content", "")))
    return "\n".join(parts)


def first_user_text(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def last_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool results sent back since the model's last turn (without --bare the CLI may append a
    system message, e.g. the --max-budget-usd reminder, after the user message that carries them)."""
    out: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") == "assistant":
            break
        content = message.get("content")
        if isinstance(content, list):
            out[:0] = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return out


def session_id(body: dict[str, Any], prompt: str) -> str:
    try:
        meta = json.loads(body.get("metadata", {}).get("user_id", "{}"))
        sid = meta.get("session_id")
        if sid:
            return str(sid)
    except (TypeError, ValueError):
        pass
    return hashlib.sha256(prompt.encode()).hexdigest()


class Reply:
    """One assistant message: content blocks, stop reason and usage."""

    def __init__(self, blocks: list[dict[str, Any]], stop: str, usage: dict[str, int]) -> None:
        self.blocks = blocks
        self.stop = stop
        self.usage = usage


def tool_block(step: dict[str, Any], n: int) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": f"toolu_{uuid.uuid4().hex[:20]}_{n}",
        "name": step["tool"],
        "input": step.get("input", {}),
    }


def substitute(sc: Scenario, value: Any) -> Any:
    """Replace ``{{probe:NAME}}`` in every string of a step's input by that probe's output."""
    if isinstance(value, str):

        def one(m: re.Match[str]) -> str:
            got = sc.probe_value(m.group(1))
            if got is None:
                log("probe_missing", name=m.group(1))
                return ""
            return got.strip()

        return PROBE_REF.sub(one, value)
    if isinstance(value, dict):
        return {k: substitute(sc, v) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(sc, v) for v in value]
    return value


def log_probe(sc: Scenario, step: dict[str, Any], messages: list[dict[str, Any]], info: dict[str, Any]) -> None:
    """The tool result of a probe step, as the CLI sent it back: the sandbox's answer."""
    results = last_tool_results(messages)
    output = "\n".join(text_of(r.get("content")) for r in results)
    is_error = any(bool(r.get("is_error")) for r in results)
    name = str(step["probe"])
    sc.record_probe(name, output)
    log(
        "probe",
        name=name,
        task=info.get("task"),
        arm=info.get("arm"),
        index=info.get("index"),
        is_error=is_error,
        output=output[:PROBE_CAP],
        truncated=len(output) > PROBE_CAP,
    )


# ------------------------------------------------------------- the non-bare CLI's subagents and compaction

COMPACTED = re.compile(r"\[scripted compaction at turn (\d+) after ([A-Za-z0-9_-]*)\]")


def _answer_ids(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return [str(b.get("id")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]


def conversation_turn(messages: list[dict[str, Any]], prompt: str) -> int:
    """The script's turn: the model's answers so far. After a compaction: the turn the summary names,
    plus the answers after the last one before it (the CLI keeps a few recent messages verbatim)."""
    answers = [m for m in messages if m.get("role") == "assistant"]
    marks = COMPACTED.findall(prompt)
    if not marks:
        return len(answers)
    turn, last = int(marks[-1][0]), marks[-1][1]
    carried = next((i + 1 for i, m in reversed(list(enumerate(answers))) if last and last in _answer_ids(m)), 0)
    return turn + len(answers) - carried


def is_compaction(messages: list[dict[str, Any]]) -> bool:
    """The CLI's summary request: its last user message asks for an ``<analysis>`` and a ``<summary>``."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    text = text_of(last.get("content")) if last else ""
    return "<analysis>" in text and "<summary>" in text


def compaction_reply(sc: Scenario, body: dict[str, Any], prompt: str) -> tuple[Reply, dict[str, Any]]:
    """Summarise: the summary carries the conversation's first message (so the compacted conversation is
    still recognised as the task's) and the turn the script goes on from."""
    messages = body.get("messages", [])
    turn = conversation_turn(messages, prompt)
    found = sc.find_task(prompt)
    original = COMPACTED.sub("", prompt).strip()
    ids = [i for m in messages if m.get("role") == "assistant" for i in _answer_ids(m)]
    mark = f"[scripted compaction at turn {turn} after {ids[-1] if ids else ''}]"
    text = f"<analysis>scripted</analysis>\n<summary>{mark}\n{original}</summary>"
    usage = dict(sc.defaults.get("usage", {"input_tokens": 1000, "output_tokens": 50}))
    info = {"task": None, "compaction": found[0] if found else None, "turn": turn}
    log("compaction", task=info["compaction"], turn=turn)
    return Reply([{"type": "text", "text": text}], "end_turn", usage), info


def find_subagent(sc: Scenario, prompt: str) -> tuple[str, dict[str, Any]] | None:
    """The ``Agent`` step whose prompt opens this conversation (the CLI puts it in the first user message)."""
    for task_id, task in sc.tasks.items():
        scripts = [task.get("success", []), task.get("failure", [])]
        scripts += [arm.get("prelude", []) for arm in task.get("arms", {}).values()]
        for steps in scripts:
            for step in steps:
                wanted = str(step.get("input", {}).get("prompt", "")).strip() if step.get("tool") == "Agent" else ""
                if wanted and wanted in prompt:
                    return task_id, step
    return None


def subagent_reply(
    sc: Scenario, body: dict[str, Any], task_id: str, agent_step: dict[str, Any]
) -> tuple[Reply, dict[str, Any]]:
    messages = body.get("messages", [])
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    steps: list[dict[str, Any]] = list(agent_step.get("subagent", []))
    usage = dict(sc.defaults.get("usage", {"input_tokens": 1000, "output_tokens": 50}))
    info = {"task": task_id, "arm": "subagent", "turn": turn}
    if 0 < turn <= len(steps) and steps[turn - 1].get("probe"):
        log_probe(sc, steps[turn - 1], messages, info)
    if turn < len(steps):
        step = dict(steps[turn], input=substitute(sc, steps[turn].get("input", {})))
        return Reply([tool_block(step, turn)], "tool_use", dict(step.get("usage") or usage)), info
    return Reply([{"type": "text", "text": "Subagent done."}], "end_turn", usage), info


def agent_reply(sc: Scenario, body: dict[str, Any]) -> tuple[Reply, dict[str, Any]]:
    messages = body.get("messages", [])
    prompt = first_user_text(messages)
    if is_compaction(messages):
        return compaction_reply(sc, body, prompt)
    subagent = find_subagent(sc, prompt)
    if subagent is not None:
        return subagent_reply(sc, body, *subagent)
    found = sc.find_task(prompt)
    arm = "skill" if SKILL_PATH in prompt else "baseline"
    listing = skill_listing(body)
    if listing is not None and sc.data.get("skill") in listing:
        arm = "skill"  # installed delivery: the skill arm is the one whose listing names the skill
    if found is None and listing is not None:
        return trigger_reply(sc, body, prompt, listing)
    if found is None:
        usage = dict(sc.defaults.get("usage", {"input_tokens": 1000, "output_tokens": 50}))
        return Reply([{"type": "text", "text": "No scripted task matches this prompt."}], "end_turn", usage), {
            "task": None,
            "arm": arm,
        }
    task_id, task = found
    if sc.data.get("library") is not None:
        return library_reply(sc, body, prompt, task_id, task)
    arm_cfg: dict[str, Any] = task.get("arms", {}).get(arm, {})
    usage = dict(arm_cfg.get("usage") or sc.defaults.get("usage") or {"input_tokens": 1000, "output_tokens": 50})
    state = sc.session_state(session_id(body, prompt), task_id, arm, "agent")
    success = state["draw"] < float(arm_cfg.get("p_success", 0.5))

    steps: list[dict[str, Any]] = []
    read_skill = arm == "skill" and listing is None and bool(arm_cfg.get("read_skill", True))
    if read_skill:
        steps.append({"tool": "Read", "input": {"file_path": SKILL_PATH}, "check_skill": True})
    if listing is not None and arm == "skill":
        invoked = installed_invoke(sc, state, messages, prompt, listing, task_id)
        if invoked:
            steps.append({"tool": "Skill", "input": {"skill": sc.data["skill"]}})
            success = success and state["skill_read"] is not False
        else:  # the skill never fired: the model works as it does without it
            base_cfg = task.get("arms", {}).get("baseline", {})
            success = state["draw"] < float(base_cfg.get("p_success", arm_cfg.get("p_success", 0.5)))
    steps.extend(arm_cfg.get("prelude", []))
    turn = conversation_turn(messages, prompt)

    # The turn after the skill read: check what the CLI actually sent back.
    if read_skill and turn == 1 and state["skill_read"] is None:
        results = last_tool_results(messages)
        seen = "\n".join(text_of(r.get("content")) for r in results)
        marker = str(task.get("skill_marker") or sc.data.get("skill_marker") or "")
        state["skill_read"] = bool(marker) and marker in seen
        log("skill_read", task=task_id, arm=arm, ok=state["skill_read"], index=state["index"])
    if read_skill and state["skill_read"] is False:
        success = False

    script = task.get("success" if success else "failure", [])
    steps.extend(script)
    info = {"task": task_id, "arm": arm, "turn": turn, "success": success, "index": state["index"]}
    if 0 < turn <= len(steps) and steps[turn - 1].get("probe"):
        log_probe(sc, steps[turn - 1], messages, info)
    if turn < len(steps):
        step = dict(steps[turn], input=substitute(sc, steps[turn].get("input", {})))
        blocks: list[dict[str, Any]] = []
        if step.get("say"):
            blocks.append({"type": "text", "text": str(step["say"])})
        blocks.append(tool_block(step, turn))
        return Reply(blocks, "tool_use", dict(step.get("usage") or usage)), info
    final = str(task.get("final_text", "Done."))
    if read_skill:
        # what the scripted model saw of the skill file, visible in the CLI's result text
        final += f" [skill file read: {'yes' if state['skill_read'] else 'no'}]"
    return Reply([{"type": "text", "text": final}], "end_turn", usage), info


LIBRARY_SKILL = re.compile(r"/skills/([A-Za-z0-9][A-Za-z0-9._-]*)/SKILL\.md")
LIBRARY_TAIL = "Do not ask questions: when something is unclear"


def library_reply(
    sc: Scenario, body: dict[str, Any], prompt: str, task_id: str, task: dict[str, Any]
) -> tuple[Reply, dict[str, Any]]:
    """A library experiment's bare or masked trial: the masked one reads each named skill (one turn each),
    and its success probability and tokens per turn are the baseline's plus the named skills' effects."""
    messages = body.get("messages", [])
    names = sorted(set(LIBRARY_SKILL.findall(prompt)))
    arm = "masked" if names or LIBRARY_TAIL in prompt else "baseline"
    base: dict[str, Any] = task.get("arms", {}).get("baseline", {})
    effects: dict[str, Any] = (sc.data.get("library") or {}).get("skills", {})
    p = float(base.get("p_success", 0.5))
    usage = dict(base.get("usage") or sc.defaults.get("usage") or {"input_tokens": 1000, "output_tokens": 50})
    for name in names:
        e = effects.get(name, {})
        p += float(e.get("p_effect", 0.0))
        for k in ("input_tokens", "output_tokens"):
            usage[k] = max(0, int(usage.get(k, 0)) + int(e.get(k, 0)))
    p = min(1.0, max(0.0, p))
    state = sc.session_state(session_id(body, prompt), task_id, arm, "agent", shared=True)
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    checks: dict[str, bool] = state.setdefault("skills_ok", {})
    if 1 <= turn <= len(names) and names[turn - 1] not in checks:
        seen = "\n".join(text_of(r.get("content")) for r in last_tool_results(messages))
        marker = str(effects.get(names[turn - 1], {}).get("marker", ""))
        checks[names[turn - 1]] = marker in seen
        log(
            "skill_read", task=task_id, arm=arm, skill=names[turn - 1], ok=checks[names[turn - 1]], index=state["index"]
        )
    success = state["draw"] < p and all(checks.get(n, False) for n in names[: max(0, turn)])
    steps: list[dict[str, Any]] = [{"tool": "Read", "input": {"file_path": f"/skills/{n}/SKILL.md"}} for n in names]
    if turn >= len(names):
        steps.extend(task.get("success" if success else "failure", []))
    info = {"task": task_id, "arm": arm, "turn": turn, "success": success, "index": state["index"], "skills": names}
    if turn < len(steps):
        step = steps[turn]
        return Reply([tool_block(step, turn)], "tool_use", usage), info
    final = str(task.get("final_text", "Done."))
    if names:
        final += f" [skills read: {', '.join(n for n in names if checks.get(n))}]"
    return Reply([{"type": "text", "text": final}], "end_turn", usage), info


# ------------------------------------------------------------- installed delivery: the Skill tool

LISTING_HEADER = "The following skills are available for use with the Skill tool:"
LAUNCH_PREFIX = "Launching skill:"


def skill_listing(body: dict[str, Any]) -> dict[str, str] | None:
    """Skill name -> description from the CLI's skill listing (None: no listing, e.g. ``--bare``)."""
    for message in body.get("messages", []):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for block in blocks:
            text = block.get("text", "") if isinstance(block, dict) else ""
            if isinstance(text, str) and LISTING_HEADER in text:
                out: dict[str, str] = {}
                for line in text.split(LISTING_HEADER, 1)[1].lstrip("\n").split("\n"):
                    if not line.startswith("- "):
                        break
                    name, _, desc = line[2:].partition(":")
                    out[name.strip()] = desc.strip()
                return out
    return None


def invoke_probability(sc: Scenario, skill: str, query: str, description: str) -> float:
    """The scenario's chance that the model calls ``Skill`` on ``skill`` for ``query``: the first rule
    whose keywords match the query and the listed description, else ``p_default``."""
    cfg = (sc.data.get("invocation") or {}).get(skill) or {}
    q, d = query.lower(), description.lower()
    for rule in cfg.get("rules", []):
        q_ok = not rule.get("query_any") or any(k.lower() in q for k in rule["query_any"])
        d_ok = not rule.get("description_any") or any(k.lower() in d for k in rule["description_any"])
        if q_ok and d_ok:
            return float(rule.get("p", 0.0))
    return float(cfg.get("p_default", 1.0 if not cfg else 0.0))


def check_skill_load(sc: Scenario, messages: list[dict[str, Any]], skill: str, info: dict[str, Any]) -> bool:
    """After the model's Skill call: did the real CLI send back the launch and the skill's body?"""
    tail: list[dict[str, Any]] = []  # since the model's last turn (the CLI may append a system message)
    for message in reversed(messages):
        if message.get("role") == "assistant":
            break
        content = message.get("content")
        tail[:0] = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    results = [b for b in tail if b.get("type") == "tool_result"]
    launched = any(text_of(r.get("content")).startswith(f"{LAUNCH_PREFIX} {skill}") for r in results)
    seen = text_of(tail)
    marker = str(
        ((sc.data.get("invocation") or {}).get(skill) or {}).get("marker") or sc.data.get("skill_marker") or ""
    )
    ok = launched and bool(marker) and marker in seen
    log("skill_loaded", skill=skill, ok=ok, launched=launched, **info)
    return ok


def installed_invoke(
    sc: Scenario,
    state: dict[str, Any],
    messages: list[dict[str, Any]],
    prompt: str,
    listing: dict[str, str],
    task_id: str,
) -> bool:
    """A/B trial, installed delivery: the seeded decision to call Skill (made once per conversation)."""
    skill = str(sc.data["skill"])
    if "invoke" not in state:
        p = invoke_probability(sc, skill, prompt, listing.get(skill, ""))
        state["invoke"] = random.Random(f"{sc.seed}:{task_id}:invoke:{state['index']}").random() < p
        log("skill_decision", task=task_id, skill=skill, invoke=state["invoke"], p=p, index=state["index"])
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if state["invoke"] and turn == 1 and state["skill_read"] is None:
        state["skill_read"] = check_skill_load(sc, messages, skill, {"task": task_id, "index": state["index"]})
    return bool(state["invoke"])


def trigger_reply(
    sc: Scenario, body: dict[str, Any], prompt: str, listing: dict[str, str]
) -> tuple[Reply, dict[str, Any]]:
    """A trigger run (no task: the prompt is a query): call Skill or answer, with a seeded chance
    that depends on the query and the listed description. A run draws ``Random(seed:query:session)``
    whatever the description, and the harness gives run r of a query the same session id in every
    variant, so two descriptions are compared on the same draws (paired)."""
    messages = body.get("messages", [])
    skill = str(sc.data.get("skill") or "")
    usage = dict(sc.defaults.get("usage") or {"input_tokens": 1000, "output_tokens": 50})
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    qhash = hashlib.sha256(prompt.encode()).hexdigest()[:12]
    description = listing.get(skill, "")
    dhash = hashlib.sha256(description.encode()).hexdigest()[:12]
    sid = session_id(body, prompt)  # the harness pins it per (query, run), the same for every description
    state = sc.session_state(f"{sid}:{dhash}", f"trigger:{qhash}:{dhash}", "query", "trigger")
    info = {"query": qhash, "description": dhash, "index": state["index"], "turn": turn}
    if "invoke" not in state:
        p = invoke_probability(sc, skill, prompt, description) if skill in listing else 0.0
        state["invoke"] = random.Random(f"{sc.seed}:trigger:{qhash}:{sid}").random() < p
        log("skill_decision", skill=skill, invoke=state["invoke"], p=p, **info)
    if state["invoke"] and turn == 0:
        return Reply([tool_block({"tool": "Skill", "input": {"skill": skill}}, 0)], "tool_use", usage), info
    if state["invoke"] and turn == 1:
        check_skill_load(sc, messages, skill, info)
    return Reply([{"type": "text", "text": "Answered without a skill."}], "end_turn", usage), info


def judge_reply(sc: Scenario, body: dict[str, Any]) -> tuple[Reply, dict[str, Any]]:
    messages = body.get("messages", [])
    prompt = first_user_text(messages)
    cfg = sc.judge
    usage = dict(cfg.get("usage") or {"input_tokens": 800, "output_tokens": 60})
    # After StructuredOutput was called, the CLI sends its tool_result: finish.
    for result in last_tool_results(messages):
        if result.get("type") == "tool_result":
            return Reply([{"type": "text", "text": "Verdict recorded."}], "end_turn", usage), {"judge": "done"}
    found = sc.find_task(prompt)
    task_id = found[0] if found else "unknown"
    task_judge = (found[1].get("judge") if found else None) or {}
    mode = str(task_judge.get("mode") or cfg.get("mode", "follow_verify"))
    match = VERIFY_LINE.search(prompt)
    code = match.group(1) if match else "none"
    state = sc.session_state(session_id(body, prompt), task_id, "judge", "judge")
    p_unknown = float(task_judge.get("p_unknown", cfg.get("p_unknown", 0.0)))
    if mode == "no_structured_output" or state["draw"] < p_unknown:
        log("judge", task=task_id, verdict="none", verify=code)
        return Reply([{"type": "text", "text": "I would rather not decide."}], "end_turn", usage), {"judge": "none"}
    if mode == "pass":
        verdict = "pass"
    elif mode == "fail":
        verdict = "fail"
    else:
        verdict = "pass" if code == "0" else "fail"
    reason = f"scripted judge ({mode}); verify exit code {code}"
    log("judge", task=task_id, verdict=verdict, verify=code)
    step = {"tool": "StructuredOutput", "input": {"verdict": verdict, "reason": reason}}
    return Reply([tool_block(step, 0)], "tool_use", usage), {"judge": verdict}


class Handler(BaseHTTPRequestHandler):
    server_version = "scripted-messages-api/1"
    protocol_version = "HTTP/1.1"
    scenario: Scenario

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send_json(self, status: int, payload: dict[str, Any], retry_after: Any = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        if retry_after is not None:
            self.send_header("retry-after", str(retry_after))
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        if self.path.startswith("/api/hello") or self.path.startswith("/health"):
            self._send_json(200, {"ok": True})
            return
        log("unknown_path", method="GET", path=self.path)
        self._send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        key = self.headers.get("x-api-key") or ""
        if path == "/v1/responses":  # the Responses API (Codex) sends its key as a bearer token
            key = (self.headers.get("authorization") or "").removeprefix("Bearer ").strip()
        log(
            "request",
            path=path,
            key_sha256=hashlib.sha256(key.encode()).hexdigest() if key else None,
            has_authorization=self.headers.get("authorization") is not None,
            anthropic_version=self.headers.get("anthropic-version"),
        )
        if not key_accepted(key):
            log("unauthorized", path=path)
            self._send_json(401, {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send_json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad json"}})
            return
        if path == "/v1/messages/count_tokens":
            self._send_json(200, {"input_tokens": 1000})
            return
        if path == "/v1/responses":
            self.handle_responses(body)
            return
        if path != "/v1/messages":
            log("unknown_path", method="POST", path=path)
            self._send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not found"}})
            return
        self.handle_messages(body)

    def handle_messages(self, body: dict[str, Any]) -> None:
        sc = self.scenario
        tools = [t.get("name") for t in body.get("tools", []) if isinstance(t, dict)]
        is_judge = "StructuredOutput" in tools
        reply, info = judge_reply(sc, body) if is_judge else agent_reply(sc, body)
        model = str(body.get("model", "unknown"))
        if not is_judge and info.get("task"):
            task = sc.tasks[info["task"]]
            arm_cfg = task.get("arms", {}).get(info["arm"], {})
            latency = float(arm_cfg.get("latency_ms", sc.defaults.get("latency_ms", 0)))
            for err in arm_cfg.get("errors", []):
                if int(err.get("at_turn", 0)) == info.get("turn") and error_applies(sc, err, info):
                    log("injected_error", task=info["task"], arm=info["arm"], status=err.get("status"))
                    if err.get("status") in ("broken_stream", "reset"):
                        self.stream(reply, model, broken=True, reset=err.get("status") == "reset")
                        return
                    status = int(err.get("status", 529))
                    kind = "overloaded_error" if status == 529 else "rate_limit_error" if status == 429 else "api_error"
                    self._send_json(
                        status,
                        {"type": "error", "error": {"type": kind, "message": "scripted error"}},
                        retry_after=err.get("retry_after_s"),
                    )
                    return
        else:
            latency = float(sc.judge.get("latency_ms", sc.defaults.get("latency_ms", 0)))
        if latency > 0:
            time.sleep(latency / 1000.0)
        log("reply", model=model, stop=reply.stop, **{k: v for k, v in info.items() if k != "success"})
        if body.get("stream"):
            self.stream(reply, model)
        else:
            self._send_json(200, message_json(reply, model))

    def handle_responses(self, body: dict[str, Any]) -> None:
        """``POST /v1/responses`` (the Codex CLI, an agent: the judge stays on the Messages API): the same
        scenario logic on the request's Messages view, answered in the Responses API's stream."""
        sc = self.scenario
        view, listing = scripted_responses.messages_view(body, LISTING_HEADER)
        reply, info = agent_reply(sc, view)
        model = str(body.get("model", "unknown"))
        if info.get("task"):
            arm_cfg = sc.tasks[info["task"]].get("arms", {}).get(info.get("arm"), {})
            latency = float(arm_cfg.get("latency_ms", sc.defaults.get("latency_ms", 0)))
            for err in arm_cfg.get("errors", []):
                if int(err.get("at_turn", 0)) == info.get("turn") and error_applies(sc, err, info):
                    log(
                        "injected_error",
                        task=info["task"],
                        arm=info.get("arm"),
                        status=err.get("status"),
                        api="responses",
                    )
                    if err.get("status") in ("broken_stream", "reset"):
                        self._start_stream()
                        for chunk in scripted_responses.sse_events(reply, model, listing, broken=True):
                            self.wfile.write(chunk)
                            self.wfile.flush()
                        return
                    status = int(err.get("status", 529))
                    self._send_json(status, scripted_responses.error_body(status), retry_after=err.get("retry_after_s"))
                    return
        else:
            latency = float(sc.defaults.get("latency_ms", 0))
        if latency > 0:
            time.sleep(latency / 1000.0)
        log("reply", model=model, stop=reply.stop, api="responses", **{k: v for k, v in info.items() if k != "success"})
        if body.get("stream"):
            self._start_stream()
            for chunk in scripted_responses.sse_events(reply, model, listing):
                self.wfile.write(chunk)
                self.wfile.flush()
        else:
            self._send_json(200, scripted_responses.response_json(reply, model, listing, "completed"))

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def stream(self, reply: Reply, model: str, broken: bool = False, reset: bool = False) -> None:
        self._start_stream()
        message = message_json(reply, model)
        start = dict(message, content=[], stop_reason=None, usage=dict(message["usage"], output_tokens=1))

        def event(name: str, data: dict[str, Any]) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        event("message_start", {"type": "message_start", "message": start})
        if broken:
            self.wfile.write(b'event: content_block_start\ndata: {"type": "content_bl')
            self.wfile.flush()
            if reset:  # a TCP reset mid-stream, as a load balancer dropping the connection produces
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            return
        for i, block in enumerate(reply.blocks):
            if block["type"] == "text":
                event(
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                )
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                event("content_block_start", {"type": "content_block_start", "index": i, "content_block": opening})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
            event("content_block_stop", {"type": "content_block_stop", "index": i})
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop, "stop_sequence": None},
                "usage": {"output_tokens": reply.usage.get("output_tokens", 0)},
            },
        )
        event("message_stop", {"type": "message_stop"})


def message_json(reply: Reply, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": reply.blocks,
        "stop_reason": reply.stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": int(reply.usage.get("input_tokens", 0)),
            "output_tokens": int(reply.usage.get("output_tokens", 0)),
            "cache_creation_input_tokens": int(reply.usage.get("cache_creation_input_tokens", 0)),
            "cache_read_input_tokens": int(reply.usage.get("cache_read_input_tokens", 0)),
        },
    }


def error_applies(sc: Scenario, err: dict[str, Any], info: dict[str, Any]) -> bool:
    """``conversations: N``: every request (the CLI's retries included) of the first N conversations
    of this task and arm; else the next ``times`` requests."""
    if err.get("conversations") is not None:
        return int(info.get("index", 0)) < int(err["conversations"])
    key = f"{info['task']}:{info['arm']}:{err.get('at_turn')}:{err.get('status')}"
    return sc.take_error(key, int(err.get("times", 1)))


REQUIRED_KEY_SHA256 = os.environ.get("SCRIPTED_REQUIRE_KEY_SHA256", "")


def key_accepted(key: str) -> bool:
    """With SCRIPTED_REQUIRE_KEY_SHA256 set (a stand-in for the real API in real-mode tests), only
    the key with that SHA-256 is answered; otherwise every key is (the scripted key is fake)."""
    return not REQUIRED_KEY_SHA256 or hashlib.sha256(key.encode()).hexdigest() == REQUIRED_KEY_SHA256


def serve_tls(server: ThreadingHTTPServer) -> None:
    """With SCRIPTED_TLS_CERT and SCRIPTED_TLS_KEY set, serve HTTPS (a stand-in for the real API)."""
    cert, key = os.environ.get("SCRIPTED_TLS_CERT"), os.environ.get("SCRIPTED_TLS_KEY")
    if cert and key:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)


def main(argv: list[str]) -> int:
    scenario_path = argv[1] if len(argv) > 1 else "/etc/scripted/scenario.json"
    port = int(argv[2]) if len(argv) > 2 else 8080
    with open(scenario_path, encoding="utf-8") as fh:
        Handler.scenario = Scenario(json.load(fh))
    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.daemon_threads = True
    serve_tls(server)
    log("listening", port=port)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
