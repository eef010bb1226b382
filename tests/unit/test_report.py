"""harness.reporting (markdown, html, junit, decision_json, gate): report.md, report.html, junit.xml, decision.json, gate, `skilltrial report`."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from harness import cli, fmt
from harness.analysis.reasons import ReasonCode
from harness.errors import LockError, ResultsUnavailable
from harness.reporting import html as report_html
from harness.reporting import write_reports
from harness.reporting.decision_json import decision_json, dumps
from harness.reporting.gate import gate
from harness.reporting.junit import junit_xml
from harness.reporting.markdown import markdown
from harness.reporting.model import ReportInput, load_experiment
from tests import reportkit as kit
from tests.factories import OUTCOME_PROV, outcome_records, provenance, write_experiment


def _with_flags(spec: dict[str, tuple[str, str]], flags: dict[str, list[str]], **kw: object) -> ReportInput:
    return kit.make_input(spec, flags=flags, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- markdown


def test_markdown_shows_every_rate_with_its_n_and_every_reason() -> None:
    spec = dict(kit.WIN, **{"fix-g": ("PUT", "PPI")})
    r = kit.make_input(spec)
    md = markdown(r)
    a = r.analysis
    assert fmt.rate(a.baseline) == "7/19" and fmt.rate(a.skill) == "15/20"
    assert "**7/19** (37%)" in md and "**15/20** (75%)" in md
    # unknown / truncated / infra counts per arm, and the per-task k/n
    assert "| **baseline** | **7/19** (37%) |" in md
    assert re.search(r"\| \*\*baseline\*\* \|[^\n]*\| 1 \| 1 \| 0 \|", md)
    assert re.search(r"\| \*\*skill\*\* \|[^\n]*\| 0 \| 0 \| 1 \|", md)
    assert "| `fix-g` | 1/1 (+1 unknown, +1 truncated) | 2/2 (+1 infra) |" in md
    for reason in r.decision.reasons:
        assert f"`{reason.code}`" in md
    assert len(r.decision.reasons) >= 2
    # paired difference with its interval, sign-flip p, cost ratio with interval, MDE, both rules
    p = r.analysis.paired
    assert f"[{fmt.pp(p.interval.low)}, {fmt.pp(p.interval.high)}]" in md
    assert f"p = {r.analysis.sign_flip.p_value:.3f}" in md
    assert "cost ratio (skill / baseline, per trial)" in md and "limit 1.50x" in md
    assert "smallest detectable effect" in md
    assert "| point (the article's) · **preregistered** |" in md and "| interval |" in md


def test_markdown_per_task_table_is_sorted_by_difference() -> None:
    md = markdown(kit.make_input(kit.WIN))
    order = [m for m in re.findall(r"^\| `(fix-[a-f])` \|", md, flags=re.M)]
    diffs = {t.task_id: t.difference for t in kit.make_input(kit.WIN).analysis.tasks}
    assert order == sorted(diffs, key=lambda t: (-(diffs[t] or 0), t))


def test_markdown_neutralises_agent_controlled_text() -> None:
    r = _with_flags(kit.WIN, {"fix-a.skill.0": [kit.HOSTILE, "a|b", "`rm -rf`"]})
    md = markdown(r)
    assert "<script>" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert "a\\|b" in md and "\\`rm -rf\\`" in md
    # the flagged trial is listed with its flags
    assert "### Flagged trials (1)" in md and "`fix-a.skill.0`" in md


def test_markdown_lists_skipped_tasks_and_notes() -> None:
    r = kit.make_input(kit.WIN, skipped=["later-task"])
    md = markdown(r)
    assert "| `later-task` | skipped | skipped |" in md


# ----------------------------------------------------------------------------- html


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs


def _parse(page: str) -> _Tags:
    p = _Tags()
    p.feed(page)
    return p


def test_html_is_self_contained_with_svg_charts() -> None:
    page = report_html.render(kit.make_input(kit.WIN))
    tags = _parse(page)
    assert tags.tags.count("svg") == 4  # pass rate, cost, per-task differences, turns
    for banned in ("script", "link", "img", "iframe", "object", "embed"):
        assert banned not in tags.tags
    assert not [a for a, _ in tags.attrs if a in ("src", "action", "srcset", "xlink:href")]
    # the only links: each trial's artifacts, relative paths inside the experiment directory
    assert all(re.fullmatch(r"artifacts/[0-9a-f]{2}/[0-9a-f]{64}", v or "") for a, v in tags.attrs if a == "href")
    assert "http://" not in page and "https://" not in page
    assert "url(" not in page and "@import" not in page
    assert "default-src 'none'" in page  # CSP: the browser refuses anything external
    assert "ADOPT" in page and "13/18" in page and "6/18" in page


def test_html_escapes_hostile_strings_and_urls_stay_plain_text() -> None:
    flags = {"fix-a.skill.0": [kit.HOSTILE, 'x" onmouseover="alert(2)', "see https://evil.example/x.js"]}
    page = report_html.render(_with_flags(kit.WIN, flags))
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'onmouseover="' not in page and "x&quot; onmouseover=&quot;alert(2)" in page
    tags = _parse(page)
    assert "script" not in tags.tags
    assert all("evil.example" not in (v or "") for _, v in tags.attrs)
    # the URL only appears as escaped text inside a chip, never in an attribute
    for m in re.finditer(r"https?://", page):
        before = page[: m.start()]
        assert before.rfind("<") < before.rfind(">"), "a URL appears inside a tag"


def test_html_charts_show_intervals_and_per_task_differences() -> None:
    r = kit.make_input(kit.WIN)
    page = report_html.render(r)
    for t in r.analysis.tasks:
        assert f">{t.task_id}</text>" in page or f"{t.task_id}</text>" in page
    assert "task-clustered 95% (t)" in page and "naive 95% (Wilson)" in page
    assert "all tasks: mean, 95% CI" in page
    assert "<polygon" in page  # the overall mean's diamond


def test_html_for_every_verdict_renders() -> None:
    for spec, rule, verdict in ((kit.WIN, "point", "adopt"), (kit.LOSS, "point", "reject"),
                                (kit.NOISY, "interval", "inconclusive")):  # fmt: skip
        r = kit.make_input(spec, rule=rule)
        assert r.decision.verdict == verdict
        page = report_html.render(r)
        assert f'<div class="word">{verdict.upper()}</div>' in page
        assert report_html.VERDICT_COLOURS[verdict] in page


# ---------------------------------------------------------------------------- junit


def _cases(xml_text: str) -> dict[str, ET.Element]:
    root = ET.fromstring(xml_text)
    assert root.tag == "testsuites"
    return {c.get("name", ""): c for c in root.iter("testcase")}


def test_junit_reject_has_failing_decision_testcase() -> None:
    r = kit.make_input(kit.LOSS)
    assert r.decision.verdict == "reject"
    text = junit_xml(r)
    cases = _cases(text)
    failure = cases["decision"].find("failure")
    assert failure is not None and failure.get("type") == "reject"
    assert "NOT_BETTER" in (failure.get("message") or "") and "NOT_BETTER" in (failure.text or "")
    assert set(kit.LOSS) <= set(cases)
    root = ET.fromstring(text)
    suite = root.find("testsuite")
    assert suite is not None
    assert int(suite.get("tests", "0")) == len(list(suite.iter("testcase")))
    assert int(suite.get("failures", "0")) == len(list(suite.iter("failure")))
    # the skill did worse on every task here: each task testcase fails with its k/n
    assert cases["fix-a"].find("failure") is not None
    assert "baseline 2/3, skill 0/3" in (cases["fix-a"].find("failure").get("message") or "")  # type: ignore[union-attr]


def test_junit_adopt_passes_and_lists_trials() -> None:
    r = kit.make_input(kit.WIN, skipped=["todo-task"])
    cases = _cases(junit_xml(r))
    assert r.decision.verdict == "adopt"
    assert cases["decision"].find("failure") is None and cases["decision"].find("error") is None
    assert cases["todo-task"].find("skipped") is not None
    out = cases["fix-c"].find("system-out")
    assert out is not None and "fix-c.skill.2: pass" in (out.text or "")


def test_junit_invalid_is_an_error_and_hostile_text_is_escaped() -> None:
    recs = outcome_records(kit.WIN, flags={"fix-a.baseline.0": [kit.HOSTILE + "\x01"]})
    recs = [
        x.model_copy(update={"provenance": provenance(OUTCOME_PROV, model="opus")}) if x.arm == "skill" else x
        for x in recs
    ]
    r = kit.make_input(kit.WIN, recs=recs)
    assert r.decision.verdict == "invalid"
    text = junit_xml(r)
    cases = _cases(text)  # parses: control characters were dropped
    err = cases["decision"].find("error")
    assert err is not None and "PROVENANCE_MISMATCH" in (err.get("message") or "")
    assert "<script>" not in text


# --------------------------------------------------------------------- decision.json


def test_decision_json_carries_verdict_rates_and_freshness_fields() -> None:
    r = kit.make_input(kit.WIN)
    data = decision_json(r)
    assert data["verdict"] == "adopt" and data["arms"]["skill"]["rate"] == "13/18"
    assert data["results_lines"] == len(r.records) == 36
    assert data["model"] == "sonnet" and data["cli_version"] == "2.1.0"
    assert json.loads(dumps(data)) == data


# ----------------------------------------------------------------------------- gate


@pytest.mark.parametrize(
    ("spec", "rule", "verdict", "code"),
    [
        (kit.WIN, "point", "adopt", 0),
        (kit.LOSS, "point", "reject", 1),
        (kit.NOISY, "interval", "inconclusive", 2),
    ],
)
def test_gate_exit_code_per_verdict(tmp_path: Path, spec: dict[str, tuple[str, str]], rule: str, verdict: str,
                                    code: int, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    exp = write_experiment(tmp_path, spec, rule=rule)
    g = gate(exp)
    assert (g.verdict, g.exit_code) == (verdict, code)
    assert g.source.startswith("recomputed")
    assert cli.main(["gate", str(exp)]) == code
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"gate: {verdict.upper()} (exit {code}) tidy: [")
    assert "\n" not in line


def test_gate_invalid_comparison_exits_3(tmp_path: Path) -> None:
    recs = [
        x.model_copy(update={"provenance": provenance(OUTCOME_PROV, cli_version="2.2.0")}) if x.arm == "skill" else x
        for x in outcome_records(kit.WIN)
    ]
    exp = write_experiment(tmp_path, kit.WIN, recs=recs)
    g = gate(exp)
    assert g.verdict == "invalid" and g.exit_code == 3
    assert "PROVENANCE_MISMATCH" in g.line


def test_gate_missing_results_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exp = write_experiment(tmp_path, kit.WIN)
    (exp / "results.jsonl").unlink()
    with pytest.raises(ResultsUnavailable) as e:
        gate(exp)
    assert e.value.exit_code == 3
    assert cli.main(["gate", str(exp)]) == 3
    assert "results.jsonl does not exist" in capsys.readouterr().err
    assert cli.main(["gate", str(tmp_path / "nowhere")]) == 3
    assert cli.main(["gate"]) == 3


def test_gate_unreadable_or_empty_results_exit_3(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, kit.WIN)
    (exp / "results.jsonl").write_text("not json\n")
    assert cli.main(["gate", str(exp)]) == 3
    (exp / "results.jsonl").write_text("")
    assert cli.main(["gate", str(exp)]) == 3


def test_gate_reads_a_current_decision_json_and_ignores_a_stale_one(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, kit.LOSS)
    write_reports(exp, load_experiment(exp))
    assert gate(exp).source == "decision.json" and gate(exp).exit_code == 1
    data = json.loads((exp / "decision.json").read_text())
    data["verdict"] = "adopt"
    (exp / "decision.json").write_text(json.dumps(data))
    assert gate(exp).exit_code == 0  # it trusts a decision.json computed from these exact results
    data["results_lines"] -= 1  # results grew since (a resumed run): recompute
    (exp / "decision.json").write_text(json.dumps(data))
    g = gate(exp)
    assert g.exit_code == 1 and g.source.startswith("recomputed")


def test_the_gate_reads_typed_reasons_and_recomputes_when_one_is_unknown(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, kit.LOSS)
    write_reports(exp, load_experiment(exp))
    read = gate(exp)
    assert read.source == "decision.json" and read.reasons == load_experiment(exp).decision.reasons
    assert all(isinstance(x.code, ReasonCode) for x in read.reasons)
    data = json.loads((exp / "decision.json").read_text())
    data["verdict"] = "adopt"
    data["reasons"][0]["code"] = "NOT_A_CODE"  # not written by this harness: the file is not trusted
    (exp / "decision.json").write_text(json.dumps(data))
    g = gate(exp)
    assert g.source.startswith("recomputed") and g.exit_code == 1 and g.line == read.line


def test_gate_cannot_recompute_without_the_preregistration(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, kit.WIN)
    (tmp_path / "study" / "preregistration.yaml").unlink()
    with pytest.raises(ResultsUnavailable) as e:
        gate(exp)
    assert "cannot be recomputed" in str(e.value)


# ------------------------------------------------------------------- skilltrial report


def test_report_command_renders_every_file_and_leaves_results_alone(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, kit.WIN, tasks_extra=[{"id": "todo", "prompt": "TODO later"}])
    # a torn last line must be ignored, not repaired: the report is read-only over results
    with open(exp / "results.jsonl", "a") as fh:
        fh.write('{"partial": ')
    before = (exp / "results.jsonl").read_bytes()
    assert cli.main(["report", str(exp)]) == 0
    assert (exp / "results.jsonl").read_bytes() == before
    assert not list(exp.glob("results.jsonl.torn-*"))
    for name in ("report.md", "report.html", "junit.xml", "decision.json", "summary.txt"):
        assert (exp / name).is_file(), name
    md = (exp / "report.md").read_text()
    assert "ADOPT" in md and "`todo` | skipped" in md and "unterminated line" in md
    ET.fromstring((exp / "junit.xml").read_text())
    assert json.loads((exp / "decision.json").read_text())["verdict"] == "adopt"


def test_report_works_after_the_skill_was_shelved(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, kit.LOSS)
    (tmp_path / "study" / "skill").rename(tmp_path / "elsewhere")
    assert cli.main(["report", str(exp)]) == 0


def test_report_refuses_a_relocked_preregistration(tmp_path: Path) -> None:
    exp = write_experiment(tmp_path, kit.WIN)
    path = tmp_path / "study" / "preregistration.yaml"
    data = yaml.safe_load(path.read_text())
    data["lock"]["sha256"] = "0" * 64
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(LockError, match="ran under lock"):
        load_experiment(exp)
    assert cli.main(["report", str(exp)]) == 4


def test_write_reports_redacts(tmp_path: Path) -> None:
    r = _with_flags(kit.WIN, {"fix-a.skill.0": ["leaked sk-ant-api03-abcdefghijklmnop"]})
    from harness.redact import Redactor

    for d in ("run", "rerender", "control"):
        (tmp_path / d).mkdir()
    paths = write_reports(tmp_path / "run", r, Redactor([]).text)
    for path in paths.values():
        assert "sk-ant-api03-abcdefghijklmnop" not in path.read_text()
    # `skilltrial report` and `merge` re-render without the run's redactor: the key-shaped patterns still apply
    paths = write_reports(tmp_path / "rerender", r)
    for path in paths.values():
        assert "sk-ant-api03-abcdefghijklmnop" not in path.read_text()
    raw = write_reports(tmp_path / "control", r, lambda s: s)
    assert any("sk-ant-api03-abcdefghijklmnop" in p.read_text() for p in raw.values()), "the leak is in the input"


# ------------------------------------------------------------------ the CI example


def test_github_actions_example_runs_eval_then_gates() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "github-actions" / "skill-eval.yml"
    data = yaml.safe_load(path.read_text())
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert triggers["schedule"][0]["cron"].split()[4] == "1"  # weekly
    assert triggers["workflow_dispatch"]["inputs"]["skill"]["required"] is True
    job = data["jobs"]["eval"]
    assert "self-hosted" in job["runs-on"]
    steps = job["steps"]
    runs = [s.get("run", "") for s in steps]
    # the skill's repository has no Makefile and no checkout of the harness: the job installs it
    assert not any("make " in r or ".venv/" in r for r in runs)
    install = next(i for i, r in enumerate(runs) if "pipx install" in r and "$HARNESS_SPEC" in r)
    eval_step = next(s for s in steps if "skilltrial eval" in s.get("run", "") and '--skill "$SKILL"' in s["run"])
    assert install < steps.index(eval_step)
    assert eval_step["env"]["ANTHROPIC_API_KEY"] == "${{ secrets.ANTHROPIC_API_KEY }}"
    # no other step sees the key
    assert sum("ANTHROPIC_API_KEY" in str(s) for s in steps) == 1
    gate_index = next(i for i, r in enumerate(runs) if "skilltrial gate" in r)
    assert gate_index > steps.index(eval_step)
    assert "||" not in runs[gate_index] and "continue-on-error" not in steps[gate_index]  # its exit code decides
    summary = next(s for s in steps if "$GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert "report.md" in summary["run"] and "always()" in summary["if"]
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert "report.html" in upload["with"]["path"] and "junit.xml" in upload["with"]["path"]
    assert "always()" in upload["if"]
