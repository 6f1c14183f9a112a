# Sourced by the GPU benches that run nccl-tests beside the probe (gpu_collectives.sh, gpu_graph_gap.sh).
#
#   build_nccl_tests SRC BUILD ENVF   build nccl-tests from SRC (its source, carried to the host) into
#                                     BUILD; what it was built with, and how, appended to ENVF
#
# Afterwards NT_LD is the directory of the NCCL torch loads (its wheel's libnccl.so.2), empty when torch
# ships none: nccl-tests runs with LD_LIBRARY_PATH="${NT_LD:+$NT_LD:}..." so both sides of a table use
# the same library (nccl-tests' header lines say which: nccl-library=...).

build_nccl_tests() {
  local src=$1 build=$2 envf=$3 nvcc_bin rc
  if [ -z "${NCCL_HOME:-}" ]; then
    for p in /usr /usr/local /usr/local/cuda /opt/nvidia/nccl; do
      [ -f "$p/include/nccl.h" ] && { NCCL_HOME=$p; break; }
    done
  fi
  # nccl-tests' own default is /usr/local/cuda; elsewhere, the toolkit of the nvcc on PATH (links resolved).
  if [ -z "${CUDA_HOME:-}" ]; then
    CUDA_HOME=/usr/local/cuda
    [ -x $CUDA_HOME/bin/nvcc ] || CUDA_HOME=$(dirname "$(dirname "$(realpath "$(command -v nvcc)" 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")
  fi
  nvcc_bin=$CUDA_HOME/bin/nvcc
  {
    echo "# build: NCCL_HOME=${NCCL_HOME:-} CUDA_HOME=$CUDA_HOME nvcc=$nvcc_bin"
    grep -h "define NCCL_MAJOR\|define NCCL_MINOR\|define NCCL_PATCH" "${NCCL_HOME:-}/include/nccl.h" 2>/dev/null
    cat "$src/SOURCE" 2>/dev/null # the commit the source was taken from, written when it was fetched
  } >>"$envf" 2>&1
  timeout -k 10 300 make -j 16 -C "$src/src" MPI=0 NCCL_HOME="${NCCL_HOME:-}" CUDA_HOME="$CUDA_HOME" \
    NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 BUILDDIR="$(realpath -m "$build")" >"$build.log" 2>&1
  rc=$?
  echo "# build rc=$rc" >>"$envf"
  tail -5 "$build.log" | sed "s|$PWD/||g" >>"$envf" # paths relative to the checkout
  rm -f "$build.log"
  NT_LD=$(python3 -c "
import os
try:
    import nvidia.nccl as n
    d = os.path.join(list(n.__path__)[0], 'lib')
    print(d if os.path.exists(os.path.join(d, 'libnccl.so.2')) else '')
except Exception:
    print('')" 2>/dev/null)
  echo "# nccl-tests LD_LIBRARY_PATH prefix: ${NT_LD:-(system NCCL)}" >>"$envf"
  return $rc
}
