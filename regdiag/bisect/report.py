"""The bisect report: culprits with milliseconds per phase, the share of the regression each explains,
the unexplained rest, and what the search cost, as a plain dict; regdiag.report.bisect renders it.

Milliseconds are differences of the mean launch medians between the two points that bracket a
change (the change is measured where it was found, with everything else held as it was there),
with a Welch 95 % CI (regdiag.stats, as compare's attribution); the share is that difference over
the whole regression (all-bad minus all-good) of the metric. Measured at different points, the
shares need not add up to exactly 100 %: the unexplained rest says by how much they do not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from regdiag import stats
from regdiag.bisect.lab import Lab, Point
from regdiag.bisect.search import Culprit, Outcome
from regdiag.host_phantom import busy_line
from regdiag.profiles import profile_split
from regdiag.records import BISECT_REPORT, schema_id
from regdiag.snapshot.diff import diff_engine_config

REPORT_KIND = schema_id(BISECT_REPORT)


def _means(lab: Lab, p: Point) -> dict[str, float]:
    las = lab.launches(p)
    names = [k for k in (las[0].medians if las else {}) if all(k in la.medians for la in las)]
    return {k: round(sum(la.medians[k] for la in las) / len(las), 4) for k in names}


def _effect(lab: Lab, lo: Point, hi: Point) -> tuple[dict[str, float], dict[str, list[float] | None]]:
    """ms added going lo -> hi, per metric: difference of mean launch medians, with a Welch 95 % CI."""
    a, b = lab.launches(lo), lab.launches(hi)
    ms: dict[str, float] = {}
    ci: dict[str, list[float] | None] = {}
    for k in _means(lab, hi):
        x = [la.medians[k] for la in a if k in la.medians]
        y = [la.medians[k] for la in b if k in la.medians]
        if not x or not y:
            continue
        if len(x) >= 2 and len(y) >= 2:
            d, lo_ci, hi_ci = stats.diff_welch(np.asarray(x), np.asarray(y))
            ci[k] = [round(lo_ci, 4), round(hi_ci, 4)]
        else:
            d, ci[k] = sum(y) / len(y) - sum(x) / len(x), None
        ms[k] = round(d, 4)
    return ms, ci


def _change(c: Culprit) -> str:
    return " + ".join(f.label() for f in c.factors)


NO_CULPRIT = "no culprit could be named"


def build_report(
    outcome: Outcome, lab: Lab, metric: str, notes: list[str], wall_s: float, max_launches: int = 9
) -> dict[str, Any]:
    good, bad = lab.good(), lab.bad()
    total, total_ci = _effect(lab, good, bad)
    culprits = [_culprit(c, lab, metric, total) for c in outcome.culprits]
    explained: dict[str, float] = {k: 0.0 for k in total}
    for c in culprits:
        for k in explained:
            explained[k] += c["ms"].get(k, 0.0)
    rest = {k: round(total[k] - explained[k], 4) for k in total} if culprits else dict(total)
    ends = outcome.endpoints
    busy = busy_line(lab.others_pct, lab.host_cpus(), f"--max-launches {2 * max_launches}")
    statement = outcome.statement or _statement(outcome.verdict, culprits, metric)
    if busy and outcome.verdict != "CULPRIT":
        statement = f"{statement}: {busy}" if statement == NO_CULPRIT else f"{statement}; {busy}"
    elif busy:
        notes = [*notes, busy]
    lanes = lab.lanes_report()
    if lanes is not None:
        notes = [*notes, *lanes["notes"]]
    return {
        "kind": REPORT_KIND,
        "verdict": outcome.verdict,
        "statement": statement,
        "busy": busy,
        "metric": metric,
        "factors": [f.to_dict() for f in lab.factors],
        "notes": notes,
        "endpoints": {
            **(ends.to_dict() if ends else {}),
            "good": _means(lab, good),
            "bad": _means(lab, bad),
        },
        "regression_ms": total,
        "regression_ms_ci": total_ci,
        "culprits": culprits,
        "unexplained_ms": rest,
        "unexplained_share": round(rest[metric] / total[metric], 4) if total.get(metric) else None,
        "skipped": outcome.skipped,
        "cleared": outcome.cleared,
        "unresolved": outcome.unresolved,
        "cost": _cost(lab, wall_s),
        "lanes": lanes,
        "resumed": lab.journal.resumed,
        "replay_mismatches": lab.journal.mismatches,
    }


def _culprit(c: Culprit, lab: Lab, metric: str, total: dict[str, float]) -> dict[str, Any]:
    """One culprit: its ms per metric measured between the two points that bracket it, and its share of
    the whole regression of `metric`."""
    ms, ms_ci = _effect(lab, c.lo, c.hi)
    share = ms.get(metric, 0.0) / total[metric] if total.get(metric) else None
    extra: dict[str, Any] = {}
    if c.members and c.together is not None:
        # f, found last in the chain, first: "interaction: A with B"
        names = [g.name for g, _ in c.members]
        extra["interaction_of"] = f"interaction: {names[-1]} with {' and '.join(names[:-1])}"
        extra["members"] = [
            {"name": g.name, "label": g.label(), **_part(lab, p, metric, total)} for g, p in c.members
        ]
        extra["together"] = _part(lab, c.together, metric, total)
    return {
        "change": _change(c),
        "factors": [f.to_dict() for f in c.factors],
        "interaction": c.interaction,
        "alone": c.alone,
        "unconfirmed": [f.label() for f in c.unconfirmed],
        "within": c.within.label() if c.within else None,
        "ms": ms,
        "ms_ci": ms_ci,
        "share": None if share is None else round(share, 4),
        "from": lab.label(c.lo),
        "to": lab.label(c.hi),
        "skipped": c.skipped,
        "exact": not c.skipped,
        "profile": _split(lab, c.lo, c.hi),
        "engine_config": _engine_change(lab, c.lo, c.hi),
        **extra,
    }


def _part(lab: Lab, p: Point, metric: str, total: dict[str, float]) -> dict[str, Any]:
    """A point's effect against all-good (a member tried alone, a group together): ms of `metric` with
    its Welch 95 % CI, its share of the regression, the launches on each side."""
    ms, ci = _effect(lab, lab.good(), p)
    got = ms.get(metric)
    share = got / total[metric] if got is not None and total.get(metric) else None
    return {
        "ms": got,
        "ms_ci": ci.get(metric),
        "share": None if share is None else round(share, 4),
        "launches": [len(lab.launches(lab.good())), len(lab.launches(p))],
    }


def _split(lab: Lab, lo: Point, hi: Point) -> dict[str, Any] | None:
    """`-- --profile`: the culprit's change per phase as GPU work and GPU idle (regdiag/profiles.py),
    from the profiles of the launches of the two points that bracket it; None where either has none."""
    side = [[{"profile": la.profile} for la in lab.launches(p) if la.profile] for p in (lo, hi)]
    return profile_split(side[0], side[1], []) if all(side) else None


def _engine_change(lab: Lab, lo: Point, hi: Point) -> list[dict[str, Any]]:
    """--probe engine: what the engine chose at start (its engine section) that differs between the two
    points that bracket the culprit: "with flashinfer 0.2.14 the verify attention backend changed"."""
    side = [
        {"launches": [{"engine_config": la.engine_config} for la in lab.launches(p) if la.engine_config]}
        for p in (lo, hi)
    ]
    return [{k: item[k] for k in ("field", "old", "new", "change")} for item in diff_engine_config(*side)]


def _cost(lab: Lab, wall_s: float) -> dict[str, Any]:
    """What the search cost: environments, points, launches run now and reused from the journal, time."""
    journal = lab.journal
    launches_total = sum(len(journal.launches.get(k, [])) for k in lab.points_used)
    return {
        "environments_built": lab.builder.built_now,
        "points_measured": len(lab.points_used),
        "launches_run": lab.launches_run,
        "launches_reused": launches_total - lab.launches_run,
        "launches_total": launches_total,
        "measured_s": round(journal.measured_s, 2),
        "wall_s": round(wall_s, 2),
    }


def _statement(verdict: str, culprits: list[dict[str, Any]], metric: str) -> str:
    if not culprits:
        return NO_CULPRIT
    parts = []
    for c in culprits:
        ms = c["ms"].get(metric)
        share = c["share"]
        tail = f" ({ms:+.2f} ms {metric}" + (
            f", {share:.0%} of the regression)" if share is not None else ")"
        )
        if c.get("members"):
            tail += f"; {c['interaction_of']}: {_shares(c)}"
        parts.append(c["change"] + tail)
    return ("culprit: " if len(parts) == 1 else f"{len(parts)} culprits: ") + "; ".join(parts)


def _shares(c: dict[str, Any]) -> str:
    """Each member's share alone and the group's together: "A alone 33 %, B alone 0 %, together 100 %"."""

    def one(part: dict[str, Any]) -> str:
        return "?" if part["share"] is None else f"{part['share'] + 0.0:.0%}".replace("-0%", "0%")

    alone = ", ".join(f"{m['name']} alone {one(m)}" for m in c["members"])
    return f"{alone}, together {one(c['together'])}"
