"""The controller's own walks of agent-written trees (no Docker): the workspace watchdog and teardown.

Neither follows a symlink, opens a FIFO, or gives up on a tree nested deeper than
Python's recursion limit; each has a positive control showing the same tree
would be misread (or the limit crossed) without that care.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from harness.host.trees import remove_tree
from harness.trial.watchdog import Watchdog, WorkspaceLimit, measure


def _deep(root: Path, depth: int) -> None:
    cwd = os.getcwd()
    try:
        os.chdir(root)
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        Path("bottom.txt").write_text("deep")
    finally:
        os.chdir(cwd)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    big = tmp_path / "outside"
    big.mkdir()
    (big / "big.bin").write_bytes(os.urandom(4 << 20))
    (big / "keep.txt").write_text("keep")
    return big


def test_the_watchdog_never_follows_symlinks_or_opens_fifos(tmp_path: Path, outside: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "link-dir").symlink_to(outside)
    (ws / "link-file").symlink_to(outside / "big.bin")
    os.mkfifo(ws / "fifo")
    limit = WorkspaceLimit(max_bytes=1 << 20)
    done: list[object] = []
    t = threading.Thread(target=lambda: done.append(measure(ws, limit)), daemon=True)
    t.start()
    t.join(timeout=10)
    assert done == [None], "a FIFO must not block the walk, and the 4 MiB behind the symlinks must not count"
    # positive control: the same bytes inside the workspace trip the limit
    shutil.copy(outside / "big.bin", ws / "copy.bin")
    trip = measure(ws, limit)
    assert trip is not None and "bytes" in trip.reason


def test_the_watchdog_counts_inodes_and_depth(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(50):
        (ws / f"f{i}").touch()
    assert measure(ws, WorkspaceLimit(max_files=100)) is None  # positive control: under the limit
    trip = measure(ws, WorkspaceLimit(max_files=20))
    assert trip is not None and "files" in trip.reason
    _deep(ws, 150)
    trip = measure(ws, WorkspaceLimit(max_depth=100))
    assert trip is not None and "nested" in trip.reason


def test_the_watchdog_calls_back_once_when_a_limit_is_crossed(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    tripped = threading.Event()
    with Watchdog(ws, WorkspaceLimit(max_files=10, interval_s=0.05), on_trip=lambda _t: tripped.set()) as dog:
        dog.start()
        assert not tripped.wait(0.3)  # positive control: nothing happens under the limit
        for i in range(20):
            (ws / f"f{i}").touch()
        assert tripped.wait(5)
    assert dog.tripped is not None and dog.tripped.agent_fault


def test_teardown_removes_trees_deeper_than_the_recursion_limit_without_following_links(
    tmp_path: Path, outside: Path
) -> None:
    tree = tmp_path / "trial"
    tree.mkdir()
    (tree / "to-outside").symlink_to(outside)
    _deep(tree, 1500)
    with pytest.raises(RecursionError):  # positive control: plain rmtree gives up on this tree
        shutil.rmtree(tree)
    remove_tree(tree)
    assert not tree.exists()
    assert (outside / "keep.txt").read_text() == "keep" and (outside / "big.bin").stat().st_size == 4 << 20
