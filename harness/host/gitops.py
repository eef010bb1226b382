"""Host-side git, hardened, and only ever on trusted trees.

The controller runs git on the host for exactly four things: resolving the base
commit in the user's repository, reading the base commit's tree (what ``skilltrial
lock`` leaves out of it: :func:`tree_entries`, :func:`read_blobs`), adding/removing
the run's worktree of the base (:func:`checkout_base`, the one place the pristine
base is made), and making the fresh one-commit repository of the pristine base
before any agent exists. It never runs git inside a tree an agent has written to
(patch extraction happens in a ``--network none`` container).

Every call gets a scrubbed environment: no inherited ``GIT_*`` variables, no
global or system config, no hooks, no fsmonitor, no pager, no prompts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from harness.errors import ConfigError, InfraError
from harness.host.slots import host_lock
from harness.host.trees import remove_tree

HARDENING = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.pager=cat",
    "-c",
    "credential.helper=",
    "-c",
    "protocol.allow=never",
    "-c",
    "diff.external=",
    "-c",
    "core.sshCommand=false",
    "-c",
    "advice.detachedHead=false",
)


PASSED = frozenset({"PATH", "LANG", "LC_ALL", "TMPDIR"})
"""The only variables host git gets from the controller's environment."""


def git_env(base: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Host git's whole environment: :data:`PASSED` from ``base``, the hardening, then ``extra``."""
    env = {k: v for k, v in base.items() if k in PASSED}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "HOME": "/nonexistent",
            "XDG_CONFIG_HOME": "/nonexistent",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_AUTHOR_NAME": "skill-harness",
            "GIT_AUTHOR_EMAIL": "harness@localhost",
            "GIT_COMMITTER_NAME": "skill-harness",
            "GIT_COMMITTER_EMAIL": "harness@localhost",
            "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
        }
    )
    if extra:
        env.update(extra)
    return env


def git(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    base_env: Mapping[str, str] | None = None,
) -> str:
    """Run host git. ``env`` adds variables (a ``GIT_DIR``); ``base_env`` is where :data:`PASSED` comes
    from: by default the controller's own environment, read here, where the child process starts."""
    return git_bytes(args, cwd=cwd, env=env, check=check, base_env=base_env).decode("utf-8", "surrogateescape")


def git_bytes(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    base_env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
) -> bytes:
    """:func:`git` for output that is not text (paths as the repository holds them, file contents);
    ``stdin`` is written to git's standard input (else it reads nothing)."""
    argv = ["git", *HARDENING, *args]
    full_env = git_env(os.environ if base_env is None else base_env, env)
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=full_env,
            capture_output=True,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            timeout=300,
        )
    except FileNotFoundError:
        raise InfraError("git is not installed", hint="install git (apt-get install git)") from None
    except subprocess.TimeoutExpired:
        raise InfraError(f"git {' '.join(args[:2])} did not finish within 300 s") from None
    if check and proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip()[:500]
        raise InfraError(f"git {' '.join(args)} failed (exit {proc.returncode}): {detail}")
    return proc.stdout


def resolve_commit(repo: Path, ref: str, *, source: Path | None = None, field: str = "execution.base_ref") -> str:
    """The full SHA of ``ref`` in ``repo``; a ConfigError naming the field when it does not resolve."""
    where = source or repo
    if not repo.is_dir():
        raise ConfigError(where, f"repository {repo} does not exist", field="execution.repo")
    top = git(["rev-parse", "--show-toplevel"], cwd=repo, check=False).strip()
    if not top:
        raise ConfigError(where, f"{repo} is not inside a git repository", field="execution.repo")
    out = git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=repo, check=False).strip()
    if not out:
        raise ConfigError(where, f"{ref!r} is not a commit in {top}", field=field)
    return out


@contextlib.contextmanager
def worktree_lock(repo: Path) -> Iterator[None]:
    """Serialise worktree changes to one repository (threads and processes of this user).

    Concurrent ``git worktree add`` calls race on naming their admin directories
    (``.git/worktrees/base``, ``base1``, ...): seen here as "failed to read
    .git/worktrees/base1/commondir" with eight trials starting at once.
    """
    key = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:16]
    with host_lock(f"worktree-{key}"):
        yield


def add_worktree(repo: Path, path: Path, sha: str) -> None:
    with worktree_lock(repo):
        git(["worktree", "add", "--detach", "--force", str(path), sha], cwd=repo)


def remove_worktree(repo: Path, path: Path) -> None:
    """``--force --force``: without it git would run status inside the tree (attacker content)."""
    with worktree_lock(repo):
        git(["worktree", "remove", "--force", "--force", str(path)], cwd=repo, check=False)
        git(["worktree", "prune"], cwd=repo, check=False)


def prune_worktrees(repo: Path) -> None:
    with worktree_lock(repo):
        git(["worktree", "prune"], cwd=repo, check=False)


def init_snapshot_repo(tree: Path, options: Sequence[str] = ()) -> str:
    """Make ``tree/.git`` a fresh one-commit repository of ``tree`` (trusted content only).

    Returns the commit SHA. Used for the agent's own repository: it can run
    ``git status/diff/log/commit`` without ever seeing the user's refs, objects,
    hooks, config or history. ``options`` (``-c`` pairs) shape how the tree is added; no system
    attributes file applies.
    """
    env = {"GIT_DIR": str(tree / ".git"), "GIT_WORK_TREE": str(tree), "GIT_ATTR_NOSYSTEM": "1"}
    git(["init", "--quiet", "--template=", "--initial-branch=main", str(tree)])
    git([*options, "add", "--all", "--force", "."], cwd=tree, env=env)
    git([*options, "commit", "--quiet", "--no-verify", "--allow-empty", "-m", "base"], cwd=tree, env=env)
    return git(["rev-parse", "HEAD"], cwd=tree, env=env).strip()


def repo_top(repo: Path) -> Path:
    """The top of the repository ``repo`` is in (every trial's tree is the whole repository's)."""
    return Path(git(["rev-parse", "--show-toplevel"], cwd=repo).strip())


def tree_entries(repo: Path, sha: str) -> list[tuple[str, str]]:
    """``(mode, path)`` of every file, link and submodule of ``sha``'s tree, recursively, paths from the
    repository's top as the file system names them (:func:`os.fsdecode`)."""
    out = git_bytes(["ls-tree", "-r", "-z", "--full-tree", sha], cwd=repo)
    entries = []
    for record in out.split(b"\0"):
        meta, tab, path = record.partition(b"\t")
        if tab:
            entries.append((meta.split(b" ", 1)[0].decode("ascii", "replace"), os.fsdecode(path)))
    return entries


def read_blobs(repo: Path, sha: str, paths: Sequence[str], cap: int) -> dict[str, bytes]:
    """The first ``cap`` bytes of each file of ``paths`` in ``sha``'s tree (one ``git cat-file --batch``);
    a path that is not a file there, or whose name holds a newline, is left out."""
    wanted = [p for p in paths if "\n" not in p]
    if not wanted:
        return {}
    request = b"".join(f"{sha}:".encode() + os.fsencode(p) + b"\n" for p in wanted)
    out = git_bytes(["cat-file", "--batch"], cwd=repo, stdin=request)
    found: dict[str, bytes] = {}
    at = 0
    for path in wanted:
        end = out.find(b"\n", at)
        if end < 0:
            break
        header = out[at:end].split(b" ")
        at = end + 1
        if len(header) != 3 or not header[2].isdigit():
            continue  # "<object> missing" (or ambiguous): no content follows
        size = int(header[2])
        if header[1] == b"blob":
            found[path] = out[at : at + min(size, cap)]
        at += size + 1
    return found


def checkout_base(repo: Path, path: Path, sha: str, leave_out: Sequence[str] = ()) -> None:
    """The pristine base of a run: a detached worktree of ``repo`` at ``sha`` in ``path``, without the
    paths of ``leave_out`` (the lock's ``base_excluded``: the experiment's own files and copies of the skill
    under test). Every tree a trial stands on (the agent's workspace, collect's base, verify's tree, the
    preflight's) is made from this one, so none of them holds what it leaves out. Removing never follows a
    link: a path whose parent is not a plain directory of the checkout is not touched."""
    add_worktree(repo, path, sha)
    for rel in sorted(leave_out):
        here = path
        for part in rel.split("/"):
            if not here.is_dir() or here.is_symlink():
                break
            here = here / part
        else:
            try:
                st = os.lstat(here)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                remove_tree(here)
            else:
                os.unlink(here)
