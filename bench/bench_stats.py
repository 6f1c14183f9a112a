"""How often does each comparison rule cry wolf, and how often does it catch a real 5 % regression?

Simulated launches: every launch draws its own offset (2 % launch-to-launch noise, log-normal) and
every cycle its own noise (3 % cycle-to-cycle, log-normal). A/A: both sides from the same
distribution; A/B: the new side 5 % slower. The regdiag rules run through the exact functions
`regdiag compare` uses (regdiag.stats); the others are:

- pooled Mann-Whitney: one U test over all cycles of all launches, p < 0.05 (Google Benchmark's
  U test on repetitions; what most ad-hoc scripts do);
- asv: Mann-Whitney over all samples with p < 0.002 AND a ratio of medians > 1.1 (asv compare's
  defaults);
- pyperf: Student's t with pooled variance over all values at 95 % (pyperf compare_to's
  `is_significant`), regression when the new mean is higher.

Writes docs/bench/stats.md. Usage: python bench/bench_stats.py [--trials N] [--boot-trials N]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from regdiag import stats  # noqa: E402

WITHIN = 0.03
BETWEEN = 0.02
EFFECT = 0.05
MARGIN = stats.DEFAULT_MARGIN
BASE_MS = 20.0


def simulate(
    rng: np.random.Generator,
    trials: int,
    k: int,
    n: int,
    effect: float,
    outliers: float = 0.0,
    between: float = BETWEEN,
) -> np.ndarray:
    """Cycle times (trials, k, n) in ms."""
    launch = rng.normal(0.0, between, size=(trials, k, 1))
    cycle = rng.normal(0.0, WITHIN, size=(trials, k, n))
    x = BASE_MS * np.exp(launch + cycle) * (1.0 + effect)
    if outliers:
        # Occasional stalls (a page fault, a GC pause): 1.5x cycles.
        x = np.where(rng.random(x.shape) < outliers, x * 1.5, x)
    return x


def regdiag_welch(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    ol = np.log(np.median(old, axis=-1))
    nl = np.log(np.median(new, axis=-1))
    d, lo, hi, p, _df = stats.welch_core(ol, nl)
    return stats.verdict_core(d, lo, hi, p, MARGIN)


def regdiag_bootstrap(old: np.ndarray, new: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = []
    for o, nw in zip(old, new, strict=True):
        d, lo, hi, p = stats.bootstrap_log_ratio(list(o), list(nw), rng=rng)
        out.append(stats.verdict_core(np.array(d), np.array(lo), np.array(hi), np.array(p), MARGIN))
    return np.array(out)


def pooled(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1)


def mann_whitney(old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p two-sided, ratio of medians) over all cycles pooled."""
    a, b = pooled(old), pooled(new)
    p = sps.mannwhitneyu(b, a, alternative="two-sided", axis=-1, method="asymptotic").pvalue
    ratio = np.median(b, axis=-1) / np.median(a, axis=-1)
    return p, ratio


def pyperf_t(old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pyperf's is_significant: pooled-variance t over all values, 95 % two-sided. (significant, t)."""
    a, b = pooled(old), pooled(new)
    n = a.shape[-1]
    pooled_var = (a.var(axis=-1, ddof=1) * (n - 1) + b.var(axis=-1, ddof=1) * (n - 1)) / (2 * n - 2)
    t = (b.mean(axis=-1) - a.mean(axis=-1)) / np.sqrt(pooled_var * 2 / n)
    crit = sps.t.ppf(0.975, 2 * n - 2)
    return np.abs(t) >= crit, t


def rates(verdicts: np.ndarray) -> dict[str, float]:
    return {v: float(np.mean(verdicts == v)) for v in stats.VERDICTS}


def wilson(p: float, n: int) -> tuple[float, float]:
    """95 % Wilson interval for a rate, so the table says how exact each rate is."""
    z = 1.96
    den = 1 + z * z / n
    c = (p + z * z / (2 * n)) / den
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, c - h), min(1.0, c + h)


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--trials", type=int, default=4000, help="trials per cell for the vectorised rules (default 4000)"
    )
    ap.add_argument(
        "--boot-trials", type=int, default=1000, help="trials per cell for the bootstrap (default 1000)"
    )
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "stats.md"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    c0 = time.process_time()
    rng = np.random.default_rng(args.seed)
    T = args.trials

    # 1. Welch on log launch medians over a grid of launches x cycles: choose the default.
    grid_k = [3, 4, 5, 6, 7, 8, 10]
    grid_n = [10, 30, 100]
    grid: dict[tuple[int, int], tuple[float, float, float]] = {}
    for k in grid_k:
        for n in grid_n:
            aa = regdiag_welch(simulate(rng, T, k, n, 0.0), simulate(rng, T, k, n, 0.0))
            ab = regdiag_welch(simulate(rng, T, k, n, 0.0), simulate(rng, T, k, n, EFFECT))
            grid[(k, n)] = (
                rates(aa)[stats.REGRESSED],
                rates(ab)[stats.REGRESSED],
                rates(aa)[stats.UNCHANGED],
            )
        print(f"welch grid k={k} done ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    chosen = None
    for k in grid_k:
        for n in grid_n:
            fa, power, _ = grid[(k, n)]
            if fa <= 0.05 and power >= 0.95:
                chosen = (k, n)
                break
        if chosen:
            break

    # 2. Every rule side by side at 3 launches (DESIGN's minimum) and at the recommended default.
    cells = sorted({(3, 30), (stats.RECOMMENDED_LAUNCHES, stats.RECOMMENDED_CYCLES)})
    rows = []
    for k, n in cells:
        for label, effect in (("A/A", 0.0), ("A/B +5 %", EFFECT)):
            for scenario, outl in (("log-normal", 0.0), ("1 % stalls x1.5", 0.01)):
                if scenario != "log-normal" and label != "A/A":
                    continue
                old = simulate(rng, T, k, n, 0.0, outl)
                new = simulate(rng, T, k, n, effect, outl)
                w = regdiag_welch(old, new)
                p, ratio = mann_whitney(old, new)
                sig_t, t = pyperf_t(old, new)
                # The bootstrap is the slow rule (50 ms a comparison): run it on the main rows only.
                bt = 0 if outl else min(args.boot_trials, T)
                b = regdiag_bootstrap(old[:bt], new[:bt], rng) if bt else np.array([])
                rows.append(
                    {
                        "cell": f"{k} x {n}",
                        "case": label if not outl else f"{label}, {scenario}",
                        "welch": float(np.mean(w == stats.REGRESSED)),
                        "welch_unchanged": float(np.mean(w == stats.UNCHANGED)),
                        "boot": float(np.mean(b == stats.REGRESSED)) if bt else float("nan"),
                        "boot_n": bt,
                        "mw": float(np.mean((p < 0.05) & (ratio > 1))),
                        "mw_any": float(np.mean(p < 0.05)),
                        "asv": float(np.mean((p < 0.002) & (ratio > 1.1))),
                        "pyperf": float(np.mean(sig_t & (t > 0))),
                        "pyperf_any": float(np.mean(sig_t)),
                    }
                )
        print(f"rules at {k} x {n} done ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    # 3. How much slack the default has if the machine is noisier than 2 % between launches.
    dk, dn = stats.RECOMMENDED_LAUNCHES, stats.RECOMMENDED_CYCLES
    sensitivity = []
    for between in (0.01, 0.02, 0.0225, 0.025, 0.03, 0.04):
        aa = regdiag_welch(
            simulate(rng, T, dk, dn, 0.0, between=between), simulate(rng, T, dk, dn, 0.0, between=between)
        )
        ab = regdiag_welch(
            simulate(rng, T, dk, dn, 0.0, between=between), simulate(rng, T, dk, dn, EFFECT, between=between)
        )
        sensitivity.append(
            (between, float(np.mean(aa == stats.REGRESSED)), float(np.mean(ab == stats.REGRESSED)))
        )
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0

    lines = [
        "## Statistics: false alarms and power (bench/bench_stats.py)",
        "",
        f"Command: `python bench/bench_stats.py --trials {T} --boot-trials {args.boot_trials} --seed {args.seed}` "
        f"({elapsed:.0f} s wall, {cpu:.0f} s CPU on {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"numpy {np.__version__}).",
        "",
        f"Simulated launches: {100 * BETWEEN:.0f} % launch-to-launch and {100 * WITHIN:.0f} % cycle-to-cycle noise "
        f"(log-normal), a {BASE_MS:.0f} ms cycle. A/A: both sides from one distribution; A/B: the new side "
        f'{100 * EFFECT:.0f} % slower. Margin {100 * MARGIN:.0f} %. "REGRESSED" for the other rules means their '
        'own test said "significantly slower". Rates over '
        f"{T} trials per cell (bootstrap: {args.boot_trials}); the 95 % Wilson interval of a rate near 5 % over "
        f"{T} trials is about +-{100 * (wilson(0.05, T)[1] - 0.05):.1f} points.",
        "",
        "### Welch on log launch medians (the default): launches x cycles per side",
        "",
        "Each cell: A/A false REGRESSED / power to call +5 % REGRESSED / A/A called UNCHANGED.",
        "",
        "| launches \\ cycles | " + " | ".join(str(n) for n in grid_n) + " |",
        "| --- | " + " | ".join("---" for _ in grid_n) + " |",
    ]
    for k in grid_k:
        cells_txt = []
        for n in grid_n:
            fa, pw, un = grid[(k, n)]
            mark = "**" if chosen == (k, n) else ""
            cells_txt.append(f"{mark}{pct(fa)} / {pct(pw)} / {pct(un)}{mark}")
        lines.append(f"| {k} | " + " | ".join(cells_txt) + " |")
    lines += [
        "",
        (
            f"Smallest cell with A/A <= 5 % and power >= 95 %: **{chosen[0]} launches x {chosen[1]} cycles** per side. "
            if chosen
            else "No cell reached A/A <= 5 % with power >= 95 %. "
        )
        + (
            f"The recommended default (regdiag.stats) is **{dk} launches x {dn} cycles**: "
            f"{pct(grid[(dk, dn)][1])} power, {pct(grid[(dk, dn)][0])} false REGRESSED; it keeps >= 95 % power up to "
            f"{100 * max([b for b, _fa, pw in sensitivity if pw >= 0.95], default=0):.1f} % launch-to-launch noise "
            "(last table). 3 launches per side reach only "
            f"{pct(grid[(3, 30)][1])}."
        ),
        "",
        "### Every rule on the same simulated data",
        "",
        'Rate of "REGRESSED" (for A/A rows: false alarms; for A/B rows: power). In brackets: the rate of '
        '"significantly different" in either direction, which is what those tools print.',
        "",
        "| launches x cycles | case | regdiag Welch | regdiag bootstrap | pooled Mann-Whitney | asv (p<0.002, >1.1x) | pyperf t-test |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['cell']} | {r['case']} | {pct(r['welch'])} | {pct(r['boot']) if r['boot_n'] else '-'} | {pct(r['mw'])} ({pct(r['mw_any'])}) "
            f"| {pct(r['asv'])} | {pct(r['pyperf'])} ({pct(r['pyperf_any'])}) |"
        )
    lines += [
        "",
        f"### Slack of the default ({dk} launches x {dn} cycles, Welch) when launches vary more",
        "",
        "| launch-to-launch noise | A/A false REGRESSED | power for +5 % |",
        "| --- | --- | --- |",
    ]
    for between, fa, pw in sensitivity:
        lines.append(f"| {100 * between:.2g} % | {pct(fa)} | {pct(pw)} |")
    lines.append("")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
