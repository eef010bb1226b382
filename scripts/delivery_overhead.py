"""Per-turn request size of the prompt delivery (``--bare``) vs the installed one (non-bare CLI).

Runs the demo's fix-mean task once per arm in each delivery against the scripted model
(real engine, real CLI) and prints, from the gateway's record of every request
(``skill.request_bytes``), the mean request size per turn and the overhead of the
installed delivery. The scripted model's token counts are scripted, so sizes are the
measurement; tokens are estimated at 4 bytes per token (a rule of thumb, not a count).

    .venv/bin/python scripts/delivery_overhead.py [WORK_DIR]
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from harness.demo import prepare_demo
from harness.experiment.experiment import Experiment
from harness.experiment.options import RunOptions
from harness.host.paths import HostPaths
from harness.sandbox.engine import Engine
from harness.study.config import load_study
from harness.study.lock import lock


def run(work: Path, delivery: str) -> list[list[int]]:
    setup = prepare_demo(work / delivery)
    demo = setup.root / "demo"
    prereg = yaml.safe_load((demo / "preregistration-careful-fixer.yaml").read_text())
    prereg.update({"target_tasks": ["fix-mean"], "on_rejection": "keep"})
    prereg["execution"].update({"runs_per_arm": 1, "delivery": delivery})
    prereg.pop("lock", None)
    path = demo / f"overhead-{delivery}.yaml"
    path.write_text(yaml.safe_dump(prereg, sort_keys=False))
    lock(path)
    scen = yaml.safe_load(setup.scenario.read_text())
    scen["tasks"] = {"fix-mean": scen["tasks"]["fix-mean"]}
    scenario = demo / "overhead-scenario.yaml"
    scenario.write_text(yaml.safe_dump(scen))
    trials = work / f"trials-{delivery}"
    trials.mkdir(mode=0o700)
    result = Experiment(
        load_study(path),
        Engine(),
        RunOptions(
            out=work / f"out-{delivery}",
            jobs=2,
            scripted=scenario,
            paths=dataclasses.replace(HostPaths.from_env(os.environ), work_root=trials),
        ),
    ).run()
    return [list(r.skill.request_bytes) for r in result.records if r.skill is not None]


def main() -> int:
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="overhead-"))
    means = {}
    for delivery in ("prompt", "installed"):
        sizes = run(work, delivery)
        flat = [b for trial in sizes for b in trial]
        means[delivery] = statistics.fmean(flat)
        print(f"{delivery:9} requests {len(flat):3}  mean {means[delivery] / 1000:6.1f} kB per turn  {sizes}")
    extra = means["installed"] - means["prompt"]
    print(
        f"installed - prompt: {extra / 1000:+.1f} kB per turn (about {extra / 4:+,.0f} input tokens at 4 bytes/token)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
