#!/bin/bash
# On one GPU: the GPU tests, then regdiag stopped mid-launch by SIGTERM and by SIGKILL; afterwards no
# probe process and nothing on the GPU.   OUT=/some/dir bash bench/gpu_stop_check.sh   (~1 minute)
OUT=${OUT:?set OUT to a directory}
export PYTHONPATH=. PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
python3 -m pytest -q -p no:cacheprovider tests/test_probe_gpu.py tests/test_gpu_nvml.py tests/test_hang_watch.py 2>&1 | tail -5
for sig in TERM KILL; do
  python3 -m regdiag probe spec-decode --preset kimi-k2 --tp-slice 8 --layers 8 --cycles 400 --launches 3 --no-snapshot -o $OUT/sig-$sig.json > $OUT/sig-$sig.log 2>&1 &
  pid=$!; sleep 14; kill -$sig $pid; wait $pid; echo "SIG$sig: regdiag exit $?"; sleep 3
  tail -2 $OUT/sig-$sig.log
  pgrep -af "spec_decode.py" || echo "no probe process left"
  python3 -c "import json; r=json.load(open('$OUT/sig-$sig.json')); print('record:', r['status'], [la['status'] for la in r['launches']])" 2>&1 | tail -1
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
