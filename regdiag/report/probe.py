"""A probe run's summary (regdiag.measure.summary.summarize_run) on the terminal: one row per metric."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from regdiag.report.registry import Out


def _fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


def terminal(s: dict[str, Any], out: Out) -> None:
    console = out.console
    cfg = s.get("config", {})
    what = ", ".join(
        f"{k} {cfg[k]}" for k in ("preset", "mode", "tp", "tp_slice", "layers", "batch") if cfg.get(k)
    )
    table = Table(title=f"{s['probe']} · {what}" if what else s["probe"], title_justify="left")
    table.add_column("metric")
    table.add_column("median", justify="right")
    table.add_column("IQR", justify="right")
    table.add_column("per-launch medians", justify="left")
    for m in s["metrics"]:
        unit = f" {m['unit']}" if m["unit"] else ""
        table.add_row(
            m["metric"],
            _fmt(m["median"]) + unit,
            f"{_fmt(m['p25'])}–{_fmt(m['p75'])}",
            "  ".join(_fmt(x) for x in m["launch_medians"]),
        )
    console.print(table)
    if s.get("sizes"):
        _render_sizes(s["sizes"], console)
    sc = s.get("scalars", {})
    bits = []
    if "tok_s" in sc:
        bits.append(
            f"tok/s {sc['tok_s']:.4g}"
            + (" (accept length SIMULATED)" if s.get("accept_len_simulated") else "")
        )
    if "overhead_pct" in sc:
        bits.append(f"probe overhead {sc['overhead_pct']:+.2f} % vs bare cycles")
    if s.get("clocks"):
        c = s["clocks"]
        lo, hi = c["sm_mhz_min"], c["sm_mhz_max"]
        bits.append(
            f"SM clock {lo} MHz while measuring" if lo == hi else f"SM clock {lo}–{hi} MHz while measuring"
        )
        if c["reasons"]:
            bits.append("[yellow]clock events: " + ", ".join(c["reasons"]) + "[/yellow]")
    if bits:
        console.print("  " + " · ".join(bits))
    comm = [c for ph, c in (s.get("comm") or {}).items() if ph != "cycle" and c.get("share") is not None]
    if comm:
        console.print(
            "  communication (measured, phases without their collectives): "
            + ", ".join(f"{c['phase']} {100 * c['share']:.1f} % ({c['comm_ms']:.3g} ms)" for c in comm),
            highlight=False,
        )
    for w in s.get("warnings", []):
        console.print(f"  [yellow]warning:[/yellow] {w}")
    console.print(
        f"{s['ok_launches']}/{s['launches']} launches ok, status {s['status']}; record: {s['path']}",
        soft_wrap=True,
        highlight=False,
    )


def _render_sizes(rows: list[dict[str, Any]], console: Any) -> None:
    """A collectives run one row per message, latency and busbw of each mode together (as nccl-tests)."""
    modes = [m for m in ("eager", "graph") if any(r.get(f"{m}_us") is not None for r in rows)]
    table = Table(title="per message (median over launches)", title_justify="left")
    for col in ("op", "bytes", *[f"{m} {q}" for m in modes for q in ("us", "busbw GB/s")], "message"):
        table.add_column(col, justify="left" if col in ("op", "message") else "right")
    for r in rows:
        cells = [r["op"], f"{r['bytes']:,}"]
        for m in modes:
            us, bw = r.get(f"{m}_us"), r.get(f"{m}_busbw_GBps")
            cells += ["-" if us is None else _fmt(us), "-" if bw is None else _fmt(bw)]
        table.add_row(*cells, r.get("label") or "")
    console.print(table)
