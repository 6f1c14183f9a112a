"""The stored runs (`regdiag runs`) on the terminal and as CSV: one row per run, the id first.

On the terminal a table where every cell fits whole, else one block per run (report.layout): the id
(what compare, explain and baseline take) alone on its line, every other column under it.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from regdiag.report import layout as L
from regdiag.report.registry import Out

RUN_COLUMNS = ("id", "created", "probe", "config", "status", "launches", "host")


def run_rows(items: list[dict[str, Any]]) -> list[list[str]]:
    """One row of RUN_COLUMNS per listed run (regdiag.runs.list_runs); an unreadable file says why."""
    rows = []
    for r in items:
        if "problem" in r:
            rows.append([Path(r["path"]).stem, "", "", str(r["problem"]), "unreadable", "", ""])
            continue
        cfg = r.get("config") or {}
        brief = " ".join(str(cfg[k]) for k in ("preset", "mode", "tp") if cfg.get(k) is not None)
        rows.append([
            str(r["id"]), str(r.get("created") or "")[:16].replace("T", " "), str(r.get("probe") or ""), brief,
            str(r.get("status") or ""), f"{r['ok_launches']}/{r['launches']}", str(r.get("host") or ""),
        ])  # fmt: skip
    return rows


def runs_terminal(data: dict[str, Any], out: Out) -> None:
    """`data`: {"dir": the runs directory, "runs": list_runs()}."""
    console = out.console
    if not data["runs"]:
        console.print(f"no stored runs in {data['dir']}", highlight=False)
        return
    console.print(f"runs in {data['dir']}", highlight=False)
    cols = [L.Col(c) for c in RUN_COLUMNS]
    rows: list[list[L.Cell]] = [list(r) for r in run_rows(data["runs"])]
    console.print(L.fit(cols, rows, console.width, gap=2), crop=False)


def runs_csv(data: dict[str, Any], out: Out) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(RUN_COLUMNS)
    w.writerows(run_rows(data["runs"]))
    out.text(buf.getvalue())
