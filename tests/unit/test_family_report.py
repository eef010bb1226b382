"""A family of variants' reports, gate and ledger entry from outcome codes (no Docker): harness.reporting.family,
harness.experiment.family (report and gate), harness.reporting.ledger.record_family."""

from __future__ import annotations

import html
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from statsmodels.stats.multitest import multipletests

from harness import plan
from harness.cli import main
from harness.experiment.family import family_of, report_family
from harness.records import RESULTS
from harness.reporting import ledger
from harness.reporting.family import decision_data, junit_xml, markdown
from harness.results.family import read_family_meta
from harness.results.meta import META
from harness.results.store import read_results
from harness.study.config import load_study
from tests.factories import write_experiment_dir, write_family

# 12 tasks x 3 runs (as in tests/unit/test_family.py): "strong" clearly better, "weak" adopts alone (p = 0.021),
# "worse" rejected, "null" no better.
BASE = [0, 1, 2, 1, 0, 2, 1, 1, 0, 2, 1, 0]
STRONG = [2, 3, 3, 2, 2, 3, 2, 3, 2, 3, 2, 2]
WEAK = [0, 3, 3, 2, 1, 2, 1, 1, 2, 2, 3, 1]
WORSE = [0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0]
NULL = [1, 1, 1, 1, 0, 2, 1, 1, 1, 2, 1, 0]


def spec(skill: list[int]) -> dict[str, tuple[str, str]]:
    return {
        f"t{i:02d}": ("P" * b + "F" * (3 - b), "P" * s + "F" * (3 - s))
        for i, (b, s) in enumerate(zip(BASE, skill, strict=True))
    }


def test_a_family_adopts_its_best_variant_and_says_so_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    top = write_family(tmp_path, {"weak": spec(WEAK), "strong": spec(STRONG), "worse": spec(WORSE)})
    lines = report_family(top)
    f = family_of(top)
    assert f.verdict == "adopt" and f.adopted == "strong"
    assert any(x.startswith("FAMILY DECISION: ADOPT: adopt version strong") for x in lines)
    data = json.loads((top / "decision.json").read_text())
    assert data == json.loads(json.dumps(decision_data(f)))
    by = {v["variant"]: v for v in data["variants"]}
    raw = [by[v]["p_value"] for v in ("weak", "strong", "worse")]
    assert [by[v]["p_holm"] for v in ("weak", "strong", "worse")] == pytest.approx(
        list(multipletests(raw, method="holm")[1])
    )
    # weak's p (0.021) meets Holm's second step (x2) once strong took the first: it adopts too, strong wins
    assert by["weak"]["own_verdict"] == by["weak"]["verdict"] == "adopt"
    assert by["worse"]["verdict"] == "reject"
    md = (top / "report.md").read_text()
    assert md == markdown(f) and "**ADOPT**" in md and "| `weak` | ADOPT | ✅ ADOPT |" in md
    junit = junit_xml(f)
    assert 'tests="4"' in junit and 'failures="1"' in junit  # worse fails; the family, weak and strong pass
    assert "strong" in (top / "report.html").read_text()
    # every comparison got its own reports too
    assert all((top / "variants" / v / "decision.json").is_file() for v in ("weak", "strong", "worse"))
    capsys.readouterr()
    assert main(["gate", str(top)]) == 0
    out = capsys.readouterr().out
    assert "ADOPT (exit 0) tidy: adopt version strong" in out and "weak: ADOPT" in out


def test_an_adoption_holm_takes_back_leaves_the_family_inconclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    top = write_family(tmp_path, {"null": spec(NULL), "weak": spec(WEAK), "worse": spec(WORSE)})
    report_family(top)
    data = json.loads((top / "decision.json").read_text())
    by = {v["variant"]: v for v in data["variants"]}
    assert by["weak"]["own_verdict"] == "adopt" and by["weak"]["verdict"] == "inconclusive"
    assert "HOLM_NOT_SIGNIFICANT" in {r["code"] for r in by["weak"]["reasons"]}
    assert (data["verdict"], data["adopted"], data["exit_code"]) == ("inconclusive", None, 2)
    assert "| `weak` | ADOPT | ⚠️ INCONCLUSIVE |" in (top / "report.md").read_text()
    capsys.readouterr()
    assert main(["gate", str(top)]) == 2
    capsys.readouterr()
    # alone it adopts; gated on its own directory it is still the family's member: Holm's correction holds
    assert main(["gate", str(top / "variants" / "weak")]) == 2
    out = capsys.readouterr().out
    assert "INCONCLUSIVE (exit 2) tidy variant weak, in the family at" in out and "alone adopt" in out
    assert "the family's verdict: INCONCLUSIVE" in out


def test_a_variant_without_results_leaves_the_family_without_a_verdict(tmp_path: Path) -> None:
    top = write_family(tmp_path, {"strong": spec(STRONG), "later": None})
    f = family_of(top)
    assert f.verdict == "unavailable" and f.exit_code == 3 and f.result is None
    assert "later" in f.reason
    assert main(["gate", str(top)]) == 3


def test_the_ledger_records_which_version_won(tmp_path: Path) -> None:
    top = write_family(tmp_path, {"weak": spec(WEAK), "strong": spec(STRONG)})
    study = load_study(tmp_path / "study" / "preregistration.yaml")
    update = ledger.record_family(study, family_of(top))
    entry = update.entry
    assert (entry.status, entry.verdict, entry.version, entry.baseline_version) == ("adopted", "adopt", "strong", None)
    assert entry.skill_path == "strong"
    assert (
        entry.variants is not None and entry.variants["weak"].verdict == "adopt"
    )  # both survive Holm; strong has the larger gain
    assert "version: strong" in ledger.dumps(ledger.load(update.path))


def test_against_a_shipped_version_a_rejected_edit_keeps_the_status(tmp_path: Path) -> None:
    """Version against version: a reject says the edit is no better than what ships, nothing against what ships."""
    top = write_family(tmp_path, {"edit": spec(WORSE)}, baseline="shipped")
    study = load_study(tmp_path / "study" / "preregistration.yaml")
    path = ledger.ledger_path(study)
    adopted = ledger.SkillEntry(status="adopted", verdict="adopt", rule="interval", baseline="1/3", skill="2/3",
                                cost_delta="+0%", last_run="x", model="sonnet", cli_version="2.1.0", date="2026-11-01")  # fmt: skip
    ledger.save(path, ledger.Ledger(skills={"tidy": adopted}))
    f = family_of(top)
    assert f.verdict == "reject"
    entry = ledger.record_family(study, f).entry
    assert (entry.status, entry.verdict, entry.version, entry.baseline_version) == (
        "adopted",
        "reject",
        None,
        "shipped",
    )
    assert entry.skill_path == "shipped" and entry.shelved_to is None
    assert (tmp_path / "study" / "edit" / "SKILL.md").is_file()  # nothing is shelved


def test_history_shows_a_variant_with_the_family_s_correction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``skilltrial history`` finds each version's comparison inside a family and never shows its uncorrected
    verdict alone: weak adopts alone, Holm's correction takes it back."""
    top = write_family(tmp_path, {"null": spec(NULL), "weak": spec(WEAK), "worse": spec(WORSE)})
    report_family(top)
    capsys.readouterr()
    assert main(["history", "tidy", "--in", str(top.parent)]) == 0
    out = capsys.readouterr().out
    assert sum("(in the family; alone" in line for line in out.splitlines()) == 3, out  # one row per variant
    weak = next(line for line in out.splitlines() if "alone adopt" in line)
    assert "inconclusive (in the family; alone adopt)" in weak
    assert "reject (in the family; alone reject)" in out
    # a directory that is no family's variant keeps its own verdict
    from harness.experiment.family import variant_verdict

    assert variant_verdict(tmp_path) is None
    assert variant_verdict(top / "variants" / "weak") == "inconclusive (in the family; alone adopt)"


def test_a_variant_s_own_reports_say_their_verdict_is_before_the_correction(tmp_path: Path) -> None:
    """A CI job or a reader that opens a variant's own decision.json, summary.txt or report.md learns that its
    verdict is uncorrected and where the corrected one is; an experiment that stands alone has no such note."""
    top = write_family(tmp_path, {"null": spec(NULL), "weak": spec(WEAK), "worse": spec(WORSE)})
    report_family(top)
    weak = top / "variants" / "weak"
    data = json.loads((weak / "decision.json").read_text())
    assert data["verdict"] == "adopt"  # alone it adopts ...
    assert data["family"] == {
        "variant": "weak",
        "variants": ["null", "weak", "worse"],
        "holm_corrected": False,
        "family_dir": "../..",
        "family_decision": "../../decision.json",
    }
    assert json.loads((weak / data["family"]["family_decision"]).read_text())["verdict"] == "inconclusive"
    note = "NOTE: this is variant weak's comparison in a family of 3 variants: its verdict here is before Holm's"
    assert note in (weak / "summary.txt").read_text()
    md = (weak / "report.md").read_text()
    assert md.splitlines()[0].startswith("#") and md.splitlines()[2].startswith("> " + note), md[:400]
    assert html.escape(note) in (weak / "report.html").read_text()
    junit = ET.fromstring((weak / "junit.xml").read_text())
    decision = next(c for c in junit.iter("testcase") if c.get("name") == "decision")
    skipped = decision.find("skipped")
    assert skipped is not None and note in (skipped.get("message") or "")  # never passes CI on its own
    assert decision.find("failure") is None and junit.get("skipped", "").isdigit()
    assert {p.get("name"): p.get("value") for p in junit.iter("property")}["holm_corrected"] == "false"
    # positive control: the same analysis written where it stands alone carries no note
    from harness.reporting import render_reports
    from harness.reporting.model import load_experiment

    alone = render_reports(load_experiment(weak))
    assert "family" not in json.loads(alone["decision.json"]) and "NOTE: this is variant" not in alone["summary.txt"]
    lone = next(c for c in ET.fromstring(alone["junit.xml"]).iter("testcase") if c.get("name") == "decision")
    assert lone.find("skipped") is None and "NOTE: this is variant" not in alone["report.html"]


def _shard_family(whole: Path, top: Path, i: int, owner: dict[str, int]) -> Path:
    """Shard ``i`` of 2 of the family at ``whole``, as `eval --shard i/2` writes it: its trials only."""
    fam = json.loads((whole / "family.json").read_text())
    top.mkdir(parents=True)
    (top / "family.json").write_text(json.dumps({**fam, "shard": f"{i}/2"}))
    for variant in fam["variants"]:
        src = whole / "variants" / variant
        meta = {**json.loads((src / META).read_text()), "shard": f"{i}/2"}
        records = [r.model_copy(update={"shard": f"{i}/2"}) for r in read_results(src / RESULTS).records
                   if owner[r.trial_id] == i]  # fmt: skip
        write_experiment_dir(top / "variants" / variant, meta, records)
    return top


def test_a_sharded_family_merges_variant_by_variant_into_the_whole_family_s_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = write_family(tmp_path / "whole", {"weak": spec(WEAK), "strong": spec(STRONG), "worse": spec(WORSE)})
    report_family(whole)
    study = load_study(tmp_path / "whole" / "study" / "preregistration.yaml")
    planned = plan.plan_trials(study.target_tasks(), 3, study.prereg.execution.seed)
    owner = {s.trial_id: plan.shard_of(s, 2) for s in planned}
    assert set(owner.values()) == {1, 2}, "both shards hold trials"
    shards = [_shard_family(whole, tmp_path / f"shard{i}", i, owner) for i in (1, 2)]
    capsys.readouterr()

    merged = tmp_path / "merged"
    assert main(["merge", str(merged), *map(str, shards)]) == 0
    printed = capsys.readouterr().out
    assert "strong: merged 2 shard(s), 72 result line(s): ADOPT alone" in printed
    assert "FAMILY DECISION: ADOPT: adopt version strong" in printed
    got, want = (json.loads((d / "decision.json").read_text()) for d in (merged, whole))
    assert (got["verdict"], got["adopted"]) == (want["verdict"], want["adopted"]) == ("adopt", "strong")
    assert [v["p_holm"] for v in got["variants"]] == pytest.approx([v["p_holm"] for v in want["variants"]])
    meta = read_family_meta(merged)
    assert meta is not None and meta.shard is None and meta.merged_from == tuple(str(s.resolve()) for s in shards)
    # a merged variant's own decision says it is before the correction, as a run's does
    assert json.loads((merged / "variants" / "weak" / "decision.json").read_text())["family"]["holm_corrected"] is False
    assert main(["gate", str(merged)]) == 0

    # refused, and nothing written: a missing shard, a family already there, a shard of another lock
    assert main(["merge", str(tmp_path / "half"), str(shards[0])]) == 4
    assert not (tmp_path / "half").exists()
    broken = tmp_path / "broken"
    shutil.copytree(shards[1], broken)
    (broken / "variants" / "worse" / RESULTS).write_text("")  # the last variant's half missing
    assert main(["merge", str(tmp_path / "partial"), str(shards[0]), str(broken)]) == 4
    assert not (tmp_path / "partial").exists(), "the earlier variants' merges are not written either"
    assert main(["merge", str(merged), *map(str, shards)]) == 4
    other = tmp_path / "other"
    shutil.copytree(shards[1], other)
    fam = json.loads((other / "family.json").read_text())
    (other / "family.json").write_text(json.dumps({**fam, "lock_hash": "d" * 64}))
    assert main(["merge", str(tmp_path / "mixed"), str(shards[0]), str(other)]) == 4
    assert "shards of different preregistrations cannot be merged" in capsys.readouterr().err
