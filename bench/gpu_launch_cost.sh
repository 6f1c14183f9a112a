#!/bin/bash
# On one GPU, in one call (~4-5 minutes, at most ~7.5): what a launch costs and what a bisect costs.
# 1. The kimi-k2 TP8-slice launch (--layers 8 --cycles 30), warm against cold, runs alternated
#    (bench/bench_launch.py): stage medians per mode, cycle CV per run, A/A verdicts.
# 2. A 4-variable env bisect (eager verify unless VERIFY is set): three NCCL_* variables that one GPU
#    never reads (TP=1: no NCCL) and the probe's REGDIAG_PROBE_SLOW=verify:1 (1 ms of GPU sleep in verify),
#    launches warm: its machine time (target <= 90 s), launches, points, and how each launch started.
# 3. Nothing of ours left: no probe process, nothing on the GPU (what is left is named, then ended).
#   OUT=/some/dir bash bench/gpu_launch_cost.sh
# Runs from the repository root with PYTHONPATH=. (regdiag need not be installed). Files in $OUT:
# launch.md, launch.json, bisect.md, bisect.jsonl, bisect.err, launch.err.
set -u
OUT=${OUT:?set OUT to a directory}
TMP=$(mktemp -d /tmp/launch-cost.XXXXXX)
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$TMP/home COLUMNS=100
log() { echo "== $(date +%T) $*"; }
# KIMI="--preset tiny ..." runs the same script on a CPU
KIMI=${KIMI:-"--preset kimi-k2 --tp-slice 8 --layers 8 --cycles 30"}
# The bisect's planted effect and the probe's verify mode: PLANT='REGDIAG_PROBE_HOST_SLOW=verify:3' (host
# time, which eager verify shows), VERIFY='' (verify as a CUDA graph, the probe's default).
PLANT=${PLANT:-REGDIAG_PROBE_SLOW=verify:1}
VERIFY=${VERIFY---verify-graph off}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__)"

if [ -z "${SKIP_LAUNCH:-}" ]; then  # SKIP_LAUNCH=1: the bisect alone
log "1. launch cost, warm vs cold, alternated: $KIMI"
t0=$SECONDS
timeout -k 10 230 python3 bench/bench_launch.py --runs 2 --launches 6 --out "$TMP/launch" -- $KIMI \
  > "$OUT/launch.md" 2> "$OUT/launch.err"
echo "bench exit $? in $((SECONDS - t0)) s"
cp "$TMP/launch/launch.json" "$OUT/" 2>/dev/null
cat "$OUT/launch.md"; tail -4 "$OUT/launch.err"
fi

log "2. 4-variable env bisect, metric verify, $PLANT: $KIMI $VERIFY"
t0=$SECONDS
timeout -k 10 200 python3 -m regdiag bisect \
  --good 'NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_BUFFSIZE=4194304' \
  --bad "NCCL_PROTO=Simple NCCL_ALGO=Tree NCCL_BUFFSIZE=8388608 $PLANT" \
  --probe spec-decode --metric verify --journal "$OUT/bisect.jsonl" --markdown \
  -- $KIMI $VERIFY > "$OUT/bisect.md" 2> "$OUT/bisect.err"
rc=$?
echo "bisect rc=$rc, machine time $((SECONDS - t0)) s (target <= 90 s)"
tail -22 "$OUT/bisect.md"; tail -3 "$OUT/bisect.err"
python3 - "$OUT/bisect.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
las = [r for r in rows if r.get("type") == "launch"]
if las:
    starts = {}
    for la in las:
        starts[la.get("start", "?")] = starts.get(la.get("start", "?"), 0) + 1
    d = [la["duration_s"] for la in las]
    print(f"launches {len(las)}, points {len({la['point'] for la in las})}, started {starts}; "
          f"launch duration median {statistics.median(d):.3f} s, sum {sum(d):.1f} s")
EOF

log "3. left over"
sleep 2
# only this checkout's probe processes (their command line names its probes/ by full path)
left=$(pgrep -f "$PWD/probes/(_warm|spec_decode)\.py")
if [ -n "$left" ]; then
  echo "LEFT OVER (a defect):"; ps -o pid,etime,args -p $left
  kill -9 $left 2>/dev/null
else
  echo "no probe process left"
fi
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
rm -rf "$TMP"
