"""Classify one bisect step against its endpoints, with a confidence interval. Pure numbers.

Every environment is measured by launches (fresh processes); each launch is reduced to the median
of its cycles, and everything here works on the log of those launch medians (so 10 -> 12 ms and
20 -> 24 ms are the same step). For a point x between a good endpoint g and a bad endpoint b:

    theta = (mean log x - mean log g) / (mean log b - mean log g)

0 means "as fast as good", 1 "as slow as bad". Its CI comes from the delta method on the three
(or, for an effect measured as a difference of two pairs, four) group means, with Welch-
Satterthwaite degrees of freedom and Student's t: the same Welch-on-log-launch-medians approach as
`regdiag compare` (regdiag.stats), extended from a difference of two means to a ratio of contrasts.

    BAD           the whole CI lies above 1/2
    GOOD          the whole CI lies below 1/2
    MORE          neither yet: measure more launches
    PARTIAL       at the launch cap, the CI excludes both 0 and 1: x lies truly in between
                  (the bracket holds more than one cause, or a cause that acts in part)
    INCONCLUSIVE  at the launch cap, anything else: no guess is made

Whether the two endpoints differ at all (the phantom check) is `regdiag.stats`' own verdict rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import special

from regdiag import direction, stats

BAD = "BAD"
GOOD = "GOOD"
MORE = "MORE"
PARTIAL = "PARTIAL"
INCONCLUSIVE = "INCONCLUSIVE"
SKIP = "SKIP"

REPRODUCED = "REPRODUCED"
NOT_REPRODUCED = "NOT-REPRODUCED"

LEVEL = 0.95
# A group whose launches happen to agree exactly would claim infinite precision; no real launch-to-
# launch spread is below half a percent, so the spread used is never smaller than that.
MIN_SD_LOG = 0.005


@dataclass(frozen=True)
class Theta:
    theta: float
    lo: float
    hi: float
    df: float
    launches: dict[str, int]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _group(values: Sequence[float]) -> tuple[float, float, int]:
    x = np.log(np.asarray(values, dtype=float))
    n = int(x.size)
    sd = float(np.std(x, ddof=1)) if n >= 2 else math.nan
    return float(x.mean()), max(sd, MIN_SD_LOG), n


def ratio_of_contrasts(
    samples: Mapping[str, Sequence[float]],
    num: Mapping[str, float],
    den: Mapping[str, float],
    level: float = LEVEL,
) -> Theta:
    """theta = sum(num[g] * mu_g) / sum(den[g] * mu_g), mu_g the mean log launch value of group g.

    Delta method: d theta / d mu_g = (num[g] - theta * den[g]) / D, so
    var theta = sum c_g^2 s_g^2 / n_g; degrees of freedom by Welch-Satterthwaite. Every group needs
    at least 2 launches. When the denominator's CI includes 0 the interval is unbounded.
    """
    groups = {g: _group(samples[g]) for g in set(num) | set(den)}
    for g, (_m, _s, n) in groups.items():
        if n < 2:
            raise ValueError(f"group {g!r} needs at least 2 launches (has {n})")
    n_val = sum(c * groups[g][0] for g, c in num.items())
    d_val = sum(c * groups[g][0] for g, c in den.items())
    counts = {g: v[2] for g, v in groups.items()}
    if d_val == 0.0:
        return Theta(math.nan, -math.inf, math.inf, 0.0, counts)
    theta = n_val / d_val
    terms = []
    for g, (_m, sd, n) in groups.items():
        c = (num.get(g, 0.0) - theta * den.get(g, 0.0)) / d_val
        terms.append((c * c * sd * sd / n, n))
    var = sum(t for t, _ in terms)
    df_den = sum(t * t / (n - 1) for t, n in terms)
    df = var * var / df_den if df_den > 0 else float(sum(n for _, n in terms) - len(terms))
    tcrit = float(special.stdtrit(df, 0.5 + level / 2))
    half = tcrit * math.sqrt(var)
    # Fieller's caveat in one line: a denominator that is not clearly away from 0 has no usable ratio.
    d_se = math.sqrt(sum((den.get(g, 0.0) ** 2) * sd * sd / n for g, (_m, sd, n) in groups.items()))
    if abs(d_val) <= tcrit * d_se:
        return Theta(theta, -math.inf, math.inf, df, counts)
    return Theta(theta, theta - half, theta + half, df, counts)


Group = tuple[str, Sequence[float]]  # (environment key, launch values): one key, one group


def _combine(parts: Sequence[tuple[Group, float, float]], level: float) -> Theta:
    samples: dict[str, Sequence[float]] = {}
    num: dict[str, float] = {}
    den: dict[str, float] = {}
    for (key, values), cn, cd in parts:
        samples[key] = values
        num[key] = num.get(key, 0.0) + cn
        den[key] = den.get(key, 0.0) + cd
    return ratio_of_contrasts(samples, num, den, level)


def theta_point(x: Group, good: Group, bad: Group, level: float = LEVEL) -> Theta:
    """Where x lies between good (0) and bad (1)."""
    return _combine(((x, 1.0, 0.0), (good, -1.0, -1.0), (bad, 0.0, 1.0)), level)


def theta_effect(x_hi: Group, x_lo: Group, ref_hi: Group, ref_lo: Group, level: float = LEVEL) -> Theta:
    """The step x_lo -> x_hi as a fraction of the reference step ref_lo -> ref_hi (1: the same effect).

    Used to ask whether a factor does alone, or with a subset of the others, what it did in context.
    An environment that appears twice (x_lo is ref_lo) is one group, so its noise is counted once.
    """
    return _combine(((x_hi, 1.0, 0.0), (x_lo, -1.0, 0.0), (ref_hi, 0.0, 1.0), (ref_lo, 0.0, -1.0)), level)


def classify(t: Theta, final: bool) -> str:
    if t.lo > 0.5:
        return BAD
    if t.hi < 0.5:
        return GOOD
    if not final:
        return MORE
    if t.lo > 0.0 and t.hi < 1.0:
        return PARTIAL
    return INCONCLUSIVE


def classify_alone(t: Theta, final: bool, part: float = 0.75) -> str:
    """A factor tried alone against its effect in context (theta_effect): GOOD (it does not do it
    alone: the CI lies below 1/2), BAD (it does most of it alone: above 1/2), PARTIAL (it does a part:
    the CI lies within (0, `part`), `part` three quarters), said as soon as the CI shows it; at the
    launch cap anything else is INCONCLUSIVE. GOOD and PARTIAL send the search after its partners,
    so a PARTIAL needs its CI that far from 1: under a wide launch-to-launch spread, a factor that
    does its whole effect alone read within (0, 1) at the cap, or below 0.9 at one of its looks,
    often enough to start partner searches of 100+ launches (bench/bench_bisect.py --held-out)."""
    if t.lo > 0.5:
        return BAD
    if t.hi < 0.5:
        return GOOD
    if t.hi < part and t.lo > 0.0:
        return PARTIAL
    return INCONCLUSIVE if final else MORE


@dataclass(frozen=True)
class Regression:
    verdict: str  # REPRODUCED, NOT-REPRODUCED, MORE, INCONCLUSIVE
    ratio: float
    lo: float
    hi: float
    good_ms: float
    bad_ms: float
    launches: tuple[int, int]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class NoDirection(ValueError):
    """The metric is context (a setting, not an outcome): nothing is better or worse."""


def regression(
    good: Sequence[float],
    bad: Sequence[float],
    margin: float,
    final: bool,
    level: float = LEVEL,
    better: str = direction.LOWER,
) -> Regression:
    """Is bad worse than good by more than the margin (slower for a time, lower for a bandwidth or a
    rate: `better` is the metric's direction, regdiag/direction.py)? regdiag.stats' Welch test and
    verdict rule."""
    if better == direction.CONTEXT:
        raise NoDirection(
            "a context metric (a setting of the measurement, not an outcome) has no regression to bisect"
        )
    g = np.log(np.asarray(good, dtype=float))
    b = np.log(np.asarray(bad, dtype=float))
    d, lo, hi, p, _df = stats.welch_core(g, b, level)
    up = better == direction.HIGHER
    v = str(stats.verdict_core(d, lo, hi, p, margin, higher_is_better=up, alpha=1 - level))
    if v == stats.REGRESSED:
        verdict = REPRODUCED
    elif v in (stats.UNCHANGED, stats.IMPROVED):
        verdict = NOT_REPRODUCED
    else:
        verdict = INCONCLUSIVE if final else MORE
    return Regression(
        verdict,
        math.exp(float(d)),
        math.exp(float(lo)),
        math.exp(float(hi)),
        stats.geomean(np.asarray(good, dtype=float)),
        stats.geomean(np.asarray(bad, dtype=float)),
        (len(good), len(bad)),
    )
