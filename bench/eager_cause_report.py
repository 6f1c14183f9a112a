"""Per launch of bench/gpu_eager_cause.sh: verify median, the launch's own canary, and the outside
monitor's loop time over the launch's window, warm and cold side by side; then the summary (CV per mode,
how many slow launches each mode had, whether the monitor saw the host slow in the same windows).

    python3 bench/eager_cause_report.py RUNS_DIR     (RUNS_DIR holds warmN.json, coldN.json, monitor.tsv)
"""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import statistics
import sys


def _ts(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()


def _cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.mean(xs) * 100 if len(xs) > 1 else 0.0


def main(d: str) -> None:
    mon = []
    try:
        for line in open(os.path.join(d, "monitor.tsv")):
            t, ms, _cpu = line.split("\t")
            mon.append((float(t), float(ms)))
    except OSError:
        pass
    mon_med = statistics.median(m for _, m in mon) if mon else 0.0
    rows = []
    for path in sorted(glob.glob(os.path.join(d, "warm*.json")) + glob.glob(os.path.join(d, "cold*.json"))):
        mode = os.path.basename(path)[:4]
        rec = json.load(open(path))
        for la in rec.get("launches", []):
            v = (la.get("samples") or {}).get("verify") or []
            if la.get("status") != "ok" or not v:
                continue
            c = (la.get("footer") or {}).get("canary") or {}
            t0 = _ts(la["started"])
            t1 = t0 + float(la.get("duration_s") or 0) + 1.0  # `started` has whole seconds
            win = [m for t, m in mon if t0 <= t <= t1]
            h = la.get("host") or {}
            meas, system = h.get("measured") or {}, h.get("system") or {}
            rows.append({
                "mode": mode, "t": t0, "verify": statistics.median(v),
                "py": statistics.median(c.get("py_ms") or [0]),
                "launch_us": statistics.median(c.get("launch_us") or [0]) if c.get("launch_us") else 0.0,
                "mon": statistics.median(win) / mon_med if win and mon_med else float("nan"),
                "cpus": f"ran on {meas.get('ran_on', '?')} steal {system.get('steal_pct', '?')} % "
                        f"others {(h.get('others') or {}).get('pct', '?')} % invol {meas.get('ctx_invol', '?')}",
            })
    rows.sort(key=lambda r: r["t"])
    base = statistics.median(r["verify"] for r in rows) if rows else 0
    print(f"{'mode':5} {'start':>8} {'verify ms':>9} {'canary py ms':>12} {'launch us':>9} {'monitor x':>9}  cpus")
    for r in rows:
        slow = " SLOW" if r["verify"] > 1.25 * base else ""
        t = dt.datetime.fromtimestamp(r["t"], dt.timezone.utc).strftime("%H:%M:%S")
        print(f"{r['mode']:5} {t:>8} {r['verify']:9.2f} {r['py']:12.2f} {r['launch_us']:9.1f} {r['mon']:9.2f}  {r['cpus']}{slow}")
    for mode in ("warm", "cold"):
        v = [r["verify"] for r in rows if r["mode"] == mode]
        if v:
            n_slow = sum(x > 1.25 * base for x in v)
            print(f"{mode}: {len(v)} launches, verify median {statistics.median(v):.2f} ms, CV {_cv(v):.1f} %, "
                  f"slow (> 1.25x the median) {n_slow}")
    slow = [r for r in rows if r["verify"] > 1.25 * base]
    fast = [r for r in rows if r["verify"] <= 1.25 * base]
    if slow and fast and mon:
        print(f"outside monitor's loop time over the window, x its median: slow launches "
              f"{statistics.median(r['mon'] for r in slow):.2f}, the others {statistics.median(r['mon'] for r in fast):.2f}")
        print(f"canary py ms: slow launches {statistics.median(r['py'] for r in slow):.2f}, "
              f"the others {statistics.median(r['py'] for r in fast):.2f}")
    if mon:
        ms = sorted(m for _, m in mon)
        print(f"monitor: {len(mon)} samples, loop median {mon_med:.2f} ms, p90 {ms[int(0.9 * len(ms))]:.2f}, "
              f"share > 1.4x median {sum(m > 1.4 * mon_med for m in ms) / len(ms) * 100:.1f} %")


if __name__ == "__main__":
    main(sys.argv[1])
