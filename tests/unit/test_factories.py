"""The test data builders stay in step with the models they build."""

from __future__ import annotations

from harness.records import Provenance, TrialRecord
from tests.factories import PROV, ProvenanceFields, RecordFields, StudyFactory, provenance, trial_record


def test_the_override_types_name_every_model_field() -> None:
    # a field added to the model must be added to its override type, or no test could set it
    assert set(RecordFields.__annotations__) == set(TrialRecord.model_fields)
    assert set(ProvenanceFields.__annotations__) == set(Provenance.model_fields)


def test_the_builders_validate_and_derive_the_trial_id() -> None:
    r = trial_record(task_id="fix", arm="baseline", run_index=2)
    assert r.trial_id == "fix.baseline.2" and r.provenance == PROV and r.status == "completed"
    assert provenance(model="opus") == PROV.model_copy(update={"model": "opus"})


def test_each_study_gets_its_own_directory(make_study: StudyFactory) -> None:
    a, b = make_study(), make_study(with_repo=False)
    assert a.root != b.root and a.base_sha and not b.base_sha
