#!/bin/bash
# bisect at TP=2 on two GPUs: four NCCL_* differences between a good and a bad environment, of which
# the protocol really changes verify (NCCL_PROTO=Simple: +6 % verify in docs/bench/gpu_probe_tp2.md).
# Also the NCCL_ALGO=Tree run in the form NCCL accepts for this model (all-reduce only).
#   OUT=/some/dir bash bench/gpu_tp_bisect.sh        (~4 minutes on 2 H200s)
set -u
OUT=${OUT:?set OUT}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log() { echo "== $(date +%T) $*"; }
log "bisect, metric verify, kimi-k2 TP=2, 2 layers"
t0=$SECONDS
timeout -k 10 330 python3 -m regdiag bisect \
  --good 'NCCL_PROTO=LL NCCL_ALGO=allreduce:Ring NCCL_BUFFSIZE=4194304 NCCL_NTHREADS=256' \
  --bad 'NCCL_PROTO=Simple NCCL_ALGO=allreduce:Tree NCCL_BUFFSIZE=8388608 NCCL_NTHREADS=512' \
  --probe spec-decode --metric verify --journal "$OUT/tp2-bisect.jsonl" --markdown \
  -- --preset kimi-k2 --tp 2 --layers 2 --cycles 30 >"$OUT/tp2-bisect.md" 2>"$OUT/tp2-bisect.err"
echo "bisect rc=$? in $((SECONDS - t0)) s"
tail -25 "$OUT/tp2-bisect.md"; tail -3 "$OUT/tp2-bisect.err"
log "NCCL_ALGO=allreduce:Tree, the full TP=2 configuration"
NCCL_ALGO=allreduce:Tree timeout -k 10 120 python3 -m regdiag probe spec-decode --preset kimi-k2 --tp 2 \
  --launches 3 --cycles 50 --no-snapshot -o "$OUT/tp2-eagle-NCCL_ALGO-allreduce-Tree.json" >/dev/null 2>"$OUT/tree.err"
echo "tree rc=$?"; tail -2 "$OUT/tree.err"
rm -rf "$OUT/home"
