#!/bin/bash
# `regdiag probe collectives --tp 2` beside nccl-tests (all_reduce_perf / all_gather_perf -g 2 -n 50, with
# and without -G) on two GPUs of one host, default NCCL and NCCL_P2P_DISABLE=1, then the kimi-k2 model
# sweep; bench/gpu_collectives_report.py turns $OUT into docs/bench/collectives.md. ~5 minutes on 2 H200s.
#
#   OUT=/some/dir bash bench/gpu_collectives.sh
#
# Downloads nothing: nccl-tests is built from the source in .nccl-tests/ (NVIDIA/nccl-tests, carried to
# the GPU host; ignored by git), against the system NCCL's headers, and runs on the NCCL torch loaded
# (the same library as the probe) when torch ships one, else on the system's. 9 files land in $OUT:
# nccl-tests.txt, coll-default.json, coll-default-torch.json (--api torch), coll-nomix.json,
# coll-p2p-off.json, coll-model.json, compare-p2p.json, env.txt, log.txt (the build and regdiag's home are
# removed at the end).
set -u
OUT=${OUT:?set OUT to a directory for the results}
SRC=${NCCL_TESTS_SRC:-.nccl-tests}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 REGDIAG_HOME=$OUT/home
# A lent multi-GPU host requires NVLink multicast off in every process (nccl-tests included).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$SECONDS
BUDGET=${BUDGET:-450} # seconds; optional steps are skipped past it so the whole stays under 8 minutes
LOG=$OUT/log.txt NT=$OUT/${NT_NAME:-nccl-tests.txt} ENVF=$OUT/env.txt BUILD=$OUT/build
mkdir -p "$OUT"
: >"$LOG"
: >"$NT"
log() { echo "== $(date +%T) +$((SECONDS - START))s $*" | tee -a "$LOG"; }
left() { [ $((SECONDS - START)) -lt "$BUDGET" ] || { log "SKIPPED (past ${BUDGET}s): $*"; return 1; }; }

{
  echo "# host"
  nvidia-smi -L
  nvidia-smi topo -m
  nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
} >"$ENVF" 2>&1

# --- build nccl-tests ---------------------------------------------------------------------------------
log "build nccl-tests from $SRC"
. "$(dirname "$0")/nccl_tests.sh"
build_nccl_tests "$SRC" "$BUILD" "$ENVF"
rc=$?
[ -x "$BUILD/all_reduce_perf" ] || log "BUILD FAILED (rc=$rc): nccl-tests rows will be empty; see env.txt"

# nt NAME ENV-ASSIGNMENT BINARY ARGS...: one nccl-tests run, its output appended to nccl-tests.txt
nt() {
  local name=$1 envv=$2 bin=$3
  shift 3
  [ -x "$BUILD/$bin" ] || return 0
  echo "=== RUN $name | $envv $bin $*" >>"$NT"
  env $envv LD_LIBRARY_PATH="${NT_LD:+$NT_LD:}${LD_LIBRARY_PATH:-}" \
    timeout -k 5 90 "$BUILD/$bin" "$@" >>"$NT" 2>&1
  echo "=== END $name rc=$?" >>"$NT"
}
# rd ENV-ASSIGNMENTS ARGS...: one regdiag command (ENV-ASSIGNMENTS may be ""), its exit status logged
rd() {
  local envv=$1
  shift
  env $envv timeout -k 10 "${T:-200}" python3 -m regdiag "$@" >/dev/null 2>"$OUT/last.err"
  local rc=$?
  log "rc=$rc: $envv regdiag $*"
  [ $rc = 0 ] || tail -3 "$OUT/last.err" | tee -a "$LOG"
}

MIN=${MIN:-1K} MAX=${MAX:-256M} # the sweep, the same on both sides (smaller ones for a dry run on CPU)
SWEEP="-b $MIN -e $MAX -f 2 -g 2 -n 50 -w 5 -c 0"
PROBE="--tp 2 --sizes $MIN:$MAX --iters 50 --reps 5 --warmup 5 --target-ms 1000 --launches ${LAUNCHES:-4} --no-snapshot"

# SECTIONS picks what runs (default all): ar (all-reduce: default, nomix, p2p-off, --api torch, the
# compare), ops (reduce-scatter and all-to-all, default NCCL), model (the kimi-k2 sizes).
SECTIONS=${SECTIONS:-ar ops model}
on() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
perf() { [ "$1" = all_to_all ] && echo alltoall_perf || echo "$1_perf"; } # nccl-tests' binary per op

# nomix: NCCL_GRAPH_MIXING_SUPPORT=0 on both sides. NCCL's support for graph and non-graph calls in
# flight together costs every call in a multi-process job microseconds (bench/gpu_graph_gap.sh).
on ar && for variant in default nomix p2p-off; do
  envv=""
  [ $variant = p2p-off ] && envv="NCCL_P2P_DISABLE=1"
  [ $variant = nomix ] && envv="NCCL_GRAPH_MIXING_SUPPORT=0"
  log "$variant: nccl-tests all_reduce_perf, eager and -G 10"
  nt "ar-$variant-eager" "$envv" all_reduce_perf $SWEEP
  nt "ar-$variant-graph" "$envv" all_reduce_perf $SWEEP -G 10
  log "$variant: regdiag probe collectives (eager and graph per size; NCCL called directly)"
  left "probe $variant" && rd "$envv" probe collectives $PROBE -o "$OUT/coll-$variant.json"
done
# The same sweep through torch.distributed: how much of a small message's time is torch's, not NCCL's.
if on ar && left "probe default --api torch"; then
  log "default: regdiag probe collectives --api torch"
  rd "" probe collectives $PROBE --api torch -o "$OUT/coll-default-torch.json"
fi

# The other collectives, default NCCL: rs (reduce_scatter_perf), aa (alltoall_perf), out of place.
for op in reduce_scatter all_to_all; do
  on ops || break
  tag=$([ $op = all_to_all ] && echo aa || echo rs)
  log "$op: nccl-tests $(perf $op), eager and -G 10; regdiag probe collectives --op $op"
  nt "$tag-default-eager" "" "$(perf $op)" $SWEEP
  nt "$tag-default-graph" "" "$(perf $op)" $SWEEP -G 10
  left "probe $op" && rd "" probe collectives $PROBE --op $op -o "$OUT/coll-$tag.json"
done

if on ar && [ -f "$OUT/coll-default.json" ] && [ -f "$OUT/coll-p2p-off.json" ]; then
  log "compare default vs NCCL_P2P_DISABLE=1"
  timeout -k 5 120 python3 -m regdiag compare "$OUT/coll-default.json" "$OUT/coll-p2p-off.json" --json \
    >"$OUT/compare-p2p.json" 2>>"$LOG"
  log "compare rc=$? (1 = REGRESSED)"
fi

# The kimi-k2 messages at TP=2 (hidden all-reduce, logits all-gathers and the expert-parallel
# all-to-all at 1, 3, 4, 8 tokens, bf16): nccl-tests one size per run, the probe in one launch.
if on model && left "model sweep"; then
  log "model:kimi-k2: regdiag probe collectives"
  rd "" probe collectives --tp 2 --sizes model:kimi-k2 --iters 50 --reps 5 --warmup 5 --target-ms 1000 \
    --launches 1 --no-snapshot -o "$OUT/coll-model.json"
  sizes=$(python3 -c "
import json
h = json.load(open('$OUT/coll-model.json'))['launches'][0]['header']
print(' '.join(f\"{s['op']}:{s['bytes']}\" for s in h['sizes']))" 2>/dev/null)
  log "model:kimi-k2: nccl-tests at the same sizes: ${sizes:-none (no record)}"
  for s in $sizes; do
    left "nccl-tests model sizes" || break
    op=${s%%:*} n=${s##*:}
    nt "model-$op-$n-eager" "" "$(perf "$op")" -b "$n" -e "$n" -g 2 -n 50 -w 5 -c 0 -d bfloat16
    nt "model-$op-$n-graph" "" "$(perf "$op")" -b "$n" -e "$n" -g 2 -n 50 -w 5 -c 0 -d bfloat16 -G 10
  done
fi

nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$ENVF" 2>&1
rm -rf "${OUT:?}/home" "${OUT:?}/last.err" "${BUILD:?}"
log "done in $((SECONDS - START)) s; files: $(ls "$OUT" | tr '\n' ' ')"
