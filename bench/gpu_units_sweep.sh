#!/bin/bash
# This round's evidence on one GPU (docs/bench/gpu_units_sweep.md): a probe launch after the start-stage
# liveness change, the same launch started beside 16 CPU hogs, a collectives sweep judged per size, and
# pyperf exports of H200 records compared in one unit.
#   OUT=/some/dir bash bench/gpu_units_sweep.sh        (~4 minutes on an H200)
set -u
OUT=${OUT:?set OUT to a directory for the records}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home COLUMNS=110
log() { echo "== $(date +%T) $*"; }
rd() { local t0; t0=$(date +%s.%N); timeout -k 10 "${T:-300}" python3 -m regdiag "$@"; local rc=$?
       echo "rc=$rc wall=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
SLICE="--preset kimi-k2 --tp-slice 8 --layers 8 --cycles 30"
log "eagle, verify in a CUDA graph and eager"
rd probe spec-decode $SLICE --launches 3 -o "$OUT/eagle.json" | tail -4
rd probe spec-decode $SLICE --launches 3 --verify-graph off -o "$OUT/eager.json" | tail -4
rd compare "$OUT/eagle.json" "$OUT/eager.json" --allow-mismatch | head -12
log "pyperf exports, compared in one unit (draft is us, verify ms)"
rd export "$OUT/eagle.json" --to pyperf -o "$OUT/eagle.pyperf.json"
rd export "$OUT/eager.json" --to pyperf -o "$OUT/eager.pyperf.json"
rd compare "$OUT/eagle.pyperf.json" "$OUT/eager.pyperf.json" | head -14
log "one launch started beside 16 CPU hogs (a slow start is not a hang)"
for _ in $(seq 16); do python3 -c 'while True: pass' & done
rd probe spec-decode $SLICE --launches 1 --no-snapshot -o "$OUT/hogs.json" | tail -3
kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
python3 -c "import json,sys; r=json.load(open('$OUT/hogs.json')); la=r['launches'][0]; print('hogs launch:', la['status'], 'duration_s', la['duration_s'], 'window_s', (la.get('footer') or {}).get('measure_window_s'))"
log "collectives sweep, twice, judged per size"
rd probe collectives --tp 1 --sizes 1K:64M:4 --launches 3 -o "$OUT/coll-a.json" | tail -3
rd probe collectives --tp 1 --sizes 1K:64M:4 --launches 3 -o "$OUT/coll-b.json" | tail -3
rd compare "$OUT/coll-a.json" "$OUT/coll-b.json" | head -20
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
rm -rf "$OUT/home"
