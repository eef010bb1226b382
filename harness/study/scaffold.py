"""``skilltrial init SKILL_DIR``: a commented ``tasks.json`` and ``preregistration.yaml`` to start from.

Both files go next to the skill folder (its parent directory, or ``--out``): not inside it, since
every file in the skill folder is part of the skill (hashed by the lock, mounted into trials).
Existing files are never overwritten. The tasks are templates whose prompts contain TODO, so they
are skipped (and ``skilltrial lock`` says no task is runnable) until the user writes real ones.

Beside them go the JSON Schemas of the two files (the shipped copies in ``harness/data/schemas/``, which
``tests/unit/test_schemas.py`` holds equal to the models), and each file points at its schema: the
preregistration's first line is a ``# yaml-language-server: $schema=...`` comment, tasks.json has a
``"$schema"`` key. Editors then complete and check every field offline. The schema files are generated,
not the user's: an older copy is replaced.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError, HarnessError, PrerequisiteError
from harness.host import gitops
from harness.study.config import TASK_ID

TASKS_COMMENT = (
    "Written by `skilltrial init`. One object per task; JSON has no comments, so this field is the guide.",
    "id: a short name (letters, digits, . _ -), used in results, reports and scenario files.",
    "prompt: what the agent is asked, as you would ask it. A prompt containing TODO is skipped.",
    "verify_cmd: a shell command run in a fresh container (no network) on the base commit plus the "
    "agent's patch; exit 0 means pass. It must FAIL on the base commit: the preflight runs it there "
    "first, skips a task whose verify already passes and stops when it cannot run (missing tool: "
    "build your CI image and pass --base-image).",
    "pass_criteria: what a correct fix looks like, in words; the judge model reads it with the diff.",
    "protected_paths: files or folders restored from the base before verify (edits are flagged): usually the tests.",
    "timeout_s: optional per-task agent deadline (default: budgets.timeout_s in the preregistration).",
)

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "data" / "schemas"
PREREG_SCHEMA = "preregistration.schema.json"
TASKS_SCHEMA = "tasks.schema.json"

PREREG_TEMPLATE = """\
# yaml-language-server: $schema={schema}
# Preregistration for the skill {name!r}, written by `skilltrial init`.
# Fill it in BEFORE any trial runs, then freeze it: `skilltrial lock {prereg_rel}`.
# The lock hashes this file, tasks.json, every file of the skill and the base commit; changing any
# of them afterwards is a new experiment (a new lock). Run it with `skilltrial eval {prereg_rel}`.
skill: {name}
skill_ref: {skill_ref}            # the skill folder (holds SKILL.md), relative to this file
tasks: tasks.json
target_tasks: all                 # or a list of task ids from tasks.json
expected_effect: >
  TODO: what should get better with the skill, and why (one or two sentences).
side_effects_to_watch:
  - cost per trial
  - edits to tests
adoption_criteria: the paired per-task gain's lower bound is above 0 and the cost ratio's upper bound is within +50%
rejection_criteria: the gain's upper bound is below min_worthwhile_gain, or the cost rises by more than +50%
on_rejection: shelve              # move a rejected skill to the shelf folder (never deleted); or keep
shelf: shelf
execution:
  runs_per_arm: 3                 # each task runs 3 times with and 3 times without the skill
  model: sonnet                   # the agent's model
  # models: [sonnet, opus]        # instead of model: one complete A/B per model, each with its own decision,
  #                               # then models.md (one row per model) and one gate over them
  judge_model: haiku              # must differ from model (from every one of models): the judge is independent
  allowed_tools: [Bash, Edit, Read]
  repo: {repo_rel}                # the git repository under test, relative to this file
  base_ref: HEAD                  # `skilltrial lock` resolves it to a commit
  # include_paths: []             # `skilltrial lock` leaves this file, tasks.json and every copy of the skill
  #                               # out of the trials' tree (it says which); list a path here to keep it in
  seed: 20261130                  # the trials' interleaved order (not the model)
  budgets:
    per_trial_usd: 1.00           # --max-budget-usd per agent run, enforced again by the gateway
    total_usd: 30.00              # the whole experiment; reaching it stops new trials (inconclusive)
    judge_usd: 0.10
    timeout_s: 900                # agent wall clock per trial
    verify_timeout_s: 600
    judge_timeout_s: 300
decision:
  rule: interval                  # adopt only when the evidence excludes "no gain" (see README)
  cost_increase_max: 0.5          # at most +50% cost per trial
  min_worthwhile_gain: 0.05       # reject when even the optimistic gain is below 5 points
  pass_rule: verify_and_judge     # a trial passes when verify exits 0 and the judge says pass
  # models_rule: every           # with execution.models: adopt only when every model adopts (any: when at
  #                               # least one does); a model that rejects always rejects
  # sequential: {{}}                # look after every round and stop early for success too (O'Brien-Fleming
  #                               # spending keeps false adoption at the fixed design's; see README)
"""


@dataclass(frozen=True)
class Scaffold:
    tasks: Path
    prereg: Path
    schemas: tuple[Path, ...] = ()
    """The JSON Schema files written beside them."""


def _example_tasks() -> dict[str, object]:
    return {
        "$schema": TASKS_SCHEMA,
        "comment": list(TASKS_COMMENT),
        "tasks": [
            {
                "id": "fix-example-bug",
                "prompt": "TODO: describe a real bug as a user would report it, e.g. 'parse_date rejects "
                "ISO dates with a trailing Z; make it accept them.'",
                "verify_cmd": "python3 -m unittest -q tests.test_example",
                "pass_criteria": "TODO: the fix, in words (which function changes and how), not the tests",
                "protected_paths": ["tests"],
            },
            {
                "id": "add-example-feature",
                "prompt": "TODO: a small feature request with one clear acceptance check.",
                "verify_cmd": "python3 -m unittest -q tests.test_feature",
                "pass_criteria": "TODO",
                "protected_paths": ["tests"],
                "timeout_s": 600,
            },
        ],
    }


def init(skill_dir: Path, out: Path | None = None) -> Scaffold:
    """Write the two files for ``skill_dir``; refuse when either exists."""
    skill = skill_dir.resolve()
    if not (skill / "SKILL.md").is_file():
        raise ConfigError(skill, "is not a skill folder (no SKILL.md)", hint="skilltrial init path/to/skill-folder")
    name = skill.name if TASK_ID.match(skill.name) else "my-skill"
    dest = (out or skill.parent).resolve()
    if dest == skill or skill in dest.parents:
        raise ConfigError(dest, "is inside the skill folder: every file there is part of the skill",
                          hint="write next to the skill (the default) or pass --out DIR")  # fmt: skip
    tasks, prereg = dest / "tasks.json", dest / "preregistration.yaml"
    existing = [p for p in (tasks, prereg) if p.exists()]
    if existing:
        raise ConfigError(existing[0], "already exists; skilltrial init never overwrites",
                          hint="move it aside, or write elsewhere with --out DIR")  # fmt: skip
    try:
        top = Path(gitops.git(["rev-parse", "--show-toplevel"], cwd=skill).strip())
        repo_rel = os.path.relpath(top, dest)
    except HarnessError:
        repo_rel = "."
    dest.mkdir(parents=True, exist_ok=True)
    text = PREREG_TEMPLATE.format(
        name=name,
        skill_ref=os.path.relpath(skill, dest),
        repo_rel=repo_rel,
        prereg_rel=os.path.relpath(prereg),
        schema=PREREG_SCHEMA,
    )
    _create(tasks, json.dumps(_example_tasks(), indent=2) + "\n")
    _create(prereg, text)
    schemas = []
    for name in (PREREG_SCHEMA, TASKS_SCHEMA):
        source = SCHEMA_DIR / name
        if not source.is_file():
            raise PrerequisiteError(f"{source} is missing", hint="reinstall skilltrial (the wheel carries the schemas)")
        if (dest / name).is_symlink():  # replace the link, never write through it
            (dest / name).unlink()
        shutil.copyfile(source, dest / name)
        schemas.append(dest / name)
    return Scaffold(tasks, prereg, tuple(schemas))


def _create(path: Path, text: str) -> None:
    with open(path, "x", encoding="utf-8") as fh:  # "x": never overwrite, even in a race
        fh.write(text)
