"""Resume compares trial inputs: what changed is named, what was never recorded is not a change."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ResumeError
from harness.experiment.trialinputs import changed_inputs, check_resume, trial_inputs
from harness.sandbox.images import ImageSet
from harness.study.config import Execution

IMAGES = ImageSet(
    base="harness-base:x",
    runtime="harness-runtime:r1",
    sidecar="harness-sidecar:s1",
    trial="harness-trial:t1",
    trial_id="sha256:" + "a" * 64,
    sidecar_id="sha256:" + "b" * 64,
    claude_code_version="2.1.332",
)


def _inputs(**overrides: object) -> dict[str, object]:
    kwargs: dict[str, object] = {
        "base_image": None,
        "base_image_id": None,
        "scenario": b'{"tasks": {}}',
        "upstream": "https://api.anthropic.com",
        "runtime": None,
    }
    kwargs.update(overrides)
    execution = kwargs.pop("execution", Execution())
    images = kwargs.pop("images", IMAGES)
    return trial_inputs(execution, images, **kwargs)  # type: ignore[arg-type]


def test_same_inputs_resume() -> None:
    check_resume(Path("/out"), _inputs(), _inputs())
    assert changed_inputs(_inputs(), _inputs()) == []


def test_the_default_base_image_and_naming_it_explicitly_are_the_same_input() -> None:
    assert changed_inputs(_inputs(), _inputs(base_image="harness-runtime:r1")) == []


def test_a_new_base_image_is_refused_naming_it_and_how_to_start_fresh() -> None:
    before = _inputs()
    after = _inputs(
        base_image="my-ci:latest",
        base_image_id="sha256:" + "c" * 64,
        images=IMAGES.__class__(**{**IMAGES.__dict__, "trial_id": "sha256:" + "d" * 64}),
    )
    with pytest.raises(ResumeError) as err:
        check_resume(Path("/out"), before, after)
    text = str(err.value)
    assert "/out was started with other trial inputs" in text
    assert "base_image: harness-runtime:r1 -> my-ci:latest" in text
    assert "trial_image: sha256:aaaa" in text
    assert "--out" in text


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"scenario": b'{"tasks": {"t": 1}}'}, "scenario_sha256"),
        ({"scenario": None}, "upstream"),
        ({"runtime": "runsc"}, "runtime"),
        ({"delivery": "installed"}, None),  # not recorded before: not a change
        ({"execution": Execution(allowed_tools=("Bash",))}, "allowed_tools"),
        ({"execution": Execution(resources={"cpus": 2})}, "resources"),
        ({"execution": Execution(budgets={"per_trial_usd": 2})}, "budgets"),
        ({"extra": {"library_baseline": "h2"}}, None),
    ],
)
def test_each_input_is_compared(change: dict[str, object], key: str | None) -> None:
    keys = [k for k, _, _ in changed_inputs(_inputs(), _inputs(**change))]
    if key is None:
        assert keys == []
    else:
        assert key in keys


def test_an_input_added_by_another_module_is_compared_once_recorded() -> None:
    before = _inputs(extra={"library_baseline": "h1"}, delivery="prompt")
    after = _inputs(extra={"library_baseline": "h2"}, delivery="installed")
    assert [k for k, _, _ in changed_inputs(before, after)] == ["delivery", "library_baseline"]


def test_a_directory_without_recorded_inputs_is_not_refused() -> None:
    check_resume(Path("/out"), None, _inputs())
    check_resume(Path("/out"), {}, _inputs())
