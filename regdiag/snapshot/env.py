"""Environment variables that change how the engine, the kernels and NCCL behave, redacted.

Only an allowlist is recorded (a denylist leaks whatever nobody thought of). LD_LIBRARY_PATH is on
the list beyond the obvious prefixes because it decides which libnccl / libcudart a process loads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from regdiag.snapshot import fields as F
from regdiag.snapshot.redact import redact_env

PREFIXES = (
    "NCCL_",
    "CUDA_",
    "TORCH_",
    "PYTORCH_",
    "SGLANG_",
    "SGL_",
    "VLLM_",
    "FLASHINFER_",
    "TRITON_",
    "NVSHMEM_",
    "UCX_",
    "OMP_",
    "MKL_",
    "REGDIAG_",  # regdiag's own knobs (the probes' test hooks) change what a run measures
)
NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH"})


def allowed(name: str) -> bool:
    return name in NAMES or name.startswith(PREFIXES)


def collect(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    src = os.environ if environ is None else environ
    picked = {k: v for k, v in src.items() if allowed(k)}
    kept, redacted = redact_env(picked)
    fields: dict[str, F.Field] = {name: F.ok(value) for name, value in kept.items()}
    group = F.group(fields, status=F.OK)
    group["redacted"] = redacted
    return group
