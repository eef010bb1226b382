"""Where the gateway sends a real run's model traffic, and how it gets there.

A user in a company rarely talks to ``api.anthropic.com`` directly: there is an
LLM gateway (their own ``ANTHROPIC_BASE_URL``), an egress proxy (``HTTPS_PROXY``
/ ``NO_PROXY``) and a company CA. All of it applies to **the gateway sidecar's
upstream connection only**: the agent container gets none of these variables
(its only peer is the trial's gateway, see :func:`harness.sandbox.roles.claude_env`).

    url       --upstream, else the user's ANTHROPIC_BASE_URL, else the public API
    proxy     HTTPS_PROXY (HTTP_PROXY for an http:// upstream), unless NO_PROXY covers the host
    extra_ca  --upstream-ca: a PEM bundle trusted beside the image's bundle (a volume, not baked)
    network   --upstream-network: an existing Docker network for the gateway's upstream side

What shapes the comparison is provenance (host, proxy yes/no, CA hash: never the
proxy's address or credentials), so two arms that went different ways are
INVALID and a baseline is only reused under the same route. The proxy's URL (it may
carry ``user:password``) reaches the gateway and the preflight as the key does: a
file (``0400``, the sidecars' uid) in the route's volume, never an environment
variable, which anyone who may ``docker inspect`` reads. Before any trial,
:func:`preflight` opens the tunnel and finishes the TLS handshake from a sidecar
on the upstream network (no request, no key): a wrong CA or a refusing proxy
fails the run at once, naming the problem, instead of as N infra errors.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError, InfraError, PrerequisiteError
from harness.sandbox import lifecycle, volumes
from harness.sandbox.labels import ROLE
from harness.sandbox.runtime import ContainerRuntime, ContainerSpec, Limits, VolumeMount
from harness.sidecars.upstream_link import bypass_proxy

REAL_UPSTREAM = "https://api.anthropic.com"
ROUTE_MOUNT = "/run/harness/route"
"""The route volume's mountpoint in the gateway and the upstream preflight (never in the agent)."""
CA_MOUNT = f"{ROUTE_MOUNT}/upstream-ca.pem"
PROXY_FILE = f"{ROUTE_MOUNT}/proxy-url"
"""The proxy's URL with its credentials: readable by the sidecars' uid only (``GATEWAY_PROXY_FILE``)."""


@dataclass(frozen=True)
class Upstream:
    url: str = REAL_UPSTREAM
    proxy: str = ""
    """http://[user:pass@]host:port, or empty. May carry credentials: never recorded or logged."""
    no_proxy: str = ""
    extra_ca: Path | None = None
    network: str | None = None

    @property
    def host(self) -> str:
        parts = urllib.parse.urlsplit(self.url)
        return parts.netloc.rpartition("@")[2]

    @property
    def via_proxy(self) -> bool:
        return bool(self.proxy) and not bypass_proxy(urllib.parse.urlsplit(self.url).hostname or "", self.no_proxy)

    def ca_bytes(self) -> bytes:
        if self.extra_ca is None:
            return b""
        try:
            return self.extra_ca.read_bytes()
        except OSError as e:
            raise PrerequisiteError(f"upstream CA bundle {self.extra_ca} cannot be read: {e.strerror}") from None

    def provenance(self) -> dict[str, str]:
        """The route's fields of :class:`harness.records.Provenance`."""
        return {
            "upstream_host": self.host,
            "upstream_proxy": "yes" if self.via_proxy else "no",
            "upstream_ca_sha256": hashlib.sha256(self.ca_bytes()).hexdigest(),
        }

    def gateway_env(self) -> dict[str, str]:
        """The gateway's settings for this route (read by ``sidecars/upstream_link.py``): no secret, the
        proxy's URL is a file of the route's volume (:func:`stage_route`)."""
        env = {"GATEWAY_UPSTREAM": self.url}
        if self.proxy:
            env["GATEWAY_PROXY_FILE"] = PROXY_FILE
            env["GATEWAY_NO_PROXY"] = self.no_proxy
        if self.extra_ca is not None:
            env["GATEWAY_EXTRA_CA"] = CA_MOUNT
        return env

    def secrets(self) -> list[str]:
        """What must be redacted from every record and log (the proxy's password)."""
        password = urllib.parse.urlsplit(self.proxy).password if self.proxy else None
        return [password] if password else []


def from_env(
    env: Mapping[str, str], *, url: str | None = None, extra_ca: Path | None = None, network: str | None = None
) -> Upstream:
    """The route of a real run from the command line and the user's environment (checked)."""
    chosen = url or env.get("ANTHROPIC_BASE_URL") or REAL_UPSTREAM
    where = "--upstream" if url else "ANTHROPIC_BASE_URL" if env.get("ANTHROPIC_BASE_URL") else "--upstream"
    parts = urllib.parse.urlsplit(chosen)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(where, f"{chosen!r} is not an http(s) URL with a host")
    if parts.username or parts.password:
        raise ConfigError(where, "must not carry credentials (the gateway injects the key)")
    names = ("HTTPS_PROXY", "https_proxy") if parts.scheme == "https" else ("HTTP_PROXY", "http_proxy")
    proxy_var = next((n for n in names if env.get(n)), None)
    proxy = env.get(proxy_var, "") if proxy_var else ""
    if proxy:
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if p.scheme != "http" or not p.hostname:
            raise ConfigError(proxy_var or "HTTPS_PROXY", "must be an http://host:port CONNECT proxy")
        proxy = urllib.parse.urlunsplit(p)
    no_proxy = env.get("NO_PROXY") or env.get("no_proxy") or ""
    if extra_ca is not None and not extra_ca.is_file():
        raise ConfigError(extra_ca, "the upstream CA bundle does not exist")
    return Upstream(url=chosen.rstrip("/"), proxy=proxy, no_proxy=no_proxy, extra_ca=extra_ca, network=network)


def stage_route(
    route: Upstream,
    engine: ContainerRuntime,
    *,
    volume: str,
    image: str,
    labels: Mapping[str, str],
    owner: tuple[int, int],
) -> tuple[VolumeMount, ...]:
    """A volume of the route's files for the gateway and the preflight, made through the archive API:
    the extra CA bundle (world-readable: it is no secret) and the proxy's URL (``0400``, ``owner``: the
    sidecars' uid, as the key's file); none when the route has neither."""
    entries = []
    if route.extra_ca is not None:
        entries.append(volumes.Entry(CA_MOUNT.rpartition("/")[2], route.ca_bytes(), 0o444))
    if route.proxy:
        entries.append(volumes.Entry(PROXY_FILE.rpartition("/")[2], route.proxy.encode(), 0o400, *owner))
    if not entries:
        return ()
    volumes.make(engine, volume, volumes.tar_entries(entries), image=image, labels=labels)
    return (VolumeMount(volume, ROUTE_MOUNT, read_only=True),)


def preflight(
    engine: ContainerRuntime,
    route: Upstream,
    *,
    name: str,
    image: str,
    user: str,
    network: str,
    labels: Mapping[str, str],
    volumes: tuple[VolumeMount, ...],
) -> None:
    """One TLS handshake to the upstream, through the proxy, from the upstream network. Raises
    :class:`InfraError` naming the problem (a certificate, a refusing proxy) when it fails."""
    spec = ContainerSpec(
        name=name,
        image=image,
        command=("python3", "/opt/harness/upstream_link.py"),
        labels={**labels, ROLE: "preflight"},
        user=user,
        env={
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "SSL_CERT_FILE": "/etc/harness/ca-bundle.crt",
            **route.gateway_env(),
        },
        volumes=volumes,
        network=network,
        limits=Limits(memory="128m", cpus=0.5, pids=32, tmpfs_size="8m"),
        tmpfs=("/tmp",),
        workdir="/tmp",
    )
    run = lifecycle.run(engine, spec, deadline_s=60, output_cap=65536)
    verdict: dict[str, object] = {}
    for line in run.stdout.decode("utf-8", "replace").splitlines():
        try:
            verdict = json.loads(line)
        except ValueError:
            continue
    if run.exit_code == 0 and verdict.get("ok"):
        return
    problem = verdict.get("error") or f"the preflight exited {run.exit_code}: {run.stderr[-400:]!r}"
    raise InfraError(f"the model API at {route.host} cannot be reached: {problem}")
