"""What `--slurm` adds per launch: a real local Slurm (tests/slurm_helpers.py, 2 fake nodes), measured
in one run:
- holding the allocation: `salloc --no-shell` with the stale-job check, squeue and scontrol (open), and
  scancel with the watchdog stopped (close);
- one command's round trip through a step (`srun --jobid J -w NODE ... -- /bin/true`), against the same
  command as a local subprocess: the added cost per launch;
- the drain check regdiag runs before each pair on a node of several (`sinfo` for that node).

Prints a Markdown table (docs/benchmarks.md quotes it). Usage: python bench/bench_slurm.py [--n 21]

`--bisect` measures instead a 4-factor env bisect over `--slurm 4` (4 fake nodes), its rounds run at
once (`--lanes auto`) against the same bisect one launch at a time (`--lanes serial`), side by side in
one run, each with a journal of its own:
- with a probe whose launches wait (WAIT_PROBE: a start of START_S seconds spent sleeping, as an engine
  waits on its GPU, then cycles of sleeps): what lanes do where the host's CPUs are not the limit;
- with `--tiny`, also the tiny CPU probe (spec-decode --preset tiny), whose launches compute: on this
  2-core machine 4 lanes share 2 cores, so that bound is the cores, not the lanes.
Usage: python bench/bench_slurm.py --bisect [--tiny] [--start-s 1.5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
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


# A launch that waits: START_S seconds of sleep (an engine's start, waiting on its GPU), then 2 warm-up
# and 8 cycles of a 5 ms sleep, plus what BENCH_SLOW=verify:MS adds; timed on the wall clock.
WAIT_PROBE = r"""
import json, os, time
time.sleep(float(os.environ.get("BENCH_START_S", "1.5")))
extra = sum(float(x.partition(":")[2]) for x in os.environ.get("BENCH_SLOW", "").split(",") if x)
units = {"cycle": "ms", "verify": "ms"}
print(json.dumps({"type": "header", "protocol": 1, "probe": "wait-probe", "version": "1",
                  "primary": "cycle", "phases": ["verify"], "units": units}), flush=True)
for i in range(10):
    t0 = time.perf_counter()
    time.sleep((5.0 + extra) / 1000.0)
    ms = (time.perf_counter() - t0) * 1000.0
    line = {"type": "cycle", "i": i, "t": {"cycle": ms, "verify": ms}}
    if i < 2:
        line["warmup"] = True
    print(json.dumps(line), flush=True)
print(json.dumps({"type": "footer", "cycles": 8, "warmup_dropped": 2}), flush=True)
"""
# Four factors, one of them the planted slowdown (the waiting probe's BENCH_SLOW, the tiny probe's hook).
GOOD = "F_A=0 F_B=0 F_C=0 {slow}=verify:0"
BAD = "F_A=1 F_B=1 F_C=1 {slow}=verify:15"
SLOW_VAR = {"wait": "BENCH_SLOW", "tiny": "REGDIAG_PROBE_SLOW"}


def _bisect(d: Path, env: dict[str, str], lanes: str, measure: list[str], name: str) -> dict:
    """One `regdiag bisect --slurm 4 --lanes LANES`: its wall time (the command's, salloc included) and report."""
    good, bad = GOOD.format(slow=SLOW_VAR[name]), BAD.format(slow=SLOW_VAR[name])
    argv = [sys.executable, "-m", "regdiag", "bisect", "--slurm", "4", "--lanes", lanes, "--good", good,
            "--bad", bad, "--metric", "verify", "--launches", "2", "--max-launches", "8", "--margin", "0.1",
            "--journal", str(d / f"{name}-{lanes}.jsonl"), "--json", *measure]  # fmt: skip
    t0 = time.monotonic()
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    wall = time.monotonic() - t0
    if res.returncode not in (0, 3):
        raise SystemExit(f"bisect --lanes {lanes} failed ({res.returncode}): {res.stderr[-2000:]}")
    report = json.loads(res.stdout)
    return {"wall": wall, "report": report}


def bisect_main(start_s: float, tiny: bool) -> None:
    d = Path(tempfile.mkdtemp(prefix="regdiag-slurm-bench-"))
    try:
        probe = d / "wait_probe.py"
        probe.write_text(WAIT_PROBE)
        runs = [("wait", ["--command", f"{{python}} {probe}"])]
        if tiny:
            runs.append(("tiny", ["--probe", "spec-decode", "--", "--preset", "tiny", "--cycles", "12"]))
        rows = []
        with slurm_helpers.slurm_cluster(d, nodes=4) as c:
            env = {**os.environ, **c.env, "BENCH_START_S": str(start_s), "PYTHONPATH": str(ROOT)}
            for name, measure in runs:
                serial = _bisect(d, env, "serial", measure, name)
                parallel = _bisect(d, env, "auto", measure, name)
                rows.append((name, serial, parallel))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(
        "| probe | lanes | wall s | launches | verdict | culprit |\n| --- | --- | ---: | ---: | --- | --- |"
    )
    for name, serial, parallel in rows:
        for lanes, run in (("serial", serial), ("auto (4 at once)", parallel)):
            r = run["report"]
            culprit = "; ".join(c["change"] for c in r["culprits"]) or "-"
            print(
                f"| {name} | {lanes} | {run['wall']:.1f} | {r['cost']['launches_run']} | {r['verdict']} | {culprit} |"
            )
    for name, serial, parallel in rows:
        print(f"\n{name}: parallel / serial wall time = {parallel['wall'] / serial['wall']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=21)
    ap.add_argument(
        "--bisect", action="store_true", help="serial against parallel rounds of a 4-factor bisect"
    )
    ap.add_argument("--tiny", action="store_true", help="with --bisect: the tiny CPU probe too")
    ap.add_argument("--start-s", type=float, default=1.5, help="with --bisect: the waiting probe's start, s")
    args = ap.parse_args()
    if args.bisect:
        bisect_main(args.start_s, args.tiny)
        return
    n = args.n
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
