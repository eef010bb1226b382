"""How many trials one engine's machine can hold at once: one pure function of the machine (its cores and
memory), a trial's limits and what a trial was measured to cost (issue 27 item 5). The default ``--jobs``
and the host-wide slots (:mod:`harness.host.slots`) follow it, ``skilltrial doctor`` prints its reasons,
and a pool of engines can ask it once per engine.

Two bounds; the smaller one is the capacity:

**Memory, a guarantee.** Every container of a running trial may use its whole limit (``--memory`` equals
``--memory-swap``: no swap to spill into), so the trials at once times what one trial may hold at one moment
(the agent's limit, its gateway's and its workspace watchdog's, the judge and verify coming only after the
agent) plus what a trial costs outside those limits (measured: its containers' shims, its share of the
controller, the engine's growth) must fit in the machine's memory less a reserve for the system, the engine
and the controller. Within that, an agent that allocates up to its limit is stopped by its own limit and
cannot push another trial's container into the kernel's OOM killer
(tests/security/test_memory_neighbour.py). A lower ``execution.resources.memory`` in the preregistration
buys more trials at once: the measured trials use a small part of the default 2 GiB.

**CPU, what keeps trials from slowing each other.** A trial costs the machine ``cpu_s`` CPU-seconds
(measured by ``scripts/bench.py --only throughput`` with 32 trials at once and 10 s of model latency per
turn: the harness and both Claude Code processes, their CPU while they wait included), spread over the time
it waits for the model. N trials at once demand ``N * cpu_s`` over
``model_wait_s + cpu_s`` seconds each; the bound keeps that within ``utilisation`` of the cores. Past it,
trials still finish, but every one takes longer (and a deadline can turn into a timeout, an outcome).
The model's wait is the one figure not measured here: :data:`MODEL_WAIT_S` is the short end of real trials.

At most :data:`MAX_TRIALS` (the most measured at once), at least 1.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_TRIALS = 32
"""The most trials this project has run at once and measured (docs/bench-throughput.md)."""
MODEL_WAIT_S = 30.0
"""Seconds a real trial waits for the model, agent turns and judge together: the short end of the real
runs measured (20 to 110 s per trial, README), so the CPU bound errs towards fewer trials."""
UTILISATION = 0.8
"""The share of the cores trials may keep busy: the rest is the controller's bursts and everyone else's."""
RESERVE_FRACTION = 0.1
RESERVE_MIN_BYTES = 1 << 30
"""Memory kept back from trials: 10% of the machine, at least 1 GiB (the system, the engine, the controller)."""


@dataclass(frozen=True)
class TrialCosts:
    """What one trial costs a machine beyond its limits, measured by ``python3 scripts/bench.py --only
    throughput`` (docs/bench-throughput.md has the run these come from)."""

    cpu_s: float
    """CPU-seconds per trial, everything on the machine: harness and both CLI processes (which spend CPU
    while they wait for the model too: at latency 0 a trial cost 3.6, with 10 s per turn 5.0)."""
    outside_limits_bytes: int
    """Memory a running trial holds outside its containers' limits: its shims, its share of the controller
    and of the engine's growth, at 32 trials at once."""
    resident_bytes: int
    """Peak memory of one trial's containers (page cache included): what a trial really used."""


MEASURED = TrialCosts(cpu_s=5.0, outside_limits_bytes=32 << 20, resident_bytes=150 << 20)
"""Measured on a 2-core, 24 GiB machine, Docker 20.10, Claude Code 2.1.332, 64 trials of the careful-fixer
design at ``--jobs 32``, 10 s model latency per turn (docs/bench-throughput.md): 4.99 CPU-s per trial; the
shims 854 MiB, the engine +137 MiB and the controller +8 MiB at 32 at once (31 MiB per trial); one trial's
containers at most 148 MiB."""


@dataclass(frozen=True)
class Capacity:
    trials: int
    by_cpu: int
    by_memory: int
    cpu_reason: str
    memory_reason: str

    def describe(self) -> str:
        bound = "memory" if self.by_memory <= self.by_cpu else "CPU"
        capped = (
            f", capped at {MAX_TRIALS} (the most measured at once)"
            if self.trials < min(self.by_cpu, self.by_memory)
            else ""
        )
        return (
            f"{self.trials} trials at once ({bound} bound{capped}): CPU {self.by_cpu} ({self.cpu_reason}); "
            f"memory {self.by_memory} ({self.memory_reason})"
        )


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def capacity(
    *,
    cpus: float,
    mem_bytes: int,
    trial_limits_bytes: int,
    costs: TrialCosts = MEASURED,
    model_wait_s: float = MODEL_WAIT_S,
) -> Capacity:
    """Trials one machine (one engine's) can hold at once; see the module docstring for the two bounds.

    ``cpus`` and ``mem_bytes``: the machine's (``docker info``'s NCPU and MemTotal for an engine);
    ``trial_limits_bytes``: the memory limits one trial holds at one moment (agent, gateway, watchdog)."""
    cpus = max(cpus, 0.1)
    wait = max(model_wait_s, 0.0)
    cpu_s = max(costs.cpu_s, 1e-3)
    by_cpu = int(cpus * UTILISATION * (wait + cpu_s) / cpu_s)
    cpu_reason = (
        f"{cpus:g} cores x {UTILISATION:.0%} x ({wait:g} s waiting on the model + {cpu_s:g} s) / "
        f"{cpu_s:g} CPU-s per trial"
    )
    reserve = max(RESERVE_MIN_BYTES, int(mem_bytes * RESERVE_FRACTION))
    per_trial = trial_limits_bytes + costs.outside_limits_bytes
    by_memory = max(0, mem_bytes - reserve) // max(1, per_trial)
    memory_reason = (
        f"({_gib(mem_bytes)} - {_gib(reserve)} reserve) / ({_gib(trial_limits_bytes)} of limits + "
        f"{costs.outside_limits_bytes >> 20} MiB outside them) per trial; a trial used {costs.resident_bytes >> 20} MiB"
    )
    trials = max(1, min(by_cpu, by_memory, MAX_TRIALS))
    return Capacity(trials, by_cpu, by_memory, cpu_reason, memory_reason)
