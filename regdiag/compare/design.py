"""How the two sides were measured, and whether the machine drifted meanwhile.

The design: interleaved (the two halves of one `regdiag ab` run, compared pair by pair), sequential,
overlapping or unknown. The drift: each side's launch centres trending with launch order, Holm across
the two sides; a change that drift can fake is marked "possibly drift" unless the sides interleaved.
"""

from __future__ import annotations

from typing import Any

from regdiag import stats

INTERLEAVED = "interleaved"
SEQUENTIAL = "sequential"
OVERLAPPING = "overlapping"
UNKNOWN = "unknown"
DRIFT_ALPHA = 0.05
POSSIBLY_DRIFT = "possibly drift"


def measurement_design(
    old: dict[str, Any], new: dict[str, Any], lo_: list[dict[str, Any]], ln_: list[dict[str, Any]]
) -> dict[str, Any]:
    """interleaved: the two halves of one `regdiag ab` run; sequential: one side's launches all ended
    before the other's began; overlapping: they ran at the same time; unknown: no launch times."""
    do, dn = old.get("design") or {}, new.get("design") or {}
    if (
        isinstance(do, dict)
        and isinstance(dn, dict)
        and do.get("kind") == INTERLEAVED == dn.get("kind")
        and do.get("pair_id")
        and do.get("pair_id") == dn.get("pair_id")
    ):
        return {"kind": INTERLEAVED, "order": do.get("order", "ABBA"), "pair_id": do["pair_id"]}
    so = [la["span"] for la in lo_]
    sn = [la["span"] for la in ln_]
    if not so or not sn or any(x is None for x in so + sn):
        return {"kind": UNKNOWN}
    o0, o1 = min(x[0] for x in so), max(x[1] for x in so)
    n0, n1 = min(x[0] for x in sn), max(x[1] for x in sn)
    if o1 <= n0 or n1 <= o0:
        gap = n0 - o1 if o1 <= n0 else o0 - n1
        return {"kind": SEQUENTIAL, "gap_s": round(gap, 1)}
    return {"kind": OVERLAPPING}


def pair_if_interleaved(
    design: dict[str, Any],
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    method: str,
    warnings: list[str],
    notes: list[str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """An interleaved run's launches reduced to the A/B pairs, and whether the test pairs them."""
    if design["kind"] != INTERLEAVED:
        return lo_, ln_, False
    lo_, ln_, unpaired = _pairs(lo_, ln_)
    design["pairs"] = len(lo_)
    if unpaired:
        warnings.append(f"{unpaired} launch(es) without a partner in the other side left out of the pairing")
    if method != stats.WELCH:
        notes.append("interleaved run compared with the bootstrap: the pairing is not used")
    return lo_, ln_, method == stats.WELCH and len(lo_) >= 2


def _pairs(
    lo_: list[dict[str, Any]], ln_: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The launches of an interleaved run that have a partner, both sides in pair order."""
    po = {la["pair"]: la for la in lo_ if la["pair"] is not None}
    pn = {la["pair"]: la for la in ln_ if la["pair"] is not None}
    both = sorted(set(po) & set(pn))
    if len(both) < 2:
        return lo_, ln_, 0
    return [po[k] for k in both], [pn[k] for k in both], len(lo_) + len(ln_) - 2 * len(both)


def _run_order(launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Launches in the order they ran: by `order` (an ab run), else by start time, else as recorded."""
    if all(la["order"] is not None for la in launches):
        return sorted(launches, key=lambda la: la["order"])
    if all(la["span"] is not None for la in launches):
        return sorted(launches, key=lambda la: la["span"][0])
    return sorted(launches, key=lambda la: la["index"])


def side_drift(
    lo_: list[dict[str, Any]], ln_: list[dict[str, Any]], name: str, old_label: str, new_label: str
) -> dict[str, stats.Trend | None]:
    """The trend of each side's launch centres of `name` in run order, Holm across the two sides."""
    out: list[stats.Trend | None] = []
    for used in (lo_, ln_):
        key = "samples" if any(la["samples"].get(name) for la in used) else "values"
        how = "median" if key == "samples" else "mean"
        series = [la[key][name] for la in _run_order(used) if la[key].get(name)]
        out.append(stats.trend(stats.launch_centers(series, how)) if series else None)
    a, b = stats.trends_holm(out)
    return {old_label: a, new_label: b}


def drift_verdict(
    drift: dict[str, stats.Trend | None],
    design: dict[str, Any],
    verdict: str,
    old_label: str,
    new_label: str,
    warnings: list[str],
    notes: list[str],
) -> str | None:
    """One line per trending side; "possibly drift" on a change measured in a design drift can fake."""
    flagged = [
        (label, t)
        for label, t in drift.items()
        if t is not None and t.p_adjusted is not None and t.p_adjusted < DRIFT_ALPHA
    ]
    kind = design["kind"]
    for label, t in flagged:
        what = (
            f"DRIFT: the {label} launches trend with launch order ({100 * t.slope:+.2f} % per launch, "
            f"Spearman rho {t.rho:+.2f}, p {t.p_adjusted:.2g} Holm over both sides)"
        )
        if kind == INTERLEAVED:
            notes.append(what + "; the interleaved pairs cancel a steady drift")
        else:
            where = "one after the other" if kind == SEQUENTIAL else "without interleaving"
            warnings.append(
                f"{what}; the sides were measured {where}, so drift and change cannot be told apart: "
                "measure them interleaved with `regdiag ab`"
            )
    if kind == INTERLEAVED:
        notes.append(
            f"design: interleaved ({design.get('order', 'ABBA')}, {design.get('pairs', '?')} pairs of "
            f"{old_label}/{new_label} launches run back to back); the verdict uses the pairing"
        )
        return None
    if flagged and verdict in (stats.REGRESSED, stats.IMPROVED):
        return POSSIBLY_DRIFT
    return None
