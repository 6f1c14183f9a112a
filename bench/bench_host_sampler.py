"""What recording the host costs a launch (probes/_hoststat.py).

    python bench/bench_host_sampler.py [PAIRS]      prints a Markdown section for docs/benchmarks.md

Two measurements:
1. The sampler's own CPU time per sample, in this process, beside the real processes of this machine:
   a cheap sample (/proc/stat, the measured processes' stat and status, cpufreq) every INTERVAL_S, a
   full one (a scan of every process) at the window's ends, and beside a server every SCAN_EVERY-th
   sample; from them the share of one CPU the sampler takes.
2. The bare-cycle method one level up: as a launch alternates bare and instrumented cycles in ABBA
   order and reports the median paired difference, PAIRS pairs of single-launch runs of the tiny probe
   alternate with the sampler off (REGDIAG_HOST_SAMPLING=0, the "bare" launch) and on, in ABBA order;
   the cost is the median over pairs of (on - off) / off of the launches' cycle medians.
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
sys.path.insert(0, str(ROOT / "probes"))

import _hoststat  # noqa: E402

PROBE = ["probe", "spec-decode", "--preset", "tiny", "--tp", "1", "--cycles", "60", "--launches", "1",
         "--no-snapshot"]  # fmt: skip


def per_sample(n: int = 200) -> tuple[float, float, int]:
    """CPU ms of a cheap and of a full sample, and how many processes a scan read."""
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        w = _hoststat.HostWatch(lambda: [os.getpid(), *(k.pid for k in kids)])
        w.mark()
        out = []
        for full in (False, True):
            t = time.process_time()
            for _ in range(n):
                w._sample(full)
            out.append(1000 * (time.process_time() - t) / n)
        return out[0], out[1], len(_hoststat.scan())
    finally:
        for k in kids:
            k.kill()
            k.wait()


def launch_cycle(on: bool) -> float:
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, REGDIAG_HOME=home, **({} if on else {_hoststat.OFF_ENV: "0"}))
        out = Path(home) / "run.json"
        r = subprocess.run([sys.executable, "-m", "regdiag", *PROBE, "-o", str(out)], capture_output=True,
                           text=True, env=env, cwd=ROOT)  # fmt: skip
        if r.returncode != 0:
            raise SystemExit(r.stderr[-2000:])
        la = json.loads(out.read_text())["launches"][0]
        assert (la.get("host") or {}).get("status", "").startswith("proc" if on else "off"), la.get("host")
        return statistics.median(la["samples"]["cycle"])


def main(argv: list[str]) -> int:
    pairs = int(argv[0]) if argv else 6
    cheap, full, procs = per_sample()
    per_s = cheap / _hoststat.INTERVAL_S  # a probe launch: cheap samples; the two full ones at its ends
    per_s_group = per_s + (full - cheap) / (_hoststat.INTERVAL_S * _hoststat.SCAN_EVERY)  # a server's group
    load0 = os.getloadavg()[0]
    diffs = []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)  # ABBA
        got = {on: launch_cycle(on) for on in order}
        diffs.append(100 * (got[True] - got[False]) / got[False])
    print("## Recording the host: its cost per launch\n")
    print(f"`python bench/bench_host_sampler.py {pairs}` on this machine ({os.cpu_count()} CPUs, shared; load "
          f"average {load0:.1f} at the start).\n")  # fmt: skip
    print("| what | value |\n| --- | --- |")
    print(f"| a cheap sample (every {_hoststat.INTERVAL_S:g} s), CPU time | {cheap:.3f} ms |")
    print(
        f"| a full sample with a scan of {procs} processes (every {_hoststat.SCAN_EVERY}th) | {full:.3f} ms |"
    )
    print(
        f"| the sampler's share of one CPU, probe launch | {per_s / 10:.3f} % ({per_s:.2f} ms per second) |"
    )
    print(f"| the same beside a server or engine (scans for its processes) | {per_s_group / 10:.3f} % |")
    med = statistics.median(diffs)
    print(f"| tiny-probe cycle, sampler on vs off, median of {pairs} ABBA launch pairs | {med:+.1f} % "
          f"(pairs from {min(diffs):+.1f} to {max(diffs):+.1f} %) |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
