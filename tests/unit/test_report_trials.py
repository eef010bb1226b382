"""Every trial's patch, verify log and transcript are linked from report.md and report.html."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from harness.reporting import html as report_html
from harness.reporting.junit import junit_xml
from harness.reporting.markdown import markdown
from harness.reporting.model import ReportInput, artifact_path, load_experiment, trial_rows
from harness.reporting.text import terminal_summary
from tests import reportkit as kit
from tests.factories import write_experiment


def _with_artifacts() -> ReportInput:
    r = kit.make_input({"t1": ("PF", "FF")})
    records = tuple(
        x.model_copy(
            update={
                "artifacts": {
                    "patch.diff": f"{i:02x}" + "a" * 62,
                    "verify.log": f"{i:02x}" + "b" * 62,
                    "transcript.jsonl": f"{i:02x}" + "c" * 62,
                }
            }
        )
        for i, x in enumerate(r.records)
    )
    return dataclasses.replace(r, records=records)


def test_every_trial_links_its_artifacts_in_markdown_and_html() -> None:
    r = _with_artifacts()
    rows = trial_rows(r)
    assert len(rows) == len(r.final_records) == 4
    md = markdown(r)
    page = report_html.render(r)
    assert "### Every trial (4)" in md
    for x in r.final_records:
        for name, text in (("patch.diff", "patch"), ("verify.log", "verify log"), ("transcript.jsonl", "transcript")):
            path = artifact_path(x.artifacts[name])
            assert path == f"artifacts/{x.artifacts[name][:2]}/{x.artifacts[name]}"
            assert f"[{text}]({path})" in md
            assert f'<a href="{path}">{text}</a>' in page


def test_a_trial_without_artifacts_has_no_links() -> None:
    r = kit.make_input({"t1": ("PF", "FF")})
    assert all(row.links == () for row in trial_rows(r))
    assert "href=" not in report_html.render(r)


def test_junit_time_is_the_experiments_wall_time_not_the_sum_of_trials() -> None:
    import xml.etree.ElementTree as ET

    r = kit.make_input({"t1": ("PF", "FF"), "t2": ("PP", "FF")})  # runs 0 and 1: 10:00 to 11:01, 32 s each
    root = ET.fromstring(junit_xml(r))
    suite = root.find("testsuite")
    assert suite is not None
    assert float(root.get("time", "0")) == float(suite.get("time", "0")) == 61 * 60
    summed = sum(float(c.get("time", "0")) for c in suite.findall("testcase"))
    assert summed == 8 * 32.0  # positive control: the testcases still carry their trials' seconds


def test_reports_name_the_base_image_and_say_what_spent_includes(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, {"t1": ("PF", "FF")})
    meta = json.loads((exp / "experiment.json").read_text())
    meta["trial_inputs"] = {"base_image": "my-ci:2026-11", "trial_image": "sha256:" + "1" * 64}
    (exp / "experiment.json").write_text(json.dumps(meta))
    r = load_experiment(exp)
    assert r.base_image == "my-ci:2026-11"
    md, page = markdown(r), report_html.render(r)
    assert "(built on `my-ci:2026-11`)" in md
    assert "<dt>base image</dt><dd>my-ci:2026-11</dd>" in page
    assert "spent" in md and "(agents and judges;" in md
    assert "with judge" in junit_xml(r)
    assert "(agents and judges)" in terminal_summary(r)
