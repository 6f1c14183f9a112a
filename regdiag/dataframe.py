"""Run records as one tidy pandas DataFrame, for a notebook: `regdiag.frame("old.json", "new.json")` (this module: regdiag.dataframe).

One row per run, launch, metric and sample (each kept cycle of each launch), with the metric's unit
and direction and the run's label, so that `df.groupby(["label", "metric"]).value.median()` or a
seaborn plot is one line. What compare reads is what this reads: a run file, a baseline name, a
stored run id, another tool's result file (pyperf, hyperfine, ...), or a record already loaded.
docs/records.md, "As a DataFrame", lists the columns.

Every record is put in one unit per dimension first (regdiag/units.py: times in ms), so a metric's
`value` column holds one unit across runs, whatever unit each file was written in.

pandas is an extra (`pip install 'regdiag[frame]'`), imported here only, when the function is called:
the command line never loads it, and without it `frame()` raises ImportError in one line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from regdiag.direction import declared, direction
from regdiag.run_view import usable

# A row: the launch a sample is of (LAUNCH_COLUMNS), then the metric and the sample (its index, its value).
LAUNCH_COLUMNS = ["label", "run", "probe", "host", "launch", "status", "usable"]
COLUMNS = [*LAUNCH_COLUMNS, "metric", "role", "unit", "better", "sample", "value"]
CATEGORIES = ("label", "run", "probe", "host", "status", "metric", "role", "unit", "better")


def _resolve(ref: Any) -> tuple[dict[str, Any], str]:
    if isinstance(ref, dict):
        return ref, str(ref.get("id") or "run")
    from regdiag import baselines

    return baselines.resolve(os.fspath(ref))


def rows(record: dict[str, Any], label: str) -> Iterable[tuple[Any, ...]]:
    """The tidy rows of one run record, in COLUMNS' order, in canonical units."""
    from regdiag.units import canonical

    record = canonical(record)
    raw_units = record.get("units")
    units: dict[str, Any] = raw_units if isinstance(raw_units, dict) else {}
    better = declared(record)
    primary = record.get("primary")
    phases = set(record.get("phases") or [])
    probe_name = (record.get("probe") or {}).get("name")
    host_name = (record.get("host") or {}).get("name")
    run_id = str(record.get("id") or label)
    for i, la in enumerate(record.get("launches") or []):
        raw = la.get("samples")
        samples: dict[str, Any] = raw if isinstance(raw, dict) else {}
        launch = (label, run_id, probe_name, host_name, la.get("index", i), la.get("status"), usable(la))
        for metric, values in samples.items():
            unit = str(units.get(metric, "ms"))
            role = "primary" if metric == primary else ("phase" if metric in phases else "other")
            way = direction(metric, unit, better)[0]
            for j, v in enumerate(values or []):
                yield (*launch, metric, role, unit, way, j, v)


def frame(*runs: Any, labels: Sequence[str] | None = None) -> Any:
    """A pandas DataFrame of RUNS (paths, baseline names, run ids, other tools' files or loaded
    records): one row per run, launch, metric and sample. `labels` names the runs (default: as given,
    "baseline NAME" for a baseline). Raises regdiag.records.RecordError for a file that is not a run."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("regdiag.frame needs pandas: pip install 'regdiag[frame]'") from None

    if labels is not None and len(labels) != len(runs):
        raise ValueError(f"{len(labels)} labels for {len(runs)} runs")
    out: list[tuple[Any, ...]] = []
    for k, ref in enumerate(runs):
        record, name = _resolve(ref)
        out.extend(rows(record, labels[k] if labels is not None else name))
    df = pd.DataFrame.from_records(out, columns=COLUMNS)
    for c in CATEGORIES:
        df[c] = df[c].astype("category")
    df["value"] = df["value"].astype(float)
    return df
