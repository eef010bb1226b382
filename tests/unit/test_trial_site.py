"""GatewaySite on the FakeRuntime: an attempt's gateway, by itself (no workspace: a trigger run's), and its teardown.

The whole trial's use of the site (every phase, every kind of workspace) is tests/unit/test_trial_run.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.errors import InfraError
from harness.sandbox import roles
from harness.sandbox.labels import make_labels
from harness.sandbox.names import TrialNames
from harness.sandbox.runtime import Limits
from harness.sidecars.gatewaylog import GatewayEvent, Listening
from harness.trial.reaper import TrialReaper
from harness.trial.site import GatewaySite, RunCore
from tests.fakes import GATEWAY, FakeRuntime, Outcome

TRIAL_IMAGE, SIDECAR_IMAGE = "harness-trial:fake", "harness-sidecar:fake"
IMAGES = [TRIAL_IMAGE, SIDECAR_IMAGE]
RUN_ID = "s1"
RUN_OWN = [("network", f"hx-{RUN_ID}-up"), ("volume", f"hx-{RUN_ID}-key")]


def _run_site(runtime: FakeRuntime, tmp_path: Path) -> RunCore:
    user = f"{os.getuid()}:{os.getgid()}"
    run_labels = make_labels(RUN_ID, role="run", ttl_s=60)
    runtime.create_network(f"hx-{RUN_ID}-up", run_labels, internal=True)
    runtime.create_volume(f"hx-{RUN_ID}-key", run_labels)
    return RunCore(
        engine=runtime,
        run_id=RUN_ID,
        profile=roles.Profile(TRIAL_IMAGE, SIDECAR_IMAGE, Limits(), user=user, sidecar_user=user),
        root=tmp_path,
        key_volume=f"hx-{RUN_ID}-key",
        upstream="http://upstream:8080",
        upstream_network=f"hx-{RUN_ID}-up",
        gateway_env={"GATEWAY_PRICES": "run's", "GATEWAY_PROXY_FILE": "/route/proxy"},
    )


def _site(run: RunCore, reaper: TrialReaper | None = None) -> GatewaySite[RunCore]:
    names = TrialNames(RUN_ID, "q1-s0-a1")
    labels = make_labels(RUN_ID, role="trial", trial_id="q1.skill.0", ttl_s=60)
    return GatewaySite(
        run,
        names,
        labels,
        gateway_budget_usd=0.5,
        gateway_env={"GATEWAY_PRICES": "this attempt's", "GATEWAY_STOP_ON_SKILL": "careful"},
        trial_id="q1.skill.0",
        reaper=reaper,
    )


def test_a_site_without_a_workspace_brings_up_its_gateway_and_leaves_only_the_runs_objects(tmp_path: Path) -> None:
    runtime = FakeRuntime({"gateway": GATEWAY}, images=IMAGES)
    run = _run_site(runtime, tmp_path)
    seen: list[GatewayEvent] = []
    with _site(run) as site:
        site.start_gateway()
        ip = site.open_gateway(seen.append)
        gateway = runtime.containers[site.names.container("gateway")]
        assert ip == site.gateway_ip and site.network in gateway.networks
        env = gateway.spec.env
        assert env["GATEWAY_STOP_ON_SKILL"] == "careful" and env["GATEWAY_PRICES"] == "this attempt's"
        assert env["GATEWAY_PROXY_FILE"] == "/route/proxy", "the run's settings, where the attempt names none"
        assert [o.name for o in runtime.left() if o.kind == "volume"] == [RUN_OWN[1][1]], "no workspace was made"
    assert site.leftovers == []
    assert [(o.kind, o.name) for o in runtime.left()] == RUN_OWN
    assert any(isinstance(e, Listening) for e in seen), "the follower heard the gateway's log"


def test_a_gateway_that_never_listens_is_raised_by_open_and_still_torn_down(tmp_path: Path) -> None:
    runtime = FakeRuntime({"gateway": Outcome(exit_code=1, stderr=b"boom\n")}, images=IMAGES)
    run = _run_site(runtime, tmp_path)
    with _site(run) as site:
        site.start_gateway()
        with pytest.raises(InfraError, match="exited before listening"):
            site.open_gateway(lambda _event: None)
    assert [(o.kind, o.name) for o in runtime.left()] == RUN_OWN


def test_with_a_reaper_the_teardown_is_handed_over_and_done_when_it_closes(tmp_path: Path) -> None:
    runtime = FakeRuntime({"gateway": GATEWAY}, images=IMAGES)
    run = _run_site(runtime, tmp_path)
    problems: list[str] = []
    with TrialReaper(problems.append) as reaper:
        with _site(run, reaper) as site:
            site.start_gateway()
            site.open_gateway()
        assert site.leftovers == [], "the reaper reports what it cannot remove, not the site"
    assert problems == []
    assert [(o.kind, o.name) for o in runtime.left()] == RUN_OWN
