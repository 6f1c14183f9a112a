#!/bin/bash
# Stop regdiag mid-launch and show what the GPUs hold afterwards: a kimi-k2 probe at --tp N (default 2)
# is started, regdiag gets SIGTERM (then, in a second run, SIGKILL) once every rank holds its GPU, and
# `nvidia-smi --query-compute-apps` is printed before the signal and 5 s after it.
#
#   TP=2 bash bench/gpu_stop_check.sh        (from the repository root; prints everything to stdout)
set -u
TP=${TP:-2}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=${REGDIAG_HOME:-/tmp/regdiag-stop-check}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$REGDIAG_HOME"
apps() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv; }
held() { nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .; }
for sig in TERM KILL; do
  python3 -m regdiag probe spec-decode --preset kimi-k2 --tp "$TP" --layers 4 --cycles 100000 --launches 2 \
    --no-snapshot -o "$REGDIAG_HOME/stop-$sig.json" 2>"$REGDIAG_HOME.err" &
  pid=$!
  for _ in $(seq 240); do
    [ "$(held)" -ge "$TP" ] && break
    sleep 0.5
  done
  sleep 2
  echo "== before SIG$sig (regdiag pid $pid):"
  apps
  kill -s "$sig" "$pid"
  wait "$pid"
  echo "== regdiag exit status $? after SIG$sig; its last line: $(tail -1 "$REGDIAG_HOME.err")"
  sleep 5
  echo "== 5 s after SIG$sig:"
  apps
done
rm -rf "$REGDIAG_HOME" "$REGDIAG_HOME.err"
