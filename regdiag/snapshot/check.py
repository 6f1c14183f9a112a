"""Is this machine fit for benchmarking? The GPU-aware counterpart of `pyperf system show`.

check_snapshot(record) reads a snapshot (never the live machine, so a stored snapshot can be checked
later, and tests use literal records) and returns reasons, each

    {"severity": "error" | "warning", "group": ..., "field": ..., "message": ..., "fix": ...}

An "error" makes the machine unfit (`regdiag snapshot --check` exits 1): numbers measured now would
carry the problem. A "warning" is printed but does not fail the check. The thresholds and the
reasoning behind each are in docs/snapshot.md.
"""

from __future__ import annotations

import re
from typing import Any

from regdiag.probe_modules import load as load_probe_module
from regdiag.snapshot import fields as F

describe_processes = load_probe_module("_nvml").describe_processes

ERROR = "error"
WARNING = "warning"

BUSY_UTIL_PCT = 5  # above this the GPU is doing someone else's work
CLOCK_FRACTION = 0.8  # busy SM clock below this fraction of max: throttled
GPU_MEM_FRACTION = 0.05  # memory in use on an otherwise idle GPU: a process is holding it
TEMP_MARGIN_C = 5  # this close to the slowdown temperature: about to throttle
LOAD_PER_CPU = 0.5  # load average per usable CPU above which other work competes
MEM_AVAILABLE_FRACTION = 0.10

# Clock-event reasons that cut clocks below what the GPU can do: the numbers are not the GPU's.
THROTTLE_REASONS = {
    "sw_power_cap": "software power cap",
    "hw_slowdown": "hardware slowdown (power brake or overheating)",
    "sw_thermal_slowdown": "software thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "external power brake",
    "board_limit": "board limit",
    "reliability": "reliability limit",
}
# Reasons that change clocks by configuration rather than by distress.
NOTE_REASONS = {
    "applications_clocks_setting": "application clocks setting",
    "sync_boost": "sync boost (clocks tied to other GPUs)",
    "display_clock_setting": "display clock setting",
}


_value = F.field_value


def _reason(severity: str, group: str, field: str, message: str, fix: str | None = None) -> dict[str, Any]:
    r = {"severity": severity, "group": group, "field": field, "message": message}
    if fix:
        r["fix"] = fix
    return r


def gpu_indices(gpu_group: dict[str, Any]) -> list[int]:
    found = set()
    for key in gpu_group.get("fields", {}):
        m = re.match(r"gpu(\d+)\.", key)
        if m:
            found.add(int(m.group(1)))
    return sorted(found)


def _check_gpu(g: dict[str, Any]) -> list[dict[str, Any]]:
    status = g.get("status")
    if status == F.UNSUPPORTED:
        return [
            _reason(
                WARNING,
                "gpu",
                "",
                f"no NVIDIA GPU visible ({g.get('note', 'unsupported')}): GPU checks skipped",
            )
        ]
    if status != F.OK:
        return [_reason(ERROR, "gpu", "", f"GPU state could not be read ({status}: {g.get('note', '')})")]
    out: list[dict[str, Any]] = []
    for i in gpu_indices(g):

        def v(name: str, i: int = i) -> Any:
            return _value(g, f"gpu{i}.{name}")

        def fld(name: str, i: int = i) -> str:
            return f"gpu{i}.{name}"

        util = v("utilization_gpu_pct")
        procs = v("compute_processes")
        busy = (util is not None and util > BUSY_UTIL_PCT) or bool(procs)
        if busy:
            what = []
            if util is not None:
                what.append(f"utilization {util} %")
            listed = v("processes")
            if listed:  # who: pid, command and memory, as the probes' busy-GPU refusal says it
                what.append(describe_processes(listed))
            elif procs:
                what.append(f"{procs} compute process{'es' if procs != 1 else ''}")
            out.append(
                _reason(
                    ERROR,
                    "gpu",
                    fld("utilization_gpu_pct"),
                    f"GPU {i} is busy ({', '.join(what)})",
                    "stop the other work on this GPU (nvidia-smi shows it)",
                )
            )
        used, total = v("memory_used_mib"), v("memory_total_mib")
        if not busy and used is not None and total and used > GPU_MEM_FRACTION * total:
            out.append(
                _reason(
                    WARNING,
                    "gpu",
                    fld("memory_used_mib"),
                    f"GPU {i} has {used} MiB of {total} MiB in use while idle: a process holds memory",
                )
            )
        reasons = v("clock_event_reasons") or []
        throttles = [r for r in reasons if r in THROTTLE_REASONS]
        if throttles:
            out.append(
                _reason(
                    ERROR,
                    "gpu",
                    fld("clock_event_reasons"),
                    f"GPU {i} clocks are held down: {', '.join(THROTTLE_REASONS[r] for r in throttles)}",
                    "check cooling, power delivery and the power limit (nvidia-smi -q -d PERFORMANCE)",
                )
            )
        notes = [r for r in reasons if r in NOTE_REASONS or r.startswith("0x")]
        if notes:
            out.append(
                _reason(
                    WARNING,
                    "gpu",
                    fld("clock_event_reasons"),
                    f"GPU {i} clock event: {', '.join(NOTE_REASONS.get(r, r) for r in notes)}",
                )
            )
        sm, sm_max = v("clock_sm_mhz"), v("clock_sm_max_mhz")
        if busy and sm and sm_max and sm < CLOCK_FRACTION * sm_max:
            out.append(
                _reason(
                    ERROR,
                    "gpu",
                    fld("clock_sm_mhz"),
                    f"GPU {i} SM clock {sm} MHz is {100 * sm / sm_max:.0f} % of its max {sm_max} MHz while busy",
                )
            )
        limit, default = v("power_limit_w"), v("power_default_limit_w")
        if limit is not None and default and limit < default - 0.5:
            out.append(
                _reason(
                    ERROR,
                    "gpu",
                    fld("power_limit_w"),
                    f"GPU {i} power limit {limit:g} W is below its default {default:g} W",
                    f"nvidia-smi -i {i} -pl {default:g}",
                )
            )
        width, width_max = v("pcie_width"), v("pcie_width_max")
        if width and width_max and width < width_max:
            out.append(
                _reason(
                    ERROR,
                    "gpu",
                    fld("pcie_width"),
                    f"GPU {i} PCIe link runs x{width}, below its x{width_max}",
                    "reseat the card or check the slot / riser",
                )
            )
        gen, gen_max = v("pcie_gen"), v("pcie_gen_max")
        # An idle GPU drops its link generation to save power; only a busy one below max is degraded.
        if busy and gen and gen_max and gen < gen_max:
            out.append(
                _reason(
                    ERROR,
                    "gpu",
                    fld("pcie_gen"),
                    f"GPU {i} PCIe link runs gen{gen} while busy, below its gen{gen_max}",
                )
            )
        if v("persistence_mode") is False:
            out.append(
                _reason(
                    WARNING,
                    "gpu",
                    fld("persistence_mode"),
                    f"GPU {i} persistence mode is off: each new process pays driver initialization",
                    f"nvidia-smi -i {i} -pm 1",
                )
            )
        app, app_default = v("clock_sm_app_mhz"), v("clock_sm_default_app_mhz")
        if app and app_default and app < app_default:
            out.append(
                _reason(
                    WARNING,
                    "gpu",
                    fld("clock_sm_app_mhz"),
                    f"GPU {i} application SM clock {app} MHz is set below its default {app_default} MHz",
                    f"nvidia-smi -i {i} -rac",
                )
            )
        temp, slow = v("temperature_c"), v("temperature_slowdown_c")
        if temp is not None and slow and temp >= slow - TEMP_MARGIN_C:
            out.append(
                _reason(
                    WARNING,
                    "gpu",
                    fld("temperature_c"),
                    f"GPU {i} is at {temp} C, within {TEMP_MARGIN_C} C of its slowdown temperature {slow} C",
                )
            )
        if v("mig_mode") == "enabled":
            out.append(
                _reason(WARNING, "gpu", fld("mig_mode"), f"GPU {i} is in MIG mode: a benchmark gets a slice")
            )
    return out


def _check_host(h: dict[str, Any]) -> list[dict[str, Any]]:
    if h.get("status") != F.OK:
        return [_reason(WARNING, "host", "", f"host state could not be read ({h.get('note', '')})")]
    out: list[dict[str, Any]] = []
    gov = _value(h, "cpu_governor")
    if isinstance(gov, dict):
        other = sorted(k for k in gov if k != "performance")
        if other:
            out.append(
                _reason(
                    ERROR,
                    "host",
                    "cpu_governor",
                    f"CPU frequency governor is {', '.join(other)}, not performance: launch and "
                    "host-side latency vary with CPU clocks",
                    "cpupower frequency-set -g performance",
                )
            )
    if _value(h, "cpu_boost") == "on":
        out.append(
            _reason(WARNING, "host", "cpu_boost", "CPU turbo boost is on: host-side timings vary with load")
        )
    load = _value(h, "load_avg")
    cpus = _value(h, "cpus_usable") or _value(h, "cpu_count")
    if load and cpus and load[0] > LOAD_PER_CPU * cpus:
        out.append(
            _reason(
                WARNING,
                "host",
                "load_avg",
                f"load average {load[0]:g} on {cpus} usable CPUs: other work is running",
            )
        )
    quota = _value(h, "cgroup_cpu_quota")
    count = _value(h, "cpu_count")
    if isinstance(quota, dict) and quota.get("cpus") and count and quota["cpus"] < count:
        out.append(
            _reason(
                WARNING,
                "host",
                "cgroup_cpu_quota",
                f"cgroup CPU quota is {quota['cpus']:g} CPUs of {count}: the host side can be throttled",
            )
        )
    avail, total = _value(h, "memory_available_mib"), _value(h, "memory_total_mib")
    if avail is not None and total and avail < MEM_AVAILABLE_FRACTION * total:
        out.append(
            _reason(
                WARNING, "host", "memory_available_mib", f"only {avail} MiB of {total} MiB memory available"
            )
        )
    return out


def _check_engine(e: dict[str, Any]) -> list[dict[str, Any]]:
    if e.get("status") == F.OK and _value(e, "dirty"):
        return [
            _reason(
                WARNING,
                "engine",
                "dirty",
                f"engine checkout has uncommitted changes ({_value(e, 'changed_files')} files, "
                f"{_value(e, 'diff_hash')}): results belong to that diff, not to the commit",
            )
        ]
    return []


def check_snapshot(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Reasons this snapshot's machine is not fit for benchmarking, errors first."""
    groups = record.get("groups", {})
    reasons = (
        _check_gpu(groups.get("gpu", {}))
        + _check_host(groups.get("host", {}))
        + _check_engine(groups.get("engine", {}))
    )
    return sorted(reasons, key=lambda r: r["severity"] != ERROR)


def is_fit(reasons: list[dict[str, Any]]) -> bool:
    return not any(r["severity"] == ERROR for r in reasons)
