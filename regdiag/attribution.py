"""Where a change lives: delta primary = sum of delta phases + delta other, and tok/s split.

Verdicts use launch medians (robust to a stalled cycle); attribution uses launch *means*, because
only means add up: mean(cycle) = sum of mean(phase) + mean(other) holds exactly per launch, so the
terms of the sum always equal the total. Each term has its own CI (Welch on per-launch means, or
the hierarchical bootstrap with cycles resampled jointly across phases).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from regdiag import stats


@dataclass(frozen=True)
class Term:
    name: str
    old: float
    new: float
    delta: float
    lo: float | None
    hi: float | None
    share: float | None  # delta / delta primary

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Attribution:
    primary: str
    unit: str
    total: Term
    terms: list[Term]  # the phases, then "other"
    dominant: str | None  # the term holding most of a real change, if one does
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "primary": self.primary,
            "unit": self.unit,
            "total": self.total.to_dict(),
            "terms": [t.to_dict() for t in self.terms],
            "dominant": self.dominant,
            "note": self.note,
        }


def aligned(launches: Sequence[dict[str, list[float]]], primary: str, phases: Sequence[str]) -> bool:
    """True when every launch has every phase for every cycle of the primary (per-cycle parts)."""
    if not phases:
        return False
    for la in launches:
        n = len(la.get(primary, []))
        if n == 0 or any(len(la.get(p, [])) != n for p in phases):
            return False
    return True


def _matrix(la: dict[str, list[float]], primary: str, phases: Sequence[str]) -> np.ndarray:
    cols = [np.asarray(la[primary], float)] + [np.asarray(la[p], float) for p in phases]
    m = np.column_stack(cols)
    other = m[:, 0] - m[:, 1:].sum(axis=1)
    return np.column_stack([m, other])


def attribute(
    old: Sequence[dict[str, list[float]]],
    new: Sequence[dict[str, list[float]]],
    primary: str,
    phases: Sequence[str],
    unit: str = "ms",
    method: str = stats.WELCH,
    level: float = stats.DEFAULT_LEVEL,
    n_boot: int = stats.DEFAULT_BOOT,
    rng: np.random.Generator | None = None,
) -> Attribution | None:
    """Per-launch sample dicts for each side -> the attribution, or None when phases are not per-cycle parts."""
    if not (aligned(old, primary, phases) and aligned(new, primary, phases)):
        return None
    names = [primary, *phases, "other"]
    om = [_matrix(la, primary, phases) for la in old]
    nm = [_matrix(la, primary, phases) for la in new]
    o_means = np.array([m.mean(axis=0) for m in om])  # (k_old, terms)
    n_means = np.array([m.mean(axis=0) for m in nm])
    delta = n_means.mean(axis=0) - o_means.mean(axis=0)
    lo: list[Any] = [None] * len(names)
    hi: list[Any] = [None] * len(names)
    if len(om) >= 2 and len(nm) >= 2:
        if method == stats.BOOTSTRAP:
            rng = rng if rng is not None else np.random.default_rng(0)
            bo = stats.hierarchical_stats(om, np.mean, n_boot, rng).mean(axis=1)
            bn = stats.hierarchical_stats(nm, np.mean, n_boot, rng).mean(axis=1)
            alpha = 1 - level
            q = np.quantile(bn - bo, [alpha / 2, 1 - alpha / 2], axis=0)
            lo, hi = q[0].tolist(), q[1].tolist()
        else:
            _d, a, b, _p, _df = stats.welch_core(o_means.T, n_means.T, level)
            lo, hi = a.tolist(), b.tolist()
    total_delta = float(delta[0])
    terms = []
    for i, name in enumerate(names):
        share = float(delta[i] / total_delta) if total_delta != 0 else None
        terms.append(
            Term(
                name=name,
                old=float(o_means[:, i].mean()),
                new=float(n_means[:, i].mean()),
                delta=float(delta[i]),
                lo=None if lo[i] is None else float(lo[i]),
                hi=None if hi[i] is None else float(hi[i]),
                share=share,
            )
        )
    total, parts = terms[0], terms[1:]
    return Attribution(primary, unit, total, parts, _dominant(total, parts))


def _dominant(total: Term, parts: list[Term]) -> str | None:
    """The part carrying more than half of a change whose CI excludes zero."""
    if total.lo is None or total.hi is None or (total.lo <= 0 <= total.hi):
        return None
    best = max(parts, key=lambda t: abs(t.delta))
    if best.share is not None and best.share > 0.5 and best.lo is not None and best.hi is not None:
        if not (best.lo <= 0 <= best.hi):
            return best.name
    return None


# --- tokens per second --------------------------------------------------------------------------


@dataclass
class Side:
    tok_s: float  # geometric mean over launches of sum(accept) / sum(cycle)
    accept_len: float
    cycle: float  # mean cycle, in the primary's unit
    measured_tok_s: float | None = None
    per_launch: list[float] = field(default_factory=list)

    @property
    def mismatch(self) -> float | None:
        """|measured / (accept_len / cycle) - 1|, where the run also measured tok/s itself."""
        if self.measured_tok_s is None or self.tok_s <= 0:
            return None
        return abs(self.measured_tok_s / self.tok_s - 1.0)


@dataclass
class Throughput:
    old: Side
    new: Side
    ratio: float
    lo: float | None
    hi: float | None
    accept_ratio: float
    cycle_ratio: float
    verdict: str

    def to_dict(self) -> dict[str, object]:
        def side(s: Side) -> dict[str, object]:
            d = asdict(s)
            d["mismatch"] = s.mismatch
            return d

        return {
            "old": side(self.old),
            "new": side(self.new),
            "ratio": self.ratio,
            "lo": self.lo,
            "hi": self.hi,
            "accept_ratio": self.accept_ratio,
            "cycle_ratio": self.cycle_ratio,
            "verdict": self.verdict,
        }


_TO_SECONDS = {"ms": 1e-3, "us": 1e-6, "s": 1.0, "ns": 1e-9}


def _side(launches: Sequence[dict[str, object]], primary: str, unit: str, batch: int) -> Side | None:
    scale = _TO_SECONDS.get(unit)
    if scale is None:
        return None
    per, accs, cycs, measured = [], [], [], []
    for la in launches:
        samples = la["samples"]
        values = la["values"]
        scalars = la["scalars"]
        assert isinstance(samples, dict) and isinstance(values, dict) and isinstance(scalars, dict)
        cyc = np.asarray(samples.get(primary, []), float)
        acc = np.asarray(values.get("accept_len", []), float)
        if cyc.size == 0:
            continue
        if acc.size == cyc.size:
            total_acc = float(acc.sum())
        elif isinstance(scalars.get("accept_len_mean"), (int, float)):
            total_acc = float(scalars["accept_len_mean"]) * cyc.size  # type: ignore[arg-type]
        elif acc.size:
            total_acc = float(acc.mean()) * cyc.size
        else:
            return None
        t = batch * total_acc / (float(cyc.sum()) * scale)
        per.append(t)
        accs.append(total_acc / cyc.size)
        cycs.append(float(cyc.mean()))
        m = scalars.get("tok_s")
        if isinstance(m, (int, float)) and not isinstance(m, bool) and m > 0:
            measured.append(float(m))
    if not per or min(per) <= 0:
        return None
    return Side(
        tok_s=stats.geomean(np.array(per)),
        accept_len=stats.geomean(np.array(accs)),
        cycle=stats.geomean(np.array(cycs)),
        measured_tok_s=stats.geomean(np.array(measured)) if len(measured) == len(per) else None,
        per_launch=per,
    )


def throughput(
    old: Sequence[dict[str, object]],
    new: Sequence[dict[str, object]],
    primary: str,
    unit: str,
    margin: float = stats.DEFAULT_MARGIN,
    method: str = stats.WELCH,
    level: float = stats.DEFAULT_LEVEL,
    rng: np.random.Generator | None = None,
    batch: tuple[int, int] = (1, 1),
) -> Throughput | None:
    """tok/s = batch x accept_len / cycle per launch, compared like any metric (higher is better), and
    split exactly into its two factors: tok/s ratio = accept_len ratio / cycle ratio (same batch)."""
    o = _side(old, primary, unit, batch[0])
    n = _side(new, primary, unit, batch[1])
    if o is None or n is None:
        return None
    est = stats.estimate_ratio(
        [[t] for t in o.per_launch],
        [[t] for t in n.per_launch],
        how="mean",
        # One number per launch: the hierarchical bootstrap reduces to resampling launches.
        method=method,
        level=level,
        rng=rng,
    )
    verdict = stats.decide(est, est.p, margin, higher_is_better=True, level=level)
    return Throughput(
        old=o,
        new=n,
        ratio=est.ratio,
        lo=est.lo,
        hi=est.hi,
        accept_ratio=n.accept_len / o.accept_len,
        cycle_ratio=n.cycle / o.cycle,
        verdict=verdict,
    )


def fmt_share(x: float | None) -> str:
    return "" if x is None or not math.isfinite(x) else f"{100 * x:.0f} %"
