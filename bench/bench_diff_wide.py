"""How long `regdiag diff` takes on two snapshots of 50 000 variables (half of them changed).

Takes this machine's snapshot, adds N variables to two copies (every other one changed in the second),
then runs `regdiag diff A B > file` and `regdiag diff A B --json > file` R times each, interleaved,
and prints the median wall and CPU seconds of each (CPU: the child's user+system, getrusage).
Usage: python bench/bench_diff_wide.py [N] [R]   (defaults 50000 and 3).
"""

from __future__ import annotations

import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    work = Path(tempfile.mkdtemp(prefix="regdiag-diff-wide-"))
    env = {**os.environ, "REGDIAG_HOME": str(work / "home"), "COLUMNS": "120"}
    regdiag = [sys.executable, "-m", "regdiag"]
    base = json.loads(
        subprocess.run(
            [*regdiag, "snapshot", "--json"], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    a, b = base, copy.deepcopy(base)
    for i in range(n):
        a["groups"]["env"]["fields"][f"WIDE_{i}"] = {"status": "ok", "value": f"v{i}"}
        b["groups"]["env"]["fields"][f"WIDE_{i}"] = {"status": "ok", "value": f"v{i}" if i % 2 else f"w{i}"}
    (work / "a.json").write_text(json.dumps(a))
    (work / "b.json").write_text(json.dumps(b))
    times: dict[str, list[tuple[float, float]]] = {"text": [], "json": []}
    for _ in range(rounds):
        for kind, extra in (("text", []), ("json", ["--json"])):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            with open(work / f"out.{kind}", "w") as out:
                subprocess.run(
                    [*regdiag, "diff", str(work / "a.json"), str(work / "b.json"), *extra],
                    env=env,
                    stdout=out,
                    check=True,
                )
            wall = time.perf_counter() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            times[kind].append((wall, cpu))
    print(f"regdiag diff of two snapshots of {n} added variables ({n // 2} differ), {rounds} rounds:")
    for kind, ts in times.items():
        wall = statistics.median(w for w, _ in ts)
        cpu = statistics.median(c for _, c in ts)
        print(f"  {kind:5s} median wall {wall:.2f} s, CPU {cpu:.2f} s")


if __name__ == "__main__":
    main()
