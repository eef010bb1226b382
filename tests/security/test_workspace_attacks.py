"""Attacks on overlay workspaces (issue 17), from inside hardened containers on the real engine.

Every trial of a run stands on one shared base tree (the overlay's lower layer). An agent that could
write it would change every later trial's base, and one trial that could see another's upper layer
would leak work between arms. Each attack below runs in a container made by the engine's hardening
profile with the trial's workspace mounted as the agent's is; each has a positive control showing the
probe would have seen the attack succeed.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.host.trees import mounts_below, overlay_available
from harness.sandbox import lifecycle, roles
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import BindMount, ContainerSpec, Limits
from harness.trial import workspace
from harness.trial.basetrees import BaseTree, BaseTrees
from harness.trial.workspace import TrialDirs
from tests.factories import init_repo

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not overlay_available(Path("/tmp")), reason="overlay workspaces need a root controller"),
]

ATTACK = textwrap.dedent(
    r"""
    cd /workspace
    # 1. rewrite and delete every base file, through the overlay
    find . -path ./.git -prune -o -type f -print | while read -r f; do echo pwned > "$f"; done
    rm -rf src
    echo planted > planted.txt
    # 2. reach the lower layer by its host path (mountinfo names it) and write there
    lower=$(sed -n 's/.*lowerdir=\([^,]*\).*/\1/p' /proc/self/mountinfo | head -1)
    echo "lower=$lower"
    if [ -n "$lower" ] && echo pwned > "$lower/README.md" 2>/dev/null; then echo lower_write=ok; else echo lower_write=denied; fi
    # 3. mark a directory opaque, or remount: both need privileges the agent does not have
    mkdir -p op
    if python3 -c "import os; os.setxattr('op', 'trusted.overlay.opaque', b'y')" 2>/dev/null
    then echo opaque=ok; else echo opaque=denied; fi
    python3 -c "import os; os.setxattr('planted.txt', 'user.probe', b'1')" && echo user_xattr=ok
    if mount -o remount,rw /workspace 2>/dev/null; then echo remount=ok; else echo remount=denied; fi
    # 4. a setuid copy of a shell: the host mount is nosuid
    cp /bin/sh ./suid-sh && chmod 4755 ./suid-sh && echo suid_made=yes
    """
)


@pytest.fixture
def two_trials(tmp_path: Path, engine: Engine) -> Iterator[tuple[BaseTree, TrialDirs, TrialDirs, tuple[int, int]]]:
    repo = tmp_path / "repo"
    sha = init_repo(repo, {"README.md": "base\n", "src/app.py": "X = 1\n"})
    users = roles.role_users(engine, os.getuid(), os.getgid())
    run_root = tmp_path / "run"
    run_root.mkdir()
    bases = BaseTrees(repo, run_root, users.agent, kind="overlay")
    base = bases.get(sha)
    a = workspace.prepare(base, run_root / "a", users.agent, "overlay")
    b = workspace.prepare(base, run_root / "b", users.agent, "overlay")
    try:
        yield base, a, b, users.agent
    finally:
        workspace.remove(a)
        workspace.remove(b)
        bases.close()
        assert not mounts_below(run_root)


def _run(engine: Engine, image: str, user: tuple[int, int], name: str, script: str, mount: BindMount) -> str:
    spec = ContainerSpec(
        name=name,
        image=image,
        command=("sh", "-c", script),
        labels=make_labels("wsattack", role="trial", trial_id=name, ttl_s=600),
        user=f"{user[0]}:{user[1]}",
        mounts=(mount,),
        limits=Limits(memory="256m", cpus=1.0, pids=64),
        workdir="/",
    )
    run = lifecycle.run(engine, spec, deadline_s=120)
    return (run.stdout + run.stderr).decode("utf-8", "replace")


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and ".git" not in p.relative_to(root).parts
    }


def test_an_agent_cannot_write_the_shared_base_or_another_trials_workspace(
    engine: Engine, images: ImageSet, two_trials: tuple[BaseTree, TrialDirs, TrialDirs, tuple[int, int]]
) -> None:
    base, a, b, user = two_trials
    template_before, b_before = _files(base.template), _files(b.workspace)
    out = _run(engine, images.trial, user, "hx-wsattack-a-agent", ATTACK, BindMount(a.workspace, "/workspace", False))
    assert "suid_made=yes" in out, out  # positive control: the script ran to its end
    assert "user_xattr=ok" in out, "positive control: the xattr probe itself works (an unprivileged name)"
    assert (a.workspace / "planted.txt").read_text() == "planted\n", "positive control: the agent's writes land"
    assert (a.upper / "planted.txt").exists(), "positive control: in the trial's own upper layer"
    assert _files(base.template) == template_before, "the shared base is unchanged"
    assert _files(b.workspace) == b_before, "the other trial sees none of it"
    for attempt in ("lower_write", "opaque", "remount"):
        assert f"{attempt}=denied" in out, out
    # the setuid bit may be set on the file, but the host mount does not honour it
    opts = next(line for line in Path("/proc/self/mountinfo").read_text().splitlines() if f" {a.workspace} " in line)
    assert "nosuid" in opts.split(" ")[5] and "nodev" in opts.split(" ")[5], opts
    assert b"/workspace/suid-sh" in workspace.changes(a.upper).special, "the setuid file is flagged for the patch"


def test_positive_control_a_writable_bind_of_the_base_would_have_been_written(
    engine: Engine, images: ImageSet, two_trials: tuple[BaseTree, TrialDirs, TrialDirs, tuple[int, int]]
) -> None:
    """Without the overlay (the template bind-mounted read-write), the same attack rewrites the base:
    the checks above can fail."""
    base, _a, _b, user = two_trials
    before = _files(base.template)
    _run(engine, images.trial, user, "hx-wsattack-ctl-agent", ATTACK, BindMount(base.template, "/workspace", False))
    assert _files(base.template) != before
