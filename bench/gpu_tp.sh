#!/bin/bash
# kimi-k2 at TP=2 on two GPUs of one host (docs/bench/gpu_probe.md, "Two GPUs"): baseline and eagle,
# verify graph on and off, NCCL variants; every run a record under $OUT. ~5 minutes on 2 H200s.
#   OUT=/some/dir bash bench/gpu_tp.sh
set -u
OUT=${OUT:?set OUT to a directory for the records}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
# A lent multi-GPU host requires NVLink multicast off in every process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log() { echo "== $(date +%T) $*"; }
rd() { timeout -k 10 "${T:-240}" python3 -m regdiag "$@" >/dev/null 2>$OUT/last.err; rc=$?; echo "rc=$rc"; [ $rc = 0 ] || tail -3 $OUT/last.err; }
TP2="--preset kimi-k2 --tp 2 --launches 3 --cycles 50"   # layers: as many as fit (8 of 61 on 141 GB)

log "eagle, verify graph on / off; baseline decode"
rd probe spec-decode $TP2 -o "$OUT/tp2-eagle-vgraph-on.json"
rd probe spec-decode $TP2 --verify-graph off -o "$OUT/tp2-eagle-vgraph-off.json"
rd probe spec-decode $TP2 --mode baseline -o "$OUT/tp2-baseline.json"
for v in NCCL_P2P_DISABLE=1 NCCL_PROTO=LL NCCL_PROTO=Simple NCCL_ALGO=Ring NCCL_ALGO=Tree; do
  log "eagle, verify graph on, $v"
  env "$v" timeout -k 10 240 python3 -m regdiag probe spec-decode $TP2 --no-snapshot \
    -o "$OUT/tp2-eagle-${v//=/-}.json" >/dev/null 2>$OUT/last.err; echo "rc=$?"
done
log "collectives, default sweep"
rd probe collectives --tp 2 --launches 2 -o "$OUT/tp2-collectives.json"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
rm -rf "$OUT/home" "$OUT/last.err"
