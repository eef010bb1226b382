"""The base tree both arms see, in the flow the README recommends (issue 24 item 2).

`skilltrial init skills/my-skill` in the skill's own repository writes ``repo: ..``: after a commit the
repository holds the skill under test, the tasks (with ``verify_cmd`` and ``pass_criteria``) and the
preregistration. A real trial on the real engine, CLI and git, for every workspace kind, checks where
each of the four trees stands: the agent's ``/workspace`` (a probe from inside the agent container, both
arms), verify's tree (the verify log), the preflight's (``preflight.json``) and collect's base (the patch
holds only what the agent wrote, no deletion of a left-out file). The positive controls: a normal file of
the repository is in every tree, and ``execution.include_paths`` keeps a path in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.host import gitops
from harness.reporting.model import load_experiment
from harness.reporting.text import terminal_summary
from harness.results.load import PREFLIGHT_JSON
from harness.sandbox.engine import Engine
from harness.sandbox.images import ImageSet
from harness.study.lock import lock
from harness.study.scaffold import init
from tests.integration.helpers import latest, run_experiment
from tests.security.helpers import bash, kv, probes

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MARKER = "my-skill-91d4"
SKILL_MD = f"---\nname: my-skill\ndescription: careful fixes. {MARKER}\n---\nReproduce the bug first.\n"
LOOKED_AT = (
    "skills/tasks.json",
    "skills/preregistration.yaml",
    "skills/my-skill/SKILL.md",
    "vendor/my-skill-copy/SKILL.md",
    ".claude/skills/kept-copy/SKILL.md",
    "README.md",
    "CLAUDE.md",
)
PRESENCE = (
    "cd /workspace && for p in " + " ".join(LOOKED_AT) + '; do if [ -e "$p" ]; then echo "$p=present"; '
    'else echo "$p=absent"; fi; done; echo "criteria=$(cat skills/tasks.json 2>/dev/null | grep -c pass_criteria)"'
)
PROMPT = "Base tree probe <<look-around>>: follow your instructions."


def _skill_repository(root: Path) -> Path:
    """A skill's own repository, set up as the README says: init next to the skill, real tasks, commit."""
    repo = root / "skillrepo"
    (repo / "skills" / "my-skill").mkdir(parents=True)
    (repo / "skills" / "my-skill" / "SKILL.md").write_text(SKILL_MD)
    (repo / "vendor" / "my-skill-copy").mkdir(parents=True)
    (repo / "vendor" / "my-skill-copy" / "SKILL.md").write_text(SKILL_MD)  # the same skill under another folder
    (repo / ".claude" / "skills" / "kept-copy").mkdir(parents=True)
    (repo / ".claude" / "skills" / "kept-copy" / "SKILL.md").write_text(SKILL_MD.replace("careful", "kept"))
    (repo / "README.md").write_text("a normal file of the repository\n")
    (repo / "CLAUDE.md").write_text("house rules for agents\n")
    gitops.git(["init", "--quiet", "--initial-branch=main", str(repo)])
    made = init(repo / "skills" / "my-skill")
    made.tasks.write_text(
        json.dumps(
            {
                "tasks": [
                    {
                        "id": "look-around",
                        "prompt": PROMPT,
                        "verify_cmd": f"{PRESENCE.replace('cd /workspace && ', '')}; test -f done.txt",
                        "pass_criteria": "SECRET-GRADING-CRITERIA: done.txt exists",
                    }
                ]
            }
        )
    )
    prereg = yaml.safe_load(made.prereg.read_text())
    assert prereg["execution"]["repo"] == "..", "init in the skill's repository points at the repository's top"
    prereg["target_tasks"] = ["look-around"]
    prereg["execution"].update(
        runs_per_arm=1,
        max_infra_retries=0,
        include_paths=[".claude/skills/kept-copy"],
        budgets={"per_trial_usd": 0.5, "judge_usd": 0.05, "timeout_s": 120, "verify_timeout_s": 60,
                 "judge_timeout_s": 60},
    )  # fmt: skip
    prereg["decision"] = {"rule": "interval", "futility_stop": False}
    made.prereg.write_text(yaml.safe_dump(prereg, sort_keys=False))
    gitops.git(["add", "--all"], cwd=repo)
    gitops.git(["commit", "--quiet", "-m", "my-skill with its experiment"], cwd=repo)
    lock(made.prereg)
    return made.prereg


def _scenario(path: Path) -> Path:
    steps = [bash(PRESENCE, probe="presence"), bash("echo done > /workspace/done.txt")]
    path.write_text(
        yaml.safe_dump(
            {
                "seed": 1,
                "skill_marker": MARKER,
                "defaults": {"usage": {"input_tokens": 1000, "output_tokens": 20}},
                "judge": {"mode": "follow_verify"},
                "tasks": {"look-around": {"success": steps, "failure": steps}},
            },
            sort_keys=False,
        )
    )
    return path


EXPECTED = {
    "skills/tasks.json": "absent",
    "skills/preregistration.yaml": "absent",
    "skills/my-skill/SKILL.md": "absent",
    "vendor/my-skill-copy/SKILL.md": "absent",
    ".claude/skills/kept-copy/SKILL.md": "present",  # kept in by execution.include_paths
    "README.md": "present",  # the positive control: a normal file is still there
    "CLAUDE.md": "present",
    "criteria": "0",
}


@pytest.mark.parametrize("kind", ["overlay", "copy", "volume"])
def test_no_tree_of_a_trial_holds_the_skill_or_the_experiments_own_files(
    kind: str, tmp_path: Path, engine: Engine, images: ImageSet, work_root: Path
) -> None:
    prereg = _skill_repository(tmp_path)
    out = tmp_path / "out"
    result = run_experiment(
        engine,
        prereg,
        _scenario(tmp_path / "scenario.yaml"),
        out,
        work_root,
        jobs=2,
        preflight=True,
        env={"HARNESS_WORKSPACE": kind},
    )
    records = latest(result)
    assert {r.workspace for r in records.values()} == {kind}
    seen = probes(out)
    for arm in ("baseline", "skill"):
        assert kv(seen[("look-around", arm, "presence")]) == EXPECTED, (arm, seen)
    for r in records.values():
        assert r.status == "completed", (r.trial_id, r.error)
        assert r.patch is not None and r.patch.files == ("done.txt",), "collect's base is the same tree"
        assert r.verify is not None and r.verify.exit_code == 0
        log = kv(result.experiment_dir.artifacts.get(r.artifacts["verify.log"]).decode())
        assert log == EXPECTED, ("verify's tree", r.trial_id, log)
    preflight = json.loads((out / PREFLIGHT_JSON).read_text())["tasks"]["look-around"]
    assert preflight["outcome"] == "fails"
    assert kv(preflight["output_tail"]) == EXPECTED, "the preflight's tree"
    report = terminal_summary(load_experiment(out, prereg))
    assert "skills/tasks.json" in report and "CLAUDE.md" in report
