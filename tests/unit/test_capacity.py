"""The capacity model (harness.host.capacity): how many trials one engine's machine holds at once.

Pure: the machine's cores and memory, a trial's limits and its measured costs in, trials out; the default
``--jobs``, the host slots and ``skilltrial doctor`` use it, and an engine pool asks it once per engine."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from harness.host.capacity import MAX_TRIALS, RESERVE_MIN_BYTES, TrialCosts, capacity
from harness.host.slots import default_slots
from harness.sandbox import roles
from harness.sandbox.doctor import capacity_check, engine_checks
from harness.sandbox.runtime import EngineInfo
from harness.study.config import Resources

GIB = 1 << 30
COSTS = TrialCosts(cpu_s=4.0, outside_limits_bytes=64 << 20, resident_bytes=200 << 20)


def test_the_cpu_bound_spreads_a_trials_cpu_over_its_wait_for_the_model() -> None:
    # 2 cores x 80% x (36 s + 4 s) / 4 CPU-s = 16
    assert capacity(cpus=2, mem_bytes=1 << 40, trial_limits_bytes=GIB, costs=COSTS, model_wait_s=36).by_cpu == 16
    longer = capacity(cpus=2, mem_bytes=1 << 40, trial_limits_bytes=GIB, costs=COSTS, model_wait_s=76)
    assert longer.by_cpu == 32, "a longer wait for the model: more trials share the same cores"
    dearer = TrialCosts(cpu_s=8.0, outside_limits_bytes=0, resident_bytes=0)
    assert capacity(cpus=2, mem_bytes=1 << 40, trial_limits_bytes=GIB, costs=dearer, model_wait_s=36).by_cpu == 8
    assert capacity(cpus=4, mem_bytes=1 << 40, trial_limits_bytes=GIB, costs=COSTS, model_wait_s=36).by_cpu == 32


def test_the_memory_bound_counts_every_limit_a_trial_holds_and_what_it_costs_outside_them() -> None:
    # (24 GiB - 2.4 GiB reserve) / (2.375 GiB + 64 MiB) = 8.86
    limits = roles.trial_memory_limits(Resources())
    assert limits == (2 << 30) + (256 << 20) + (128 << 20), "agent, gateway and watchdog at one moment"
    got = capacity(cpus=64, mem_bytes=24 * GIB, trial_limits_bytes=limits, costs=COSTS)
    assert got.by_memory == 8 and got.trials == 8
    assert "memory bound" in got.describe() and "2.4 GiB of limits" in got.describe()
    smaller = roles.trial_memory_limits(Resources(memory="512m"))
    assert capacity(cpus=64, mem_bytes=24 * GIB, trial_limits_bytes=smaller, costs=COSTS).by_memory == 23


@given(
    cpus=st.integers(1, 256),
    mem=st.integers(1 << 28, 1 << 42),
    limits=st.integers(64 << 20, 64 << 30),
    outside=st.integers(0, 1 << 30),
)
def test_the_trials_at_once_never_hold_more_than_the_machine_less_its_reserve(
    cpus: int, mem: int, limits: int, outside: int
) -> None:
    """The guarantee behind 'a memory-hungry agent cannot make another trial fail': every running trial at
    its full limits still fits, so the kernel's OOM killer acts inside one container, never across them."""
    got = capacity(
        cpus=cpus, mem_bytes=mem, trial_limits_bytes=limits, costs=TrialCosts(1.0, outside, 0), model_wait_s=30
    )
    reserve = max(RESERVE_MIN_BYTES, mem // 10)
    assert 1 <= got.trials <= MAX_TRIALS
    if got.by_memory >= 1:
        assert got.trials * (limits + outside) <= mem - reserve
        assert (got.by_memory + 1) * (limits + outside) > mem - reserve, "and no more than that"
    else:
        assert got.trials == 1, "a machine too small for one trial still runs one at a time"
    assert got.trials == max(1, min(got.by_cpu, got.by_memory, MAX_TRIALS))


def test_one_function_per_engine_for_a_pool() -> None:
    small = capacity(cpus=2, mem_bytes=8 * GIB, trial_limits_bytes=GIB, costs=COSTS, model_wait_s=36)
    big = capacity(cpus=32, mem_bytes=256 * GIB, trial_limits_bytes=GIB, costs=COSTS, model_wait_s=36)
    assert (small.trials, big.trials) == (6, MAX_TRIALS)
    assert "capped at 32" in big.describe()


def test_the_default_slots_follow_the_model() -> None:
    assert (
        default_slots(cpus=2, mem_bytes=24 * GIB, per_trial_mem=2 * GIB)
        == capacity(cpus=2, mem_bytes=24 * GIB, trial_limits_bytes=2 * GIB).trials
    )
    assert default_slots(cpus=1, mem_bytes=GIB, per_trial_mem=2 * GIB) == 1


def _info(cpus: int, memory: int) -> EngineInfo:
    return EngineInfo("28.3.3", "1.51", "2", "systemd", ("runc",), (), "/var/lib/docker", "overlay2", "x", "1.2.8",
                      False, cpus=cpus, memory_bytes=memory)  # fmt: skip


def test_doctor_says_how_many_trials_and_why() -> None:
    local = capacity_check(_info(0, 0), remote=False, env={})
    assert local.name == "capacity" and "trials at once" in local.detail and "CPU" in local.detail
    assert "memory" in local.detail and "this machine" in local.detail
    far = capacity_check(_info(64, 512 * GIB), remote=True, env={"HARNESS_HOST_SLOTS": "3"})
    assert "the engine's machine (64 cores, 512.0 GiB)" in far.detail and f"{MAX_TRIALS} trials at once" in far.detail
    assert "HARNESS_HOST_SLOTS=3 sets the limit instead" in far.detail


def test_doctor_gives_each_engine_of_a_pool_its_own_capacity() -> None:
    """The engine pool asks the same model once per engine, with the engine's own cores and memory."""
    from tests.fakes import FakeRuntime

    small, big = (
        FakeRuntime(info=dataclasses.replace(FakeRuntime().info(), cpus=cpus, memory_bytes=mem))
        for cpus, mem in ((2, 8 * GIB), (32, 256 * GIB))
    )
    lines = [
        {c.name: c for c in engine_checks(rt, expected={}, reference="a", probe_image=None, prefix="x-")}["capacity"]
        for rt in (small, big)
    ]
    assert "2 trials at once (memory bound)" in lines[0].detail
    assert f"{MAX_TRIALS} trials at once" in lines[1].detail
    unknown = FakeRuntime(info=dataclasses.replace(FakeRuntime().info(), cpus=0, memory_bytes=0))
    assert "capacity" not in {
        c.name for c in engine_checks(unknown, expected={}, reference="a", probe_image=None, prefix="x-")
    }
