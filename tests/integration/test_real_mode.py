"""Real mode end to end, offline: HTTPS upstream, a test CA, an HTTP CONNECT proxy, the key from the environment.

The test plays the company network a user's ``make eval`` meets. It makes its own
CA and server certificate (openssl), starts a Messages API over TLS (the scripted
model behind an ssl context, answering only the exact key from
``ANTHROPIC_API_KEY``) on one internal network, an HTTP CONNECT proxy on that
network and on a second internal network, and runs the harness in real mode (no
scripted scenario) with ``--upstream https://<api>:8443``, ``HTTPS_PROXY`` and
``--upstream-ca`` and ``--upstream-network`` set to the second network. The
gateway cannot resolve the API's name at all: its only way there is the proxy.

The proxy asks for credentials (``user:password`` in ``HTTPS_PROXY``), as a company
proxy often does.

Checks: the trial completes; the key reached the server (its hash on every
request) and nowhere else (not the proxy, not the agent's environment, not the
results); the proxy's credentials reached the proxy; neither the key nor the proxy's
password is in any container's environment (``docker inspect`` shows it to anyone who
may talk to the engine); the proxy settings never reach the agent; a wrong CA and a
refusing proxy fail the run before any trial, naming the certificate or the proxy;
nothing scripted-only runs in real mode.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.errors import InfraError
from harness.experiment import experiment, resources, reuse, upstream
from harness.experiment.options import RunOptions
from harness.reporting.model import analyze_records
from harness.sandbox import lifecycle
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import BindMount, ContainerSpec, DockerObject, Limits
from harness.study import scenario
from harness.study.config import load_study
from harness.trial.gateway import wait_listening
from tests.integration.helpers import demo_task_scripts, host_paths, latest, write_experiment

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="the test CA is made with the openssl command"),
]

PROXY_SCRIPT = Path(__file__).resolve().parent / "connect_proxy.py"
API_PORT = 8443
PROXY_PORT = 3128


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
             "-days", "2", "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    return key, cert


def make_server_cert(directory: Path, ca: tuple[Path, Path], host: str) -> tuple[Path, Path]:
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ext = directory / "server.ext"
    ext.write_text(f"subjectAltName=DNS:{host}\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={host}")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]), "-CAcreateserial",
             "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    for path in (key, cert):
        os.chmod(path, 0o444)  # the server runs as an unprivileged user
    return cert, key


@dataclass
class Net:
    token: str
    api: str
    proxy: str
    refusing_proxy: str
    edge: str
    inner: str
    key: str
    proxy_user: str
    proxy_password: str
    ca: Path
    wrong_ca: Path
    prereg: Path
    scenario: Path


def _labels() -> dict[str, str]:
    return make_labels("realpath-test", role="test", ttl_s=1800, purpose="test")


def _container(name: str, image: str, command: tuple[str, ...], network: str, **kw: Any) -> ContainerSpec:
    return ContainerSpec(
        name=name,
        image=image,
        command=command,
        labels=_labels(),
        user="65534:65534",
        network=network,
        limits=Limits(memory="256m", cpus=0.5, pids=64, tmpfs_size="16m"),
        tmpfs=("/tmp",),
        workdir="/tmp",
        **kw,
    )


@pytest.fixture(scope="module")
def net(engine: Engine, images: ImageSet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    from harness.demo import prepare_demo

    tmp = tmp_path_factory.mktemp("realpath")
    token = secrets.token_hex(3)
    n = Net(
        token=token,
        api=f"hx-realpath-{token}-api",
        proxy=f"hx-realpath-{token}-proxy",
        refusing_proxy=f"hx-realpath-{token}-refuse",
        edge=f"hx-realpath-{token}-edge",
        inner=f"hx-realpath-{token}-inner",
        key="sk-ant-realpath-" + secrets.token_urlsafe(24),
        proxy_user="harness",
        proxy_password="pw-" + secrets.token_urlsafe(12),
        ca=Path(),
        wrong_ca=Path(),
        prereg=Path(),
        scenario=Path(),
    )
    tls = tmp / "tls"
    tls.mkdir(mode=0o755)
    ca = make_ca(tls, "realpath-test-ca")
    n.ca = ca[1]
    n.wrong_ca = make_ca(tls, "realpath-wrong-ca")[1]
    cert, key = make_server_cert(tls, ca, n.api)

    setup = prepare_demo(tmp / "demo")
    fix = demo_task_scripts(setup.root)["fix-mean"]
    env_probe = [{"tool": "Bash", "input": {"command": "env | sort", "description": "env"}, "probe": "env"}]
    baseline = {"p_success": 1, "prelude": env_probe}
    n.prereg, n.scenario = write_experiment(
        setup.root,
        "realmode",
        tasks=["fix-mean"],
        scenario={
            "seed": 1,
            "skill_marker": "careful-fixer-7c1e",
            "tasks": {"fix-mean": {**fix, "arms": {"baseline": baseline, "skill": {"p_success": 1}}}},
        },
    )
    study = load_study(n.prereg)
    compiled = scenario.compile_scenario(
        n.scenario, scenario.load_scenario(n.scenario), study.target_tasks(), skill=study.prereg.skill
    )
    scen_dir = tmp / "scenario"
    scen_dir.mkdir(mode=0o755)
    (scen_dir / "scenario.json").write_bytes(compiled)
    os.chmod(scen_dir / "scenario.json", 0o444)
    proxy_dir = tmp / "proxy"
    proxy_dir.mkdir(mode=0o755)
    (proxy_dir / "connect_proxy.py").write_bytes(PROXY_SCRIPT.read_bytes())
    os.chmod(proxy_dir / "connect_proxy.py", 0o444)

    made: list[DockerObject] = []
    try:
        for network in (n.inner, n.edge):
            engine.create_network(network, _labels(), internal=True)
            made.append(DockerObject("network", network))
        api = _container(
            n.api,
            images.sidecar,
            ("python3", "/opt/harness/scripted_api.py", "/etc/scripted/scenario.json", str(API_PORT)),
            n.inner,
            env={
                "PATH": "/usr/bin:/bin",
                "SCRIPTED_TLS_CERT": "/etc/tls/server.pem",
                "SCRIPTED_TLS_KEY": "/etc/tls/server.key",
                "SCRIPTED_REQUIRE_KEY_SHA256": hashlib.sha256(n.key.encode()).hexdigest(),
            },
            mounts=(
                BindMount(scen_dir, "/etc/scripted"),
                BindMount(cert, "/etc/tls/server.pem"),
                BindMount(key, "/etc/tls/server.key"),
            ),
        )
        engine.create(api)
        made.insert(0, DockerObject("container", n.api))
        engine.start(n.api)
        credentials = hashlib.sha256(f"{n.proxy_user}:{n.proxy_password}".encode()).hexdigest()
        for name, refuse, auth in ((n.proxy, "0", credentials), (n.refusing_proxy, "1", "")):
            proxy = _container(
                name,
                images.sidecar,
                ("python3", "/opt/proxy/connect_proxy.py", str(PROXY_PORT)),
                n.edge,
                env={"PATH": "/usr/bin:/bin", "PROXY_REFUSE": refuse, "PROXY_REQUIRE_AUTH_SHA256": auth},
                mounts=(BindMount(proxy_dir, "/opt/proxy"),),
            )
            engine.create(proxy, extra_networks=[n.inner])
            made.insert(0, DockerObject("container", name))
            engine.start(name)
        for name in (n.api, n.proxy, n.refusing_proxy):
            wait_listening(engine, name)
        yield n
    finally:
        lifecycle.remove_objects(engine, made)


def logged(engine: Engine, name: str) -> list[dict[str, Any]]:
    data, _ = engine.logs(name, stdout=True, stderr=False)
    return [json.loads(line) for line in data.decode().splitlines() if line.startswith("{")]


def run_real(
    engine: Engine, n: Net, out: Path, work_root: Path, *, proxy: str, ca: Path
) -> experiment.ExperimentResult:
    """The harness in real mode, configured as `skilltrial eval` configures it from the user's environment
    (the proxy that asks for credentials gets them in the URL)."""
    credentials = f"{n.proxy_user}:{n.proxy_password}@" if proxy == n.proxy else ""
    env = {
        "ANTHROPIC_API_KEY": n.key,
        "HTTPS_PROXY": f"http://{credentials}{proxy}:{PROXY_PORT}",
        "NO_PROXY": "localhost",
    }
    route = upstream.from_env(env, url=f"https://{n.api}:{API_PORT}", extra_ca=ca, network=n.edge)
    options = RunOptions(
        out=out,
        jobs=2,
        api_key=env["ANTHROPIC_API_KEY"],
        route=route,
        paths=host_paths(work_root),
        host_slots=2,
        env=env,
    )
    return experiment.Experiment(load_study(n.prereg), engine, options).run()


@pytest.fixture
def no_scripted_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real mode must not touch anything that exists for the scripted model."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("scripted-only code ran in real mode")

    for target, attr in (
        (scenario, "load_scenario"),
        (scenario, "compile_scenario"),
        (reuse, "scripted_views"),
        (resources.RunResources, "_start_scripted"),
        (resources.RunResources, "_save_scripted_log"),
    ):
        monkeypatch.setattr(target, attr, refuse)


def files_with(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.fixture
def inspected(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """``docker inspect`` of every container the harness creates, taken the moment it is created: none is
    missed, however short-lived (a volume's filler, the upstream preflight)."""
    seen: dict[str, dict[str, Any]] = {}
    create = engine.create

    def create_and_inspect(spec: ContainerSpec, **kw: Any) -> str:
        container_id = create(spec, **kw)
        seen[spec.name] = engine.inspect(spec.name)
        return container_id

    monkeypatch.setattr(engine, "create", create_and_inspect)
    return seen


def secrets_in_env(seen: dict[str, dict[str, Any]], needles: list[str]) -> list[tuple[str, str]]:
    """(container, variable name) for every environment variable holding one of ``needles``."""
    return [
        (name, var.partition("=")[0])
        for name, data in seen.items()
        for var in data["Config"]["Env"] or []
        if any(needle in var for needle in needles)
    ]


def test_a_real_run_through_a_proxy_to_an_https_api_completes(
    engine: Engine,
    images: ImageSet,
    net: Net,
    tmp_path: Path,
    work_root: Path,
    no_scripted_code: None,
    inspected: dict[str, dict[str, Any]],
) -> None:
    result = run_real(engine, net, tmp_path / "out", work_root, proxy=net.proxy, ca=net.ca)
    records = latest(result)
    assert sorted(records) == ["fix-mean.baseline.0", "fix-mean.skill.0"]
    for r in records.values():
        assert r.status == "completed", (r.trial_id, r.status, r.error)
        assert r.verify is not None and r.verify.exit_code == 0
        assert r.judge is not None and r.judge.verdict == "pass"
        assert r.gateway is not None and r.gateway.upstream_statuses and set(r.gateway.upstream_statuses) == {"200"}
        prov = r.provenance
        assert prov.upstream_host == f"{net.api}:{API_PORT}" and prov.upstream_proxy == "yes"
        assert prov.upstream_ca_sha256 == hashlib.sha256(net.ca.read_bytes()).hexdigest()
    data = analyze_records(
        load_study(net.prereg), result.records, lock_hash=result.lock_hash, experiment_dir=tmp_path / "out"
    )
    assert data.decision.verdict != "invalid", data.decision

    # the key reached the server: every request the API answered carried exactly it
    api_log = logged(engine, net.api)
    requests = [e for e in api_log if e.get("event") == "request"]
    assert requests and {e["key_sha256"] for e in requests} == {hashlib.sha256(net.key.encode()).hexdigest()}
    assert not [e for e in api_log if e.get("event") == "unauthorized"]
    # ... through the proxy (the gateway cannot even resolve the API's name on its network), with its credentials
    proxy_log = logged(engine, net.proxy)
    connects = [e for e in proxy_log if e.get("event") == "connect"]
    assert connects and {e["target"] for e in connects} == {f"{net.api}:{API_PORT}"}
    assert all(e["authenticated"] for e in connects) and not [e for e in proxy_log if e["event"] == "unauthorized"]
    # ... and nowhere else: not in the proxy's or the API's logs, not in any result file
    for name in (net.proxy, net.api):
        assert net.key.encode() not in engine.logs(name, stdout=True, stderr=True)[0]
    assert files_with(tmp_path / "out", net.key.encode()) == []
    assert files_with(tmp_path / "out", net.proxy_password.encode()) == []
    # no secret is in any container's environment (the key and the proxy's URL are read-only files of the
    # sidecars'), in every container of the run, the route's preflight and the volumes' fillers included
    roles = {data["Config"]["Labels"].get("harness.role") for data in inspected.values()}
    assert {"preflight", "gateway", "agent", "collect", "verify", "judge"} <= roles, roles
    needles = [net.key, net.proxy_password]
    assert secrets_in_env(inspected, needles) == []
    gateway_env = next(d for d in inspected.values() if d["Config"]["Labels"].get("harness.role") == "gateway")
    assert any(v.startswith("GATEWAY_PROXY_FILE=") for v in gateway_env["Config"]["Env"])
    # positive control: a secret planted in a container's environment is found by the same scan
    planted = _container(f"hx-realpath-{net.token}-planted", images.sidecar, ("true",), "none",
                         env={"PLANTED": f"http://{net.proxy_user}:{net.proxy_password}@proxy"})  # fmt: skip
    try:
        engine.create(planted)
        assert secrets_in_env(inspected, needles) == [(planted.name, "PLANTED")]
    finally:
        lifecycle.remove_objects(engine, [DockerObject("container", planted.name)])
    # the agent's environment has neither the key nor the proxy settings
    probes = [e for e in api_log if e.get("event") == "probe" and e.get("name") == "env"]
    assert probes, "the env probe ran in the agent container"
    agent_env = probes[0]["output"]
    assert "ANTHROPIC_BASE_URL=http://" in agent_env  # positive control: the probe saw the environment
    assert net.key not in agent_env and "proxy" not in agent_env.lower() and "upstream" not in agent_env.lower()


def test_positive_control_the_api_refuses_any_other_key(engine: Engine, net: Net, images: ImageSet) -> None:
    code = (
        "import http.client, ssl, sys\n"
        "c = http.client.HTTPSConnection(sys.argv[1], int(sys.argv[2]), context=ssl._create_unverified_context())\n"
        "c.request('POST', '/v1/messages', body=b'{}', headers={'x-api-key': 'sk-ant-wrong'})\n"
        "print(c.getresponse().status)\n"
    )
    spec = _container(
        f"hx-realpath-{net.token}-probe", images.sidecar, ("python3", "-c", code, net.api, str(API_PORT)), net.inner
    )
    assert lifecycle.run(engine, spec, deadline_s=60).stdout.decode().strip() == "401"


def test_a_wrong_ca_fails_the_run_before_any_trial_naming_the_certificate(
    engine: Engine, net: Net, tmp_path: Path, work_root: Path
) -> None:
    with pytest.raises(InfraError, match="certificate verification failed") as err:
        run_real(engine, net, tmp_path / "out", work_root, proxy=net.proxy, ca=net.wrong_ca)
    assert net.api in str(err.value)
    results = tmp_path / "out" / "results.jsonl"
    assert not results.exists() or results.read_text() == "", "no trial ran"


def test_a_refusing_proxy_fails_the_run_before_any_trial_naming_the_proxy(
    engine: Engine, net: Net, tmp_path: Path, work_root: Path
) -> None:
    with pytest.raises(InfraError, match=r"proxy refused the tunnel.*403") as err:
        run_real(engine, net, tmp_path / "out", work_root, proxy=net.refusing_proxy, ca=net.ca)
    assert net.key not in str(err.value)
    refused = [e for e in logged(engine, net.refusing_proxy) if e.get("event") == "refused"]
    assert refused and refused[-1]["target"] == f"{net.api}:{API_PORT}"  # the refusal was the proxy's
    results = tmp_path / "out" / "results.jsonl"
    assert not results.exists() or results.read_text() == "", "no trial ran"
