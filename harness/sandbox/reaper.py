"""What killed runs left behind, found and removed: the reaper behind ``skilltrial gc`` and every start.

Two kinds of leftovers. Docker objects are found by label (:func:`harness.sandbox.labels.orphan_reason`:
a dead owner on this host, or past its expiry). Run directories (agent-written trees and the gateway's
key file) are found by the owner file every run writes (``<pid> <host>`` of its controller: a dead one
on this host), in every work root this user's runs have used (:mod:`harness.host.workroots`), so a gc
under another ``TMPDIR`` than the run's finds them too. A removed run directory's git worktrees go with
it from the repositories it noted (``git worktree prune`` there: the user's repository keeps no
registration of a tree that is gone). A live run's objects and directories are never
touched (``remove_everything`` is the explicit exception, ``skilltrial gc --all``), and removal never
follows links.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.host import gitops, workroots
from harness.host.paths import HostPaths
from harness.host.trees import remove_tree
from harness.host.workroots import OWNER_FILE
from harness.sandbox import lifecycle
from harness.sandbox.labels import OWNER, OWNER_VALUE, Reaped, pid_alive, reap_orphans
from harness.sandbox.runtime import Removal, Runtime


@dataclass(frozen=True)
class Cleanup:
    objects: tuple[Reaped, ...]
    """Every Docker object removed, with why it was an orphan."""
    trees: int
    """Run directories of killed controllers removed."""


def reap(engine: Runtime, paths: HostPaths, *, own_pid: int | None = None) -> Cleanup:
    """Remove what killed runs left: orphaned Docker objects, then their run directories."""
    return Cleanup(tuple(reap_orphans(engine, own_pid=own_pid)), sweep_known_roots(paths))


def remove_everything(engine: Runtime) -> Removal:
    """Every harness object on the engine, live runs' included (``skilltrial gc --all``): (removed, errors)."""
    return lifecycle.remove_labelled(engine, {OWNER: OWNER_VALUE})


def sweep_work_root(work: Path, *, host: str | None = None, alive: Callable[[int], bool] = pid_alive) -> int:
    """Remove run directories whose controller (same host) is gone. Returns how many were removed."""
    host = host or socket.gethostname()
    removed = 0
    try:
        entries = list(work.iterdir())
    except OSError:
        return 0
    for run_dir in entries:
        owner = run_dir / OWNER_FILE
        try:
            pid_text, _, owner_host = owner.read_text().strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if owner_host != host or pid == os.getpid() or alive(pid):
            continue
        repositories = workroots.noted_repositories(run_dir)
        remove_tree(run_dir)  # agent-written trees: no symlink following, any depth
        for repo in repositories:  # their worktrees are gone: so are the registrations naming them
            if repo.is_dir():
                gitops.prune_worktrees(repo)
        removed += 1
    return removed


def sweep_known_roots(paths: HostPaths) -> int:
    """Sweep every work root this user's runs have used (the default one and every recorded one)."""
    return sum(sweep_work_root(root) for root in workroots.known(paths.work_root, paths.work_roots))
