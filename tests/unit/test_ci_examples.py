"""The sharded CI example: a matrix of `eval --shard i/n`, then one job that merges and gates."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.plan import parse_shard

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "github-actions" / "skill-eval-sharded.yml"


def test_sharded_example_runs_every_shard_then_merges_and_gates() -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    shard_job, merge_job = data["jobs"]["shard"], data["jobs"]["merge"]
    matrix = shard_job["strategy"]["matrix"]["shard"]
    n = int(data["env"]["SHARDS"])
    assert matrix == list(range(1, n + 1)), "every shard of the plan runs exactly once"
    for i in matrix:
        assert parse_shard(f"{i}/{n}") == (i, n)
    steps = shard_job["steps"]
    runs = [s.get("run", "") for s in steps]
    install = next(i for i, r in enumerate(runs) if "pipx install" in r)
    eval_i = next(i for i, r in enumerate(runs) if "skilltrial eval" in r)
    assert install < eval_i
    assert '--shard "${{ matrix.shard }}/$SHARDS"' in runs[eval_i]
    assert '--out "shard-${{ matrix.shard }}"' in runs[eval_i]
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["with"]["path"] == "shard-${{ matrix.shard }}" and "always()" in upload["if"]
    assert merge_job["needs"] == "shard"
    mruns = [s.get("run", "") for s in merge_job["steps"]]
    merge_i = next(i for i, r in enumerate(mruns) if "skilltrial merge merged shards/shard-*" in r)
    gate_i = next(i for i, r in enumerate(mruns) if r.strip() == "skilltrial gate merged")
    assert merge_i < gate_i, "gate the merged experiment, never a shard"
    assert not any("make " in r for r in runs + mruns)
    # only the step that calls the API sees the key
    everything = steps + merge_job["steps"]
    assert sum("ANTHROPIC_API_KEY" in str(s) for s in everything) == 1
    assert "ANTHROPIC_API_KEY" in str(steps[eval_i])
