#!/bin/bash
# On one GPU: `probe engine --profile` inside a real engine loop, Hugging Face transformers' assisted
# generation (tests/engine_fake/hf_assisted.py: two random-weight Llama models built there, no
# download), on CUDA, twice: plain, and with a host sync planted in verify (--verify-syncs 8: eight
# .item() reads after each forward of the target, each a copy to the host and a wait for the GPU).
# Then compare: verify must read "syncs +8"; draft and verify are split into work, idle, host, syncs,
# copies and collectives (docs/engine.md, "Profile").
#   OUT=/some/dir bash bench/gpu_engine_profile.sh       (from the repo root; ~3 minutes)
# Needs python3 with torch (CUDA) and transformers, and regdiag's own packages (typer, rich, pandas,
# scipy, paramiko). It installs nothing from the net (the device has none): a missing package is
# installed only from wheels carried in .whl/ (see the device README), else the script names what is
# missing in $OUT/missing.txt and exits 3.
set -u
OUT=${OUT:?set OUT to a directory}
mkdir -p "$OUT"
R=$OUT/report.txt
: >"$R"
missing=$(python3 - <<'EOF'
import importlib.util
names = ["torch", "transformers", "typer", "rich", "pandas", "scipy", "paramiko"]
print(" ".join(n for n in names if importlib.util.find_spec(n) is None))
EOF
)
if [ -n "$missing" ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl >>"$R" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  missing=$(python3 -c 'import importlib.util as u; print(" ".join(n for n in ["torch", "transformers", "typer", "rich", "pandas", "scipy", "paramiko"] if u.find_spec(n) is None))')
fi
if [ -n "$missing" ]; then
  echo "missing on this machine (no network; carry wheels in .whl/): $missing" | tee "$OUT/missing.txt"
  exit 3
fi
HOME_DIR=$(mktemp -d)
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$HOME_DIR
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name())'
} >>"$R" 2>&1
HF="python3 tests/engine_fake/hf_assisted.py --same --tokens 200 --device cuda --dtype bfloat16 --hidden 1024 --layers 4"

run() { # run TAG SYNCS: three engine starts, profiled, into TAG.json
  local t0=$SECONDS
  timeout 420 python3 -m regdiag probe engine --preset transformers -L 3 --no-snapshot --profile \
    --profile-cycles 5 -o "$OUT/$1.json" --launch-cmd "$HF --verify-syncs $2" >"$OUT/$1.summary.txt" 2>>"$OUT/err.txt"
  echo "=== run $1 (--verify-syncs $2): exit $?, $((SECONDS - t0)) s" >>"$R"
  cat "$OUT/$1.summary.txt" >>"$R"
}

run plain 0
run synced 8
echo "=== compare plain -> synced" >>"$R"
COLUMNS=200 python3 -m regdiag compare "$OUT/plain.json" "$OUT/synced.json" >"$OUT/compare.txt" 2>&1
echo "exit $?" >>"$OUT/compare.txt"
python3 -m regdiag compare "$OUT/plain.json" "$OUT/synced.json" --json >"$OUT/compare.json" 2>>"$OUT/err.txt"
cat "$OUT/compare.txt" >>"$R"
echo "=== checks" >>"$R"
python3 - "$OUT" >>"$R" 2>&1 <<'EOF'
import json, sys
out = sys.argv[1]
ok = True
def check(cond, what):
    global ok
    ok &= bool(cond)
    print("ok  " if cond else "FAIL", what)
for tag, syncs in (("plain", 0), ("synced", 8)):
    run = json.load(open(f"{out}/{tag}.json"))
    for la in run["launches"]:
        p = la.get("profile") or {}
        check(la["header"].get("timer") == "cuda-events", f"{tag} launch {la['index']}: CUDA events time the cycles")
        check(p.get("device") == "cuda", f"{tag} launch {la['index']}: profiled on CUDA ({p.get('error')})")
        for ph in ("draft", "verify"):
            f = (p.get("phases") or {}).get(ph) or {}
            print(f"     {tag}/{la['index']} {ph}: wall {f.get('wall_ms')} busy {f.get('busy_ms')} idle {f.get('idle_ms')}"
                  f" dispatch {f.get('dispatch_ms')} syncs {f.get('syncs')} sync_wait {f.get('sync_wait_ms')}"
                  f" copies {f.get('copies')} coll {f.get('collective_ms')} kernels {f.get('kernels')}"
                  f" sd {(f.get('spread') or {}).get('sd')}")
            check(f.get("busy_ms", 0) > 0 and f.get("kernels", 0) > 0, f"{tag} {ph}: GPU work traced")
        v = (p.get("phases") or {}).get("verify") or {}
        check(v.get("syncs", -1) >= syncs, f"{tag} verify: at least {syncs} syncs a cycle (got {v.get('syncs')})")
        print("     cost", p.get("cost"))
c = json.load(open(f"{out}/compare.json"))
rows = {r["phase"]: r for r in ((c.get("profile") or {}).get("phases") or [])}
v = rows.get("verify") or {}
check(abs((v.get("delta") or {}).get("syncs", 0) - 8) < 0.5, f"compare: verify syncs +8 (got {(v.get('delta') or {}).get('syncs')})")
print("     verify reading:", v.get("reading"), "noise:", v.get("noise"))
text = open(f"{out}/compare.txt").read()
check("syncs +8" in text, "compare's text says syncs +8")
print("ALL OK" if ok else "SOME CHECKS FAILED")
EOF
rm -rf "$HOME_DIR"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$R" 2>&1
cat "$R"
