"""harness.sandbox.labels: the label namespace and who counts as an orphan."""

from __future__ import annotations

import os

import pytest

from harness.sandbox.labels import (
    EXPIRES,
    HOST,
    OWNER,
    OWNER_VALUE,
    PID,
    PURPOSE,
    ROLE,
    RUN,
    TRIAL,
    make_labels,
    orphan_reason,
    pid_alive,
)

NOW = 1_000_000.0


def labels(**over: str) -> dict[str, str]:
    base = make_labels("run1", role="agent", trial_id="t1.skill.0", ttl_s=600, pid=4242, host="box", now=NOW)
    base.update(over)
    return base


def never(pid: int) -> bool:
    raise AssertionError("liveness must not be checked here")


def test_make_labels() -> None:
    lab = labels()
    assert lab[OWNER] == OWNER_VALUE
    assert lab[RUN] == "run1"
    assert lab[ROLE] == "agent"
    assert lab[TRIAL] == "t1.skill.0"
    assert lab[PID] == "4242"
    assert lab[HOST] == "box"
    assert lab[EXPIRES] == str(int(NOW + 600))
    assert lab[PURPOSE] == "trial"
    assert all(isinstance(v, str) for v in lab.values())


def test_make_labels_defaults_to_this_process() -> None:
    lab = make_labels("r", role="gateway", ttl_s=10)
    assert lab[PID] == str(os.getpid())
    assert TRIAL not in lab
    assert float(lab[EXPIRES]) > 0


@pytest.mark.parametrize("owner", [None, "someone-else", ""])
def test_non_harness_objects_are_never_orphans(owner: str | None) -> None:
    lab = labels()
    if owner is None:
        del lab[OWNER]
    else:
        lab[OWNER] = owner
    lab[EXPIRES] = "1"  # long expired, dead pid, same host: still not ours
    assert orphan_reason(lab, now=NOW, host="box", alive=lambda pid: False) is None
    assert orphan_reason({"com.example": "x"}, now=NOW, host="box", alive=never) is None


def test_expired() -> None:
    assert orphan_reason(labels(), now=NOW + 601, host="other", alive=never) == "expired"
    assert orphan_reason(labels(), now=NOW + 601, host="box", alive=lambda pid: True) == "expired"


def test_not_yet_expired_other_host_is_left_alone() -> None:
    assert orphan_reason(labels(), now=NOW + 10, host="other-host", alive=never) is None


def test_dead_pid_on_same_host() -> None:
    seen: list[int] = []

    def dead(pid: int) -> bool:
        seen.append(pid)
        return False

    reason = orphan_reason(labels(), now=NOW + 10, host="box", alive=dead)
    assert reason is not None
    assert "4242" in reason and "gone" in reason
    assert seen == [4242]


def test_live_pid_on_same_host() -> None:
    assert orphan_reason(labels(), now=NOW + 10, host="box", alive=lambda pid: True) is None


def test_own_pid_is_never_an_orphan() -> None:
    assert orphan_reason(labels(), now=NOW + 10, host="box", alive=lambda pid: False, own_pid=4242) is None


def test_bad_pid_label() -> None:
    assert orphan_reason(labels(**{PID: "not-a-pid"}), now=NOW, host="box", alive=never) == "bad owner pid"


def test_bad_expiry_label_does_not_expire() -> None:
    lab = labels(**{EXPIRES: "soon"})
    assert orphan_reason(lab, now=NOW + 10**9, host="other", alive=never) is None


def test_pid_alive_for_this_process_and_a_dead_one() -> None:
    assert pid_alive(os.getpid()) is True
    assert pid_alive(2**22 + 12345) is False  # above the default pid_max
