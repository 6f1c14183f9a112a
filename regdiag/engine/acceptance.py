"""Acceptance as a signal: the accept length of an engine's cycles as a series, checked for drift the
way cycle times are (docs/engine.md, "Acceptance"), and the tokens a verify took as a distribution.

Within a launch the per-cycle accept lengths are cut into BLOCKS consecutive blocks; their means, in
order, are tested for a trend (Spearman's rho against block order, exact p: regdiag.stats.trend, the
test compare runs on launch centres). A launch's accept length drifts when that trend is significant
(p < DRIFT_ALPHA) and the last third of its cycles accepts at least ACCEPT_DRIFT_MIN more or less than
the first third: a draft that loses its grip as the context grows, a template that changes mid-run,
an adaptive draft length that moved. Across the launches of a run, the launch means get the same test
(at least 4 launches). A mean accept length over a drifting series is not one number; explain says so.

Numbers only (stats, numpy); no records are written here.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

import numpy as np

from regdiag import stats

BLOCKS = 8  # consecutive blocks of cycles whose means are tested for a trend
DRIFT_ALPHA = 0.05
ACCEPT_DRIFT_MIN = 0.05  # |last third / first third - 1| below this is not called a drift
VARIES_SHARE = 0.1  # a verify size other than the most common one in more than this share of cycles


def _finite(xs: Any) -> list[float]:
    return [float(x) for x in xs or [] if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0]


def series_check(accept: Any) -> dict[str, Any] | None:
    """The drift of one launch's accept-length series (None below 2 x BLOCKS cycles)."""
    a = np.asarray(_finite(accept), dtype=float)
    if a.size < 2 * BLOCKS:
        return None
    blocks = [float(b.mean()) for b in np.array_split(a, BLOCKS)]
    third = a.size // 3
    drift = float(a[-third:].mean() / a[:third].mean() - 1.0)
    t = stats.trend(blocks)
    out: dict[str, Any] = {
        "cycles": int(a.size),
        "block_means": [round(b, 4) for b in blocks],
        "drift_pct": round(100 * drift, 3),
        "rho": None if t is None else round(t.rho, 4),
        "p": None if t is None else t.p,
    }
    out["flagged"] = bool(t is not None and t.p < DRIFT_ALPHA and abs(drift) >= ACCEPT_DRIFT_MIN)
    return out


def launches_check(means: list[float]) -> dict[str, Any] | None:
    """The trend of a run's launch means of the accept length, in launch order (None below 4 launches)."""
    xs = _finite(means)
    t = stats.trend(xs) if len(xs) == len(means) else None
    if t is None:
        return None
    return {
        "launches": t.launches,
        "slope_pct_per_launch": round(100 * t.slope, 3),
        "rho": round(t.rho, 4),
        "p": t.p,
        # the change over the run at the Theil-Sen slope, not its two noisy ends
        "flagged": bool(t.p < DRIFT_ALPHA and abs((1 + t.slope) ** (len(xs) - 1) - 1) >= ACCEPT_DRIFT_MIN),
    }


def tokens_distribution(tokens: Any) -> dict[int, float]:
    """The tokens a verify took, {tokens: share of cycles}, most common first."""
    xs = [int(x) for x in tokens or [] if isinstance(x, int) and not isinstance(x, bool) and x > 0]
    if not xs:
        return {}
    return {k: round(v / len(xs), 4) for k, v in Counter(xs).most_common()}


def varies(dist: dict[int, float]) -> bool:
    """More than VARIES_SHARE of cycles verified another number of tokens than the most common one."""
    return bool(dist) and 1.0 - max(dist.values()) > VARIES_SHARE


def per_position_rates(values: dict[str, Any]) -> list[float] | None:
    """A launch's acceptance rate per draft position: over the cycles that have an accept length, the
    mean share of a cycle's requests that accepted at least i drafts (`accept_pos{i}`; a cycle without
    that position, no drafts in it, counts 0), so 1 + their sum is the mean accept length. The
    per-cycle series are removed from `values`. None when the engine's reader gives no positions
    (SGLang's results carry none)."""
    keys = sorted(
        (k for k in values if k.startswith("accept_pos") and k[10:].isdigit()), key=lambda k: int(k[10:])
    )
    series = [_finite_or_zero(values.pop(k)) for k in keys]
    cycles = len(_finite(values.get("accept_len")))
    if not keys or not cycles:
        return None
    return [round(sum(xs) / cycles, 4) for xs in series]


def _finite_or_zero(xs: Any) -> list[float]:
    return [
        float(x) for x in xs or [] if isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1
    ]


def launch_acceptance(values: dict[str, Any]) -> dict[str, Any] | None:
    """A launch's `acceptance`: the series check of its accept lengths, and the verify sizes."""
    out: dict[str, Any] = {}
    acc = _finite(values.get("accept_len"))
    if acc:
        out["accept_len_mean"] = round(statistics.fmean(acc), 4)
        out["series"] = series_check(acc)
    dist = tokens_distribution(values.get("verify_tokens"))
    if dist:
        out["verify_tokens"] = {str(k): v for k, v in dist.items()}
        out["verify_tokens_vary"] = varies(dist)
    return out or None


def warnings(launches: list[dict[str, Any]]) -> list[str]:
    """One line per drifting launch, per run-level trend, and when the verify size varied."""
    out = []
    for la in launches:
        s = ((la.get("acceptance") or {}).get("series")) or {}
        if s.get("flagged"):
            out.append(
                f"launch {la.get('index')}: the accept length drifts over the launch "
                f"({s['drift_pct']:+.1f} % "
                f"from its first third of {s['cycles']} cycles to its last; Spearman rho {s['rho']:+.2f} "
                f"over {BLOCKS} blocks, p {s['p']:.2g}): its mean is not one number"
            )
    means = [(la.get("acceptance") or {}).get("accept_len_mean") for la in launches]
    t = launches_check([m for m in means if m is not None]) if all(m is not None for m in means) else None
    if t is not None and t["flagged"]:
        out.append(
            f"the accept length trends with launch order ({t['slope_pct_per_launch']:+.2f} % per launch, "
            f"rho {t['rho']:+.2f}, p {t['p']:.2g})"
        )
    vary = [la.get("index") for la in launches if (la.get("acceptance") or {}).get("verify_tokens_vary")]
    if vary:
        out.append(
            f"the tokens a verify took vary within launch(es) {', '.join(map(str, vary))}: the draft length "
            "changed at run time (adaptive speculation, an n-gram drafter without a match) or the batch did; "
            "explain weighs their distribution"
        )
    return out
