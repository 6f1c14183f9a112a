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
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class _Gpu:
    """One GPU of a snapshot's gpu group: its fields by short name, and whether it is doing work."""

    index: int
    group: dict[str, Any]

    def v(self, name: str) -> Any:
        return _value(self.group, self.field(name))

    def field(self, name: str) -> str:
        return f"gpu{self.index}.{name}"

    @property
    def busy(self) -> bool:
        util = self.v("utilization_gpu_pct")
        return (util is not None and util > BUSY_UTIL_PCT) or bool(self.v("compute_processes"))


Reasons = list[dict[str, Any]]


def _load(g: _Gpu) -> Reasons:
    """Someone else's work on the GPU: a busy GPU is unfit; memory held on an idle one is a warning."""
    i, util, procs = g.index, g.v("utilization_gpu_pct"), g.v("compute_processes")
    if g.busy:
        what = []
        if util is not None:
            what.append(f"utilization {util} %")
        listed = g.v("processes")
        if listed:  # who: pid, command and memory, as the probes' busy-GPU refusal says it
            what.append(describe_processes(listed))
        elif procs:
            what.append(f"{procs} compute process{'es' if procs != 1 else ''}")
        why = f"GPU {i} is busy ({', '.join(what)})"
        fix = "stop the other work on this GPU (nvidia-smi shows it)"
        return [_reason(ERROR, "gpu", g.field("utilization_gpu_pct"), why, fix)]
    used, total = g.v("memory_used_mib"), g.v("memory_total_mib")
    if used is not None and total and used > GPU_MEM_FRACTION * total:
        why = f"GPU {i} has {used} MiB of {total} MiB in use while idle: a process holds memory"
        return [_reason(WARNING, "gpu", g.field("memory_used_mib"), why)]
    return []


def _clocks(g: _Gpu) -> Reasons:
    """Clocks held down by distress (clock-event reasons, a busy SM clock far below max) or changed by
    a configuration reason."""
    i, out = g.index, []
    reasons = g.v("clock_event_reasons") or []
    throttles = [r for r in reasons if r in THROTTLE_REASONS]
    if throttles:
        why = f"GPU {i} clocks are held down: {', '.join(THROTTLE_REASONS[r] for r in throttles)}"
        fix = "check cooling, power delivery and the power limit (nvidia-smi -q -d PERFORMANCE)"
        out.append(_reason(ERROR, "gpu", g.field("clock_event_reasons"), why, fix))
    notes = [r for r in reasons if r in NOTE_REASONS or r.startswith("0x")]
    if notes:
        why = f"GPU {i} clock event: {', '.join(NOTE_REASONS.get(r, r) for r in notes)}"
        out.append(_reason(WARNING, "gpu", g.field("clock_event_reasons"), why))
    sm, sm_max = g.v("clock_sm_mhz"), g.v("clock_sm_max_mhz")
    if g.busy and sm and sm_max and sm < CLOCK_FRACTION * sm_max:
        why = f"GPU {i} SM clock {sm} MHz is {100 * sm / sm_max:.0f} % of its max {sm_max} MHz while busy"
        out.append(_reason(ERROR, "gpu", g.field("clock_sm_mhz"), why))
    return out


def _settings(g: _Gpu) -> Reasons:
    """What someone set with nvidia-smi and nvidia-smi resets: power limit, persistence, application clocks."""
    i, out = g.index, []
    limit, default = g.v("power_limit_w"), g.v("power_default_limit_w")
    if limit is not None and default and limit < default - 0.5:
        why = f"GPU {i} power limit {limit:g} W is below its default {default:g} W"
        out.append(_reason(ERROR, "gpu", g.field("power_limit_w"), why, f"nvidia-smi -i {i} -pl {default:g}"))
    if g.v("persistence_mode") is False:
        why = f"GPU {i} persistence mode is off: each new process pays driver initialization"
        out.append(_reason(WARNING, "gpu", g.field("persistence_mode"), why, f"nvidia-smi -i {i} -pm 1"))
    app, app_default = g.v("clock_sm_app_mhz"), g.v("clock_sm_default_app_mhz")
    if app and app_default and app < app_default:
        why = f"GPU {i} application SM clock {app} MHz is set below its default {app_default} MHz"
        out.append(_reason(WARNING, "gpu", g.field("clock_sm_app_mhz"), why, f"nvidia-smi -i {i} -rac"))
    return out


def _pcie(g: _Gpu) -> Reasons:
    """A PCIe link narrower than the card's, or (while busy) slower: host transfers and launches pay."""
    i, out = g.index, []
    width, width_max = g.v("pcie_width"), g.v("pcie_width_max")
    if width and width_max and width < width_max:
        why = f"GPU {i} PCIe link runs x{width}, below its x{width_max}"
        out.append(
            _reason(ERROR, "gpu", g.field("pcie_width"), why, "reseat the card or check the slot / riser")
        )
    gen, gen_max = g.v("pcie_gen"), g.v("pcie_gen_max")
    # An idle GPU drops its link generation to save power; only a busy one below max is degraded.
    if g.busy and gen and gen_max and gen < gen_max:
        why = f"GPU {i} PCIe link runs gen{gen} while busy, below its gen{gen_max}"
        out.append(_reason(ERROR, "gpu", g.field("pcie_gen"), why))
    return out


def _temperature(g: _Gpu) -> Reasons:
    temp, slow = g.v("temperature_c"), g.v("temperature_slowdown_c")
    if temp is not None and slow and temp >= slow - TEMP_MARGIN_C:
        why = f"GPU {g.index} is at {temp} C, within {TEMP_MARGIN_C} C of its slowdown temperature {slow} C"
        return [_reason(WARNING, "gpu", g.field("temperature_c"), why)]
    return []


def _partition(g: _Gpu) -> Reasons:
    if g.v("mig_mode") == "enabled":
        why = f"GPU {g.index} is in MIG mode: a benchmark gets a slice"
        return [_reason(WARNING, "gpu", g.field("mig_mode"), why)]
    return []


# One check per concern, in the order their reasons are listed (errors first, then this order).
GPU_CHECKS: tuple[Callable[[_Gpu], Reasons], ...] = (
    _load,
    _clocks,
    _settings,
    _pcie,
    _temperature,
    _partition,
)


def _check_gpu(g: dict[str, Any]) -> Reasons:
    status = g.get("status")
    if status == F.UNSUPPORTED:
        why = f"no NVIDIA GPU visible ({g.get('note', 'unsupported')}): GPU checks skipped"
        return [_reason(WARNING, "gpu", "", why)]
    if status != F.OK:
        return [_reason(ERROR, "gpu", "", f"GPU state could not be read ({status}: {g.get('note', '')})")]
    return [r for i in gpu_indices(g) for check in GPU_CHECKS for r in check(_Gpu(i, g))]


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
    out += _host_load(h) + _cpu_layout(h)
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


def _host_load(h: dict[str, Any]) -> list[dict[str, Any]]:
    """A load above the usable CPUs (unfit) or above half of them (a warning)."""
    out: list[dict[str, Any]] = []
    load = _value(h, "load_avg")
    cpus = _value(h, "cpus_usable") or _value(h, "cpu_count")
    if load and cpus and load[0] > cpus:  # more runnable work than CPUs: the ranks wait for a CPU
        out.append(
            _reason(
                ERROR,
                "host",
                "load_avg",
                f"load average {load[0]:g} on {cpus} usable CPUs: more work than CPUs, the ranks wait "
                "for a CPU",
                "stop the other work, or pin it and the benchmark apart (taskset)",
            )
        )
    elif load and cpus and load[0] > LOAD_PER_CPU * cpus:
        out.append(
            _reason(
                WARNING,
                "host",
                "load_avg",
                f"load average {load[0]:g} on {cpus} usable CPUs: other work is running",
            )
        )
    return out


def _cpu_layout(h: dict[str, Any]) -> list[dict[str, Any]]:
    """SMT and isolated CPUs, where the snapshot could read them (as pyperf system show reports)."""
    out = []
    if str(_value(h, "smt_active")) == "1":
        out.append(
            _reason(
                WARNING,
                "host",
                "smt_active",
                "SMT is on: a busy sibling hardware thread slows the core a rank issues its kernels from",
                "pin the ranks to cores whose siblings are idle, or turn SMT off",
            )
        )
    iso = _value(h, "isolated_cpus")
    if iso == "":  # readable, and none isolated (a missing file says nothing)
        out.append(
            _reason(
                WARNING,
                "host",
                "isolated_cpus",
                "no CPU is isolated (isolcpus=): the ranks share their CPUs with every other process",
                "isolcpus=/nohz_full= on the kernel command line, then taskset the benchmark there",
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


def check_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`snapshot --check`'s answer: per snapshot, {"host", "fit", "reasons"}."""
    results = []
    for rec in records:
        reasons = check_snapshot(rec)
        results.append(
            {"host": rec.get("origin", {}).get("host"), "fit": is_fit(reasons), "reasons": reasons}
        )
    return results
