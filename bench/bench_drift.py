"""Drift is not a regression: sequential vs interleaved (ABBA) designs under five noise models.

Each simulated comparison measures 8 launches x 30 cycles per side (the recommended default) with 2 %
launch-to-launch and 3 % cycle-to-cycle noise (log-normal), margin 2 %, through the functions
`regdiag compare` runs (regdiag.stats). Noise models of the launch offsets:

- normal: N(0, 2 %);
- heavy-tailed: Student t with 3 df, scaled to a 2 % SD;
- bimodal: normal, and 20 % of launches 6 % slower;
- outlier cycles: normal, and 1 % of cycles at 3x;
- drift: normal plus +0.4 % per launch over the whole run (launch position in run order).

Designs: sequential (all old launches, then all new: two `regdiag probe` runs one after the other;
compared by Welch) and interleaved (`regdiag ab`: A B B A A B B A ..., compared by the paired t on
the ABBA pairs). The drift check is the one compare runs: Spearman's rho of each side's launch
medians against launch order, Holm across the two sides, p < 0.05.

Writes docs/bench/drift.md. Usage: python bench/bench_drift.py [--trials N] [--seed S]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from regdiag import stats  # noqa: E402

K = stats.RECOMMENDED_LAUNCHES
N = stats.RECOMMENDED_CYCLES
WITHIN = 0.03
BETWEEN = 0.02
EFFECT = 0.05
MARGIN = stats.DEFAULT_MARGIN
DRIFT = 0.004
MODELS = ("normal", "heavy-tailed (t, 3 df)", "bimodal (20 % of launches 6 % slower)", "1 % of cycles at 3x",
          "drift +0.4 %/launch")  # fmt: skip


def positions(design: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Run-order positions of the old and new launches (0-based)."""
    if design == "sequential":
        return np.arange(k), np.arange(k, 2 * k)
    order = stats.abba_order(k)
    a = np.array([i for i, s in enumerate(order) if s == "A"])
    b = np.array([i for i, s in enumerate(order) if s == "B"])
    return a, b


def launch_offsets(rng: np.random.Generator, model: str, shape: tuple[int, ...], pos: np.ndarray,
                   drift: float) -> np.ndarray:  # fmt: skip
    if model.startswith("heavy"):
        off = rng.standard_t(3, size=shape) * BETWEEN / np.sqrt(3.0)  # t3 has variance 3
    else:
        off = rng.normal(0.0, BETWEEN, size=shape)
    if model.startswith("bimodal"):
        off = off + np.where(rng.random(shape) < 0.2, np.log(1.06), 0.0)
    if model.startswith("drift"):
        off = off + np.log1p(drift) * pos
    return off


def side(rng: np.random.Generator, model: str, trials: int, pos: np.ndarray, effect: float,
         drift: float = DRIFT) -> np.ndarray:  # fmt: skip
    """Launch medians (trials, k): the median of N cycles of each launch."""
    k = pos.size
    off = launch_offsets(rng, model, (trials, k), pos, drift)
    cyc = np.exp(rng.normal(0.0, WITHIN, size=(trials, k, N)))
    if model.startswith("1 %"):
        cyc = np.where(rng.random(cyc.shape) < 0.01, cyc * 3.0, cyc)
    return np.median(20.0 * np.exp(off)[..., None] * cyc * (1.0 + effect), axis=-1)


def one_cell(rng: np.random.Generator, model: str, design: str, effect: float, trials: int,
             k: int = K, drift: float = DRIFT) -> tuple[float, float]:  # fmt: skip
    """(share REGRESSED, share where the drift check flags a side)."""
    pa, pb = positions(design, k)
    ol = np.log(side(rng, model, trials, pa, 0.0, drift))
    nl = np.log(side(rng, model, trials, pb, effect, drift))
    core = stats.welch_core if design == "sequential" else stats.paired_core
    d, lo, hi, p, _df = core(ol, nl)
    regressed = float(np.mean(stats.verdict_core(d, lo, hi, p, MARGIN) == stats.REGRESSED))
    _r1, p1 = stats.spearman_core(ol)
    _r2, p2 = stats.spearman_core(nl)
    # Holm over two tests: the smaller p times 2 below alpha.
    flagged = float(np.mean(np.minimum(p1, p2) * 2 < 0.05))
    return regressed, flagged


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench" / "drift.md"))
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    t0 = time.monotonic()
    lines = [
        "# Drift: sequential vs interleaved designs",
        "",
        f"`python bench/bench_drift.py --trials {a.trials} --seed {a.seed}` ({platform.python_version()}, "
        f"numpy {np.__version__}, {os.cpu_count()} CPUs). {K} launches x {N} cycles per side, 2 % launch and "
        f"3 % cycle noise, margin {MARGIN:.0%}, {a.trials} simulated comparisons per cell. Sequential: Welch "
        "on log launch medians; interleaved (ABBA): paired t. drift flagged: Spearman on launch order, "
        "Holm over the two sides, p < 0.05.",
        "",
        "| launch-to-launch noise | design | A/A false REGRESSED | power at +5 % | A/A drift flagged |",
        "| --- | --- | --- | --- | --- |",
    ]
    for model in MODELS:
        for design in ("sequential", "interleaved"):
            fa, flag = one_cell(rng, model, design, 0.0, a.trials)
            power, _ = one_cell(rng, model, design, EFFECT, a.trials)
            lines.append(f"| {model} | {design} | {pct(fa)} | {pct(power)} | {pct(flag)} |")
    lines += [
        "",
        "## How fast a drift must be for the check to see it (sequential, A/A)",
        "",
        "| drift per launch | launches per side | false REGRESSED | drift flagged |",
        "| --- | --- | --- | --- |",
    ]
    for k in (8, 12, 16):
        for drift in (0.002, 0.004, 0.008, 0.012):
            fa, flag = one_cell(rng, "drift", "sequential", 0.0, a.trials, k=k, drift=drift)
            lines.append(f"| {100 * drift:.1f} % | {k} | {pct(fa)} | {pct(flag)} |")
    lines += ["", f"Wall time {time.monotonic() - t0:.1f} s.", ""]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
