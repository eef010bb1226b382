"""A model matrix in the preregistration (``execution.models``): what is accepted, what is refused (one
ConfigError naming the file and the field), what the lock covers, and one model's narrowed study."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError, LockError
from harness.results.load import study_for
from harness.results.meta import ExperimentMeta
from harness.study import scenario
from harness.study.config import Execution, load_study, model_dir_name, parse_preregistration
from harness.study.lock import canonical_json, lock, lock_digest, sha256_hex, verify_lock
from harness.study.scaffold import init
from tests.factories import DEFAULT_PREREG, StudyFactory

MATRIX_PREREG = DEFAULT_PREREG.replace("  model: sonnet\n", "  models: [sonnet, opus]\n")


def _parse(execution: str, decision: str = "") -> object:
    text = f"skill: s\nskill_ref: x\nexecution: {execution}\n" + (f"decision: {decision}\n" if decision else "")
    return parse_preregistration(Path("prereg.yaml"), text)


def test_a_matrix_reads_its_first_model_as_model_and_narrows_to_each() -> None:
    p = parse_preregistration(Path("p.yaml"), MATRIX_PREREG)
    ex = p.execution
    assert ex.models == ("sonnet", "opus") and ex.model == "sonnet"
    assert ex.executor_models == ("sonnet", "opus")
    assert Execution().executor_models == ("sonnet",), "one model: the executor models are that model"
    opus = ex.for_model("opus")
    assert (opus.model, opus.models, opus.judge_model, opus.runs_per_arm) == ("opus", (), "haiku", 2)
    with pytest.raises(ValueError):
        ex.for_model("haiku")
    assert p.decision.models_rule == "every"


@pytest.mark.parametrize(
    ("execution", "decision", "field", "words"),
    [
        ("{models: [sonnet, opus], model: sonnet}", "", "execution.model", "not both"),
        ("{models: []}", "", "execution.models", "at least two"),
        ("{models: [opus]}", "", "execution.models", "execution.model: NAME"),
        ("{models: [sonnet, opus, sonnet]}", "", "execution.models[2]", "listed twice (models[0])"),
        ("{models: [sonnet, '']}", "", "execution.models[1]", "not a model name"),
        ("{models: ['  ', sonnet]}", "", "execution.models[0]", "not a model name"),
        ("{models: [sonnet, 3]}", "", "execution.models[1]", "valid string"),
        ("{models: sonnet}", "", "execution.models", "valid tuple"),
        ("{models: [sonnet, haiku]}", "", "execution.judge_model", "models[1] is 'haiku'"),
        ("{models: [sonnet, opus], judge_model: sonnet}", "", "execution.judge_model", "models[0] is 'sonnet'"),
        ("{models: ['a/b', 'a:b']}", "", "execution.models[1]", "share the results directory models/a_b"),
        ("{models: [Opus, opus]}", "", "execution.models[1]", "share the results directory"),
        ("{models: [" + ", ".join(f"m{i}" for i in range(17)) + "]}", "", "execution.models", "at most 16"),
        ("{model: sonnet}", "{models_rule: any}", "decision.models_rule", "only to a model matrix"),
        ("{models: [sonnet, opus]}", "{models_rule: some}", "decision.models_rule", "'every' or 'any'"),
    ],
)
def test_a_bad_matrix_is_one_error_naming_the_file_and_the_field(
    execution: str, decision: str, field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as e:
        _parse(execution, decision)
    assert e.value.field == field and "prereg.yaml" in str(e.value)
    assert words in str(e.value), str(e.value)


def test_a_library_experiment_refuses_a_matrix() -> None:
    text = "skill: lib\nlibrary: {path: skills}\nexecution: {models: [sonnet, opus]}\n"
    with pytest.raises(ConfigError) as e:
        parse_preregistration(Path("p.yaml"), text)
    assert e.value.field == "execution.models"


def test_model_directory_names_are_plain_and_never_hidden() -> None:
    assert model_dir_name("claude-sonnet-4-5") == "claude-sonnet-4-5"
    assert model_dir_name("us.anthropic.claude:0") == "us.anthropic.claude_0"
    assert model_dir_name("arn:aws/x y") == "arn_aws_x_y"
    assert model_dir_name("..") == "_." and model_dir_name(".hidden") == "_hidden"


def test_the_lock_covers_the_models_and_one_models_study_verifies_under_it(make_study: StudyFactory) -> None:
    files = make_study(MATRIX_PREREG)
    lock(files.prereg)
    study = load_study(files.prereg)
    whole = verify_lock(study).sha256
    for model in ("sonnet", "opus"):
        own = study.for_model(model)
        assert own.prereg.execution.model == model and own.prereg.execution.models == ()
        assert own.matrix_model == model and own.locked_prereg is study.prereg
        assert verify_lock(own).sha256 == whole, "every model's experiment runs under the matrix's lock"
    files.prereg.write_text(MATRIX_PREREG.replace("[sonnet, opus]", "[sonnet, opus, claude-opus-4-1]"))
    with pytest.raises(LockError, match="changed since lock: preregistration"):
        verify_lock(load_study(files.prereg))


def test_locks_made_before_the_matrix_fields_stay_valid(make_study: StudyFactory) -> None:
    """The new fields count only when set: a preregistration without them hashes as it did before them
    (the matrix fields, execution.include_paths, decision.futility_stop at its default, decision.sequential
    unset, and issue 28's split, arms and selection unset)."""
    files = make_study()
    lock(files.prereg)
    study = load_study(files.prereg)
    _, digests = lock_digest(study, files.base_sha)
    before = study.prereg.model_dump(mode="json", exclude={"lock"})
    before["execution"].pop("prices")
    before["execution"].pop("models")
    before["execution"].pop("include_paths")
    before["decision"].pop("models_rule")
    before["decision"].pop("futility_stop")
    before["decision"].pop("sequential")
    for key in ("split", "arms", "selection"):  # issue 28
        before.pop(key)
    assert digests["preregistration"] == sha256_hex(canonical_json(before))
    assert digests["analysis"] == sha256_hex(canonical_json(before["decision"]))


def test_a_models_directory_reads_back_as_that_models_study(make_study: StudyFactory, tmp_path: Path) -> None:
    files = make_study(MATRIX_PREREG)
    lock(files.prereg)
    study = load_study(files.prereg)
    lock_hash = verify_lock(study).sha256
    meta = ExperimentMeta.start(lock_hash, preregistration=str(files.prereg), skill="tidy", shard=None,
                                mode="scripted", model="opus")  # fmt: skip
    own = study_for(meta, tmp_path)
    assert own.prereg.execution.model == "opus" and own.matrix_model == "opus"
    stranger = meta.model_copy(update={"model": "claude-haiku"})
    with pytest.raises(ConfigError) as e:
        study_for(stranger, tmp_path)
    assert e.value.field == "model" and "does not list" in str(e.value)


def test_the_scaffold_mentions_models_and_its_commented_line_makes_a_matrix(tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "fixer"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("# fixer\n")
    made = init(skill)
    text = made.prereg.read_text()
    assert "# models: [sonnet, opus]" in text and "# models_rule: every" in text
    uncommented = text.replace("  model: sonnet", "  # model: sonnet").replace(
        "# models: [sonnet, opus]", "models: [sonnet, opus]"
    )
    p = parse_preregistration(made.prereg, uncommented)
    assert p.execution.models == ("sonnet", "opus")


def test_a_scenario_varies_the_arms_by_model(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({
        "skill_marker": "m", "arms": {"baseline": {"p_success": 0.2}, "skill": {"p_success": 0.5}},
        "models": {"opus": {"arms": {"skill": {"p_success": 1}}}},
        "tasks": {"t1": {}},
    }))  # fmt: skip
    sc = scenario.load_scenario(path)
    from harness.study.config import Task

    tasks = (Task(id="t1", prompt="fix t1", verify_cmd="true"),)

    def arms(model: str) -> dict[str, object]:
        compiled = json.loads(scenario.compile_scenario(path, scenario.for_model(sc, model), tasks, skill="s"))
        assert "models" not in compiled, "the server never sees other models' behaviour"
        return {arm: b["p_success"] for arm, b in compiled["tasks"]["t1"]["arms"].items()}

    assert arms("opus") == {"baseline": 0.2, "skill": 1}
    assert arms("sonnet") == {"baseline": 0.2, "skill": 0.5}, "a model the scenario does not name: the top level"
