"""A Comparison as Markdown, to paste into an issue or a pull request."""

from __future__ import annotations

from regdiag.attribution import fmt_share
from regdiag.compare import Comparison
from regdiag.profiles import split_lines
from regdiag.report import text as T
from regdiag.report.registry import Out


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render(c: Comparison, old_name: str = "", new_name: str = "") -> str:
    out = [f"**{T.headline(c)}**", ""]
    for p in c.phantom:
        out.append(f"> **PHANTOM?** {_cell(p)}")
    if c.phantom:
        out.append("")
    if c.attribution is not None and (d := T.dominant_line(c.attribution)):
        out += [d, ""]
    out += [
        f"- old: `{old_name or c.old.label}` ({c.old.probe}, {_cell(T.config_txt(c.old.config))}, "
        f"{c.old.launches_used} launches, {c.old.created or '?'})",
        f"- new: `{new_name or c.new.label}` ({c.new.probe}, {c.new.launches_used} launches, {c.new.created or '?'})",
        "",
    ]
    out += _sizes(c) + _metrics(c) + _context(c)
    out += _attribution(c)
    if lines := split_lines(c.profile):  # --profile on both sides: GPU work against GPU idle
        out += ["```", *lines, "```", ""]
    if c.throughput is not None:
        out.append("- " + T.throughput_line(c.throughput))
        if cc := T.crosscheck_line(c.throughput):
            out.append("- " + cc)
    for line in (T.noise_line(c), T.clocks_line(c)):
        if line:
            out.append("- " + line)
    out.append("")
    out += _environment(c)
    for w in c.warnings:
        out.append(f"- warning: {_cell(w)}")
    for n in c.notes:
        out.append(f"- note: {_cell(n)}")
    out.append(f"\n<sub>regdiag compare: {T.method_txt(c)}.</sub>")
    return "\n".join(out) + "\n"


def _metrics(c: Comparison) -> list[str]:
    out = [
        f"| metric | old | new | change | {100 * c.level:g} % CI | p (Holm) | verdict |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    listed = T.listed(c)
    if not listed:
        return []
    for m in listed:
        e = m.estimate
        unit = f" {m.unit}" if m.unit else ""
        name = f"**{m.name}**" if m.role == "primary" else m.name
        if e is None:
            out.append(f"| {name} | - | - | - | - | - | {_cell(m.note)} |")
            continue
        out.append(
            f"| {name} | {T.fixed(e.old_center, T.decimals(e.old_center, e.new_center))}{unit} | {T.fixed(e.new_center, T.decimals(e.old_center, e.new_center))}{unit} | {T.pct(e.ratio)} "
            f"| {T.ci(e.lo, e.hi)} | {T.pval(m.p_adjusted)} | {m.verdict} |"
        )
    out.append("")
    return out


def _sizes(c: Comparison) -> list[str]:
    """A collectives sweep, one row per message: latency and busbw, each with its verdict."""
    if not c.sizes:
        return []
    lat = c.sizes[0].latency.unit
    out = [
        f"| size | old {lat} | new {lat} | change | verdict | old busbw | new busbw | change | verdict |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for r in c.sizes:
        cells = [T.size_txt(c, r), *T.cell_txt(r.latency), *T.cell_txt(r.busbw)]
        out.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    return out + [""]


def _context(c: Comparison) -> list[str]:
    """Settings and conditions of the measurement: how they moved, no verdict."""
    if not c.context:
        return []
    out = ["Context (settings and conditions of the measurement, not outcomes: no verdict):", ""]
    out += ["| context | old | new | change |", "| --- | ---: | ---: | ---: |"]
    out += [
        f"| {_cell(m.name)} | " + " | ".join(_cell(x) for x in T.context_txt(m)) + " |" for m in c.context
    ]
    return out + [""]


def _attribution(c: Comparison) -> list[str]:
    a = c.attribution
    if a is None:
        return []
    out = [
        f"Attribution: where the change lives, in {a.unit} (changes of launch means, which add up):",
        "",
        "| part | delta | CI | share |",
        "| --- | ---: | ---: | ---: |",
    ]
    ad = T.attribution_decimals(a)
    for t in [a.total, *a.terms]:
        rng = "-" if t.lo is None else f"[{T.fixed(t.lo, ad, True)}, {T.fixed(t.hi, ad, True)}]"
        share = "" if t is a.total else fmt_share(t.share)
        name = f"**{t.name}**" if t.name == a.dominant else t.name
        out.append(f"| {name} | {T.fixed(t.delta, ad, True)} | {rng} | {share} |")
    out.append("")
    return out


def _environment(c: Comparison) -> list[str]:
    if not c.env_diff:
        return [f"Environment: {c.env_note}.", ""]
    out = [f"Environment: {c.env_note}, most likely first:", ""]
    out += ["| what | old | new | why |", "| --- | --- | --- | --- |"]
    for item in c.env_diff:
        out.append(
            f"| {item.get('group')}.{_cell(str(item.get('field')))} | {_cell(str(item.get('old')))} "
            f"| {_cell(str(item.get('new')))} | {_cell(str(item.get('why') or ''))} |"
        )
    out.append("")
    return out


def render_out(c: Comparison, out: Out) -> None:
    out.text(render(c, *out.labels))
