"""Lanes: where a bisect's launches run at once, and each lane as a block of its statistics.

A lane is one place a launch runs, one launch at a time: a node of a Slurm allocation, a group of GPUs
of this machine (`--lanes gpu`: regdiag/hosts/gpu_lanes.py), or this machine alone (one lane). Launch
i of every point runs on lane i mod L, so the points of a question are measured on the same lanes, and
a round of launches fills the lanes (bisect/rounds.py runs it, one thread per lane).

Lanes as blocks. One lane may be slower than the others (a node with a slower clock, a GPU beside a
busy one). Each comparison is paired within a lane: before the statistics, every launch is divided by
its lane's level, estimated from the question's own launches by the two-way model

    log value = point + lane + noise

(least squares over the question's points and lanes; lanes that carry one point only are left as
they are). The spread of what is left is widened for the levels taken out, so the Welch test and
theta's CI count the lanes' degrees of freedom. A slow lane then moves no point, and the report names
it from all the bisect's launches (`levels`, `slow_lane`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Row = tuple[str, str, float]  # (group, lane, value)
# A lane is named slow when its level is this much above the median lane's, and clear of the noise.
SLOW_RATIO = 1.10
SLOW_Z = 3.0


def _fit(rows: Sequence[Row]) -> tuple[dict[str, float], float, int] | None:
    """Each lane's level (log units, centred on the lanes' mean), the residual SD and its degrees of
    freedom, from rows of two or more lanes that each carry two or more groups; None when the lanes
    cannot be told apart from the groups."""
    groups_on: dict[str, set[str]] = {}
    for g, lane, _v in rows:
        groups_on.setdefault(lane, set()).add(g)
    lanes = sorted(lane for lane, gs in groups_on.items() if len(gs) >= 2)
    if len(lanes) < 2:
        return None
    used = [r for r in rows if r[1] in lanes]
    groups = sorted({g for g, _l, _v in used})
    n, p, k = len(used), len(groups), len(lanes) - 1
    df = n - p - k
    if df < 1:
        return None
    x = np.zeros((n, p + k))
    y = np.log(np.asarray([v for _g, _l, v in used], dtype=float))
    for i, (g, lane, _v) in enumerate(used):
        x[i, groups.index(g)] = 1.0
        j = lanes.index(lane)
        if j > 0:
            x[i, p + j - 1] = 1.0
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    level = {lanes[0]: 0.0, **{lane: float(coef[p + j - 1]) for j, lane in enumerate(lanes) if j > 0}}
    mean = sum(level.values()) / len(level)
    resid = y - x @ coef
    sd = float(math.sqrt(float(resid @ resid) / df))
    return {lane: v - mean for lane, v in level.items()}, sd, df


def blocked(groups: Mapping[str, tuple[Sequence[float], Sequence[str | None]]]) -> dict[str, list[float]]:
    """Each group's values with its lanes' levels taken out (see the module docstring): {name: (values,
    lanes)} -> {name: values}. With one lane (or lanes that cannot be told apart from the groups) the
    values as they are."""
    rows = [
        (g, lane or "", float(v)) for g, (vs, ls) in groups.items() for v, lane in zip(vs, ls, strict=True)
    ]
    fit = _fit(rows)
    if fit is None:
        return {g: list(vs) for g, (vs, _ls) in groups.items()}
    level, _sd, df = fit
    out: dict[str, list[float]] = {}
    lost = len(level) - 1  # the lanes' levels: degrees of freedom the groups' own spreads do not see
    for g, (vs, ls) in groups.items():
        logs = [math.log(v) - level.get(lane or "", 0.0) for v, lane in zip(vs, ls, strict=True)]
        out[g] = logs
    # Widen each group's spread around its mean so that the pooled spread is that of the fit (n - p - k
    # degrees of freedom), not of n - p: Welch then counts what the lanes' levels took.
    widen = math.sqrt((df + lost) / df)
    for g, logs in out.items():
        m = sum(logs) / len(logs)
        out[g] = [math.exp(m + (x - m) * widen) for x in logs]
    return out


def levels(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Each lane's level over the whole bisect (rows of every launch: point, lane, value), as a ratio to
    the lanes' geometric mean, with its launch count, sorted by lane."""
    counts: dict[str, int] = {}
    for _g, lane, _v in rows:
        counts[lane] = counts.get(lane, 0) + 1
    fit = _fit(rows)
    level = fit[0] if fit else {}
    return [
        {
            "lane": lane,
            "launches": counts[lane],
            "level": round(math.exp(level[lane]), 4) if lane in level else None,
        }
        for lane in sorted(counts)
    ]


def slow_lane(rows: Sequence[Row]) -> dict[str, Any] | None:
    """The lane whose launches ran slower than the others' beyond the noise ({lane, slower: its level
    over the median lane's}), or None."""
    fit = _fit(rows)
    if fit is None or len(fit[0]) < 3:
        return None  # with two lanes, which one is "slow" cannot be told from which one is fast
    level, sd, _df = fit
    lane = max(level, key=lambda k: level[k])
    others = sorted(v for k, v in level.items() if k != lane)
    mid = (
        others[len(others) // 2]
        if len(others) % 2
        else (others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
    )
    n = sum(1 for _g, ln, _v in rows if ln == lane)
    gap = level[lane] - mid
    if math.exp(gap) < SLOW_RATIO or gap < SLOW_Z * sd / math.sqrt(max(n, 1)):
        return None
    return {"lane": lane, "slower": round(math.exp(gap), 4), "launches": n}
