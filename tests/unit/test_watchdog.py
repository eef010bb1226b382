"""harness.trial.watchdog: the run-time knobs and the trips, on real directories in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.trial.watchdog import Usage, Watchdog, WorkspaceLimit, census, check


def test_defaults_and_the_environment_knobs() -> None:
    d = WorkspaceLimit.from_env({})
    assert (d.max_bytes, d.max_files, d.max_depth, d.min_free_bytes) == (4 << 30, 200_000, 100, 512 << 20)
    env = {"HARNESS_WORKSPACE_MAX": "1g", "HARNESS_WORKSPACE_MAX_FILES": "5000", "HARNESS_MIN_FREE_DISK": "64m"}
    limit = WorkspaceLimit.from_env(env)
    assert (limit.max_bytes, limit.max_files, limit.min_free_bytes) == (1 << 30, 5000, 64 << 20)


@pytest.mark.parametrize(
    ("name", "value"),
    [("HARNESS_WORKSPACE_MAX", "lots"), ("HARNESS_MIN_FREE_DISK", "-1m"), ("HARNESS_WORKSPACE_MAX_FILES", "1e6")],
)
def test_a_bad_knob_is_an_error_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        WorkspaceLimit.from_env({name: value})


def test_each_limit_trips_and_a_full_host_disk_is_not_the_agents_fault(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(20):
        (ws / f"f{i}").write_bytes(b"x" * 8192)
    roomy = WorkspaceLimit(min_free_bytes=0)
    assert check(ws, roomy) is None, "within every limit: no trip (else the trips below show nothing)"

    files = check(ws, WorkspaceLimit(max_files=10, min_free_bytes=0))
    assert files is not None and files.agent_fault and "files" in files.reason
    size = check(ws, WorkspaceLimit(max_bytes=64 << 10, min_free_bytes=0))
    assert size is not None and size.agent_fault and "bytes" in size.reason
    deep = ws / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    depth = check(ws, WorkspaceLimit(max_depth=3, min_free_bytes=0))
    assert depth is not None and depth.agent_fault and "deeper" in depth.reason

    host = check(ws, WorkspaceLimit(min_free_bytes=1 << 62))
    assert host is not None and not host.agent_fault, "low disk the workspace does not show is an infra problem"


def test_the_limits_count_what_the_agent_added_not_the_base(tmp_path: Path) -> None:
    """A base larger than every limit (issue 17: a 250k-file repository tripped the file limit itself,
    and both arms failed as agent_error) is evaluable; the same additions on top of it still trip."""
    ws = tmp_path / "ws"
    deep = ws / "/".join(f"d{i}" for i in range(6))
    deep.mkdir(parents=True)
    for i in range(30):
        (ws / f"base{i}").write_bytes(b"x" * 8192)
    limit = WorkspaceLimit(max_files=10, max_bytes=64 << 10, max_depth=3, min_free_bytes=0)
    assert check(ws, limit) is not None, "positive control: without the census the base itself trips"
    base = census(ws)
    assert base.files == 36 and base.depth == 6 and base.bytes >= 30 * 8192
    assert check(ws, limit, base) is None
    for i in range(11):
        (ws / f"added{i}").write_bytes(b"")
    files = check(ws, limit, base)
    assert files is not None and files.agent_fault and "files" in files.reason
    for i in range(11):
        (ws / f"added{i}").unlink()
    (ws / "big").write_bytes(b"y" * (80 << 10))
    size = check(ws, limit, base)
    assert size is not None and "bytes" in size.reason
    (ws / "big").unlink()
    (deep / "d6").mkdir()
    depth = check(ws, limit, base)
    assert depth is not None and "deeper than 6" in depth.reason


def test_the_watchdog_takes_its_census_when_entered(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(5):
        (ws / f"f{i}").write_text("x")
    dog = Watchdog(ws, WorkspaceLimit(max_files=2, min_free_bytes=0), on_trip=lambda _t: None)
    with dog:
        assert dog.base.files == 5
    missing = Watchdog(tmp_path / "absent", WorkspaceLimit(), on_trip=lambda _t: None)
    with missing:
        assert missing.base == Usage()
