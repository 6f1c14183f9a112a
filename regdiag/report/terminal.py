"""A Comparison on the terminal: the verdict first, then where it lives, then why to doubt it.

One screen for the common case (a cycle and three phases): headline, a table, two lines of
attribution and throughput, PHANTOM warnings, the top environment differences.
"""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.text import Text

from regdiag import stats
from regdiag.compare import Comparison
from regdiag.profiles import split_lines
from regdiag.report import layout as L
from regdiag.report import text as T
from regdiag.report.registry import Out

STYLE = {
    stats.REGRESSED: "bold white on red",
    stats.IMPROVED: "bold white on green",
    stats.UNCHANGED: "bold green",
    stats.INCONCLUSIVE: "bold yellow",
}
ENV_LIMIT = 8


def render(c: Comparison, console: Console, old_name: str = "", new_name: str = "") -> None:
    _headline(c, console, old_name, new_name)
    if c.sizes:
        console.print(_sizes_table(c, console.width), crop=False)
    if T.listed(c):
        console.print(_metrics_table(c, console.width), crop=False)
    if c.context:
        console.print(_context_table(c, console.width), style="dim", crop=False)
        console.print(
            "context: settings and conditions of the measurement, not outcomes: no verdict", style="dim"
        )
    _details(c, console)
    if c.fleet is not None:  # records from several nodes: the node as a block
        from regdiag.report.fleet import show_fleet

        show_fleet(c.fleet, console)


def _headline(c: Comparison, console: Console, old_name: str, new_name: str) -> None:
    """The verdict, the PHANTOM doubts, the machines, the dominant phase, tok/s and which runs."""
    head = T.headline(c)
    verdict, _, rest = head.partition(": ")
    line = Text()
    line.append(f" {verdict} ", style=STYLE[c.verdict])
    line.append(" " + rest)
    console.print(line)
    if c.phantom:
        console.print(Text(" PHANTOM? ", style="bold black on yellow") + Text(" " + c.phantom[0]))
        for p in c.phantom[1:]:
            console.print(f"           {p}", style="yellow")
    if c.machine_diff is not None:
        _machines(c, console)
    if c.attribution is not None and (d := T.dominant_line(c.attribution)):
        console.print(d)
    if c.throughput is not None:
        console.print(T.throughput_line(c.throughput), highlight=False)
    what = " ".join(x for x in (str(c.old.probe or ""), T.config_txt(c.old.config)) if x)
    console.print(
        f"old: {old_name or c.old.label} ({what}, {c.old.created or '?'})", style="dim", highlight=False
    )
    console.print(f"new: {new_name or c.new.label} ({c.new.created or '?'})", style="dim", highlight=False)


def _verdict_text(verdict: str | None) -> Text:
    if verdict is None:
        return Text("context", style="dim")
    return Text(verdict, style=STYLE.get(verdict, "").replace("on red", "").replace("on green", "").strip())


def _metrics_table(c: Comparison, width: int) -> RenderableType:
    """One row per metric: old, new, change, CI, p, verdict; one block per metric below the table's width."""
    cols = [
        L.Col("metric"),
        L.Col("old", right=True),
        L.Col("new", right=True),
        L.Col("change", right=True),
        L.Col(f"{100 * c.level:g} % CI", right=True),
        L.Col("p (Holm)", right=True),
        L.Col("verdict", bare=True),
    ]
    rows: list[list[L.Cell]] = []
    for m in T.listed(c):
        e = m.estimate
        unit = f" {m.unit}" if m.unit else ""
        name = Text(m.name, style="bold" if m.role == "primary" else "")
        if e is None:
            rows.append([name, "-", "-", "-", "-", "-", m.note])
            continue
        d = T.decimals(e.old_center, e.new_center)
        rows.append(
            [
                name,
                T.fixed(e.old_center, d) + unit,
                T.fixed(e.new_center, d) + unit,
                T.pct(e.ratio),
                T.ci(e.lo, e.hi),
                T.pval(m.p_adjusted),
                _verdict_text(m.verdict),
            ]
        )
    return L.fit(cols, rows, width)


def _sizes_table(c: Comparison, width: int) -> RenderableType:
    """A collectives sweep as nccl-tests prints it: one row per size, latency and busbw each judged."""
    lat_unit = c.sizes[0].latency.unit
    bw_unit = next((r.busbw.unit for r in c.sizes if r.busbw is not None), "GB/s")
    cols = [L.Col("size")]
    cols += [L.Col(f"{h} {lat_unit}", right=True, label=h, unit=lat_unit) for h in ("old", "new")]
    cols += [L.Col("change", right=True), L.Col("verdict", bare=True)]
    cols += [
        L.Col("old busbw", right=True, unit=bw_unit, label="busbw old"),
        L.Col("new busbw", right=True, unit=bw_unit, label="new"),
        L.Col("verdict", label="busbw"),
    ]
    labels = any(r.label for r in c.sizes)
    if labels:
        cols.append(L.Col("message"))
    rows: list[list[L.Cell]] = []
    for r in c.sizes:
        lo, ln, lc, lv = T.cell_txt(r.latency)
        bo, bn, _bc, bv = T.cell_txt(r.busbw)
        cells: list[L.Cell] = [T.size_txt(c, r), lo, ln, lc, _verdict_text(lv), bo, bn, _verdict_text(bv)]
        rows.append([*cells, *([r.label] if labels else [])])
    title = f"per message: latency in {lat_unit}, busbw in {bw_unit}, each with its verdict"
    return L.fit(cols, rows, width, title=title)


def _context_table(c: Comparison, width: int) -> RenderableType:
    """Settings and conditions of the measurement (running_req, tp_rank, ...): how they moved, no verdict."""
    cols = [L.Col("context"), *(L.Col(h, right=True) for h in ("old", "new", "change"))]
    rows: list[list[L.Cell]] = [[m.name, *T.context_txt(m)] for m in c.context]
    return L.fit(cols, rows, width, header_style="dim", head_style="dim")


def _details(c: Comparison, console: Console) -> None:
    """Under the table: attribution, noise, clocks, the environment, warnings, notes and the method."""
    if c.attribution is not None:
        console.print("attribution: " + T.attribution_line(c.attribution), highlight=False)
    for line in split_lines(c.profile):  # --profile on both sides: GPU work against GPU idle
        console.print(line, highlight=False, crop=False)
    if c.throughput is not None and (cc := T.crosscheck_line(c.throughput)):
        console.print(cc, style="dim")
    if nl := T.noise_line(c):
        console.print(nl, style="dim", highlight=False)
    if cl := T.clocks_line(c):
        console.print(cl, style="dim", highlight=False)
    if c.env_diff:
        console.print(f"[bold]environment[/bold]: {c.env_note}, most likely first:")
        for item in c.env_diff[:ENV_LIMIT]:
            console.print("  " + T.env_item(item), highlight=False)
        if len(c.env_diff) > ENV_LIMIT:
            console.print(f"  ... {len(c.env_diff) - ENV_LIMIT} more (--json or --html for all)", style="dim")
    else:
        console.print(f"environment: {c.env_note}", style="dim")
    for w in c.warnings:
        console.print(f"warning: {w}", style="yellow", highlight=False, markup=False)  # [test, line N]
    for n in c.notes:
        console.print(f"note: {n}", style="dim", highlight=False, markup=False)
    console.print(T.method_txt(c), style="dim")


def _machines(c: Comparison, console: Console) -> None:
    """Runs from two hosts: how the machines differ comes first (clocks, power cap, PCIe, driver, NCCL)."""
    d = c.machine_diff or []
    what = (
        f"{len(d)} machine difference{'s' if len(d) != 1 else ''}:"
        if d
        else "no GPU, driver, NCCL or host setting differs"
    )
    console.print(f"two hosts: {c.old.host} (old) vs {c.new.host} (new), {what}", highlight=False)
    for item in d[:ENV_LIMIT]:
        console.print("  " + T.env_item(item), highlight=False)
    if len(d) > ENV_LIMIT:
        console.print(f"  ... {len(d) - ENV_LIMIT} more (--json for all)", style="dim")


def render_out(c: Comparison, out: Out) -> None:
    render(c, out.console, *out.labels)
