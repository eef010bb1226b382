"""Pure renderers for the skill-library contributions: a Markdown section and an inline SVG chart.

No I/O, no network: the SVG is self-contained (no fonts, scripts or links), so report.html can
inline it. Every rendering carries the caveat of :data:`harness.analysis.contributions.CAVEAT`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

from harness import fmt
from harness.analysis import exact
from harness.analysis.contributions import CAVEAT, ESTIMATOR, LibraryFit, SkillEstimate, select

METHOD_TEXT = {
    "positive": "every strictly positive coefficient, best first; about half come out positive by chance "
    "when no skill works",
    "holm": "positive coefficients whose Holm-corrected HC3 interval lies above zero, best first",
}


def _verdict(e: SkillEstimate) -> str:
    if exact.above(e.ci_low, 0.0):
        return "interval above 0"
    if exact.below(e.ci_high, 0.0):
        return "interval below 0"
    return "interval spans 0"


def _component_table(name: str, fit: LibraryFit) -> list[str]:
    level = round(100 * (1 - fit.alpha))
    out = [
        f"### {name}",
        "",
        f"{fit.n} (task, sample) pairs over {fit.n_tasks} tasks, {fit.df_resid} residual df, "
        f"condition number of the mask matrix {fmt.num(fit.condition_number, 2)}; "
        f"{fit.n_boot} task-bootstrap resamples (seed {fit.seed}).",
        "",
        f"| skill | coefficient | {level}% interval (task bootstrap) | HC3 SE | p (Holm) | mean R with | "
        "mean B with | pairs with | |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for e in sorted(fit.estimates, key=lambda e: -e.beta):
        out.append(
            f"| `{e.skill}` | {fmt.num(e.beta, 3, sign=True)} | [{fmt.num(e.ci_low, 3, sign=True)}, {fmt.num(e.ci_high, 3, sign=True)}] | {fmt.num(e.se_hc3, 3)} | "
            f"{fmt.p_value(e.p_holm, floor=0.001)} | {fmt.num(e.masked_mean, 3)} | {fmt.num(e.bare_mean, 3)} | {e.n_with} | {_verdict(e)} |"
        )
    out.append("")
    aa = fit.aa
    if aa is not None and aa.n:
        if aa.se is None:
            out.append(
                f"A/A check: {aa.n} all-zero mask(s) on {aa.n_tasks} task(s), mean R - B {fmt.num(aa.mean_delta, 3, sign=True)} "
                "(too few tasks for an interval)."
            )
        else:
            line = (
                f"A/A check: {aa.n} all-zero masks on {aa.n_tasks} tasks, mean R - B {fmt.num(aa.mean_delta, 3, sign=True)} "
                f"[{fmt.num(aa.ci_low, 3, sign=True)}, {fmt.num(aa.ci_high, 3, sign=True)}]"
            )
            if aa.differs_from_zero:
                line += (
                    " — **differs from 0**: the masked harness differs from the bare one beyond the skills "
                    "(e.g. a loader preamble); the coefficients absorb that drift"
                )
            out.append(line + ".")
    elif aa is not None:
        out.append("A/A check: no all-zero masks were drawn, so drift between masked and bare runs is unchecked.")
    if fit.n_boot_singular:
        out.append(
            f"{fit.n_boot_singular} of {fit.n_boot} bootstrap resamples had a rank-deficient mask matrix and were "
            "dropped; with few tasks the interval is less reliable."
        )
    out.append("")
    return out


def markdown_section(fits: Mapping[str, LibraryFit], selected: Sequence[str], method: str) -> str:
    """The report.md section: selection, one coefficient table per component, A/A check, caveat.

    ``fits`` maps component name (first = the primary, e.g. the preregistered pass) to its fit;
    ``selected`` is the selection on the primary component with ``method``.
    """
    lines = ["## Skill library: which skills earn their place", ""]
    lines += [f"> {CAVEAT}", ""]
    lines.append(
        "Estimator: `R_i - B_i = C_i^T beta + e_i`, least squares with **no intercept** over each (task, sample) "
        "pair's mask `C_i` (the all-zero mask is an observation); HC3 standard errors; percentile intervals "
        f"from a bootstrap that resamples whole tasks. Identity: `{ESTIMATOR}`."
    )
    lines.append("")
    if fits:
        primary = next(iter(fits))
        how = METHOD_TEXT.get(method, method)
        chosen = ", ".join(f"`{s}`" for s in selected) if selected else "none (the list is never padded)"
        lines.append(f"**Selected on `{primary}`** ({method}: {how}): {chosen}.")
        if method == "positive":
            fit = fits[primary]
            holm_like = select(fit, top_k=len(fit.estimates), method="holm")
            lines.append(
                f"Stricter selection (Holm, lower bound above 0): "
                f"{', '.join(f'`{s}`' for s in holm_like) if holm_like else 'none'}."
            )
        lines.append("Confirm the selected set on held-out tasks with the single-skill A/B path before adopting it.")
        lines.append("")
    else:
        lines += ["No component could be fitted.", ""]
    for name, fit in fits.items():
        lines += _component_table(name, fit)
    return "\n".join(lines).rstrip() + "\n"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    raw = span / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out = []
    v = start
    while v <= hi + 1e-12:
        out.append(round(v, 10))
        v += step
    return out


def svg_chart(fit: LibraryFit, *, title: str | None = None) -> str:
    """Coefficient per skill with its bootstrap interval, a zero line and the caveat as <desc>; inline SVG."""
    ests = sorted(fit.estimates, key=lambda e: -e.beta)
    label_w, plot_w, right = 170, 420, 30
    row_h, top, bottom = 26, 34, 40
    width = label_w + plot_w + right
    height = top + row_h * len(ests) + bottom
    values = [0.0] + [v for e in ests for v in (e.ci_low, e.ci_high, e.beta) if math.isfinite(v)]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or 0.1
    lo, hi = lo - pad, hi + pad

    def x(v: float) -> float:
        return label_w + (v - lo) / (hi - lo) * plot_w

    level = round(100 * (1 - fit.alpha))
    heading = title or f"Skill coefficients with {level}% task-bootstrap intervals"
    esc = html.escape
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(heading)}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{esc(heading)}</title>",
        f"<desc>{esc(CAVEAT)}</desc>",
        f'<text x="{label_w}" y="18" font-size="13" font-weight="bold">{esc(heading)}</text>',
    ]
    axis_y = top + row_h * len(ests) + 6
    for t in _ticks(lo, hi):
        tx = x(t)
        parts.append(f'<line x1="{tx:.1f}" y1="{top - 6}" x2="{tx:.1f}" y2="{axis_y}" stroke="#eee"/>')
        parts.append(f'<text x="{tx:.1f}" y="{axis_y + 14}" text-anchor="middle" fill="#555">{t:+g}</text>')
    zx = x(0.0)
    parts.append(
        f'<line x1="{zx:.1f}" y1="{top - 6}" x2="{zx:.1f}" y2="{axis_y}" stroke="#333" stroke-dasharray="4 3"/>'
    )
    for i, e in enumerate(ests):
        cy = top + row_h * i + row_h / 2
        color = "#1a7f37" if exact.above(e.ci_low, 0.0) else "#cf222e" if exact.below(e.ci_high, 0.0) else "#6e7781"
        parts.append(
            f'<text x="{label_w - 8}" y="{cy + 4:.1f}" text-anchor="end">{esc(e.skill)}</text>'
            f'<line x1="{x(e.ci_low):.1f}" y1="{cy:.1f}" x2="{x(e.ci_high):.1f}" y2="{cy:.1f}" '
            f'stroke="{color}" stroke-width="2"/>'
            f'<circle cx="{x(e.beta):.1f}" cy="{cy:.1f}" r="4" fill="{color}">'
            f"<title>{esc(e.skill)}: {fmt.num(e.beta, 3, sign=True)} [{fmt.num(e.ci_low, 3, sign=True)}, "
            f"{fmt.num(e.ci_high, 3, sign=True)}]</title></circle>"
        )
    parts.append(
        f'<text x="{label_w}" y="{height - 6}" fill="#555">coefficient on R - B (no intercept); '
        "a provisional ranking, not proof</text>"
    )
    parts.append("</svg>")
    return "".join(parts)
