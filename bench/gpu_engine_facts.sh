#!/usr/bin/env bash
# The engine hook's CUDA path with the per-cycle facts (start-to-start period on CUDA events and on the
# host clock), on one GPU, through the transformers preset (a real engine loop,
# tiny random Llama, no download). Run from the repo root on a machine whose python3 has torch+CUDA and
# transformers:   bash bench/gpu_engine_facts.sh [OUT_DIR]
# Prints each summary and checks what a CPU run cannot: the timer is cuda-events, periods are there and
# never shorter than their cycle, host_period sits beside period. transformers reports no graph flag.
set -euo pipefail
out="${1:-engine-facts}"
mkdir -p "$out"
export PYTHONPATH=.
for draft in same random; do
  extra=$([ "$draft" = same ] && echo --same || true)
  python3 -m regdiag probe engine --preset transformers -L 3 --no-snapshot --json -o "$out/$draft.json" \
    --launch-cmd "python3 tests/engine_fake/hf_assisted.py $extra --tokens 200 --device cuda --dtype bfloat16 --hidden 1024 --layers 4" \
    | tee "$out/$draft.summary.json"
done
python3 - "$out" <<'PY'
import json, sys
for name in ("same", "random"):
    run = json.load(open(f"{sys.argv[1]}/{name}.json"))
    for la in run["launches"]:
        assert la["header"]["timer"] == "cuda-events", la["header"]["timer"]
        cyc, per = la["samples"]["cycle"], la["samples"]["period"]
        assert per and all(p >= c for c, p in zip(cyc, per)), "a period shorter than its cycle"
        assert la["values"].get("host_period"), "no host_period beside the CUDA-event period"
        s = la["scalars"]
        print(name, la["index"], "cycle", round(sorted(cyc)[len(cyc) // 2], 3), "period", s.get("period_ms_median"),
              "between", s.get("between_cycles_ms"), "accept", s.get("accept_len_mean"),
              "absent", la["phases_absent"], "graph", la.get("graph_share"))
print("ok")
PY
