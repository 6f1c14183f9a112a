"""Where the verdict is decided: each metric's ratio of launch medians with its CI (paired for an
interleaved run), the primary at its own level, the other metrics Holm-adjusted as one family (a metric
computed from another follows its source), the context metrics left unjudged, and the overall verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from regdiag import direction, stats
from regdiag.compare.result import MetricResult
from regdiag.errors import BadInput


@dataclass
class Method:
    """How every metric of one comparison is tested: the same method, level, margin and random stream."""

    method: str
    level: float
    margin: float
    n_boot: int
    rng: np.random.Generator
    paired: bool = False


def higher_is_better(name: str, unit: str, better: dict[str, str] | None = None) -> bool:
    """The record's declared direction (`better`), else the unit/name fallback: regdiag/direction.py."""
    return direction.higher_is_better(name, unit, better)


def metric_verdicts(
    names: list[tuple[str, str]],
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    units: dict[str, str],
    better: dict[str, str],
    how: Method,
    derived: dict[str, str] | None = None,
) -> tuple[list[MetricResult], list[MetricResult]]:
    """The judged metrics, each with its verdict (Holm across the secondaries), and the context metrics
    (settings such as running_req or tp_rank): their change is shown, they take no verdict and no place
    in the Holm family."""
    judged, context = [], []
    for n, role in names:
        m = _metric(n, role, lo_, ln_, units, how, better)
        if m.better == direction.CONTEXT:
            if role == "primary":  # the overall verdict is the primary's, and a setting has none
                raise BadInput(
                    f"primary metric {n!r} is a setting of the measurement, not an outcome: nothing to judge"
                )
            m.role, m.verdict = "context", None
            m.note = m.note or "a setting or condition of the measurement, not an outcome: no verdict"
            context.append(m)
        else:
            judged.append(m)
    if not judged:
        what = ", ".join(m.name for m in context)
        raise BadInput(f"nothing to judge: every metric the runs share is context ({what})")
    _decide(judged, how.margin, how.level, derived or {})
    return judged, context


def _metric(
    name: str,
    role: str,
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    units: dict[str, str],
    how: Method,
    better: dict[str, str] | None = None,
) -> MetricResult:
    key = "values" if role == "value" else "samples"
    reduce = "mean" if role == "value" else "median"
    unit = units.get(name, "" if role == "value" else "ms")
    old = [la[key][name] for la in lo_ if la[key].get(name)]
    new = [la[key][name] for la in ln_ if la[key].get(name)]
    better_way, better_source = direction.direction(name, unit, better)
    note = ""
    est = None
    try:
        if how.paired and len(old) == len(new) >= 2:
            est = stats.estimate_ratio_paired(old, new, reduce, how.level)
        else:
            est = stats.estimate_ratio(old, new, reduce, how.method, how.level, how.n_boot, how.rng)
    except ValueError as e:
        note = f"not compared: {e}"
    if est is not None and (est.n_old < 2 or est.n_new < 2):
        note = "one launch on a side: launch-to-launch noise unknown, no CI; run >= 3 launches per side"
    return MetricResult(
        name=name,
        role=role,
        unit=unit,
        higher_is_better=better_way == direction.HIGHER,
        better=better_way,
        reduce=reduce,
        estimate=est,
        p_adjusted=None,
        verdict=stats.INCONCLUSIVE,
        more_launches=None,
        note=note,
        old_centers=stats.launch_centers(old, reduce).tolist(),
        new_centers=stats.launch_centers(new, reduce).tolist(),
        noise_old=stats.noise(old),
        noise_new=stats.noise(new),
        direction_source=better_source,
    )


def derived_metrics(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    """metric -> the metric it is computed from (a bandwidth from its time), as the records declare it."""
    out: dict[str, str] = {}
    for run in (new, old):  # OLD's word wins, as for directions
        raw = run.get("derived")
        if isinstance(raw, dict):
            out.update({str(k): str(v) for k, v in raw.items() if isinstance(v, str)})
    return out


def _decide(results: list[MetricResult], margin: float, level: float, derived: dict[str, str]) -> None:
    """Primary at its own level; every other metric Holm-adjusted as one family. A metric computed from
    another (algbw_64KiB = bytes / ar_64KiB) is the same test, not one more: it takes its source's
    adjusted p and stays out of the family, which would otherwise grow threefold for nothing."""
    by_name = {m.name: m for m in results}
    follows = {m.name: by_name[derived[m.name]] for m in results if derived.get(m.name) in by_name}
    secondary: list[tuple[MetricResult, float]] = [
        (m, m.estimate.p)
        for m in results
        if m.role != "primary"
        and m.name not in follows
        and m.estimate is not None
        and m.estimate.p is not None
    ]
    adjusted = stats.holm([p for _m, p in secondary])
    for (m, _p), p in zip(secondary, adjusted, strict=True):
        m.p_adjusted = p
    for m in results:
        if m.role == "primary" and m.estimate is not None:
            m.p_adjusted = m.estimate.p
    for name, src in follows.items():
        m = by_name[name]
        if m.estimate is not None and m.estimate.p is not None:
            m.p_adjusted = src.p_adjusted
            m.note = m.note or f"computed from {src.name}: tested with it"
    for m in results:
        if m.estimate is None:
            continue
        m.verdict = stats.decide(m.estimate, m.p_adjusted, margin, m.higher_is_better, level)
        if m.verdict == stats.INCONCLUSIVE and m.estimate.lo is not None:
            k_now = min(m.estimate.n_old, m.estimate.n_new)
            k = stats.launches_to_settle(m.estimate.sd_log, math.log(m.estimate.ratio), margin, level)
            m.more_launches = None if k is None else max(k - k_now, 1)


def overall_verdict(results: list[MetricResult], primary: str | None) -> str:
    if primary:
        return next(m.verdict or stats.INCONCLUSIVE for m in results if m.name == primary)
    verdicts = {m.verdict for m in results}
    for v in (stats.REGRESSED, stats.INCONCLUSIVE, stats.IMPROVED):
        if v in verdicts:
            return v
    return stats.UNCHANGED
