"""Fixtures of the attack suite: a prepared, locked demo setup and plain control containers."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.sandbox.labels import make_labels


@pytest.fixture(scope="module")
def sec_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The demo repository and skills in a fresh directory (experiments are written into it)."""
    from harness.demo import prepare_demo

    tmp = tmp_path_factory.mktemp("sec")
    setup = prepare_demo(tmp / "demo")
    return setup.root


def control_run(
    image: str, argv: list[str], *, extra: list[str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """A plain ``docker run`` (no harness hardening): the positive control for in-container probes.
    Labelled like every harness object so a crash leaves nothing the test fixtures would miss."""
    labels = make_labels("sec-control", role="control", ttl_s=600, purpose="test")
    label_args = [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]
    name = f"hxsec-control-{secrets.token_hex(4)}"
    try:
        return subprocess.run(
            ["docker", "run", "--name", name, "--network", "none", *label_args, *(extra or []), image, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
