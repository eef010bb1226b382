"""Which uid/gid each container role runs as.

A container process is, to the host kernel, a process of its numeric uid: any host process with
the same uid may open ``/proc/<pid>/root/...`` and read the container's files (the gateway's key
among them). So with a root controller no role may share a uid with a host account: the
untrusted roles (agent, collect, verify, judge) and the trusted sidecars (gateway, scripted API)
each get an id that ``/etc/passwd``, ``/etc/group`` and the subordinate-id ranges
(``/etc/subuid``, ``/etc/subgid``) do not use, chosen at run time from a high range.

Where the engine remaps user namespaces (``userns-remap``), container ids are already shifted
into a subordinate range no host account uses; the image's own ids (1000 and 65534) are kept.
A non-root controller runs every role as itself: the workspace must stay deletable by it, and a
host process with its uid already owns everything the controller holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

FREE_RANGE_START = 2_100_000_000
"""First id tried: far above any distribution's account ranges, below 2**31 (signed-int safe)."""
FREE_RANGE_END = 2_147_000_000
OLD_AGENT = (1000, 1000)
OLD_SIDECAR = (65534, 65534)

How = Literal["unused-host-ids", "userns-remap", "controller-user"]


@dataclass(frozen=True)
class RoleUsers:
    agent: tuple[int, int]
    """agent, collect, verify and judge (untrusted code, the workspace's owner)"""
    sidecar: tuple[int, int]
    """gateway and scripted API (hold the key and the scenario)"""
    how: How

    def describe(self) -> str:
        if self.how == "userns-remap":
            return "the engine remaps user namespaces: container ids map to a subordinate range"
        if self.how == "controller-user":
            return f"non-root controller: every role runs as the controller's own uid {self.agent[0]}"
        return (
            f"agents run as {self.agent[0]}:{self.agent[1]}, sidecars as {self.sidecar[0]}:{self.sidecar[1]} "
            "(ids no host account, group or subordinate range uses)"
        )


def _ids(text: str, column: int) -> set[int]:
    out: set[int] = set()
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) > column and parts[column].strip().isdigit():
            out.add(int(parts[column]))
    return out


def _ranges(text: str) -> list[tuple[int, int]]:
    """``name:start:count`` lines of /etc/subuid or /etc/subgid as half-open ranges."""
    out = []
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) == 3 and parts[1].strip().isdigit() and parts[2].strip().isdigit():
            start = int(parts[1])
            out.append((start, start + int(parts[2])))
    return out


def pick_free(
    used: set[int], ranges: Sequence[tuple[int, int]], count: int, start: int = FREE_RANGE_START
) -> list[int]:
    """The first ``count`` ids from ``start`` that are neither in ``used`` nor in any range (pure)."""
    found: list[int] = []
    candidate = start
    while len(found) < count and candidate < FREE_RANGE_END:
        inside = next((end for lo, end in ranges if lo <= candidate < end), None)
        if inside is not None:
            candidate = inside
            continue
        if candidate not in used:
            found.append(candidate)
        candidate += 1
    if len(found) < count:
        raise ValueError(f"no {count} free ids between {start} and {FREE_RANGE_END}")
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def host_ids(etc: Path = Path("/etc")) -> tuple[set[int], list[tuple[int, int]]]:
    """Every uid and gid a host account or group uses, and every subordinate id range."""
    used = _ids(_read(etc / "passwd"), 2) | _ids(_read(etc / "passwd"), 3) | _ids(_read(etc / "group"), 2)
    ranges = _ranges(_read(etc / "subuid")) + _ranges(_read(etc / "subgid"))
    return used, ranges


def userns_remapped(security_options: Iterable[str]) -> bool:
    return any("name=userns" in s for s in security_options)


def role_users(*, euid: int, egid: int, security_options: Iterable[str], etc: Path = Path("/etc")) -> RoleUsers:
    """The ids this run's roles use; read from the host at run time (accounts can appear)."""
    if euid != 0:
        return RoleUsers((euid, egid), (euid, egid), "controller-user")
    if userns_remapped(security_options):
        return RoleUsers(OLD_AGENT, OLD_SIDECAR, "userns-remap")
    used, ranges = host_ids(etc)
    agent, sidecar = pick_free(used, ranges, 2)
    return RoleUsers((agent, agent), (sidecar, sidecar), "unused-host-ids")
