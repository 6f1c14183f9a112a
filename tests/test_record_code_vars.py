"""Variables that load code are refused from a record by what they load, not by how their value looks:
a library, plugin or package named by a relative path or a bare name (regdiag/bisect/code_vars.py)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from regdiag.bisect.code_vars import LOADERS, is_setting
from regdiag.bisect.factors import load_side
from regdiag.errors import BadInput

# The three: each names code by a relative path or a bare name, which passed the value check.
REPORTED = {
    "OMP_TOOL_LIBRARIES": "bundle/libtool",
    "SGLANG_EXTERNAL_MODEL_PACKAGE": "evilmodels",
    "FLASHINFER_WORKSPACE_BASE": "ws",
}
# Values that do not look like a location: relative paths without ./, bare names, module:Class.
_PLAIN_VALUES = ("bundle/libtool", "evil", "pkg.sub", "mod:Cls", "lib/x", "1")
# Name parts that say a variable loads a library, a package, or builds what it loads.
_LOADING_PARTS = (
    "TOOL_LIBRARIES",
    "EXTERNAL_MODEL_PACKAGE",
    "PLUGIN_PACKAGES",
    "EXTRA_LDFLAGS",
    "JIT_COMPILER",
)
_FAMILIES = ("OMP_", "SGLANG_", "VLLM_", "FLASHINFER_", "TRITON_", "TORCH_", "NCCL_", "CUDA_")


def _snapshot(path: Path, env: dict[str, str]) -> str:
    fields = {k: {"status": "ok", "value": v} for k, v in env.items()}
    path.write_text(json.dumps({"schema": "regdiag.snapshot/2", "groups": {"env": {"fields": fields}}}))
    return str(path)


def test_the_reported_relative_paths_are_refused_naming_what_they_load(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path / "s.json", {**REPORTED, "OMP_NUM_THREADS": "4"})
    with pytest.raises(BadInput) as e:
        load_side(snap, "--b")
    line = str(e.value)
    assert "\n" not in line and "--allow-code-from-record" in line and "OMP_NUM_THREADS" not in line
    assert "FLASHINFER_WORKSPACE_BASE, OMP_TOOL_LIBRARIES, SGLANG_EXTERNAL_MODEL_PACKAGE for every" in line
    assert (
        "OMP_TOOL_LIBRARIES names a library" in line
        and "SGLANG_EXTERNAL_MODEL_PACKAGE names a Python" in line
    )
    assert load_side(snap, "--b", allow_code=True).env["OMP_TOOL_LIBRARIES"] == "bundle/libtool"


def test_every_loader_is_refused_whatever_its_value_looks_like() -> None:
    names = [*LOADERS, *(f + p for f, p in itertools.product(_FAMILIES, _LOADING_PARTS))]
    passed = [f"{n}={v}" for n, v in itertools.product(names, _PLAIN_VALUES) if is_setting(n, v)]
    assert passed == []
    # Settings of the same families stay settings, values with a slash among them (a model id).
    for name, value in {
        "OMP_NUM_THREADS": "8",
        "OMP_TOOL": "disabled",
        "SGLANG_ENABLE_TORCH_COMPILE": "0",
        "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "VLLM_SPEC_DRAFT_MODEL": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    }.items():
        assert is_setting(name, value), name
