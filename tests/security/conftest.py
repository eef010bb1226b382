"""Fixtures of the attack suite: a prepared, locked demo setup (the control containers are in ``helpers``)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def sec_setup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo repository and skills in a fresh directory (experiments are written into it)."""
    from harness.demo import prepare_demo

    tmp = tmp_path_factory.mktemp("sec")
    setup = prepare_demo(tmp / "demo")
    return setup.root
