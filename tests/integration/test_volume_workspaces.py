"""Volume workspaces on the real engine (issue 15 item 7): the trial's trees as overlay volumes the
engine makes, for an engine that shares no path with the controller.

Runs on both engines (``make test-remote`` runs it again on the docker-in-docker engine): nothing here
mounts a path of the controller's. The agent's edits are made by a hardened container of the agent's
uid (the same edits tests/integration/test_workspaces.py makes on the host); everything is read back
through containers and the archive API.

- collect.sh's volume mode (it lists the overlay's upper directory itself) makes byte for byte the
  patch, stats and verify tree its full mode makes from the same merged workspace (the full mode is
  held equal to the host overlay's incremental mode by test_workspaces.py);
- the base volume is never written, and a trial's volumes are gone after teardown.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.sandbox import lifecycle, roles
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import RUN, make_labels
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import ContainerSpec, DockerObject, ExitInfo, VolumeMount
from harness.study.config import Resources
from harness.trial import workspace
from harness.trial.basetrees import BaseTree, BaseTrees, EngineSide, parse_user
from harness.trial.workspace import TrialVolumes
from tests.factories import init_repo, run_git
from tests.integration.helpers import volume_probe_spec
from tests.integration.test_workspaces import BASE, _edits, _tree, assert_patch_holds_the_edits

pytestmark = [pytest.mark.docker]

RUN_ID = "volws"
PROTECTED = ("docs/guide.md",)


@dataclass
class Rig:
    engine: Engine
    profile: roles.Profile
    side: EngineSide
    bases: BaseTrees
    base: BaseTree
    labels: dict[str, str]
    run_root: Path

    def trial(self, name: str) -> TrialVolumes:
        vols = TrialVolumes.of(TrialNames(RUN_ID, name))
        workspace.prepare_volumes(self.side, self.base, vols, self.labels, parse_user(self.profile.user))
        return vols

    def container(self, name: str, command: tuple[str, ...], *mounts: VolumeMount) -> ContainerSpec:
        return volume_probe_spec(self.profile, f"hx-{RUN_ID}-{name}", self.labels, command, *mounts)

    def archive(self, volume: str, name: str) -> bytes:
        """A tar of what a container sees of ``volume`` (its entries under ``v/``), through the archive API."""
        run = lifecycle.run(
            self.engine,
            self.container(name, ("true",), VolumeMount(volume, "/v", read_only=True)),
            deadline_s=120,
            archive="/v",
            archive_cap=64 << 20,
        )
        assert run.archive is not None and not run.archive_truncated
        return run.archive

    def tree(self, volume: str, name: str) -> dict[str, tuple[str, bytes]]:
        """What a container sees of ``volume``: its files, links and directories."""
        dest = self.run_root / f"read-{name}"
        with tarfile.open(fileobj=io.BytesIO(self.archive(volume, name))) as tar:
            tar.extractall(dest, filter="fully_trusted")  # our own test tree, into a temp dir
        return _tree(dest / "v")

    def names(self, volume: str, name: str) -> dict[str, bool]:
        """Every entry of ``volume`` (relative to its root) -> whether it is a whiteout: a character device,
        or a hard link to one (the kernel may link every whiteout to one shared inode)."""
        with tarfile.open(fileobj=io.BytesIO(self.archive(volume, name))) as tar:
            return {m.name.removeprefix("v/"): m.ischr() or m.islnk() for m in tar.getmembers() if m.name != "v"}


@pytest.fixture
def rig(tmp_path: Path, engine: Engine, images: ImageSet) -> Iterator[Rig]:
    repo = tmp_path / "repo"
    init_repo(repo, BASE)
    (repo / "bin/run.sh").chmod(0o755)
    run_git(repo, "add", "-f", "build.log", "bin/run.sh")
    run_git(repo, "commit", "-q", "--no-verify", "-m", "an ignored file tracked, an executable")
    sha = run_git(repo, "rev-parse", "HEAD").decode().strip()
    users = roles.role_users(engine, os.getuid(), os.getgid())
    profile = roles.make_profile(Resources(), images.trial, images.sidecar, users, None)
    labels = make_labels(RUN_ID, role="trial", trial_id="volws", ttl_s=600)
    side = EngineSide(engine, images.sidecar, labels, RUN_ID)
    run_root = tmp_path / "run"
    run_root.mkdir()
    bases = BaseTrees(repo, run_root, users.agent, kind="volume", side=side)
    try:
        yield Rig(engine, profile, side, bases, bases.get(sha), labels, run_root)
    finally:
        lifecycle.remove_labelled(engine, {RUN: RUN_ID})
        bases.close()


def _edit(rig: Rig, vols: TrialVolumes) -> None:
    """``_edits`` run inside the engine, as the agent, on the trial's /workspace volume."""
    source = (
        "import os, shutil\nfrom pathlib import Path\n" + inspect.getsource(_edits) + "\n_edits(Path('/workspace'))\n"
    )
    spec = rig.container("edit", ("python3", "-c", source), VolumeMount(vols.workspace, "/workspace", read_only=False))
    run = lifecycle.run(rig.engine, spec, deadline_s=120)
    assert run.exit_code == 0, run.stderr[-800:]


def _collect(
    rig: Rig, name: str, vols: TrialVolumes, *, workspace_of: TrialVolumes | None = None, status: bytes = b"ok\n"
) -> dict[str, bytes]:
    """collect.sh on ``vols`` (its scratch's out/ and its verify volume), in volume mode; with
    ``workspace_of``, in full mode over that trial's workspace (COLLECT_UPPER unset)."""
    assert rig.base.volume is not None
    source = workspace_of if workspace_of is not None else vols
    spec = roles.collect_volume_spec(
        rig.profile,
        name=f"hx-{RUN_ID}-{name}",
        labels=rig.labels,
        base_volume=rig.base.volume,
        workspace_volume=source.workspace,
        scratch_volume=vols.scratch,
        verify_volume=vols.verify,
        protected=PROTECTED,
        patch_cap=1 << 20,
    )
    if workspace_of is not None:
        env = {k: v for k, v in spec.env.items() if k != "COLLECT_UPPER"}
        spec = dataclasses.replace(spec, env=env)
    run: ExitInfo = lifecycle.run(
        rig.engine, spec, deadline_s=120, archive=f"{roles.SCRATCH_MOUNT}/out", archive_cap=16 << 20
    )
    out = workspace.read_out_archive(run.archive, 1 << 20)
    assert out.get("status") == status, (name, out.get("status"), run.stderr[-800:])
    return out


def test_volume_extraction_is_byte_identical_to_the_full_one(rig: Rig) -> None:
    edited, reference = rig.trial("edited"), rig.trial("reference")
    base_before = rig.tree(rig.base.volume or "", "base-before")
    assert rig.tree(edited.workspace, "ws-before") == base_before, "a fresh workspace is the base"
    _edit(rig, edited)
    after = rig.tree(edited.workspace, "ws-after")
    assert after != base_before and "src/new.py" in after, "positive control: the edits landed"
    upper = rig.names(edited.scratch, "scratch")
    assert "upper/src/new.py" in upper and "upper/.gitignore" not in upper, "the upper layer holds only changes"
    assert upper["upper/src/util.py"], "a deletion is a whiteout (a character device) in the upper layer"

    inc = _collect(rig, "inc-collect", edited)
    full = _collect(rig, "full-collect", reference, workspace_of=edited)
    assert inc["patch.diff"] == full["patch.diff"]
    assert inc["numstat"] == full["numstat"] and inc["raw"] == full["raw"]
    assert inc["nested"] == full["nested"] == b""
    assert_patch_holds_the_edits(inc["patch.diff"])
    inc_verify = rig.tree(edited.verify, "verify-inc")
    full_verify = rig.tree(reference.verify, "verify-full")
    assert inc_verify == full_verify, "verify trees: base + patch, protected path restored"
    assert inc_verify["docs/guide.md"][0] == oct(0), "the protected path is the base's (not executable)"
    assert rig.tree(rig.base.volume or "", "base-after") == base_before, "the base volume was never written"


def test_a_stopped_volume_extraction_still_lists_the_agents_links(rig: Rig) -> None:
    """Issue 24 item 10, on a volume workspace (collect lists the upper layer itself): a FIFO named
    .gitignore stops extraction before git; the links the agent made are listed all the same."""
    vols = rig.trial("stopped")
    _edit(rig, vols)
    fifo = rig.container(
        "fifo",
        ("sh", "-c", "rm /workspace/.gitignore && mkfifo /workspace/.gitignore"),
        VolumeMount(vols.workspace, "/workspace", read_only=False),
    )
    assert lifecycle.run(rig.engine, fifo, deadline_s=60).exit_code == 0
    stopped = b"special file named .git* in the workspace (not opened; git would block on it)\n"
    out = _collect(rig, "stopped-collect", vols, status=stopped)
    parts = out["links"].split(b"\0")
    listed = {(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)}
    assert listed == {(b"/workspace/README.md", b"docs/guide.md"), (b"/workspace/escape-link", b"/etc/passwd")}
    assert out["special"] == b"/workspace/.gitignore\0"


def test_a_trial_s_volumes_go_with_teardown(rig: Rig) -> None:
    vols = rig.trial("gone")
    names = {v.name for v in vols.objects()}
    listed = {o.name for o in rig.engine.labelled({RUN: RUN_ID}) if o.kind == "volume"}
    assert names <= listed, "positive control: the trial's volumes exist and carry its labels"
    removal = lifecycle.remove_objects(rig.engine, vols.objects())
    assert not removal.errors
    listed = {o.name for o in rig.engine.labelled({RUN: RUN_ID}) if o.kind == "volume"}
    assert not names & listed
    assert rig.base.volume in listed, "the run's base volume stays until the run ends"
    lifecycle.remove_objects(rig.engine, [DockerObject("volume", rig.base.volume or "")])
