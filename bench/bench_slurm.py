"""What `--slurm` adds per launch: a real local Slurm (tests/slurm_helpers.py, 2 fake nodes), measured
in one run:
- holding the allocation: `salloc --no-shell` with the stale-job check, squeue and scontrol (open), and
  scancel with the watchdog stopped (close);
- one command's round trip through a step (`srun --jobid J -w NODE ... -- /bin/true`), against the same
  command as a local subprocess: the added cost per launch;
- the drain check regdiag runs before each pair on a node of several (`sinfo` for that node).

Prints a Markdown table (docs/benchmarks.md quotes it). Usage: python bench/bench_slurm.py [--n 21]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import slurm_helpers  # noqa: E402

from regdiag.hosts.local import LocalHost  # noqa: E402
from regdiag.hosts.slurm import SlurmAllocation  # noqa: E402


def _ms(fn, n: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t0) * 1000)
    if len(xs) < 2:
        return xs[0], 0.0
    q = statistics.quantiles(xs, n=4)
    return statistics.median(xs), q[2] - q[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=21)
    n = ap.parse_args().n
    d = Path(tempfile.mkdtemp(prefix="regdiag-slurm-bench-"))
    try:
        with slurm_helpers.slurm_cluster(d, nodes=2) as c:
            os.environ.update(c.env)
            rows = []
            opened: list[SlurmAllocation] = []
            rows.append(
                (
                    "open: stale check + salloc + squeue + scontrol",
                    *_ms(lambda: opened.append(SlurmAllocation(2)), 1),
                )
            )
            alloc = opened[0]
            node = alloc.nodes()[1]
            local = LocalHost()
            rows.append(("`/bin/true` as a local subprocess", *_ms(lambda: local.run(["/bin/true"]), n)))
            rows.append(("`/bin/true` as a step pinned to n2", *_ms(lambda: node.run(["/bin/true"]), n)))
            rows.append(("drain check of one node (sinfo)", *_ms(node.unavailable, n)))
            rows.append(("close: scancel + watchdog stopped", *_ms(alloc.close, 1)))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"| what (median of {n}; open/close once) | ms | IQR ms |\n| --- | ---: | ---: |")
    for what, med, iqr in rows:
        print(f"| {what} | {med:.1f} | {iqr:.1f} |")
    step, base = rows[2][1], rows[1][1]
    print(
        f"\nadded per launch: {step - base:.0f} ms (step minus local), plus {rows[3][1]:.0f} ms per pair (drain check)"
    )


if __name__ == "__main__":
    main()
