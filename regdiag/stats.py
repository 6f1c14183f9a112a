"""The statistics behind `regdiag compare`: pure numbers, no I/O.

The unit of evidence is the launch (one fresh process). Cycles inside a launch share the launch's
clock state, memory layout and JIT choices, so they are correlated; pooling them into one test
(Mann-Whitney over all cycles, as Google Benchmark and asv do) treats 30 correlated cycles as 30
independent facts and cries wolf (docs/statistics.md has the simulation). Each launch is reduced
to one number first (the median of its cycles for times, the mean for per-cycle values such as
accept length), and the two sides are compared on the log of those numbers:

- ``welch``: Welch's t on log launch medians. The default: with the 3 to 10 launches users run,
  the t distribution accounts for the variance being estimated from few launches.
- ``bootstrap``: hierarchical bootstrap (resample launches, then cycles within each chosen launch).
  Kept for readers who want it and for the benchmark; with few launches it under-covers.

The vectorised ``*_core`` functions take arrays whose last axis is the launch and broadcast over
leading axes, so bench/bench_stats.py runs thousands of simulated comparisons through the exact
code that `regdiag compare` runs once.

scipy.special is imported instead of scipy.stats (0.3 s instead of 1.4 s at start-up).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import special

REGRESSED = "REGRESSED"
IMPROVED = "IMPROVED"
UNCHANGED = "UNCHANGED"
INCONCLUSIVE = "INCONCLUSIVE"
VERDICTS = (REGRESSED, IMPROVED, UNCHANGED, INCONCLUSIVE)

WELCH = "welch"
BOOTSTRAP = "bootstrap"
# Fewer launches per side than this and the bootstrap gives no interval (the verdict is INCONCLUSIVE):
# resampling 2 launches sees 3 distinct sets and called +5 % REGRESSED with a CI half Welch's width;
# at 3 it made 6.5 % false alarms, at 8 it holds its level (docs/statistics.md, "Why Welch").
BOOTSTRAP_MIN_LAUNCHES = 8
METHODS = (WELCH, BOOTSTRAP)
PAIRED = "paired"  # the method of an estimate from an interleaved run (paired t)

DEFAULT_MARGIN = 0.02
DEFAULT_LEVEL = 0.95
DEFAULT_BOOT = 2000
# Chosen by bench/bench_stats.py (docs/statistics.md): the fewest launches per side that give
# >= 95 % power for a 5 % regression under 2 % launch-to-launch and 3 % cycle-to-cycle noise.
RECOMMENDED_LAUNCHES = 8
RECOMMENDED_CYCLES = 30
# Planning power for "how many more launches would likely settle it".
PLAN_POWER = 0.8
PLAN_CAP = 200


# --- reductions ---------------------------------------------------------------------------------


def launch_centers(launches: Sequence[Sequence[float]], how: str = "median") -> np.ndarray:
    """One number per launch: the median (times) or the mean (per-cycle values) of its cycles."""
    fn = np.median if how == "median" else np.mean
    return np.array([float(fn(np.asarray(x, dtype=float))) for x in launches], dtype=float)


def geomean(x: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(x))))


RUN_VALUE = "geometric mean of the launch medians"


def run_value(centers: Sequence[float]) -> float | None:
    """A run's one number for a metric (its "cycle" wherever a run is shown: the probe summary and
    progress, compare's old and new, the HTML report): the geometric mean of its launch centres
    (docs/statistics.md, "One number per run"). None without launches; the plain mean where a
    centre is not positive (a log is not defined there)."""
    xs = [float(x) for x in centers if math.isfinite(x)]
    if not xs:
        return None
    if min(xs) <= 0:
        return sum(xs) / len(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


# --- Welch on log launch centres ----------------------------------------------------------------


def welch_core(
    old_log: np.ndarray, new_log: np.ndarray, level: float = DEFAULT_LEVEL
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Welch's t for mean(new_log) - mean(old_log) along the last axis.

    Returns (d, lo, hi, p, df) where d is the difference of means, [lo, hi] its `level` CI and p the
    two-sided p-value for d = 0. Needs >= 2 launches per side. A side without spread (identical
    launches) is allowed: when both sides lack spread the CI collapses to d and p is 0 or 1.
    """
    n1 = old_log.shape[-1]
    n2 = new_log.shape[-1]
    if n1 < 2 or n2 < 2:
        raise ValueError("Welch's t needs at least 2 launches per side")
    m1 = old_log.mean(axis=-1)
    m2 = new_log.mean(axis=-1)
    v1 = old_log.var(axis=-1, ddof=1) / n1
    v2 = new_log.var(axis=-1, ddof=1) / n2
    d = m2 - m1
    se2 = v1 + v2
    se = np.sqrt(se2)
    with np.errstate(divide="ignore", invalid="ignore"):
        # Welch-Satterthwaite; where one side has no spread this reduces to that of the other side.
        df = se2**2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1))
        df = np.where(np.isfinite(df), df, float(n1 + n2 - 2))
        tcrit = special.stdtrit(df, 0.5 + level / 2)
        t = d / se
        p = 2.0 * special.stdtr(df, -np.abs(t))
    degenerate = se == 0
    p = np.where(degenerate, np.where(d == 0, 1.0, 0.0), p)
    half = np.where(degenerate, 0.0, tcrit * se)
    return d, d - half, d + half, p, df


def diff_welch(old: np.ndarray, new: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[float, float, float]:
    """Absolute difference of launch means (ms) with a Welch CI: the attribution's numbers."""
    d, lo, hi, _p, _df = welch_core(np.asarray(old, float), np.asarray(new, float), level)
    return float(d), float(lo), float(hi)


# --- hierarchical bootstrap ---------------------------------------------------------------------


def hierarchical_stats(
    launches: Sequence[np.ndarray],
    stat: Callable[..., np.ndarray],
    n_boot: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Bootstrap replicates of per-launch statistics: shape (n_boot, k, m).

    Each launch is an array (cycles, m) of m metrics whose rows are the same cycles (they are
    resampled together, so a derived metric like cycle - sum(phases) stays consistent). For each
    replicate, k launches are drawn with replacement, then each drawn launch's cycles are drawn with
    replacement and reduced by `stat(axis=1)`. Launches may have different numbers of cycles.
    """
    k = len(launches)
    m = launches[0].shape[1]
    pick = rng.integers(0, k, size=(n_boot, k))
    out = np.empty((n_boot, k, m), dtype=float)
    for i, arr in enumerate(launches):
        mask = pick == i
        count = int(mask.sum())
        if count == 0:
            continue
        n = arr.shape[0]
        rows = rng.integers(0, n, size=(count, n))
        # Metrics first, cycles last: the reduction runs over contiguous memory (5x faster).
        cols = np.ascontiguousarray(arr.T)
        out[mask] = stat(cols[:, rows], axis=-1).T
    return out


def bootstrap_p(replicates: np.ndarray) -> float:
    """Two-sided percentile-bootstrap p-value for 'the statistic is 0', never below 1/B."""
    b = replicates.shape[0]
    below = float(np.count_nonzero(replicates <= 0)) / b
    above = float(np.count_nonzero(replicates >= 0)) / b
    return float(min(1.0, max(2.0 * min(below, above), 1.0 / b)))


def bootstrap_log_ratio(
    old: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    how: str = "median",
    level: float = DEFAULT_LEVEL,
    n_boot: int = DEFAULT_BOOT,
    rng: np.random.Generator | None = None,
) -> tuple[float, float, float, float]:
    """(d, lo, hi, p) for d = mean log launch centre new - old, by hierarchical bootstrap."""
    rng = rng if rng is not None else np.random.default_rng(0)
    stat = np.median if how == "median" else np.mean
    reps = []
    for side in (old, new):
        arrays = [np.asarray(x, dtype=float).reshape(-1, 1) for x in side]
        reps.append(np.log(hierarchical_stats(arrays, stat, n_boot, rng)[:, :, 0]).mean(axis=1))
    boot = reps[1] - reps[0]
    d = float(np.mean(np.log(launch_centers(new, how))) - np.mean(np.log(launch_centers(old, how))))
    alpha = 1.0 - level
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return d, float(lo), float(hi), bootstrap_p(boot)


# --- multiplicity, verdicts, planning -----------------------------------------------------------


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given); NaN stays NaN."""
    p = np.asarray(pvalues, dtype=float)
    valid = np.flatnonzero(~np.isnan(p))
    out = np.full(p.shape, np.nan)
    if valid.size == 0:
        return out.tolist()
    m = valid.size
    order = valid[np.argsort(p[valid], kind="stable")]
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[idx]))
        out[idx] = running
    return out.tolist()


def verdict_core(
    d: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    p: np.ndarray,
    margin: float = DEFAULT_MARGIN,
    higher_is_better: bool = False,
    alpha: float = 1 - DEFAULT_LEVEL,
) -> np.ndarray:
    """The verdict rule, on log ratios (vectorised).

    REGRESSED: the change is significant (p < alpha, Holm-adjusted for secondary metrics) AND its
    estimate is at least the margin in the bad direction. UNCHANGED: the whole CI lies inside
    +-margin (a change may be real yet too small to matter). INCONCLUSIVE: anything else.
    """
    up = math.log1p(margin)
    down = math.log1p(-margin) if margin < 1 else -math.inf
    significant = p < alpha
    went_up = significant & (d >= up)
    went_down = significant & (d <= down)
    regressed, improved = (went_down, went_up) if higher_is_better else (went_up, went_down)
    unchanged = (lo >= down) & (hi <= up)
    return np.where(
        regressed, REGRESSED, np.where(improved, IMPROVED, np.where(unchanged, UNCHANGED, INCONCLUSIVE))
    )


def launches_to_settle(
    sd_log: float,
    d: float,
    margin: float,
    level: float = DEFAULT_LEVEL,
    power: float = PLAN_POWER,
    cap: int = PLAN_CAP,
) -> int | None:
    """Launches per side that would likely (with `power`) settle a comparison.

    Plug-in planning: assume the true change is the current estimate `d` and the launch-to-launch
    spread is `sd_log`. If |d| is at least the margin, settling means a significant change; if it is
    inside the margin, settling means a CI inside +-margin. None when more than `cap` are needed.
    """
    m = math.log1p(margin)
    if not math.isfinite(sd_log) or sd_log <= 0:
        return 2
    target = abs(d) if abs(d) >= m else m - abs(d)
    if target <= 0:
        return None
    z = float(special.ndtri(power))
    for k in range(2, cap + 1):
        tcrit = float(special.stdtrit(2 * k - 2, 0.5 + level / 2))
        if (tcrit + z) * sd_log * math.sqrt(2.0 / k) <= target:
            return k
    return None


def minimum_detectable(
    sd_log: float, k_old: int, k_new: int, level: float = DEFAULT_LEVEL, power: float = 0.95
) -> float:
    """The smallest change (as a ratio - 1) detected with `power` given this spread and these launches."""
    df = max(k_old + k_new - 2, 1)
    tcrit = float(special.stdtrit(df, 0.5 + level / 2))
    tpow = float(special.stdtrit(df, power))
    return math.expm1((tcrit + tpow) * sd_log * math.sqrt(1.0 / k_old + 1.0 / k_new))


def pooled_sd(old_log: np.ndarray, new_log: np.ndarray) -> float:
    """Pooled standard deviation of log launch centres (NaN with fewer than 3 launches in all)."""
    n1, n2 = len(old_log), len(new_log)
    if n1 + n2 < 3:
        return float("nan")
    ss = 0.0
    if n1 > 1:
        ss += float(np.var(old_log, ddof=1)) * (n1 - 1)
    if n2 > 1:
        ss += float(np.var(new_log, ddof=1)) * (n2 - 1)
    return math.sqrt(ss / (n1 + n2 - 2))


# --- one metric, end to end ---------------------------------------------------------------------


@dataclass(frozen=True)
class RatioEstimate:
    """new / old for one metric: centres are geometric means of launch centres, so new/old = ratio."""

    n_old: int
    n_new: int
    old_center: float
    new_center: float
    ratio: float
    lo: float | None
    hi: float | None
    p: float | None
    sd_log: float
    method: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def estimate_ratio(
    old: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    how: str = "median",
    method: str = WELCH,
    level: float = DEFAULT_LEVEL,
    n_boot: int = DEFAULT_BOOT,
    rng: np.random.Generator | None = None,
) -> RatioEstimate:
    """Ratio of launch centres with a CI; lo/hi/p are None when a side has a single launch."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    oc = launch_centers(old, how)
    nc = launch_centers(new, how)
    if len(oc) == 0 or len(nc) == 0:
        raise ValueError("each side needs at least one launch")
    if np.any(oc <= 0) or np.any(nc <= 0):
        raise ValueError("ratios need positive values")
    ol, nl = np.log(oc), np.log(nc)
    sd = pooled_sd(ol, nl)
    d = float(nl.mean() - ol.mean())
    lo = hi = p = None
    if len(oc) >= 2 and len(nc) >= 2:
        if method == WELCH:
            dd, a, b, pp, _df = welch_core(ol, nl, level)
            d, lo, hi, p = float(dd), float(a), float(b), float(pp)
        elif min(len(oc), len(nc)) >= BOOTSTRAP_MIN_LAUNCHES:
            d, lo, hi, p = bootstrap_log_ratio(old, new, how, level, n_boot, rng)
        # else: too few launches to resample (no CI, so INCONCLUSIVE): docs/statistics.md
    return RatioEstimate(
        n_old=len(oc),
        n_new=len(nc),
        old_center=geomean(oc),
        new_center=geomean(nc),
        ratio=math.exp(d),
        lo=None if lo is None else math.exp(lo),
        hi=None if hi is None else math.exp(hi),
        p=p,
        sd_log=sd,
        method=method,
    )


def decide(
    est: RatioEstimate,
    p_adjusted: float | None,
    margin: float = DEFAULT_MARGIN,
    higher_is_better: bool = False,
    level: float = DEFAULT_LEVEL,
) -> str:
    if est.lo is None or est.hi is None or p_adjusted is None or math.isnan(p_adjusted):
        return INCONCLUSIVE
    v = verdict_core(
        np.array(math.log(est.ratio)),
        np.array(math.log(est.lo)),
        np.array(math.log(est.hi)),
        np.array(p_adjusted),
        margin,
        higher_is_better,
        1 - level,
    )
    return str(v)


# --- noise --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Noise:
    """Spread of one metric on one side, as fractions (0.03 = 3 %)."""

    launches: int
    cycles_median: int
    within: float  # median over launches of the robust CV of cycles (IQR / 1.349 / median)
    between: float  # SD of log launch medians
    drift: float  # median over launches of (last third median / first third median - 1)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def noise(launches: Sequence[Sequence[float]]) -> Noise:
    cvs, drifts, counts = [], [], []
    for x in launches:
        a = np.asarray(x, dtype=float)
        counts.append(a.size)
        med = float(np.median(a))
        if a.size >= 4 and med > 0:
            q75, q25 = np.percentile(a, [75, 25])
            cvs.append((q75 - q25) / 1.349 / med)
        if a.size >= 9 and med > 0:
            third = a.size // 3
            drifts.append(float(np.median(a[-third:]) / np.median(a[:third]) - 1.0))
    centers = launch_centers(launches)
    between = (
        float(np.std(np.log(centers), ddof=1)) if len(centers) >= 2 and np.all(centers > 0) else float("nan")
    )
    return Noise(
        launches=len(counts),
        cycles_median=int(np.median(counts)) if counts else 0,
        within=float(np.median(cvs)) if cvs else float("nan"),
        between=between,
        drift=float(np.median(drifts)) if drifts else float("nan"),
    )


# --- interleaved (paired) designs ---------------------------------------------------------------


def paired_core(
    old_log: np.ndarray, new_log: np.ndarray, level: float = DEFAULT_LEVEL
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Paired t on log launch centres: launch k of old ran next to launch k of new (an A B / B A pair).

    Returns (d, lo, hi, p, df) like `welch_core`, for the mean of the per-pair differences. Pairing
    removes what the two launches of a pair share (the machine's state at that moment), so a slow
    drift over the run, which moves both launches of a pair together, leaves the estimate alone
    and barely widens the interval; in ABBA order its residue alternates in sign and averages out.
    """
    if old_log.shape[-1] != new_log.shape[-1]:
        raise ValueError("a paired comparison needs the same number of launches per side")
    n = old_log.shape[-1]
    if n < 2:
        raise ValueError("a paired comparison needs at least 2 pairs")
    diff = new_log - old_log
    d = diff.mean(axis=-1)
    se = np.sqrt(diff.var(axis=-1, ddof=1) / n)
    df = np.full(np.shape(d), float(n - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        tcrit = special.stdtrit(df, 0.5 + level / 2)
        p = 2.0 * special.stdtr(df, -np.abs(d / se))
    degenerate = se == 0
    p = np.where(degenerate, np.where(d == 0, 1.0, 0.0), p)
    half = np.where(degenerate, 0.0, tcrit * se)
    return d, d - half, d + half, p, df


def estimate_ratio_paired(
    old: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    how: str = "median",
    level: float = DEFAULT_LEVEL,
) -> RatioEstimate:
    """`estimate_ratio` for an interleaved run: old[k] and new[k] are the two launches of pair k."""
    oc = launch_centers(old, how)
    nc = launch_centers(new, how)
    if len(oc) != len(nc) or len(oc) < 2:
        raise ValueError("a paired comparison needs >= 2 pairs and the same number of launches per side")
    if np.any(oc <= 0) or np.any(nc <= 0):
        raise ValueError("ratios need positive values")
    ol, nl = np.log(oc), np.log(nc)
    d, lo, hi, p, _df = paired_core(ol, nl, level)
    return RatioEstimate(
        n_old=len(oc),
        n_new=len(nc),
        old_center=geomean(oc),
        new_center=geomean(nc),
        ratio=math.exp(float(d)),
        lo=math.exp(float(lo)),
        hi=math.exp(float(hi)),
        p=float(p),
        # The spread that plans more launches: that of a pair difference, per side (/sqrt 2).
        sd_log=float(np.std(nl - ol, ddof=1)) / math.sqrt(2.0),
        method=PAIRED,
    )


# --- drift: do a side's launches trend with time? -----------------------------------------------

DRIFT_MIN_LAUNCHES = 4  # fewer launches than this cannot show a trend


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank), 1-based."""
    order = np.argsort(x, axis=-1, kind="stable")
    ranks = np.empty_like(x, dtype=float)
    np.put_along_axis(ranks, order, np.arange(1, x.shape[-1] + 1, dtype=float) * np.ones_like(x), axis=-1)
    if x.ndim == 1 and len(np.unique(x)) < len(x):  # ties: exact only on the 1-D path (real data)
        for v in np.unique(x):
            tie = x == v
            ranks[tie] = ranks[tie].mean()
    return ranks


EXACT_MAX = 9  # up to this many launches the p-value of rho comes from all n! orders (9! = 362880)


@functools.lru_cache(maxsize=8)
def _rho_null(n: int) -> np.ndarray:
    """|rho| over every ordering of n distinct values, sorted: the exact null distribution."""
    perms = np.array(list(itertools.permutations(range(n))), dtype=float)
    d2 = ((perms - np.arange(n)) ** 2).sum(axis=1)
    return np.sort(np.abs(1.0 - 6.0 * d2 / (n * (n * n - 1))))


def spearman_core(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spearman's rho of y against its position (launch order) along the last axis, and its two-sided p.

    Up to EXACT_MAX launches p is exact (the share of the n! orders of the launches with |rho| at
    least as large); the usual t approximation (t = rho sqrt((n-2)/(1-rho^2)), n-2 df) flags
    5.4-6.6 % of stationary pairs at 8 launches, more than the 5 % it promises (bench/bench_drift.py).
    Beyond EXACT_MAX launches the approximation is used.
    """
    n = y.shape[-1]
    if n < 3:
        raise ValueError("a trend needs at least 3 launches")
    ry = _ranks(np.asarray(y, dtype=float))
    rx = np.arange(1, n + 1, dtype=float)
    ry_c = ry - ry.mean(axis=-1, keepdims=True)
    rx_c = rx - rx.mean()
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = (ry_c * rx_c).sum(axis=-1) / np.sqrt((ry_c**2).sum(axis=-1) * (rx_c**2).sum())
        rho = np.clip(np.nan_to_num(rho), -1.0, 1.0)
        if n <= EXACT_MAX:
            null = _rho_null(n)
            at_least = null.size - np.searchsorted(null, np.abs(rho) - 1e-9, side="left")
            return rho, at_least / null.size
        t = rho * np.sqrt((n - 2) / np.maximum(1.0 - rho**2, 1e-300))
        p = 2.0 * special.stdtr(n - 2, -np.abs(t))
    return rho, p


def theil_sen_core(y: np.ndarray) -> np.ndarray:
    """Theil-Sen slope of y against launch order 0..n-1: the median of all pairwise slopes."""
    n = y.shape[-1]
    i, j = np.triu_indices(n, k=1)
    slopes = (y[..., j] - y[..., i]) / (j - i)
    return np.median(slopes, axis=-1)


@dataclass(frozen=True)
class Trend:
    """How one side's launch centres move with launch order (the order they ran in)."""

    launches: int
    slope: float  # Theil-Sen, as a fraction per launch (0.004 = +0.4 % per launch)
    rho: float  # Spearman's rank correlation with launch order
    p: float  # two-sided, for rho = 0
    p_adjusted: float | None = None  # Holm across the sides tested together

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def trend(centers: Sequence[float] | np.ndarray) -> Trend | None:
    """The trend of launch centres given in the order they ran; None with fewer than 4 launches."""
    c = np.asarray(centers, dtype=float)
    if c.size < DRIFT_MIN_LAUNCHES or np.any(c <= 0):
        return None
    y = np.log(c)
    rho, p = spearman_core(y)
    return Trend(launches=int(c.size), slope=math.expm1(float(theil_sen_core(y))), rho=float(rho), p=float(p))


def trends_holm(trends: Sequence[Trend | None]) -> list[Trend | None]:
    """The same trends with Holm-adjusted p-values across those that were tested."""
    ps = [t.p for t in trends if t is not None]
    adj = iter(holm(ps))
    out: list[Trend | None] = []
    for t in trends:
        out.append(None if t is None else Trend(t.launches, t.slope, t.rho, t.p, float(next(adj))))
    return out


def abba_order(per_side: int) -> list[str]:
    """'A B B A A B B A ...' with `per_side` launches of each side: pair k is launches 2k and 2k+1.

    A linear drift over the run then favours A in one pair and B in the next, so it cancels over
    every two pairs instead of landing on one side.
    """
    out: list[str] = []
    for k in range(per_side):
        out += ["A", "B"] if k % 2 == 0 else ["B", "A"]
    return out
