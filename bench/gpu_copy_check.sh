#!/bin/bash
# `-o` is a copy beside the stored run, on the GPU: a Kimi-K2 slice probe with -o (the stored record and
# the copy must be the same), then the probe stopped mid-launch by SIGTERM and by SIGKILL (both files
# keep the finished launches; the GPU is free 5 s later), then the GPU tests.
#   OUT=/some/dir bash bench/gpu_copy_check.sh       (from the repository root; about 3 minutes on an H200)
set -u
OUT=${OUT:?set OUT to a directory for the records}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
mkdir -p "$OUT/home"
log() { echo "== $(date +%T) $*"; }
same() {  # the stored run of copy $1 and the copy itself: one record
  python3 - "$1" <<'PY'
import json, os, sys
copy = json.load(open(sys.argv[1]))
stored = json.load(open(os.path.join(os.environ["REGDIAG_HOME"], "runs", copy["id"] + ".json")))
ok = [la["index"] for la in copy["launches"] if la["status"] == "ok"]
print(f"copy {sys.argv[1]}: status {copy['status']}, ok launches {ok}; stored run {copy['id']}: "
      f"{'the same record' if stored == copy else 'DIFFERENT'}")
PY
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

log "probe with -o: Kimi-K2 TP8 slice, 8 layers"
timeout -k 10 300 python3 -m regdiag probe spec-decode --preset kimi-k2 --tp-slice 8 --layers 8 --launches 3 \
  --cycles 50 -o "$OUT/slice.json" --no-snapshot 2>"$OUT/slice.err"
echo "rc=$?; $(tail -1 "$OUT/slice.err")"
same "$OUT/slice.json"

held() { nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .; }
for sig in TERM KILL; do
  log "SIG$sig mid-launch"
  python3 -m regdiag probe spec-decode --preset kimi-k2 --tp-slice 8 --layers 8 --cycles 3000 --launches 3 \
    --timeout 600 --no-snapshot -o "$OUT/stop-$sig.json" 2>"$OUT/stop-$sig.err" &
  pid=$!
  # wait for launch 1 to finish and launch 2 to hold the GPU
  for _ in $(seq 400); do
    [ -s "$OUT/stop-$sig.json" ] && python3 -c "import json,sys; sys.exit(0 if json.load(open('$OUT/stop-$sig.json'))['launches'] else 1)" 2>/dev/null \
      && [ "$(held)" -ge 1 ] && break
    sleep 0.5
  done
  sleep 2
  kill -s "$sig" "$pid"; wait "$pid"; echo "rc=$? after SIG$sig; last line: $(tail -1 "$OUT/stop-$sig.err")"
  sleep 5
  echo "GPU processes 5 s later: $(held)"
  same "$OUT/stop-$sig.json"
done

log "GPU tests"
timeout -k 10 200 python3 -m pytest -q -p no:cacheprovider tests/test_probe_gpu.py tests/test_gpu_nvml.py \
  >"$OUT/gpu-tests.txt" 2>&1
grep -E "^E |^FAILED|passed|failed" "$OUT/gpu-tests.txt" | head -20
echo "GPU processes at the end: $(held)"
