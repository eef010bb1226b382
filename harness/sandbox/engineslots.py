"""Trial slots kept on the engine itself, so they hold across controllers sharing it (issue 29 item 1: two CI
runners using one build host).

Slot ``i`` of an engine is the volume ``hx-engine-slot-<i>``, labelled with its holder. Taking it is
creating that volume with one's own holder label and reading it back: the engine's volume create is
idempotent and keeps the first creator's labels, so of two controllers creating it at once exactly one finds
its own holder on it. Giving it back is removing it (only the holder does). A slot carries the harness's
owner labels (pid, host, expiry: a trial's deadline and a margin), so one a killed controller held is an
orphan: taken back here as soon as it is seen (dead owner on this host, or expired), and by ``skilltrial
gc``. Controllers on several hosts share them too; one on another host that died holds its slot until it
expires. Each controller takes at most its own count of slots (``hx-engine-slot-0`` up to its count minus
one), so controllers with different counts share the smaller prefix.

No lock service, no file of this machine: the engine is the one place every controller reaches.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time
from collections.abc import Iterator, Mapping

from harness.errors import HarnessError, Interrupted
from harness.sandbox.labels import ROLE, make_labels, orphan_reason
from harness.sandbox.runtime import DockerObject, Runtime

HOLDER = "harness.slot.holder"
POLL_S = 0.5


def slot_name(index: int) -> str:
    return f"hx-engine-slot-{index}"


class EngineSlots:
    """``count`` slots on ``runtime``'s engine, shared with every controller that uses it."""

    def __init__(self, runtime: Runtime, count: int, *, run_id: str, stop: threading.Event | None = None) -> None:
        self.runtime = runtime
        self.count = max(1, count)
        self.run_id = run_id
        self.stop = stop or threading.Event()

    @contextlib.contextmanager
    def slot(self, ttl_s: float) -> Iterator[int]:
        """Hold a slot while the block runs (:meth:`acquire`, :meth:`release`)."""
        index = self.acquire(ttl_s)
        try:
            yield index
        finally:
            self.release(index)

    def acquire(self, ttl_s: float) -> int:
        """Take a free slot (waits while every slot is held; Interrupted on a stop); its index."""
        return self._take(secrets.token_hex(8), ttl_s)

    def release(self, index: int) -> None:
        with contextlib.suppress(HarnessError):  # gone with its engine: the engine took it along
            self.runtime.remove(DockerObject("volume", slot_name(index)))

    def _take(self, token: str, ttl_s: float) -> int:
        while True:
            if self.stop.is_set():
                raise Interrupted("interrupted while waiting for a slot on the engine")
            held = {o.name: o.labels for o in self.runtime.labelled({ROLE: "engine-slot"})}
            for index in range(self.count):
                name = slot_name(index)
                if name in held:
                    if self._orphan(held[name]):
                        with contextlib.suppress(HarnessError):
                            self.runtime.remove(DockerObject("volume", name))
                    continue
                labels = {**make_labels(self.run_id, role="engine-slot", ttl_s=ttl_s, purpose="slot"), HOLDER: token}
                try:
                    self.runtime.create_volume(name, labels)
                except HarnessError:  # an engine that refuses an existing name: taken by another
                    continue
                if any(o.name == name for o in self.runtime.labelled({HOLDER: token})):
                    return index
            self.stop.wait(POLL_S)

    @staticmethod
    def _orphan(labels: Mapping[str, str]) -> bool:
        return orphan_reason(labels, now=time.time(), host=socket.gethostname()) is not None
