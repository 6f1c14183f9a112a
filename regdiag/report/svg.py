"""Small SVG charts drawn by hand: no plotting library, no script, nothing fetched from a network.

Three kinds, enough for a comparison report: distributions of two sides (box + whiskers + launch
medians as dots), a dot series per launch, and line traces against time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

import numpy as np

OLD_COLOR = "#4C72B0"
NEW_COLOR = "#DD8452"
GRID = "#dddddd"
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (the 1-2-5 rule)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks: list[float] = []
    v = start
    while v <= hi + step * 0.5 and len(ticks) < 50:
        ticks.append(round(v, 10))
        v += step
    return ticks


def _fmt(v: float) -> str:
    return f"{v:.6g}"


class Scale:
    def __init__(self, lo: float, hi: float, a: float, b: float) -> None:
        self.lo, self.hi, self.a, self.b = lo, hi, a, b

    def __call__(self, v: float) -> float:
        span = self.hi - self.lo or 1.0
        return self.a + (v - self.lo) / span * (self.b - self.a)


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (
        f'<svg width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>" + "".join(body) + "</svg>"
    )


def _x_axis(sx: Scale, ticks: list[float], y0: float, y1: float, label: str) -> list[str]:
    out = []
    for t in ticks:
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" stroke="{GRID}"/>')
        out.append(f'<text x="{x:.1f}" y="{y1 + 13:.1f}" text-anchor="middle" {FONT}>{_fmt(t)}</text>')
    if label:
        out.append(
            f'<text x="{(sx.a + sx.b) / 2:.1f}" y="{y1 + 27:.1f}" text-anchor="middle" {FONT}>{escape(label)}</text>'
        )
    return out


def distributions(
    rows: Sequence[tuple[str, Sequence[float], Sequence[float], Sequence[float], Sequence[float]]],
    unit: str,
    title: str,
    width: int = 640,
    units: Sequence[str] | None = None,
) -> str:
    """One row per metric: (name, old cycles, new cycles, old launch centres, new launch centres).

    Each row has its own x range (phases differ by 10x); the boxes are the 25-75 % of all cycles, the
    whiskers 5-95 %, the dots the per-launch centres (the unit of evidence). Each row's axis is
    labelled with its unit (`units`, one per row; else `unit` for all), after its last tick.
    """
    left, right, row_h = 90, 44, 46
    height = 20 + row_h * len(rows) + 10
    body = [f'<text x="{left}" y="13" {FONT} font-weight="bold">{escape(title)}</text>']
    for i, (name, old, new, oc, nc) in enumerate(rows):
        top = 20 + i * row_h
        allv = np.concatenate([np.asarray(old, float), np.asarray(new, float)])
        if allv.size == 0:
            continue
        lo, hi = np.percentile(allv, [1, 99])
        lo, hi = min(lo, *oc, *nc), max(hi, *oc, *nc)
        pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
        sx = Scale(lo - pad, hi + pad, left, width - right)
        body.append(f'<text x="{left - 6}" y="{top + 22}" text-anchor="end" {FONT}>{escape(name)}</text>')
        ticks = [t for t in nice_ticks(lo - pad, hi + pad, 4) if lo - pad <= t <= hi + pad]
        for t in ticks:
            x = sx(t)
            body.append(
                f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{top + 34:.1f}" stroke="{GRID}"/>'
            )
            body.append(
                f'<text x="{x:.1f}" y="{top + 44:.1f}" text-anchor="middle" {FONT} fill="#666">{_fmt(t)}</text>'
            )
        row_unit = units[i] if units is not None else unit
        body.append(
            f'<text x="{width - right + 6}" y="{top + 44:.1f}" {FONT} fill="#666" class="unit">'
            f"{escape(row_unit or 'no unit')}</text>"
        )
        for j, (vals, centres, color) in enumerate(((old, oc, OLD_COLOR), (new, nc, NEW_COLOR))):
            v = np.asarray(vals, float)
            if v.size == 0:
                continue
            y = top + 8 + j * 16
            p5, q1, med, q3, p95 = np.percentile(v, [5, 25, 50, 75, 95])
            body.append(
                f'<line x1="{sx(p5):.1f}" y1="{y:.1f}" x2="{sx(p95):.1f}" y2="{y:.1f}" stroke="{color}"/>'
            )
            body.append(
                f'<rect x="{sx(q1):.1f}" y="{y - 5:.1f}" width="{max(sx(q3) - sx(q1), 1):.1f}" height="10" '
                f'fill="{color}" fill-opacity="0.25" stroke="{color}"/>'
            )
            body.append(
                f'<line x1="{sx(med):.1f}" y1="{y - 5:.1f}" x2="{sx(med):.1f}" y2="{y + 5:.1f}" stroke="{color}" stroke-width="2"/>'
            )
            for cv in centres:
                body.append(
                    f'<circle cx="{sx(cv):.1f}" cy="{y:.1f}" r="2.5" fill="{color}"><title>{_fmt(cv)} {escape(row_unit)}</title></circle>'
                )
    return _svg(width, height, body, title)


def launch_series(old: Sequence[float], new: Sequence[float], unit: str, title: str, width: int = 640) -> str:
    """Per-launch centres in launch order, old then new, with each side's geometric mean as a line."""
    left, right, top, bottom = 60, 20, 24, 40
    height = 220
    vals = [v for v in (*old, *new) if v > 0]
    if not vals:
        return _svg(width, 40, [f'<text x="10" y="20" {FONT}>no data</text>'], title)
    lo, hi = min(vals), max(vals)
    pad = (hi - lo) * 0.15 or hi * 0.02 or 1.0
    sy = Scale(lo - pad, hi + pad, height - bottom, top)
    n = len(old) + len(new)
    sx = Scale(-0.5, n - 0.5, left, width - right)
    body = [f'<text x="{left}" y="14" {FONT} font-weight="bold">{escape(title)}</text>']
    for t in nice_ticks(lo - pad, hi + pad, 4):
        if lo - pad <= t <= hi + pad:
            y = sy(t)
            body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="{GRID}"/>')
            body.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" {FONT}>{_fmt(t)}</text>')
    for side, (series, color, offset) in enumerate(((old, OLD_COLOR, 0), (new, NEW_COLOR, len(old)))):
        pos = [v for v in series if v > 0]
        if pos:
            gm = math.exp(sum(math.log(v) for v in pos) / len(pos))
            x0, x1 = sx(offset - 0.4), sx(offset + len(series) - 0.6)
            body.append(
                f'<line x1="{x0:.1f}" y1="{sy(gm):.1f}" x2="{x1:.1f}" y2="{sy(gm):.1f}" stroke="{color}" stroke-dasharray="4 3"/>'
            )
        for i, v in enumerate(series):
            body.append(
                f'<circle cx="{sx(offset + i):.1f}" cy="{sy(v):.1f}" r="4" fill="{color}">'
                f"<title>{'old' if side == 0 else 'new'} launch {i}: {_fmt(v)} {escape(unit)}</title></circle>"
            )
        label = "old launches" if side == 0 else "new launches"  # the x axis: launches in run order
        if series:
            body.append(
                f'<text x="{sx(offset + (len(series) - 1) / 2):.1f}" y="{height - bottom + 16}" text-anchor="middle" {FONT} fill="{color}">{label}</text>'
            )
    body.append(
        f'<text x="12" y="{(top + height - bottom) / 2:.1f}" {FONT} transform="rotate(-90 12 {(top + height - bottom) / 2:.1f})" text-anchor="middle" class="unit">{escape(unit)}</text>'
    )
    body.append(
        f'<text x="{(left + width - right) / 2:.1f}" y="{height - 6}" text-anchor="middle" {FONT} class="unit">'
        "launch, in run order (dashed: geometric mean of each side)</text>"
    )
    return _svg(width, height, body, title)


def traces(
    old: Sequence[Sequence[tuple[float, float]]],
    new: Sequence[Sequence[tuple[float, float]]],
    unit: str,
    title: str,
    width: int = 640,
) -> str:
    """One line per launch (value against seconds since the launch started), old and new colours."""
    left, right, top, bottom = 60, 20, 24, 40
    height = 220
    pts = [p for tr in (*old, *new) for p in tr]
    if not pts:
        return _svg(width, 40, [f'<text x="10" y="20" {FONT}>no clock samples in either run</text>'], title)
    tmax = max(t for t, _ in pts) or 1.0
    vlo, vhi = min(v for _, v in pts), max(v for _, v in pts)
    pad = (vhi - vlo) * 0.1 or vhi * 0.02 or 1.0
    sx = Scale(0.0, tmax, left, width - right)
    sy = Scale(vlo - pad, vhi + pad, height - bottom, top)
    body = [f'<text x="{left}" y="14" {FONT} font-weight="bold">{escape(title)}</text>']
    for t in nice_ticks(vlo - pad, vhi + pad, 4):
        if vlo - pad <= t <= vhi + pad:
            y = sy(t)
            body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="{GRID}"/>')
            body.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" {FONT}>{_fmt(t)}</text>')
    body += _x_axis(
        sx,
        [t for t in nice_ticks(0, tmax, 5) if t <= tmax],
        height - bottom,
        height - bottom,
        "s since launch start",
    )
    for series, color in ((old, OLD_COLOR), (new, NEW_COLOR)):
        for tr in series:
            if len(tr) < 2:
                continue
            path = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in tr)
            body.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-opacity="0.7"/>')
    body.append(
        f'<text x="12" y="{(top + height - bottom) / 2:.1f}" {FONT} transform="rotate(-90 12 {(top + height - bottom) / 2:.1f})" text-anchor="middle">{escape(unit)}</text>'
    )
    return _svg(width, height, body, title)
