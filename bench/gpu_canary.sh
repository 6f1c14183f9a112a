#!/bin/bash
# On one GPU: eager verify launches of the kimi-k2 TP8 slice (host-bound: 10 ms eager against 2.9 ms
# in a graph), each with the canary (probes/_canary.py: the host's speed before, between and after the
# cycles, and an empty kernel's launch latency), then compare of two such runs: for a launch that
# disagrees with its side's others, compare says how fast the host ran in that window, or that its
# speed did not change, and the correlation between the canary and verify over the launches. A third
# run beside a CPU hog on the ranks' core shows what a slower host looks like in the canary.
#   OUT=/some/dir bash bench/gpu_canary.sh        (~5 minutes; 7 files under $OUT)
OUT=${OUT:?set OUT to a directory}
export PYTHONPATH=. PYTHONUNBUFFERED=1 REGDIAG_HOME=${TMPDIR:-/tmp}/regdiag-canary-home
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader
EAGER=(--preset kimi-k2 --tp-slice 8 --layers 24 --verify-graph off --cycles 30 --launches 5 --no-snapshot)
probe() {  # probe NAME [taskset CPU]: one eager run, its record under $OUT, its output in probe.log
  local name=$1; shift
  echo "== $name" >> "$OUT/probe.log"
  timeout 150 "$@" python3 -m regdiag probe spec-decode "${EAGER[@]}" -o "$OUT/$name.json" >> "$OUT/probe.log" 2>&1
  echo "probe $name exit $?"; tail -2 "$OUT/probe.log"
}
probe eager-a taskset -c 2
probe eager-b taskset -c 2
# a CPU hog on the same core for the third run: the canary must read slower there
taskset -c 2 python3 -c "while True: pass" & HOG=$!
probe eager-hog taskset -c 2
kill "$HOG"; wait "$HOG" 2>/dev/null
python3 - "$OUT" > "$OUT/canary.md" <<'EOF'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| run | launch | verify median ms | canary Python loop ms (before, between, after) | C loop ms | kernel launch us |")
print("| --- | ---: | ---: | --- | --- | --- |")
for name in ("eager-a", "eager-b", "eager-hog"):
    p = out / f"{name}.json"
    if not p.exists():
        print(f"| {name} | no record | | | | |")
        continue
    for la in json.loads(p.read_text())["launches"]:
        can = (la.get("footer") or {}).get("canary") or {}
        v = la.get("samples", {}).get("verify") or [0.0]
        fmt = lambda xs: ", ".join(f"{x:.3g}" for x in (xs or []))
        print(f"| {name} | {la['index']} | {statistics.median(v):.3f} | {fmt(can.get('py_ms'))} | "
              f"{fmt(can.get('c_ms'))} | {fmt(can.get('launch_us'))} |")
EOF
cat "$OUT/canary.md"
for pair in "eager-a eager-b" "eager-a eager-hog"; do
  set -- $pair
  timeout 120 python3 -m regdiag compare "$OUT/$1.json" "$OUT/$2.json" > "$OUT/compare-$1-$2.txt" 2>&1
  echo "compare $1 $2 exit $?"; grep -iE "launch [0-9]+ of|canary|others used|verdict|REGRESSED|UNCHANGED" \
    "$OUT/compare-$1-$2.txt" | head -20
done
pgrep -af "_warm.py|spec_decode.py|while True" || echo "no probe process left"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
