#!/bin/bash
# On one GPU: why eager verify's launch medians spread (on the H200 they fell in two groups, ~10 and
# ~16 ms, in one bisect's journal). 12 warm launches unpinned, 12 pinned to one NUMA-local core set
# (taskset), 6 cold; per launch the verify median, the canary's Python loop and kernel-launch figures,
# and the CPU the launch's main thread ran on.   OUT=/some/dir bash bench/gpu_eager_spread.sh  (~3 min)
OUT=${OUT:?set OUT to a directory}
export PYTHONPATH=. PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node)" ; nvidia-smi topo -m 2>/dev/null | head -3
K="--preset kimi-k2 --tp-slice 8 --layers 8 --cycles 30 --verify-graph off --no-snapshot"
python3 -m regdiag probe spec-decode $K --launches 12 -o $OUT/unpinned.json > $OUT/unpinned.log 2>&1
taskset -c 0-3 python3 -m regdiag probe spec-decode $K --launches 12 -o $OUT/pinned.json > $OUT/pinned.log 2>&1
python3 -m regdiag probe spec-decode $K --launches 6 --cold -o $OUT/cold.json > $OUT/cold.log 2>&1
for f in unpinned pinned cold; do python3 - $OUT/$f.json $f <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
v, py, lu = [], [], []
for la in r["launches"]:
    s = la.get("samples", {}).get("verify") or []
    if not s:
        continue
    v.append(statistics.median(s))
    c = (la.get("footer") or {}).get("canary") or la.get("canary") or {}
    py.append(statistics.median(c.get("py_ms") or [0]) if c else 0)
    lu.append(statistics.median(c.get("launch_us") or [0]) if c and c.get("launch_us") else 0)
print(f"{sys.argv[2]}: verify per launch", [round(x, 2) for x in v])
print(f"   canary py ms", [round(x, 2) for x in py], "launch us", [round(x, 1) for x in lu])
if len(v) > 1:
    print(f"   median {statistics.median(v):.2f} ms, CV {statistics.stdev(v)/statistics.mean(v)*100:.1f} %")
PY
done
