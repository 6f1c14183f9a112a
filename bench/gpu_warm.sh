#!/bin/bash
# On one GPU: the launch cost warm against cold, side by side (bench/bench_launch.py), for the kimi-k2
# TP8-slice launch of docs/benchmarks.md; then nothing of ours on the GPU.
#   OUT=/some/dir bash bench/gpu_warm.sh        (~3 minutes)
# bench/gpu_launch_cost.sh supersedes it (the same plus a 4-variable env bisect); this one made
# docs/bench/gpu_warm.md.
OUT=${OUT:?set OUT to a directory}
export PYTHONPATH=. PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader
python3 bench/bench_launch.py --runs 2 --launches 6 --out "$OUT/launch" -- \
  --preset kimi-k2 --tp-slice 8 --layers 8 --cycles 30 > "$OUT/launch.md" 2> "$OUT/launch.err"
echo "bench exit $?"; cat "$OUT/launch.md"; tail -4 "$OUT/launch.err"
pgrep -af "_warm.py|spec_decode.py" || echo "no probe process left"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
