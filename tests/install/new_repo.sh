#!/bin/sh
# A new repository set up the way the getting-started page says (tests/integration/test_install.py runs
# this in the fresh container, in an empty directory): a tiny project with a bug, a skill, `skilltrial
# init`, one real task, a scenario for the scripted model, `skilltrial lock`. The eval comes after.
set -eu
git init -q . && git config user.email you@example.com && git config user.name you
mkdir -p calc tests skills/careful
printf 'def add(a, b):\n    return a - b\n' > calc/__init__.py
: > tests/__init__.py
printf 'import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n' > tests/test_calc.py
printf -- '---\nname: careful\ndescription: Fix bugs carefully.\n---\nReproduce the bug first. careful-marker-1\n' > skills/careful/SKILL.md
git add -A && git commit -qm base
skilltrial init skills/careful
python3 - <<'PY'
import json, pathlib
p = pathlib.Path("skills/tasks.json"); d = json.loads(p.read_text())
d["tasks"] = [{"id": "fix-add", "prompt": "add(2, 3) returns -1; make add return the sum",
               "verify_cmd": "python3 -m unittest -q tests.test_calc",
               "pass_criteria": "add returns a + b; tests not edited", "protected_paths": ["tests"]}]
p.write_text(json.dumps(d, indent=2))
p = pathlib.Path("skills/preregistration.yaml")
p.write_text(p.read_text().replace("runs_per_arm: 3", "runs_per_arm: 2"))
PY
cat > scenario.yaml <<'YAML'
seed: 1
skills: {careful: {marker: careful-marker-1, p_success: 1.0}}
arms: {baseline: {p_success: 0.0}}
tasks:
  fix-add:
    success:
      - {tool: Read, input: {file_path: /workspace/calc/__init__.py}}
      - {tool: Edit, input: {file_path: /workspace/calc/__init__.py, old_string: "a - b", new_string: "a + b"}}
    failure: []
YAML
skilltrial lock skills/preregistration.yaml
