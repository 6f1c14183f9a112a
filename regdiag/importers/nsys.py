"""`nsys stats --report nvtx_sum` (or `cuda_gpu_kern_sum`, `nvtx_kern_sum`, `nvtx_gpu_proj_sum`),
`--format csv` or the console table: one launch per report.

Each NVTX range (or kernel) is a metric whose one sample per launch is its median instance time
(`Med (ns)`, nanoseconds as nsys wrote them; import_text makes them ms); lower is better. A profile
is one process, so one report is one launch: profile each side several times and concatenate the
reports (`nsys stats ...` of each `.nsys-rep` into one file) for launches compare can test. No primary
(a sweep of independent ranges). PyTorch's `torch.cuda.nvtx` names carry no domain; a leading ':'
(nsys' "domain:range" with the default domain) is dropped. A file of several kinds of report
(`nsys stats --report nvtx_sum --report cuda_gpu_kern_sum`) holds one run per kind, picked as
FILE#nvtx_sum or FILE#cuda_gpu_kern_sum; a report's kind is named by its name column (Range: nvtx_sum,
Name: cuda_gpu_kern_sum), in either layout, so a CSV and a console file of one report compare. A
kernel name longer than MAX_NAME (a C++ template's signature) is cut and ends in a hash of the whole
(metric_name); the record keeps the whole names (`imported.names`).

`nvtx_kern_sum` (NVTX Range Kernel Summary: one row per range, process, thread and kernel, the kernels
a range launched; its columns NVTX Range, Style, PID, TID, NVTX Inst, Kern Inst, Total Time, Avg, Med,
Min, Max, StdDev, Kernel Name) is read as phases: each range is a phase of the launch's `profile`, in
the shape `--profile` records (regdiag/profiles.py), its kernels per range instance (count, total time)
whole-named, so `regdiag compare old.csv new.csv` splits each range's change by kernel, good against
bad, as it does for two `--profile` runs. The sample of a range is its wall per instance (below). A
range's instances are, per thread, the most `NVTX Inst` of its kernels, summed over threads (ranks).
nsys counts a kernel in every range on the stack that launched it, so the probe's `cycle` (SKIP),
which holds the phases, is left out, and so are kernels outside any range. Where the same file holds
one nvtx_gpu_proj_sum per nvtx_kern_sum (NVTX GPU Projection Summary: Range, Style, Total Proj Time,
Total Range Time, Range Instances, Proj Avg, Proj Med, Proj Min, Proj Max, Proj StdDev, Total GPU Ops,
Avg GPU Ops, Avg Range Lvl, Avg Num Child), the k-th one's mean projection (`Proj Avg`: the range on
the GPU, from its first GPU op to its last) is the k-th report's wall, the part its kernels do not
cover GPU idle, and its range time per instance the host's time. Else one nvtx_sum per nvtx_kern_sum
gives the wall as the mean range time (`Avg`), which is host time: kernels still running after their
range ended are not seen as idle. Without either the wall is the kernels' time. Config `sample` says
which (nvtx_gpu_proj_sum, nvtx_sum or kernels), so files of two kinds are not compared unawares. nsys
summaries hold no sync counts (0). nvtx_gpu_proj_sum is also a report of its own, like nvtx_sum: each
range a metric, its median projected time (`Proj Med`) the sample.

The console layout (plain `nsys stats --report nvtx_sum report.nsys-rep`, no `--format`) prints for
each report a title line (` ** NVTX Range Summary (nvtx_sum):`), a header row of column names
separated by two or more spaces (` Time (%)  Total Time (ns)  Instances  Avg (ns)  Med (ns)  ...
Range`), a row of dashes that marks each column's width, and one fixed-width row per range, numbers
with thousands separators (`8,912,100.0`); a blank line ends the table. Other reports of the same
output (osrt_sum, cuda_api_sum: no `Instances` column) and nsys' own lines (`Processing [...]`,
`SKIPPED: ...`) are passed over.

Written from Nsight Systems' documented report columns and console layout (nvtx_kern_sum: its report
script's usage text and query), not from a real nsys: nsys does not run here (no NVIDIA driver), so
tests read hand-made fixtures, tests/data/nsys_nvtx_sum_fixture.csv (tests/data/README.md) and
tests/data/peer/ (its README.md).
"""

from __future__ import annotations

import csv
import hashlib
import re
from typing import Any

from regdiag.direction import LOWER, declare
from regdiag.errors import BadInput
from regdiag.importers import launch, new_import

NAME = "nsys"
TITLE = "nsys stats, CSV or console table (nvtx_sum, cuda_gpu_kern_sum, nvtx_kern_sum, nvtx_gpu_proj_sum)"
MEDIAN = "Med (ns)"
TOTAL = "Total Time (ns)"
NAME_COLUMNS = {"Range": "nvtx_sum", "Name": "cuda_gpu_kern_sum"}
KERN = "nvtx_kern_sum"
PROJ = "nvtx_gpu_proj_sum"
PROJ_COLUMNS = ("Range", "Range Instances", "Total Range Time (ns)", "Proj Avg (ns)", "Proj Med (ns)")
MEDIANS = {PROJ: "Proj Med (ns)"}  # the column of a report's sample, where it is not MEDIAN
KERN_COLUMNS = ("NVTX Range", "NVTX Inst", "Kern Inst", TOTAL, "Kernel Name")  # nvtx_kern_sum's own
MAX_NAME = 120  # metric names regdiag keeps whole; longer kernel names are cut (metric_name)
SKIP = ("cycle",)  # the probe's range around the phases: every kernel of the cycle is in it again
TOP_KERNELS = 24  # kernels kept per range (by total time), as --profile keeps
BUSY = "kernels launched inside the range (nsys nvtx_kern_sum: the sum of their times)"


_TITLE = re.compile(r"^\s*\*\*\s.*\(([^()]+)\):\s*$")  # " ** NVTX Range Summary (nvtx_sum):"
_DASHES = re.compile(r"^\s*-+(?:\s+-+)*\s*$")
_GAP = re.compile(r"\s{2,}")  # between two console column names (one name may hold single spaces)


def sniff(text: str) -> bool:
    lines = text.splitlines()
    if any(_header(ln) for ln in lines[:20]):
        return True
    # console: a report's header row over its row of dashes, wherever in the output it comes
    return any(_console_header(a) and _DASHES.match(b) for a, b in zip(lines, lines[1:], strict=False))


def _kind(cols: list[str]) -> str | None:
    """The report a row of column names heads: nvtx_kern_sum by its own columns, nvtx_sum and
    cuda_gpu_kern_sum by their name column, nvtx_gpu_proj_sum by its projected times; None for any
    other (osrt_sum, cuda_api_sum)."""
    if all(c in cols for c in PROJ_COLUMNS):
        return PROJ
    if MEDIAN not in cols:
        return None
    if all(c in cols for c in KERN_COLUMNS):
        return KERN
    if "Instances" not in cols:
        return None
    return next((NAME_COLUMNS[c] for c in cols if c in NAME_COLUMNS), None)


def _header(line: str) -> str | None:
    """The report a CSV header line starts, or None."""
    if MEDIAN not in line:
        return None
    return _kind(next(csv.reader([line])))


def _console_header(line: str) -> str | None:
    """The report a console table's header row starts, or None."""
    if MEDIAN not in line or "," in line:
        return None
    return _kind(_GAP.split(line.strip()))


Row = tuple[int, dict[str, str]]  # a table row: its line number in the file, its cells by column name
Reports = list[tuple[str, list[Row]]]


MAX_ROWS = 50_000  # kernels or ranges of one stats export: a real one has hundreds


def parse(text: str, source: str) -> list[dict[str, Any]]:
    rows = text.count("\n")
    if rows > MAX_ROWS:
        raise BadInput(
            f"{source}: {rows} lines; regdiag reads nsys stats exports of at most {MAX_ROWS} rows "
            "(a summary report: nsys stats --report cuda_gpu_kern_sum --format csv)"
        )
    reports = _csv_reports(text) or _console_reports(text, source)
    if not reports:
        raise BadInput(
            f"{source}: no nsys stats report (a CSV header or console table with {MEDIAN!r} and "
            "'Instances', or nvtx_kern_sum's 'NVTX Range' ... 'Kernel Name')"
        )
    kinds = list(dict.fromkeys(r for r, _ in reports))  # one record per kind of report, in file order
    tables = {kind: [rows for r, rows in reports if r == kind] for kind in kinds}
    return [
        _kern_record(tables[kind], _walls(tables, source), source)
        if kind == KERN
        else _record(kind, [_values(t, MEDIANS.get(kind, MEDIAN), source) for t in tables[kind]], source)
        for kind in kinds
    ]


Walls = tuple[str, list[dict[str, tuple[float, float]]]]


def _walls(tables: dict[str, list[list[Row]]], source: str) -> Walls:
    """Where the ranges' own times come from, one table per nvtx_kern_sum, per range (wall, host) in ns:
    nvtx_gpu_proj_sum (the range projected onto the GPU, from its first GPU op to its last; the host's
    range time beside it), else nvtx_sum (the range's time, host and wall alike), else none."""
    n = len(tables[KERN])
    if len(proj := tables.get(PROJ, [])) == n:
        return PROJ, [_proj_walls(t, source) for t in proj]
    if len(nvtx := tables.get("nvtx_sum", [])) == n:
        return "nvtx_sum", [{r: (v, v) for r, v in _values(t, "Avg (ns)", source).items()} for t in nvtx]
    return "kernels", []


def _proj_walls(rows: list[Row], source: str) -> dict[str, tuple[float, float]]:
    wall, host = _values(rows, "Proj Avg (ns)", source), _values(rows, "Total Range Time (ns)", source)
    inst = _values(rows, "Range Instances", source)
    return {r: (wall[r], host[r] / inst[r] if inst[r] else 0.0) for r in wall}


def _csv_reports(text: str) -> Reports:
    reports: Reports = []
    cols: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if report := _header(line):
            cols = next(csv.reader([line]))
            reports.append((report, []))
        elif cols and line.strip() and "," in line:
            reports[-1][1].append((n, dict(zip(cols, next(csv.reader([line])), strict=False))))
    return reports


def _console_reports(text: str, source: str) -> Reports:
    """The reports of nsys' console output: each table whose header names a report here."""
    reports: Reports = []
    lines = text.splitlines()
    n = 0
    while n < len(lines) - 1:
        report = _console_header(lines[n])
        if not (report and _DASHES.match(lines[n + 1])):
            n += 1
            continue
        names = _GAP.split(lines[n].strip())
        starts = [m.start() for m in re.finditer(r"-+", lines[n + 1])]
        if len(names) != len(starts):
            raise BadInput(
                f"{source}: line {n + 1}: {len(names)} column names over {len(starts)} columns of dashes"
            )
        rows: list[Row] = []
        n += 2
        while n < len(lines) and lines[n].strip() and not _TITLE.match(lines[n]):
            rows.append((n + 1, dict(zip(names, _cells(lines[n], starts), strict=True))))
            n += 1
        reports.append((report, rows))
    return reports


def _number(row: Row, column: str, source: str) -> float:
    """A cell as a number (the console's thousands separators dropped), or BadInput naming its line."""
    try:
        return float(row[1][column].replace(",", ""))
    except (KeyError, ValueError):
        raise BadInput(f"{source}: line {row[0]}: {column!r} is not a number") from None


def _values(rows: list[Row], column: str, source: str) -> dict[str, float]:
    """One column of a range or kernel table by name (nsys' leading ':' of the default domain dropped)."""
    return {
        str(r[1].get("Range") or r[1].get("Name") or "").removeprefix(":"): _number(r, column, source)
        for r in rows
    }


def _cells(line: str, starts: list[int]) -> list[str]:
    """A fixed-width row cut at the columns' starts (numbers are right-aligned in their column, names
    left-aligned from its start; the last column, a name, runs to the end of the line)."""
    ends: list[int | None] = [*starts[1:], None]
    return [line[a:b].strip() for a, b in zip([0, *starts[1:]], ends, strict=True)]


def _record(kind: str, reports: list[dict[str, float]], source: str) -> dict[str, Any]:
    """One run of one kind of report: each report of that kind a launch, its medians in ns as nsys
    wrote them (import_text makes them ms)."""
    run = new_import(NAME, source, tool=NAME, config={"report": kind}, primary=None, select=kind)
    run["imported"]["report"] = kind
    names: dict[str, str] = {}
    for k, medians in enumerate(reports):
        samples = {}
        for name, ns in medians.items():
            metric = names.setdefault(name, metric_name(name))
            if ns > 0:
                samples[metric] = [ns]
        run["launches"].append(launch(k, samples))
    long = {m: n for n, m in names.items() if m != n}
    if long:
        run["imported"]["names"] = long  # the whole kernel name of each shortened metric
    declare(run, {m: ("ns", LOWER) for m in names.values()})
    return run


def _kern_record(tables: list[list[Row]], walls: Walls, source: str) -> dict[str, Any]:
    """nvtx_kern_sum: each report a launch whose `profile` holds per range (a phase) the kernels it
    launched, as `--profile` records a phase; its one sample per range, the range's wall per instance
    (ns as nsys wrote them). The k-th table of `walls` (_walls) gives each range's own time (its wall),
    the rest of which is GPU idle; without one the wall is the range's kernels' time."""
    wall_from, wall_tables = walls
    # what a sample is: the range's own time where a report gives it, else its kernels' time (two files
    # that differ in it are refused as any two configs that differ)
    config = {"report": KERN, "sample": wall_from}
    run = new_import(NAME, source, tool=NAME, config=config, primary=None, select=KERN)
    run["imported"]["report"] = KERN
    metrics: dict[str, str] = {}
    for k, rows in enumerate(tables):
        phases, seen = _kern_phases(rows, wall_tables[k] if wall_tables else {}, source)
        if not phases:
            raise BadInput(f"{source}: the nvtx_kern_sum report holds no kernel inside a named NVTX range")
        samples = {metrics.setdefault(ph, metric_name(ph)): [f["wall_ms"] * 1e6] for ph, f in phases.items()}
        la = launch(k, {m: v for m, v in samples.items() if v[0] > 0})
        la["profile"] = {
            "cycles": min(seen.values()),
            "device": "cuda",
            "busy": BUSY,
            "note": NOTES[wall_from],
            "phases": phases,
            "occurrences": seen,
        }
        run["launches"].append(la)
    declare(run, {m: ("ns", LOWER) for m in metrics.values()})
    return run


NOTES = {
    PROJ: "nsys: GPU work is the kernels launched inside each NVTX range, idle the rest of the range's time "
    "on the GPU (nvtx_gpu_proj_sum), host its time on the CPU; nsys summaries count no syncs",
    "nvtx_sum": "nsys: GPU work is the kernels launched inside each NVTX range, idle the rest of the range's "
    "own time (nvtx_sum); nsys summaries count no syncs",
    "kernels": "nsys: no nvtx_sum or nvtx_gpu_proj_sum beside nvtx_kern_sum: a range's time is its kernels' "
    "time, none reads as idle",
}


def _kern_phases(
    rows: list[Row], wall_ns: dict[str, tuple[float, float]], source: str
) -> tuple[dict[str, Any], dict[str, int]]:
    """Per range (SKIP left out; kernels outside any range, an empty name, too): its figures per range
    instance. nsys groups rows by process and thread; a range's instances are, per thread, the most
    "NVTX Inst" of any of its kernels, summed over threads (each rank of a TP group one)."""
    inst: dict[str, dict[tuple[str, str], float]] = {}
    kern: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        cells = row[1]
        rng = str(cells.get("NVTX Range") or "").removeprefix(":")
        if not rng or rng in SKIP:
            continue
        count, total, n_inst = (_number(row, c, source) for c in ("Kern Inst", TOTAL, "NVTX Inst"))
        thread = inst.setdefault(rng, {})
        key = (cells.get("PID", ""), cells.get("TID", ""))
        thread[key] = max(thread.get(key, 0.0), n_inst)
        acc = kern.setdefault(rng, {}).setdefault(cells.get("Kernel Name") or "(unnamed)", [0.0, 0.0])
        acc[0] += count
        acc[1] += total
    phases: dict[str, Any] = {}
    seen: dict[str, int] = {}
    for rng, by_kernel in kern.items():
        n = max(1, round(sum(inst[rng].values())))
        busy = sum(t for _, t in by_kernel.values()) / n / 1e6
        wall, host = (x / 1e6 for x in wall_ns[rng]) if rng in wall_ns else (busy, 0.0)
        top = sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
        phases[rng] = {
            "wall_ms": round(wall, 6),
            "busy_ms": round(busy, 6),
            "idle_ms": round(max(0.0, wall - busy), 6),
            "host_ms": round(host, 6),
            "dispatch_ms": round(host, 6),
            "sync_wait_ms": 0.0,
            "syncs": 0.0,
            "kernels": round(sum(c for c, _ in by_kernel.values()) / n, 3),
            "graph_launches": 0.0,
            "top_complete": len(by_kernel) <= TOP_KERNELS,  # every kernel the range launched is listed
            "top": [
                {
                    "name": name,
                    "count": round(c / n, 3),
                    "total_ms": round(t / n / 1e6, 6),
                    "mean_us": round(t / c / 1e3, 3) if c else None,
                    "share": round(t / n / 1e6 / wall, 4) if wall else None,
                }
                for name, (c, t) in top
            ],
        }
        seen[rng] = n
    return phases, seen


def metric_name(name: str) -> str:
    """A kernel or range name as a metric name: whole up to MAX_NAME characters; a longer one (a C++
    template's full signature) is cut there and ends in a hash of the whole, so two kernels that share
    a long prefix stay two metrics."""
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{name[: MAX_NAME - 10]}~{digest}"
