"""`nsys stats --report nvtx_sum` (or `cuda_gpu_kern_sum`), `--format csv` or the console table:
one launch per report.

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

The console layout (plain `nsys stats --report nvtx_sum report.nsys-rep`, no `--format`) prints for
each report a title line (` ** NVTX Range Summary (nvtx_sum):`), a header row of column names
separated by two or more spaces (` Time (%)  Total Time (ns)  Instances  Avg (ns)  Med (ns)  ...
Range`), a row of dashes that marks each column's width, and one fixed-width row per range, numbers
with thousands separators (`8,912,100.0`); a blank line ends the table. Other reports of the same
output (osrt_sum, cuda_api_sum: no `Instances` column) and nsys' own lines (`Processing [...]`,
`SKIPPED: ...`) are passed over.

Written from Nsight Systems' documented report columns and console layout, not from a real nsys: nsys
does not run here (no NVIDIA driver), so tests read hand-made fixtures,
tests/data/nsys_nvtx_sum_fixture.csv (tests/data/README.md) and tests/data/peer/ (its README.md).
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
TITLE = "nsys stats, CSV or console table (nvtx_sum, cuda_gpu_kern_sum)"
MEDIAN = "Med (ns)"
NAME_COLUMNS = {"Range": "nvtx_sum", "Name": "cuda_gpu_kern_sum"}
MAX_NAME = 120  # metric names regdiag keeps whole; longer kernel names are cut (metric_name)


_TITLE = re.compile(r"^\s*\*\*\s.*\(([^()]+)\):\s*$")  # " ** NVTX Range Summary (nvtx_sum):"
_DASHES = re.compile(r"^\s*-+(?:\s+-+)*\s*$")
_GAP = re.compile(r"\s{2,}")  # between two console column names (one name may hold single spaces)


def sniff(text: str) -> bool:
    lines = text.splitlines()
    if any(_header(ln) for ln in lines[:20]):
        return True
    # console: a report's header row over its row of dashes, wherever in the output it comes
    return any(_console_header(a) and _DASHES.match(b) for a, b in zip(lines, lines[1:], strict=False))


def _header(line: str) -> str | None:
    """The report a CSV header line starts, or None."""
    if MEDIAN not in line or "Instances" not in line:
        return None
    cols = next(csv.reader([line]))
    return next((NAME_COLUMNS[c] for c in cols if c in NAME_COLUMNS), None)


def _console_header(line: str) -> str | None:
    """The report a console table's header row starts, or None."""
    if MEDIAN not in line or "Instances" not in line or "," in line:
        return None
    return next((NAME_COLUMNS[c] for c in _GAP.split(line.strip()) if c in NAME_COLUMNS), None)


Reports = list[tuple[str, dict[str, float]]]


MAX_ROWS = 50_000  # kernels or ranges of one stats export: a real one has hundreds


def parse(text: str, source: str) -> list[dict[str, Any]]:
    rows = text.count("\n")
    if rows > MAX_ROWS:
        raise BadInput(
            f"{source}: {rows} lines; regdiag reads nsys stats exports of at most {MAX_ROWS} rows "
            "(a summary report: nsys stats --report cuda_gpu_kern_sum --format csv)"
        )
    reports = _csv_reports(text, source) or _console_reports(text, source)
    if not reports:
        raise BadInput(
            f"{source}: no nsys stats report (a CSV header or console table with {MEDIAN!r} and 'Instances')"
        )
    kinds = list(dict.fromkeys(r for r, _ in reports))  # one record per kind of report, in file order
    return [_record(kind, [m for r, m in reports if r == kind], source) for kind in kinds]


def _csv_reports(text: str, source: str) -> Reports:
    reports: Reports = []
    cols: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if report := _header(line):
            cols = next(csv.reader([line]))
            reports.append((report, {}))
        elif cols and line.strip() and "," in line:
            row = dict(zip(cols, next(csv.reader([line])), strict=False))
            name = str(row.get("Range") or row.get("Name") or "").removeprefix(":")
            try:
                reports[-1][1][name] = float(row[MEDIAN])
            except (KeyError, ValueError):
                raise BadInput(f"{source}: line {n}: {MEDIAN!r} is not a number") from None
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
        name_col = next(c for c in names if c in NAME_COLUMNS)
        medians: dict[str, float] = {}
        n += 2
        while n < len(lines) and lines[n].strip() and not _TITLE.match(lines[n]):
            row = dict(zip(names, _cells(lines[n], starts), strict=True))
            try:
                medians[row[name_col].removeprefix(":")] = float(row[MEDIAN].replace(",", ""))
            except (KeyError, ValueError):
                raise BadInput(f"{source}: line {n + 1}: {MEDIAN!r} is not a number") from None
            n += 1
        reports.append((report, medians))
    return reports


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


def metric_name(name: str) -> str:
    """A kernel or range name as a metric name: whole up to MAX_NAME characters; a longer one (a C++
    template's full signature) is cut there and ends in a hash of the whole, so two kernels that share
    a long prefix stay two metrics."""
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{name[: MAX_NAME - 10]}~{digest}"
