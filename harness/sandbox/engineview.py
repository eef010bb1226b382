"""Does the engine see this controller's files? Asked before a run's first trial, and by ``skilltrial doctor``.

Overlay and copy workspaces are directories of the controller that each trial's containers get as bind
mounts: the agent's ``/workspace``, collect's and verify's trees. An engine that does not share the
controller's view of its files mounts something else there: with the controller in a private mount
namespace, its overlay mounts are not the engine's (an empty directory in their place) and a tmpfs of its
own is not there at all; a rootless engine in another user's namespace, or a remote engine behind a socket
that looks local, sees its own machine's paths. Every agent then works on an empty ``/workspace`` (or no
container starts), every trial ends with a rejected patch or an infrastructure error, and the run reports
INCONCLUSIVE as if the skill had been measured.

:func:`probe` writes a random token into a trial-shaped directory under the run's own directory (through
an overlay mount when trials get overlays) and reads it in a container through the bind mount an agent's
``/workspace`` gets. Anything but the token stops the run before any trial with :class:`EngineCannotSee`
(an infrastructure error, exit 3) that names the way out: ``HARNESS_WORKSPACE=volume``, workspaces the
engine makes itself (:mod:`harness.trial.workspace`). Volume workspaces need no probe: no trial tree is
a path of the controller's then.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path

from harness.errors import InfraError
from harness.host.trees import mount_overlay, remove_tree
from harness.sandbox import lifecycle
from harness.sandbox.labels import ROLE
from harness.sandbox.runtime import BindMount, ContainerRuntime, ContainerSpec, Limits

TOKEN_FILE = "engine-probe-token"
PROBE_ROLE = "engine-probe"
REMEDY = (
    "run with HARNESS_WORKSPACE=volume (the engine then makes every trial's workspace itself), or run "
    "the controller in the engine's mount namespace (not in its own, e.g. not under `unshare -m`)"
)


class EngineCannotSee(InfraError):
    """The engine does not see the files this controller writes for its trials."""


def probe(
    engine: ContainerRuntime,
    root: Path,
    *,
    overlay: bool,
    image: str,
    user: str,
    labels: Mapping[str, str],
    name: str,
) -> None:
    """A token written under ``root`` (made here, removed on every path; an overlay's merged directory when
    ``overlay``) must be what a container of ``user`` reads through a read-only bind mount of it. Raises
    :class:`EngineCannotSee` otherwise (and when the engine refuses the mount)."""
    token = secrets.token_hex(16)
    tree = root / "workspace"
    root.mkdir(mode=0o700)  # a new directory of the run's: removed on every path below
    try:
        try:
            _write_tree(root, tree, token, overlay=overlay)
        except OSError as e:
            raise InfraError(f"preparing the engine probe in {root} failed: {e}") from e
        spec = ContainerSpec(
            name=name,
            image=image,
            command=("cat", f"/workspace/{TOKEN_FILE}"),
            labels={**labels, ROLE: PROBE_ROLE},
            user=user,
            mounts=(BindMount(tree, "/workspace", read_only=True),),
            limits=Limits(memory="64m", cpus=0.5, pids=16, tmpfs_size="1m"),
            tmpfs=("/tmp",),
            workdir="/tmp",
        )
        try:
            run = lifecycle.run(engine, spec, deadline_s=60, output_cap=4096)
        except InfraError as e:  # e.g. "bind source path does not exist": the engine has no such directory
            raise _cannot_see(tree, f"a container with it mounted did not run: {e}") from e
    finally:
        remove_tree(root)  # unmounts the overlay first
    seen = run.stdout.decode("utf-8", "replace").strip()
    if run.exit_code == 0 and seen == token:
        return
    if run.exit_code == 0:
        what = f"read {seen[:80]!r} instead"
    else:
        what = f"could not read it: {run.stderr.decode('utf-8', 'replace').strip()[-200:]}"
    raise _cannot_see(tree, f"a container with it mounted {what}")


def _write_tree(root: Path, tree: Path, token: str, *, overlay: bool) -> None:
    """The token in ``tree``: a plain directory (copy workspaces), or an overlay's merged view of a lower
    directory holding it (overlay workspaces: the mount itself must be the engine's too)."""
    top = root / "lower" if overlay else tree
    for path in (top, *((root / "upper", root / "work", tree) if overlay else ())):
        path.mkdir(mode=0o755)
    (top / TOKEN_FILE).write_text(token)
    (top / TOKEN_FILE).chmod(0o444)
    if overlay:
        mount_overlay(top, root / "upper", root / "work", tree)


def _cannot_see(tree: Path, what: str) -> EngineCannotSee:
    return EngineCannotSee(
        f"the container engine cannot see this controller's files: a token written to {tree} was not there "
        f"inside a container ({what}). Every trial's /workspace would be empty or missing: a private mount "
        "namespace, a rootless engine or a remote engine that looks local",
        hint=REMEDY,
    )
