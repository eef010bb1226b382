"""``skilltrial merge``: shard directories combine only when they are one experiment, whole and disjoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.errors import MergeError
from harness.plan import plan_trials, shard_of
from harness.records import TrialRecord
from harness.results.merge import merge
from harness.results.store import read_results
from harness.study.config import load_study
from harness.study.lock import lock
from tests.factories import make_record, write_experiment_dir


def _setup(make_study: Any, tmp_path: Path, n: int = 2) -> tuple[Any, str, dict[int, list[TrialRecord]]]:
    files = make_study(tasks=[{"id": f"task{i}", "prompt": f"do {i}", "verify_cmd": "true"} for i in range(6)])
    digest, _ = lock(files.prereg)
    study = load_study(files.prereg)
    specs = plan_trials(study.target_tasks(), study.prereg.execution.runs_per_arm, study.prereg.execution.seed)
    by_shard: dict[int, list[TrialRecord]] = {i: [] for i in range(1, n + 1)}
    for spec in specs:
        rec = make_record(spec, 1, passed=spec.arm == "skill")
        rec = rec.model_copy(
            update={"provenance": rec.provenance.model_copy(update={"lock_hash": digest}), "experiment_id": digest[:12]}
        )
        by_shard[shard_of(spec, n)].append(rec)
    assert all(by_shard.values()), "the test plan must put trials on every shard"
    return files, digest, by_shard


def _shard_dir(
    tmp_path: Path, files: Any, digest: str, i: int, n: int, records: list[TrialRecord], **meta: Any
) -> Path:
    base = {"lock_hash": digest, "preregistration": str(files.prereg), "shard": f"{i}/{n}", "mode": "scripted"}
    d = write_experiment_dir(tmp_path / f"shard{i}-{len(list(tmp_path.iterdir()))}", {**base, **meta}, records)
    (d / "artifacts" / "ab").mkdir(parents=True)
    (d / "artifacts" / "ab" / f"ab{i}").write_text(f"artifact of shard {i}")
    return d


def test_complete_disjoint_shards_merge_and_decide(make_study: Any, tmp_path: Path, capsys: Any) -> None:
    files, digest, by_shard = _setup(make_study, tmp_path)
    dirs = [_shard_dir(tmp_path, files, digest, i, 2, recs) for i, recs in by_shard.items()]
    out = tmp_path / "merged"
    assert main(["merge", str(out), *map(str, dirs)]) == 0
    merged = read_results(out / "results.jsonl").records
    assert sorted(r.trial_id for r in merged) == sorted(r.trial_id for recs in by_shard.values() for r in recs)
    meta = json.loads((out / "experiment.json").read_text())
    assert meta["lock_hash"] == digest and meta["shard"] is None and len(meta["merged_from"]) == 2
    assert (out / "artifacts" / "ab" / "ab1").exists() and (out / "artifacts" / "ab" / "ab2").exists()
    decision = json.loads((out / "decision.json").read_text())
    assert decision["verdict"] == "adopt"
    assert "ADOPT" in capsys.readouterr().out
    assert main(["gate", str(out)]) == 0


def test_a_missing_shard_is_named(make_study: Any, tmp_path: Path) -> None:
    files, digest, by_shard = _setup(make_study, tmp_path)
    d1 = _shard_dir(tmp_path, files, digest, 1, 2, by_shard[1])
    with pytest.raises(MergeError, match=r"no final record \(shard\(s\) 2/2; given: 1\)"):
        merge(tmp_path / "m", [d1])


def test_an_unfinished_shard_is_refused(make_study: Any, tmp_path: Path) -> None:
    files, digest, by_shard = _setup(make_study, tmp_path)
    d1 = _shard_dir(tmp_path, files, digest, 1, 2, by_shard[1])
    d2 = _shard_dir(tmp_path, files, digest, 2, 2, by_shard[2][:-1])
    with pytest.raises(MergeError, match="1 planned trial"):
        merge(tmp_path / "m", [d1, d2])
    infra = by_shard[2][-1].model_copy(update={"status": "infra_error"})  # retries left: not final
    d3 = _shard_dir(tmp_path, files, digest, 2, 2, [*by_shard[2][:-1], infra])
    with pytest.raises(MergeError, match="rerun the unfinished shard"):
        merge(tmp_path / "m", [d1, d3])


def test_overlapping_shards_are_refused(make_study: Any, tmp_path: Path) -> None:
    files, digest, by_shard = _setup(make_study, tmp_path)
    d1 = _shard_dir(tmp_path, files, digest, 1, 2, by_shard[1])
    d1b = _shard_dir(tmp_path, files, digest, 1, 2, by_shard[1])
    with pytest.raises(MergeError, match="shard 1/2 given twice"):
        merge(tmp_path / "m", [d1, d1b])
    whole = _shard_dir(tmp_path, files, digest, 2, 2, by_shard[2] + by_shard[1][:1])
    with pytest.raises(MergeError, match="is in two shards"):
        merge(tmp_path / "m", [d1, whole])


def test_a_trial_in_the_wrong_shard_is_refused(make_study: Any, tmp_path: Path) -> None:
    files, digest, by_shard = _setup(make_study, tmp_path)
    d1 = _shard_dir(tmp_path, files, digest, 1, 2, by_shard[1] + by_shard[2][:1])
    d2 = _shard_dir(tmp_path, files, digest, 2, 2, by_shard[2][1:])
    with pytest.raises(MergeError, match=r"holds trial .* of shard 2"):
        merge(tmp_path / "m", [d1, d2])


def test_different_locks_modes_or_splits_are_refused(make_study: Any, tmp_path: Path) -> None:
    files, digest, by_shard = _setup(make_study, tmp_path)
    d1 = _shard_dir(tmp_path, files, digest, 1, 2, by_shard[1])
    other = _shard_dir(tmp_path, files, "f" * 64, 2, 2, by_shard[2])
    with pytest.raises(MergeError, match="shards of different preregistrations"):
        merge(tmp_path / "m", [d1, other])
    real = _shard_dir(tmp_path, files, digest, 2, 2, by_shard[2], mode="real")
    with pytest.raises(MergeError, match="ran the real model"):
        merge(tmp_path / "m", [d1, real])
    three = _shard_dir(tmp_path, files, digest, 2, 3, by_shard[2])
    with pytest.raises(MergeError, match="different splits"):
        merge(tmp_path / "m", [d1, three])


def test_unreadable_lines_and_foreign_lines_are_refused(make_study: Any, tmp_path: Path) -> None:
    files, digest, by_shard = _setup(make_study, tmp_path)
    d1 = _shard_dir(tmp_path, files, digest, 1, 2, by_shard[1])
    d2 = _shard_dir(tmp_path, files, digest, 2, 2, by_shard[2])
    with open(d2 / "results.jsonl", "a") as fh:
        fh.write('{"not": "a record"}\n')
    with pytest.raises(MergeError, match="unreadable"):
        merge(tmp_path / "m", [d1, d2])
    foreign = by_shard[2][0].model_copy(
        update={"provenance": by_shard[2][0].provenance.model_copy(update={"lock_hash": "x" * 64})}
    )
    d3 = _shard_dir(tmp_path, files, digest, 2, 2, [foreign, *by_shard[2][1:]])
    with pytest.raises(MergeError, match="of another lock"):
        merge(tmp_path / "m", [d1, d3])


def test_merge_never_writes_into_an_existing_experiment(make_study: Any, tmp_path: Path) -> None:
    files, digest, by_shard = _setup(make_study, tmp_path)
    dirs = [_shard_dir(tmp_path, files, digest, i, 2, recs) for i, recs in by_shard.items()]
    with pytest.raises(MergeError, match="already holds an experiment"):
        merge(dirs[0], dirs)
    assert main(["merge", str(tmp_path / "m"), str(dirs[0])]) == 4, "a missing shard exits 4 with a message"
