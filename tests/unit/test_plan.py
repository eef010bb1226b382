"""harness.plan: the pure, seeded, interleaved trial plan and its deterministic shards."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from harness.plan import (
    BASELINE_PREFIX,
    SKILL_PREFIX,
    ShardRef,
    TrialSpec,
    parse_shard,
    plan_trials,
    prompt_for,
    prompt_template_sha256,
    select_shard,
    shard_of,
    trial_id,
)
from harness.records import ARMS
from harness.study.config import Task

TASKS = tuple(Task(id=f"task-{i:02d}", prompt=f"do thing {i}", verify_cmd="true") for i in range(12))


def pairs(plan: tuple[TrialSpec, ...]) -> list[tuple[TrialSpec, TrialSpec]]:
    return list(zip(plan[::2], plan[1::2], strict=True))


def key(s: TrialSpec) -> tuple[str, str, int]:
    return (s.task.id, s.arm, s.run_index)


def test_covers_tasks_arms_runs_exactly_once() -> None:
    plan = plan_trials(TASKS, runs_per_arm=3, seed=7)
    assert len(plan) == len(TASKS) * 2 * 3
    counts = Counter(key(s) for s in plan)
    expected = {(t.id, arm, r) for t in TASKS for arm in ARMS for r in range(3)}
    assert set(counts) == expected
    assert set(counts.values()) == {1}
    assert len({s.trial_id for s in plan}) == len(plan)
    assert [s.order for s in plan] == list(range(len(plan)))
    for s in plan:
        assert s.trial_id == trial_id(s.task.id, s.arm, s.run_index)


def test_deterministic_for_a_seed_and_different_for_another() -> None:
    a = plan_trials(TASKS, 3, seed=1)
    b = plan_trials(TASKS, 3, seed=1)
    c = plan_trials(TASKS, 3, seed=2)
    assert [key(s) for s in a] == [key(s) for s in b]
    assert [key(s) for s in a] != [key(s) for s in c]
    assert set(map(key, a)) == set(map(key, c))


def test_plan_is_organised_in_rounds() -> None:
    plan = plan_trials(TASKS, 4, seed=3)
    per_round = len(TASKS) * 2
    for rnd in range(4):
        block = plan[rnd * per_round : (rnd + 1) * per_round]
        assert {s.round for s in block} == {rnd}
        assert {s.run_index for s in block} == {rnd}
        assert Counter((s.task.id, s.arm) for s in block) == Counter({(t.id, a): 1 for t in TASKS for a in ARMS})


def test_pairs_are_adjacent_within_a_round() -> None:
    """Both arms of a task run back to back, so drift cannot separate a pair."""
    plan = plan_trials(TASKS, 2, seed=5)
    for first, second in pairs(plan):
        assert first.task.id == second.task.id
        assert first.run_index == second.run_index
        assert {first.arm, second.arm} == set(ARMS)


def test_arms_interleave_and_arm_order_is_shuffled() -> None:
    plan = plan_trials(TASKS, 3, seed=11)
    half = plan[: len(plan) // 2]
    assert {s.arm for s in half} == set(ARMS)  # not all baseline first
    firsts = Counter(pair[0].arm for pair in pairs(plan))
    assert firsts["baseline"] > 0 and firsts["skill"] > 0  # who goes first varies
    # never a long run of one arm: at most two in a row (end of one pair, start of the next)
    longest = max(len(list(g)) for _, g in itertools.groupby(s.arm for s in plan))
    assert longest <= 2


def test_task_order_is_shuffled_between_rounds() -> None:
    plan = plan_trials(TASKS, 3, seed=13)
    per_round = len(TASKS) * 2
    orders = [[s.task.id for s in plan[r * per_round : (r + 1) * per_round : 2]] for r in range(3)]
    assert len({tuple(o) for o in orders}) > 1
    assert orders[0] != [t.id for t in TASKS] or orders[1] != [t.id for t in TASKS]


def test_single_task_single_run() -> None:
    plan = plan_trials(TASKS[:1], 1, seed=0)
    assert sorted(s.arm for s in plan) == ["baseline", "skill"]


def test_prompt_differs_between_arms_only_by_prefix() -> None:
    plan = plan_trials(TASKS[:1], 1, seed=0)
    by_arm = {s.arm: s for s in plan}
    assert by_arm["baseline"].prompt == BASELINE_PREFIX + "do thing 0"
    assert by_arm["skill"].prompt == SKILL_PREFIX + "do thing 0"
    assert "/skill/SKILL.md" in SKILL_PREFIX
    assert prompt_for("skill", "x").endswith("x")
    assert len(prompt_template_sha256()) == 64


# ------------------------------------------------------------------------------ shards


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_shards_partition_the_plan(n: int) -> None:
    plan = plan_trials(TASKS, 3, seed=21)
    shards = [select_shard(plan, ShardRef(i, n)) for i in range(1, n + 1)]
    ids = [s.trial_id for shard in shards for s in shard]
    assert sorted(ids) == sorted(s.trial_id for s in plan)  # union is the plan
    assert len(ids) == len(set(ids))  # disjoint
    for shard in shards:  # each shard keeps the plan's order
        assert [s.order for s in shard] == sorted(s.order for s in shard)


def test_shards_are_stable_across_seeds_and_calls() -> None:
    a = plan_trials(TASKS, 3, seed=1)
    b = plan_trials(TASKS, 3, seed=99)
    for i in (1, 2, 3):
        assert {s.trial_id for s in select_shard(a, ShardRef(i, 3))} == {
            s.trial_id for s in select_shard(b, ShardRef(i, 3))
        }
    assert [shard_of(s, 5) for s in a] == [shard_of(s, 5) for s in a]


def test_both_arms_of_a_pair_land_in_the_same_shard() -> None:
    plan = plan_trials(TASKS, 3, seed=4)
    for n in (2, 3, 4, 8):
        by_pair: dict[tuple[str, int], set[int]] = {}
        for s in plan:
            by_pair.setdefault((s.task.id, s.run_index), set()).add(shard_of(s, n))
        assert all(len(v) == 1 for v in by_pair.values())


def test_shards_are_not_all_empty_but_one() -> None:
    plan = plan_trials(TASKS, 3, seed=4)
    sizes = [len(select_shard(plan, ShardRef(i, 3))) for i in (1, 2, 3)]
    assert sum(1 for x in sizes if x) >= 2


def test_no_shard_is_the_whole_plan() -> None:
    plan = plan_trials(TASKS, 2, seed=4)
    assert select_shard(plan, None) == plan
    assert select_shard(plan, ShardRef(1, 1)) == plan


@pytest.mark.parametrize(("text", "expected"), [("2/4", (2, 4)), ("1/1", (1, 1)), ("4/4", (4, 4)), (" 3/5", (3, 5))])
def test_parse_shard_accepts(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/3", "5/4", "x", "", "2", "2/", "/4", "a/b", "-1/3", "1/0", "2/4/8"])
def test_parse_shard_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="shard"):
        parse_shard(text)
