#!/bin/bash
# On one GPU: is eager verify's launch-to-launch spread the host's or ours? (issue 47, ~3.5 min)
# A separate process times the canary's pure-Python loop every 50 ms for the whole run (the host's speed,
# seen from outside any launch), while warm and cold runs of eager verify alternate (3 rounds of 6 warm
# launches and 3 cold ones). bench/eager_cause_report.py then puts each launch's verify median, its
# canary and that outside monitor's speed over the launch's window side by side.
# Also: the probe under PYTORCH_NO_CUDA_MEMORY_CACHING=1 (graph capture with the caching allocator off).
#   OUT=/some/dir bash bench/gpu_eager_cause.sh; python3 bench/eager_cause_report.py $OUT
set -u
OUT=${OUT:?set OUT to a directory}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
mkdir -p "$OUT/runs"
K=${K:-"--preset kimi-k2 --tp-slice 8 --layers 8 --cycles 30 --verify-graph off --no-snapshot"}
ROUNDS=${ROUNDS:-3}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
lscpu | grep -E "^(Model name|CPU\(s\)|Thread)"
python3 - "$OUT/runs/monitor.tsv" <<'PY' &
import os, sys, time
sys.path.insert(0, "probes")
from _canary import _py_loop
with open(sys.argv[1], "w") as f:
    while True:
        t0 = time.perf_counter(); _py_loop(20_000); ms = (time.perf_counter() - t0) * 1e3
        f.write(f"{time.time():.3f}\t{ms:.3f}\t{os.sched_getcpu() if hasattr(os, 'sched_getcpu') else -1}\n"); f.flush()
        time.sleep(0.05)
PY
MON=$!
sleep 1
for r in $(seq 1 "$ROUNDS"); do
  echo "== $(date +%T) round $r: warm x6, cold x3"
  timeout -k 10 120 python3 -m regdiag probe spec-decode $K --launches 6 -o "$OUT/runs/warm$r.json" > "$OUT/runs/warm$r.log" 2>&1; echo "warm rc=$?"
  timeout -k 10 120 python3 -m regdiag probe spec-decode $K --launches 3 --cold -o "$OUT/runs/cold$r.json" > "$OUT/runs/cold$r.log" 2>&1; echo "cold rc=$?"
done
kill $MON
echo "== $(date +%T) PYTORCH_NO_CUDA_MEMORY_CACHING=1, verify as a graph (the default), then eager"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout -k 10 90 python3 -m regdiag probe spec-decode --preset kimi-k2 --tp-slice 8 --layers 2 --cycles 5 --launches 1 --cold --no-snapshot -o "$OUT/runs/nocache-graph.json" > "$OUT/runs/nocache-graph.log" 2>&1; echo "nocache graph rc=$?"
tail -5 "$OUT/runs/nocache-graph.log"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout -k 10 90 python3 -m regdiag probe spec-decode --preset kimi-k2 --tp-slice 8 --layers 2 --cycles 5 --launches 1 --cold --verify-graph off --no-snapshot -o "$OUT/runs/nocache-eager.json" > "$OUT/runs/nocache-eager.log" 2>&1; echo "nocache eager rc=$?"
tail -3 "$OUT/runs/nocache-eager.log"
python3 bench/eager_cause_report.py "$OUT/runs" | tee "$OUT/report.txt"
tar -C "$OUT" -czf "$OUT/runs.tar.gz" runs && rm -rf "$OUT/runs" "$OUT/home"
left=$(pgrep -f "$PWD/probes/(_warm|spec_decode)\.py"); [ -n "$left" ] && { echo "LEFT OVER: $left"; kill -9 $left; } || echo "no probe process left"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
