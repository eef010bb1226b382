"""A task as long as one command-line argument allows, through the real CLI, gateway, verify and judge.

Issue 24 item 10: a 200,000-character prompt was accepted, then every trial was an infra error (the kernel
refuses an argument past ``MAX_ARG_STRLEN``, 131,072 bytes with its NUL). ``skilltrial lock`` now refuses a
task whose prompt, criteria and verify command pass ``TASK_TEXT_MAX_BYTES`` (one byte past it:
``tests/unit/test_bad_inputs.py``); this runs one exactly at it, in 4-byte characters, in both arms, with an
agent that writes a diff of multi-byte text longer than the judge is shown.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.demo import DemoSetup
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.config import TASK_TEXT_MAX_BYTES
from tests.integration.helpers import latest, run_experiment, write_experiment
from tests.security.helpers import bash

pytestmark = [pytest.mark.docker, pytest.mark.slow]

VERIFY = "test -f big.txt"
CRITERIA = "big.txt exists"


def test_a_task_that_fills_one_argument_runs_in_both_arms_and_is_judged(
    tmp_path: Path, engine: Engine, images: ImageSet, demo_setup: DemoSetup, work_root: Path
) -> None:
    head = "Long prompt <<long-prompt>>: follow your instructions. "
    left = TASK_TEXT_MAX_BYTES - len(head) - len(VERIFY) - len(CRITERIA)
    prompt = head + "\U0001f600" * (left // 4) + "x" * (left % 4)
    assert len((prompt + CRITERIA + VERIFY).encode()) == TASK_TEXT_MAX_BYTES
    demo = demo_setup.root / "demo"
    (demo / "tasks-long.json").write_text(
        json.dumps(
            {"tasks": [{"id": "long-prompt", "prompt": prompt, "verify_cmd": VERIFY, "pass_criteria": CRITERIA}]}
        )
    )
    # 40,000 four-byte characters: a diff longer than the judge's share of its one argument
    write = "python3 -c \"open('/workspace/big.txt','w').write(chr(0x1F4A5) * 40000)\""
    steps = [bash(write)]
    prereg, scenario = write_experiment(
        demo_setup.root,
        "long",
        tasks=["long-prompt"],
        scenario={
            "seed": 1,
            "skill_marker": "careful-fixer-7c1e",
            "defaults": {"usage": {"input_tokens": 1000, "output_tokens": 20}},
            "judge": {"mode": "follow_verify"},
            "tasks": {"long-prompt": {"success": steps, "failure": steps, "arms": {"skill": {"read_skill": False}}}},
        },
        extra={"tasks": "tasks-long.json", "decision": {"futility_stop": False}},
    )
    result = run_experiment(engine, prereg, scenario, tmp_path / "out", work_root, jobs=2)
    records = latest(result)
    assert {r.arm for r in records.values()} == {"baseline", "skill"}
    for r in records.values():
        assert r.status == "completed", (r.trial_id, r.status, r.error)
        assert r.verify is not None and r.verify.exit_code == 0, r.trial_id
        assert r.judge is not None and r.judge.verdict == "pass", (r.trial_id, r.judge)
        assert r.patch is not None and r.patch.files == ("big.txt",)
