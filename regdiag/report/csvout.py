"""Results as CSV: one row per metric, numbers unformatted, for a spreadsheet or a CI dashboard."""

from __future__ import annotations

import csv
import io
from typing import Any

from regdiag.compare import Comparison
from regdiag.report.registry import Out

# A metric's estimate, as compare() writes it: old and new centers, their ratio and its CI.
ESTIMATE_COLUMNS = ("old_median", "new_median", "ratio", "ci_lo", "ci_hi")
COMPARE_COLUMNS = ("metric", "role", "unit", *ESTIMATE_COLUMNS, "p_holm", "verdict", "note")
PROBE_COLUMNS = ("metric", "unit", "run", "launch_medians", "cycles_p25", "cycles_p75", "cycles")


def _write(rows: list[list[Any]], out: Out) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerows(["" if v is None else v for v in row] for row in rows)
    out.text(buf.getvalue())


def compare(c: Comparison, out: Out) -> None:
    rows: list[list[Any]] = [list(COMPARE_COLUMNS)]
    for m in [*c.metrics, *c.context]:  # a context metric: role "context", no p and no verdict
        e = m.estimate
        nums = [e.old_center, e.new_center, e.ratio, e.lo, e.hi] if e is not None else [None] * 5
        rows.append([m.name, m.role, m.unit, *nums, m.p_adjusted, m.verdict, m.note])
    _write(rows, out)


def probe(s: dict[str, Any], out: Out) -> None:
    """A probe run's summary: per metric the run's number (stats.run_value, as the terminal shows it),
    the launch medians it comes from, and the spread of all kept cycles."""
    rows: list[list[Any]] = [list(PROBE_COLUMNS)]
    for m in s["metrics"]:
        meds = " ".join(repr(x) for x in m["launch_medians"])
        rows.append([m["metric"], m["unit"], m.get("run"), meds, m["p25"], m["p75"], m.get("n")])
    _write(rows, out)
