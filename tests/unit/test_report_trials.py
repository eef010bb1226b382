"""Every trial's patch, verify log and transcript are linked from report.md and report.html."""

from __future__ import annotations

import dataclasses

import reportkit as kit

from harness import report, report_html
from harness.report_trials import artifact_path, trial_rows


def _with_artifacts() -> report.ReportInput:
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
    md = report.markdown(r)
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
