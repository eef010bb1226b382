"""harness.sandbox.doctor: version parsing and known-CVE warnings (pure; no engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.sandbox.doctor import MINIMUMS, judge_versions, parse_version


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20.10.24", (20, 10, 24)),
        ("28.3.3", (28, 3, 3)),
        ("1.1.5", (1, 1, 5)),
        ("v1.2.8", (1, 2, 8)),
        ("1.1.12-0ubuntu2~22.04.1", (1, 1, 12)),
        ("git version 2.39.5", (2, 39, 5)),
        ("2.50.1 (Apple Git-155)", (2, 50, 1)),
        ("Docker version 24.0", (24, 0)),
        ("", None),
        ("unknown", None),
        ("abcdef0123", None),
    ],
)
def test_parse_version(text: str, expected: tuple[int, ...] | None) -> None:
    assert parse_version(text) == expected


def test_old_versions_warn() -> None:
    checks = judge_versions({"engine": "20.10.24", "runc": "1.1.5", "git": "2.39.5"})
    assert checks
    assert all(c.level == "warn" for c in checks)
    names = [c.name for c in checks]
    assert any(n.startswith("engine 20.10.24") for n in names)
    assert any(n.startswith("runc 1.1.5") for n in names)
    assert any(n.startswith("git 2.39.5") for n in names)
    details = " ".join(c.detail for c in checks)
    assert "CVE-2025-54388" in details  # engine
    assert "CVE-2024-21626" in details  # runc < 1.1.12
    assert "CVE-2025-31133" in details  # runc < 1.2.8
    assert "CVE-2025-48384" in details  # git < 2.43.7
    assert "CVE-2024-32002" not in details  # 2.39.5 already has the 2.39.4 fixes


def test_current_versions_do_not_warn() -> None:
    assert judge_versions({"engine": "28.3.3", "runc": "1.2.8", "git": "2.50.1"}) == []
    assert judge_versions({"engine": "29.0.1", "runc": "v1.3.0", "git": "2.43.7"}) == []


@pytest.mark.parametrize(
    ("component", "version", "warnings"),
    [
        ("engine", "28.3.2", 1),
        ("engine", "27.5.1", 1),
        ("engine", "26.0.0", 1),
        ("engine", "25.0.5", 2),
        ("engine", "20.10.24", 2),
        ("runc", "1.2.7", 1),
        ("runc", "1.1.11", 2),
        ("runc", "1.1.12", 1),
        ("git", "2.39.3", 2),
        ("git", "2.43.6", 1),
    ],
)
def test_each_threshold(component: str, version: str, warnings: int) -> None:
    checks = judge_versions({component: version})
    assert len(checks) == warnings
    assert all(c.name == f"{component} {version}" for c in checks)


def test_unknown_or_missing_versions_are_not_judged() -> None:
    assert judge_versions({}) == []
    assert judge_versions({"engine": "", "runc": "commit-abcdef", "git": "not installed"}) == []


def test_minimums_are_well_formed() -> None:
    for component, minimum, why in MINIMUMS:
        assert component in {"engine", "runc", "git"}
        assert all(isinstance(x, int) for x in minimum)
        assert "CVE" in why


def test_the_workspace_check_says_which_kind_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.sandbox import doctor

    monkeypatch.setattr(doctor, "overlay_available", lambda _p: True)
    assert doctor.workspace_check(tmp_path).level == "ok" and "overlay" in doctor.workspace_check(tmp_path).detail
    monkeypatch.setattr(doctor, "overlay_available", lambda _p: False)
    check = doctor.workspace_check(tmp_path / "missing")
    assert check.level == "info" and "copy" in check.detail and "grows with the repository" in check.detail


def test_the_workspace_check_says_volume_on_a_remote_engine_or_when_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.sandbox import doctor

    monkeypatch.setattr(doctor, "overlay_available", lambda _p: True)
    remote = doctor.workspace_check(tmp_path, remote=True)
    assert remote.level == "ok" and remote.detail.startswith("volume (the engine is remote)")
    forced = doctor.workspace_check(tmp_path, forced="volume")
    assert forced.detail.startswith("volume (HARNESS_WORKSPACE=volume)")
    assert doctor.workspace_check(tmp_path, remote=True, forced="copy").detail.startswith("copy")
    assert doctor.workspace_check(tmp_path).detail.startswith("overlay"), "positive control: local, not forced"
    monkeypatch.setattr(doctor, "overlay_available", lambda _p: False)
    assert doctor.workspace_check(tmp_path, forced="overlay").level == "fail"


def test_doctor_says_whether_the_engine_sees_this_machines_files(tmp_path: Path) -> None:
    """Issue 24: the probe every run makes before its first trial, in doctor's words."""
    from harness.sandbox import doctor
    from harness.sandbox.engineview import PROBE_ROLE
    from tests.fakes import FakeRuntime, Outcome

    seeing = FakeRuntime(images=["sidecar:t"])
    assert doctor.engine_view_check(seeing, tmp_path, "sidecar:t", forced="copy").level == "ok"
    blind = FakeRuntime({PROBE_ROLE: Outcome(exit_code=1, stderr=b"cat: no such file\n")}, images=["sidecar:t"])
    check = doctor.engine_view_check(blind, tmp_path, "sidecar:t", forced="copy")
    assert check.level == "fail" and "cannot see" in check.detail and "HARNESS_WORKSPACE=volume" in check.detail
    assert doctor.engine_view_check(blind, tmp_path, "sidecar:t", forced="volume").level == "ok", "not needed"
    assert doctor.engine_view_check(blind, tmp_path, "sidecar:t", remote=True).level == "ok"
    assert doctor.engine_view_check(blind, tmp_path, None).level == "info", "no image to probe with"
    assert list(tmp_path.iterdir()) == [], "the probe's directory is gone"
