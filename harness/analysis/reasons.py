"""The decision's vocabulary: every reason code, and a reason (code, sentence, effect on the verdict).

Codes are written into ``decision.json``, the JUnit and Markdown reports and the skills ledger, and
CI scripts match on them: a value never changes once published. They sit below the rules and the
gates (both produce reasons), so neither has to import the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

ReasonKind = Literal["invalid", "inconclusive", "rule", "note"]


class ReasonCode(StrEnum):
    """Stable machine codes. Gates first (they override the rule), then the rules' own findings, then notes."""

    PROVENANCE_MISMATCH = "PROVENANCE_MISMATCH"
    BUDGET_STOPPED = "BUDGET_STOPPED"
    UNBALANCED = "UNBALANCED"
    INCOMPLETE = "INCOMPLETE"
    UNPLANNED_TRIALS = "UNPLANNED_TRIALS"
    EARLY_STOP_UNSUPPORTED = "EARLY_STOP_UNSUPPORTED"
    FUTILITY_STOPPED = "FUTILITY_STOPPED"
    TOO_MANY_MISSING = "TOO_MANY_MISSING"
    MISSING_SENSITIVE = "MISSING_SENSITIVE"
    TOO_FEW_TASKS = "TOO_FEW_TASKS"
    POOLED_TASK_DISAGREE = "POOLED_TASK_DISAGREE"
    SKILL_BETTER = "SKILL_BETTER"
    NOT_BETTER = "NOT_BETTER"
    NO_VALID_TRIALS = "NO_VALID_TRIALS"
    GAIN_SIGNIFICANT = "GAIN_SIGNIFICANT"
    GAIN_BELOW_MINIMUM = "GAIN_BELOW_MINIMUM"
    UNDERPOWERED = "UNDERPOWERED"
    COST_OK = "COST_OK"
    COST_TOO_HIGH = "COST_TOO_HIGH"
    COST_UNCERTAIN = "COST_UNCERTAIN"
    EARLY_STOPPED = "EARLY_STOPPED"
    BOUNDARY_CROSSED = "BOUNDARY_CROSSED"
    FINAL_LOOK = "FINAL_LOOK"
    INFRA_NOISE = "INFRA_NOISE"
    MDE_LARGE = "MDE_LARGE"
    MDE_IMPOSSIBLE = "MDE_IMPOSSIBLE"
    INFRA_IMBALANCE = "INFRA_IMBALANCE"
    TOO_FEW_TASKS_TO_ADOPT = "TOO_FEW_TASKS_TO_ADOPT"
    SIGN_FLIP_REQUIRED = "SIGN_FLIP_REQUIRED"
    ADOPT_NOT_DISTINGUISHABLE = "ADOPT_NOT_DISTINGUISHABLE"
    JUDGE_NOT_INDEPENDENT = "JUDGE_NOT_INDEPENDENT"
    # A/B/n: the family of variant-vs-baseline comparisons (harness.analysis.family)
    HOLM_NOT_SIGNIFICANT = "HOLM_NOT_SIGNIFICANT"
    FAMILY_BEST_NOT_ADOPTED = "FAMILY_BEST_NOT_ADOPTED"
    FAMILY_MEMBER_INVALID = "FAMILY_MEMBER_INVALID"


@dataclass(frozen=True)
class Reason:
    """One finding: a stable machine ``code``, a sentence for people, and what it did to the verdict.

    ``kind``: ``invalid`` / ``inconclusive`` force that verdict; ``rule`` is what
    the preregistered rule found (it decides when no gate fired); ``note`` is
    informational and never changes the verdict.
    """

    code: ReasonCode
    message: str
    kind: ReasonKind
