"""skilltrial eval's real-run route: --upstream, --upstream-ca, --upstream-network, HTTPS_PROXY / NO_PROXY."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import cli
from harness.experiment.options import RunOptions
from harness.study.lock import lock
from tests.factories import StudyFactory

KEY = "sk-ant-test-key-not-real-0123456789"


@pytest.fixture(autouse=True)
def _restore_sigterm() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, RunOptions]:
    got: dict[str, RunOptions] = {}

    def fake_evaluate(study: object, options: RunOptions, events: object) -> list[str]:
        got["options"] = options
        return []

    monkeypatch.setattr("harness.experiment.evaluate.evaluate", fake_evaluate)
    return got


def test_the_route_comes_from_the_users_environment(
    make_study: StudyFactory, seen: dict[str, RunOptions], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_study()
    lock(s.prereg)
    ca = tmp_path / "corp.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    env = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "https://llm.corp.example", "HTTPS_PROXY": "proxy:3128"}
    code = cli.main(["eval", str(s.prereg), "--upstream-ca", str(ca), "--upstream-network", "corp"], env=env)
    assert code == 0, capsys.readouterr().err
    route = seen["options"].route
    assert route is not None and route.url == "https://llm.corp.example" and route.proxy == "http://proxy:3128"
    assert route.extra_ca == ca and route.network == "corp"


def test_route_flags_are_refused_with_scripted(
    make_study: StudyFactory, seen: dict[str, RunOptions], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_study()
    lock(s.prereg)
    code = cli.main(["eval", str(s.prereg), "--scripted", str(tmp_path / "s.yaml"), "--upstream", "https://x"], env={})
    assert code == 4 and "--upstream" in capsys.readouterr().err and not seen


def test_a_bad_proxy_names_the_variable(
    make_study: StudyFactory, seen: dict[str, RunOptions], capsys: pytest.CaptureFixture[str]
) -> None:
    s = make_study()
    lock(s.prereg)
    code = cli.main(["eval", str(s.prereg)], env={"ANTHROPIC_API_KEY": KEY, "HTTPS_PROXY": "socks5://p:1080"})
    err = capsys.readouterr().err
    assert code == 4 and "HTTPS_PROXY" in err and "Traceback" not in err and not seen
