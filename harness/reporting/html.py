"""``report.html``: one self-contained page, charts as inline SVG drawn here, no network.

No scripts, no external stylesheets, fonts or images; a Content-Security-Policy
of ``default-src 'none'`` makes the browser refuse anything else even if a
string slipped through. Every string that is not a fixed label goes through
:func:`~harness.reporting.escape.esc` (``html.escape`` after dropping control
characters): trial flags, file names and reasons come from agents and models.

Layout, top to bottom: the verdict banner (readable in five seconds), key
figures, pass rate per arm with both intervals, cost per trial per arm, the
per-task paired differences with the overall interval, turns per arm, both
rules' verdicts and every reason, the per-task table, flagged trials, and the
run's provenance.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness import __version__, fmt
from harness.analysis import exact
from harness.analysis.decide import DecisionResult
from harness.analysis.estimates import ArmSummary
from harness.analysis.rules import cost_limit
from harness.records import TrialRecord, outcome
from harness.reporting.escape import esc
from harness.reporting.model import (
    ReportInput,
    deciding_reasons,
    flags_by_task,
    next_experiment_text,
    paired_label,
    run_dates,
    run_provenance,
    sequential_lines,
    tasks_by_difference,
    trial_rows,
)

VERDICT_COLOURS = {
    "adopt": "#15803d",
    "reject": "#b91c1c",
    "inconclusive": "#b45309",
    "invalid": "#6b21a8",
}
VERDICT_TEXT = {
    "adopt": "Adopt the skill",
    "reject": "Reject the skill",
    "inconclusive": "No decision on the skill",
    "invalid": "Invalid comparison for the skill",
}
ARM_COLOURS = {"baseline": "#64748b", "skill": "#4f46e5"}
GOOD, BAD, NEUTRAL = "#16a34a", "#dc2626", "#64748b"
INK, MUTED, GRID = "#0f172a", "#475569", "#e2e8f0"


def _f(x: float) -> str:
    return f"{x:.1f}"


# ============================================================================= svg


def _svg(width: int, height: int, label: str, body: Sequence[str]) -> str:
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(label)}">' + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, text: str, *, anchor: str = "start", size: int = 12, fill: str = INK,
          weight: str = "normal", title: str | None = None) -> str:  # fmt: skip
    tip = f"<title>{esc(title)}</title>" if title else ""
    return (
        f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" font-size="{size}" fill="{fill}" '
        f'font-weight="{weight}">{tip}{esc(text)}</text>'
    )


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1.0, dash: str = "") -> str:
    d = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" stroke="{stroke}" stroke-width="{width}"{d}/>'
    )


def _whisker(x1: float, x2: float, y: float, stroke: str, width: float, cap: float) -> list[str]:
    return [
        _line(x1, y, x2, y, stroke, width),
        _line(x1, y - cap, x1, y + cap, stroke, max(1.0, width / 2)),
        _line(x2, y - cap, x2, y + cap, stroke, max(1.0, width / 2)),
    ]


def _circle(x: float, y: float, r: float, fill: str, stroke: str = "#ffffff", width: float = 1.5) -> str:
    return f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{r}" fill="{fill}" stroke="{stroke}" stroke-width="{width}"/>'


def _nice_ticks(high: float, count: int = 5) -> list[float]:
    if high <= 0 or not math.isfinite(high):
        return [0.0, 1.0]
    raw = high / count
    if raw < sys.float_info.min:  # below the normal floats: no decade to step in
        return [0.0, 1.0]
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks = [0.0, step]
    while ticks[-1] < high - step * 1e-9:  # relative: a cost of $1e-15 still gets an axis above 0
        ticks.append(ticks[-1] + step)
    return ticks


@dataclass(frozen=True)
class _Scale:
    lo: float
    hi: float
    x0: float
    x1: float

    def __call__(self, v: float) -> float:
        if not self.hi > self.lo:  # an empty range (every value equal, or tiny beyond resolution): the left edge
            return self.x0
        v = min(max(v, self.lo), self.hi)
        return self.x0 + (v - self.lo) / (self.hi - self.lo) * (self.x1 - self.x0)


# ------------------------------------------------------------- pass rate per arm


def pass_rate_chart(r: ReportInput) -> str:
    a = r.analysis
    conf = round(100 * a.confidence)
    width, height = 520, 214
    sx = _Scale(0.0, 1.0, 86, 378)
    body: list[str] = []
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        body.append(_line(sx(t), 18, sx(t), 150, GRID))
        body.append(_text(sx(t), 166, f"{100 * t:.0f}%", anchor="middle", size=11, fill=MUTED))
    for i, arm in enumerate((a.baseline, a.skill)):
        cy = 50 + i * 62
        colour = ARM_COLOURS[arm.arm]
        body.append(_text(76, cy + 5, arm.arm, anchor="end", size=13, weight="600"))
        if arm.rate is not None:
            body.append(
                f'<rect x="{_f(sx(0))}" y="{_f(cy - 16)}" width="{_f(sx(arm.rate) - sx(0))}" height="32" '
                f'fill="{colour}" fill-opacity="0.18" rx="3"/>'
            )
        body += _whisker(sx(arm.wilson.low), sx(arm.wilson.high), cy - 8, "#94a3b8", 2, 4)
        c = arm.clustered
        if c.mean is not None and math.isfinite(c.interval.low) and math.isfinite(c.interval.high):
            body += _whisker(sx(max(0.0, c.interval.low)), sx(min(1.0, c.interval.high)), cy + 8, colour, 4, 6)
        if arm.rate is not None:
            body.append(_circle(sx(arm.rate), cy, 6.5, colour))
        body.append(_text(392, cy - 1, f"{fmt.rate(arm)}  {fmt.pct(arm.rate)}", size=15, weight="700"))
        excluded = fmt.excluded(arm)
        parts = excluded.split(", ") if excluded else ["nothing excluded"]
        for k in range(0, len(parts), 2):  # two exclusions per line so the labels stay inside the chart
            body.append(_text(392, cy + 16 + 13 * (k // 2), ", ".join(parts[k : k + 2]), size=11, fill=MUTED))
    ly = 190
    body += _whisker(90, 116, ly, INK, 4, 6)
    body.append(_text(124, ly + 4, f"task-clustered {conf}% (t)", size=11, fill=MUTED))
    body += _whisker(276, 302, ly, "#94a3b8", 2, 4)
    body.append(_text(310, ly + 4, f"naive {conf}% (Wilson)", size=11, fill=MUTED))
    return _svg(width, height, "pass rate per arm with naive and task-clustered intervals", body)


# ------------------------------------------------------------ strip plots per arm


def _strip_chart(r: ReportInput, label: str, value: Callable[[TrialRecord], float | None],
                 show: Callable[[float], str], centre: Callable[[ArmSummary, list[float]], tuple[str, float | None]],
                 ) -> str:  # fmt: skip
    width, height = 520, 214
    rule = r.prereg.decision.pass_rule
    points: dict[str, list[tuple[float, str]]] = {"baseline": [], "skill": []}
    for rec in r.final_records:
        o = outcome(rec, rule)
        v = value(rec)
        if o in ("infra", "skipped") or v is None or not math.isfinite(v):
            continue
        points[rec.arm].append((v, o))
    high = max((v for pts in points.values() for v, _ in pts), default=0.0)
    ticks = _nice_ticks(high * 1.05 if high > 0 else 1.0)
    sx = _Scale(0.0, ticks[-1], 86, 378)
    body: list[str] = []
    for t in ticks:
        body.append(_line(sx(t), 18, sx(t), 150, GRID))
        body.append(_text(sx(t), 166, show(t), anchor="middle", size=11, fill=MUTED))
    for i, arm in enumerate((r.analysis.baseline, r.analysis.skill)):
        cy = 50 + i * 62
        colour = ARM_COLOURS[arm.arm]
        body.append(_text(76, cy + 5, arm.arm, anchor="end", size=13, weight="600"))
        body.append(_line(sx(0), cy, sx(ticks[-1]), cy, GRID, 1))
        for j, (v, kind) in enumerate(sorted(points[arm.arm])):
            jitter = ((j * 7) % 9 - 4) * 3.0
            if kind == "pass":
                body.append(_circle(sx(v), cy + jitter, 4.5, colour, "#ffffff", 1))
            elif kind == "fail":
                body.append(_circle(sx(v), cy + jitter, 4, "#ffffff", colour, 1.8))
            else:
                body.append(_circle(sx(v), cy + jitter, 4, "#cbd5e1", "#94a3b8", 1))
        name, mid = centre(arm, [v for v, _ in points[arm.arm]])
        if mid is not None:
            body.append(_line(sx(mid), cy - 20, sx(mid), cy + 20, INK, 2.5))
            body.append(_text(392, cy - 1, f"{name} {show(mid)}", size=14, weight="700"))
        body.append(_text(392, cy + 16, f"{len(points[arm.arm])} trials", size=11, fill=MUTED))
    ly = 190
    body.append(_circle(92, ly, 4.5, INK, "#ffffff", 1))
    body.append(_text(102, ly + 4, "pass", size=11, fill=MUTED))
    body.append(_circle(146, ly, 4, "#ffffff", INK, 1.8))
    body.append(_text(156, ly + 4, "fail", size=11, fill=MUTED))
    body.append(_circle(194, ly, 4, "#cbd5e1", "#94a3b8", 1))
    body.append(_text(204, ly + 4, "unknown / truncated", size=11, fill=MUTED))
    body.append(_line(330, ly - 8, 330, ly + 8, INK, 2.5))
    body.append(_text(340, ly + 4, "arm figure (right)", size=11, fill=MUTED))
    return _svg(width, height, label, body)


def cost_chart(r: ReportInput) -> str:
    def money(v: float) -> str:
        return f"${v:.3f}" if v < 1 else f"${v:.2f}"

    return _strip_chart(r, "agent cost per trial, per arm", lambda x: x.agent_cost_usd, money,
                        lambda arm, _: ("mean", arm.mean_cost_per_trial))  # fmt: skip


def turns_chart(r: ReportInput) -> str:
    def turns(v: float) -> str:
        return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"

    return _strip_chart(r, "agent turns per trial, per arm",
                        lambda x: float(x.agent.num_turns) if x.agent and x.agent.num_turns is not None else None,
                        turns, lambda arm, _: ("median", arm.turns.median))  # fmt: skip


# ----------------------------------------------------------- per-task differences


def difference_chart(r: ReportInput) -> str:
    a = r.analysis
    conf = round(100 * a.confidence)
    rows = tasks_by_difference(a)
    row_h = 26
    top = 40
    width = 1060
    height = top + row_h * (len(rows) + 1) + 76
    sx = _Scale(-1.0, 1.0, 250, 800)
    body: list[str] = []
    plot_bottom = top + row_h * (len(rows) + 1) + 6
    p = a.paired
    iv = p.interval
    if p.mean is not None and not (math.isinf(iv.low) and math.isinf(iv.high)):
        lo, hi = sx(max(-1.0, iv.low)), sx(min(1.0, iv.high))
        body.append(
            f'<rect x="{_f(lo)}" y="{top - 10}" width="{_f(max(1.0, hi - lo))}" height="{_f(plot_bottom - top + 10)}" '
            f'fill="#c7d2fe" fill-opacity="0.45"/>'
        )
    for t in (-1.0, -0.5, 0.5, 1.0):
        body.append(_line(sx(t), top - 10, sx(t), plot_bottom, GRID))
    body.append(_line(sx(0), top - 10, sx(0), plot_bottom, INK, 1.5))
    if r.prereg.decision.rule == "interval":
        g = r.prereg.decision.min_worthwhile_gain
        body.append(_line(sx(g), top - 10, sx(g), plot_bottom, GOOD, 1.5, "5 4"))
        body.append(_text(sx(g) + 4, plot_bottom + 14, f"minimum worthwhile gain {fmt.pp(g)}", size=10, fill=GOOD))
    body.append(_text(sx(0) - 8, top - 18, "skill worse", anchor="end", size=11, fill=BAD, weight="600"))
    body.append(_text(sx(0) + 8, top - 18, "skill better", size=11, fill=GOOD, weight="600"))
    body.append(_text(830, top - 18, "passed: baseline → skill", size=11, fill=MUTED))
    for i, row in enumerate(rows):
        cy = top + i * row_h + row_h / 2
        name = row.task_id if len(row.task_id) <= 30 else row.task_id[:29] + "…"
        body.append(_text(240, cy + 4, name, anchor="end", size=12, title=row.task_id))
        body.append(_text(830, cy + 4, f"{fmt.rate(row.baseline)} → {fmt.rate(row.skill)}", size=12, fill=MUTED))
        d = row.difference
        if d is None:
            body.append(_text(sx(0) + 8, cy + 4, "no valid trials in both arms", size=11, fill=MUTED))
            continue
        colour = GOOD if d > 0 else BAD if d < 0 else NEUTRAL
        body.append(_line(sx(0), cy, sx(d), cy, colour, 2))
        body.append(_circle(sx(d), cy, 6, colour))
    cy = top + len(rows) * row_h + row_h / 2 + 4
    body.append(_line(40, cy - row_h / 2, 1040, cy - row_h / 2, "#cbd5e1", 1))
    body.append(_text(240, cy + 4, f"all tasks: mean, {conf}% CI", anchor="end", size=12, weight="700"))
    if p.mean is not None:
        if math.isfinite(iv.low) and math.isfinite(iv.high):
            body += _whisker(sx(max(-1.0, iv.low)), sx(min(1.0, iv.high)), cy, INK, 4, 7)
        m = sx(p.mean)
        body.append(
            f'<polygon points="{_f(m)},{_f(cy - 9)} {_f(m + 9)},{_f(cy)} {_f(m)},{_f(cy + 9)} {_f(m - 9)},{_f(cy)}" '
            f'fill="{INK}" stroke="#ffffff" stroke-width="1.5"/>'
        )
        body.append(
            _text(830, cy + 4, f"{fmt.pp(p.mean)} [{fmt.pp(iv.low)}, {fmt.pp(iv.high)}]", size=12, weight="700")
        )
    for t in (-1.0, -0.5, 0.0, 0.5, 1.0):
        body.append(_text(sx(t), plot_bottom + 30, f"{100 * t:+.0f} pp" if t else "0", anchor="middle", size=11,
                          fill=MUTED))  # fmt: skip
    body.append(
        _text(sx(0), plot_bottom + 52, "per-task difference in pass rate (skill - baseline); shaded: the "
              f"{conf}% interval of the mean (t, {p.df} df)", anchor="middle", size=11, fill=MUTED)
    )  # fmt: skip
    return _svg(width, height, "per-task paired differences with the overall interval", body)


# =========================================================================== page

CSS = """
*{box-sizing:border-box}
body{margin:0;background:#f1f5f9;color:#0f172a;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:24px 24px 40px}
.banner{border-radius:14px;color:#fff;padding:22px 28px;display:flex;gap:28px;align-items:center}
.banner .word{font-size:46px;font-weight:800;letter-spacing:.02em;line-height:1}
.banner .sub{font-size:13px;opacity:.9;margin-top:6px}
.banner h1{font-size:22px;margin:0 0 6px;font-weight:700}
.banner ul{margin:8px 0 0;padding:0;list-style:none;font-size:15px}
.banner li{margin:3px 0}
.banner .mark{display:inline-block;width:1.4em;font-weight:800}
.banner code{background:rgba(255,255,255,.18);padding:1px 5px;border-radius:4px;font-size:12px}
.tiles{display:grid;grid-template-columns:repeat(6,1fr);gap:12px;margin:16px 0}
.tile{background:#fff;border-radius:10px;padding:12px 14px;border-top:4px solid #cbd5e1}
.tile .k{font-size:12px;color:#475569;text-transform:uppercase;letter-spacing:.04em}
.tile .v{font-size:24px;font-weight:750;margin-top:2px;white-space:nowrap}
.tile .s{font-size:12px;color:#475569}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:16px}
.card{background:#fff;border-radius:10px;padding:16px 18px;margin-top:16px}
.grid .card{margin-top:0}
.card h2{font-size:16px;margin:0 0 10px}
.card p.hint{color:#475569;font-size:12px;margin:6px 0 0}
svg.chart{display:block;max-width:100%;height:auto;font-family:inherit}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #e2e8f0;vertical-align:top}
th{color:#475569;font-weight:600;background:#f8fafc}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.chip{display:inline-block;background:#fee2e2;color:#991b1b;border-radius:999px;padding:1px 8px;margin:1px 2px;
font-size:12px}
.kind{display:inline-block;border-radius:4px;padding:0 6px;font-size:11px;font-weight:700;text-transform:uppercase}
.kind-invalid{background:#f3e8ff;color:#6b21a8}.kind-inconclusive{background:#fef3c7;color:#92400e}
.kind-rule{background:#e0e7ff;color:#3730a3}.kind-note{background:#f1f5f9;color:#475569}
.v-adopt{color:#15803d;font-weight:700}.v-reject{color:#b91c1c;font-weight:700}
.v-inconclusive{color:#b45309;font-weight:700}.v-invalid{color:#6b21a8;font-weight:700}
.pos{color:#15803d}.neg{color:#b91c1c}
footer{color:#475569;font-size:12px;margin-top:18px}
footer dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}
footer dt{font-weight:600}footer dd{margin:0;word-break:break-all}
"""


def _tile(key: str, value: str, sub: str, colour: str = "#cbd5e1") -> str:
    return (
        f'<div class="tile" style="border-top-color:{colour}"><div class="k">{esc(key)}</div>'
        f'<div class="v">{esc(value)}</div><div class="s">{esc(sub)}</div></div>'
    )


def _tiles(r: ReportInput) -> str:
    a = r.analysis
    limit = cost_limit(r.prereg.decision)
    p = a.paired
    ev_colour = {"supported": GOOD, "contradicted": BAD}.get(r.decision.evidence, NEUTRAL)
    cost_colour = NEUTRAL if a.cost.ratio is None else (GOOD if exact.at_most(a.cost.ratio, limit) else BAD)
    return '<section class="tiles">' + "".join(
        [
            _tile("baseline passed", fmt.rate(a.baseline), f"{fmt.pct(a.baseline.rate)} · {fmt.excluded(a.baseline) or 'nothing excluded'}",
                  ARM_COLOURS["baseline"]),
            _tile("skill passed", fmt.rate(a.skill), f"{fmt.pct(a.skill.rate)} · {fmt.excluded(a.skill) or 'nothing excluded'}",
                  ARM_COLOURS["skill"]),
            _tile("gain per task", fmt.pp(p.mean), f"{paired_label(r)} [{fmt.pp(p.interval.low)}, {fmt.pp(p.interval.high)}]", ev_colour),
            _tile("cost vs baseline", fmt.ratio(a.cost.ratio),
                  f"{fmt.cost_delta(a.cost.ratio)} · limit {fmt.ratio(limit)} · CI [{fmt.ratio(a.cost.interval.low)}, "
                  f"{fmt.ratio(a.cost.interval.high)}]", cost_colour),
            _tile("sign-flip p", fmt.p_value(a.sign_flip.p_value),
                  f"{a.tasks_improved} better · {a.tasks_worse} worse · {a.tasks_tied} tied"),
            _tile("detectable effect", fmt.pp(a.mde).lstrip("+"), f"{a.n_paired_tasks} paired tasks, 80% power"),
        ]
    ) + "</section>"  # fmt: skip


MET = frozenset({"SKILL_BETTER", "COST_OK", "GAIN_SIGNIFICANT"})
"""Rule findings in the skill's favour (shown with a check mark; the others with a cross)."""


def _banner_reasons(r: ReportInput) -> str:
    chosen = sorted(deciding_reasons(r.decision), key=lambda x: x.kind == "rule" and x.code in MET)
    items = []
    for x in chosen:
        mark = ("✓" if x.code in MET else "✗") if x.kind == "rule" else "!"
        items.append(f'<li><span class="mark">{mark}</span>{esc(x.message)} <code>{esc(x.code)}</code></li>')
    return "".join(items)


def _banner(r: ReportInput) -> str:
    d = r.decision
    amber = d.point_only_adopt  # only the point rule adopts: never a plain green ADOPT
    colour = VERDICT_COLOURS["inconclusive"] if amber else VERDICT_COLOURS.get(d.verdict, NEUTRAL)
    word = "ADOPT?" if amber else d.verdict.upper()
    title = d.label[:1].upper() + d.label[1:] + ":" if amber else VERDICT_TEXT.get(d.verdict, d.verdict)
    reasons = _banner_reasons(r)
    nxt = next_experiment_text(r)
    after = f'<div class="sub" style="font-size:14px;opacity:1"><b>Next:</b> {esc(nxt)}</div>' if nxt else ""
    return (
        f'<header class="banner" style="background:{colour}">'
        f'<div><div class="word">{esc(word)}</div>'
        f'<div class="sub">{esc(d.rule)} rule, preregistered</div></div>'
        f"<div><h1>{esc(title)} {esc(r.prereg.skill)}</h1>"
        f'<div class="sub" style="font-size:14px;opacity:1">{esc(_summary_sentence(r))}</div>'
        f"<ul>{reasons}</ul>{after}</div></header>"
    )


def _sequential_card(r: ReportInput) -> str:
    """The group-sequential design and the look that decided (nothing for the fixed design)."""
    lines = sequential_lines(r)
    if not lines:
        return ""
    items = "".join(f"<li>{esc(x[:1].upper() + x[1:])}</li>" for x in lines)
    return f'<div class="card"><h2>Group-sequential design</h2><ul>{items}</ul></div>'


def _summary_sentence(r: ReportInput) -> str:
    a = r.analysis
    return (
        f"With the skill {fmt.rate(a.skill)} trials passed, without it {fmt.rate(a.baseline)} "
        f"({a.n_tasks} tasks x {r.prereg.execution.runs_per_arm} runs per arm); "
        f"the skill cost {fmt.ratio(a.cost.ratio)} as much per trial."
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """``rows`` hold already-escaped HTML cells; header labels are escaped here."""
    head = "".join(
        f'<th class="n">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>" for i, h in enumerate(header)
    )
    body = "".join(
        "<tr>"
        + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _point_class(d: DecisionResult) -> str:
    """CSS class of the point rule's verdict: amber (the inconclusive colour) when the interval rule disagrees."""
    return "inconclusive" if d.point_label != (d.point_verdict or "n/a") else (d.point_verdict or "")


def _decision_class(d: DecisionResult) -> str:
    return "inconclusive" if d.point_only_adopt else d.verdict


def _verdicts_card(r: ReportInput) -> str:
    d = r.decision
    rows = [
        [esc("point (the article's)") + (" · <b>preregistered</b>" if d.rule == "point" else ""),
         f'<span class="v-{esc(_point_class(d))}">{esc(d.point_label)}</span>'],
        ["interval" + (" · <b>preregistered</b>" if d.rule == "interval" else ""),
         f'<span class="v-{esc(d.interval_verdict)}">{esc(d.interval_verdict)}</span>'],
        ["evidence from the paired interval", esc(d.evidence)],
        ["<b>decision</b>", f'<span class="v-{esc(_decision_class(d))}">{esc(d.label)}</span>'],
    ]  # fmt: skip
    a = r.analysis
    extra = ""
    if a.paired_table is not None:
        t = a.paired_table
        extra = (
            f'<p class="hint">One run per arm: exact McNemar p = {fmt.p_value(t.mcnemar_p)} ({t.skill_only} vs '
            f"{t.baseline_only} discordant tasks); Newcombe {esc(fmt.pp(t.newcombe.difference))} "
            f"[{esc(fmt.pp(t.newcombe.interval.low))}, {esc(fmt.pp(t.newcombe.interval.high))}].</p>"
        )
    return (
        '<div class="card"><h2>Both rules</h2>'
        + _table(["rule", "verdict"], rows)
        + extra
        + '<p class="hint">The point rule is the article\'s (skill pass rate above baseline and cost within the '
        "limit); the interval rule adopts only when the paired interval excludes zero.</p></div>"
    )


def _reasons_card(r: ReportInput) -> str:
    rows = [
        [f'<span class="kind kind-{esc(x.kind)}">{esc(x.kind)}</span>', f"<code>{esc(x.code)}</code>", esc(x.message)]
        for x in r.decision.reasons
    ]
    return '<div class="card"><h2>Every reason</h2>' + _table(["kind", "code", "reason"], rows) + "</div>"


def _arm_table(r: ReportInput) -> str:
    a = r.analysis
    conf = round(100 * a.confidence)
    rows = []
    for arm in (a.baseline, a.skill):
        c = arm.clustered.interval
        clustered = (
            "n/a" if arm.clustered.mean is None else f"[{fmt.pct(max(0.0, c.low))}, {fmt.pct(min(1.0, c.high))}]"
        )
        rows.append(
            [f"<b>{esc(arm.arm)}</b>", f"<b>{esc(fmt.rate(arm))}</b> ({fmt.pct(arm.rate)})",
             f"[{fmt.pct(arm.wilson.low)}, {fmt.pct(arm.wilson.high)}]", esc(clustered), str(arm.unknown),
             str(arm.truncated), str(arm.infra), esc(fmt.usd(arm.mean_cost_per_trial)), esc(fmt.usd(arm.cost_per_pass)),
             esc("n/a" if arm.turns.median is None else f"{arm.turns.median:g}")]
        )  # fmt: skip
    return _table(
        ["arm", "passed", f"naive {conf}%", f"task-clustered {conf}%", "unknown", "truncated", "infra", "$/trial",
         "$/pass", "turns (median)"], rows, numeric=range(1, 10),
    )  # fmt: skip


def _tasks_card(r: ReportInput) -> str:
    task_flags = flags_by_task(r)
    rows = []
    for t in tasks_by_difference(r.analysis):
        d = t.difference
        cls = "pos" if d is not None and d > 0 else "neg" if d is not None and d < 0 else ""
        rows.append(
            [f"<code>{esc(t.task_id)}</code>",
             esc(fmt.rate_with_excluded(t.baseline, skipped=False)),
             esc(fmt.rate_with_excluded(t.skill, skipped=False)),
             f'<span class="{cls}">{esc(fmt.pp(d))}</span>',
             f"{esc(fmt.usd(t.baseline.mean_cost))} / {esc(fmt.usd(t.skill.mean_cost))}",
             "".join(f'<span class="chip">{esc(f)}</span>' for f in task_flags.get(t.task_id, ())) or "&ndash;"]
        )  # fmt: skip
    for tid in r.skipped_tasks:
        rows.append([f"<code>{esc(tid)}</code>", "skipped", "skipped", "n/a", "n/a", esc(r.skip_reason(tid))])
    return (
        '<div class="card"><h2>Per task, largest gain first</h2>'
        + _table(["task", "baseline passed", "skill passed", "difference", "$/trial (baseline / skill)", "flags"], rows,
                 numeric=(1, 2, 3, 4))
        + "</div>"
    )  # fmt: skip


def _flagged_card(r: ReportInput) -> str:
    if not r.flagged:
        return (
            '<div class="card"><h2>Flagged trials</h2><p class="hint">No trial edited tests, protected paths, '
            ".claude/, CLAUDE.md or CI files, and no patch was rejected.</p></div>"
        )
    rows = [
        [f"<code>{esc(f.trial_id)}</code>", esc(f.arm), esc(f.outcome),
         "".join(f'<span class="chip">{esc(flag)}</span>' for flag in f.flags),
         "<br>".join(f'<span class="mono">{esc(path)}</span>' for path in f.files[:8]) or "&ndash;"]
        for f in r.flagged
    ]  # fmt: skip
    return (
        f'<div class="card"><h2>Flagged trials ({len(r.flagged)})</h2>'
        + _table(["trial", "arm", "outcome", "flags", "files changed"], rows)
        + '<p class="hint">Look at these patches before trusting a pass: edits to tests or protected paths are '
        "restored before verify, but they show what the agent tried.</p></div>"
    )


def _trials_card(r: ReportInput) -> str:
    rows = [
        [f"<code>{esc(t.trial_id)}</code>", esc(t.arm), esc(t.outcome), esc(t.status), esc(t.agent_cost),
         esc(t.total_cost),
         " · ".join(f'<a href="{esc(path)}">{esc(text)}</a>' for text, path in t.links) or "&ndash;"]
        for t in trial_rows(r)
    ]  # fmt: skip
    if not rows:
        return ""
    return (
        f'<div class="card"><h2>Every trial ({len(rows)})</h2>'
        + _table(["trial", "arm", "outcome", "status", "$ agent", "$ with judge", "artifacts"], rows, numeric=(4, 5))
        + '<p class="hint">Links open the trial\'s artifacts in this experiment directory: the patch it made, the '
        "tail of its verify output and the agent's full transcript (stream-json, secrets redacted).</p></div>"
    )


def _footer(r: ReportInput) -> str:
    prov = run_provenance(r)
    first, last = run_dates(r)
    items = [
        ("experiment", f"{r.experiment_id} (lock {r.lock_hash})"),
        ("model", f"{prov['model']} ({prov['resolved_model']}); judge {prov['judge_model']}"),
        (prov["agent"] if prov["agent"] != "n/a" else "agent", prov["cli_version"]),
        ("image", prov["image_digest"]),
        ("base image", r.base_image or "n/a (not recorded)"),
        ("base commit", prov["base_sha"]),
        ("trials ran", f"{first or 'n/a'} to {last or 'n/a'}"),
        (
            "spent",
            f"{fmt.usd(r.spent_usd)} (agents and judges; the cost figures above are the agents' alone, as "
            "the decision compares them)",
        ),
        ("results", r.experiment_dir),
    ]
    items += [("skipped", ", ".join(f"{t} ({r.skip_reason(t)})" for t in r.skipped_tasks))] if r.skipped_tasks else []
    items += [("note", n) for n in r.notes]
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items)
    return f"<footer><dl>{rows}</dl><p>Rendered by skilltrial {esc(__version__)} from results.jsonl.</p></footer>"


def render(r: ReportInput, note: str | None = None) -> str:
    """The whole page as one string (UTF-8 when written). ``note``: shown under the banner (a family's variant:
    its verdict is before Holm's correction)."""
    a = r.analysis
    conf = round(100 * a.confidence)
    title = f"{r.prereg.skill}: {r.decision.verdict.upper()} · skilltrial"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>",
        _banner(r),
        *([f'<div class="card"><p><strong>{esc(note)}</strong></p></div>'] if note else []),
        _tiles(r),
        '<section class="grid">',
        f'<div class="card"><h2>Pass rate per arm</h2>{pass_rate_chart(r)}'
        f'<p class="hint">Dot: pooled pass rate (what the point rule compares). Thick bar: {conf}% interval of the '
        "mean of per-task rates; thin bar: the naive Wilson interval, too narrow when runs repeat.</p></div>",
        f'<div class="card"><h2>Cost per trial</h2>{cost_chart(r)}'
        "<p class=\"hint\">Each dot is one trial (agent cost: the larger of the CLI's figure and the gateway's meter); "
        "the bar marks the arm's task-weighted mean.</p></div>",
        "</section>",
        f'<div class="card"><h2>Per-task paired differences</h2>{difference_chart(r)}</div>',
        '<section class="grid" style="margin-top:16px">',
        f'<div class="card"><h2>Turns per trial</h2>{turns_chart(r)}</div>',
        _verdicts_card(r),
        "</section>",
        *filter(None, [_sequential_card(r)]),
        _reasons_card(r),
        f'<div class="card"><h2>Arms</h2>{_arm_table(r)}<p class="hint">Unknown (no judge verdict), truncated '
        "(deadline or budget) and infra trials are excluded from the denominators and counted here.</p></div>",
        _tasks_card(r),
        _flagged_card(r),
        _trials_card(r),
        _footer(r),
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"
