"""The engines file: which Docker engines one run may use (``skilltrial doctor --engines-file FILE``).

    # engines.yaml
    engines:
      - url: unix:///var/run/docker.sock          # this machine's engine
      - url: tcp://build-1.corp.example:2376      # TLS: ca.pem, cert.pem, key.pem (Docker's layout)
        cert_path: certs/build-1
      - url: ssh://ci@build-2.corp.example         # the system's ssh client, your keys and known_hosts
        name: build-2
        ssh_config: ssh/ci-config                  # optional: this file instead of ~/.ssh/config

Paths are relative to the file. The first engine is the reference: images are built there and copied to
the others (:func:`harness.sandbox.images.sync_images`). A strict model: an unknown field, a URL of another
scheme, TLS files on an ``ssh://`` engine, the same URL or name twice are refused, naming the file and the
field (exit 4). ``skilltrial schema engines`` prints its JSON Schema.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from harness.errors import ConfigError
from harness.study.config import Strict, _FieldError, parse_yaml, read_text, validate

SCHEMES = ("unix", "tcp", "ssh")
MAX_ENGINES = 64
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class EngineEntry(Strict):
    """One Docker engine."""

    url: str = Field(min_length=1, max_length=1000)
    """Where the engine is: `unix:///path/to/docker.sock`, `tcp://host:port` (with `cert_path`: TLS), or
    `ssh://[user@]host[:port][/path/to/docker.sock]` (through the system's ssh client)."""
    name: str | None = None
    """What reports and `skilltrial doctor` call it (letters, digits, `.`, `_`, `-`); default: the URL's host."""
    cert_path: str | None = None
    """`tcp://` only: a directory holding `ca.pem` (the engine's CA), `cert.pem` and `key.pem` (this client's
    certificate and key), Docker's `DOCKER_CERT_PATH` layout. The engine's certificate is verified."""
    ssh_config: str | None = None
    """`ssh://` only: an ssh config file to use instead of `~/.ssh/config` (`ssh -F`): keys, known hosts,
    jump hosts."""

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urllib.parse.urlsplit(v)
        if parts.scheme not in SCHEMES:
            raise ValueError(f"{v!r}: the scheme must be one of {', '.join(s + '://' for s in SCHEMES)}")
        if any(c.isspace() or ord(c) < 32 for c in v):
            raise ValueError("a URL may not hold spaces or control characters")
        if parts.scheme == "unix":
            if not parts.path.startswith("/") or parts.netloc:
                raise ValueError(f"{v!r}: a unix socket is unix:///absolute/path")
            return v
        if not parts.hostname:
            raise ValueError(f"{v!r} names no host")
        try:
            port = parts.port
        except ValueError as e:
            raise ValueError(f"{v!r}: {e}") from None
        if parts.query or parts.fragment or parts.password is not None:
            raise ValueError(f"{v!r}: no query, fragment or password (use keys or certificates)")
        if parts.scheme == "tcp" and (port is None or parts.path not in ("", "/") or parts.username):
            raise ValueError(f"{v!r}: a TCP engine is tcp://host:port")
        if parts.scheme == "ssh" and parts.path and not parts.path.startswith("/"):
            raise ValueError(f"{v!r}: the engine's socket after the host must be an absolute path")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not NAME.fullmatch(v):
            raise ValueError("letters, digits, '.', '_' and '-', at most 63, starting with a letter or digit")
        return v

    @model_validator(mode="after")
    def _transport_options(self) -> EngineEntry:
        scheme = urllib.parse.urlsplit(self.url).scheme
        if self.cert_path is not None and scheme != "tcp":
            raise _FieldError("cert_path", f"is for tcp:// engines (TLS); this one is {scheme}://")
        if self.ssh_config is not None and scheme != "ssh":
            raise _FieldError("ssh_config", f"is for ssh:// engines; this one is {scheme}://")
        return self

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = urllib.parse.urlsplit(self.url)
        return "local" if parts.scheme == "unix" else str(parts.hostname)


class EnginesFile(Strict):
    """Docker engines one run may use; the first is the reference (images are built there and copied to the
    others)."""

    engines: tuple[EngineEntry, ...] = Field(min_length=1, max_length=MAX_ENGINES)
    """The engines, the reference first."""

    @model_validator(mode="after")
    def _unique(self) -> EnginesFile:
        seen_urls: set[str] = set()
        seen_names: set[str] = set()
        for i, entry in enumerate(self.engines):
            if entry.url in seen_urls:
                raise _FieldError(f"engines[{i}].url", f"{entry.url} is listed twice")
            if entry.label in seen_names:
                raise _FieldError(f"engines[{i}].name", f"two engines are called {entry.label!r} (set name: on one)")
            seen_urls.add(entry.url)
            seen_names.add(entry.label)
        return self


def parse_engines(path: Path, text: str) -> EnginesFile:
    return validate(path, EnginesFile, parse_yaml(path, text), "a mapping like {engines: [{url: ...}]}")


def load_engines(path: Path) -> EnginesFile:
    """The engines file, with ``cert_path`` and ``ssh_config`` made absolute (relative to the file) and
    checked to exist."""
    loaded = parse_engines(path, read_text(path))
    entries = []
    for i, entry in enumerate(loaded.engines):
        updates: dict[str, str] = {}
        for key, want_dir in (("cert_path", True), ("ssh_config", False)):
            value = getattr(entry, key)
            if value is None:
                continue
            full = (path.parent / Path(value).expanduser()).resolve()
            if not (full.is_dir() if want_dir else full.is_file()):
                kind = "a directory" if want_dir else "a file"
                raise ConfigError(path, f"{full} is not {kind}", field=f"engines[{i}].{key}")
            updates[key] = str(full)
        entries.append(entry.model_copy(update=updates))
    return loaded.model_copy(update={"engines": tuple(entries)})
