"""The families of environment variables regdiag knows, in one table: what a snapshot ranks and keeps
readable, and what a bisect may take from a record.

Each `Family` is a name prefix with two flags:

  ranked      `diff` lists its variables with those that change how kernels, allocators, threads, the
              loader or the engines behave (regdiag.snapshot.env.family: 'perf'; NCCL_ first); a family
              not ranked is still known to the token rule (a short low-entropy value under it is kept
              readable, regdiag.snapshot.shapes.harmless_value)
  loads_code  some of its variables load code or choose the loader (PYTHONPATH, LD_PRELOAD,
              GLIBC_TUNABLES), or are not a record's to choose (regdiag's own, the launcher's); a bisect
              or ab takes such a variable from a record only with --allow-code-from-record
              (regdiag.bisect.code_vars.is_setting). In a family without the flag, a name that says it
              holds a location (..._PATH, ..._FILE, ..._PLUGIN) or a value that is one is refused all the same.

Standard library only (runs on remote hosts too).
"""

from __future__ import annotations

from typing import NamedTuple


class Family(NamedTuple):
    prefix: str
    ranked: bool
    loads_code: bool


FAMILIES = (
    Family("NCCL_", ranked=True, loads_code=False),
    Family("CUDA_", ranked=True, loads_code=False),
    Family("CUBLAS_", ranked=True, loads_code=False),
    Family("CUBLASLT_", ranked=True, loads_code=False),
    Family("CUDNN_", ranked=True, loads_code=False),
    Family("NVIDIA_", ranked=True, loads_code=False),
    Family("NV_", ranked=False, loads_code=False),  # NV_LIBCUBLAS_VERSION: a container's version labels
    Family("NVSHMEM_", ranked=True, loads_code=False),
    Family("NVPL_", ranked=True, loads_code=False),
    Family("UCX_", ranked=True, loads_code=False),
    Family("GLOO_", ranked=True, loads_code=False),
    Family("TORCH_", ranked=True, loads_code=False),  # TORCH_NCCL_* too
    Family("TORCHINDUCTOR_", ranked=True, loads_code=False),
    Family("TORCHDYNAMO_", ranked=True, loads_code=False),
    Family("TORCHELASTIC_", ranked=True, loads_code=True),  # the launcher's (run id, restarts, error file)
    Family("PYTORCH_", ranked=True, loads_code=False),
    Family("ATEN_", ranked=True, loads_code=False),
    Family("OMP_", ranked=True, loads_code=False),
    Family("KMP_", ranked=True, loads_code=False),
    Family("GOMP_", ranked=True, loads_code=False),
    Family("MKL_", ranked=True, loads_code=False),
    Family("OPENBLAS_", ranked=True, loads_code=False),
    # PYTHONPATH, PYTHONSTARTUP, PYTHONHOME; the harmless ones a bisect may set are named one by one
    # (regdiag.bisect.code_vars.SETTING_VARS: PYTHONHASHSEED, PYTHONMALLOC, ...)
    Family("PYTHON", ranked=True, loads_code=True),
    Family("MALLOC_", ranked=True, loads_code=False),
    Family("GLIBC_TUNABLES", ranked=True, loads_code=True),  # glibc.rtld.*: the loader's
    Family("LD_", ranked=True, loads_code=True),  # LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT
    Family("SGLANG_", ranked=True, loads_code=False),
    Family("SGL_", ranked=True, loads_code=False),
    Family("VLLM_", ranked=True, loads_code=False),
    Family("FLASHINFER_", ranked=True, loads_code=False),
    Family("TRITON_", ranked=True, loads_code=False),
    Family("DG_", ranked=True, loads_code=False),  # DeepGEMM
    # regdiag's own knobs (the probes' test hooks) change what a run measures; REGDIAG_PYTHON runs code
    Family("REGDIAG_", ranked=True, loads_code=True),
    Family("TOKENIZERS_", ranked=False, loads_code=False),
    Family("HF_HUB_", ranked=False, loads_code=False),
    Family("TRANSFORMERS_", ranked=False, loads_code=False),
    # Placement: which nodes and tasks a run got (SLURM_JOB_NODELIST=gpu-[001-004]); the allocation's own
    Family("SLURM_", ranked=False, loads_code=True),
)

ALL_PREFIXES = tuple(f.prefix for f in FAMILIES)
RANKED_PREFIXES = tuple(f.prefix for f in FAMILIES if f.ranked)
SETTING_PREFIXES = tuple(f.prefix for f in FAMILIES if not f.loads_code)
