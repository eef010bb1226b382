"""What goes into a trial, and whether a directory was started with the same.

An experiment directory may only be resumed when every trial in it ran with the
same inputs: the lock hash covers the preregistration, tasks and skill, but not
the images, the base image the user passed with ``--base-image``, the scripted
scenario, the upstream, the runtime and so on. ``experiment.json`` keeps the
dict :func:`trial_inputs` returned when the directory was started
(``ExperimentMeta.trial_inputs``); a later start compares it with today's by
:func:`changed_inputs` and refuses to mix trials from different inputs
(:func:`check_resume`).

Adding an input is one line: add a key to the dict :func:`trial_inputs` builds
(other engineers add the library baseline hash, the installed delivery, the
proxy...). A directory started before a key existed has no value for it and is
not refused for it (a missing key is "not recorded", never "changed").
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ResumeError
from harness.study.config import Execution

if TYPE_CHECKING:  # the reports read recorded inputs without importing the Docker layer
    from harness.sandbox.images import ImageSet


def trial_inputs(
    execution: Execution,
    images: ImageSet,
    *,
    base_image: str | None,
    base_image_id: str | None,
    scenario: bytes | None,
    upstream: str,
    runtime: str | None,
    delivery: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything that goes into one trial besides the lock (pure; JSON-able values).

    One key per input: to make resume compare a new input, add one line here.
    ``extra`` takes inputs owned by other modules without touching this function.
    """
    inputs: dict[str, Any] = {
        "trial_image": images.trial_id,
        "sidecar_image": images.sidecar_id,
        "claude_code_version": images.claude_code_version,
        **({"codex_image": images.codex.image_id, "codex_version": images.codex.codex_version} if images.codex else {}),
        "base_image": base_image or images.runtime,
        "base_image_id": base_image_id or "",
        "scenario_sha256": hashlib.sha256(scenario).hexdigest() if scenario is not None else None,
        "upstream": "scripted" if scenario is not None else upstream,
        "runtime": runtime or "(engine default)",
        "model": execution.model,
        "judge_model": execution.judge_model,
        "allowed_tools": list(execution.allowed_tools),
        "budgets": execution.budgets.model_dump(mode="json"),
        "resources": execution.resources.model_dump(mode="json"),
    }
    if delivery is not None:
        inputs["delivery"] = delivery
    inputs.update(extra or {})
    return inputs


def changed_inputs(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, recorded, current)`` for each input whose value differs (pure).

    A key only one side has is not a change: the directory was started by a
    harness that did not record it, or this harness no longer records it.
    """
    return [
        (key, recorded[key], current[key])
        for key in sorted(set(recorded) & set(current))
        if recorded[key] != current[key]
    ]


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_resume(directory: Path, recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> None:
    """Raise :class:`ResumeError` naming every changed input; nothing when nothing changed."""
    if not recorded:
        return
    changes = changed_inputs(recorded, current)
    if not changes:
        return
    listed = "; ".join(f"{key}: {_short(old)} -> {_short(new)}" for key, old, new in changes)
    raise ResumeError(
        f"{directory} was started with other trial inputs ({listed}); its trials would be mixed with trials "
        "run under the new ones",
        hint=f"start fresh with another --out directory (or move {directory} aside); to continue the old "
        "experiment, rerun it with its original options",
    )
