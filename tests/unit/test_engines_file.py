"""The engines file (issue 29 item 1): a strict model whose errors name the file and the field, paths made
absolute against the file, and the engines ``--engine`` and the file name merged in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.sandbox.engine import EngineAddress
from harness.sandbox.pool import addresses
from harness.study.engines import load_engines

GOOD = """\
engines:
  - url: unix:///var/run/docker.sock
  - url: tcp://10.1.2.3:2376
    cert_path: certs/b1
  - url: ssh://ci@build-2.example:2222/run/user/1000/docker.sock
    name: build-2
    ssh_config: ssh/config
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "engines.yaml"
    path.write_text(text)
    return path


def test_a_good_file_loads_with_paths_made_absolute_against_the_file(tmp_path: Path) -> None:
    (tmp_path / "certs" / "b1").mkdir(parents=True)
    (tmp_path / "ssh").mkdir()
    (tmp_path / "ssh" / "config").write_text("Host *\n")
    loaded = load_engines(_write(tmp_path, GOOD))
    assert [e.label for e in loaded.engines] == ["local", "10.1.2.3", "build-2"]
    assert loaded.engines[1].cert_path == str(tmp_path / "certs" / "b1")
    assert loaded.engines[2].ssh_config == str(tmp_path / "ssh" / "config")


@pytest.mark.parametrize(
    ("engines", "field", "words"),
    [
        ("  - url: http://10.0.0.1:2375\n", "engines[0].url", "scheme must be one of"),
        ("  - url: tcp://10.0.0.1\n", "engines[0].url", "tcp://host:port"),
        ("  - url: unix://relative/sock\n", "engines[0].url", "unix:///absolute/path"),
        ("  - url: ssh://me:secret@h\n", "engines[0].url", "password"),
        ("  - url: ssh://h\n    cert_path: certs\n", "engines[0].cert_path", "tcp:// engines"),
        ("  - url: tcp://h:2376\n    ssh_config: c\n", "engines[0].ssh_config", "ssh:// engines"),
        ("  - url: unix:///s\n    tls: yes\n", "engines[0].tls", "unknown field"),
        ("  - url: unix:///s\n  - url: unix:///s\n", "engines[1].url", "listed twice"),
        ("  - url: tcp://h:1\n  - url: tcp://h:2\n", "engines[1].name", "called 'h'"),
        ("  - url: unix:///s\n    name: -x\n", "engines[0].name", "letters, digits"),
        ("  - url: tcp://h:2376\n    cert_path: nowhere\n", "engines[0].cert_path", "is not a directory"),
    ],
)
def test_bad_entries_are_refused_naming_the_file_and_the_field(
    tmp_path: Path, engines: str, field: str, words: str
) -> None:
    path = _write(tmp_path, "engines:\n" + engines)
    with pytest.raises(ConfigError) as caught:
        load_engines(path)
    assert caught.value.path == str(path)
    assert caught.value.field == field, str(caught.value)
    assert words in str(caught.value)
    assert caught.value.exit_code == 4


def test_an_empty_list_and_a_missing_list_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="engines"):
        load_engines(_write(tmp_path, "engines: []\n"))
    with pytest.raises(ConfigError, match="required field is missing"):
        load_engines(_write(tmp_path, "{}\n"))


def test_engine_flags_come_first_and_take_dockers_tls_variables(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    listed = load_engines(_write(tmp_path, "engines:\n  - url: ssh://ci@b2\n"))
    env = {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tmp_path / "certs")}
    found = addresses(["tcp://10.0.0.9:2376", "unix:///var/run/docker.sock"], listed, env)
    assert found == [
        EngineAddress("tcp://10.0.0.9:2376", cert_path=tmp_path / "certs", tls_verify=True),
        EngineAddress("unix:///var/run/docker.sock"),
        EngineAddress("ssh://ci@b2"),
    ]
    assert [a.label for a in found] == ["10.0.0.9", "local", "b2"]


def test_the_same_engine_twice_across_flag_and_file_is_refused(tmp_path: Path) -> None:
    listed = load_engines(_write(tmp_path, "engines:\n  - url: tcp://10.0.0.9:2375\n"))
    with pytest.raises(ConfigError, match="named twice"):
        addresses(["tcp://10.0.0.9:2375"], listed, {})
    with pytest.raises(ConfigError, match=r"two engines are called '10\.0\.0\.9'"):
        addresses(["tcp://10.0.0.9:2376"], listed, {})
