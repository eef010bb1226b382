"""Identical patches: one verify (and, if preregistered, one judge) per input, shared and recorded."""

from __future__ import annotations

import threading

import pytest

from harness.records import JudgeResult, VerifyResult
from harness.study.config import Task
from harness.trial.samepatch import OnceByKey, judge_key, judge_shareable, verify_key, verify_shareable

TASK = Task(id="t", prompt="p", verify_cmd="pytest -q", protected_paths=("tests",))


def test_the_key_covers_every_input_of_verify() -> None:
    base = verify_key(TASK, "b" * 40, "img:1", "p" * 64, 600)
    assert base == verify_key(TASK, "b" * 40, "img:1", "p" * 64, 600)
    changed = [
        verify_key(TASK, "c" * 40, "img:1", "p" * 64, 600),
        verify_key(TASK, "b" * 40, "img:2", "p" * 64, 600),
        verify_key(TASK, "b" * 40, "img:1", "q" * 64, 600),
        verify_key(TASK, "b" * 40, "img:1", "p" * 64, 60),
        verify_key(TASK.model_copy(update={"verify_cmd": "true"}), "b" * 40, "img:1", "p" * 64, 600),
        verify_key(TASK.model_copy(update={"protected_paths": ()}), "b" * 40, "img:1", "p" * 64, 600),
    ]
    assert all(k != base for k in changed)
    assert judge_key(TASK, 0, "haiku", "diff") != judge_key(TASK, 1, "haiku", "diff")
    assert judge_key(TASK, 0, "haiku", "diff") != judge_key(TASK, 0, "opus", "diff")


def test_only_clean_results_are_shared() -> None:
    assert verify_shareable(VerifyResult(exit_code=1))
    assert not verify_shareable(VerifyResult(exit_code=None, timed_out=True))
    assert not verify_shareable(VerifyResult(exit_code=137, oom_killed=True))
    assert not verify_shareable(VerifyResult(skipped_reason="patch rejected"))
    assert judge_shareable(JudgeResult(verdict="fail"))
    assert not judge_shareable(JudgeResult(verdict="unknown"))
    assert not judge_shareable(JudgeResult(verdict="pass", error="judge exit 1"))


def test_the_second_trial_reuses_and_names_the_first() -> None:
    once: OnceByKey[VerifyResult] = OnceByKey(verify_shareable)
    calls: list[str] = []

    def compute() -> VerifyResult:
        calls.append("run")
        return VerifyResult(exit_code=0)

    assert once.get("k", "trial-1", compute) == (VerifyResult(exit_code=0), None)
    assert once.get("k", "trial-2", compute) == (VerifyResult(exit_code=0), "trial-1")
    assert once.get("other", "trial-3", compute)[1] is None
    assert calls == ["run", "run"]


def test_a_result_that_is_not_shareable_is_computed_again() -> None:
    once: OnceByKey[VerifyResult] = OnceByKey(verify_shareable)
    results = iter([VerifyResult(timed_out=True), VerifyResult(exit_code=0)])
    assert once.get("k", "a", lambda: next(results))[1] is None
    assert once.get("k", "b", lambda: next(results)) == (VerifyResult(exit_code=0), None)


def test_a_failed_computation_lets_the_next_trial_compute() -> None:
    once: OnceByKey[VerifyResult] = OnceByKey(verify_shareable)

    def boom() -> VerifyResult:
        raise RuntimeError("engine went away")

    with pytest.raises(RuntimeError):
        once.get("k", "a", boom)
    assert once.get("k", "b", lambda: VerifyResult(exit_code=3)) == (VerifyResult(exit_code=3), None)


def test_concurrent_trials_with_one_key_compute_once() -> None:
    once: OnceByKey[VerifyResult] = OnceByKey(verify_shareable)
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> VerifyResult:
        calls.append(1)
        started.set()
        release.wait(10)
        return VerifyResult(exit_code=0)

    out: dict[str, tuple[VerifyResult, str | None]] = {}
    first = threading.Thread(target=lambda: out.__setitem__("a", once.get("k", "a", slow)))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: out.__setitem__("b", once.get("k", "b", slow)))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert calls == [1]
    assert out["a"][1] is None and out["b"][1] == "a"


def test_seeded_results_come_from_the_record() -> None:
    once: OnceByKey[VerifyResult] = OnceByKey(verify_shareable)
    once.seed("k", VerifyResult(exit_code=0), "earlier")
    once.seed("t", VerifyResult(timed_out=True), "earlier")
    assert once.get("k", "now", lambda: VerifyResult(exit_code=9)) == (VerifyResult(exit_code=0), "earlier")
    assert once.get("t", "now", lambda: VerifyResult(exit_code=9)) == (VerifyResult(exit_code=9), None)
