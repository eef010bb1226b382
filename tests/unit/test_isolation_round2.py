"""Issue 14, the pure and filesystem-only parts: hard links and non-plain skill files, a
symlinked skill_ref, the skill copied once and checked, shelving a link, the gateway's
content allow-list and the choice of container uids. Each refusal has its positive control."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError, HarnessError, LockError
from harness.reporting.ledger import shelve
from harness.sandbox import uids
from harness.study.config import load_study
from harness.study.lock import copy_locked_skill, lock, skill_files, verify_lock
from tests.factories import StudyFactory

CLI_REQUESTS = sorted((Path(__file__).parent / "data").glob("claude-code-*-request-*.json"))
"""Request bodies the real Claude Code CLI (2.1.332) sent, captured for reference (tool and system texts
trimmed): the first request, and the second one carrying a tool_result."""
GATEWAY = Path(__file__).resolve().parents[2] / "harness" / "sidecars" / "gateway.py"


def _gateway() -> Any:
    spec = importlib.util.spec_from_file_location("sidecar_gateway_iso", GATEWAY)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------- 1. hard links


def test_a_hard_link_to_a_file_outside_the_skill_is_refused_at_lock_and_eval(
    make_study: StudyFactory, tmp_path: Path
) -> None:
    s = make_study()
    secret = tmp_path / "host-secret"
    secret.write_text("HOST-SECRET-1\n")
    lock(s.prereg)  # positive control: the same folder locks without the link
    os.link(secret, s.skill / "notes.md")
    with pytest.raises(ConfigError, match="hard links") as info:
        skill_files(s.skill)
    assert info.value.field == "skill_ref"
    with pytest.raises(ConfigError, match="hard links"):
        lock(s.prereg)
    with pytest.raises(ConfigError, match="hard links"):
        verify_lock(load_study(s.prereg))
    os.unlink(s.skill / "notes.md")
    (s.skill / "notes.md").write_text("HOST-SECRET-1\n")  # a plain copy of the same bytes is fine
    assert skill_files(s.skill)["notes.md"] == b"HOST-SECRET-1\n"


def test_a_socket_in_the_skill_folder_is_refused(make_study: StudyFactory) -> None:
    import socket

    s = make_study()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(s.skill / "s.sock"))
        with pytest.raises(ConfigError, match="not a regular file"):
            skill_files(s.skill)
    finally:
        sock.close()


# --------------------------------------------------------- 2. skill swapped mid-run


def test_a_skill_file_swapped_after_the_lock_check_fails_the_check_of_the_copy(
    make_study: StudyFactory, tmp_path: Path
) -> None:
    s = make_study()
    lock(s.prereg)
    study = load_study(s.prereg)
    verify_lock(study)  # eval's first check passes
    good = copy_locked_skill(study, tmp_path / "copy-good")  # positive control: an unchanged skill copies
    assert (good / "SKILL.md").read_bytes() == (s.skill / "SKILL.md").read_bytes()
    (s.skill / "SKILL.md").write_text("# swapped after the check\n")
    with pytest.raises(LockError, match="changed after eval checked its lock") as info:
        copy_locked_skill(study, tmp_path / "copy-bad")
    assert "skill/SKILL.md" in info.value.message
    # what was checked is what is used: the good copy keeps the locked bytes
    assert b"swapped" not in (good / "SKILL.md").read_bytes()


# ------------------------------------------------------------ 3. symlinked skill_ref


def test_a_skill_ref_that_is_a_symlink_is_refused(make_study: StudyFactory, tmp_path: Path) -> None:
    s = make_study()
    lock(s.prereg)  # positive control: the real folder locks
    elsewhere = tmp_path / "elsewhere-skill"
    os.rename(s.skill, elsewhere)
    os.symlink(elsewhere, s.skill)
    with pytest.raises(ConfigError, match="symbolic link") as info:
        lock(s.prereg)
    assert info.value.field == "skill_ref"


def test_shelving_a_symlinked_skill_moves_the_link_and_never_its_target(tmp_path: Path) -> None:
    target = tmp_path / "outside" / "tidy-real"
    target.mkdir(parents=True)
    (target / "SKILL.md").write_text("# skill\n")
    study = tmp_path / "study"
    study.mkdir()
    link = study / "tidy"
    os.symlink(target, link)
    dest = shelve(link, study / "shelf", "run1")
    assert dest.is_symlink() and os.readlink(dest) == str(target)
    assert not os.path.lexists(link)
    assert (target / "SKILL.md").read_text() == "# skill\n"  # the target is untouched, in place
    # positive control: a real folder is moved
    real = study / "real"
    real.mkdir()
    (real / "SKILL.md").write_text("x")
    moved = shelve(real, study / "shelf", "run1")
    assert not real.exists() and (moved / "SKILL.md").read_text() == "x" and not moved.is_symlink()


def test_shelving_through_a_linked_parent_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "tidy").mkdir(parents=True)
    (outside / "tidy" / "SKILL.md").write_text("x")
    study = tmp_path / "study"
    study.mkdir()
    os.symlink(outside, study / "skills")
    with pytest.raises(HarnessError, match="symbolic link"):
        shelve(study / "skills" / "tidy", study / "shelf", "run1")
    assert (outside / "tidy" / "SKILL.md").read_text() == "x"


# ----------------------------------------------------------- 4. gateway allow-list


def test_the_clis_real_requests_pass_the_policy() -> None:
    gw = _gateway()
    assert len(CLI_REQUESTS) == 2, CLI_REQUESTS
    for path in CLI_REQUESTS:
        assert gw.policy_violation(json.loads(path.read_text())) is None, path


def _user(content: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": content}]}


NON_BARE_SKILL_LOAD = _user(
    [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "Launching skill: x"}]},
        {"type": "text", "text": "Base directory for this skill: /workspace/.claude/skills/x"},
    ]
)


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        (_user([{"type": "image", "source": {"type": "url", "url": "http://10.0.0.1/x.png"}}]), "source type 'url'"),
        (_user([{"type": "document", "source": {"type": "url", "url": "http://x/a.pdf"}}]), "source type 'url'"),
        (_user([{"type": "document", "source": {"type": "file", "file_id": "f"}}]), "source type 'file'"),
        (
            _user(
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}],
                    }
                ]
            ),
            "source type 'url'",
        ),
        (_user([{"type": "search_result", "source": "http://x", "title": "t", "content": []}]), "'search_result'"),
        (_user([{"type": "server_tool_use", "id": "s", "name": "web_fetch", "input": {}}]), "'server_tool_use'"),
        (_user([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_use"}]}]), "'tool_use'"),
        ({**_user("hi"), "system": [{"type": "image", "source": {"type": "base64"}}]}, "'image'"),
        (_user([{"type": "container_upload", "file_id": "f"}]), "'container_upload'"),
    ],
)
def test_content_outside_the_allow_list_is_refused(body: dict[str, Any], refused: str) -> None:
    found = _gateway().policy_violation(body)
    assert found is not None and refused in found


@pytest.mark.parametrize(
    "body",
    [
        _user("plain"),
        _user([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]),
        _user(
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "base64", "media_type": "application/pdf", "data": "AA=="},
                        }
                    ],
                }
            ]
        ),
        NON_BARE_SKILL_LOAD,
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "", "signature": "s"},
                        {"type": "tool_use", "id": "t", "name": "Skill", "input": {}},
                    ],
                }
            ]
        },
    ],
)
def test_what_the_cli_sends_passes(body: dict[str, Any]) -> None:
    assert _gateway().policy_violation(body) is None


# ------------------------------------------------------------------------ 5. uids


def test_free_ids_skip_accounts_groups_and_subordinate_ranges(tmp_path: Path) -> None:
    start = uids.FREE_RANGE_START
    (tmp_path / "passwd").write_text(f"root:x:0:0::/root:/bin/sh\nx:x:{start}:{start + 5}::/:/bin/sh\n")
    (tmp_path / "group").write_text(f"g:x:{start + 1}:\n")
    (tmp_path / "subuid").write_text(f"dockremap:{start + 2}:3\n")
    (tmp_path / "subgid").write_text("")
    users = uids.role_users(euid=0, egid=0, security_options=(), etc=tmp_path)
    assert users.how == "unused-host-ids"
    assert users.agent == (start + 6, start + 6) and users.sidecar == (start + 7, start + 7)
    # positive control: with an empty host the first two ids are taken
    for name in ("passwd", "group", "subuid"):
        (tmp_path / name).write_text("")
    assert uids.role_users(euid=0, egid=0, security_options=(), etc=tmp_path).agent == (start, start)


def test_ids_on_this_host_are_no_accounts() -> None:
    users = uids.role_users(euid=0, egid=0, security_options=())
    used, _ = uids.host_ids()
    assert users.agent[0] not in used and users.sidecar[0] not in used
    assert users.agent != users.sidecar
    assert {65534, 1000}.isdisjoint({users.agent[0], users.sidecar[0]})


def test_userns_remap_and_a_non_root_controller_keep_their_ids() -> None:
    remap = uids.role_users(euid=0, egid=0, security_options=("name=seccomp", "name=userns"))
    assert (remap.how, remap.agent, remap.sidecar) == ("userns-remap", (1000, 1000), (65534, 65534))
    own = uids.role_users(euid=1234, egid=99, security_options=())
    assert (own.how, own.agent, own.sidecar) == ("controller-user", (1234, 99), (1234, 99))


def test_tasks_and_preregistration_edited_after_the_check_are_not_what_the_run_uses(make_study: StudyFactory) -> None:
    s = make_study()
    lock(s.prereg)
    study = load_study(s.prereg)
    digest = verify_lock(study).sha256
    prompts = [t.prompt for t in study.target_tasks()]
    data = json.loads(s.tasks.read_text())
    data["tasks"][0]["prompt"] = "EDITED AFTER THE CHECK"
    s.tasks.write_text(json.dumps(data))
    s.prereg.write_text(s.prereg.read_text().replace("fewer failed verifies", "edited"))
    # what the run plans from and what the lock hash covers are the models parsed before the check
    assert [t.prompt for t in study.target_tasks()] == prompts
    assert verify_lock(study).sha256 == digest
    # positive control: a fresh load sees the edit and the lock refuses it
    with pytest.raises(LockError):
        verify_lock(load_study(s.prereg))


def test_doctor_says_which_ids_the_roles_run_as() -> None:
    from harness.sandbox.doctor import uid_check

    plain = uid_check(("name=seccomp,profile=default",))
    assert plain.level == "ok" and plain.name == "container uids"
    assert ("no host account" in plain.detail) if os.getuid() == 0 else ("controller's own uid" in plain.detail)
    remapped = uid_check(("name=seccomp,profile=default", "name=userns"))
    assert ("remaps user namespaces" in remapped.detail) if os.getuid() == 0 else ("own uid" in remapped.detail)
