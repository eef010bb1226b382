"""harness.gitops: worktrees of one repository added and removed by many trials at once."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from harness import gitops


def make_repo(path: Path) -> str:
    path.mkdir()
    (path / "a.txt").write_text("a\n")
    git = ["git", "-c", "user.name=x", "-c", "user.email=x@x", "-C", str(path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def test_concurrent_worktree_adds_and_removes_in_one_repository_all_succeed(tmp_path: Path) -> None:
    """Every trial's worktree is named base/: unserialised, git races on .git/worktrees/base<N>."""
    repo = tmp_path / "repo"
    sha = make_repo(repo)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        path = tmp_path / f"trial{i}" / "base"
        path.parent.mkdir()
        try:
            gitops.add_worktree(repo, path, sha)
            assert (path / "a.txt").read_text() == "a\n"
            gitops.remove_worktree(repo, path)
        except BaseException as e:  # collected: a thread's failure must fail the test
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True, check=True)
    assert len(listed.stdout.splitlines()) == 1
