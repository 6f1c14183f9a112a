#!/bin/bash
# On one GPU: `probe spec-decode --profile` on the kimi-k2 TP8 slice (8 layers), read by compare as GPU
# work against GPU idle (docs/probes.md, "Profile"):
#   1. verify in a CUDA graph (graph) against eager (--verify-graph off);
#   2. eager against eager with a planted host-side slowdown of verify (REGDIAG_PROBE_HOST_SLOW: busy
#      host work between verify's torch calls): must read "GPU idle, host-bound";
#   3. graph against graph with planted extra matmuls in verify (REGDIAG_PROBE_EXTRA_OP): must read
#      "GPU work, kernel <the GEMM's>".
# Reports each run's profile cost and trace size, and whether the kernels inside graph replays were
# traced (graph_kernels_visible). Then nothing of ours on the GPU.
#   OUT=/some/dir bash bench/gpu_profile.sh        (~3 minutes; each run at most 2)
set -u
OUT=${OUT:?set OUT to a directory}
mkdir -p "$OUT"
HOME_DIR=$(mktemp -d)
export PYTHONPATH=. PYTHONUNBUFFERED=1 REGDIAG_HOME=$HOME_DIR
R=$OUT/report.txt
: >"$R"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader >>"$R"
COMMON=(--preset kimi-k2 --tp-slice 8 --layers 8 --cycles 30 --launches 3 --no-snapshot
  --profile --profile-cycles 3)

run() { # run TAG [ENV=VALUE] -- ARGS...: one run of the probe, its summary in TAG.summary.json
  local tag=$1 envv=$2
  shift 2
  local t0=$SECONDS
  env $envv timeout 120 python3 -m regdiag probe spec-decode "${COMMON[@]}" "$@" -o "$OUT/$tag.json" --json \
    >"$HOME_DIR/$tag.summary.json" 2>>"$OUT/err.txt"
  echo "=== run $tag ($envv $*): exit $?, $((SECONDS - t0)) s" >>"$R"
  python3 - "$HOME_DIR/$tag.summary.json" >>"$R" 2>&1 <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
p = s.get("profile") or {}
print("cycle run median ms:", next((m["run"] for m in s["metrics"] if m["metric"] == "cycle"), None))
print("profile cost s/launch:", p.get("cost_s_per_launch"),
      "cycle under profiler x", p.get("cycle_under_profiler_x"))
print("graph kernels visible:", p.get("graph_kernels_visible"))
for t in p.get("traces") or []:
    print("trace:", t["path"], f"{t['bytes'] / 1e6:.2f} MB")
for ph, f in (p.get("phases") or {}).items():
    print(f"  {ph}: wall {f['wall_ms']:.3f} busy {f['busy_ms']:.3f} idle {f['idle_ms']:.3f}"
          f" host {f['host_ms']:.3f} syncs {f['syncs']} kernels {f['kernels']}")
    print("    top:", ", ".join(f"{k['short']} {k['total_ms']:.3f} ms/{k['count']:g}" for k in f["top"]))
EOF
}

cmp() { # cmp A B: compare's terminal output (the profile lines) into the report
  echo "=== compare $1 -> $2" >>"$R"
  COLUMNS=140 python3 -m regdiag compare "$OUT/$1.json" "$OUT/$2.json" --margin 5% --allow-mismatch >>"$R" 2>&1
  echo "exit $?" >>"$R"
}

run graph X=1
run eager X=1 --verify-graph off
run eager_host REGDIAG_PROBE_HOST_SLOW=verify:10 --verify-graph off
run graph_extra REGDIAG_PROBE_EXTRA_OP=verify:20x4096
cmp graph eager
cmp eager eager_host
cmp graph graph_extra
echo "=== trace files (the first launch of each run)" >>"$R"
ls -la "$HOME_DIR"/runs/*.profile-0.json.gz >>"$R" 2>&1
# the eager run's trace comes back when it is small enough to open (Perfetto: ui.perfetto.dev)
T=$(ls "$HOME_DIR"/runs/*.profile-0.json.gz 2>/dev/null | sed -n 2p)
if [ -n "$T" ] && [ "$(stat -c %s "$T")" -lt 40000000 ]; then cp "$T" "$OUT/eager.trace.json.gz"; fi
rm -rf "$HOME_DIR"
pgrep -af "_warm.py|spec_decode.py" >>"$R" || echo "no probe process left" >>"$R"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$R"
cat "$R"
