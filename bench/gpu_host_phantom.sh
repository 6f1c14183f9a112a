#!/bin/bash
# Phantoms from the host side on one GPU (issue: the eager kimi-k2 slice whose second run had one launch
# at 18.6 ms): two runs of one environment back to back, compared; then a third run pinned to one CPU
# beside two CPU hogs pinned there too, compared with the first. Each launch records its host (the rank's
# CPU time, context switches, CPUs; load, steal, PSI, the others' CPU) and GPU samples; compare names
# what explains an outlier launch or says that nothing recorded differs.
#   OUT=/some/dir bash bench/gpu_host_phantom.sh       (ABBA=1: also what the host sampling costs)
# Runs from the repository root with PYTHONPATH=. (regdiag need not be installed); ~6 minutes on an H200.
set -u
OUT=${OUT:?set OUT to a directory for the records}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home COLUMNS=100
log() { echo "== $(date +%T) $*"; }
rd() { timeout -k 10 "${T:-300}" python3 -m regdiag "$@"; echo "rc=$?"; }
EAGER=${EAGER:-"--preset kimi-k2 --tp-slice 8 --layers 8 --launches 3 --cycles 30 --verify-graph off"}
CPU=${CPU:-3}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
rd snapshot --check

log "A/A: the eager slice twice, back to back"
rd probe spec-decode $EAGER -o "$OUT/eager-a.json"
rd probe spec-decode $EAGER -o "$OUT/eager-b.json"
rd compare "$OUT/eager-a.json" "$OUT/eager-b.json" | tee "$OUT/compare-a-b.txt"
rd compare "$OUT/eager-a.json" "$OUT/eager-b.json" --json >"$OUT/compare-a-b.json"
rd compare "$OUT/eager-a.json" "$OUT/eager-b.json" --exclude-flagged | tee "$OUT/compare-a-b-excluded.txt"

log "the same, pinned to CPU $CPU beside two CPU hogs pinned there"
cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null | sed 's/^/sched_autogroup_enabled=/' 
# each hog in a session of its own, as another job would be (a session shares a CPU as one party
# under the scheduler's autogroups, and regdiag starts the probe in a session of its own)
HOG="import os; os.setsid(); os.sched_setaffinity(0, {$CPU})
while True: pass"
python3 -c "$HOG" & H1=$!
python3 -c "$HOG" & H2=$!
taskset -c "$CPU" timeout -k 10 300 python3 -m regdiag probe spec-decode $EAGER -o "$OUT/eager-hogs.json"
echo "rc=$?"
kill "$H1" "$H2"
rd compare "$OUT/eager-a.json" "$OUT/eager-hogs.json" | tee "$OUT/compare-a-hogs.txt"
rd compare "$OUT/eager-a.json" "$OUT/eager-hogs.json" --json >"$OUT/compare-a-hogs.json"

log "per launch: verify median, the host's features, flags, SM clock while measuring"
python3 - "$OUT"/eager-a.json "$OUT"/eager-b.json "$OUT"/eager-hogs.json <<'EOF' | tee "$OUT/launches.txt"
import json, statistics, sys
from regdiag.host_phantom import features
from regdiag.phantom import in_measure_window
for path in sys.argv[1:]:
    run = json.load(open(path))
    for la in run["launches"]:
        v = la.get("samples", {}).get("verify") or [float("nan")]
        sm = [c.get("sm_mhz") for c in in_measure_window(la, la.get("clocks") or []) if c.get("sm_mhz")]
        f = {k: round(x, 2) for k, x in features(la).items()}
        print(path.rsplit("/", 1)[-1], la["index"], f"verify {statistics.median(v):.2f} ms",
              f"SM {min(sm) if sm else '-'}-{max(sm) if sm else '-'} MHz", f, la.get("host_flags"))
EOF
if [ "${ABBA:-0}" = 1 ]; then  # optional, a few more minutes: what recording the host costs eager verify
  log "the sampler's cost: single launches alternating REGDIAG_HOST_SAMPLING=0 and on, ABBA"
  for k in 1 2 3 4; do
    for on in $([ $((k % 2)) = 1 ] && echo "0 1" || echo "1 0"); do
      if [ "$on" = 0 ]; then export REGDIAG_HOST_SAMPLING=0; else unset REGDIAG_HOST_SAMPLING; fi
      rd probe spec-decode $EAGER --launches 1 -o "$OUT/cost-$k-$on.json" >/dev/null
    done
  done
  unset REGDIAG_HOST_SAMPLING
  python3 - "$OUT" <<'EOF' | tee "$OUT/cost.txt"
import json, statistics, sys
def med(k, on, m):
    return statistics.median(json.load(open(f"{sys.argv[1]}/cost-{k}-{on}.json"))["launches"][0]["samples"][m])
for m in ("cycle", "verify"):
    d = [100 * (med(k, 1, m) / med(k, 0, m) - 1) for k in (1, 2, 3, 4)]
    print(f"{m}: sampler on vs off, per pair {', '.join(f'{x:+.2f}' for x in d)} %; median {statistics.median(d):+.2f} %")
EOF
fi
rm -rf "$OUT/home"
ls -la "$OUT"
