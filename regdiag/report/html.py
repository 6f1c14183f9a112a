"""A Comparison as one self-contained HTML file: inline CSS and SVG, no script, no network.

Plots: per-metric distributions old vs new (all cycles, with the launch centres that carry the
evidence), the primary's per-launch centres in order, and the SM clock traces of every launch.
"""

from __future__ import annotations

from html import escape
from typing import Any

from regdiag.compare import Comparison
from regdiag.compare.checks import usable_launches
from regdiag.profiles import split_lines
from regdiag.report import svg
from regdiag.report import text as T
from regdiag.report.registry import Out
from regdiag.version import __version__

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
.verdict { display: inline-block; padding: 0.15em 0.5em; border-radius: 3px; font-weight: bold; }
.REGRESSED { background: #c0392b; color: white; } .IMPROVED { background: #27ae60; color: white; }
.UNCHANGED { background: #d5f5e3; color: #145a32; } .INCONCLUSIVE { background: #fcf3cf; color: #7d6608; }
.phantom { background: #fcf3cf; border-left: 4px solid #f1c40f; padding: 0.4em 0.8em; margin: 0.3em 0; }
table { border-collapse: collapse; margin: 0.6em 0; } td, th { padding: 0.2em 0.7em; border-bottom: 1px solid #eee; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } th { text-align: left; }
.dim { color: #777; } .legend span { margin-right: 1.2em; }
"""


def _row(cells: list[str], cls: list[str] | None = None) -> str:
    cls = cls or [""] * len(cells)
    return "<tr>" + "".join(f'<td class="{c}">{v}</td>' for v, c in zip(cells, cls, strict=True)) + "</tr>"


def render(
    c: Comparison, old_run: dict[str, Any], new_run: dict[str, Any], old_name: str = "", new_name: str = ""
) -> str:
    parts = _head(c, old_name, new_name)
    parts += _sizes_table(c) + _metrics_table(c) + _context_table(c)
    parts += _attribution(c)
    if lines := split_lines(c.profile):  # --profile on both sides: GPU work against GPU idle
        parts += [
            "<h2>What the milliseconds are made of (--profile)</h2>",
            f"<pre>{escape(chr(10).join(lines))}</pre>",
        ]
    parts += _plots(c, old_run, new_run)
    parts += _environment(c)
    parts.append(f"<p class='dim'>regdiag {escape(__version__)}; {escape(T.method_txt(c))}.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _head(c: Comparison, old_name: str, new_name: str) -> list[str]:
    e = escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>regdiag compare: {e(c.verdict)}</title><style>{CSS}</style></head><body>",
        f"<h1><span class='verdict {c.verdict}'>{c.verdict}</span> {e(T.headline(c).partition(': ')[2])}</h1>",
    ]
    for p in c.phantom:
        parts.append(f"<div class='phantom'><b>PHANTOM?</b> {e(p)}</div>")
    if c.attribution is not None and (d := T.dominant_line(c.attribution)):
        parts.append(f"<p>{e(d)}</p>")
    parts.append(
        f"<p class='dim'>old: <code>{e(old_name or c.old.label)}</code> ({e(str(c.old.probe))}, "
        f"{e(T.config_txt(c.old.config, 20))}, {c.old.launches_used} launches, {e(str(c.old.created))})<br>"
        f"new: <code>{e(new_name or c.new.label)}</code> ({e(str(c.new.probe))}, "
        f"{e(T.config_txt(c.new.config, 20))}, {c.new.launches_used} launches, {e(str(c.new.created))})</p>"
    )
    return parts


def _metrics_table(c: Comparison) -> list[str]:
    e = escape
    if not T.listed(c):
        return []
    parts = [
        f"<table><tr><th>metric</th><th>old</th><th>new</th><th>change</th><th>{100 * c.level:g} % CI</th>"
        "<th>p (Holm)</th><th>verdict</th><th></th></tr>"
    ]
    for m in T.listed(c):
        est = m.estimate
        unit = f" {m.unit}" if m.unit else ""
        if est is None:
            parts.append(_row([e(m.name), "-", "-", "-", "-", "-", "-", e(m.note)]))
            continue
        d = T.decimals(est.old_center, est.new_center)
        parts.append(
            _row(
                [
                    f"<b>{e(m.name)}</b>" if m.role == "primary" else e(m.name),
                    e(T.fixed(est.old_center, d) + unit),
                    e(T.fixed(est.new_center, d) + unit),
                    e(T.pct(est.ratio)),
                    e(T.ci(est.lo, est.hi)),
                    e(T.pval(m.p_adjusted)),
                    f"<span class='verdict {m.verdict}'>{m.verdict}</span>",
                    e(T.more_txt(m) or m.note),
                ],
                ["", "n", "n", "n", "n", "n", "", "dim"],
            )
        )
    parts.append("</table>")
    return parts


def _verdict(v: str) -> str:
    return f"<span class='verdict {escape(v)}'>{escape(v)}</span>" if v != "-" else "-"


def _sizes_table(c: Comparison) -> list[str]:
    """A collectives sweep, one row per message: latency and busbw, each with its verdict."""
    if not c.sizes:
        return []
    lat = escape(c.sizes[0].latency.unit)
    heads = [
        "size",
        f"old {lat}",
        f"new {lat}",
        "change",
        "verdict",
        "old busbw",
        "new busbw",
        "change",
        "verdict",
    ]
    parts = ["<h2>Per message</h2><table><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr>"]
    for r in c.sizes:
        lo, ln, lc, lv = T.cell_txt(r.latency)
        bo, bn, bc, bv = T.cell_txt(r.busbw)
        cells = [escape(T.size_txt(c, r)), lo, ln, lc, _verdict(lv), bo, bn, bc, _verdict(bv)]
        parts.append(_row(cells, ["", "n", "n", "n", "", "n", "n", "n", ""]))
    parts.append("</table>")
    return parts


def _context_table(c: Comparison) -> list[str]:
    """Settings and conditions of the measurement: how they moved, no verdict."""
    if not c.context:
        return []
    parts = [
        "<h2>Context</h2><p class='dim'>settings and conditions of the measurement, not outcomes: no verdict</p>",
        "<table><tr><th>context</th><th>old</th><th>new</th><th>change</th></tr>",
    ]
    for m in c.context:
        parts.append(_row([escape(m.name), *(escape(x) for x in T.context_txt(m))], ["", "n", "n", "n"]))
    parts.append("</table>")
    return parts


def _attribution(c: Comparison) -> list[str]:
    e = escape
    parts = []
    a = c.attribution
    if a is not None:
        parts.append(
            f"<h2>Attribution: where the change lives, in {e(a.unit)}</h2>"
            "<p class='dim'>changes of the launch means, which add up (the phases to the cycle)</p><table>"
        )
        parts.append("<tr><th>part</th><th>delta</th><th>CI</th><th>share</th></tr>")
        ad = T.attribution_decimals(a)
        for t in [a.total, *a.terms]:
            ci = "-" if t.lo is None else f"[{T.fixed(t.lo, ad, True)}, {T.fixed(t.hi, ad, True)}]"
            share = "" if t is a.total or t.share is None else f"{100 * t.share:.0f} %"
            cells = [e(t.name), T.fixed(t.delta, ad, True), ci, share]
            parts.append(_row(cells, ["", "n", "n", "n"]))
        parts.append("</table>")
    lines = []
    if c.throughput is not None:
        lines.append(T.throughput_line(c.throughput))
        if cc := T.crosscheck_line(c.throughput):
            lines.append(cc)
    for ln in (T.noise_line(c), T.clocks_line(c)):
        if ln:
            lines.append(ln)
    if lines:
        parts.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in lines) + "</ul>")
    return parts


def _plots(c: Comparison, old_run: dict[str, Any], new_run: dict[str, Any]) -> list[str]:
    lo_, _ = usable_launches(old_run, c.old.label)
    ln_, _ = usable_launches(new_run, c.new.label)
    parts = [
        f"<h2>Plots</h2><p class='legend'><span style='color:{svg.OLD_COLOR}'>&#9632; old</span>"
        f"<span style='color:{svg.NEW_COLOR}'>&#9632; new</span></p>"
    ]
    rows = []
    for m in c.metrics:
        key = "values" if m.role == "value" else "samples"
        old = [x for la in lo_ for x in la[key].get(m.name, [])]
        new = [x for la in ln_ for x in la[key].get(m.name, [])]
        rows.append((m.name, old, new, m.old_centers, m.new_centers))
    unit = c.metrics[0].unit if c.metrics else ""
    title = "every cycle (box 25-75 %, whiskers 5-95 %) and launch centres (dots), each axis in its unit"
    parts.append(svg.distributions(rows, unit, title, units=[m.unit for m in c.metrics]))
    head = next((m for m in c.metrics if m.name == c.primary), c.metrics[0] if c.metrics else None)
    if head is not None:
        parts.append(
            "<br>"
            + svg.launch_series(
                head.old_centers, head.new_centers, head.unit, f"{head.name}: one point per launch"
            )
        )
    parts.append(
        "<br>"
        + svg.traces(c.old.clocks.traces, c.new.clocks.traces, "MHz", "SM clock of GPU 0 during each launch")
    )
    return parts


def _environment(c: Comparison) -> list[str]:
    e = escape
    parts = []
    if c.env_diff:
        parts.append(f"<h2>Environment: {e(c.env_note)}, most likely first</h2><table>")
        parts.append("<tr><th>what</th><th>old</th><th>new</th><th>why</th></tr>")
        for item in c.env_diff:
            cells = [f"{item.get('group')}.{item.get('field')}", str(item.get("old")), str(item.get("new"))]
            parts.append(_row([e(x) for x in [*cells, str(item.get("why") or "")]]))
        parts.append("</table>")
    else:
        parts.append(f"<h2>Environment</h2><p>{e(c.env_note)}.</p>")
    if c.warnings or c.notes:
        parts.append(
            "<h2>Warnings</h2><ul>" + "".join(f"<li>{e(w)}</li>" for w in c.warnings + c.notes) + "</ul>"
        )
    return parts


def render_out(c: Comparison, out: Out) -> None:
    """Needs the two raw runs (for the plots) in out.context["runs"]."""
    old_run, new_run = out.context["runs"]
    out.text(render(c, old_run, new_run, *out.labels))
