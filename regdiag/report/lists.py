"""The stored runs (`regdiag runs`) and baselines (`baseline list`) on the terminal and as CSV: one row
each, the id or name first.

On the terminal a table where every cell fits whole, else one block per run (report.layout): the id
(what compare, explain and baseline take) alone on its line, every other column under it.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from regdiag.report import layout as L
from regdiag.report.registry import Out
from regdiag.sizes import approx_bytes

RUN_COLUMNS = ("id", "created", "probe", "config", "status", "launches", "host")
# The profile traces beside each record (probe --profile): a column on the terminal where any run has one.
TRACES_COLUMN = "traces"


def traces_cell(traces: list[dict[str, Any]]) -> str:
    """'1 (2.34 MiB)': how many trace files, and their size; empty for none."""
    if not traces:
        return ""
    return f"{len(traces)} ({approx_bytes(sum(t.get('bytes') or 0 for t in traces))})"


def run_rows(items: list[dict[str, Any]]) -> list[list[str]]:
    """One row of RUN_COLUMNS per listed run (regdiag.runs.list_runs); an unreadable file says why."""
    rows = []
    for r in items:
        traces = traces_cell(r.get("traces") or [])
        if "problem" in r:
            rows.append([Path(r["path"]).stem, "", "", str(r["problem"]), "unreadable", "", "", traces])
            continue
        cfg = r.get("config") or {}
        brief = " ".join(str(cfg[k]) for k in ("preset", "mode", "tp") if cfg.get(k) is not None)
        created = str(r.get("created") or "")[:16].replace("T", " ")
        probe, status, host = (str(r.get(k) or "") for k in ("probe", "status", "host"))
        launches = f"{r['ok_launches']}/{r['launches']}"
        rows.append([str(r["id"]), created, probe, brief, status, launches, host, traces])
    return rows


def runs_terminal(data: dict[str, Any], out: Out) -> None:
    """`data`: {"dir": the runs directory, "runs": list_runs(), "orphan_traces": traces whose record
    is gone}."""
    if not data["runs"]:
        out.console.print(f"no stored runs in {data['dir']}", highlight=False)
    else:
        out.console.print(f"runs in {data['dir']}", highlight=False)
        rows = run_rows(data["runs"])
        if any(r[-1] for r in rows):
            _terminal(out, (*RUN_COLUMNS, TRACES_COLUMN), rows)
        else:
            _terminal(out, RUN_COLUMNS, [r[:-1] for r in rows])
    orphans = data.get("orphan_traces") or []
    if orphans:
        out.console.print(
            f"orphan profile traces: {traces_cell(orphans)} whose run record is gone (`regdiag clean` removes them)",
            highlight=False,
            soft_wrap=True,
        )


def runs_csv(data: dict[str, Any], out: Out) -> None:
    _csv(out, (*RUN_COLUMNS, TRACES_COLUMN), run_rows(data["runs"]))


BASELINE_COLUMNS = ("name", "probe", "config", "launches", "primary", "saved")


def baseline_rows(items: list[dict[str, Any]]) -> list[list[str]]:
    """One row of BASELINE_COLUMNS per stored baseline (regdiag.baselines.list_baselines); the primary
    is the run's one number (stats.run_value), as compare shows it."""
    rows = []
    for b in items:
        cfg = " ".join(f"{k}={v}" for k, v in list(b["config"].items())[:4])
        med = b["primary_median"]
        prim = f"{b['primary']} {med:.4g} {b['unit']}" if med is not None else str(b["primary"])
        saved = str(b["saved"])[:16].replace("T", " ")
        rows.append([str(b["name"]), str(b["probe"]), cfg, str(b["launches"]), prim, saved])
    return rows


def baselines_terminal(data: dict[str, Any], out: Out) -> None:
    """`data`: {"dir": the baselines directory, "baselines": the readable ones}."""
    if not data["baselines"]:
        out.console.print(f"no baselines in {data['dir']} (regdiag baseline save NAME RUN)", highlight=False)
        return
    _terminal(out, BASELINE_COLUMNS, baseline_rows(data["baselines"]))


def baselines_csv(data: dict[str, Any], out: Out) -> None:
    """The primary as its name, number and unit apart, for a spreadsheet."""
    columns = ("name", "probe", "config", "launches", "primary", "primary_value", "unit", "saved")
    rows = [
        [
            b["name"],
            b["probe"],
            " ".join(f"{k}={v}" for k, v in (b.get("config") or {}).items()),
            b["launches"],
            b["primary"],
            b["primary_median"],
            b["unit"],
            b["saved"],
        ]
        for b in data["baselines"]
    ]
    _csv(out, columns, rows)


def _terminal(out: Out, columns: Sequence[str], rows: list[list[str]]) -> None:
    """`rows` under `columns`: a table where every cell fits whole, else one block a row (report.layout)."""
    cells: list[list[L.Cell]] = [list(r) for r in rows]
    out.console.print(L.fit([L.Col(c) for c in columns], cells, out.console.width, gap=2), crop=False)


def _csv(out: Out, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """`rows` under a header of `columns`, as CSV (an empty cell for None)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    out.text(buf.getvalue())
