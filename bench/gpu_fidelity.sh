#!/bin/bash
# On one GPU: how much of the cycle the phases cover (the footer's fidelity.phase_sum_gap_pct) on the tiny
# preset, with and without the NVTX ranges and the naive timer, 2 runs each. tests/test_probe_gpu.py asks
# for a median gap under 5 %.   OUT=/some/dir bash bench/gpu_fidelity.sh   (~1 minute)
OUT=${OUT:?set OUT to a directory}
for nvtx in 1 0; do for naive in --naive-timer ""; do for run in 1 2; do
  REGDIAG_NVTX=$nvtx python3 probes/spec_decode.py --preset tiny --device cuda --cycles 20 --warmup 3 $naive \
    > "$OUT/fid-$nvtx${naive:+-naive}-$run.jsonl" 2>/dev/null
  python3 - "$OUT/fid-$nvtx${naive:+-naive}-$run.jsonl" "NVTX=$nvtx ${naive:-events} run $run" <<'PY'
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
f = next((r for r in rows if r.get("type") == "footer"), None)
if f is None:
    print(sys.argv[2], "no footer"); sys.exit()
g = f["fidelity"]["phase_sum_gap_pct"]
s = f["summary"]
print(f"{sys.argv[2]}: gap median {g['median']:.2f} % max {g.get('max', float('nan')):.2f} %; cycle {s['cycle']['median']:.4f} ms,",
      ", ".join(f"{k} {v['median']:.4f}" for k, v in s.items() if k != "cycle"))
PY
done; done; done
