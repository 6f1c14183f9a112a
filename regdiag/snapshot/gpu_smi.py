"""GPU fields from `nvidia-smi --query-gpu` when pynvml is not importable (bare remote hosts).

A subset of the NVML fields, under the same names, so records from either source diff cleanly.
Fields nvidia-smi cannot report (violation counters, replay counter, topology) are `unsupported`.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from regdiag.probe_modules import load as load_probe_module
from regdiag.snapshot import fields as F

# The one table of clock-event reasons (probes/_nvml.py), as gpu.py reads it for NVML.
reason_names = load_probe_module("_nvml").reason_names

# (query name, field name, converter). The event-reason bitmask was renamed in driver 535; the
# older name is tried when nvidia-smi rejects the newer one.
QUERY: tuple[tuple[str, str, Any], ...] = (
    ("index", "index", int),
    ("name", "name", str),
    ("uuid", "uuid", str),
    ("pci.bus_id", "pci_bus_id", str),
    ("vbios_version", "vbios_version", str),
    ("driver_version", "driver_version", str),
    ("clocks.sm", "clock_sm_mhz", int),
    ("clocks.max.sm", "clock_sm_max_mhz", int),
    ("clocks.applications.graphics", "clock_sm_app_mhz", int),
    ("clocks.default_applications.graphics", "clock_sm_default_app_mhz", int),
    ("clocks.mem", "clock_mem_mhz", int),
    ("clocks.max.mem", "clock_mem_max_mhz", int),
    ("clocks.applications.memory", "clock_mem_app_mhz", int),
    ("clocks.default_applications.memory", "clock_mem_default_app_mhz", int),
    ("pstate", "pstate", str),
    ("clocks_event_reasons.active", "clock_event_reasons", lambda v: reason_names(int(v, 16))),
    ("power.draw", "power_draw_w", lambda v: round(float(v), 1)),
    ("enforced.power.limit", "power_limit_w", lambda v: round(float(v), 1)),
    ("power.default_limit", "power_default_limit_w", lambda v: round(float(v), 1)),
    ("temperature.gpu", "temperature_c", int),
    ("pcie.link.gen.current", "pcie_gen", int),
    ("pcie.link.gen.max", "pcie_gen_max", int),
    ("pcie.link.width.current", "pcie_width", int),
    ("pcie.link.width.max", "pcie_width_max", int),
    ("persistence_mode", "persistence_mode", lambda v: v.strip().lower() == "enabled"),
    ("ecc.mode.current", "ecc_mode", lambda v: v.strip().lower()),
    ("mig.mode.current", "mig_mode", lambda v: v.strip().lower()),
    ("compute_mode", "compute_mode", lambda v: v.strip().lower().replace(" ", "_")),
    ("utilization.gpu", "utilization_gpu_pct", int),
    ("utilization.memory", "utilization_mem_pct", int),
    ("memory.used", "memory_used_mib", int),
    ("memory.total", "memory_total_mib", int),
)
OLD_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
NOT_FROM_SMI = (
    "violation_time_ns",
    "pcie_replay_count",
    "temperature_slowdown_c",
    "compute_processes",
    "numa_node",
    "nvlink",
)
_NA = ("[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "")


def _query(names: list[str], timeout_s: float) -> F.CmdResult:
    argv = ["nvidia-smi", "--query-gpu=" + ",".join(names), "--format=csv,noheader,nounits"]
    return F.run_cmd(argv, timeout_s)


def parse(text: str, names: list[str]) -> list[dict[str, str]]:
    rows = []
    for row in csv.reader(io.StringIO(text)):
        if not row or not any(c.strip() for c in row):
            continue
        rows.append({n: row[j].strip() for j, n in enumerate(names) if j < len(row)})
    return rows


def collect(timeout_s: float = 5.0) -> dict[str, Any]:
    query = list(QUERY)
    names = [q[0] for q in query]
    res = _query(names, timeout_s)
    if res.missing:
        return F.failed_group(F.UNSUPPORTED, "no NVIDIA driver on this host (no pynvml, no nvidia-smi)")
    if res.timed_out:
        return F.failed_group(F.TIMEOUT, "nvidia-smi timed out")
    if not res.ok and "is not a valid field" in (res.stdout + res.stderr):
        names = [OLD_NAMES.get(n, n) for n in names]
        res = _query(names, timeout_s)
    if not res.ok:
        msg = (res.stdout.strip().splitlines() or [res.why("nvidia-smi")])[-1]
        if "couldn't communicate with the nvidia driver" in msg.lower():
            return F.failed_group(F.UNSUPPORTED, f"no NVIDIA driver on this host ({msg})")
        return F.failed_group(F.ERROR, f"nvidia-smi failed: {msg}")
    return to_group(res.stdout, names)


def to_group(text: str, names: list[str]) -> dict[str, Any]:
    """The gpu group from nvidia-smi's CSV (`names`: the query fields, in QUERY's order)."""
    query = list(QUERY)
    rows = parse(text, names)
    fields: dict[str, F.Field] = {}
    for row in rows:
        i = int(row[names[0]])
        for qname, (_, fname, conv) in zip(names, query):  # noqa: B905 - same length; strict= is 3.10+
            if fname in ("index", "driver_version"):
                continue
            raw = row.get(qname, "")
            if raw.lower() in _NA:
                fields[f"gpu{i}.{fname}"] = F.unsupported(f"nvidia-smi: {qname} is {raw or 'empty'}")
                continue
            try:
                fields[f"gpu{i}.{fname}"] = F.ok(conv(raw))
            except ValueError:
                fields[f"gpu{i}.{fname}"] = F.error(f"nvidia-smi: cannot parse {qname}={raw!r}")
        for fname in NOT_FROM_SMI:
            fields[f"gpu{i}.{fname}"] = F.unsupported(
                "not available through nvidia-smi (install nvidia-ml-py)"
            )
    head: dict[str, F.Field] = {
        "driver_version": F.ok(rows[0]["driver_version"]) if rows else F.unsupported("no GPUs"),
        "cuda_driver_version": F.unsupported("not available through nvidia-smi --query-gpu"),
        "nvml_version": F.unsupported("not available through nvidia-smi --query-gpu"),
        "count": F.ok(len(rows)),
        "topology": F.unsupported("not available through nvidia-smi --query-gpu"),
    }
    head.update(fields)
    group = F.group(head)
    group["source"] = "nvidia-smi"
    return group
