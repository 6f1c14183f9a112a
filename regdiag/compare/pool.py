"""Several files as one side: `compare --old A --old B --new C --new D`.

Each file is a set of launches of one measurement (three `vllm bench serve` files of one server, a
nccl-tests file per job): pooled, they are the launches of one run, the unit of evidence compare
tests (docs/statistics.md). Files that do not measure the same thing are refused (exit 2), as
compare refuses two such runs.
"""

from __future__ import annotations

import copy
from typing import Any

from regdiag import units
from regdiag.compare.checks import MEASUREMENT_KEYS
from regdiag.errors import BadInput


def pooled(runs: list[tuple[dict[str, Any], str]], side: str) -> tuple[dict[str, Any], str]:
    """(run, label) of one side made of several (run, label): the first run's header, every run's
    launches in the order given (re-indexed, each keeping the file it came from in `source`)."""
    if len(runs) == 1:
        return runs[0]
    first, first_label = runs[0]
    out = copy.deepcopy(units.canonical(first))
    out["launches"] = []
    for run, label in runs:
        _same_measurement(first, first_label, run, label, side)
        same = units.canonical(run)
        for la in same.get("launches") or []:
            la = copy.deepcopy(la)
            la["source"] = label
            la["index"] = len(out["launches"])
            out["launches"].append(la)
        out["units"] = {**(same.get("units") or {}), **(out.get("units") or {})}
    out["pooled_from"] = [label for _r, label in runs]
    statuses = {str(r.get("status")) for r, _l in runs}
    out["status"] = "complete" if statuses == {"complete"} else "partial"
    return out, f"{first_label} (+{len(runs) - 1} more)"


def _same_measurement(a: dict[str, Any], la: str, b: dict[str, Any], lb: str, side: str) -> None:
    pa, pb = a.get("probe") or {}, b.get("probe") or {}
    if pa.get("name") != pb.get("name"):
        raise BadInput(
            f"{side}: {la} is {pa.get('name')!r} and {lb} is {pb.get('name')!r}: one side pools one measurement"
        )
    if a.get("primary") != b.get("primary"):
        raise BadInput(
            f"{side}: {la} and {lb} have different primary metrics ({a.get('primary')!r}, {b.get('primary')!r})"
        )
    ca, cb = pa.get("config") or {}, pb.get("config") or {}
    differ = sorted(k for k in set(ca) | set(cb) if k not in MEASUREMENT_KEYS and ca.get(k) != cb.get(k))
    if differ:
        k = differ[0]
        raise BadInput(
            f"{side}: {la} and {lb} differ in {k}: {ca.get(k)!r} vs {cb.get(k)!r}; the files of one side "
            "must be repeats of one setup"
        )
