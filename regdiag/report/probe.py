"""A probe run's summary (regdiag.probe_runner.summarize_run) on the terminal: one row per metric."""

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
        bits.append(f"SM clock {c['sm_mhz_min']}–{c['sm_mhz_max']} MHz")
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
