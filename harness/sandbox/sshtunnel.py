"""An engine reached over ``ssh://``: one ssh connection per engine that forwards its socket to a local one.

    ssh -N -o BatchMode=yes -o ExitOnForwardFailure=yes [-F CONFIG] [-p PORT] [-l USER]
        -L <private dir>/docker.sock:<the engine's socket> -- HOST

The system's ssh client does the connecting, so the user's ssh configuration, agent, ``known_hosts`` and
jump hosts apply as they do for ``ssh`` itself (an engine entry of the host file may name its own ssh
config: ``-F``); ``BatchMode`` makes it fail instead of asking for a password or a host key. docker-py then
talks to the forwarded socket as to a local one: its connection pool, streams and archives work unchanged,
every request over the one ssh connection.

Why not docker-py's own ``ssh://`` support: it imports paramiko even when told to use the ssh binary
(not installed here, so ``DOCKER_HOST=ssh://`` failed before this module), its ssh-binary mode starts one
ssh process (and one ``docker system dial-stdio`` on the engine's host) per HTTP request, and its paramiko
mode reads only a few keys of ``~/.ssh/config`` and does the cryptography in Python.

The engine's socket is ``/var/run/docker.sock`` unless the URL names another path
(``ssh://me@host/run/user/1000/docker.sock`` for a rootless engine). The ssh user must be allowed to use it
(the engine host's ``docker`` group) and its sshd must allow socket forwarding: ``AllowStreamLocalForwarding``
and, in OpenSSH, ``AllowTcpForwarding`` too (it gates socket forwarding as well); both are on by default. The ssh process dies with the controller (``PR_SET_PDEATHSIG``) and with :meth:`SshTunnel.close`.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import InfraError, PrerequisiteError

DEFAULT_SOCKET = "/var/run/docker.sock"
OPEN_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class SshTarget:
    """Where an ``ssh://[user@]host[:port][/socket]`` URL points."""

    host: str
    user: str | None
    port: int | None
    socket: str

    @classmethod
    def parse(cls, url: str) -> SshTarget:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "ssh" or not parts.hostname:
            raise ValueError(f"{url!r} is not ssh://[user@]host[:port][/socket path]")
        if parts.password is not None:
            raise ValueError("a password in an ssh:// URL is not supported: use a key (ssh-agent or the ssh config)")
        if parts.query or parts.fragment:
            raise ValueError(f"{url!r} has a query or fragment: only ssh://[user@]host[:port][/socket path]")
        try:
            port = parts.port
        except ValueError as e:
            raise ValueError(f"{url!r} has a bad port: {e}") from None
        socket = parts.path or DEFAULT_SOCKET
        if not socket.startswith("/") or any(c in socket for c in ":\n\x00"):
            raise ValueError(f"{url!r}: the engine's socket must be an absolute path without ':'")
        host = parts.hostname
        if host.startswith("-") or (parts.username and parts.username.startswith("-")):
            raise ValueError(f"{url!r}: a host or user may not start with '-'")
        return cls(host=host, user=parts.username or None, port=port, socket=socket)


def ssh_argv(target: SshTarget, local_socket: Path, *, ssh_config: Path | None = None) -> list[str]:
    """The ssh command line that forwards ``local_socket`` to the engine's socket (argv, never a shell)."""
    argv = [
        "ssh",
        "-N",
        "-T",
        "-o",
        "BatchMode=yes",
        "-o",
        "ExitOnForwardFailure=yes",
        "-o",
        "StreamLocalBindUnlink=yes",
        "-o",
        "ServerAliveInterval=15",
        "-o",
        "ServerAliveCountMax=3",
        "-o",
        "ConnectTimeout=15",
    ]
    if ssh_config is not None:
        argv += ["-F", str(ssh_config)]
    if target.port is not None:
        argv += ["-p", str(target.port)]
    if target.user is not None:
        argv += ["-l", target.user]
    return [*argv, "-L", f"{local_socket}:{target.socket}", "--", target.host]


def _stop(proc: subprocess.Popen[bytes], directory: Path) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    shutil.rmtree(directory, ignore_errors=True)


def _prctl() -> Any:
    """libc's ``prctl``, looked up in the parent: the child between fork and exec only calls it."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with_parent(prctl: Any) -> Callable[[], None]:
    def child() -> None:  # pragma: no cover - runs in the child between fork and exec
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return child


class SshTunnel:
    """A running ``ssh -L``: :attr:`socket` is the engine's socket on this machine until :meth:`close`."""

    def __init__(self, url: str, *, ssh_config: Path | None = None, timeout_s: float = OPEN_TIMEOUT_S) -> None:
        try:
            target = SshTarget.parse(url)
        except ValueError as e:
            raise PrerequisiteError(f"engine {url}: {e}") from None
        if shutil.which("ssh") is None:
            raise PrerequisiteError(
                f"engine {url} is reached over ssh, and no ssh client is installed here",
                hint="install OpenSSH's client (apt-get install openssh-client)",
            )
        self.url = url
        self._dir = Path(tempfile.mkdtemp(prefix="hx-ssh-"))  # 0700: the socket is this user's alone
        self.socket = self._dir / "docker.sock"
        self._log = self._dir / "ssh.log"
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(
                ssh_argv(target, self.socket, ssh_config=ssh_config),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                preexec_fn=_die_with_parent(_prctl()),
            )
        self._finalizer = weakref.finalize(self, _stop, self._proc, self._dir)
        try:
            self._wait_open(timeout_s)
        except BaseException:
            self.close()
            raise

    def _wait_open(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PrerequisiteError(
                    f"ssh to the engine at {self.url} failed (exit {self._proc.returncode}): {self.stderr()}",
                    hint="check that `ssh` reaches that host without a prompt (a key in the agent or the ssh "
                    "config, its host key in known_hosts) and that the user may use the engine's socket",
                )
            if self.socket.exists():
                return
            time.sleep(0.05)
        raise InfraError(f"ssh to the engine at {self.url} opened no socket within {timeout_s:g} s: {self.stderr()}")

    def stderr(self) -> str:
        try:
            text = self._log.read_text(errors="replace").strip()
        except OSError:
            return ""
        return " ".join(text.split())[-400:] or "(ssh said nothing)"

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        """Stop ssh and remove the socket's directory; idempotent (also run when the tunnel is collected)."""
        self._finalizer()
