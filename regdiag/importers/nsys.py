"""`nsys stats --report nvtx_sum` (or `cuda_gpu_kern_sum`) `--format csv`: one launch per report.

Each NVTX range (or kernel) is a metric whose one sample per launch is its median instance time
(`Med (ns)`), in the unit that keeps its digits readable; lower is better. A profile is one process,
so one report is one launch: profile each side several times and concatenate the reports (`nsys
stats ... --format csv` of each `.nsys-rep` into one file) for launches compare can test. No primary
(a sweep of independent ranges). PyTorch's `torch.cuda.nvtx` names carry no domain; a leading ':'
(nsys' "domain:range" with the default domain) is dropped.

Written from Nsight Systems' documented report columns: nsys does not run here (no NVIDIA driver),
so tests read a hand-made fixture, tests/data/nsys_nvtx_sum_fixture.csv (tests/data/README.md).
"""

from __future__ import annotations

import csv
from typing import Any

from regdiag.direction import LOWER, declare
from regdiag.errors import BadInput
from regdiag.importers import launch, new_import

NAME = "nsys"
TITLE = "nsys stats --format csv (nvtx_sum, cuda_gpu_kern_sum)"
MEDIAN = "Med (ns)"
NAME_COLUMNS = {"Range": "nvtx_sum", "Name": "cuda_gpu_kern_sum"}
TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0))


def sniff(text: str) -> bool:
    return any(_header(ln) for ln in text.splitlines()[:20])


def _header(line: str) -> str | None:
    """The report a CSV header line starts, or None."""
    if MEDIAN not in line or "Instances" not in line:
        return None
    cols = next(csv.reader([line]))
    return next((NAME_COLUMNS[c] for c in cols if c in NAME_COLUMNS), None)


def parse(text: str, source: str) -> list[dict[str, Any]]:
    reports: list[tuple[str, dict[str, float]]] = []
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
    if not reports:
        raise BadInput(f"{source}: no nsys stats CSV header (a line with {MEDIAN!r} and 'Instances')")
    kinds = {r for r, _ in reports}
    if len(kinds) > 1:
        raise BadInput(f"{source}: mixes reports {sorted(kinds)}; one kind of report per file")
    run = new_import(NAME, source, tool=NAME, config={"report": reports[0][0]}, primary=None, select="report")
    run["imported"]["report"] = reports[0][0]
    units: dict[str, tuple[str, float]] = {}
    for k, (_r, medians) in enumerate(reports):
        for name, ns in medians.items():
            units.setdefault(name, next((u, s) for u, s in TIME_UNITS if ns >= s or s == 1.0))
        samples = {name: [ns / units[name][1]] for name, ns in medians.items() if ns > 0}
        run["launches"].append(launch(k, samples))
    declare(run, {name: (u, LOWER) for name, (u, _s) in units.items()})
    return [run]
