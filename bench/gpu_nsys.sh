#!/bin/bash
# On one GPU with Nsight Systems: real nsys reports of the spec-decode probe (graph verify against
# eager verify), for the nsys importer's tests: nvtx_sum, cuda_gpu_kern_sum and nvtx_kern_sum, CSV
# and console.   OUT=/some/dir bash bench/gpu_nsys.sh   (~2 minutes; says so and stops without nsys)
OUT=${OUT:?set OUT to a directory}
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
if [ -z "$NSYS" ]; then echo "no nsys on this machine"; exit 0; fi
"$NSYS" --version
K="--preset kimi-k2 --tp-slice 8 --layers 8 --cycles 30"
for side in graph eager; do
  extra=""; [ $side = eager ] && extra="--verify-graph off"
  timeout 200 "$NSYS" profile -q -f true -o "$OUT/$side" --trace=cuda,nvtx python3 probes/spec_decode.py $K $extra \
    > "$OUT/$side.probe.jsonl" 2> "$OUT/$side.nsys.err"; echo "$side: nsys exit $?"
  for r in nvtx_sum cuda_gpu_kern_sum nvtx_kern_sum; do
    "$NSYS" stats -q --report $r --format csv -o "$OUT/$side" "$OUT/$side.nsys-rep" > /dev/null 2>> "$OUT/$side.stats.err"
    "$NSYS" stats -q --report $r "$OUT/$side.nsys-rep" > "$OUT/$side.$r.console.txt" 2>> "$OUT/$side.stats.err"
  done
  ls -la "$OUT" | grep "$side"
  rm -f "$OUT/$side.nsys-rep" "$OUT/$side.sqlite"
done
head -5 "$OUT"/graph_nvtx_kern_sum.csv 2>/dev/null
