"""harness.host.gitops: worktrees of one repository added and removed by many trials at once."""

from __future__ import annotations

import threading
from pathlib import Path

from harness.host import gitops
from tests.factories import init_repo, run_git


def test_concurrent_worktree_adds_and_removes_in_one_repository_all_succeed(tmp_path: Path) -> None:
    """Every trial's worktree is named base/: unserialised, git races on .git/worktrees/base<N>."""
    repo = tmp_path / "repo"
    sha = init_repo(repo, {"a.txt": "a\n"})
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
    assert len(run_git(repo, "worktree", "list").splitlines()) == 1, "every trial's worktree is gone"
