"""The agent's patch, treated as hostile data (pure functions, no I/O).

A patch is rejected (verify skipped, trial recorded as fail) when applying it
anywhere would be unsafe: paths with ``..``, absolute paths, ``.git`` in any
spelling, control characters, gitlinks, symlinks pointing outside the tree, or
more bytes than the cap. It is flagged (kept, but shown in reports) when it
touches what a reviewer must look at: tests and protected paths, ``.claude/``,
``CLAUDE.md``, CI configuration, git metadata, developer-environment and build
scripts, symlinks, executables.
"""

from __future__ import annotations

import fnmatch
import hashlib
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.records import PatchInfo

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
GIT_COMPONENT = re.compile(r"^(\.git\.*|git~\d+)$", re.IGNORECASE)

TEST_PATTERNS = (
    "test/*",
    "tests/*",
    "*/test/*",
    "*/tests/*",
    "spec/*",
    "*/spec/*",
    "__tests__/*",
    "*/__tests__/*",
    "test_*.py",
    "*/test_*.py",
    "*_test.py",
    "*_test.go",
    "*.test.js",
    "*.test.ts",
    "*.spec.js",
    "*.spec.ts",
    "conftest.py",
    "*/conftest.py",
    "pytest.ini",
    "tox.ini",
    "jest.config.*",
    "vitest.config.*",
)
FLAG_PATTERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("edits_claude_config", (".claude/*", "*/.claude/*", "CLAUDE.md", "*/CLAUDE.md", "AGENTS.md", ".mcp.json")),
    (
        "edits_ci",
        (
            ".github/*",
            ".gitlab-ci.yml",
            ".circleci/*",
            "Jenkinsfile",
            "azure-pipelines.yml",
            ".buildkite/*",
            ".travis.yml",
        ),
    ),
    ("edits_git_metadata", (".gitattributes", "*/.gitattributes", ".gitmodules", ".gitignore", "*/.gitignore")),
    (
        "edits_dev_env",
        (
            ".vscode/*",
            ".idea/*",
            ".devcontainer/*",
            ".envrc",
            ".husky/*",
            ".pre-commit-config.yaml",
            ".npmrc",
            ".pypirc",
        ),
    ),
    (
        "edits_build_scripts",
        (
            "Makefile",
            "package.json",
            "setup.py",
            "setup.cfg",
            "pyproject.toml",
            "sitecustomize.py",
            "*/sitecustomize.py",
            "usercustomize.py",
            "*.pth",
        ),
    ),
)


@dataclass(frozen=True)
class Entry:
    path: str
    old_mode: str
    new_mode: str
    status: str
    added: int | None
    deleted: int | None


def parse_raw(raw: bytes) -> list[tuple[str, str, str, str]]:
    """``git diff --raw -z`` -> [(path, old_mode, new_mode, status)]."""
    out: list[tuple[str, str, str, str]] = []
    parts = raw.split(b"\0")
    i = 0
    while i < len(parts) - 1:
        meta = parts[i].decode("utf-8", "replace")
        if not meta.startswith(":"):
            i += 1
            continue
        fields = meta[1:].split()
        path = parts[i + 1].decode("utf-8", "backslashreplace")  # JSON-safe: a record must serialise
        if len(fields) >= 5:
            out.append((path, fields[0], fields[1], fields[4][:1]))
        i += 2
    return out


def parse_numstat(numstat: bytes) -> dict[str, tuple[int | None, int | None]]:
    """``git diff --numstat -z`` -> {path: (added, deleted)}; binary files give (None, None)."""
    out: dict[str, tuple[int | None, int | None]] = {}
    for record in numstat.split(b"\0"):
        if not record:
            continue
        try:
            added, deleted, path = record.decode("utf-8", "backslashreplace").split("\t", 2)
        except ValueError:
            continue
        out[path] = (int(added) if added.isdigit() else None, int(deleted) if deleted.isdigit() else None)
    return out


_C_ESCAPES = {b"a": b"\a", b"b": b"\b", b"t": b"\t", b"n": b"\n", b"v": b"\v", b"f": b"\f", b"r": b"\r"}


def unquote(name: bytes) -> bytes:
    """Undo git's C-style quoting of a path in patch text (``"b/caf\\303\\251"`` -> ``b/café``)."""
    if len(name) < 2 or not (name.startswith(b'"') and name.endswith(b'"')):
        return name

    def one(m: re.Match[bytes]) -> bytes:
        esc = m.group(1)
        return bytes([int(esc, 8) & 0xFF]) if len(esc) == 3 else _C_ESCAPES.get(esc, esc)

    return re.sub(rb"\\([0-7]{3}|.)", one, name[1:-1], flags=re.DOTALL)


def symlink_targets(patch: bytes) -> dict[str, str]:
    """Targets of symlinks the patch creates or changes (mode 120000), from the hunk text."""
    targets: dict[str, str] = {}
    for chunk in re.split(rb"(?m)^diff --git ", patch)[1:]:
        header, _, body = chunk.partition(b"\n")
        if not re.search(rb"(?m)^((new file mode|new mode) 120000|index [0-9a-f]+\.\.[0-9a-f]+ 120000)$", body):
            continue
        m = re.search(rb"(?m)^\+\+\+ (.*)$", body)
        name = unquote(m.group(1)) if m else header.split(b" b/", 1)[-1]
        path = name.removeprefix(b"b/").decode("utf-8", "backslashreplace")
        added = [ln[1:] for ln in body.split(b"\n") if ln.startswith(b"+") and not ln.startswith(b"+++")]
        targets[path] = b"".join(added).decode("utf-8", "surrogateescape")
    return targets


def unsafe_path(path: str) -> str | None:
    if not path or CONTROL.search(path):
        return "control characters in path"
    if path.startswith("/"):
        return "absolute path"
    parts = path.split("/")
    if ".." in parts:
        return "path traversal"
    if any(GIT_COMPONENT.match(p) for p in parts):
        return ".git path"
    return None


def listed_links(links: bytes) -> dict[str, str]:
    """collect.sh's ``links`` (``/workspace/<path> NUL target NUL`` ...) -> {path: target}; a pair cut by
    the output's cap is dropped."""
    parts = links.split(b"\0")
    out: dict[str, str] = {}
    for i in range(0, len(parts) - 2, 2):
        path = parts[i].removeprefix(b"/workspace/").decode("utf-8", "backslashreplace")
        out[path] = parts[i + 1].decode("utf-8", "surrogateescape")
    return out


def escapes(link_path: str, target: str) -> bool:
    if target.startswith("/") or CONTROL.search(target):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link_path), target))
    return resolved == ".." or resolved.startswith("../")


def _matches(path: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def is_test_path(path: str) -> bool:
    return _matches(path, TEST_PATTERNS)


def under(path: str, protected: str) -> bool:
    protected = protected.rstrip("/")
    return path == protected or path.startswith(protected + "/")


def analyze(
    patch: bytes,
    raw: bytes,
    numstat: bytes,
    *,
    protected_paths: Sequence[str] = (),
    cap: int,
    special: bytes = b"",
    nested: bytes = b"",
    links: bytes = b"",
    extract_status: str = "ok",
) -> PatchInfo:
    """Everything the record says about a patch: stats, flags, and a rejection reason if unsafe.

    ``special`` and ``nested`` are NUL-separated paths the extraction found: FIFOs, sockets and
    devices; and ``.git`` directories below the top (nested repositories, whose content a
    patch cannot carry: applying it would silently drop their files). ``links``: the symlinks the agent
    made or changed (:func:`listed_links`), which collect lists when extraction stops (then no diff, or a
    cut one, carries them): each is flagged as a patch's would be (``symlink:`` and, when it points
    outside the tree, ``symlink_escapes:``)."""
    counts = parse_numstat(numstat)
    entries = [
        Entry(path, old, new, status, *counts.get(path, (None, None))) for path, old, new, status in parse_raw(raw)
    ]
    flags: list[str] = []
    rejected: str | None = None
    if len(patch) > cap or extract_status.startswith("patch larger"):
        rejected = f"too_large: the patch exceeds {cap} bytes"
    elif extract_status != "ok":
        rejected = f"extract: {extract_status}"
    targets = symlink_targets(patch)
    for e in entries:
        reason = unsafe_path(e.path)
        if reason and rejected is None:
            rejected = f"unsafe_path: {reason}: {e.path!r}"
        if "160000" in (e.old_mode, e.new_mode) and rejected is None:
            rejected = f"gitlink: nested repository at {e.path!r}"
        if e.new_mode == "120000":
            flags.append(f"symlink:{e.path}")
            target = targets.get(e.path)
            # a symlink whose target cannot be read from the patch is treated as escaping (fail closed)
            if target is None or escapes(e.path, target):
                flags.append(f"symlink_escapes:{e.path}")
                if rejected is None:
                    rejected = f"symlink_escapes: {e.path!r} -> {target!r}"
        if e.new_mode == "100755" and e.old_mode != "100755":
            flags.append(f"executable:{e.path}")
        if is_test_path(e.path):
            flags.append("tests_deleted" if e.status == "D" else "edits_tests")
        for p in protected_paths:
            if under(e.path, p):
                flags.append(f"edits_protected:{p}")
        for name, patterns in FLAG_PATTERNS:
            if _matches(e.path, patterns):
                flags.append(name)
    if extract_status != "ok":  # what the agent linked is named even when no (whole) diff carries it
        seen = {e.path for e in entries if e.new_mode == "120000"}
        for path, target in listed_links(links).items():
            if path not in seen:
                flags.append(f"symlink:{path}")
                if escapes(path, target):
                    flags.append(f"symlink_escapes:{path}")
    special_files = tuple(s.decode("utf-8", "replace").removeprefix("/workspace/") for s in special.split(b"\0") if s)
    if special_files:
        flags.append("special_files")
    repos = [
        s.decode("utf-8", "replace").removeprefix("/workspace/").removesuffix("/.git") for s in nested.split(b"\0") if s
    ]
    if repos:
        flags.append("nested_repository")
        if rejected is None:
            rejected = f"gitlink: nested repository at {repos[0]!r} (not extracted)"
    return PatchInfo(
        sha256=hashlib.sha256(patch).hexdigest(),
        bytes=len(patch),
        files_changed=len(entries),
        insertions=sum(e.added or 0 for e in entries),
        deletions=sum(e.deleted or 0 for e in entries),
        files=tuple(e.path for e in entries[:200]),
        flags=tuple(dict.fromkeys(flags)),
        rejected=rejected,
        special_files=special_files[:50],
    )
