#!/bin/bash
# On two GPUs: the NCCL lines the engine section reads (regdiag/server/engine_config.py), from real
# NCCL. A two-rank all-reduce sweep (torch.distributed, NCCL) runs under regdiag's server launcher
# (ServerProcess, as --launch-cmd runs an engine): NCCL_DEBUG=INFO is added by regdiag, NCCL_ALGO and
# NCCL_PROTO are set, TUNING asked for; the launch's engine_config must show NCCL's version, the two
# "set by environment" settings and a tuning line per size, and no NCCL line in the shown tail. Then
# the same with NCCL_DEBUG=WARN set by the user (nothing read, nothing added).
#   OUT=/some/dir bash bench/gpu_nccl_lines.sh        (~1 minute; nvidia-h200-x2)
OUT=${OUT:?set OUT to a directory}
export PYTHONPATH=. PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
nvidia-smi --query-gpu=name --format=csv,noheader
cat > "$OUT/sweep.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
r = dist.get_rank()
torch.cuda.set_device(r)
for n in (1024, 16384, 1 << 20, 16 << 20):
    x = torch.ones(n // 4, device="cuda")
    for _ in range(3):
        dist.all_reduce(x)
torch.cuda.synchronize()
print(f"rank {r} done", flush=True)
dist.destroy_process_group()
PY
timeout 300 python3 - "$OUT" > "$OUT/result.json" 2> "$OUT/result.err" <<'PY'
import json, shutil, sys
from regdiag.hosts.local import LocalHost
from regdiag.server.launch import ServerProcess
out = sys.argv[1]
torchrun = shutil.which("torchrun") or "torchrun"
argv = [torchrun, "--nproc-per-node", "2", f"{out}/sweep.py"]
result = {}
for name, env in (
    ("added", {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}),
    ("user_warn", {"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Ring"}),
):
    sp = ServerProcess(LocalHost(), argv, env, grace_s=20)
    sp.start()
    done = sp.wait_exit(240)
    sp.stop()
    launch = {}
    sp.record_into(launch)
    cfg = launch.get("engine_config") or {}
    result[name] = {
        "exited": done,
        "returncode": sp.returncode,
        "engine_config": cfg,
        "nccl_lines_in_tail": sum(" NCCL INFO " in ln for ln in sp.tail),
        "tail": list(sp.tail)[-6:],
    }
print(json.dumps(result, indent=1))
PY
echo "exit $?"; tail -5 "$OUT/result.err"
python3 - "$OUT/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for name, x in r.items():
    n = (x["engine_config"] or {}).get("nccl") or {}
    print(name, "rc", x["returncode"], "nccl_debug", (x["engine_config"] or {}).get("nccl_debug"),
          "version", n.get("version"), "set_by_environment", n.get("set_by_environment"),
          "tuning lines", len(n.get("tuning") or []), "NCCL lines shown", x["nccl_lines_in_tail"])
PY
pgrep -af "sweep.py" || echo "no sweep process left"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
