"""Launches that share a start (an engine's, a server's): which launches start afresh, and the check
that launches of one start vary as launches of different starts do (docs/engine.md, "Reused starts").

The statistics treat launches as independent draws. Launches that share an engine start share what
is fixed at start (weight placement, autotuned kernels, captured graphs): `FRESH_AT` starts every
environment's engine afresh at its first and third launch, and `start_check` compares the launches of
one start with those of the other (in launch order, a fresh launch begins a start, reused ones join it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

FRESH_AT = (0, 2)  # launch indices of one environment that start the engine (the server) afresh


def fresh_start(index: int) -> bool:
    """Whether launch `index` of an environment starts the engine afresh (the others reuse it)."""
    return index in FRESH_AT


def launch_value(la: Mapping[str, Any], metric: str) -> float | None:
    """A launch's median of `metric`: a run record's launch (samples) or a journal's (medians)."""
    if la.get("status") != "ok":
        return None
    xs = (la.get("samples") or {}).get(metric)
    if xs:
        return float(statistics.median(xs))
    v = (la.get("medians") or {}).get(metric)
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


def start_check(launches: Sequence[Mapping[str, Any]], metric: str = "cycle") -> dict[str, Any] | None:
    """Do launches of one engine start vary as launches of different starts do? In launch order (a
    fresh launch begins a start, reused ones join it), the log of each launch's median; the spread
    within starts (pooled SD) against the difference between the starts' means. None with fewer than
    two starts or no launch to spare within one."""
    groups: list[list[float]] = []
    for la in launches:
        if la.get("start") == "fresh" or not groups:
            groups.append([])
        x = launch_value(la, metric)
        if x is not None and la.get("start") in ("fresh", "reused"):
            groups[-1].append(math.log(x))
    groups = [g for g in groups if g]
    if len(groups) < 2:
        return None
    dof = sum(len(g) - 1 for g in groups)
    if dof < 1:
        return None
    within = math.sqrt(sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups) / dof)
    means = [statistics.fmean(g) for g in groups]
    between = max(means) - min(means)
    # the difference of two starts' means that launches of one start alone would explain (3 SD of it)
    sizes = sorted(len(g) for g in groups)
    allowed = 3 * within * math.sqrt(1 / sizes[0] + 1 / sizes[1])
    out = {
        "metric": metric,
        "starts": len(groups),
        "launches_per_start": [len(g) for g in groups],
        "within_start_cv_pct": round(within * 100, 3),
        "between_starts_pct": round(between * 100, 3),
        "allowed_pct": round(allowed * 100, 3),
        "understated": between > allowed,
    }
    return out


def start_warning(check: dict[str, Any] | None) -> str | None:
    """The record's warning when launches of one engine start vary less than launches of different
    starts do (the spread the statistics use understates the launch-to-launch variance)."""
    if not check or not check["understated"]:
        return None
    return (
        f"launches of one engine start vary less than launches of different starts ({check['metric']}: "
        f"{check['between_starts_pct']} % between starts, {check['within_start_cv_pct']} % within one): "
        "the spread understates a fresh start's variance; measure with --cold (a start per launch)"
    )


def note_start_check(run: dict[str, Any]) -> None:
    """The independence check of a run whose launches shared engine starts, into `probe.start.check`,
    and its warning when launches of one start vary less than launches of different starts."""
    check = start_check(run["launches"], str(run.get("primary") or "cycle"))
    if check is None:
        return
    run["probe"].setdefault("start", {})["check"] = check
    warning = start_warning(check)
    if warning and warning not in run.get("warnings", []):
        run["warnings"] = [*run.get("warnings", []), warning]
