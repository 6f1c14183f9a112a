#!/bin/bash
# Low-bit weights on one GPU: kimi-k2.5 (INT4 W4A16 g32 routed experts) and kimi-k2 (FP8 e4m3 blocks)
# against the same shapes in bf16, at the TP8-slice (one rank of an 8-GPU node), 8 layers, context 4096:
# verify (eager and in a CUDA graph) and plain decode per weight format, then explain's floors for each.
#   OUT=/some/dir bash bench/gpu_lowbit.sh        (from the repository root; ~5 minutes on an H200)
# Records: $OUT/lowbit-<model>-<weights>-<mode>.json; explain --json of each: $OUT/explain-*.json;
# the low-bit kernels' own check (before any probe): $OUT/kernels.txt.
set -u
OUT=${OUT:?set OUT to a directory for the records}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
log() { echo "== $(date +%T) $*"; }
rd() { timeout -k 10 "${T:-240}" python3 -m regdiag "$@"; echo "rc=$?"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
python3 - > "$OUT/kernels.txt" 2>&1 <<'EOF'
import sys, torch
sys.path.insert(0, "probes")
import _lowbit
dev = torch.device("cuda")
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", getattr(_lowbit.triton, "__version__", None))
for fmts in ({"w_attn": "fp8_block128", "w_routed": "fp8_block128"}, {"w_routed": "int4_g32"}):
    print(fmts, _lowbit.check_kernels(dev, torch.bfloat16, fmts))
# INT4: the Triton kernel against its own dequantized reference at the TP8-slice's w13 shape.
m = _lowbit.Int4Experts(8, 512, 7168, dev, torch.bfloat16, _lowbit.int4_impl(True))
x = torch.randn(3, 7168, device=dev, dtype=torch.bfloat16)
rows, ex = torch.tensor([0, 1, 2, 2], device=dev), torch.tensor([5, 5, 0, 7], device=dev)
y = m(x, rows, ex)
if m.impl == "triton":
    m.impl = "reference"
    r = m(x, rows, ex)
    print("int4 triton vs reference: max abs", (y.float() - r.float()).abs().max().item(), "mean |ref|", r.float().abs().mean().item())
# FP8 grouped against the bf16 grouped mm on dequantized weights.
e = _lowbit.Fp8Experts(4, 512, 7168, dev)
offs = torch.tensor([1, 1, 3, 4], device=dev, dtype=torch.int32)
xs = torch.randn(4, 7168, device=dev, dtype=torch.bfloat16)
yq = e(xs, offs, torch.bfloat16)
wd = (e.w.float() * e.scale.unsqueeze(-1)).to(torch.bfloat16)
yr = torch._grouped_mm(xs, wd.transpose(1, 2), offs=offs)
print("fp8 grouped vs bf16 grouped: max abs", (yq.float() - yr.float()).abs().max().item(), "mean |ref|", yr.float().abs().mean().item())
EOF
cat "$OUT/kernels.txt"

COMMON="--tp-slice 8 --layers 8 --launches 2 --cycles 40 --context 4096"
for spec in "kimi-k2.5 preset" "kimi-k2.5 bf16" "kimi-k2 preset" "kimi-k2 bf16"; do
  set -- $spec
  m=$1 w=$2
  log "$m weights=$w: eagle (verify graph), eagle (verify eager), decode"
  rd probe spec-decode --preset "$m" --weights "$w" $COMMON -o "$OUT/lowbit-$m-$w-eagle.json"
  rd probe spec-decode --preset "$m" --weights "$w" $COMMON --verify-graph off -o "$OUT/lowbit-$m-$w-eager.json"
  rd probe spec-decode --preset "$m" --weights "$w" $COMMON --mode baseline -o "$OUT/lowbit-$m-$w-decode.json"
  for mode in eagle eager; do
    timeout -k 10 60 python3 -m regdiag explain "$OUT/lowbit-$m-$w-$mode.json" \
      --baseline "$OUT/lowbit-$m-$w-decode.json" --json > "$OUT/explain-$m-$w-$mode.json"
    echo "explain $m $w $mode rc=$?"
  done
done

python3 - "$OUT" <<'EOF'
import json, sys, glob, os, statistics
out = sys.argv[1]
print(f"{'record':38} {'weights (routed)':18} {'verify ms':>9} {'decode ms':>9} {'v/d':>5} {'bytes v/d':>9} {'verify floor':>12}")
for path in sorted(glob.glob(f"{out}/explain-*.json")):
    try:
        e = json.load(open(path))
    except ValueError:
        print(os.path.basename(path), "no explanation"); continue
    rows = {p["phase"]: p for p in e.get("phases", [])}
    v, d = rows.get("verify", {}), rows.get("decode", {})
    fmt = (e.get("model") or {}).get("w_routed")
    vm, dm = v.get("measured_ms"), d.get("measured_ms")
    ratio = f"{vm / dm:.2f}" if vm and dm else "-"
    print(f"{os.path.basename(path):38} {str(fmt):18} {vm or 0:9.3f} {dm or 0:9.3f} {ratio:>5} "
          f"{e.get('bytes_ratio_verify_decode') or 0:9.3f} {v.get('floor_ms') or 0:10.3f} ms")
for path in sorted(glob.glob(f"{out}/lowbit-*.json")):
    r = json.load(open(path))
    h = next((la.get("header") for la in r.get("launches", []) if la.get("header")), {}) or {}
    w = (h.get("model") or {}).get("weights") or {}
    print(os.path.basename(path), "graphs", h.get("graphs"), "weights", w.get("note") or w.get("formats"))
EOF
rm -rf "$OUT/home"
ls -la "$OUT"
