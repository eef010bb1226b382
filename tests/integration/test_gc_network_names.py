"""`skilltrial gc` removes a network whose name the API cannot address (issue 13: a trailing newline)."""

from __future__ import annotations

import docker
import pytest

from harness.sandbox import lifecycle
from harness.sandbox.engine import Engine
from harness.sandbox.labels import make_labels
from harness.sandbox.runtime import DockerObject


@pytest.mark.docker
def test_a_network_named_with_a_trailing_newline_is_removed_by_id_and_verified_gone(engine: Engine) -> None:
    name = "harness-input-gc-probe\n"
    labels = make_labels("input-gc-probe", role="trial", trial_id="t", ttl_s=60)
    client = docker.from_env()
    net_id = client.api.create_network(name, labels=labels)["Id"]
    try:
        # positive control: removal by name alone answers NotFound while the network stays
        with pytest.raises(docker.errors.NotFound):
            client.api.remove_network(name)
        assert client.api.inspect_network(net_id)["Name"] == name
        removed, errors = lifecycle.remove_objects(engine, [DockerObject("network", name)])
        assert errors == []
        assert removed == [DockerObject("network", name)]
        with pytest.raises(docker.errors.NotFound):
            client.api.inspect_network(net_id)
    finally:
        try:
            client.api.remove_network(net_id)
        except docker.errors.NotFound:
            pass
