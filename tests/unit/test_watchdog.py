"""harness.trial.watchdog: the run-time knobs and the trips, on real directories in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.trial.watchdog import WorkspaceLimit, check


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
