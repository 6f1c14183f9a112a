"""Before/after: `python -m regdiag.snapshot` of another checkout (BASE_DIR, e.g. an earlier commit
unpacked with `git archive REV | tar -x -C BASE_DIR`) against this one, interleaved round by round,
and this one's `--pid` of a running python process that imports psutil. Round 0 is a warm-up.

Usage: python bench/bench_snapshot_ab.py BASE_DIR [N] (default 15 rounds).
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
BASE = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 15
eng = subprocess.Popen(
    [sys.executable, "-c", "import psutil, time; print('ready', flush=True); time.sleep(3600)"],
    stdout=subprocess.PIPE,
    text=True,
)
assert eng.stdout.readline().strip() == "ready"
cmds = {
    f"{BASE}: python -m regdiag.snapshot": (BASE, [sys.executable, "-m", "regdiag.snapshot"]),
    "this checkout: python -m regdiag.snapshot": (ROOT, [sys.executable, "-m", "regdiag.snapshot"]),
    "this checkout: python -m regdiag.snapshot --pid PID": (
        ROOT,
        [sys.executable, "-m", "regdiag.snapshot", "--pid", str(eng.pid)],
    ),
}
res = {k: [] for k in cmds}
rss = {k: [] for k in cmds}
load0 = os.getloadavg()[0]
for r in range(N + 1):
    for k, (cwd, argv) in cmds.items():
        t = time.perf_counter()
        p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, st, ru = os.wait4(p.pid, 0)
        w = time.perf_counter() - t
        assert os.waitstatus_to_exitcode(st) == 0, k
        if r:  # round 0 is the warm-up
            res[k].append(w)
            rss[k].append(ru.ru_maxrss / 1024)
eng.kill()
eng.communicate()
print(f"{N} rounds interleaved, load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
print("| command | median s | min s | max s | peak RSS MiB |")
print("| --- | --- | --- | --- | --- |")
for k, v in res.items():
    print(f"| `{k}` | {statistics.median(v):.3f} | {min(v):.3f} | {max(v):.3f} | {max(rss[k]):.1f} |")
