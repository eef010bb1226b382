"""Every name the harness gives a Docker object: built here, and nowhere else.

    hx-<run>-<what>                   a run's own objects: volumes (``key``, ``skill``, ``copy-<i>``,
                                      ``route``, ``scenario``, ``base-<sha12>``), its upstream network (``up``),
                                      containers (``scripted``, ``engine-probe``, ``preflight``)
    hx-<run>-<trial>-<role>           one attempt's containers (gateway, agent, watch, collect, verify, judge)
    hx-<run>-<trial>-net              its network
    hx-<run>-<trial>-scratch|ws|vf    a volume workspace's volumes (:class:`TrialNames`)
    <volume>-<what>                   what serves one volume: its filler (``fill``), an overlay probe's
    hx-doctor-<what>                  ``skilltrial doctor``'s probes (no run)

``<trial>`` is an attempt's key (:func:`trial_key`): task, arm, run index and attempt, so every name of an
attempt is known before anything of it exists (a teardown that cannot list removes by name) and two attempts
of one trial never share a name (the run's reaper may still be removing the first when the second starts).
Names are the engine's unique keys; what an object belongs to is in its labels (:mod:`harness.sandbox.labels`).
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "hx"


def run_object(run_id: str, what: str) -> str:
    """One of a run's own objects (``what``: its part of the name, unique within the run)."""
    return f"{PREFIX}-{run_id}-{what}"


def derived(volume: str, what: str) -> str:
    """An object that serves ``volume`` alone (its filler, an overlay probe's volumes and container)."""
    return f"{volume}-{what}"


def filler(volume: str) -> str:
    """The never-started container that fills ``volume`` (:func:`harness.sandbox.volumes.fill`): a teardown
    that removes by name lists it, since a filler whose own removal failed still holds its volume."""
    return derived(volume, "fill")


def doctor(what: str) -> str:
    return f"{PREFIX}-doctor-{what}"


def trial_key(task_id: str, arm: str, run_index: int, attempt: int) -> str:
    """An attempt's part of its objects' names (dots are not allowed in every engine's names)."""
    return f"{task_id}-{arm[0]}{run_index}-a{attempt}".replace(".", "-")


@dataclass(frozen=True)
class TrialNames:
    """The names of one attempt's objects (a trial's, or a preflight task's, whose ``key`` is its own)."""

    run_id: str
    key: str

    @property
    def stem(self) -> str:
        return run_object(self.run_id, self.key)

    def container(self, role: str) -> str:
        return f"{self.stem}-{role}"

    @property
    def network(self) -> str:
        return f"{self.stem}-net"

    @property
    def scratch_volume(self) -> str:
        """A volume workspace's scratch volume (upper/ work/ verify-upper/ verify-work/ out/)."""
        return f"{self.stem}-scratch"

    @property
    def workspace_volume(self) -> str:
        """A volume workspace's overlay the agent gets as /workspace."""
        return f"{self.stem}-ws"

    @property
    def verify_volume(self) -> str:
        """A volume workspace's overlay collect makes base + patch, and verify runs on."""
        return f"{self.stem}-vf"
