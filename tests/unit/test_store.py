"""harness.results.store: append-only results, torn-tail repair, content-addressed redacted artifacts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.errors import ResumeError
from harness.host.files import atomic_write
from harness.records import RESULTS, AgentResult, TrialRecord
from harness.redact import REDACTED, Redactor
from harness.results.store import (
    ArtifactStore,
    ExperimentDir,
    ResultsLog,
    read_results,
    repair_torn_tail,
)
from tests.factories import trial_record

KEY = "sk-ant-api03-THISISASECRETKEYVALUE0123456789abcdef"


def rec(i: int, error: str | None = None, agent: AgentResult | None = None) -> TrialRecord:
    return trial_record(experiment_id="exp", task_id=f"t{i}", arm="baseline", error=error, agent=agent)


def all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_append_and_read_round_trip(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / RESULTS, Redactor())
    records = [rec(i) for i in range(5)]
    for r in records:
        log.append(r)
    report = log.read()
    assert report.records == records
    assert report.bad_lines == []
    assert report.torn_tail is False
    lines = (tmp_path / RESULTS).read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 6
    assert all(json.loads(line)["trial_id"].startswith("t") for line in lines[:-1])


def test_append_never_rewrites_earlier_lines(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / RESULTS, Redactor())
    log.append(rec(1))
    first = (tmp_path / RESULTS).read_bytes()
    log.append(rec(2))
    assert (tmp_path / RESULTS).read_bytes().startswith(first)


def test_read_of_missing_log_is_empty(tmp_path: Path) -> None:
    report = read_results(tmp_path / "nope.jsonl")
    assert report.records == [] and report.bad_lines == [] and not report.torn_tail


def test_torn_last_line_is_moved_aside_on_open(tmp_path: Path) -> None:
    path = tmp_path / RESULTS
    log = ResultsLog(path, Redactor())
    log.append(rec(1))
    log.append(rec(2))
    good = path.read_bytes()
    partial = rec(3).model_dump_json().encode()[:57]
    with open(path, "ab") as fh:
        fh.write(partial)  # a crash mid-write: no newline

    assert read_results(path).torn_tail is True
    assert [r.task_id for r in read_results(path).records] == ["t1", "t2"]

    reopened = ResultsLog(path, Redactor())
    assert reopened.repaired is True
    assert path.read_bytes() == good
    assert (tmp_path / f"{RESULTS}.torn-1").read_bytes() == partial
    report = reopened.read()
    assert [r.task_id for r in report.records] == ["t1", "t2"]
    assert report.torn_tail is False

    reopened.append(rec(4))
    assert [r.task_id for r in reopened.read().records] == ["t1", "t2", "t4"]


def test_second_torn_tail_goes_to_torn_2(tmp_path: Path) -> None:
    path = tmp_path / RESULTS
    path.write_bytes(b"first-fragment")
    assert repair_torn_tail(path) is True
    assert path.read_bytes() == b""
    path.write_bytes(rec(1).model_dump_json().encode() + b"\nsecond")
    assert repair_torn_tail(path) is True
    assert (tmp_path / f"{RESULTS}.torn-1").read_bytes() == b"first-fragment"
    assert (tmp_path / f"{RESULTS}.torn-2").read_bytes() == b"second"
    assert [r.task_id for r in read_results(path).records] == ["t1"]


def test_repair_of_a_clean_log_does_nothing(tmp_path: Path) -> None:
    path = tmp_path / RESULTS
    assert repair_torn_tail(path) is False  # missing
    path.write_bytes(b"")
    assert repair_torn_tail(path) is False  # empty
    path.write_bytes(rec(1).model_dump_json().encode() + b"\n")
    assert repair_torn_tail(path) is False
    assert not list(tmp_path.glob("*.torn-*"))


def test_torn_tail_longer_than_one_read_block(tmp_path: Path) -> None:
    path = tmp_path / RESULTS
    head = rec(1).model_dump_json().encode() + b"\n"
    tail = b"x" * 200_000
    path.write_bytes(head + tail)
    assert repair_torn_tail(path) is True
    assert path.read_bytes() == head
    assert (tmp_path / f"{RESULTS}.torn-1").read_bytes() == tail


def test_bad_line_in_the_middle_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / RESULTS
    lines = [
        rec(1).model_dump_json(),
        "{this is not json",
        "",
        json.dumps({"schema_version": 1, "trial_id": "incomplete"}),
        rec(2).model_dump_json(),
    ]
    path.write_text("\n".join(lines) + "\n")
    report = read_results(path)
    assert [r.task_id for r in report.records] == ["t1", "t2"]
    assert [n for n, _ in report.bad_lines] == [2, 4]
    assert all(msg for _, msg in report.bad_lines)
    assert report.torn_tail is False


def test_results_are_redacted_before_they_reach_disk(tmp_path: Path) -> None:
    exp = ExperimentDir(tmp_path / "exp", Redactor([KEY]))
    exp.results.append(rec(1, error=f"upstream said: invalid x-api-key {KEY}"))
    exp.results.append(rec(2, agent=AgentResult(result_excerpt="my key is sk-ant-other-key-ABCDEFGHIJKL")))
    disk = (tmp_path / "exp" / RESULTS).read_bytes()
    assert KEY.encode() not in disk
    assert b"sk-ant-" not in disk
    assert REDACTED.encode() in disk
    assert len(exp.results.read().records) == 2


def test_artifacts_are_content_addressed(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", Redactor())
    data = b"diff --git a/x b/x\n"
    digest = store.put(data)
    assert digest == hashlib.sha256(data).hexdigest()
    path = tmp_path / "artifacts" / digest[:2] / digest
    assert path.read_bytes() == data
    assert store.get(digest) == data
    assert store.put(data) == digest  # idempotent
    assert len(list((tmp_path / "artifacts").rglob("*"))) == 2  # one directory, one file
    assert store.put(b"other") != digest


def test_artifacts_are_redacted_and_keys_never_reach_disk(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", Redactor([KEY]))
    data = f'{{"headers": {{"x-api-key": "{KEY}"}}, "auth": "Authorization: Bearer abcdefghijklmnop1234"}}'.encode()
    digest = store.put(data)
    stored = store.get(digest)
    assert KEY.encode() not in stored
    assert b"abcdefghijklmnop1234" not in stored
    assert digest == hashlib.sha256(stored).hexdigest()  # addressed by what is on disk
    assert KEY.encode() not in all_bytes(tmp_path)


def test_binary_artifacts_survive_redaction(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", Redactor([KEY]))
    data = bytes(range(256)) + b"\xff\xfe"
    assert store.get(store.put(data)) == data


def test_exclusive_refuses_a_second_holder(tmp_path: Path) -> None:
    a = ExperimentDir(tmp_path / "exp", Redactor())
    b = ExperimentDir(tmp_path / "exp", Redactor())
    with a.exclusive():
        with pytest.raises(ResumeError) as info, b.exclusive():
            pass  # pragma: no cover
        assert "another harness process" in str(info.value)
        assert info.value.exit_code == 4
    with b.exclusive():  # released when the first holder leaves
        pass


def test_exclusive_released_after_an_exception(tmp_path: Path) -> None:
    exp = ExperimentDir(tmp_path / "exp", Redactor())
    with pytest.raises(RuntimeError), exp.exclusive():
        raise RuntimeError("boom")
    with exp.exclusive():
        pass


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("old content that is longer")
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]
