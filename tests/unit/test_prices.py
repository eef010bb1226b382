"""harness.study.prices: the shipped price table, per-model overrides in the preregistration, unpriced models named."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.sidecars import responses_api
from harness.sidecars.gateway import DEFAULT_PRICING
from harness.study import prices
from harness.study.config import Execution


def test_the_shipped_table_is_what_the_gateway_falls_back_to() -> None:
    """Claude's models in gateway.py, the OpenAI models Codex uses in responses_api.py (the gateway merges
    them when it serves the Responses API: issue 30's second phase)."""
    fallback = {**DEFAULT_PRICING, **responses_api.DEFAULT_PRICING}
    assert prices.default_table() == {k: [float(x) for x in v] for k, v in fallback.items()}


def test_the_preregistration_overrides_and_adds_models_and_the_hash_follows() -> None:
    base = prices.effective(Execution())
    custom = prices.effective(
        Execution(model="my-model", prices={"my-model": (1, 2, 3, 4), "claude-haiku-5-5": (0, 0, 0, 0)})
    )
    assert custom["my-model"] == [1.0, 2.0, 3.0, 4.0] and custom["claude-haiku-5-5"] == [0.0] * 4
    assert prices.table_sha256(base) != prices.table_sha256(custom)
    assert prices.table_sha256(base) == prices.table_sha256(prices.effective(Execution()))


def test_aliases_are_priced_and_unknown_models_are_named() -> None:
    assert prices.missing_notes(Execution(model="sonnet", judge_model="haiku")) == []
    notes = prices.missing_notes(Execution(model="gpt-9", judge_model="haiku"))
    assert len(notes) == 1 and "'gpt-9'" in notes[0] and "fallback" in notes[0]
    assert prices.missing_notes(Execution(model="gpt-9", prices={"gpt-9": (1, 1, 1, 1)})) == []


def test_negative_prices_are_refused() -> None:
    with pytest.raises(ValueError, match="greater than or equal"):
        Execution(prices={"m": (-1, 0, 0, 0)})
    with pytest.raises(ConfigError, match=r"models\.m"):
        prices.parse({"models": {"m": [1, 2]}}, "prices.json")
