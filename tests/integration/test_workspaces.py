"""Overlay workspaces on the real engine (issue 17): collect.sh's incremental mode, which reads only what
the agent wrote, makes byte for byte the patch, stats and verify tree its full mode makes, for every kind
of change an agent can make; and a trial's overlay leaves nothing mounted or written on the base.

The same edits are applied to an overlay workspace and to a plain copy of the same base tree, then the
real collect container runs in each mode. (What an agent can do *against* the overlay is attacked in
tests/security/test_workspace_attacks.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.host.trees import mounts_below, overlay_available
from harness.sandbox import lifecycle, roles
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import make_labels
from harness.study.config import Resources
from harness.trial import workspace
from harness.trial.basetrees import BaseTrees
from harness.trial.workspace import TrialDirs
from tests.factories import init_repo, run_git

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not overlay_available(Path("/tmp")), reason="overlay workspaces need a root controller"),
]

BASE = {
    "README.md": "readme\n",
    "src/app.py": "def f():\n    return 1\n",
    "src/util.py": "X = 1\n",
    "src/deep/a/b/c.txt": "deep\n",
    "src/gone/one.txt": "1\n",
    "src/gone/two.txt": "2\n",
    "src/replaced/old.txt": "old\n",
    "docs/guide.md": "guide\n",
    "docs/to-dir": "a file that becomes a directory\n",
    "build.log": "tracked although ignored\n",
    ".gitignore": "*.log\nignored-dir/\n",
    "bin/run.sh": "#!/bin/sh\necho run\n",
    "data.bin": "\x00\x01binary\x02",
}


def _edits(ws: Path) -> None:
    """Every kind of change collect must see: edit, add, delete, replace, chmod, ignore rules, links."""
    (ws / "src/app.py").write_text("def f():\n    return 2\n")  # modified
    (ws / "src/new.py").write_text("NEW = True\n")  # added
    (ws / "src/util.py").unlink()  # deleted (a whiteout)
    shutil.rmtree(ws / "src/gone")  # a deleted directory (one whiteout for the tree)
    shutil.rmtree(ws / "src/replaced")  # deleted and made again: an opaque directory
    (ws / "src/replaced").mkdir()
    (ws / "src/replaced/new.txt").write_text("new\n")
    (ws / "src/deep/a/b/c.txt").write_text("deeper\n")  # a change far down (copy-up of the parents)
    (ws / "src/deep/a/b/d/e").mkdir(parents=True)
    (ws / "src/deep/a/b/d/e/f.txt").write_text("new deep\n")
    os.unlink(ws / "docs/to-dir")  # a file that becomes a directory
    (ws / "docs/to-dir").mkdir()
    (ws / "docs/to-dir/inside.md").write_text("inside\n")
    shutil.rmtree(ws / "bin")  # a directory that becomes a file
    (ws / "bin").write_text("now a file\n")
    os.unlink(ws / "README.md")  # a file that becomes a symlink
    os.symlink("docs/guide.md", ws / "README.md")
    os.symlink("/etc/passwd", ws / "escape-link")  # a new symlink (rejected later, extracted the same)
    (ws / "docs/guide.md").chmod(0o755)  # a mode change only
    (ws / "new.log").write_text("ignored: not in the patch\n")
    (ws / "ignored-dir").mkdir()
    (ws / "ignored-dir/x.txt").write_text("ignored too\n")
    (ws / "build.log").write_text("tracked and ignored: still in the patch\n")
    (ws / "weird name\twith tab*?.txt").write_text("glob characters are literal\n")
    (ws / "data.bin").write_bytes(b"\x00\x02changed binary\xff")
    (ws / "empty-dir").mkdir()  # git has no empty directories: nothing in either patch
    (ws / ".git" / "planted").write_text("the agent's own .git is never part of the patch\n")
    os.rename(ws / "src/deep/a/b/c.txt", ws / "src/deep/moved.txt")  # a rename (delete + add)


@pytest.fixture
def trees(tmp_path: Path, engine: Engine) -> Iterator[Callable[[str], tuple[BaseTrees, TrialDirs]]]:
    repo = tmp_path / "repo"
    init_repo(repo, BASE)
    (repo / "bin/run.sh").chmod(0o755)
    run_git(repo, "add", "-f", "build.log", "bin/run.sh")  # tracked although .gitignore matches it
    os.symlink("guide.md", repo / "docs/base-link")  # a link of the base's own: never the agent's
    run_git(repo, "add", "docs/base-link")
    run_git(repo, "commit", "-q", "--no-verify", "-m", "an ignored file tracked, an executable, a link")
    sha = run_git(repo, "rev-parse", "HEAD").decode().strip()
    users = roles.role_users(engine, os.getuid(), os.getgid())
    made: list[BaseTrees] = []

    def make(kind: str) -> tuple[BaseTrees, TrialDirs]:
        run_root = tmp_path / f"run-{kind}"
        run_root.mkdir()
        bases = BaseTrees(repo, run_root, users.agent, kind=kind)  # type: ignore[arg-type]
        made.append(bases)
        base = bases.get(sha)
        return bases, workspace.prepare(base, run_root / "trial", users.agent, kind)  # type: ignore[arg-type]

    yield make
    for bases in made:
        workspace.remove(TrialDirs.at(bases.run_root / "trial"))
        bases.close()
        assert not mounts_below(bases.run_root)


def _collect(
    engine: Engine, images: ImageSet, bases: BaseTrees, dirs: TrialDirs, name: str, *, status: bytes = b"ok\n"
) -> dict[str, bytes]:
    users = roles.role_users(engine, os.getuid(), os.getgid())
    profile = roles.make_profile(Resources(), images.trial, images.sidecar, users, None)
    base = next(iter(bases._trees.values()))
    if dirs.kind == "overlay":
        workspace.write_changes(dirs)
    spec = roles.collect_spec(
        profile,
        name=name,
        labels=make_labels("wstest", role="trial", trial_id=name, ttl_s=600),
        base=base.checkout,
        workspace=dirs.workspace,
        out=dirs.out,
        verify_tree=dirs.verify,
        protected=("docs/guide.md",),
        patch_cap=1 << 20,
        incremental=(dirs.changes, base.index) if dirs.kind == "overlay" else None,
    )
    run = lifecycle.run(engine, spec, deadline_s=120)
    names = ("status", "patch.diff", "numstat", "raw", "special", "nested", "links")
    out = {n: (dirs.out / n).read_bytes() for n in names if (dirs.out / n).exists()}
    assert out["status"] == status, (dirs.kind, out["status"], run.stderr[-800:])
    return out


def assert_patch_holds_the_edits(diff: bytes) -> None:
    """What :func:`_edits` changed is in the patch; what git ignores or the agent's own .git holds is not."""
    patch = diff.decode("utf-8", "replace")
    for present in ("src/new.py", "src/util.py", "src/gone/one.txt", "src/replaced/old.txt", "build.log"):
        assert present in patch, present
    for absent in ("new.log", "ignored-dir", "planted", "empty-dir"):
        assert absent not in patch, absent


def _tree(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry but the agent's .git (its index holds stat data of whichever copy it is)."""
    seen: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and ".git" in dirnames:
            dirnames.remove(".git")
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            if p.is_symlink():
                seen[rel] = ("link", os.readlink(p).encode())
            elif p.is_dir():
                seen[rel] = ("dir", b"")
            else:
                seen[rel] = (oct(p.stat().st_mode & 0o111), p.read_bytes())
    return seen


def test_incremental_extraction_is_byte_identical_to_the_full_one(
    engine: Engine, images: ImageSet, trees: Callable[[str], tuple[BaseTrees, TrialDirs]]
) -> None:
    over_bases, over = trees("overlay")
    copy_bases, copy = trees("copy")
    assert over.kind == "overlay" and copy.kind == "copy"
    assert _tree(over.workspace) == _tree(copy.workspace), "the two workspaces start equal"
    _edits(over.workspace)
    _edits(copy.workspace)
    assert _tree(over.workspace) == _tree(copy.workspace), "and are equal after the same edits"
    # positive control: the overlay's upper directory holds only what changed, not the base
    upper = {str(p.relative_to(over.upper)) for p in over.upper.rglob("*")}
    assert "src/new.py" in upper and "docs/guide.md" in upper and ".gitignore" not in upper
    assert len(upper) < 40, sorted(upper)

    inc = _collect(engine, images, over_bases, over, "hx-wstest-inc-collect")
    full = _collect(engine, images, copy_bases, copy, "hx-wstest-full-collect")
    assert inc["patch.diff"] == full["patch.diff"]
    assert inc["numstat"] == full["numstat"] and inc["raw"] == full["raw"]
    assert inc["nested"] == full["nested"] == b""
    assert_patch_holds_the_edits(inc["patch.diff"])
    assert _tree(over.verify) == _tree(copy.verify), "verify trees: base + patch, protected path restored"
    assert (over.verify / "docs/guide.md").stat().st_mode & 0o111 == 0, "the protected path is the base's"


def test_a_stopped_extraction_lists_the_agents_links_the_same_in_both_modes(
    engine: Engine, images: ImageSet, trees: Callable[[str], tuple[BaseTrees, TrialDirs]]
) -> None:
    """Issue 24 item 10: a FIFO named .gitignore stops collect before git runs; it still lists the links the
    agent made or changed (none of the base's own), incremental and full mode alike."""
    over_bases, over = trees("overlay")
    copy_bases, copy = trees("copy")
    for ws in (over.workspace, copy.workspace):
        _edits(ws)
        (ws / ".gitignore").unlink()
        os.mkfifo(ws / ".gitignore")
        os.symlink("../../../etc/shadow", ws / "src/deep/up-and-out")
    stopped = b"special file named .git* in the workspace (not opened; git would block on it)\n"
    inc = _collect(engine, images, over_bases, over, "hx-wstest-inc-stop", status=stopped)
    full = _collect(engine, images, copy_bases, copy, "hx-wstest-full-stop", status=stopped)
    assert "patch.diff" not in inc and "patch.diff" not in full, "git never ran"

    def pairs(links: bytes) -> set[tuple[bytes, bytes]]:
        parts = links.split(b"\0")
        return {(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)}

    expected = {
        (b"/workspace/README.md", b"docs/guide.md"),
        (b"/workspace/escape-link", b"/etc/passwd"),
        (b"/workspace/src/deep/up-and-out", b"../../../etc/shadow"),
    }
    assert pairs(inc["links"]) == pairs(full["links"]) == expected
    assert (copy.workspace / "docs/base-link").is_symlink(), "positive control: the base's link is there, unlisted"


def test_the_base_tree_is_never_written_and_a_trial_unmounts(
    trees: Callable[[str], tuple[BaseTrees, TrialDirs]],
) -> None:
    bases, dirs = trees("overlay")
    base = next(iter(bases._trees.values()))
    before = _tree(base.template)
    _edits(dirs.workspace)
    assert _tree(base.template) == before, "every write went to the trial's upper directory"
    assert mounts_below(dirs.root), "positive control: the trial's overlays are mounted while it lives"
    workspace.remove(dirs)
    assert not mounts_below(dirs.root) and not dirs.root.exists()
    assert _tree(base.template) == before, "removing the trial did not delete through the overlay"


def test_a_run_directory_with_live_overlays_is_removed_without_touching_the_base(
    trees: Callable[[str], tuple[BaseTrees, TrialDirs]],
) -> None:
    """What `skilltrial gc` does for a killed run: its trial overlays are still mounted."""
    from harness.host.trees import remove_tree

    bases, dirs = trees("overlay")
    (dirs.workspace / "agent-file").write_text("x")
    checkout = next(iter(bases._trees.values())).checkout
    remove_tree(bases.run_root)
    assert not bases.run_root.exists() and not mounts_below(bases.run_root)
    subprocess.run(["git", "-C", str(bases.repo), "worktree", "prune"], check=True)
    assert not checkout.exists()
