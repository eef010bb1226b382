"""The host-wide slot limit across real processes (flock), and its defaults."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.host.slots import HostSlots, default_slots

ROOT = Path(__file__).resolve().parents[2]

HOLDER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from harness.host.slots import HostSlots
    slots = HostSlots(int(sys.argv[1]), Path(sys.argv[2]))
    with slots.slot() as i:
        t0 = time.time()
        print("holding", i, flush=True)
        time.sleep(float(sys.argv[3]))
        t1 = time.time()
    with open(sys.argv[4], "a") as fh:
        fh.write(f"{{t0}} {{t1}}\\n")
    """
).format(root=str(ROOT))


def _spawn(tmp_path: Path, count: int, hold: float, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(count), str(tmp_path / "slots"), str(hold), str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_processes_never_hold_more_slots_than_the_limit(tmp_path: Path) -> None:
    log = tmp_path / "intervals"
    procs = [_spawn(tmp_path, 2, 0.4, log) for _ in range(5)]
    for p in procs:
        assert p.wait(timeout=60) == 0
    intervals = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    assert len(intervals) == 5
    events = sorted([(t0, 1) for t0, _ in intervals] + [(t1, -1) for _, t1 in intervals])
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    assert peak == 2, f"at most 2 of 5 processes may hold a slot at once (peak {peak})"


def test_a_killed_holder_releases_its_slot(tmp_path: Path) -> None:
    proc = _spawn(tmp_path, 1, 600, tmp_path / "never")
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("holding")
    slots = HostSlots(1, tmp_path / "slots")
    assert slots.in_use() == 1 and slots.try_acquire() is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    got = slots.try_acquire()
    assert got is not None, "the kernel drops the lock of a dead process"
    os.close(got[1])


def test_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    slots = HostSlots(1, tmp_path / "slots")
    with slots.slot():
        assert slots.try_acquire() is None
    got = slots.try_acquire()
    assert got is not None
    os.close(got[1])


def test_waiting_for_a_slot_stops_when_asked(tmp_path: Path) -> None:
    slots = HostSlots(1, tmp_path / "slots")
    stop = threading.Event()
    with slots.slot():
        threading.Timer(0.1, stop.set).start()
        t0 = time.monotonic()
        with pytest.raises(InterruptedError), slots.slot(stop):
            pass
        assert time.monotonic() - t0 < 2


def test_a_freed_slot_is_taken_quickly(tmp_path: Path) -> None:
    slots = HostSlots(1, tmp_path / "slots")
    got = slots.try_acquire()
    assert got is not None
    threading.Timer(0.3, os.close, args=(got[1],)).start()
    t0 = time.monotonic()
    with slots.slot():
        waited = time.monotonic() - t0
    assert 0.25 < waited < 0.9


def test_default_slots_follow_cores_and_memory() -> None:
    """The capacity model's trials (tests/unit/test_capacity.py holds the model itself)."""
    assert default_slots(cpus=2, mem_bytes=24 << 30, per_trial_mem=2 << 30) == 10  # memory: 21.6 / 2.04 GiB
    assert default_slots(cpus=16, mem_bytes=8 << 30, per_trial_mem=2 << 30) == 3
    assert default_slots(cpus=64, mem_bytes=1 << 40, per_trial_mem=1 << 30) == 32
    assert default_slots(cpus=1, mem_bytes=1 << 30, per_trial_mem=2 << 30) == 1


def test_harness_host_slots_sets_the_limit_and_a_bad_value_is_a_clear_error() -> None:
    from harness.errors import ConfigError
    from harness.host.slots import slot_count

    assert slot_count({"HARNESS_HOST_SLOTS": "3"}, per_trial_mem=2 << 30) == 3
    assert slot_count({}, per_trial_mem=2 << 30) == default_slots(per_trial_mem=2 << 30)
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ConfigError, match="HARNESS_HOST_SLOTS"):
            slot_count({"HARNESS_HOST_SLOTS": bad}, per_trial_mem=2 << 30)
