"""A run's summary for display: per metric the median and IQR over the kept cycles of the launches
that count (`run_view.usable`, as compare counts them), the per-launch medians, clocks and scalars.
Not for verdicts (compare decides those).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from regdiag.run_view import usable
from regdiag.stats import run_value


def _quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def _metric(m: str, unit: str, per_launch: list[float], pooled: list[float]) -> dict[str, Any]:
    """One metric of the summary: the run's number, the median and IQR of the pooled cycles."""
    p25, med, p75 = _quartiles(pooled)
    return {
        "metric": m,
        "unit": unit,
        "run": run_value(per_launch),
        "median": med,
        "p25": p25,
        "p75": p75,
        "launch_medians": per_launch,
        "n": len(pooled),
    }


def _clock(clocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The SM and memory clocks of the samples taken while cycles were measured, and why they were held."""
    sm = [c["sm_mhz"] for c in clocks]
    reasons = sorted({r for c in clocks for r in (c.get("reasons") or []) if r not in ("none", "gpu_idle")})
    mem = [c["mem_mhz"] for c in clocks if isinstance(c.get("mem_mhz"), (int, float))]
    return {
        "sm_mhz_min": min(sm),
        "sm_mhz_median": statistics.median(sm),
        "sm_mhz_max": max(sm),
        "mem_mhz_median": statistics.median(mem) if mem else None,
        "reasons": reasons,
        "samples": len(clocks),
    }


def summarize_run(run: dict[str, Any]) -> dict[str, Any]:
    """Per metric (primary first, then phases, then the rest): the run's number (`run`, stats.run_value:
    the geometric mean of the launch medians, what compare shows as old and new), the per-launch
    medians (the unit of evidence), and the median and IQR over the kept cycles of the ok launches.
    For display, not for verdicts."""
    ok = [la for la in run.get("launches", []) if usable(la)]
    order = [run.get("primary"), *run.get("phases", [])]
    names: list[str] = [m for m in order if m]
    for la in ok:
        for m in la.get("samples", {}):
            if m not in names:
                names.append(m)
    metrics = []
    for m in names:
        per_launch = [statistics.median(la["samples"][m]) for la in ok if la.get("samples", {}).get(m)]
        pooled = [x for la in ok for x in la.get("samples", {}).get(m, [])]
        if not pooled:
            continue
        metrics.append(_metric(m, run.get("units", {}).get(m, ""), per_launch, pooled))
    scalars: dict[str, Any] = {}
    for key in ("overhead_pct", "tok_s", "accept_len_mean", "copy_GBps"):
        vals = [la.get("scalars", {}).get(key) for la in ok]
        vals = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if vals:
            scalars[key] = statistics.median(vals)
    # The clock while cycles were measured: a launch builds its model and warms up at idle clocks first
    # (345 MHz on an H200), which made every summary say "SM clock 345-1980 MHz".
    from regdiag.phantom import in_measure_window

    clocks = [
        c
        for la in ok
        for c in in_measure_window(la, list(la.get("clocks") or []))
        if isinstance(c, dict) and isinstance(c.get("sm_mhz"), (int, float))
    ]
    clock = _clock(clocks) if clocks else None
    from regdiag.comm import comm_shares
    from regdiag.profiles import profile_summary

    prof = profile_summary(run, ok)
    return {
        **({"profile": prof} if prof is not None else {}),
        "comm": {c.phase: c.to_dict() for c in comm_shares(run)},
        "id": run.get("id"),
        "status": run.get("status"),
        "probe": run.get("probe", {}).get("name"),
        "config": run.get("probe", {}).get("config", {}),
        "launches": len(run.get("launches", [])),
        "ok_launches": len(ok),
        "metrics": metrics,
        "scalars": scalars,
        "clocks": clock,
        "accept_len_simulated": any(la.get("scalars", {}).get("accept_len_simulated") for la in ok),
        "warnings": run.get("warnings", []),
        "host_flags": {str(la.get("index")): la["host_flags"] for la in ok if la.get("host_flags")},
        "sizes": collective_sizes(ok),
    }


def collective_sizes(ok: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A collectives run as nccl-tests prints it: one row per (op, bytes) with latency and busbw of each
    mode side by side, each the median over launches of the footer table's value. [] for other probes."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for la in ok:
        for r in (la.get("footer") or {}).get("table") or []:
            if not isinstance(r, dict) or not isinstance(r.get("bytes"), int):
                continue
            key = (str(r.get("op", "all_reduce")), r["bytes"])
            row = rows.setdefault(key, {"op": key[0], "bytes": key[1], "label": r.get("label", ""), "_m": {}})
            mode = str(r.get("mode", "eager"))
            row["_m"].setdefault(mode, {"us": [], "busbw_GBps": []})
            for k in ("us", "busbw_GBps"):
                if isinstance(r.get(k), (int, float)):
                    row["_m"][mode][k].append(float(r[k]))
    out = []
    for row in rows.values():
        for mode, vals in row.pop("_m").items():
            for k, xs in vals.items():
                row[f"{mode}_{k}"] = statistics.median(xs) if xs else None
        out.append(row)
    return out
