"""A probe run's summary (regdiag.measure.summary.summarize_run) on the terminal: one row per metric."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from regdiag.report import layout as L
from regdiag.report.registry import Out
from regdiag.stats import RUN_VALUE


def _fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


RUN_NOTE = f"run: the {RUN_VALUE} (compare's old and new); IQR: the middle half of all kept cycles"


def terminal(s: dict[str, Any], out: Out) -> None:
    console = out.console
    cfg = s.get("config", {})
    what = ", ".join(
        f"{k} {cfg[k]}" for k in ("preset", "mode", "tp", "tp_slice", "layers", "batch") if cfg.get(k)
    )
    cols = [L.Col("metric"), L.Col("run", right=True), L.Col("IQR", right=True), L.Col("per-launch medians")]
    rows: list[list[L.Cell]] = []
    for m in s["metrics"]:
        unit = f" {m['unit']}" if m["unit"] else ""
        run = m.get("run", m["median"])
        rows.append(
            [
                m["metric"],
                ("-" if run is None else _fmt(run)) + unit,
                f"{_fmt(m['p25'])}\u2013{_fmt(m['p75'])}{unit}",
                "  ".join(_fmt(x) for x in m["launch_medians"]),
            ]
        )
    title = f"{s['probe']} \u00b7 {what}" if what else str(s["probe"])
    console.print(L.fit(cols, rows, console.width, title=title, gap=2), crop=False)
    console.print(RUN_NOTE, style="dim", highlight=False)
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
        lo, med, hi = c["sm_mhz_min"], c.get("sm_mhz_median", c["sm_mhz_min"]), c["sm_mhz_max"]
        rng = "" if lo == hi else f" ({lo:.0f}–{hi:.0f})"
        mem = f", mem {c['mem_mhz_median']:.0f} MHz" if c.get("mem_mhz_median") else ""
        bits.append(f"SM clock {med:.0f} MHz{rng}{mem} while measuring")
        if c["reasons"]:
            bits.append("[yellow]clock events: " + ", ".join(c["reasons"]) + "[/yellow]")
    for line in L.pack([Text.from_markup(b) for b in bits], console.width, "  "):
        console.print(line, crop=False)
    comm = [c for ph, c in (s.get("comm") or {}).items() if ph != "cycle" and c.get("share") is not None]
    if comm:
        console.print(
            "  communication (measured, phases without their collectives): "
            + ", ".join(f"{c['phase']} {100 * c['share']:.1f} % ({c['comm_ms']:.3g} ms)" for c in comm),
            highlight=False,
        )
    for line in profile_lines(s.get("profile")):
        console.print(line, highlight=False, crop=False)
    for w in s.get("warnings", []):
        console.print(f"  [yellow]warning:[/yellow] {w}")
    for i, why in (s.get("host_flags") or {}).items():  # launches whose host stood out (docs/statistics.md)
        console.print(f"  [yellow]launch {i} flagged:[/yellow] {'; '.join(why)}", highlight=False)
    console.print(
        f"{s['ok_launches']}/{s['launches']} launches ok, status {s['status']}; record: {s['path']}"
        + (f" and {s['copy']}" if s.get("copy") else ""),
        highlight=False,  # wrapped between words: the path is one, whole
    )


def _render_sizes(rows: list[dict[str, Any]], console: Any) -> None:
    """A collectives run one row per message, latency and busbw of each mode together (as nccl-tests)."""
    modes = [m for m in ("eager", "graph") if any(r.get(f"{m}_us") is not None for r in rows)]
    cols = [L.Col("op"), L.Col("bytes", right=True)]
    for m in modes:
        cols += [
            L.Col(f"{m} us", right=True, label=m, unit="us"),
            L.Col(f"{m} busbw GB/s", right=True, label="busbw", unit="GB/s"),
        ]
    cols.append(L.Col("message"))
    cells: list[list[L.Cell]] = []
    for r in rows:
        row: list[L.Cell] = [r["op"], f"{r['bytes']:,}"]
        for m in modes:
            us, bw = r.get(f"{m}_us"), r.get(f"{m}_busbw_GBps")
            row += ["-" if us is None else _fmt(us), "-" if bw is None else _fmt(bw)]
        cells.append([*row, r.get("label") or ""])
    console.print(
        L.fit(cols, cells, console.width, title="per message (median over launches)", gap=2), crop=False
    )


def profile_lines(p: dict[str, Any] | None) -> list[str]:
    """--profile: per phase GPU busy / idle, host time, syncs and the top kernel; the cost; the trace."""
    if not p:
        return []
    if p.get("error"):
        return [f"  profile: none, the profiler failed in {p['launches']} launches ({p['error']})"]
    from regdiag.profiles import CPU_NOTE

    cost = p.get("cost_s_per_launch")
    slower = p.get("cycle_under_profiler_x")
    engine = str(p.get("window") or "").startswith("the cycles after the warm-up")
    where = "after the warm-up" if engine else "after the window"
    out = [
        f"  profile ({p['device']}, {p['cycles']} cycles {where}, {p['launches']} launches): "
        + (f"cost {cost:g} s per launch" if cost is not None else "cost unknown")
        + (f", a cycle x{slower:.3g} under the profiler" if slower else "")
        + "; the measured cycles are not profiled"
    ]
    for ph, f in p["phases"].items():
        top = ", ".join(f"{k['short']} {k['total_ms']:.3g} ms/{k['count']:.4g}" for k in f["top"])
        out.append(
            f"    {ph}: {f['wall_ms']:.4g} ms = busy {f['busy_ms']:.4g} + idle {f['idle_ms']:.4g}; "
            f"host {f['host_ms']:.4g} ms, syncs {f['syncs']:.3g}, kernels {f['kernels']:.4g}; top: {top}"
        )
    if p["device"] == "cpu":
        out.append(f"    ({CPU_NOTE})")
    for t in p.get("traces") or []:
        where = t["path"] if t.get("here", True) else f"{t.get('host')}:{t['path']} (on that host)"
        out.append(f"  trace: {where} ({t.get('bytes', 0) / 1e6:.2f} MB; Perfetto or chrome://tracing)")
    return out
