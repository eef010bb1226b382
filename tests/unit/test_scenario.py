"""harness.study.scenario: validating scenario files and compiling them for the scripted Messages API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError
from harness.study.config import Task, load_tasks
from harness.study.scenario import Scenario, compile_scenario, load_scenario

ROOT = Path(__file__).resolve().parents[2]
TASKS = (
    Task(id="t1", prompt="Fix the mean of an empty list.", verify_cmd="true"),
    Task(id="t2", prompt="Fix the median.", verify_cmd="true"),
)

SCENARIO = """\
seed: 3
defaults:
  usage: {input_tokens: 1000, output_tokens: 100}
arms:
  baseline: {p_success: 0.3}
  skill: {p_success: 0.4}
skills:
  tidy:
    marker: tidy-marker-123
    p_success: 0.9
    usage: {input_tokens: 800, output_tokens: 90}
  other:
    marker: other-marker
    p_success: 0.1
judge:
  mode: follow_verify
tasks:
  t1:
    success:
      - {tool: Read, input: {file_path: /workspace/a.py}}
      - {tool: Edit, input: {file_path: /workspace/a.py, old_string: x, new_string: y}}
    failure:
      - {tool: Bash, input: {command: "true"}}
  t2:
    arms:
      skill: {p_success: 0.55, read_skill: false}
      baseline: {p_success: 0.05}
"""


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    return path


def compiled(path: Path, scenario: Scenario, skill: str = "tidy", **kw: Any) -> dict[str, Any]:
    compiled: dict[str, Any] = json.loads(compile_scenario(path, scenario, TASKS, skill=skill, **kw))
    return compiled


def test_load_valid_scenario(scenario_file: Path) -> None:
    s = load_scenario(scenario_file)
    assert s.seed == 3
    assert set(s.tasks) == {"t1", "t2"}
    assert s.tasks["t1"].success[1].tool == "Edit"
    assert s.skills["tidy"].marker == "tidy-marker-123"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("tasks:\n  t1:\n    sucess: []\n", "tasks.t1.sucess"),
        ("tasks: {}\nsede: 1\n", "sede"),
        ("tasks:\n  t1:\n    success:\n      - {tool: Delete, input: {}}\n", "tasks.t1.success[0].tool"),
        ("tasks: {}\narms:\n  skil: {p_success: 0.5}\n", "arms.skil"),
        ("tasks: {}\narms:\n  skill: {p_success: 1.5}\n", "arms.skill.p_success"),
        ("tasks: {}\njudge: {mode: lenient}\n", "judge.mode"),
        ("tasks: {}\nskills:\n  tidy: {markr: x}\n", "skills.tidy.markr"),
        ("seed: 1\n", "tasks"),
    ],
)
def test_bad_field_names_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert info.value.field is not None
    assert info.value.field.startswith(field)  # a bad dict key is reported as "<field>.[key]"
    assert f"{path}: field '{field}" in str(info.value)


def test_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("tasks: [\n")
    with pytest.raises(ConfigError, match="malformed YAML") as info:
        load_scenario(path)
    assert str(path) in str(info.value)


def test_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert info.value.field == "(top level)"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_scenario(tmp_path / "none.yaml")


def test_compile_merges_prompts_and_resolves_the_skill_arm(scenario_file: Path) -> None:
    data = compiled(scenario_file, load_scenario(scenario_file))
    assert data["tasks"]["t1"]["prompt"] == TASKS[0].prompt
    assert data["tasks"]["t2"]["prompt"] == TASKS[1].prompt
    assert data["skill_marker"] == "tidy-marker-123"
    assert "skills" not in data and "arms" not in data
    t1 = data["tasks"]["t1"]["arms"]
    assert t1["baseline"]["p_success"] == 0.3  # scenario-wide arm behaviour
    assert t1["skill"]["p_success"] == 0.9  # from skills[tidy], not arms.skill
    assert t1["skill"]["usage"] == {
        "input_tokens": 800,
        "output_tokens": 90,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert "marker" not in t1["skill"]
    assert data["tasks"]["t1"]["success"][0] == {"tool": "Read", "input": {"file_path": "/workspace/a.py"}}


def test_task_level_arms_win(scenario_file: Path) -> None:
    data = compiled(scenario_file, load_scenario(scenario_file))
    t2 = data["tasks"]["t2"]["arms"]
    assert t2["skill"]["p_success"] == 0.55
    assert t2["skill"]["read_skill"] is False
    assert t2["baseline"]["p_success"] == 0.05


def test_another_skill_gets_its_own_behaviour(scenario_file: Path) -> None:
    data = compiled(scenario_file, load_scenario(scenario_file), skill="other")
    assert data["skill_marker"] == "other-marker"
    assert data["tasks"]["t1"]["arms"]["skill"]["p_success"] == 0.1


def test_unknown_skill_is_refused(scenario_file: Path) -> None:
    with pytest.raises(ConfigError) as info:
        compiled(scenario_file, load_scenario(scenario_file), skill="nope")
    assert info.value.field == "skills"
    assert "'nope'" in str(info.value)
    assert "tidy" in str(info.value)


def test_unknown_task_is_refused(scenario_file: Path) -> None:
    scenario = load_scenario(scenario_file)
    with pytest.raises(ConfigError) as info:
        compile_scenario(scenario_file, scenario, TASKS[:1], skill="tidy")
    assert info.value.field == "tasks.t2"
    assert str(scenario_file) in str(info.value)


def test_without_skills_section_the_skill_arm_comes_from_arms(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("arms:\n  skill: {p_success: 0.7}\ntasks:\n  t1: {}\n")
    data = compiled(path, load_scenario(path), skill="anything")
    assert set(data["tasks"]["t1"]["arms"]) == {"skill"}
    assert data["tasks"]["t1"]["arms"]["skill"]["p_success"] == 0.7


def test_seed_override_and_determinism(scenario_file: Path) -> None:
    scenario = load_scenario(scenario_file)
    assert compiled(scenario_file, scenario)["seed"] == 3
    assert compiled(scenario_file, scenario, seed=99)["seed"] == 99
    a = compile_scenario(scenario_file, scenario, TASKS, skill="tidy")
    assert a == compile_scenario(scenario_file, scenario, TASKS, skill="tidy")


def test_the_shipped_demo_scenario_compiles() -> None:
    demo = ROOT / "examples" / "demo"
    scenario = load_scenario(demo / "scenario.yaml")
    tasks = load_tasks(demo / "tasks.json").runnable
    for skill in scenario.skills:
        data = json.loads(compile_scenario(demo / "scenario.yaml", scenario, tasks, skill=skill))
        assert data["skill_marker"] == scenario.skills[skill].marker
        assert set(data["tasks"]) <= {t.id for t in tasks}


def test_an_unknown_task_names_the_task_set_it_is_checked_against(scenario_file: Path) -> None:
    scenario = load_scenario(scenario_file)
    with pytest.raises(ConfigError) as info:
        compile_scenario(scenario_file, scenario, TASKS[:1], skill="tidy")
    text = str(info.value)
    assert "'t2' is not one of the 1 task(s) this experiment runs" in text
    assert "target_tasks" in text and ": t1)" in text


def test_a_skill_arm_without_a_marker_is_warned_about(tmp_path: Path, scenario_file: Path) -> None:
    from harness.study.scenario import scenario_warnings

    path = tmp_path / "s.yaml"
    path.write_text("arms:\n  skill: {p_success: 0.7}\ntasks:\n  t1: {}\n  t2: {arms: {skill: {read_skill: false}}}\n")
    warnings = scenario_warnings(load_scenario(path), skill="tidy")
    assert len(warnings) == 1
    assert "task 't1': the skill arm reads /skill/SKILL.md but no marker is set" in warnings[0]
    # positive controls: a marker at any level silences it
    assert scenario_warnings(load_scenario(scenario_file), skill="tidy") == []
    path.write_text("skill_marker: m-1\ntasks:\n  t1: {}\n")
    assert scenario_warnings(load_scenario(path), skill="tidy") == []
    path.write_text("tasks:\n  t1: {skill_marker: m-2}\n")
    assert scenario_warnings(load_scenario(path), skill="tidy") == []


def test_a_library_scenario_gets_no_skill_marker_warnings() -> None:
    """The library demo printed five false warnings: its masked arm reads /skills/<name>/, not /skill."""
    from harness.study.scenario import Scenario, scenario_warnings

    plain = Scenario.model_validate({"tasks": {"t": {}}})
    assert scenario_warnings(plain, skill="s")  # positive control: a skill arm with no marker warns
    library = Scenario.model_validate({"tasks": {"t": {}}, "library": {"skills": {}}})
    assert scenario_warnings(library, skill="s") == []
