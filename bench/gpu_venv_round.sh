#!/usr/bin/env bash
# This round's GPU evidence on one H200, in one call (docs/bench/gpu_venv_round.md has the output):
#   OUT=/some/dir bash bench/gpu_venv_round.sh
# The lent machine's python3 is itself a venv (torch with CUDA in it, not in its base interpreter):
# the case a package bisect lost torch in. Runs from the repository root with PYTHONPATH=.
# 1. spec-decode (the split runner) graphed and eager: the footer's `loaded` list (libnccl counts);
# 2. a package bisect from that venv over two wheels loaded into every process, one slowing verify;
# 3. a bisect over a package the probe never loads, refused before any launch;
# 4. the engine hook's CUDA path (transformers preset) with the per-cycle facts;
# 5. ab over a variable outside the NCCL family, named in both records and in compare.
set -u
OUT=${OUT:?set OUT to a directory for the outputs}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=/tmp/regdiag-round
W=/tmp/regdiag-round-wheels
log() { echo "== $(date +%T) $*"; }
rd() { timeout -k 10 "${T:-240}" python3 -m regdiag "$@"; echo "rc=$?"; }

log "interpreter"
python3 -c "import sys, torch; print(sys.executable, 'venv' if sys.prefix != sys.base_prefix else 'not a venv', sys.base_prefix, torch.__version__, torch.cuda.get_device_name(0))"
"$(python3 -c 'import sys; print(sys.base_prefix)')/bin/python3" -c "import torch" 2>&1 | tail -1

log "1. spec-decode kimi-k2 TP8 slice, 8 layers: verify graphed, then eager"
rd probe spec-decode --preset kimi-k2 --tp-slice 8 --layers 8 --launches 2 --cycles 30 -o "$OUT/graph.json"
rd probe spec-decode --preset kimi-k2 --tp-slice 8 --layers 8 --launches 2 --cycles 30 --verify-graph off -o "$OUT/eager.json"
python3 - "$OUT/graph.json" <<'PY'
import json, sys
la = json.load(open(sys.argv[1]))["launches"][0]
print("loaded by the probe's rank:", ", ".join(f"{d['name']} {d['version']}" for d in la["loaded"]))
PY
rd compare "$OUT/graph.json" "$OUT/eager.json" --allow-mismatch

log "2. package bisect from the venv (wheels loaded by .pth; kernpkg 2.0 adds 5 ms to verify)"
python3 - "$W" <<'PY'
import base64, hashlib, sys, zipfile
from pathlib import Path
d = Path(sys.argv[1]); d.mkdir(parents=True, exist_ok=True)
def line(a, b):
    return f"{a},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}"
def wheel(name, version, slow=None, pth=True):
    info = f"{name}-{version}.dist-info"
    init = "import os\n" + (f"os.environ['REGDIAG_PROBE_SLOW'] = {slow!r}\n" if slow else "")
    files = {f"{name}/__init__.py": init.encode(),
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: gpu-round\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if pth:
        files[f"{name}-boot.pth"] = f"import {name}\n".encode()
    files[f"{info}/RECORD"] = ("\n".join([line(a, b) for a, b in files.items()] + [f"{info}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(d / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for a, b in files.items():
            z.writestr(a, b)
for v in ("1.0", "2.0"):
    wheel("kernpkg", v, "verify:5" if v == "2.0" else None)
    wheel("otherpkg", v)
    wheel("flashinfer_python", v, pth=False)
print(sorted(p.name for p in d.iterdir()))
PY
T=540 rd bisect --python "$(command -v python3)" --find-links "$W" --installer pip \
  --good 'kernpkg==1.0 otherpkg==1.0' --bad 'kernpkg==2.0 otherpkg==2.0' \
  --probe spec-decode --metric verify --launches 2 --max-launches 4 --journal "$OUT/bisect.jsonl" \
  -- --preset kimi-k2 --tp-slice 8 --layers 4 --cycles 20

log "3. a package the probe never loads"
rd bisect --python "$(command -v python3)" --find-links "$W" --installer pip \
  --good 'kernpkg==1.0 flashinfer_python==1.0' --bad 'kernpkg==2.0 flashinfer_python==2.0' \
  --probe spec-decode -- --preset kimi-k2 --tp-slice 8 --layers 4
python3 probes/_loaded.py torch torch.distributed | python3 -c "import json,sys; print('what torch + torch.distributed load:', ', '.join(d['name'] for d in json.load(sys.stdin)['dists']))"

log "4. engine hook, CUDA path (transformers preset)"
timeout -k 10 240 bash bench/gpu_engine_facts.sh "$OUT/engine" | grep -v '^{' ; echo "rc=${PIPESTATUS[0]}"
cp "$OUT/engine/same.json" "$OUT/engine-same.json" 2>/dev/null; rm -rf "$OUT/engine"

log "5. ab: CUBLAS_WORKSPACE_CONFIG unset against :16:8"
rd ab --a -CUBLAS_WORKSPACE_CONFIG --b CUBLAS_WORKSPACE_CONFIG=:16:8 --launches 3 --no-snapshot -o "$OUT/ab" \
  --probe spec-decode -- --preset kimi-k2 --tp-slice 8 --layers 4 --cycles 20
python3 -c "import json; print('B record names:', json.load(open('$OUT/ab-b.json'))['design'].get('differences'))"

nvidia-smi --query-compute-apps=pid,used_memory --format=csv
rm -rf /tmp/regdiag-round "$W"
ls -la "$OUT"
