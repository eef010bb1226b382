"""The verdict of a model matrix: the preregistered rule (``decision.models_rule``) over the per-model verdicts.

A matrix (``execution.models``) runs one complete A/B per executor model, and each model gets the ordinary
decision (:func:`harness.analysis.decide.decide`). This module only combines them (pure), in this order:

1. Any model rejects: **reject**, naming every model that does. Under either rule no other model's result
   can undo that, so a broken run of another model does not hide it.
2. Else any model has no valid verdict (``invalid``: its arms differ in provenance; ``unavailable``: no
   decision could be read or computed, e.g. it has not run yet): **no verdict** (``invalid`` if one is
   invalid, else ``unavailable``; ``skilltrial gate`` exits 3): that model might still reject.
3. Else ``every`` (the default): **adopt** only when every model adopts, otherwise **inconclusive**, naming
   the models that did not adopt (a skill that helps one model only is caught here); ``any``: **adopt**
   when at least one model adopts, otherwise inconclusive.

A point-only adoption (the point rule adopts, the interval rule does not) counts as the model's verdict
says, ``adopt``, as ``skilltrial gate`` counts it for one model; the reports keep its amber label per model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ModelsRule = Literal["every", "any"]
ModelVerdictWord = Literal["adopt", "reject", "inconclusive", "invalid", "unavailable"]
"""One model's verdict, or ``unavailable`` when there is none to read."""
MatrixVerdictWord = ModelVerdictWord

RULE_TEXT: dict[str, str] = {
    "every": "adopt only when every model adopts",
    "any": "adopt when at least one model adopts and none rejects",
}


@dataclass(frozen=True)
class ModelVerdict:
    model: str
    verdict: ModelVerdictWord


@dataclass(frozen=True)
class MatrixVerdict:
    verdict: MatrixVerdictWord
    reason: str
    """One sentence: which models made the verdict."""
    rule: ModelsRule


def _names(models: Sequence[str]) -> str:
    return ", ".join(models)


def combine(verdicts: Sequence[ModelVerdict], rule: ModelsRule = "every") -> MatrixVerdict:
    """The matrix's verdict from the per-model verdicts, in the preregistered order (see the module docstring)."""
    if not verdicts:
        return MatrixVerdict("unavailable", "no model has a verdict", rule)
    by: dict[str, list[str]] = {}
    for v in verdicts:
        by.setdefault(v.verdict, []).append(v.model)
    if by.get("reject"):
        return MatrixVerdict("reject", f"rejected on {_names(by['reject'])}", rule)
    broken = [v for v in verdicts if v.verdict in ("invalid", "unavailable")]
    if broken:
        word: MatrixVerdictWord = "invalid" if by.get("invalid") else "unavailable"
        what = "; ".join(f"{v.model} ({v.verdict})" for v in broken)
        return MatrixVerdict(word, f"no valid verdict for {what}", rule)
    adopted = by.get("adopt", [])
    others = [v.model for v in verdicts if v.verdict != "adopt"]
    if rule == "every":
        if not others:
            return MatrixVerdict("adopt", f"adopted on every model ({_names(adopted)})", rule)
        return MatrixVerdict("inconclusive", f"not adopted on {_names(others)} ({RULE_TEXT[rule]})", rule)
    if adopted:
        rest = f"; not adopted on {_names(others)}" if others else ""
        return MatrixVerdict("adopt", f"adopted on {_names(adopted)}{rest}", rule)
    return MatrixVerdict("inconclusive", f"adopted on no model ({RULE_TEXT[rule]})", rule)
