"""A Comparison on the terminal: the verdict first, then where it lives, then why to doubt it.

One screen for the common case (a cycle and three phases): headline, a table, two lines of
attribution and throughput, PHANTOM warnings, the top environment differences.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from regdiag import stats
from regdiag.compare import Comparison
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
        console.print(_sizes_table(c))
    if T.listed(c):
        console.print(_metrics_table(c))
    if c.context:
        console.print(_context_table(c))
        console.print(
            "context: settings and conditions of the measurement, not outcomes: no verdict", style="dim"
        )
    _details(c, console)


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
    console.print(
        f"old: {old_name or c.old.label} ({c.old.probe} {T.config_txt(c.old.config)}, {c.old.created or '?'})",
        style="dim",
        highlight=False,
    )
    console.print(f"new: {new_name or c.new.label} ({c.new.created or '?'})", style="dim", highlight=False)


def _verdict_text(verdict: str | None) -> Text:
    if verdict is None:
        return Text("context", style="dim")
    return Text(verdict, style=STYLE.get(verdict, "").replace("on red", "").replace("on green", "").strip())


def _metrics_table(c: Comparison) -> Table:
    """One row per metric: old, new, change, CI, p, verdict."""
    # At 80 columns (a CI log) the CI and the verdict stay whole on one line; the rest may wrap.
    table = Table(box=None, pad_edge=False, header_style="bold", collapse_padding=True)
    table.add_column("metric", overflow="fold")
    table.add_column("old", justify="right")
    table.add_column("new", justify="right")
    table.add_column("change", justify="right", no_wrap=True)
    table.add_column(f"{100 * c.level:g} % CI", justify="right", no_wrap=True)
    table.add_column("p (Holm)", justify="right")
    table.add_column("verdict", no_wrap=True, min_width=len("INCONCLUSIVE"))
    for m in T.listed(c):
        e = m.estimate
        unit = f" {m.unit}" if m.unit else ""
        name = m.name if m.role != "primary" else f"[bold]{m.name}[/bold]"
        if e is None:
            table.add_row(name, "-", "-", "-", "-", "-", m.note)
            continue
        table.add_row(
            name,
            T.fixed(e.old_center, T.decimals(e.old_center, e.new_center)) + unit,
            T.fixed(e.new_center, T.decimals(e.old_center, e.new_center)) + unit,
            T.pct(e.ratio),
            T.ci(e.lo, e.hi),
            T.pval(m.p_adjusted),
            _verdict_text(m.verdict),
        )
    return table


def _sizes_table(c: Comparison) -> Table:
    """A collectives sweep as nccl-tests prints it: one row per size, latency and busbw each judged."""
    lat_unit = c.sizes[0].latency.unit
    table = Table(box=None, pad_edge=False, header_style="bold", collapse_padding=True)
    table.add_column("size", no_wrap=True)
    for col in (f"old {lat_unit}", f"new {lat_unit}", "change"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True, min_width=len("INCONCLUSIVE"))
    bw_unit = next((r.busbw.unit for r in c.sizes if r.busbw is not None), "GB/s")
    table.title = f"per message: latency in {lat_unit}, busbw in {bw_unit}, each with its verdict"
    table.title_justify, table.title_style = "left", "bold"
    for col in ("old busbw", "new busbw"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True, min_width=len("INCONCLUSIVE"))
    labels = any(r.label for r in c.sizes)
    if labels:
        table.add_column("message", overflow="fold")
    for r in c.sizes:
        lo, ln, lc, lv = T.cell_txt(r.latency)
        bo, bn, _bc, bv = T.cell_txt(r.busbw)
        cells: list[str | Text] = [
            T.size_txt(c, r),
            lo,
            ln,
            lc,
            _verdict_text(lv),
            bo,
            bn,
            _verdict_text(bv),
        ]
        table.add_row(*cells, *([r.label] if labels else []))
    return table


def _context_table(c: Comparison) -> Table:
    """Settings and conditions of the measurement (running_req, tp_rank, ...): how they moved, no verdict."""
    table = Table(box=None, pad_edge=False, header_style="dim", style="dim", collapse_padding=True)
    table.add_column("context", justify="left")
    for col in ("old", "new", "change"):
        table.add_column(col, justify="right")
    for m in c.context:
        table.add_row(m.name, *T.context_txt(m))
    return table


def _details(c: Comparison, console: Console) -> None:
    """Under the table: attribution, noise, clocks, the environment, warnings, notes and the method."""
    if c.attribution is not None:
        console.print("attribution: " + T.attribution_line(c.attribution), highlight=False)
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
        console.print(f"warning: {w}", style="yellow", highlight=False)
    for n in c.notes:
        console.print(f"note: {n}", style="dim", highlight=False)
    method = "Welch's t on log launch medians" if c.method == stats.WELCH else "hierarchical bootstrap"
    if getattr(c, "design", {}).get("kind") == "interleaved" and c.method == stats.WELCH:
        method = "interleaved run: paired t on the A/B pairs of log launch medians"
    console.print(
        f"{method}; primary at {100 * c.level:g} %, other metrics Holm-adjusted; margin {T.margin_txt(c.margin)}",
        style="dim",
    )


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
