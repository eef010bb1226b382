"""The pure renderers of the skill-library section: Markdown table, inline SVG chart, the caveat."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from harness.analysis.contributions import CAVEAT, LibraryFit, Observation, fit, select
from harness.reporting.contributions import markdown_section, svg_chart


@pytest.fixture(scope="module")
def library() -> dict[str, LibraryFit]:
    rng = np.random.default_rng(2)
    n = 240
    c = (rng.random((n, 4)) < 0.5).astype(int)
    beta = np.array([0.35, -0.35, 0.0, 0.02])
    y = c @ beta + rng.normal(0, 0.3, n)
    cost = c @ np.array([0.0, 0.0, 0.5, 0.0]) + rng.normal(0, 0.1, n)
    names = ["helps", "hurts", "<costly>", "neutral"]
    obs = [Observation(f"t{i // 4:03d}", i % 4, tuple(int(v) for v in c[i]), float(y[i]), 0.0) for i in range(n)]
    cobs = [Observation(o.task_id, o.sample, o.mask, float(cost[i]), 0.0) for i, o in enumerate(obs)]
    return {"pass": fit(obs, names, seed=1), "cost_usd": fit(cobs, names, seed=1)}


def test_markdown_section(library: dict[str, LibraryFit]) -> None:
    sel = select(library["pass"], top_k=2, method="positive")
    md = markdown_section(library, sel, "positive")
    assert CAVEAT in md
    assert "no intercept" in md
    assert "**Selected on `pass`** (positive" in md and "`helps`" in md
    assert "Stricter selection (Holm, lower bound above 0): `helps`." in md
    assert "### pass" in md and "### cost_usd" in md
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(rows) == 8
    assert rows[0].startswith("| `helps` |") and "interval above 0" in rows[0]
    assert any(r.startswith("| `hurts` |") and "interval below 0" in r for r in rows)
    assert "held-out tasks" in md


def test_markdown_never_pads_an_empty_selection(library: dict[str, LibraryFit]) -> None:
    md = markdown_section(library, (), "holm")
    assert "none (the list is never padded)" in md


def test_markdown_flags_drift_on_all_zero_rows() -> None:
    obs = [Observation(f"t{i:02d}", 0, (i % 2,), 0.1 + 0.01 * (i % 3) + 0.2 * (i % 2), 0.0) for i in range(30)]
    f = fit(obs, ["s1"], seed=1)
    assert f.aa is not None and f.aa.differs_from_zero
    assert "**differs from 0**" in markdown_section({"pass": f}, (), "positive")


def test_svg_chart_is_self_contained_and_escaped(library: dict[str, LibraryFit]) -> None:
    svg = svg_chart(library["pass"])
    root = ET.fromstring(svg)  # well-formed XML, names escaped
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg"
    assert root.find(f"{ns}desc") is not None and root.find(f"{ns}desc").text == CAVEAT  # type: ignore[union-attr]
    assert "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")  # no network references
    assert "<script" not in svg and "href" not in svg
    circles = root.findall(f"{ns}circle")
    assert len(circles) == 4
    labels = [t.text for t in root.findall(f"{ns}text")]
    assert "<costly>" in labels and "&lt;costly&gt;" in svg
    colors = {c.find(f"{ns}title").text.split(":")[0]: c.get("fill") for c in circles}  # type: ignore[union-attr]
    assert colors["helps"] == "#1a7f37" and colors["hurts"] == "#cf222e" and colors["neutral"] == "#6e7781"
    # the helpful skill's point is to the right of the harmful one's
    xs = {c.find(f"{ns}title").text.split(":")[0]: float(c.get("cx", "0")) for c in circles}  # type: ignore[union-attr]
    assert xs["helps"] > xs["neutral"] > xs["hurts"]
