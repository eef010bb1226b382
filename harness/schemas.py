"""JSON Schemas of the user's inputs, generated from the pydantic models that load them.

``skilltrial schema preregistration|tasks|scenario|triggers|engines`` prints one; ``skilltrial init`` writes the two
it needs beside the files it creates, so an editor (the YAML language server, VS Code's JSON support)
completes and checks fields offline. The repository keeps the generated files in
``harness/data/schemas/`` (shipped in the wheel; ``make schemas`` regenerates them, and
``tests/unit/test_schemas.py`` fails when they differ from the models). The models stay the authority:
a schema cannot express every check (task ids' shape, a judge model that must differ from the model,
cross-file references), so a file the schema accepts can still be refused by ``skilltrial lock`` with the
file and field named.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError

if TYPE_CHECKING:  # the models (and pydantic) load when a schema is asked for, not when the CLI starts
    from pydantic import BaseModel

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = Path(__file__).resolve().parent / "data" / "schemas"
"""The committed, shipped copies (``make schemas`` writes them)."""


@dataclass(frozen=True)
class InputSchema:
    name: str
    file: str
    """The input file it describes, as users name it."""
    model: Callable[[], type[BaseModel]]
    """The model that loads that file (imported when asked for)."""

    @property
    def filename(self) -> str:
        return f"{self.name}.schema.json"


def _preregistration() -> type[BaseModel]:
    from harness.study.config import Preregistration

    return Preregistration


def _tasks() -> type[BaseModel]:
    from harness.study.config import TaskFile

    return TaskFile


def _scenario() -> type[BaseModel]:
    from harness.study.scenario import Scenario

    return Scenario


def _triggers() -> type[BaseModel]:
    from harness.study.triggers import TriggerPrereg

    return TriggerPrereg


def _engines() -> type[BaseModel]:
    from harness.study.engines import EnginesFile

    return EnginesFile


SCHEMAS: tuple[InputSchema, ...] = (
    InputSchema("preregistration", "preregistration.yaml", _preregistration),
    InputSchema("tasks", "tasks.json", _tasks),
    InputSchema("scenario", "scenario.yaml (skilltrial eval --scripted)", _scenario),
    InputSchema("triggers", "a trigger study's preregistration.yaml (skilltrial triggers)", _triggers),
    InputSchema("engines", "engines.yaml (skilltrial doctor --engines-file)", _engines),
)


SCHEMA_FILES = {s.name: s.file.split(" ")[0] for s in SCHEMAS}


def by_name(name: str) -> InputSchema:
    for s in SCHEMAS:
        if s.name == name:
            return s
    raise ConfigError("SCHEMA", f"no schema {name!r}", hint="one of: " + ", ".join(s.name for s in SCHEMAS))


def _drop_property_titles(node: Any) -> Any:
    """pydantic titles every property with its name re-cased ("Per Trial Usd"): noise in an editor's tooltip."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                out[key] = {k: {kk: _drop_property_titles(vv) for kk, vv in v.items() if kk != "title"}
                            for k, v in value.items()}  # fmt: skip
            else:
                out[key] = _drop_property_titles(value)
        return out
    if isinstance(node, list):
        return [_drop_property_titles(v) for v in node]
    return node


def generate(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one input, from its model (validation mode: what a file may say)."""
    spec = by_name(name)
    body = _drop_property_titles(spec.model().model_json_schema(mode="validation"))
    body.pop("title", None)
    return {
        "$schema": DRAFT,
        "title": f"skilltrial {spec.file}",
        "description": (body.pop("description", "") + " " if body.get("description") else "")
        + f"Generated from {spec.model().__module__}.{spec.model().__name__} by `skilltrial schema {name}`.",
        **body,
    }


def text(name: str) -> str:
    """The schema as the committed file holds it (stable key order, two-space indent, a final newline)."""
    return json.dumps(generate(name), indent=2, ensure_ascii=False) + "\n"


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for s in SCHEMAS:
        path = directory / s.filename
        path.write_text(text(s.name), encoding="utf-8")
        written.append(path)
    return written


# --------------------------------------------------------------------------- reference pages


def _type(node: Mapping[str, Any]) -> str:
    if "$ref" in node:
        return f"`{str(node['$ref']).rsplit('/', 1)[-1]}`"
    if "enum" in node:
        return " or ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "anyOf" in node:
        return " or ".join(_type(n) for n in node["anyOf"])
    kind = node.get("type")
    if kind == "array":
        if "prefixItems" in node:
            return "[" + ", ".join(_type(n) for n in node["prefixItems"]) + "]"
        return f"list of {_type(node.get('items', {}))}"
    if kind == "object":
        extra = node.get("additionalProperties")
        return f"map of name to {_type(extra)}" if isinstance(extra, dict) else "object"
    if kind is None:
        return "any"
    bounds = [f"{op} {node[k]:g}" for k, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
              ("exclusiveMaximum", "<")) if k in node and isinstance(node[k], int | float)]  # fmt: skip
    return str(kind) + (f" ({', '.join(bounds)})" if bounds else "")


def _cell(value: str) -> str:
    return " ".join(value.replace("|", "\\|").split())


def reference_markdown(name: str, *, heading: str = "###") -> str:
    """One table per object of the schema (the top level, then each nested model by its dotted path):
    field, type, default, description. The docs site's reference page and ``skilltrial docs reference``."""
    schema = generate(name)
    defs: dict[str, Any] = schema.get("$defs", {})
    out: list[str] = []
    seen: set[str] = set()

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = [str(node["$ref"]).rsplit("/", 1)[-1]] if "$ref" in node else []
            return found + [r for v in node.values() for r in refs(v)]
        if isinstance(node, list):
            return [r for v in node for r in refs(v)]
        return []

    def table(path: str, title: str, node: Mapping[str, Any]) -> None:
        props: Mapping[str, Any] = node.get("properties", {})
        required = set(node.get("required", ()))
        out.append(f"{heading} {title}\n")
        if node.get("description"):
            out.append(_cell(str(node["description"])) + "\n")
        out.append("| field | type | default | description |\n|---|---|---|---|")
        nested: list[tuple[str, str]] = []
        for field, spec in props.items():
            default = "required" if field in required else f"`{json.dumps(spec.get('default'))}`"
            if isinstance(spec.get("default"), dict) and spec["default"] and refs(spec):
                default = "see below"
            out.append(
                f"| `{field}` | {_cell(_type(spec))} | {_cell(default)} | {_cell(spec.get('description', ''))} |"
            )
            nested += [(f"{path}.{field}" if path != "top level" else field, r) for r in refs(spec)]
        out.append("")
        for sub_path, ref in nested:
            if ref not in seen and ref in defs:
                seen.add(ref)
                table(sub_path, f"`{sub_path}` ({ref})", defs[ref])

    table("top level", f"{SCHEMA_FILES.get(name, name)}: the top level", schema)
    return "\n".join(out)
