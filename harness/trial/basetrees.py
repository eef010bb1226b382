"""The run's base trees: the pristine base of each base commit, made once per run before any trial
(docs/design.md#workspaces), and which kind of workspace the run's trials get on them.

A trial's cost must not grow with the size of the user's repository (issue 17). So the pristine base of
each base commit is made once per run (:class:`BaseTrees`), and each trial gets a copy-on-write view of it
where the machine allows one (:mod:`harness.trial.workspace`):

    <run>/base-<sha12>/
        checkout/             git worktree of the user's repo at the base SHA (collect's read-only /base),
                              without the lock's ``base_excluded`` (the experiment's own files, copies
                              of the skill under test): every tree below is made from it
        template/             its tree with a fresh one-commit .git, owned by the agent's uid: what
                              every trial's /workspace starts as; that .git's index and objects are
                              also what collect diffs against (the base is hashed once)
    hx-<run>-base-<sha12>     volume workspaces only: the template in a volume of the engine, filled once
                              through the archive API (the overlays' lower layer, collect's /base)

The kind (:data:`WorkspaceKind`) is decided once per run: forced by ``HARNESS_WORKSPACE``, else ``volume``
on an engine on another machine (it sees none of this machine's paths), else ``overlay`` where the
controller may mount (root) and the filesystem accepts overlayfs as upper (:func:`overlay_available`),
else ``copy``. The shared trees are only ever mounted read-only or as an overlay's lower layer, which no
trial can write; :meth:`BaseTrees.close` removes them with the run (the worktree's entry in the user's
repository included).
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from harness.errors import ConfigError, InfraError
from harness.host import gitops, workroots
from harness.host.trees import overlay_available, remove_tree
from harness.sandbox import lifecycle, names, volumes
from harness.sandbox.runtime import ContainerRuntime, DockerObject
from harness.trial import watchdog

WorkspaceKind = Literal["overlay", "copy", "volume"]
HostKind = Literal["overlay", "copy"]
"""The kinds whose trees are directories of this machine."""
KIND_VARIABLE = "HARNESS_WORKSPACE"
"""Forces a workspace kind (``overlay``, ``copy`` or ``volume``); unset: chosen by the engine and the probe."""


def kind_from_env(env: Mapping[str, str]) -> WorkspaceKind | None:
    """:data:`KIND_VARIABLE`, checked; None when it is unset or empty."""
    value = env.get(KIND_VARIABLE, "").strip()
    if not value:
        return None
    for kind in get_args(WorkspaceKind):
        if value == kind:
            return kind  # type: ignore[no-any-return]
    raise ConfigError(KIND_VARIABLE, f"must be one of overlay, copy, volume; got {value!r}")


@dataclass(frozen=True)
class EngineSide:
    """Where volume workspaces live: the engine, the image of the never-started containers that fill
    volumes (:func:`harness.sandbox.volumes.fill`), the run's labels and its id (the base volumes are the
    run's objects: :mod:`harness.sandbox.names`)."""

    runtime: ContainerRuntime
    image: str
    labels: Mapping[str, str]
    run_id: str


@dataclass(frozen=True)
class BaseTree:
    """One base commit's trees, made once per run (see the module docstring)."""

    checkout: Path
    template: Path
    index: Path
    """The template's own repository (``template/.git``): its index and objects are the base."""
    volume: str | None = None
    """Volume workspaces: the template in a volume of the engine (the overlays' lower layer, collect's /base)."""
    depth: int = 0
    """Volume workspaces: the template's deepest directory level (the in-engine watchdog's depth floor)."""


def container_user() -> tuple[int, int]:
    """The default owner of a trial's directories: the host user's own, or 1000 when the controller
    is root. A run passes its own choice (see :mod:`harness.sandbox.uids`)."""
    uid, gid = os.getuid(), os.getgid()
    return (1000, 1000) if uid == 0 else (uid, gid)


def parse_user(user: str) -> tuple[int, int]:
    """``"uid:gid"`` (a profile's user) as numbers."""
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, name), uid, gid)


_COLLECT_CONFIG = (
    "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.attributesFile=/dev/null",
    "-c", "core.excludesFile=/dev/null", "-c", "core.autocrlf=false", "-c", "core.safecrlf=false",
    "-c", "core.symlinks=true", "-c", "core.quotePath=true", "-c", "gc.auto=0", "-c", "user.name=harness",
    "-c", "user.email=harness@localhost", "-c", "commit.gpgSign=false", "-c", "core.bigFileThreshold=1m",
)  # fmt: skip
"""The options collect.sh's ``G`` passes to git: the template's repository is made under the same ones,
so its index is the base exactly as collect's full mode adds it, and collect's incremental mode starts
from it (mounted read-only at ``/basegit``: the lower layer, which no agent write reaches)."""


class BaseTrees:
    """The base trees of one run, each made on first use (thread-safe) and removed by :meth:`close`.

    ``owner`` is the uid:gid the untrusted containers run as; ``kind`` forces a workspace kind (tests),
    else overlay where :func:`overlay_available` says so."""

    def __init__(
        self,
        repo: Path,
        run_root: Path,
        owner: tuple[int, int] | None = None,
        kind: WorkspaceKind | None = None,
        side: EngineSide | None = None,
        leave_out: Sequence[str] = (),
    ) -> None:
        self.repo = repo
        self.run_root = run_root
        self.leave_out = tuple(leave_out)
        """Paths of the base commit no tree of the run holds (the lock's ``base_excluded``; see
        :func:`harness.host.gitops.checkout_base`, the one place they are left out)."""
        self.owner = owner or container_user()
        self.side = side
        """The engine of volume workspaces (None: only the controller's directories are possible)."""
        if kind == "volume" and side is None:
            raise ValueError("volume workspaces need the engine they live on")
        self._kind = kind
        self._lock = threading.Lock()
        self._trees: dict[str, BaseTree] = {}
        self._building: dict[str, threading.Lock] = {}

    @property
    def kind(self) -> WorkspaceKind:
        """Forced, else ``volume`` on a remote engine (it sees none of this machine's paths), else
        ``overlay`` where the probe allows one, else ``copy``."""
        if self._kind is None:
            if self.side is not None and self.side.runtime.endpoint().remote:
                self._kind = "volume"
            else:
                self._kind = "overlay" if overlay_available(self.run_root) else "copy"
        return self._kind

    def get(self, sha: str) -> BaseTree:
        with self._lock:
            if sha in self._trees:
                return self._trees[sha]
            building = self._building.setdefault(sha, threading.Lock())
        with building:
            with self._lock:
                if sha in self._trees:
                    return self._trees[sha]
            tree = self._build(sha)
            with self._lock:
                self._trees[sha] = tree
            return tree

    def _build(self, sha: str) -> BaseTree:
        root = self.run_root / f"base-{sha[:12]}"
        tree = BaseTree(root / "checkout", root / "template", root / "template" / ".git")
        try:
            root.mkdir(mode=0o700)
            # the one pristine base: the template, the volume and collect's /base are all made from it
            workroots.note_repository(self.run_root, self.repo)  # a gc after a kill prunes its registration
            gitops.checkout_base(self.repo, tree.checkout, sha, self.leave_out)
            tree.template.mkdir(mode=0o755)
            subprocess.run(  # the trusted checkout's tree, without its worktree .git file
                ["cp", "-a", "--reflink=auto", "--", *_entries(tree.checkout), str(tree.template)],
                check=True,
                capture_output=True,
            )
            gitops.init_snapshot_repo(tree.template, _COLLECT_CONFIG)
            # one pack instead of a loose object per file: collect's `rm -rf /verify/.git` on the overlay
            # writes a whiteout per entry, and the agent's git, teardown and the copy fallback walk them
            gitops.git(["repack", "-a", "-d", "-q", "--window=0"], cwd=tree.template, env=_git_dir(tree.template))
            agent_config = str(tree.template / ".git" / "config")
            gitops.git(["config", "--file", agent_config, "user.name", "agent"])
            gitops.git(["config", "--file", agent_config, "user.email", "agent@sandbox"])
            if os.getuid() == 0:
                _chown_tree(tree.template, *self.owner)
            if self.kind == "volume":
                tree = self._to_volume(tree, sha)
        except (OSError, subprocess.CalledProcessError) as e:
            self._remove(tree)
            detail = e.stderr.decode("utf-8", "replace")[-300:] if isinstance(e, subprocess.CalledProcessError) else e
            raise InfraError(f"preparing the base tree of {sha[:12]} failed: {detail}") from e
        except BaseException:
            self._remove(tree)
            raise
        return tree

    def _to_volume(self, tree: BaseTree, sha: str) -> BaseTree:
        """The template, copied once into a volume of the engine (one archive stream)."""
        assert self.side is not None
        volume = names.run_object(self.side.run_id, f"base-{sha[:12]}")
        uid, gid = self.owner
        volumes.make(
            self.side.runtime,
            volume,
            volumes.tar_tree(tree.template, uid=uid, gid=gid),
            image=self.side.image,
            labels=self.side.labels,
        )
        volumes.probe_overlay(self.side.runtime, volume, image=self.side.image, labels=self.side.labels)
        return BaseTree(tree.checkout, tree.template, tree.index, volume, watchdog.census(tree.template).depth)

    def _remove(self, tree: BaseTree) -> None:
        if tree.volume is not None and self.side is not None:
            lifecycle.remove_objects(self.side.runtime, [DockerObject("volume", tree.volume)])
        if tree.checkout.exists():
            gitops.remove_worktree(self.repo, tree.checkout)
        remove_tree(tree.checkout.parent)

    def close(self) -> None:
        """Remove every base tree (worktree admin entry in the user's repo included). Idempotent."""
        with self._lock:
            trees, self._trees = list(self._trees.values()), {}
        for tree in trees:
            self._remove(tree)


def _git_dir(tree: Path) -> dict[str, str]:
    return {"GIT_DIR": str(tree / ".git"), "GIT_WORK_TREE": str(tree)}


def _entries(directory: Path) -> list[str]:
    return [str(directory / name) for name in sorted(os.listdir(directory)) if name != ".git"]
