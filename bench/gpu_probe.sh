#!/bin/bash
# The spec-decode probe's evidence on one GPU (docs/bench/gpu_probe.md, baselines/README.md).
#   OUT=/some/dir bash bench/gpu_probe.sh      then      python bench/gpu_probe_report.py /some/dir
# Runs from the repository root with PYTHONPATH=. (regdiag need not be installed); ~4 minutes on an H200.
set -u
OUT=${OUT:?set OUT to a directory for the records}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
mkdir -p "$OUT/extra"
log() { echo "== $(date +%T) $*"; }
rd() { timeout -k 10 "${T:-300}" python3 -m regdiag "$@"; echo "rc=$?"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv

# Kimi-K2 TP8-slice shapes (one rank of an 8-GPU node: 8 heads, expert width 256) on one GPU, 24 layers.
SLICE="--preset kimi-k2 --tp-slice 8 --layers 24 --launches 3 --cycles 50 --naive-timer"
log "A/A: eagle, verify in a CUDA graph, twice"
rd probe spec-decode $SLICE -o "$OUT/h200-kimi-slice-eagle-vgraph-on-a.json"
rd probe spec-decode $SLICE -o "$OUT/h200-kimi-slice-eagle-vgraph-on-b.json"
log "A/B: eagle, verify eager"
rd probe spec-decode $SLICE --verify-graph off -o "$OUT/h200-kimi-slice-eagle-vgraph-off.json"
log "baseline: one-token decode"
rd probe spec-decode $SLICE --mode baseline -o "$OUT/h200-kimi-slice-baseline.json"

# Kimi-K2 at TP=1: full-size layers, as many as fit (the header says how many).
log "kimi-k2 TP=1, baseline and eagle"
rd probe spec-decode --preset kimi-k2 --launches 2 --cycles 50 --mode baseline -o "$OUT/extra/tp1-baseline.json"
rd probe spec-decode --preset kimi-k2 --launches 2 --cycles 50 --naive-timer -o "$OUT/extra/tp1-eagle.json"

# The other presets' code paths (no q LoRA and softmax routing; group-limited routing) and NCCL at TP=1.
log "other presets, collectives"
rd probe spec-decode --preset deepseek-v2-lite --layers 8 --launches 1 --cycles 20 -o "$OUT/extra/v2lite.json"
rd probe spec-decode --preset deepseek-v3 --tp-slice 8 --layers 6 --launches 1 --cycles 20 -o "$OUT/extra/v3-slice.json"
rd probe collectives --tp 1 --sizes 1K:64M:4 --launches 1 -o "$OUT/extra/collectives-tp1.json"

tar -C "$OUT" -czf "$OUT/extra.tar.gz" extra && rm -rf "$OUT/extra" "$OUT/home"
ls -la "$OUT"
