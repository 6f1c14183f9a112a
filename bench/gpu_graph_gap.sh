#!/bin/bash
# Where do the microseconds between `probe collectives` in graph mode and nccl-tests -G go at small
# messages? One variable at a time, same host, same NCCL: the call path (--api nccl / torch), NCCL's
# graph-mixing support, graph launch amortized over more operations, and nccl-tests itself driven as
# one process over 2 GPUs (-g 2), as 2 threads (-t 2), and replayed once (-G 1) rather than 10 times.
#
#   OUT=/some/dir bash bench/gpu_graph_gap.sh      (needs .nccl-tests/ as bench/gpu_collectives.sh)
set -u
OUT=${OUT:?set OUT}
export PYTHONPATH=. PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
R=$OUT/gap.txt
: >"$R"
BUILD=$OUT/build
. "$(dirname "$0")/nccl_tests.sh"
build_nccl_tests .nccl-tests "$BUILD" "$OUT/build-env.txt"
nt() {
  echo "=== nccl-tests $*" >>"$R"
  LD_LIBRARY_PATH="${NT_LD:+$NT_LD:}${LD_LIBRARY_PATH:-}" timeout 60 "$BUILD/all_reduce_perf" -b 1K -e 8M -f 8 -n 50 -w 5 -c 0 "$@" 2>&1 |
    grep -E '^ +[0-9]' >>"$R"
}
nt -g 2
nt -g 2 -G 10
nt -g 2 -G 1
nt -t 2 -g 1 -G 10
NCCL_GRAPH_MIXING_SUPPORT=0 nt -g 2 -G 10
probe() { # probe TAG ENV-ASSIGNMENT ARGS...: one launch, its per-size table appended to gap.txt
  local tag=$1 envv=$2
  shift 2
  echo "=== probe $tag: $envv $*" >>"$R"
  env $envv timeout 120 python3 -m regdiag probe collectives --tp 2 --sizes 1K,64K,1M,8M --reps 5 --warmup 5 \
    --target-ms 1000 --launches 1 --no-snapshot -o "$OUT/$tag.json" "$@" >/dev/null 2>>"$OUT/err.txt"
  python3 -c "
import json, sys
for row in json.load(open(sys.argv[1]))['launches'][0]['footer']['table']:
    print(row['mode'], row['bytes'], row['us'], row['iters'])" "$OUT/$tag.json" >>"$R" 2>&1
}
probe nccl-i50 X=1 --iters 50
probe torch-i50 X=1 --iters 50 --api torch
probe nccl-i50-nomix NCCL_GRAPH_MIXING_SUPPORT=0 --iters 50
probe nccl-i500 X=1 --iters 500
rm -rf "$BUILD" "$OUT/home"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$R"
