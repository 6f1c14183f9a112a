"""On a machine with an NVIDIA driver: the snapshot's GPU fields equal what nvidia-smi reports.

Two independent paths to the same hardware: regdiag reads NVML through pynvml, this test asks the
nvidia-smi binary. Skipped where there is no driver. Run on a GPU box with:

    python -m pytest -s tests/test_gpu_nvml.py
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from regdiag.snapshot import gpu, gpu_smi
from regdiag.snapshot.diff import VOLATILE_GPU

pytestmark = pytest.mark.gpu


def _driver_ok() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=60).returncode == 0


if not _driver_ok():
    pytest.skip("no NVIDIA driver (nvidia-smi missing or failing)", allow_module_level=True)

# nvidia-smi query -> (snapshot field, how to turn nvidia-smi's text into the snapshot's value)
COMPARED: dict[str, tuple[str, Any]] = {
    "name": ("name", str),
    "uuid": ("uuid", str),
    "pci.bus_id": ("pci_bus_id", str.upper),
    "vbios_version": ("vbios_version", str),
    "clocks.max.sm": ("clock_sm_max_mhz", int),
    "clocks.max.mem": ("clock_mem_max_mhz", int),
    "clocks.default_applications.graphics": ("clock_sm_default_app_mhz", int),
    "enforced.power.limit": ("power_limit_w", float),
    "power.limit": ("power_limit_w", float),
    "power.default_limit": ("power_default_limit_w", float),
    "pcie.link.gen.max": ("pcie_gen_max", int),
    "pcie.link.width.max": ("pcie_width_max", int),
    "persistence_mode": ("persistence_mode", lambda s: s.lower() == "enabled"),
    "ecc.mode.current": ("ecc_mode", str.lower),
    "mig.mode.current": ("mig_mode", str.lower),
    "compute_mode": ("compute_mode", lambda s: s.lower().replace(" ", "_")),
    "memory.total": ("memory_total_mib", int),
}


def _smi(names: list[str]) -> list[dict[str, str]]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index," + ",".join(names), "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return gpu_smi.parse(out.stdout, ["index", *names])


@pytest.fixture(scope="module")
def nvml_group() -> dict[str, Any]:
    g = gpu.collect(source="nvml")
    assert g["status"] == "ok", g.get("note")
    assert g["source"] == "nvml"
    return g


def test_gpu_fields_match_nvidia_smi(nvml_group: dict[str, Any]) -> None:
    names = list(COMPARED)
    rows = _smi(names + ["driver_version"])
    f = nvml_group["fields"]
    assert f["count"]["value"] == len(rows)
    assert f["driver_version"]["value"] == rows[0]["driver_version"]
    compared = 0
    for row in rows:
        i = int(row["index"])
        shown = []
        for q, (name, conv) in COMPARED.items():
            raw = row[q]
            mine = f[f"gpu{i}.{name}"]
            if raw.lower() in ("[n/a]", "n/a", "[not supported]"):
                assert mine["status"] in ("unsupported", "ok"), (q, mine)
                shown.append(f"{q}={raw}/{mine['status']}")
                continue
            assert mine["status"] == "ok", (q, mine)
            want = conv(raw)
            if isinstance(want, float):
                assert abs(mine["value"] - want) <= 0.5, (q, mine["value"], want)
            else:
                assert mine["value"] == want, (q, mine["value"], want)
            compared += 1
            shown.append(f"{q}={raw}")
        print(f"GPU {i}: nvidia-smi and NVML agree on " + ", ".join(shown))
    assert compared >= 12 * len(rows)


def test_readings_are_sane(nvml_group: dict[str, Any]) -> None:
    f = nvml_group["fields"]
    for i in range(f["count"]["value"]):
        v = {
            k.split(".", 1)[1]: x["value"]
            for k, x in f.items()
            if k.startswith(f"gpu{i}.") and x["status"] == "ok"
        }
        assert 0 < v["clock_sm_mhz"] <= v["clock_sm_max_mhz"]
        assert v["clock_event_reasons"] and all(isinstance(r, str) for r in v["clock_event_reasons"])
        assert isinstance(v["violation_time_ns"], dict) and all(
            isinstance(x, int) for x in v["violation_time_ns"].values()
        )
        assert 0 < v["power_draw_w"] <= v["power_limit_w"] * 1.2
        assert v["pcie_gen"] <= v["pcie_gen_max"] and v["pcie_width"] <= v["pcie_width_max"]
        assert v["pstate"].startswith("P")
        statuses = {k.split(".", 1)[1]: x["status"] for k, x in f.items() if k.startswith(f"gpu{i}.")}
        print(f"GPU {i}: readings {v}; not ok: { {k: s for k, s in statuses.items() if s != 'ok'} }")


def test_nvidia_smi_fallback_agrees_with_nvml(nvml_group: dict[str, Any]) -> None:
    smi = gpu_smi.collect()
    assert smi["status"] == "ok" and smi["source"] == "nvidia-smi", smi.get("note")
    checked = 0
    for key, f in smi["fields"].items():
        sub = key.split(".", 1)[1] if key.startswith("gpu") else key
        if f["status"] != "ok" or sub in VOLATILE_GPU or key not in nvml_group["fields"]:
            continue
        mine = nvml_group["fields"][key]
        if isinstance(f["value"], float):
            assert abs(mine["value"] - f["value"]) <= 0.5, key
        else:
            assert mine["value"] == f["value"], (key, mine, f)
        checked += 1
    print(f"nvidia-smi fallback agrees with NVML on {checked} fields")
    assert checked >= 15
