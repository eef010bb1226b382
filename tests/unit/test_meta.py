"""harness.results.meta: experiment.json as one model, and directories written before it still load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError, ResumeError
from harness.results.meta import META, META_VERSION, ExperimentMeta, read_meta, require_meta, write_meta

LOCK = "ab" * 32

# experiment.json exactly as the harness wrote it before ExperimentMeta existed: the run's description
# (experiment.py), then the trial inputs its first start added, with json.dumps(indent=2, sort_keys=True).
WRITTEN_BY_A_RUN = {
    "created_at": "2026-11-30T09:12:44+00:00",
    "experiment_id": LOCK[:12],
    "harness_version": "0.1.0",
    "lock_hash": LOCK,
    "mode": "scripted",
    "preregistration": "/work/skill/preregistration.yaml",
    "shard": None,
    "skill": "careful-fixer",
    "trial_inputs": {
        "allowed_tools": ["Bash", "Edit", "Read"],
        "base_image": "skill-harness-runtime:abc",
        "base_image_id": "",
        "budgets": {"per_trial_usd": 1.0, "total_usd": 20.0},
        "claude_code_version": "2.1.332",
        "judge_model": "haiku",
        "model": "sonnet",
        "resources": {"cpus": 2.0, "memory": "2g"},
        "runtime": "(engine default)",
        "scenario_sha256": "0" * 64,
        "sidecar_image": "sha256:" + "1" * 64,
        "trial_image": "sha256:" + "2" * 64,
        "upstream": "scripted",
    },
}
# ... and as `skilltrial merge` wrote it (no trial inputs, the shards it combined).
WRITTEN_BY_A_MERGE = {
    "created_at": "2026-11-30T10:00:00+00:00",
    "experiment_id": LOCK[:12],
    "harness_version": "0.1.0",
    "lock_hash": LOCK,
    "merged_from": ["/ci/shard1", "/ci/shard2"],
    "mode": "real",
    "preregistration": "/work/skill/preregistration.yaml",
    "shard": None,
    "skill": "careful-fixer",
}


def _write(root: Path, data: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data, indent=2, sort_keys=True) + "\n"
    (root / META).write_text(text)
    return root


def test_a_directory_written_by_a_run_before_the_model_loads(tmp_path: Path) -> None:
    meta = require_meta(_write(tmp_path, WRITTEN_BY_A_RUN))
    assert meta.meta_version == 1 and meta.lock_hash == LOCK and meta.experiment_id == LOCK[:12]
    assert meta.mode == "scripted" and meta.shard is None and meta.skill == "careful-fixer"
    assert meta.preregistration == "/work/skill/preregistration.yaml"
    assert meta.trial_inputs is not None and meta.trial_inputs["base_image"] == "skill-harness-runtime:abc"
    assert meta.merged_from is None


def test_a_directory_written_by_a_merge_before_the_model_loads(tmp_path: Path) -> None:
    meta = require_meta(_write(tmp_path, WRITTEN_BY_A_MERGE))
    assert meta.merged_from == ("/ci/shard1", "/ci/shard2") and meta.mode == "real" and meta.trial_inputs is None


def test_only_the_lock_is_required_and_the_id_follows_it(tmp_path: Path) -> None:
    meta = require_meta(_write(tmp_path, {"lock_hash": LOCK, "preregistration": "p.yaml"}))
    assert meta.experiment_id == LOCK[:12] and meta.shard is None and meta.mode is None


def test_what_is_written_reads_back_the_same_and_carries_its_version(tmp_path: Path) -> None:
    meta = ExperimentMeta.start(LOCK, preregistration="p.yaml", skill="s", shard="1/2", mode="real")
    write_meta(tmp_path, meta)
    assert read_meta(tmp_path) == meta
    data = json.loads((tmp_path / META).read_text())
    assert data["meta_version"] == META_VERSION and data["shard"] == "1/2" and data["experiment_id"] == LOCK[:12]
    updated = meta.model_copy(update={"trial_inputs": {"base_image": "x"}})
    write_meta(tmp_path, updated)
    assert require_meta(tmp_path).trial_inputs == {"base_image": "x"}


def test_no_file_is_none_for_resume_and_an_error_for_everything_else(tmp_path: Path) -> None:
    assert read_meta(tmp_path) is None
    with pytest.raises(ConfigError, match="not found: is this an experiment directory"):
        require_meta(tmp_path)


@pytest.mark.parametrize(
    ("content", "message", "field"),
    [
        ("{broken", "cannot be read as JSON", None),
        ("[1, 2]", r"is not an experiment description \(no lock_hash\)", None),
        ({"skill": "s"}, r"no lock_hash", None),
        ({"lock_hash": LOCK, "mode": "cloud"}, "scripted", "mode"),
        ({"lock_hash": LOCK, "colour": "red"}, "unknown field", "colour"),
        ({"lock_hash": LOCK, "meta_version": META_VERSION + 1}, "written by a newer harness", "meta_version"),
    ],
)
def test_a_bad_file_is_one_config_error_naming_file_and_field(
    tmp_path: Path, content: Any, message: str, field: str | None
) -> None:
    _write(tmp_path, content)
    with pytest.raises(ConfigError, match=message) as e:
        read_meta(tmp_path)
    assert e.value.path == str(tmp_path / META) and e.value.field == field


def test_resume_translates_a_bad_file_into_a_resume_error(make_study: Any, tmp_path: Path) -> None:
    from harness.experiment.experiment import Experiment
    from harness.experiment.options import RunOptions
    from harness.study.config import load_study
    from harness.study.lock import lock

    files = make_study()
    lock(files.prereg)
    out = _write(tmp_path / "out", "{broken")
    options = RunOptions(out=out, jobs=1, api_key="sk-ant-test-meta")  # admitted: the lock holds, a key is given
    experiment = Experiment(load_study(files.prereg), None, options)
    with pytest.raises(ResumeError, match="cannot be read as JSON") as e:
        experiment.run()
    assert e.value.hint == "move the directory aside"
