"""A memory-hungry agent cannot make another trial fail (issue 27 item 5).

Four trials at once: in two of them the agent allocates memory up to its container's limit, holds it there
while the other two (benign: the honest fix of fix-mean) run, then asks for more and is stopped by the
kernel inside its own container. Each container's limit is its memory and swap together (``--memory`` =
``--memory-swap``), so reaching it cannot spill into swap or into a neighbour's share; and the capacity
model (harness.host.capacity, tests/unit/test_capacity.py) admits only as many trials as fit with every
one of them at its limits. The positive controls: the hungry agent's own readings of its cgroup show it
really held about its whole limit, and it really was killed for it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from tests.integration.helpers import demo_task_scripts, latest, run_experiment
from tests.security.helpers import MEAN_VERIFY, HostileTask, bash, kv, probes, write_hostile

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LIMIT = 512 << 20
HOLD_S = 8

HUNGRY = r"""
python3 - <<'EOF'
import time
cg = "/sys/fs/cgroup/memory/"
def read(name):
    return int(open(cg + name).read())
print(f"limit={read('memory.limit_in_bytes')}", flush=True)
print(f"memsw_limit={read('memory.memsw.limit_in_bytes')}", flush=True)
chunks = []
while read("memory.usage_in_bytes") < 0.9 * read("memory.limit_in_bytes"):
    chunks.append(bytearray(16 << 20))  # every page touched
print(f"held={read('memory.usage_in_bytes')}", flush=True)
time.sleep(HOLD)
print(f"max_usage={read('memory.max_usage_in_bytes')}", flush=True)
while True:
    chunks.append(bytearray(16 << 20))
EOF
echo "exit=$?"
""".replace("HOLD", str(HOLD_S))


@pytest.fixture(scope="module")
def neighbours(
    sec_setup: Path, engine: Engine, images: ImageSet, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("mem")
    fix = demo_task_scripts(sec_setup)["fix-mean"]["success"]
    benign = [bash(f"sleep {HOLD_S // 2}", description="wait beside the hungry agent"), *fix]
    tasks = [
        HostileTask("mem-hungry", baseline=[bash(HUNGRY, "hungry")], skill=[bash(HUNGRY, "hungry")]),
        HostileTask("mem-benign", baseline=benign, skill=benign, verify_cmd=MEAN_VERIFY, protected_paths=("tests",)),
    ]
    prereg, scen = write_hostile(sec_setup, "memory", tasks, resources={"memory": "512m"}, budgets={"timeout_s": 90})
    work_root = tmp / "trials"
    work_root.mkdir(mode=0o700)
    result = run_experiment(engine, prereg, scen, tmp / "out", work_root, jobs=4)
    return {"records": latest(result), "probes": probes(tmp / "out")}


def _interval(r: Any) -> tuple[dt.datetime, dt.datetime]:
    return dt.datetime.fromisoformat(r.started_at), dt.datetime.fromisoformat(r.finished_at)


def test_the_hungry_agents_held_their_whole_limit_and_were_stopped_inside_their_own_container(
    neighbours: dict[str, Any],
) -> None:
    for arm in ("baseline", "skill"):
        seen = kv(neighbours["probes"][("mem-hungry", arm, "hungry")])
        assert int(seen["limit"]) == LIMIT and int(seen["memsw_limit"]) == LIMIT, "memory = memory + swap: no swap"
        assert int(seen["max_usage"]) >= 0.9 * LIMIT, seen
        assert seen["exit"] == "137", "killed for asking past its limit"
        r = neighbours["records"][f"mem-hungry.{arm}.0"]
        assert r.oom_killed, (r.status, r.error)


def test_the_benign_trials_beside_them_completed_and_passed(neighbours: dict[str, Any]) -> None:
    hungry = [_interval(neighbours["records"][f"mem-hungry.{arm}.0"]) for arm in ("baseline", "skill")]
    for arm in ("baseline", "skill"):
        r = neighbours["records"][f"mem-benign.{arm}.0"]
        assert r.status == "completed" and not r.oom_killed, (r.status, r.error, r.flags)
        assert r.verify is not None and r.verify.exit_code == 0, r.verify
        assert r.judge is not None and r.judge.verdict == "pass", r.judge
        start, end = _interval(r)
        assert all(start < h_end and h_start < end for h_start, h_end in hungry), "they ran at the same time"
