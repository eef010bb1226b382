"""harness.trial.patch: the agent's patch as hostile data, on real git output and on hand-written bytes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.records import PatchInfo
from harness.trial.patch import (
    analyze,
    escapes,
    is_test_path,
    listed_links,
    parse_numstat,
    parse_raw,
    symlink_targets,
    unquote,
    unsafe_path,
)
from tests.factories import init_repo, run_git

CAP = 1 << 20
BASE_FILES = {
    "README.md": "hello\n",
    "src/app.py": "def f():\n    return 1\n\n\ndef g():\n    return 2\n",
    "src/keep.py": "KEEP = 1\n",
    "tests/test_app.py": "from src.app import f\n\n\ndef test_f():\n    assert f() == 1\n",
    "docs/guide.md": "guide\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    init_repo(path, BASE_FILES)
    return path


def diff(repo: Path) -> tuple[bytes, bytes, bytes]:
    """What collect.sh produces: the staged workspace (untracked files included) against the base."""
    run_git(repo, "add", "-A")
    common = ("-c", "core.quotePath=true", "diff", "--cached", "--no-renames")
    patch = run_git(repo, *common, "--binary", "--full-index", "--no-ext-diff", "--no-textconv", "HEAD")
    raw = run_git(repo, *common, "--raw", "-z", "--full-index", "HEAD")
    numstat = run_git(repo, *common, "--numstat", "-z", "HEAD")
    return patch, raw, numstat


def analyse_repo(repo: Path, protected_paths: Sequence[str] = ()) -> PatchInfo:
    patch, raw, numstat = diff(repo)
    return analyze(patch, raw, numstat, protected_paths=protected_paths, cap=CAP)


def raw_entry(path: bytes, old: str = "000000", new: str = "100644", status: str = "A") -> bytes:
    return f":{old} {new} {'0' * 40} {'1' * 40} {status}".encode() + b"\0" + path + b"\0"


# ------------------------------------------------------------------------- real git diffs


def test_normal_edit(repo: Path) -> None:
    (repo / "src/app.py").write_text("def f():\n    return 42\n\n\ndef g():\n    return 2\n\n\ndef h():\n    pass\n")
    patch, raw, numstat = diff(repo)
    info = analyze(patch, raw, numstat, cap=CAP)
    assert info.rejected is None
    assert info.files == ("src/app.py",)
    assert info.files_changed == 1
    assert (info.insertions, info.deletions) == (5, 1)
    assert info.flags == ()
    assert info.bytes == len(patch)
    assert info.sha256 == hashlib.sha256(patch).hexdigest()
    assert info.special_files == ()


def test_new_untracked_file_is_part_of_the_patch(repo: Path) -> None:
    (repo / "src/new_module.py").write_text("a = 1\nb = 2\nc = 3\n")
    info = analyse_repo(repo)
    assert info.files == ("src/new_module.py",)
    assert (info.insertions, info.deletions) == (3, 0)
    assert info.rejected is None


def test_deleted_test_file_is_flagged(repo: Path) -> None:
    (repo / "tests/test_app.py").unlink()
    info = analyse_repo(repo)
    assert "tests_deleted" in info.flags
    assert "edits_tests" not in info.flags
    assert info.deletions == 5
    assert info.rejected is None


def test_edited_test_file_is_flagged(repo: Path) -> None:
    (repo / "tests/test_app.py").write_text("def test_f():\n    assert True\n")
    info = analyse_repo(repo)
    assert "edits_tests" in info.flags
    assert info.rejected is None


def test_new_test_file_anywhere_is_flagged(repo: Path) -> None:
    (repo / "src/test_helpers.py").write_text("x = 1\n")
    (repo / "src/conftest.py").write_text("x = 1\n")
    info = analyse_repo(repo)
    assert info.flags == ("edits_tests",)


def test_symlink_escaping_the_tree_is_rejected(repo: Path) -> None:
    os.symlink("../../etc/passwd", repo / "docs/passwd")
    info = analyse_repo(repo)
    assert "symlink:docs/passwd" in info.flags
    assert info.rejected is not None
    assert info.rejected.startswith("symlink_escapes:")
    assert "../../etc/passwd" in info.rejected


def test_absolute_symlink_is_rejected(repo: Path) -> None:
    os.symlink("/root/.ssh/id_ed25519", repo / "key")
    info = analyse_repo(repo)
    assert info.rejected is not None and info.rejected.startswith("symlink_escapes:")


def test_symlink_inside_the_tree_is_flagged_not_rejected(repo: Path) -> None:
    os.symlink("../README.md", repo / "docs/readme-link")
    info = analyse_repo(repo)
    assert info.flags == ("symlink:docs/readme-link",)
    assert info.rejected is None


@pytest.mark.parametrize("name", ["café", 'a"b', "back\\slash"])
def test_escaping_symlink_with_a_quoted_name_is_rejected(repo: Path, name: str) -> None:
    """git quotes such names in the patch text ("b/caf\\303\\251"); the check must still see them."""
    os.symlink("/etc/shadow", repo / name)
    info = analyse_repo(repo)
    assert info.files == (name,)
    assert info.rejected is not None and info.rejected.startswith("symlink_escapes:")
    assert "/etc/shadow" in info.rejected


def test_quoted_symlink_inside_the_tree_is_accepted(repo: Path) -> None:
    os.symlink("README.md", repo / "café")
    info = analyse_repo(repo)
    assert info.rejected is None
    assert info.flags == ("symlink:café",)


def test_retargeted_existing_symlink_is_checked(tmp_path: Path) -> None:
    repo = tmp_path / "ws"
    repo.mkdir()
    os.symlink("README.md", repo / "link")
    init_repo(repo, {"README.md": "x\n"})
    (repo / "link").unlink()
    os.symlink("../../../etc/shadow", repo / "link")
    patch, raw, numstat = diff(repo)
    assert b"new file mode" not in patch  # a modification: only the index line carries the mode
    info = analyze(patch, raw, numstat, cap=CAP)
    assert info.rejected is not None and info.rejected.startswith("symlink_escapes:")


def test_retargeted_symlink_inside_the_tree_is_accepted(tmp_path: Path) -> None:
    repo = tmp_path / "ws"
    repo.mkdir()
    os.symlink("README.md", repo / "link")
    init_repo(repo, {"README.md": "x\n", "docs/guide.md": "g\n"})
    (repo / "link").unlink()
    os.symlink("docs/guide.md", repo / "link")
    patch, raw, numstat = diff(repo)
    assert symlink_targets(patch) == {"link": "docs/guide.md"}
    info = analyze(patch, raw, numstat, cap=CAP)
    assert info.rejected is None
    assert info.flags == ("symlink:link",)


def test_new_executable_is_flagged(repo: Path) -> None:
    script = repo / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    info = analyse_repo(repo)
    assert "executable:run.sh" in info.flags
    assert info.rejected is None


def test_chmod_to_executable_is_flagged(repo: Path) -> None:
    (repo / "src/keep.py").chmod(0o755)
    info = analyse_repo(repo)
    assert info.flags == ("executable:src/keep.py",)
    assert (info.insertions, info.deletions) == (0, 0)


@pytest.mark.parametrize(
    ("path", "flag"),
    [
        (".claude/settings.json", "edits_claude_config"),
        ("CLAUDE.md", "edits_claude_config"),
        ("sub/CLAUDE.md", "edits_claude_config"),
        (".mcp.json", "edits_claude_config"),
        (".github/workflows/x.yml", "edits_ci"),
        (".gitlab-ci.yml", "edits_ci"),
        (".gitattributes", "edits_git_metadata"),
        (".gitignore", "edits_git_metadata"),
        (".vscode/settings.json", "edits_dev_env"),
        (".envrc", "edits_dev_env"),
        ("Makefile", "edits_build_scripts"),
        ("pyproject.toml", "edits_build_scripts"),
        ("src/evil.pth", "edits_build_scripts"),
    ],
)
def test_sensitive_files_are_flagged(repo: Path, path: str, flag: str) -> None:
    target = repo / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("# harmless content\n" if path != ".gitattributes" else "*.md text\n")
    info = analyse_repo(repo)
    assert flag in info.flags
    assert info.rejected is None


def test_protected_paths_are_flagged(repo: Path) -> None:
    (repo / "src/keep.py").write_text("KEEP = 2\n")
    (repo / "tests/test_app.py").write_text("def test_f():\n    pass\n")
    (repo / "src/keeper.py").write_text("not protected\n")
    info = analyse_repo(repo, protected_paths=("src/keep.py", "tests/", "docs"))
    assert "edits_protected:src/keep.py" in info.flags
    assert "edits_protected:tests/" in info.flags
    assert "edits_protected:docs" not in info.flags
    assert not any(f.endswith("keeper.py") for f in info.flags)
    assert info.rejected is None


def test_flags_are_deduplicated(repo: Path) -> None:
    for i in range(3):
        (repo / f"tests/test_more_{i}.py").write_text("x = 1\n")
    info = analyse_repo(repo)
    assert info.flags.count("edits_tests") == 1
    assert info.files_changed == 3


def test_binary_file_counts(repo: Path) -> None:
    (repo / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (repo / "README.md").write_text("hello\nworld\n")
    patch, raw, numstat = diff(repo)
    assert b"GIT binary patch" in patch
    assert parse_numstat(numstat)["blob.bin"] == (None, None)
    info = analyze(patch, raw, numstat, cap=CAP)
    assert (info.insertions, info.deletions) == (1, 0)
    assert info.files_changed == 2


def test_patch_over_the_cap_is_rejected(repo: Path) -> None:
    (repo / "big.txt").write_text("line\n" * 2000)
    patch, raw, numstat = diff(repo)
    info = analyze(patch, raw, numstat, cap=len(patch) - 1)
    assert info.rejected is not None and info.rejected.startswith("too_large")
    assert analyze(patch, raw, numstat, cap=len(patch)).rejected is None


def test_extract_status_patch_larger_is_too_large() -> None:
    info = analyze(b"", b"", b"", cap=100, extract_status="patch larger than 100 bytes")
    assert info.rejected is not None and info.rejected.startswith("too_large")


def test_other_extract_status_rejects() -> None:
    info = analyze(b"", b"", b"", cap=100, extract_status="the patch does not apply to the base")
    assert info.rejected == "extract: the patch does not apply to the base"


def test_a_stopped_extraction_still_names_the_symlinks_collect_listed() -> None:
    """Issue 24 item 10: a FIFO named .gitignore stops extraction before git runs; the escaping links the
    agent made are named all the same (before, the record held only ``special_files``)."""
    links = b"/workspace/leak\0/etc/shadow\0/workspace/docs/up\0../../outside\0/workspace/ok\0docs/guide.md\0"
    info = analyze(
        b"", b"", b"", cap=100, special=b"/workspace/.gitignore\0", links=links,
        extract_status="special file named .git* in the workspace (not opened; git would block on it)",
    )  # fmt: skip
    assert info.rejected is not None and info.rejected.startswith("extract: special file named .git")
    assert info.special_files == (".gitignore",)
    assert {"symlink:leak", "symlink_escapes:leak", "symlink:docs/up", "symlink_escapes:docs/up"} <= set(info.flags)
    assert "symlink:ok" in info.flags and "symlink_escapes:ok" not in info.flags
    # a pair cut by the output's cap is dropped, never misread
    assert listed_links(links[:-8]) == {"leak": "/etc/shadow", "docs/up": "../../outside"}
    # a finished extraction takes its links from the diff alone
    done = analyze(b"", b"", b"", cap=100, links=links)
    assert not [f for f in done.flags if f.startswith("symlink")]


def test_an_escaping_symlink_in_a_patch_is_flagged_by_name(repo: Path) -> None:
    os.symlink("/etc/passwd", repo / "leak")
    os.symlink("docs", repo / "fine")
    info = analyse_repo(repo)
    assert {"symlink:leak", "symlink_escapes:leak", "symlink:fine"} <= set(info.flags)
    assert "symlink_escapes:fine" not in info.flags


def test_nested_repository_becomes_a_rejected_gitlink(repo: Path) -> None:
    init_repo(repo / "vendor/sub", {"x": "1\n"})
    info = analyse_repo(repo)
    assert info.files == ("vendor/sub",)
    assert info.rejected is not None and info.rejected.startswith("gitlink")


def test_file_name_with_newline_is_rejected(repo: Path) -> None:
    (repo / "evil\nname").write_text("x\n")
    info = analyse_repo(repo)
    assert info.rejected is not None and "control characters" in info.rejected


def test_non_utf8_file_name_still_serialises(repo: Path) -> None:
    os.close(os.open(os.fsencode(str(repo)) + b"/bad\xffname", os.O_CREAT | os.O_WRONLY, 0o644))
    info = analyse_repo(repo)
    assert info.files_changed == 1
    assert "bad" in info.model_dump_json()  # a surrogate here would make the record unwritable


def test_empty_patch(repo: Path) -> None:
    info = analyse_repo(repo)
    assert (info.files_changed, info.insertions, info.deletions, info.bytes) == (0, 0, 0, 0)
    assert info.rejected is None and info.flags == ()


# ------------------------------------------------------------------- hand-written hostile input


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (b"../x", "path traversal"),
        (b"a/../../x", "path traversal"),
        (b"/abs", "absolute path"),
        (b"/etc/cron.d/x", "absolute path"),
        (b".git/config", ".git path"),
        (b".GIT/hooks/x", ".git path"),
        (b"sub/.Git/hooks/post-checkout", ".git path"),
        (b"git~1/x", ".git path"),
        (b"GIT~2/config", ".git path"),
        (b".git./config", ".git path"),
        (b"a\x1b[31mred", "control characters"),
        (b"tab\tname", "control characters"),
        (b"del\x7f", "control characters"),
        ("c1-\u009bcsi".encode(), "control characters"),
        (b"nul-free\rcr", "control characters"),
    ],
)
def test_hostile_paths_are_rejected(path: bytes, reason: str) -> None:
    numstat = b"1\t0\t" + path + b"\0"
    info = analyze(b"", raw_entry(path), numstat, cap=CAP)
    assert info.rejected is not None
    assert info.rejected.startswith("unsafe_path:")
    assert reason in info.rejected


@pytest.mark.parametrize("path", [b"gitx/y", b"my.git/x", b".github/x", b"a/.gitignore", b"git~x/y", b"..foo"])
def test_lookalike_paths_are_not_rejected(path: bytes) -> None:
    assert analyze(b"", raw_entry(path), b"", cap=CAP).rejected is None


def test_first_rejection_reason_wins() -> None:
    raw = raw_entry(b"../a") + raw_entry(b".git/config")
    info = analyze(b"", raw, b"", cap=CAP)
    assert info.rejected is not None and "path traversal" in info.rejected
    assert info.files == ("../a", ".git/config")


@pytest.mark.parametrize(("old", "new"), [("000000", "160000"), ("160000", "160000"), ("160000", "000000")])
def test_gitlinks_are_rejected(old: str, new: str) -> None:
    info = analyze(b"", raw_entry(b"sub", old, new, "M"), b"", cap=CAP)
    assert info.rejected is not None and info.rejected.startswith("gitlink")


def test_symlink_without_readable_target_fails_closed() -> None:
    info = analyze(b"", raw_entry(b"link", "000000", "120000"), b"", cap=CAP)
    assert "symlink:link" in info.flags
    assert info.rejected is not None and info.rejected.startswith("symlink_escapes")


def test_counts_from_numstat() -> None:
    raw = raw_entry(b"a.py", "100644", "100644", "M") + raw_entry(b"b.py") + raw_entry(b"c.bin")
    numstat = b"3\t1\ta.py\x0010\t0\tb.py\x00-\t-\tc.bin\x00"
    info = analyze(b"", raw, numstat, cap=CAP)
    assert (info.insertions, info.deletions, info.files_changed) == (13, 1, 3)


def test_special_files_are_flagged() -> None:
    special = b"/workspace/fifo\0/workspace/sub/sock\0/workspace/suid-bin\0"
    info = analyze(b"", b"", b"", cap=CAP, special=special)
    assert "special_files" in info.flags
    assert info.special_files == ("fifo", "sub/sock", "suid-bin")


def test_no_special_files_no_flag() -> None:
    assert "special_files" not in analyze(b"", b"", b"", cap=CAP, special=b"").flags


def test_file_list_is_capped() -> None:
    raw = b"".join(raw_entry(f"f{i}.txt".encode()) for i in range(300))
    info = analyze(b"", raw, b"", cap=CAP)
    assert info.files_changed == 300
    assert len(info.files) == 200


# ------------------------------------------------------------------------------ the helpers


def test_parse_raw_ignores_garbage_between_records() -> None:
    raw = b"garbage\0" + raw_entry(b"a") + raw_entry(b"b", "100644", "100755", "M")
    assert parse_raw(raw) == [("a", "000000", "100644", "A"), ("b", "100644", "100755", "M")]


def test_parse_numstat_skips_malformed_records() -> None:
    assert parse_numstat(b"nonsense\x001\t2\tok.txt\x00") == {"ok.txt": (1, 2)}


def test_unquote() -> None:
    assert unquote(b"b/plain") == b"b/plain"
    assert unquote(b'"b/caf\\303\\251"') == "b/café".encode()
    assert unquote(b'"b/a\\"b\\\\c\\td"') == b'b/a"b\\c\td'


def test_symlink_targets_from_patch_text() -> None:
    patch = (
        b"diff --git a/l b/l\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/l\n"
        b"@@ -0,0 +1 @@\n+../up\n\\ No newline at end of file\n"
        b"diff --git a/f b/f\nnew file mode 100644\n--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+../not-a-link\n"
    )
    assert symlink_targets(patch) == {"l": "../up"}


@pytest.mark.parametrize(
    ("link", "target", "escaping"),
    [
        ("a", "b", False),
        ("a/b", "../c", False),
        ("a/b", "../../c", True),
        ("a", "..", True),
        ("a", "/etc", True),
        ("a", "./x/../../y", True),
        ("d/e/f", "../../g", False),
        ("a", "x\nz", True),
    ],
)
def test_escapes(link: str, target: str, escaping: bool) -> None:
    assert escapes(link, target) is escaping


def test_unsafe_path_accepts_ordinary_paths() -> None:
    assert unsafe_path("src/app.py") is None
    assert unsafe_path("") is not None


@pytest.mark.parametrize(
    ("path", "is_test"),
    [
        ("tests/a.py", True),
        ("src/tests/a.py", True),
        ("test_x.py", True),
        ("pkg/x_test.go", True),
        ("web/app.test.ts", True),
        ("conftest.py", True),
        ("pytest.ini", True),
        ("src/app.py", False),
        ("testing.md", False),
    ],
)
def test_is_test_path(path: str, is_test: bool) -> None:
    assert is_test_path(path) is is_test


def test_a_nested_repository_is_flagged_and_rejects_the_patch(repo: Path) -> None:
    (repo / "src" / "new.py").write_text("x = 1\n")
    patch, raw, numstat = diff(repo)
    nested = b"/workspace/vendor/lib/.git\0/workspace/other/.git\0"
    info = analyze(patch, raw, numstat, cap=CAP, nested=nested)
    assert "nested_repository" in info.flags
    assert info.rejected == "gitlink: nested repository at 'vendor/lib' (not extracted)"
    assert analyze(patch, raw, numstat, cap=CAP).rejected is None, "the same patch without it is accepted"
    first = analyze(patch, raw, numstat, cap=len(patch) - 1, nested=nested).rejected
    assert first is not None and first.startswith("too_large"), "an earlier reason is kept"
