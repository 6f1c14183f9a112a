"""Helpers for the snapshot tests: real git repositories, planted secrets, GPU-state records."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINES = ROOT / "baselines"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_AUTHOR_DATE": "2026-01-02T03:04:05+00:00",
    "GIT_COMMITTER_DATE": "2026-01-02T03:04:05+00:00",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_SYSTEM": os.devnull,
}


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ)
    env.update(GIT_ENV)
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip()


def make_repo(path: Path, commits: int = 2, remote: str | None = None) -> Path:
    """A real repository with `commits` commits on branch main and a tag on the first."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for i in range(commits):
        (path / "kernel.py").write_text(f"VERSION = {i}\n")
        git(path, "add", "kernel.py")
        git(path, "commit", "-q", "-m", f"change {i}")
        if i == 0:
            git(path, "tag", "v0.1")
    if remote:
        git(path, "remote", "add", "origin", remote)
    return path


# (variable, value, a substring that must never be shown). At least 20 shapes: by name, by URL, by
# token prefix, JWT, key blocks, key=value, bearer, and numbers too long to be a knob.
PLANTED: list[tuple[str, str, str]] = [
    ("SGLANG_API_KEY", "plainsecretvalue42xyz", "plainsecretvalue42"),
    ("VLLM_API_KEY", "token-abc123-notashape", "abc123-notashape"),
    ("NCCL_SOCKET_PASSWD", "hunter2hunter2", "hunter2hunter2"),
    ("TORCH_HUB_TOKEN", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", "hf_AbCdEfGhIjKlMnOpQrSt"),
    ("VLLM_S3_URL", "https://alice:pa55word99@bucket.example.com/models", "pa55word99"),
    ("SGLANG_REDIS_URL", "redis://:redispass123@cache.internal:6379/0", "redispass123"),
    (
        "TRITON_REMOTE",
        "https://ghp_0123456789abcdefghijABCDEFGHIJ0123@github.com/x.git",
        "ghp_0123456789abcdefghij",
    ),
    ("CUDA_EXTRA_ARGS", "--x ghp_ZYXWVUTSRQPONMLKJIHGFEDCBA9876543210", "ghp_ZYXWVUTSRQPONMLKJI"),
    ("TORCH_EXTRA", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_pat_11ABCDEFG0123"),
    ("VLLM_OPENAI_FALLBACK", "sk-proj-AbCdEf0123456789AbCdEf0123456789", "AbCdEf0123456789AbCdEf"),
    ("SGLANG_CLAUDE", "sk-ant-api03-QwErTy0123456789QwErTy0123456789", "QwErTy0123456789QwErTy"),
    ("NCCL_AWS_HINT", "AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    (
        "FLASHINFER_SESSION_JWT",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N",
    ),
    (
        "FLASHINFER_DEBUG_BLOB",
        "x=eyJhbGciOiJub25lIn0.eyJ1c2VyIjoiYm9iIn0.c2lnbmF0dXJlMTIz",
        "eyJ1c2VyIjoiYm9iIn0",
    ),
    ("OMP_LAUNCHER_ARGS", "--token=abcdef123456secret --threads 4", "abcdef123456secret"),
    ("MKL_PROXY_HEADER", "Authorization: Bearer abc123def456ghi789jkl", "abc123def456ghi789"),
    ("UCX_GITLAB", "glpat-AbCdEf0123456789AbCd", "glpat-AbCdEf0123456789"),
    ("NVSHMEM_NOTIFY", "xoxb-1234567890-abcdefghijkl", "xoxb-1234567890"),
    ("PYTORCH_MAPS", "AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdef"),
    ("SGL_COOKIE", "session=abcdef0123456789", "abcdef0123456789"),
    ("SGLANG_DB_CREDENTIALS", "svc:wh4t3ver", "wh4t3ver"),
    (
        "TORCH_SIGNING_PEM",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpQIBAAKCAQEAsecretbody\n-----END RSA PRIVATE KEY-----",
        "MIIEpQIBAAKCAQEAsecretbody",
    ),
    (
        "CUDA_PYPI_UPLOAD",
        "pypi-AgEIcHlwaS5vcmcCJDEyMzQ1Njc4LTEyMzQtMTIzNC0xMjM0LTEyMzQ1Njc4OTAxMg",
        "AgEIcHlwaS5vcmcCJDEyMzQ1Njc4",
    ),
    ("TRITON_NPM", "npm_abcdefghijklmnopqrstuvwxyz0123456789", "npm_abcdefghijklmnopqrstuv"),
    ("VLLM_SECRET_PIN", "12345678901234", "12345678901234"),
    ("SGLANG_AUTH", "Basic dXNlcjpwYXNzd29yZDEyMw==", "dXNlcjpwYXNzd29yZDEyMw"),
    ("CUDA_CACHE_URL", "https://cache.example.com/kernels?api_key=k3yk3yk3yk3y&v=2", "k3yk3yk3yk3y"),
    ("HF_TOKEN", "hf_NotAllowlistedAtAll0123456789ab", "hf_NotAllowlistedAtAll"),
]

# Knobs whose names look secret-ish or whose values look odd, that must keep their values.
HARMLESS: dict[str, str] = {
    "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD": "256",
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring,Tree",
    "SGLANG_TOKEN_BUDGET": "4096",
    "SGLANG_ENABLE_TORCH_COMPILE": "true",
    "VLLM_USE_V1": "1",
    "NCCL_DEBUG": "INFO",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    "TORCH_CUDA_ARCH_LIST": "9.0",
    "NCCL_SOCKET_IFNAME": "eth0",
    "TRITON_CACHE_DIR": "/root/.triton/cache",
    "SGLANG_PASSTHROUGH_KEY_RATIO": "0.25",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}


def planted_env() -> dict[str, str]:
    env = {name: value for name, value, _ in PLANTED}
    env.update(HARMLESS)
    return env


def field(value: Any) -> dict[str, Any]:
    return {"status": "ok", "value": value}


def h200_gpu_fields(i: int = 0, **over: Any) -> dict[str, dict[str, Any]]:
    """One idle H200 as NVML reported it on the lent machine (DESIGN's measured facts), overridable."""
    v: dict[str, Any] = {
        "name": "NVIDIA H200",
        "uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd",
        "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
        "clock_sm_mhz": 345,
        "clock_sm_max_mhz": 1980,
        "clock_sm_app_mhz": 1980,
        "clock_sm_default_app_mhz": 1980,
        "clock_mem_mhz": 3201,
        "clock_mem_max_mhz": 3201,
        "pstate": "P0",
        "clock_event_reasons": ["gpu_idle"],
        "power_draw_w": 76.2,
        "power_limit_w": 700.0,
        "power_default_limit_w": 700.0,
        "temperature_c": 29,
        "temperature_slowdown_c": 90,
        "pcie_gen": 5,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "persistence_mode": True,
        "ecc_mode": "enabled",
        "mig_mode": "disabled",
        "compute_mode": "default",
        "utilization_gpu_pct": 0,
        "utilization_mem_pct": 0,
        "memory_used_mib": 0,
        "memory_total_mib": 143771,
        "compute_processes": 0,
    }
    v.update(over)
    out = {f"gpu{i}.{k}": field(x) for k, x in v.items()}
    out[f"gpu{i}.numa_node"] = {"status": "unsupported", "value": None, "error": "NotSupported"}
    return out


def with_gpu(base: dict[str, Any], *gpus: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A copy of a real snapshot with its gpu group replaced by the given GPUs."""
    rec = copy.deepcopy(base)
    fields: dict[str, Any] = {
        "driver_version": field("580.159.03"),
        "cuda_driver_version": field("13.0"),
        "count": field(len(gpus)),
    }
    for g in gpus:
        fields.update(g)
    rec["groups"]["gpu"] = {"status": "ok", "fields": fields, "source": "nvml"}
    return rec


def set_field(rec: dict[str, Any], group: str, name: str, value: Any) -> dict[str, Any]:
    rec = copy.deepcopy(rec)
    rec["groups"][group]["fields"][name] = field(value)
    rec["groups"][group]["status"] = "ok"
    return rec


def write(path: Path, rec: dict[str, Any]) -> Path:
    path.write_text(json.dumps(rec), encoding="utf-8")
    return path
