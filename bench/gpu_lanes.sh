#!/bin/bash
# On one GPU: `bisect --lanes gpu` with a tiny env bisect (NCCL_ALGO, unread on one GPU, and 2 ms of
# planted GPU time in verify). It must say "1 lane (gpu0)", pin every launch to it and name the culprit.
#   OUT=/some/dir bash bench/gpu_lanes.sh   (~1 minute)
OUT=${OUT:?set OUT to a directory}
export PYTHONPATH=. PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home COLUMNS=100
nvidia-smi -L
t0=$SECONDS
timeout -k 10 240 python3 -m regdiag bisect --lanes gpu --good 'NCCL_ALGO=Ring' \
  --bad 'NCCL_ALGO=Tree REGDIAG_PROBE_SLOW=verify:2' --probe spec-decode --journal "$OUT/lanes.jsonl" \
  -- --preset tiny > "$OUT/lanes.md" 2> "$OUT/lanes.err"
echo "bisect --lanes gpu: exit $?, $((SECONDS - t0)) s"
grep -m2 "lane" "$OUT/lanes.err"; tail -12 "$OUT/lanes.md"
python3 - "$OUT/lanes.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
las = [r for r in rows if r.get("type") == "launch"]
where = collections.Counter(f"{(r.get('placement') or {}).get('lane')} {r.get('start')}" for r in las)
print("launches", len(las), "by lane and start", dict(where), "faults", sum(r.get("type") == "fault" for r in rows))
PY
pgrep -af "probes/(_warm|spec_decode)\.py" || echo "no probe process left"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
