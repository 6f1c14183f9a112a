"""How long the CPU probe takes end to end: `regdiag probe spec-decode --tp 2` on the embedded default
(no GPU: the tiny preset, gloo, 3 launches of 50 + 50 cycles, snapshots before and after).

    python bench/bench_probe.py [REPEATS]      writes docs/bench/probe.md

Target (issue): under a minute. Wall time is measured around the whole command, next to where it goes
(the launches' own durations and what the probe itself reports as its rank's time), in one run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CMD = ["probe", "spec-decode", "--tp", "2"]


def main(argv: list[str]) -> int:
    repeats = int(argv[0]) if argv else 3
    rows = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, REGDIAG_HOME=home)
            load0 = os.getloadavg()[0]
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "regdiag", *CMD, "--json"], capture_output=True, text=True,
                               env=env, cwd=ROOT)  # fmt: skip
            wall = time.perf_counter() - t
            if r.returncode != 0:
                print(r.stderr, file=sys.stderr)
                return 1
            run = json.loads(next(Path(home, "runs").glob("*.json")).read_text())
            las = run["launches"]
            rows.append({
                "wall": wall, "load": load0,
                "launch_s": [la["duration_s"] for la in las],
                "rank_s": [la["footer"]["duration_s"] for la in las],
                "cycle": statistics.median(x for la in las for x in la["samples"]["cycle"]),
                "verify": statistics.median(x for la in las for x in la["samples"]["verify"]),
            })  # fmt: skip
    walls = [r["wall"] for r in rows]
    loads = ", ".join(f"{r['load']:.1f}" for r in rows)
    lines = [
        "## CPU probe, end to end\n",
        f"`python bench/bench_probe.py {repeats}` on this machine ({os.cpu_count()} CPUs, shared; load average "
        f"at each start {loads}): `regdiag {' '.join(CMD)}` — the tiny "
        "preset, 2 gloo ranks, 3 launches × (5 warm-up + 50 instrumented + 50 bare cycles), context 512, "
        "snapshots before and after.\n",
        "| run | wall s | per launch s (process start to exit) | of which the ranks' own work s | cycle median ms | verify median ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(rows):
        lines.append(
            f"| {i + 1} | {r['wall']:.1f} | {' / '.join(f'{x:.1f}' for x in r['launch_s'])} | "
            f"{' / '.join(f'{x:.1f}' for x in r['rank_s'])} | {r['cycle']:.2f} | {r['verify']:.2f} |"
        )
    lines.append(
        f"\nMedian wall time {statistics.median(walls):.1f} s (target: under 60 s). The rest of each launch, "
        "beyond the ranks' own work, is starting two Python processes that import torch and set up gloo.\n"
    )
    out = ROOT / "docs" / "bench" / "probe.md"
    out.write_text("\n".join(lines), encoding="utf-8")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
