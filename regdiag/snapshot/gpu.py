"""Per-GPU state through NVML: clocks, clock-event (throttle) reasons, power, PCIe link, topology.

NVML only: no torch, no CUDA context (creating one costs ~300 MB of GPU memory per process and
changes the very clocks we are reading). pynvml is used when importable; otherwise `nvidia-smi
--query-gpu` (gpu_smi.py) answers a subset. Each GPU is read in its own thread (NVML calls release
the GIL and are thread-safe), so an 8-GPU node costs about what one GPU costs.

Per-GPU fields are named "gpu<index>.<field>"; pairs are in "topology".
"""

from __future__ import annotations

import os
from typing import Any

from regdiag.probe_modules import load as load_probe_module
from regdiag.snapshot import fields as F
from regdiag.snapshot import gpu_smi

# Clock-event ("throttle") reason bits: the one table, shared with the probes' clock sampler.
_NVML = load_probe_module("_nvml")
REASON_BITS = _NVML.REASON_BITS
reason_names = _NVML.reason_names

# nvmlPerfPolicyType_t -> name, for the cumulative violation (throttle time) counters.
VIOLATION_POLICIES = (
    (0, "power"),
    (1, "thermal"),
    (2, "sync_boost"),
    (3, "board_limit"),
    (4, "low_utilization"),
    (5, "reliability"),
    (10, "total_app_clocks"),
    (11, "total_base_clocks"),
)

# nvmlGpuTopologyLevel_t -> the abbreviations of `nvidia-smi topo -m`.
TOPOLOGY = {0: "SAME", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
P2P_STATUS = {
    0: "ok",
    1: "chipset_not_supported",
    2: "gpu_not_supported",
    3: "ioh_topology_not_supported",
    4: "disabled_by_regkey",
    5: "not_supported",
    6: "unknown",
}
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
NVML_NOT_SUPPORTED = 3
NVML_FUNCTION_NOT_FOUND = 13
NVLINK_MAX_LINKS = 18
# Device nodes the NVIDIA driver creates (/dev/dxg: WSL2, where NVML goes through DirectX).
DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def collect(timeout_s: float = 5.0, source: str = "auto") -> dict[str, Any]:
    """source: "auto" (NVML when pynvml is importable, else nvidia-smi), "nvml" or "nvidia-smi"."""
    if source == "auto" and not any(os.path.exists(d) for d in DEVICE_NODES):
        # Without these nodes NVML cannot work; saying so costs 0.1 ms instead of importing pynvml.
        return F.failed_group(F.UNSUPPORTED, "no NVIDIA driver on this host (no /dev/nvidiactl)")
    nvml: Any = None
    if source in ("auto", "nvml"):
        try:
            import pynvml

            nvml = pynvml
        except Exception:  # noqa: BLE001 - absent or broken pynvml: try nvidia-smi
            nvml = None
        if nvml is None and source == "nvml":
            return F.failed_group(F.UNSUPPORTED, "pynvml (nvidia-ml-py) is not installed")
    if nvml is None:
        return gpu_smi.collect(timeout_s)
    return _collect_nvml(nvml, timeout_s)


class _Nvml:
    """Calls into pynvml that turn NVML errors into field statuses."""

    def __init__(self, nvml: Any):
        self.n = nvml

    def call(self, fn_name: str, *args: Any, conv: Any = None) -> F.Field:
        fn = getattr(self.n, fn_name, None)
        if fn is None:
            return F.unsupported(f"{fn_name} is not in this pynvml")
        try:
            v = fn(*args)
        except self.n.NVMLError as e:
            code = getattr(e, "value", None)
            if code in (NVML_NOT_SUPPORTED, NVML_FUNCTION_NOT_FOUND):
                return F.unsupported(f"{fn_name}: {_s(e)}")
            return F.error(f"{fn_name}: {_s(e)}")
        except Exception as e:  # noqa: BLE001
            return F.error(f"{fn_name}: {F.describe_exc(e)}")
        if conv is None:
            return F.ok(v)
        try:
            return F.ok(conv(v))
        except Exception as e:  # noqa: BLE001
            return F.error(f"{fn_name}: {F.describe_exc(e)}")

    def first(self, names: tuple[str, ...], *args: Any, conv: Any = None) -> F.Field:
        """The first of several equivalent functions (renamed across NVML versions) that exists."""
        result = F.unsupported(f"none of {', '.join(names)} in this pynvml")
        for name in names:
            if hasattr(self.n, name):
                result = self.call(name, *args, conv=conv)
                if result["status"] == F.OK:
                    return result
        return result


def _collect_nvml(nvml: Any, timeout_s: float) -> dict[str, Any]:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        code = getattr(e, "value", None)
        # 12 library not found, 9 driver not loaded: a machine without an NVIDIA driver.
        if code in (9, 12):
            return F.failed_group(F.UNSUPPORTED, f"no NVIDIA driver on this host (NVML: {_s(e)})")
        return F.failed_group(F.ERROR, f"NVML init failed: {_s(e)}")
    except Exception as e:  # noqa: BLE001
        return F.failed_group(F.ERROR, f"NVML init failed: {F.describe_exc(e)}")
    try:
        nv = _Nvml(nvml)
        fields: dict[str, F.Field] = {
            "driver_version": nv.call("nvmlSystemGetDriverVersion", conv=_s),
            "cuda_driver_version": nv.call(
                "nvmlSystemGetCudaDriverVersion", conv=lambda v: f"{v // 1000}.{(v % 1000) // 10}"
            ),
            "nvml_version": nv.call("nvmlSystemGetNVMLVersion", conv=_s),
        }
        count = nv.call("nvmlDeviceGetCount")
        fields["count"] = count
        n = count["value"] if count["status"] == F.OK else 0
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        per_gpu = F.parallel_map(lambda ih: _device(nv, ih[0], ih[1]), list(enumerate(handles)))
        for dev in per_gpu:
            fields.update(dev)
        fields["topology"] = _topology(nv, handles) if n > 1 else F.unsupported("one GPU: no pairs")
        group = F.group(fields)
        group["source"] = "nvml"
        return group
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down is best effort
            pass


def _device(nv: _Nvml, i: int, h: Any) -> dict[str, F.Field]:
    n = nv.n
    sm, mem = n.NVML_CLOCK_SM, n.NVML_CLOCK_MEM
    f: dict[str, F.Field] = {
        "name": nv.call("nvmlDeviceGetName", h, conv=_s),
        "uuid": nv.call("nvmlDeviceGetUUID", h, conv=_s),
        "pci_bus_id": nv.call("nvmlDeviceGetPciInfo", h, conv=lambda p: _s(p.busId)),
        "vbios_version": nv.call("nvmlDeviceGetVbiosVersion", h, conv=_s),
        "clock_sm_mhz": nv.call("nvmlDeviceGetClockInfo", h, sm),
        "clock_sm_max_mhz": nv.call("nvmlDeviceGetMaxClockInfo", h, sm),
        "clock_sm_app_mhz": nv.call("nvmlDeviceGetApplicationsClock", h, sm),
        "clock_sm_default_app_mhz": nv.call("nvmlDeviceGetDefaultApplicationsClock", h, sm),
        "clock_mem_mhz": nv.call("nvmlDeviceGetClockInfo", h, mem),
        "clock_mem_max_mhz": nv.call("nvmlDeviceGetMaxClockInfo", h, mem),
        "clock_mem_app_mhz": nv.call("nvmlDeviceGetApplicationsClock", h, mem),
        "clock_mem_default_app_mhz": nv.call("nvmlDeviceGetDefaultApplicationsClock", h, mem),
        "pstate": nv.call("nvmlDeviceGetPerformanceState", h, conv=lambda v: f"P{v}"),
        "clock_event_reasons": nv.first(
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
            h,
            conv=reason_names,
        ),
        "violation_time_ns": _violations(nv, h),
        "power_draw_w": nv.call("nvmlDeviceGetPowerUsage", h, conv=lambda mw: round(mw / 1000.0, 1)),
        "power_limit_w": nv.call("nvmlDeviceGetEnforcedPowerLimit", h, conv=lambda mw: round(mw / 1000.0, 1)),
        "power_default_limit_w": nv.call(
            "nvmlDeviceGetPowerManagementDefaultLimit", h, conv=lambda mw: round(mw / 1000.0, 1)
        ),
        "temperature_c": nv.call("nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU),
        "temperature_slowdown_c": nv.call(
            "nvmlDeviceGetTemperatureThreshold", h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        "pcie_gen": nv.call("nvmlDeviceGetCurrPcieLinkGeneration", h),
        "pcie_gen_max": nv.call("nvmlDeviceGetMaxPcieLinkGeneration", h),
        "pcie_width": nv.call("nvmlDeviceGetCurrPcieLinkWidth", h),
        "pcie_width_max": nv.call("nvmlDeviceGetMaxPcieLinkWidth", h),
        "pcie_replay_count": nv.call("nvmlDeviceGetPcieReplayCounter", h),
        "persistence_mode": nv.call("nvmlDeviceGetPersistenceMode", h, conv=bool),
        "ecc_mode": nv.call("nvmlDeviceGetEccMode", h, conv=lambda cp: "enabled" if cp[0] else "disabled"),
        "mig_mode": nv.call("nvmlDeviceGetMigMode", h, conv=lambda cp: "enabled" if cp[0] else "disabled"),
        "compute_mode": nv.call("nvmlDeviceGetComputeMode", h, conv=lambda v: COMPUTE_MODES.get(v, str(v))),
        "utilization_gpu_pct": nv.call("nvmlDeviceGetUtilizationRates", h, conv=lambda u: u.gpu),
        "utilization_mem_pct": nv.call("nvmlDeviceGetUtilizationRates", h, conv=lambda u: u.memory),
        "memory_used_mib": nv.call("nvmlDeviceGetMemoryInfo", h, conv=lambda m: m.used >> 20),
        "memory_total_mib": nv.call("nvmlDeviceGetMemoryInfo", h, conv=lambda m: m.total >> 20),
        "compute_processes": nv.call("nvmlDeviceGetComputeRunningProcesses", h, conv=len),
        # Who holds the GPU, for `snapshot --check` and the probes' busy-GPU refusal (one helper for both).
        "processes": _processes(nv, i, h),
        "numa_node": nv.call("nvmlDeviceGetNumaNodeId", h),
        "nvlink": _nvlinks(nv, h),
    }
    return {f"gpu{i}.{k}": v for k, v in f.items()}


def _processes(nv: _Nvml, i: int, h: Any) -> F.Field:
    """[{gpu, pid, used_bytes, command}] of the processes on this GPU (the command is its program and
    first argument only: the rest of a command line may carry secrets)."""
    try:
        return F.ok(_NVML.gpu_processes(nv.n, [(i, h)]))
    except Exception as e:  # noqa: BLE001
        return F.error(f"processes: {F.describe_exc(e)}")


def _violations(nv: _Nvml, h: Any) -> F.Field:
    out: dict[str, int] = {}
    last: F.Field | None = None
    for policy, name in VIOLATION_POLICIES:
        r = nv.call("nvmlDeviceGetViolationStatus", h, policy, conv=lambda v: int(v.violationTime))
        if r["status"] == F.OK:
            out[name] = r["value"]
        else:
            last = r
    if not out and last is not None:
        return last
    return F.ok(out)


def _nvlinks(nv: _Nvml, h: Any) -> F.Field:
    states: dict[str, str] = {}
    first_failure: F.Field | None = None
    for link in range(NVLINK_MAX_LINKS):
        r = nv.call("nvmlDeviceGetNvLinkState", h, link)
        if r["status"] == F.OK:
            states[str(link)] = "active" if r["value"] else "inactive"
        elif first_failure is None:
            first_failure = r
        if r["status"] != F.OK and link == 0:
            break  # link 0 missing means no NVLink on this board; don't ask 17 more times
    if not states:
        return first_failure or F.unsupported("no NVLink")
    return F.ok({"active": sum(s == "active" for s in states.values()), "links": states})


def _topology(nv: _Nvml, handles: list[Any]) -> F.Field:
    n = nv.n
    pairs: dict[str, dict[str, Any]] = {}
    for a in range(len(handles)):
        for b in range(a + 1, len(handles)):
            ha, hb = handles[a], handles[b]
            link = nv.call(
                "nvmlDeviceGetTopologyCommonAncestor", ha, hb, conv=lambda v: TOPOLOGY.get(v, str(v))
            )
            item: dict[str, Any] = {"link": link["value"] if link["status"] == F.OK else None}
            for cap_name, cap in (
                ("p2p_read", n.NVML_P2P_CAPS_INDEX_READ),
                ("p2p_write", n.NVML_P2P_CAPS_INDEX_WRITE),
                ("p2p_nvlink", n.NVML_P2P_CAPS_INDEX_NVLINK),
            ):
                r = nv.call("nvmlDeviceGetP2PStatus", ha, hb, cap, conv=lambda v: P2P_STATUS.get(v, str(v)))
                item[cap_name] = r["value"] if r["status"] == F.OK else r["status"]
            if item.get("p2p_nvlink") == "ok":
                item["link"] = "NV"
            pairs[f"{a},{b}"] = item
    return F.ok(pairs)
