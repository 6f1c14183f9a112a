"""One unit per dimension inside a comparison: times in ms, sizes in bytes, bandwidths in GB/s.

A record says each metric's unit (`units`); records and other tools' files do not agree on which one
(pyperf and hyperfine count seconds, nsys nanoseconds, regdiag's probes milliseconds, and importers
written before 2026-12-01 picked a display unit from each file's own median). Two sides are only
comparable once both are in the same unit, so `canonical` converts a record's samples to the
canonical unit of each metric's dimension, and `check_dimensions` refuses a pair whose metric is a
time on one side and, say, a count on the other. Rates other than bandwidths (tok/s, req/s), counts
and fractions have no conversions: they stay as declared and must match by name.

`display_unit` picks, at render time, the unit a comparison is shown in (one per dimension for the
whole comparison, so a cycle and its phases still add up).

Pure: no I/O, nothing else of regdiag but errors.
"""

from __future__ import annotations

import copy
from typing import Any

from regdiag.errors import BadInput

TIME, SIZE, BANDWIDTH = "time", "size", "bandwidth"
CANONICAL = {TIME: "ms", SIZE: "B", BANDWIDTH: "GB/s"}
# unit -> (dimension, factor to the canonical unit)
FACTORS: dict[str, tuple[str, float]] = {
    "ns": (TIME, 1e-6),
    "us": (TIME, 1e-3),
    "\u00b5s": (TIME, 1e-3),
    "usec": (TIME, 1e-3),
    "ms": (TIME, 1.0),
    "msec": (TIME, 1.0),
    "s": (TIME, 1e3),
    "sec": (TIME, 1e3),
    "second": (TIME, 1e3),
    "seconds": (TIME, 1e3),
    "B": (SIZE, 1.0),
    "byte": (SIZE, 1.0),
    "bytes": (SIZE, 1.0),
    "KB": (SIZE, 1e3),
    "MB": (SIZE, 1e6),
    "GB": (SIZE, 1e9),
    "KiB": (SIZE, 1024.0),
    "MiB": (SIZE, 1024.0**2),
    "GiB": (SIZE, 1024.0**3),
    "B/s": (BANDWIDTH, 1e-9),
    "KB/s": (BANDWIDTH, 1e-6),
    "MB/s": (BANDWIDTH, 1e-3),
    "GB/s": (BANDWIDTH, 1.0),
    "GiB/s": (BANDWIDTH, 1024.0**3 / 1e9),
}
# Display units of time, largest first: a value is shown in the largest unit it is at least one of.
TIME_DISPLAY = (("s", 1e3), ("ms", 1.0), ("us", 1e-3), ("ns", 1e-6))
SAMPLE_KEYS_SUFFIX = "samples"  # samples, naive_samples, bare_samples, nocomm_samples


def dimension(unit: str | None) -> str | None:
    """The dimension of a unit regdiag converts (time, size, bandwidth), or None (tok/s, count, ...)."""
    hit = FACTORS.get(str(unit or ""))
    return hit[0] if hit else None


def canonical_unit(unit: str | None) -> str | None:
    """The unit a value of this unit is stored in once canonical; the unit itself when not convertible."""
    d = dimension(unit)
    return CANONICAL[d] if d else (None if unit is None else str(unit))


def to_canonical(value: float, unit: str) -> float:
    d = FACTORS.get(unit)
    return value * d[1] if d else value


def canonical(run: dict[str, Any]) -> dict[str, Any]:
    """A copy of a run record with every convertible metric in its dimension's canonical unit: its
    launches' samples (every `*samples` map), per-cycle values and scalars, and `units` to match.
    A record already canonical is returned as it is (no copy)."""
    units = run.get("units")
    if not isinstance(units, dict):
        return run
    factors = {
        str(k): FACTORS[u][1]
        for k, u in units.items()
        if isinstance(u, str) and u in FACTORS and u != CANONICAL[FACTORS[u][0]]
    }
    if not factors:
        return run
    new_units = {k: (canonical_unit(u) if isinstance(u, str) else u) for k, u in units.items()}
    return _rescaled(run, factors, new_units)


def _rescaled(run: dict[str, Any], factors: dict[str, float], units: dict[str, Any]) -> dict[str, Any]:
    """A copy of `run` with each metric of `factors` multiplied by its factor wherever a launch holds
    it (every `*samples` map, `values`, `scalars`), and `units` as given."""
    out = copy.deepcopy(run)
    out["units"] = units
    for la in out.get("launches") or []:
        if not isinstance(la, dict):
            continue
        for key, series in la.items():
            if (key.endswith(SAMPLE_KEYS_SUFFIX) or key == "values") and isinstance(series, dict):
                for m, f in factors.items():
                    if isinstance(series.get(m), list):
                        series[m] = [_scaled(x, f) for x in series[m]]
        scalars = la.get("scalars")
        if isinstance(scalars, dict):
            for m, f in factors.items():
                if m in scalars:
                    scalars[m] = _scaled(scalars[m], f)
    return out


def _scaled(x: Any, f: float) -> Any:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return x  # a malformed value is left for the record checks to refuse, not hidden here
    return x * f


def check_dimensions(
    old: dict[str, Any], new: dict[str, Any], old_label: str = "OLD", new_label: str = "NEW"
) -> None:
    """BadInput (exit 2) when a metric both sides hold is of different dimensions or of two units
    that do not convert (ms against tokens, tok/s against req/s): no verdict can be drawn from them."""
    uo, un = old.get("units") or {}, new.get("units") or {}
    if not isinstance(uo, dict) or not isinstance(un, dict):
        return
    for m in sorted(set(uo) & set(un)):
        a, b = uo[m], un[m]
        if not (isinstance(a, str) and isinstance(b, str)) or a == b:
            continue
        da, db = dimension(a), dimension(b)
        if da is not None and da == db:
            continue
        raise BadInput(
            f"metric {m!r} is in {a!r} in {old_label} and in {b!r} in {new_label}: "
            f"{_what(a, da)} against {_what(b, db)}, which do not convert; compare one quantity with itself"
        )


def _what(unit: str, dim: str | None) -> str:
    return f"a {dim}" if dim else f"a quantity in {unit!r}"


def display_time_unit(median_ms: float) -> str:
    """The unit to show a time of this median (in ms) in: the largest it is at least one of."""
    for unit, f in TIME_DISPLAY:
        if abs(median_ms) >= f:
            return unit
    return TIME_DISPLAY[-1][0]


def display_units(
    old: dict[str, Any], new: dict[str, Any], primary: str | None, phases: list[str]
) -> dict[str, str]:
    """{metric: unit} to show the time metrics of two canonical runs in. Two groups, one unit each:
    the primary and its phases (their changes add up), in the unit of the primary's median; every
    other time metric (a sweep's rows, a suite's benchmarks, shown in one table; a primary without
    phases among them) in the unit of their middle median. OLD's median decides where it has the metric; both sides get the
    same unit, so nothing flips."""
    units = {**(new.get("units") or {}), **(old.get("units") or {})}
    medians: dict[str, float] = {}
    for k, u in units.items():
        if u == CANONICAL[TIME]:
            med = _median(old, k)
            med = _median(new, k) if med is None else med
            if med is not None:
                medians[k] = med
    shown: dict[str, str] = {}
    summed = [k for k in [primary, *phases] if k in medians] if primary in medians and phases else []
    if summed:
        shown.update(dict.fromkeys(summed, display_time_unit(medians[str(primary)])))
    rest = sorted((abs(medians[k]), k) for k in medians if k not in shown)
    if rest:  # the unit of the middle one: a sweep's 1 KiB row reads 0.8 us, its 64 MiB row 300 us
        shown.update(dict.fromkeys((k for _m, k in rest), display_time_unit(rest[len(rest) // 2][0] or 1.0)))
    return {k: u for k, u in shown.items() if u != CANONICAL[TIME]}


def _median(run: dict[str, Any], metric: str) -> float | None:
    xs = [
        float(x)
        for la in run.get("launches") or []
        if isinstance(la, dict) and isinstance(la.get("samples"), dict)
        for x in (la["samples"].get(metric) or [])
        if isinstance(x, (int, float)) and not isinstance(x, bool)
    ]
    if not xs:
        return None
    xs.sort()
    return xs[len(xs) // 2]


def shown_in(run: dict[str, Any], shown: dict[str, str]) -> dict[str, Any]:
    """A canonical run with the time metrics of `shown` ({metric: display unit}) converted: for display."""
    if not shown:
        return run
    f = dict(TIME_DISPLAY)
    units = run.get("units") or {}
    mine = {k: u for k, u in shown.items() if units.get(k) == CANONICAL[TIME]}
    return _rescaled(run, {k: 1.0 / f[u] for k, u in mine.items()}, {**units, **mine})
