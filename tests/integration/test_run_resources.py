"""An experiment's run resources (StudyResources) on the real engine: a scripted API that dies before listening
leaves nothing behind.

The set-up gets as far as its last step (run directory, key file, skill copy, upstream network, the
scripted API's container created and started) before the scripted model exits on a scenario it cannot
read. Everything must be gone afterwards: the conftest leak check fails the test on any container or
network left, and the ``work_root`` fixture on any directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness.errors import InfraError
from harness.experiment.events import NullEvents
from harness.experiment.resources import SCRIPTED_LOG, StudyResources, StudySetup
from harness.experiment.upstream import Upstream
from harness.redact import Redactor
from harness.results.store import ExperimentDir
from harness.sandbox import roles
from harness.sandbox.engine import Engine
from harness.sandbox.labels import RUN, make_labels
from harness.study.config import load_study

pytestmark = pytest.mark.docker


def test_a_scripted_api_that_dies_while_starting_leaves_nothing(
    engine: Engine, images: Any, demo_setup: Any, work_root: Path, tmp_path: Path
) -> None:
    study = load_study(next(iter(demo_setup.preregistrations.values())))
    users = roles.role_users(engine, os.getuid(), os.getgid())
    run_id = "resfail" + os.urandom(2).hex()
    setup = StudySetup(
        run_id=run_id,
        work_root=work_root,
        labels=make_labels(run_id, role="run", ttl_s=600),
        profile=roles.make_profile(study.prereg.execution.resources, images.trial, images.sidecar, users, None),
        key="sk-ant-test-" + os.urandom(8).hex(),
        key_owner=users.sidecar,
        study=study,
        route=Upstream(),
        scenario=b"this is not a compiled scenario",
    )
    store = ExperimentDir(tmp_path / "out", Redactor([setup.key]))
    made: list[set[tuple[str, str]]] = []  # positive control: what existed when teardown began
    resources = StudyResources(engine, setup, store, NullEvents().message)
    original = resources._save_scripted_log

    def save_and_look() -> None:
        made.append({(kind, name) for kind, name, _ in engine.labelled({RUN: run_id})})
        original()

    resources._save_scripted_log = save_and_look  # type: ignore[method-assign]
    with pytest.raises(InfraError, match="exited before listening"), resources:
        raise AssertionError("no trial may run")
    volumes = {("volume", f"hx-{run_id}-{what}") for what in ("key", "skill", "scenario")}
    assert made == [{("network", f"hx-{run_id}-up"), ("container", f"hx-{run_id}-scripted"), *volumes}], made
    assert engine.labelled({RUN: run_id}) == []
    assert not (work_root / run_id).exists()
    assert b"Traceback" in (store.root / SCRIPTED_LOG).read_bytes(), "the scripted model's log was kept"
