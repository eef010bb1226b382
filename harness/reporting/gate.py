"""``skilltrial gate DIR``: the experiment's verdict as an exit code for CI (read-only).

The verdict comes from ``decision.json`` while it is current (same lock, the same result lines by number
and digest, every reason readable), else it is recomputed from ``results.jsonl`` and the preregistration exactly
as ``skilltrial eval`` computed it. Exit codes: 0 adopt, 1 reject, 2 inconclusive, 3 invalid, and 3 for
every case where no verdict can be read or computed (:class:`~harness.errors.ResultsUnavailable`).

A model matrix's top directory (``matrix.json``, see :mod:`harness.results.matrix`) is gated by
:func:`gate_matrix`: each model's experiment exactly as above, then the preregistered rule over their
verdicts (:mod:`harness.analysis.matrix`); one model's directory is still gated on its own by :func:`gate`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from harness.analysis.matrix import MatrixVerdict, ModelVerdict, ModelVerdictWord, combine
from harness.analysis.reasons import Reason, ReasonCode, ReasonKind
from harness.errors import HarnessError, ResultsUnavailable
from harness.host.files import read_regular
from harness.records import RESULTS, TrialRecord
from harness.reporting.decision_json import DECISION_JSON
from harness.reporting.escape import clean
from harness.reporting.model import load_experiment, results_digest
from harness.results.load import read_records
from harness.results.matrix import model_dir, read_matrix_meta
from harness.results.meta import ExperimentMeta, require_meta

GATE_CODES: dict[str, int] = {"adopt": 0, "reject": 1, "inconclusive": 2, "invalid": 3}
"""``skilltrial gate`` exit codes; 3 is also every case where no verdict can be read or computed."""

_CODES: frozenset[str] = frozenset(ReasonCode)
_KINDS: frozenset[str] = frozenset(get_args(ReasonKind))


@dataclass(frozen=True)
class GateResult:
    skill: str
    verdict: str
    reasons: tuple[Reason, ...]
    """Every reason, in the decision's order."""
    source: str
    """``decision.json`` or ``recomputed from results.jsonl``."""
    experiment_dir: Path
    label: str = ""
    """The report's wording of the verdict (the amber point-only label when only the point rule adopts)."""

    @property
    def exit_code(self) -> int:
        return GATE_CODES.get(self.verdict, 3)

    @property
    def line(self) -> str:
        ordered = sorted(self.reasons, key=lambda x: x.kind == "note")
        why = "; ".join(f"[{x.code}] {x.message}" for x in ordered) or "no reasons recorded"
        word = self.label.upper() if self.label and self.label != self.verdict else self.verdict.upper()
        return clean(f"{word} (exit {self.exit_code}) {self.skill}: {why}")


def recorded_reasons(data: dict[str, Any]) -> tuple[Reason, ...] | None:
    """The reasons ``decision.json`` recorded, or None when one of them is not a reason this harness knows."""
    raw = data.get("reasons")
    if not isinstance(raw, list):
        return None
    out = []
    for x in raw:
        if not isinstance(x, dict):
            return None
        code, kind, message = x.get("code"), x.get("kind"), x.get("message")
        if not isinstance(code, str) or code not in _CODES or kind not in _KINDS or not isinstance(message, str):
            return None
        out.append(Reason(ReasonCode(code), message, kind))
    return tuple(out)


def fresh_decision(root: Path, meta: ExperimentMeta, records: Sequence[TrialRecord]) -> dict[str, Any] | None:
    """decision.json when it was computed from exactly the current result lines (their number and digest:
    :func:`harness.reporting.model.results_digest`) under the same lock."""
    try:
        data = json.loads(read_regular(root / DECISION_JSON))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("verdict") not in GATE_CODES
        or data.get("lock_hash") != meta.lock_hash
        or data.get("results_lines") != len(records)
        or data.get("results_sha256") != results_digest(records)
        or recorded_reasons(data) is None
    ):
        return None
    return data


def gate(root: Path) -> GateResult:
    """The experiment's verdict for CI, from decision.json if it is current, else recomputed (read-only).

    Raises :class:`ResultsUnavailable` (exit 3) when there is nothing to gate
    on: no experiment description, no readable results, or results that cannot
    be analysed (preregistration missing or re-locked).
    """
    try:
        meta = require_meta(root)
        lines = read_records(root)
    except HarnessError as e:
        raise ResultsUnavailable(e.message, hint=e.hint) from e
    data = fresh_decision(root, meta, lines.records)
    if data is not None:
        reasons = recorded_reasons(data) or ()
        return GateResult(str(data.get("skill", meta.skill or "?")), str(data["verdict"]), reasons,
                          DECISION_JSON, root, str(data.get("label") or ""))  # fmt: skip
    try:
        r = load_experiment(root)
    except HarnessError as e:
        raise ResultsUnavailable(
            f"{root}: decision.json is missing or stale and the decision cannot be recomputed: {e.message}",
            hint=e.hint,
        ) from e
    d = r.decision
    return GateResult(r.prereg.skill, d.verdict, d.reasons, f"recomputed from {RESULTS}", root, d.label)


# ============================================================================ a model matrix


_MODEL_VERDICTS: dict[str, ModelVerdictWord] = {v: v for v in ("adopt", "reject", "inconclusive", "invalid")}


@dataclass(frozen=True)
class ModelGate:
    """One model's part of a matrix gate: its gate result, or why there is none."""

    model: str
    result: GateResult | None
    error: str | None = None

    @property
    def verdict(self) -> ModelVerdictWord:
        if self.result is None:
            return "unavailable"
        return _MODEL_VERDICTS.get(self.result.verdict, "unavailable")

    @property
    def line(self) -> str:
        if self.result is None:
            return clean(f"{self.model}: NO VERDICT (exit 3): {self.error}")
        return f"{self.model}: {self.result.line}"


@dataclass(frozen=True)
class MatrixGateResult:
    skill: str
    verdict: MatrixVerdict
    models: tuple[ModelGate, ...]
    experiment_dir: Path

    @property
    def exit_code(self) -> int:
        return GATE_CODES.get(self.verdict.verdict, 3)

    @property
    def line(self) -> str:
        each = ", ".join(f"{g.model} {g.verdict.upper()}" for g in self.models)
        return clean(
            f"{self.verdict.verdict.upper()} (exit {self.exit_code}) {self.skill} on {len(self.models)} models "
            f"(models rule {self.verdict.rule}): {self.verdict.reason} [{each}]"
        )

    @property
    def lines(self) -> list[str]:
        """The verdict line, then one line per model (its own gate line)."""
        return [self.line, *(f"  {g.line}" for g in self.models)]


def gate_matrix(root: Path) -> MatrixGateResult:
    """The matrix's verdict for CI (read-only): every preregistered model's experiment gated as :func:`gate`
    does, combined by the preregistered rule ``matrix.json`` records. A model without a readable verdict
    (not run yet, unreadable, another lock) counts as ``unavailable``, so the matrix has no verdict (exit 3)
    unless another model rejects. Raises :class:`ResultsUnavailable` when ``matrix.json`` cannot be read."""
    try:
        meta = read_matrix_meta(root)
    except HarnessError as e:
        raise ResultsUnavailable(e.message, hint=e.hint) from e
    if meta is None:
        raise ResultsUnavailable(f"{root} is not a model matrix (no matrix.json)")
    gates = []
    for model in meta.models:
        sub = model_dir(root, model)
        try:
            own = require_meta(sub)
            if own.lock_hash != meta.lock_hash or own.model != model:
                raise ResultsUnavailable(f"{sub} ran lock {own.lock_hash[:12]} for model {own.model}, not this "
                                         f"matrix's {meta.lock_hash[:12]} for {model}")  # fmt: skip
            gates.append(ModelGate(model, gate(sub)))
        except HarnessError as e:
            gates.append(ModelGate(model, None, e.message))
    verdict = combine([ModelVerdict(g.model, g.verdict) for g in gates], meta.rule)
    return MatrixGateResult(meta.skill, verdict, tuple(gates), root)
