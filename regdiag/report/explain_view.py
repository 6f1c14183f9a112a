"""An Explanation on the terminal and in Markdown: the throughput verdict first, then the roofline."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from regdiag.comm import CommShare
from regdiag.explain import Explanation, PhaseRoofline, ThroughputModel
from regdiag.report.registry import Out


def _gb(x: float) -> str:
    if x >= 1e9:
        return f"{x / 1e9:.3g} GB"
    if x >= 1e6:
        return f"{x / 1e6:.3g} MB"
    return f"{x / 1e3:.3g} kB"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g} ms"


def _frac(p: PhaseRoofline) -> str:
    a = p.achieved
    return "-" if a is None else f"{100 * a:.0f} %"


def _graph(p: PhaseRoofline) -> str:
    return {True: "graph", False: "eager", None: "-"}[p.graph]


def _experts(p: PhaseRoofline) -> str:
    return "-" if p.touched_experts is None else f"{p.touched_experts:.1f}"


def _ci(c: CommShare) -> str:
    return "-" if c.ci_ms is None else f"{c.ci_ms[0]:.3g}–{c.ci_ms[1]:.3g}"


def _share(c: CommShare) -> str:
    return "-" if c.share is None else f"{100 * c.share:.1f} %"


def _comm_cells(c: CommShare) -> list[str]:
    """A communication row: phase, with, without, communication, 95 % CI, share, per forward."""
    return [
        c.phase,
        _ms(c.with_ms),
        _ms(c.without_ms),
        _ms(c.comm_ms),
        _ci(c),
        _share(c),
        c.collectives_text(),
    ]


def _bw(e: Explanation) -> str:
    v = f"{e.bandwidth / 1e12:.3g} TB/s" if e.bandwidth >= 1e12 else f"{e.bandwidth / 1e9:.3g} GB/s"
    return f"{v} ({e.bandwidth_source})"


def terminal(e: Explanation, console: Console) -> None:
    if e.throughput is not None:
        _throughput(e.throughput, console)
    if e.phases:
        _roofline(e, console)
    if e.comm:
        table = Table(
            box=None, header_style="bold", title="communication, measured (TP > 1)", title_justify="left"
        )
        for col in ("phase", "with", "without", "comm", "95 % CI", "share", "per forward"):
            table.add_column(col, justify="left" if col in ("phase", "per forward") else "right")
        for c in e.comm:
            table.add_row(*_comm_cells(c))
        console.print(table)
    for n in e.notes:
        console.print(f"note: {n}", style="dim", highlight=False)


def _throughput(t: ThroughputModel, console: Console) -> None:
    """The speedup line first (red when speculation loses), then the model's lines and its sources."""
    lines = t.summary()
    style = "bold red" if (t.speedup is not None and t.speedup < 1) else "bold green" if t.speedup else "bold"
    console.print(lines[-1], style=style, highlight=False)
    for line in lines[:-1]:
        console.print(line, highlight=False)
    src = ", ".join(f"{k}: {v}" for k, v in t.sources.items())
    console.print(f"from {src}", style="dim", highlight=False)


def _roofline(e: Explanation, console: Console) -> None:
    """The per-phase roofline table, its numbered notes and the physics line."""
    from rich.text import Text

    from regdiag.report import layout as L

    heads = ("phase", "tokens", "experts", "bytes", "floor", "measured", "achieved", "mode")
    cols = [L.Col(h, right=h not in ("phase", "mode")) for h in heads]
    rows: list[list[L.Cell]] = []
    # Notes go under the table, numbered: a sentence in a cell wraps into a column of single words.
    notes: list[str] = []
    for p in e.phases:
        mark = ""
        if p.note:
            if p.note not in notes:
                notes.append(p.note)
            mark = f" [{notes.index(p.note) + 1}]"
        cells = [p.phase, str(p.tokens), _experts(p), _gb(p.bytes), _ms(p.floor_ms), _ms(p.measured_ms)]
        style = "yellow" if p.launch_bound else ""
        rows.append([Text(x, style=style) for x in [*cells, _frac(p), _graph(p) + mark]])
    # every cell whole: a table where it fits, one block per phase below its width (report.layout)
    console.print(L.fit(cols, rows, console.width, title=f"roofline at {_bw(e)}", gap=2), crop=False)
    console.print(
        "  experts: distinct routed experts read per MoE layer; bytes: read per rank per forward",
        style="dim",
        highlight=False,
    )
    for i, text in enumerate(notes, 1):
        console.print(f"  [{i}] {text}", highlight=False, markup=False)
    for line in _extra_lines(e):
        console.print(line, highlight=False, markup=False)


def _extra_lines(e: Explanation) -> list[str]:
    """The physics line (or the bytes ratio without measurements) and the collectives per phase."""
    out = []
    if physics := e.physics_line():
        out.append(physics)
    elif e.bytes_ratio_verify_decode is not None:
        out.append(f"a verify reads {e.bytes_ratio_verify_decode:.2f}x the bytes of a decode")
    coll = [p for p in e.phases if p.collectives is not None]
    if coll:
        parts = [
            f"{p.phase} {p.collectives}" + ("" if p.comm_ms is None else f" ({p.comm_ms:.3g} ms)")
            for p in coll
        ]
        out.append("collectives per phase, as the engine issues them: " + ", ".join(parts))
    return out


def markdown(e: Explanation) -> str:
    out = []
    t = e.throughput
    if t is not None:
        lines = t.summary()
        out += [f"**{lines[-1]}**", ""] + [f"- {x}" for x in lines[:-1]]
        out.append("- from " + ", ".join(f"{k}: {v}" for k, v in t.sources.items()))
        out.append("")
    if e.phases:
        out += [
            f"Roofline at {_bw(e)}:",
            "",
            "| phase | tokens | experts/layer | bytes/rank | floor | measured | achieved | mode | note |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
        ]
        for p in e.phases:
            out.append(
                f"| {p.phase} | {p.tokens} | {_experts(p)} | {_gb(p.bytes)} | {_ms(p.floor_ms)} | {_ms(p.measured_ms)} "
                f"| {_frac(p)} | {_graph(p)} | {p.note} |"
            )
        out.append("")
        out += [x for line in _extra_lines(e) for x in (line, "")]
    if e.comm:
        out += [
            "Communication, measured (the same phases with the collectives left out, interleaved):",
            "",
            "| phase | with | without | communication | 95 % CI | share | per forward |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        out += ["| " + " | ".join(_comm_cells(c)) + " |" for c in e.comm]
        out.append("")
    out += [f"- note: {n}" for n in e.notes]
    return "\n".join(out).rstrip() + "\n"


def terminal_out(e: Explanation, out: Out) -> None:
    terminal(e, out.console)


def markdown_out(e: Explanation, out: Out) -> None:
    out.text(markdown(e))
