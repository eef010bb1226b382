"""JSON Schemas of the inputs (issue 23 item 3): generated from the models, committed equal to them, every
example valid against its schema, and ``skilltrial init`` pointing its files at schemas written beside them.

The validator is jsonschema (a dev dependency), an implementation independent of pydantic, so "valid" here
is what an editor's language server will say.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from harness import schemas
from harness.cli import main
from harness.study.config import TaskFile, load_tasks, parse_preregistration
from harness.study.scaffold import init

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def validator(name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((schemas.SCHEMA_DIR / f"{name}.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def schema_of(path: Path) -> str | None:
    """Which schema an example file follows, by its name and folder (None: not an input file)."""
    rel = path.relative_to(EXAMPLES)
    if rel.parts[0] in ("github-actions",) or "repo" in rel.parts or path.name == "SKILL.md":
        return None
    if path.name == "tasks.json":
        return "tasks"
    if path.name.startswith("scenario"):
        return "scenario"
    if path.name.startswith("preregistration"):
        return "triggers" if rel.parts[0] == "triggers" else "preregistration"
    if path.name == "engines.yaml":
        return "engines"
    raise AssertionError(f"{path}: an example input this test does not know; give it its schema here")


def _load(path: Path) -> Any:
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def test_the_committed_schemas_are_the_models() -> None:
    stale = [
        s.filename for s in schemas.SCHEMAS if (schemas.SCHEMA_DIR / s.filename).read_text() != schemas.text(s.name)
    ]
    assert not stale, f"{stale} differ from the models: run `make schemas` and commit the result"
    on_disk = sorted(p.name for p in schemas.SCHEMA_DIR.glob("*.json"))
    assert on_disk == sorted(s.filename for s in schemas.SCHEMAS), "no stray or missing schema file"


def test_every_example_is_valid_against_its_schema() -> None:
    checked: dict[str, int] = {}
    for path in sorted(p for p in EXAMPLES.rglob("*") if p.is_file() and p.suffix in (".json", ".yaml", ".yml")):
        name = schema_of(path)
        if name is None:
            continue
        errors = [
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator(name).iter_errors(_load(path))
        ]
        assert not errors, f"{path.relative_to(ROOT)} against {name}.schema.json: {errors}"
        checked[name] = checked.get(name, 0) + 1
    assert set(checked) == {"preregistration", "tasks", "scenario", "triggers", "engines"}, checked
    assert checked["preregistration"] >= 4 and checked["scenario"] >= 4, checked


@pytest.mark.parametrize(
    ("name", "document", "where"),
    [
        (
            "preregistration",
            {"skill": "s", "skill_ref": "x", "execution": {"runs_per_arm": "3"}},
            "execution.runs_per_arm",
        ),
        ("preregistration", {"skill": "s", "skill_ref": "x", "decision": {"rule": "vibes"}}, "decision.rule"),
        ("preregistration", {"skill": "s", "skill_ref": "x", "exectuion": {}}, ""),
        ("tasks", {"tasks": [{"id": "a", "prompt": "p", "timeout_s": 0}]}, "tasks.0.timeout_s"),
        ("tasks", {"tasks": [{"id": "a"}]}, "tasks.0"),
        ("scenario", {"tasks": {"t": {"arms": {"skill": {"p_success": 2}}}}}, "tasks.t.arms.skill.p_success"),
        ("triggers", {"skill": "s", "variants": {}, "queries": [{"id": "q", "query": "x"}]}, "queries.0"),
        ("engines", {"engines": [{"url": "unix:///s", "cert_dir": "x"}]}, "engines.0"),
        ("engines", {"engines": []}, "engines"),
    ],
)
def test_the_schemas_refuse_what_the_models_refuse(name: str, document: dict[str, Any], where: str) -> None:
    errors = list(validator(name).iter_errors(document))
    assert errors, f"{name}.schema.json accepted {document}"
    assert any(".".join(map(str, e.absolute_path)) == where for e in errors), [e.absolute_path for e in errors]


def test_the_schema_command_prints_what_is_committed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for s in schemas.SCHEMAS:
        assert main(["schema", s.name], env={}) == 0
        assert capsys.readouterr().out == (schemas.SCHEMA_DIR / s.filename).read_text()
    assert main(["schema", "--write", str(tmp_path)], env={}) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(s.filename for s in schemas.SCHEMAS)
    assert main(["schema"], env={}) == 4
    assert "which schema?" in capsys.readouterr().err


def test_init_writes_the_schemas_beside_its_files_and_points_at_them(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    skill = tmp_path / "skills" / "fixer"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: fixer\ndescription: fixes\n---\nbody\n")
    made = init(skill)
    here = made.prereg.parent
    assert sorted(p.name for p in made.schemas) == ["preregistration.schema.json", "tasks.schema.json"]
    first = made.prereg.read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=preregistration.schema.json"
    assert (here / first.split("$schema=")[1]).is_file()
    tasks = json.loads(made.tasks.read_text())
    assert tasks["$schema"] == "tasks.schema.json" and (here / tasks["$schema"]).is_file()
    # what init wrote is valid against what it wrote beside it, and loads (the $schema key is accepted)
    for name, doc in (("preregistration", yaml.safe_load(made.prereg.read_text())), ("tasks", tasks)):
        schema = json.loads((here / f"{name}.schema.json").read_text())
        jsonschema.validate(doc, schema)
    assert load_tasks(made.tasks).tasks
    assert parse_preregistration(made.prereg, made.prereg.read_text()).skill == "fixer"


def test_the_schema_key_of_tasks_json_is_outside_the_lock() -> None:
    body = {"tasks": [{"id": "a", "prompt": "p", "verify_cmd": "true"}]}
    plain, pointed = TaskFile.model_validate(body), TaskFile.model_validate({"$schema": "tasks.schema.json", **body})
    assert pointed.schema_ref == "tasks.schema.json"
    assert plain.model_dump(mode="json") == pointed.model_dump(mode="json"), "the lock hashes this dump"
    with pytest.raises(ValueError, match="schema_ref"):
        TaskFile.model_validate({"schema_ref": "x", **body})  # only the key editors use, not the field's name
