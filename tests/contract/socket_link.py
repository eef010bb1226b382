"""A relay between a docker client and the real engine's unix socket whose connections can be cut.

The contract suite points an :class:`harness.sandbox.engine.Engine` at the relay (``DOCKER_HOST``) and
cuts every open connection while the engine waits for a container: the client sees what it sees when
dockerd restarts or a proxy resets, and ``Engine.wait`` must call that an infrastructure error, not a
timeout. New connections are still relayed after a cut (the engine "comes back"), so the run can remove
its container. Nothing is mocked: real engine, real docker-py, real sockets.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path


def engine_socket() -> Path | None:
    """The local engine's unix socket (``DOCKER_HOST=unix://...`` or the default), None for a remote one."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    return Path(host.removeprefix("unix://"))


class SocketLink:
    def __init__(self, path: Path, upstream: Path) -> None:
        self.path = path
        self.upstream = upstream
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(16)
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self.cuts = 0
        threading.Thread(target=self._accept, name="socket-link", daemon=True).start()

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                engine.connect(str(self.upstream))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, engine]
            threading.Thread(target=self._pump, args=(client, engine), daemon=True).start()
            threading.Thread(target=self._pump, args=(engine, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Drop every connection open now (both directions, at once)."""
        with self._lock:
            doomed, self._open = self._open, []
            self.cuts += 1
        for s in doomed:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._server.close()
        self.cut()
        self.path.unlink(missing_ok=True)
