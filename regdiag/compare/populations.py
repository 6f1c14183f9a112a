"""Two populations on one side: launches that fall into two groups (3 of 5 launches 38 % slower) are
said as such, with what differs between the groups, rather than read as launch-to-launch noise that
leaves the verdict INCONCLUSIVE.

The test (docs/statistics.md, "Two populations"): sort a side's launch medians of the primary; at the
split where the gap between neighbours is largest against the spread within the two groups, the
side is bimodal when that gap is at least GAP_RATIO times the larger group's range, at least MIN_GAP
of the faster group's median, and each group holds MIN_GROUP launches. Ranges of so few launches are
robust to nothing but themselves, so the rule is tuned on simulated noise: with Gaussian launch
noise of 3 % it fired in none of 20 000 sides of 4 to 10 launches, with 5 % in 0.4 % of 5-launch
sides (seeded, /tmp-free: tests/test_compare_populations.py repeats the 3 % case); two groups 38 %
apart with 2 % noise inside are found in 89 % of 5-launch sides.

What differs between the groups is read from the launch records: the host's readings
(host_phantom.features), the canary, the node, and any header or engine-config field every launch
of one group shares and no launch of the other has. Pure: no I/O.
"""

from __future__ import annotations

import statistics
from typing import Any

from regdiag import host_phantom

GAP_RATIO = 4.0
MIN_GAP = 0.10
MIN_GROUP = 2
MIN_LAUNCHES = 2 * MIN_GROUP + 1
FLOOR = 0.005  # a group's range is taken as at least this share of the median (equal launches)


def split(centers: list[float]) -> tuple[list[int], list[int], float] | None:
    """(positions of the fast group, of the slow group, gap / larger range) where the side's launch
    medians are two groups; None when they are not (or too few)."""
    pos = [i for i, x in enumerate(centers) if x is not None and x == x]
    if len(pos) < MIN_LAUNCHES:
        return None
    order = sorted(pos, key=lambda i: centers[i])
    v = [centers[i] for i in order]
    floor = FLOOR * abs(statistics.median(v))
    best: tuple[float, int] | None = None
    for k in range(MIN_GROUP, len(v) - MIN_GROUP + 1):
        lo, hi = v[:k], v[k:]
        gap = hi[0] - lo[-1]
        spread = max(lo[-1] - lo[0], hi[-1] - hi[0], floor)
        if floor > 0 and gap / statistics.median(lo) >= MIN_GAP and (best is None or gap / spread > best[0]):
            best = (gap / spread, k)
    if best is None or best[0] < GAP_RATIO:
        return None
    return order[: best[1]], order[best[1] :], best[0]


def _flat(la: dict[str, Any]) -> dict[str, str]:
    """The launch's identity, one level deep: its node, header fields and env, engine_config scalars."""
    out: dict[str, str] = {}
    if la.get("node"):
        out["node"] = str(la["node"])
    h = la.get("header") if isinstance(la.get("header"), dict) else {}
    for k, v in h.items():
        if isinstance(v, (str, int, float, bool)) and k not in ("pid", "started", "time"):
            out[f"header.{k}"] = str(v)
        elif k == "env" and isinstance(v, dict):
            out.update({f"env.{ek}": str(ev) for ek, ev in v.items() if isinstance(ev, (str, int, float))})
    cfg = la.get("engine_config") if isinstance(la.get("engine_config"), dict) else {}
    for k, v in cfg.items():
        if isinstance(v, (str, int, float, bool)):
            out[f"engine_config.{k}"] = str(v)
    if isinstance((cfg.get("nccl") or {}).get("version"), str):
        out["engine_config.nccl.version"] = cfg["nccl"]["version"]
    return out


def _what_differs(slow: list[dict[str, Any]], fast: list[dict[str, Any]]) -> list[str]:
    out = []
    fs, ff = [_flat(la) for la in slow], [_flat(la) for la in fast]
    for key in sorted({k for f in fs + ff for k in f}):
        a, b = {f.get(key) for f in fs}, {f.get(key) for f in ff}
        if len(a) == 1 and len(b) >= 1 and not a & b and None not in a:
            out.append(f"{key} {a.pop()} (the others: {', '.join(sorted(str(x) for x in b))})")
    out += host_phantom.group_stands_out(slow, fast)
    cs = [c for la in slow if (c := host_phantom.canary_ms(la)) is not None]
    cf = [c for la in fast if (c := host_phantom.canary_ms(la)) is not None]
    if cs and cf:
        a, b = statistics.median(cs), statistics.median(cf)
        if b > 0 and abs(a / b - 1) > host_phantom.CANARY_OFF:
            how = "slower" if a > b else "faster"
            out.append(f"the host ran {abs(a / b - 1) * 100:.0f} % {how} (canary {a:.3g} ms vs {b:.3g})")
        elif b > 0:
            out.append(f"not the host's speed (canary {a:.3g} ms vs {b:.3g})")
    return out


def two_populations(
    label: str, launches: list[dict[str, Any]], centers: list[float], metric: str, unit: str
) -> dict[str, Any] | None:
    """The two groups of one side (its usable launches and their medians of `metric`), said."""
    got = split(centers)
    if got is None:
        return None
    fast_i, slow_i, score = got
    fast, slow = [launches[i] for i in fast_i], [launches[i] for i in slow_i]
    mf = statistics.median(centers[i] for i in fast_i)
    ms = statistics.median(centers[i] for i in slow_i)
    differs = _what_differs(slow, fast)
    idx = [
        [la.get("index", i) for la, i in zip(g, gi, strict=True)] for g, gi in ((slow, slow_i), (fast, fast_i))
    ]
    line = (
        f"{label}: two populations, not noise: {len(slow)} of {len(launches)} launches "
        f"({', '.join(map(str, idx[0]))}) at {metric} {ms:.4g} {unit}, {100 * (ms / mf - 1):.0f} % "
        f"slower than the other {len(fast)} ({', '.join(map(str, idx[1]))}) at {mf:.4g} {unit}; "
        + (f"they differ in: {'; '.join(differs)}" if differs else "nothing recorded about them differs")
    )
    return {
        "side": label,
        "metric": metric,
        "slow": idx[0],
        "fast": idx[1],
        "slow_median": ms,
        "fast_median": mf,
        "gap_over_spread": round(score, 2),
        "differs": differs,
        "line": line,
    }


def populations_of(
    sides: list[tuple[str, list[dict[str, Any]], list[float]]], metric: str, unit: str
) -> list[dict[str, Any]]:
    """Each side (label, usable launches, their medians) that is two populations."""
    return [p for label, ls, cs in sides if (p := two_populations(label, ls, cs, metric, unit)) is not None]
