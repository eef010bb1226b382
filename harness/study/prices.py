"""The gateway's price table: a file shipped with the harness, pinned or overridden per model by the preregistration.

The gateway meters every trial's tokens into dollars (the second, independent cost
figure, and the hard per-trial cap). Its prices come from here:

    harness/data/prices.json                the shipped default (USD per million tokens:
                                            input, output, cache write, cache read)
    execution.prices in the preregistration  per model, pinned or overridden (locked with it)

The effective table is handed to the gateway in full and its SHA-256 is provenance,
so arms metered under different prices are not compared. A model the table does not
price (matched exactly, or by name containment as ``sonnet`` matches
``claude-sonnet-5-5``) is named at lock time and in the report: the gateway still
meters it at a high fallback for the cap, which would distort the cost ratio if only
one arm's model or judge hit it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from harness.errors import ConfigError
from harness.study.config import Execution
from harness.study.lock import canonical_json, sha256_hex

Table = dict[str, list[float]]
FALLBACK_NOTE = "the gateway meters it at its high fallback price ($15 / $75 per million tokens)"


def default_table() -> Table:
    raw = resources.files("harness").joinpath("data/prices.json").read_text(encoding="utf-8")
    return parse(json.loads(raw), "harness/data/prices.json")


def parse(data: Any, where: str) -> Table:
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ConfigError(where, "must be an object with a 'models' mapping", field="models")
    table: Table = {}
    for name, price in models.items():
        if (
            not isinstance(price, list)
            or len(price) != 4
            or not all(isinstance(x, int | float) and not isinstance(x, bool) and x >= 0 for x in price)
        ):
            raise ConfigError(where, "must be four non-negative numbers", field=f"models.{name}")
        table[str(name)] = [float(x) for x in price]
    return table


def effective(execution: Execution) -> Table:
    """The default table with the preregistration's per-model prices on top."""
    return {**default_table(), **{k: [float(x) for x in v] for k, v in execution.prices.items()}}


def table_sha256(table: Mapping[str, list[float]]) -> str:
    return sha256_hex(canonical_json(dict(table)))


def priced(model: str, table: Mapping[str, list[float]]) -> bool:
    """As the gateway matches: exactly, or one name containing the other."""
    return model in table or any(name in model or model in name for name in table)


def unpriced(models: Iterable[str], table: Mapping[str, list[float]]) -> list[str]:
    return sorted({m for m in models if m and not priced(m, table)})


def gateway_env(table: Mapping[str, list[float]]) -> dict[str, str]:
    return {"GATEWAY_PRICING": json.dumps(dict(table), sort_keys=True)}


def missing_notes(execution: Execution) -> list[str]:
    """Lock-time and report notes: each preregistered model the table does not price."""
    table = effective(execution)
    return [
        f"model {m!r} is not in the price table (harness/data/prices.json or execution.prices): {FALLBACK_NOTE}"
        for m in unpriced((*execution.executor_models, execution.judge_model), table)
    ]
