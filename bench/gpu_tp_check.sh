#!/bin/bash
# First call on a multi-GPU host: the GPU test suite, a snapshot, and one kimi-k2 TP=2 launch at the
# layers that fit (to size the measurement matrix of bench/gpu_tp.sh). Results under $OUT.
set -u
OUT=${OUT:?set OUT}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log() { echo "== $(date +%T) $*"; }
nvidia-smi --query-gpu=index,name,driver_version,memory.used,clocks.sm --format=csv
nvidia-smi topo -m
log "gpu tests"
timeout -k 10 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_tp.py tests/test_probe_gpu.py tests/test_gpu_nvml.py 2>&1 | tee $OUT/gpu-tests.txt | tail -25
log "snapshot"
timeout 60 python3 -m regdiag snapshot --json -o $OUT/snapshot-x2.json >/dev/null; echo rc=$?
timeout 60 python3 -m regdiag snapshot --check; echo rc=$?
log "kimi-k2 tp2 auto layers, one launch"
time timeout -k 10 200 python3 -m regdiag probe spec-decode --preset kimi-k2 --tp 2 --launches 1 --cycles 30 --no-snapshot -o $OUT/fit.json 2>&1 | tail -15
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
