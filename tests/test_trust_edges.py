"""Trust at the edges: what a record may set in a launch, a shared REGDIAG_HOME, config.toml read
safely, and readers that a hostile peer file cannot stall or crash."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from regdiag.bisect.factors import Spec, code_from_record, is_setting, load_side
from regdiag.errors import BadInput

# ------------------------------------------------------------------------- code from records

# Tools whose variables load code or configuration that loads code; none of them is a tuning family.
_TOOLS = ("OPENSSL", "SSL", "GIT", "NVTX", "GST", "QT", "LIBVA", "VK", "MESA", "JAVA", "LUA", "GCONV", "PIP")
_LOADER_TAILS = ("_CONF", "_MODULES", "_PATH", "_INIT", "_OPTIONS", "_PLUGIN_PATH", "_DRIVER", "_ENGINES")
# Tuning families, and name parts within them that say the value is a location or chooses code.
_FAMILIES = ("NCCL_", "CUDA_", "TORCH_", "VLLM_", "SGLANG_", "OMP_", "TRITON_", "NVSHMEM_")
_LOCATION_PARTS = ("CONF_FILE", "NET_PLUGIN", "HOME", "EXTENSIONS_DIR", "INJECTION64_PATH", "LIB", "PLUGINS")
# Values that point at code, or make a shell run some, under a name that is otherwise a setting.
_CODE_VALUES = (
    "/tmp/x/libevil.so",
    "./evil.so",
    "../up/evil.py",
    "~/.x/evil.py",
    "$(touch /tmp/p)",
    "`id`",
    "file:///tmp/x",
    "eth0:/tmp/evil.so",
    "plugin.so",
    "${HOME}/x",
)
# Named in the report that led to the allow-list: each ran code, or could, with no refusal.
_REPORTED = {
    "OPENSSL_CONF": "/tmp/p.cnf",
    "SHELLOPTS": "xtrace",
    "PS4": "$(id>/tmp/p)",
    "NCCL_CONF_FILE": "/tmp/nccl.conf",
    "NVTX_INJECTION64_PATH": "/tmp/n.so",
    "TRITON_HOME": "/tmp/t",
    "CC": "/tmp/cc",
    "OPENSSL_MODULES": "/tmp/m",
    "PYTHONWARNINGS": "error::evil.Warn",
    "BASH_FUNC_ls%%": "() { id; }",
}

SETTINGS = {
    "NCCL_PROTO": "LL",
    "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1",
    "NCCL_SOCKET_IFNAME": "eth0",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "OMP_NUM_THREADS": "8",
    "TORCH_CUDA_ARCH_LIST": "8.0 9.0+PTX",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "VLLM_ATTENTION_BACKEND": "FLASHINFER",
    "VLLM_ENABLE_PREFIX_CACHING": "1",
    "VLLM_SPEC_DRAFT_MODEL": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "SGLANG_ENABLE_TORCH_COMPILE": "0",
    "NV_LIBCUBLAS_VERSION": "12.9.1.4-1",
    "PYTHONHASHSEED": "0",
    "MASTER_PORT": "29500",
}


def loader_variables() -> dict[str, str]:
    """Variables that load code, generated beyond any list the code keeps (over 150 of them)."""
    out = dict(_REPORTED)
    for tool, tail in itertools.product(_TOOLS, _LOADER_TAILS):
        out[tool + tail] = "/opt/x/" + tail.lower().strip("_")
    for fam, part in itertools.product(_FAMILIES, _LOCATION_PARTS):
        out[fam + part] = "evil"  # a bare word: the name alone says it is a location
    for (name, _), value in zip(itertools.cycle(SETTINGS.items()), _CODE_VALUES * 3, strict=False):
        out[name + "_X" if name in out else name] = value
    for i, value in enumerate(_CODE_VALUES):
        out[f"{_FAMILIES[i % len(_FAMILIES)]}SETTING_{i}"] = value
    return out


def test_a_record_may_set_settings_only_generated_loaders_refused() -> None:
    loaders = loader_variables()
    assert len(loaders) > 150
    passed = [f"{n}={v}" for n, v in loaders.items() if is_setting(n, v)]
    assert passed == []
    assert [n for n, v in SETTINGS.items() if not is_setting(n, v)] == []
    spec = Spec(env={**SETTINGS, **loaders})
    assert sorted(code_from_record(spec, {})) == sorted(loaders)
    # What this shell already runs with asks for nothing new.
    assert (
        code_from_record(
            Spec(env={"OPENSSL_CONF": "/etc/ssl/openssl.cnf"}), {"OPENSSL_CONF": "/etc/ssl/openssl.cnf"}
        )
        == []
    )


def test_a_snapshot_side_that_sets_openssl_conf_or_ps4_is_refused_unless_allowed(tmp_path: Path) -> None:
    env = {**SETTINGS, "OPENSSL_CONF": "/tmp/p.cnf", "SHELLOPTS": "xtrace", "PS4": "$(id)"}
    fields = {k: {"status": "ok", "value": v} for k, v in env.items()}
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"schema": "regdiag.snapshot/2", "groups": {"env": {"fields": fields}}}))
    with pytest.raises(BadInput) as e:
        load_side(str(snap), "--bad")
    line = str(e.value)
    assert "\n" not in line and "--allow-code-from-record" in line
    assert "OPENSSL_CONF, PS4, SHELLOPTS" in line and "NCCL_PROTO" not in line
    assert load_side(str(snap), "--bad", allow_code=True).env["PS4"] == "$(id)"
