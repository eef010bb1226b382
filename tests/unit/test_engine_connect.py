"""How the controller reaches an engine (issue 29 item 1): Docker's TLS variables, the TLS files, and
``ssh://`` through one ssh tunnel per engine (the system's ssh client, argv only).

The ssh tests run the real ssh client against a loopback port nothing listens on: what a user sees when
the engine's host does not answer. Before this change ``DOCKER_HOST=ssh://...`` failed for everyone without
paramiko: docker-py imports it even for its ssh-binary mode ("Install paramiko package to enable ssh://
support"); :func:`test_an_ssh_engine_goes_through_the_ssh_client_not_paramiko` reproduces that."""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from harness.errors import PrerequisiteError
from harness.sandbox.engine import Engine, EngineAddress, _tls_config, address_from_env
from harness.sandbox.sshtunnel import SshTarget, SshTunnel, ssh_argv


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, EngineAddress("unix:///var/run/docker.sock")),
        ({"DOCKER_HOST": "tcp://10.0.0.1:2375"}, EngineAddress("tcp://10.0.0.1:2375")),
        (
            {"DOCKER_HOST": "tcp://10.0.0.1:2376", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": "/c"},
            EngineAddress("tcp://10.0.0.1:2376", cert_path=Path("/c"), tls_verify=True),
        ),
        (
            {"DOCKER_HOST": "tcp://10.0.0.1:2376", "DOCKER_TLS_VERIFY": "1", "HOME": "/home/u"},
            EngineAddress("tcp://10.0.0.1:2376", cert_path=Path("/home/u/.docker"), tls_verify=True),
        ),
        (
            {"DOCKER_HOST": "tcp://10.0.0.1:2376", "DOCKER_CERT_PATH": "/c"},
            EngineAddress("tcp://10.0.0.1:2376", cert_path=Path("/c"), tls_verify=False),
        ),
        ({"DOCKER_HOST": "ssh://me@h", "DOCKER_TLS_VERIFY": "1"}, EngineAddress("ssh://me@h")),
    ],
)
def test_dockers_environment_conventions(env: dict[str, str], expected: EngineAddress) -> None:
    assert address_from_env(env) == expected


def test_tls_files_that_are_missing_are_named(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("x")
    with pytest.raises(PrerequisiteError, match=r"ca\.pem, key\.pem in"):
        _tls_config(EngineAddress("tcp://h:2376", cert_path=tmp_path))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ssh://h", SshTarget("h", None, None, "/var/run/docker.sock")),
        ("ssh://ci@build-2:2222", SshTarget("build-2", "ci", 2222, "/var/run/docker.sock")),
        ("ssh://ci@h/run/user/1000/docker.sock", SshTarget("h", "ci", None, "/run/user/1000/docker.sock")),
    ],
)
def test_ssh_urls(url: str, expected: SshTarget) -> None:
    assert SshTarget.parse(url) == expected


@pytest.mark.parametrize("url", ["ssh://-oProxyCommand=x", "ssh://-l@h", "ssh://u:pw@h", "ssh://h/a:b", "tcp://h:1"])
def test_ssh_urls_that_could_inject_options_or_carry_a_password_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        SshTarget.parse(url)


def test_the_ssh_command_is_an_argv_that_never_prompts(tmp_path: Path) -> None:
    argv = ssh_argv(SshTarget("h", "ci", 2222, "/run/d.sock"), tmp_path / "s", ssh_config=tmp_path / "cfg")
    assert argv[0] == "ssh" and "-N" in argv
    assert argv[argv.index("-F") + 1] == str(tmp_path / "cfg")
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "ci"
    assert argv[argv.index("-L") + 1] == f"{tmp_path / 's'}:/run/d.sock"
    assert "BatchMode=yes" in argv and "ExitOnForwardFailure=yes" in argv
    assert argv[-2:] == ["--", "h"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client")
def test_an_ssh_engine_goes_through_the_ssh_client_not_paramiko() -> None:
    port = _closed_port()
    with pytest.raises(PrerequisiteError) as caught:
        Engine({"DOCKER_HOST": f"ssh://nobody@127.0.0.1:{port}"})
    text = str(caught.value)
    assert "paramiko" not in text
    assert f"ssh to the engine at ssh://nobody@127.0.0.1:{port} failed" in text
    assert "Connection refused" in text  # ssh's own words, passed on


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client")
def test_a_failed_tunnel_leaves_no_process_or_directory(tmp_path: Path) -> None:
    scratch = Path(tempfile.gettempdir())
    before = set(scratch.glob("hx-ssh-*"))
    with pytest.raises(PrerequisiteError):
        SshTunnel(f"ssh://nobody@127.0.0.1:{_closed_port()}", ssh_config=tmp_path / "absent-is-an-error")
    assert set(scratch.glob("hx-ssh-*")) == before
