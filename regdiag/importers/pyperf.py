"""pyperf JSON (`pyperf timeit -o`, `Runner` scripts' `-o`, pyperformance): one run record per file.

pyperf runs each benchmark in several worker processes; each process's `values` (per-loop times,
warm-ups apart) are one launch here, so compare tests the processes, as pyperf's own compare_to
does. Every benchmark of the file is a metric; a file of one benchmark makes it the primary, a
suite has none (compare then reports the worst verdict of its benchmarks). Lower is better for
every pyperf unit. Format: pyperf's doc "JSON format" (version 1.0; the only one pyperf >= 2 writes).
"""

from __future__ import annotations

import json
from typing import Any

from regdiag.direction import LOWER, declare
from regdiag.errors import BadInput
from regdiag.importers import launch, new_import
from regdiag.records import UnusableJSON, loads_json

NAME = "pyperf"
TITLE = "pyperf JSON (pyperf timeit -o, a Runner script's -o, pyperformance)"
# Top-level metadata kept in the record: the machine and the interpreter, nothing that can carry a
# secret (pyperf also stores the command line and the environment's executable paths).
KEPT = (
    "hostname",
    "cpu_model_name",
    "cpu_count",
    "cpu_config",
    "cpu_freq",
    "aslr",
    "platform",
    "python_implementation",
    "python_version",
    "perf_version",
    "timer",
)
OTHER_UNITS = {"byte": "B", "integer": "count"}


def sniff(text: str) -> bool:
    head = text.lstrip()
    return head.startswith("{") and '"benchmarks"' in head and '"version"' in head and '"runs"' in head


def parse(text: str, source: str) -> list[dict[str, Any]]:
    try:
        doc = loads_json(text)
    except UnusableJSON as e:  # a key twice, a number no float64 holds, a lone surrogate
        raise BadInput(f"{source}: {e}") from None
    except json.JSONDecodeError as e:
        raise BadInput(
            f"{source}: malformed pyperf JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise BadInput(f'{source}: not pyperf JSON (no "benchmarks" list)')
    if str(doc.get("version")) != "1.0":
        raise BadInput(f"{source}: pyperf JSON version {doc.get('version')!r}; regdiag reads version 1.0")
    common: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
    benches = [_benchmark(b, common, source, i) for i, b in enumerate(doc["benchmarks"])]
    if not benches:
        raise BadInput(f"{source}: the pyperf file holds no benchmark")
    names = [b[0] for b in benches]
    primary = names[0] if len(names) == 1 else None
    run = new_import(
        NAME,
        source,
        tool="pyperf",
        config={},
        primary=primary,
        select=primary or "suite",
        tool_version=common.get("perf_version"),
    )
    run["imported"]["metadata"] = {k: common[k] for k in KEPT if k in common}
    run["host"] = {"name": str(common.get("hostname") or "")}
    metrics = {}
    width = max(len(b[2]) for b in benches)
    for name, unit, _ in benches:
        metrics[name] = (unit, LOWER)
    declare(run, metrics)
    for k in range(width):  # launch k: the k-th worker process of every benchmark
        samples = {name: runs[k]["values"] for name, _, runs in benches if k < len(runs)}
        first = next(runs[k] for _, _, runs in benches if k < len(runs))
        run["launches"].append(
            launch(
                k,
                samples,
                started=first["date"],
                duration_s=first["duration"],
                warmup_dropped=first["warmups"],
            )
        )
    run["created"] = run["launches"][0]["started"] or run["created"]
    return [run]


def _benchmark(b: Any, common: dict[str, Any], source: str, i: int) -> tuple[str, str, list[dict[str, Any]]]:
    """(name, unit, processes) of one benchmark: its runs with values, scaled to the unit shown."""
    if not isinstance(b, dict) or not isinstance(b.get("runs"), list):
        raise BadInput(f'{source}: benchmark {i} has no "runs" list')
    own: dict[str, Any] = b["metadata"] if isinstance(b.get("metadata"), dict) else {}
    meta = {**common, **own}
    name = str(meta.get("name") or f"benchmark_{i}")
    raw_unit = str(meta.get("unit") or "second")
    runs: list[dict[str, Any]] = []
    for j, r in enumerate(b["runs"]):
        if not isinstance(r, dict):
            raise BadInput(f"{source}: benchmark {name!r} run {j} is not an object")
        values = r.get("values") or []  # a calibration run has warm-ups only
        if not values:
            continue
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values):
            raise BadInput(
                f"{source}: benchmark {name!r} run {j} holds a value that is not a positive number"
            )
        rm: dict[str, Any] = r["metadata"] if isinstance(r.get("metadata"), dict) else {}
        runs.append(
            {
                "values": [float(v) for v in values],
                "warmups": len(r.get("warmups") or []),
                "date": _iso(rm.get("date")),
                "duration": rm.get("duration") if isinstance(rm.get("duration"), (int, float)) else None,
            }
        )
    if not runs:
        raise BadInput(f"{source}: benchmark {name!r} has no run with values")
    # seconds as pyperf wrote them; import_text puts every time in ms (regdiag/units.py)
    return name, "s" if raw_unit == "second" else OTHER_UNITS.get(raw_unit, raw_unit), runs


def _iso(date: Any) -> str | None:
    """pyperf's '2026-12-01 08:40:53.356789' (local time, no zone) as ISO 8601 ('T' between)."""
    return str(date).replace(" ", "T", 1) if isinstance(date, str) and date else None


# --- the other way: a run record as pyperf JSON (`regdiag export RUN --to pyperf`) ---------------

SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def to_pyperf(run: dict[str, Any]) -> dict[str, Any]:
    """A run as pyperf JSON 1.0: every time metric a benchmark, every usable launch one of its runs
    (a worker process, as pyperf counts them), its samples the values in seconds. Other metrics (rates,
    counts) are left out: pyperf's units are seconds, bytes and integers, and lower is better for all."""
    from regdiag.run_view import usable

    units = run.get("units") or {}
    launches = [la for la in run.get("launches") or [] if usable(la)]
    names = sorted({m for la in launches for m in la.get("samples") or {} if units.get(m, "ms") in SECONDS})
    if not names:
        raise BadInput(f"run {run.get('id')}: no time metric with samples to write as pyperf benchmarks")
    benchmarks = []
    for name in names:
        scale = SECONDS[units.get(name, "ms")]
        runs = [
            {"metadata": _run_metadata(la), "values": [x * scale for x in la["samples"][name]]}
            for la in launches
            if la["samples"].get(name)
        ]
        benchmarks.append({"metadata": {"name": name, "unit": "second"}, "runs": runs})
    host = (run.get("host") or {}).get("name")
    meta = {"regdiag_run": str(run.get("id")), **({"hostname": str(host)} if host else {})}
    return {"version": "1.0", "metadata": meta, "benchmarks": benchmarks}


def _run_metadata(la: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if isinstance(la.get("started"), str):
        meta["date"] = la["started"]
    if isinstance(la.get("duration_s"), (int, float)):
        meta["duration"] = float(la["duration_s"])
    return meta
