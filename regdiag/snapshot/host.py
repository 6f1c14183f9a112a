"""The host: OS, kernel, python, CPU and its frequency policy, memory, limits, virtualization.

psutil is used when importable; every field also has a /proc or /sys path so the collector runs
with a bare python3 on a remote host. Frequency policy is read per cpufreq policy (one file per
policy rather than per CPU: 2 files instead of 256 on a big node).
"""

from __future__ import annotations

import glob
import os
import platform
import re
import socket
import sys
from typing import Any

from regdiag.snapshot import fields as F
from regdiag.snapshot.redact import scrub_text

CPU = "/sys/devices/system/cpu"


def _psutil() -> Any:
    try:
        import psutil
    except Exception:  # noqa: BLE001 - absent or broken: use /proc and /sys
        return None
    return psutil


def _os_release() -> str:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            text = F.read_text(path)
        except OSError:
            continue
        info = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', text, re.M))
        if info.get("PRETTY_NAME"):
            return info["PRETTY_NAME"]
    return f"{platform.system()} {platform.release()}"


def _cpuinfo() -> dict[str, Any]:
    text = F.read_text("/proc/cpuinfo", limit=8 << 20)
    model = None
    for key in ("model name", "Model", "cpu model", "Processor"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.M)
        if m:
            model = m.group(1).strip()
            break
    cores = set()
    for block in text.split("\n\n"):
        pid = re.search(r"^physical id\s*:\s*(\d+)$", block, re.M)
        cid = re.search(r"^core id\s*:\s*(\d+)$", block, re.M)
        if pid and cid:
            cores.add((pid.group(1), cid.group(1)))
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    mhz = [float(x) for x in re.findall(r"^cpu MHz\s*:\s*([\d.]+)$", text, re.M)]
    return {
        "model": model or platform.processor() or None,
        "physical_cores": len(cores) or None,
        "hypervisor_flag": bool(flags and " hypervisor" in " " + flags.group(1) + " "),
        "mhz": mhz,
    }


def _per_policy(name: str) -> F.Field:
    """{value: number of cpufreq policies with it}, e.g. {"performance": 2}."""
    paths = glob.glob(f"{CPU}/cpufreq/policy*/{name}") or glob.glob(f"{CPU}/cpu[0-9]*/cpufreq/{name}")
    if not paths:
        return F.unsupported("no cpufreq in /sys (a VM or a kernel without cpufreq)")
    counts: dict[str, int] = {}
    for p in paths:
        try:
            v = F.read_text(p).strip()
        except OSError:
            continue
        counts[v] = counts.get(v, 0) + 1
    return F.ok(dict(sorted(counts.items())))


def _boost() -> F.Field:
    no_turbo = F.read_sys(f"{CPU}/intel_pstate/no_turbo")
    if no_turbo["status"] == F.OK:
        return F.ok("off" if no_turbo["value"] == "1" else "on")
    boost = F.read_sys(f"{CPU}/cpufreq/boost")
    if boost["status"] == F.OK:
        return F.ok("on" if boost["value"] == "1" else "off")
    return F.unsupported("no intel_pstate/no_turbo or cpufreq/boost in /sys")


def _freq(ps: Any, info: dict[str, Any]) -> dict[str, float | None]:
    def khz(path: str) -> float | None:
        vals = []
        for p in glob.glob(path):
            try:
                vals.append(int(F.read_text(p).strip()) / 1000.0)
            except (OSError, ValueError):
                continue
        return round(sum(vals) / len(vals), 1) if vals else None

    lo = khz(f"{CPU}/cpufreq/policy*/cpuinfo_min_freq")
    hi = khz(f"{CPU}/cpufreq/policy*/cpuinfo_max_freq")
    cur = khz(f"{CPU}/cpufreq/policy*/scaling_cur_freq")
    if cur is None and ps is not None:
        try:
            f = ps.cpu_freq()
            if f is not None and f.current:
                cur = round(float(f.current), 1)
        except Exception:  # noqa: BLE001
            pass
    if cur is None and info["mhz"]:
        cur = round(sum(info["mhz"]) / len(info["mhz"]), 1)
    return {"min": lo, "max": hi, "current": cur}


def _memory(ps: Any) -> dict[str, int]:
    if ps is not None:
        vm = ps.virtual_memory()
        return {"total": vm.total >> 20, "available": vm.available >> 20}
    text = F.read_text("/proc/meminfo")
    kb = {k: int(v) for k, v in re.findall(r"^(\w+):\s+(\d+) kB$", text, re.M)}
    return {"total": kb["MemTotal"] >> 10, "available": kb.get("MemAvailable", kb.get("MemFree", 0)) >> 10}


def _bracketed(path: str) -> F.Field:
    f = F.read_sys(path)
    if f["status"] != F.OK:
        return f
    m = re.search(r"\[(\w+)\]", f["value"])
    return F.ok(m.group(1) if m else f["value"])


def _nofile() -> F.Field:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    return F.ok({"soft": None if soft == inf else soft, "hard": None if hard == inf else hard})


def _cgroup_cpu() -> F.Field:
    """CPUs this process may use per the cgroup quota: None = unlimited."""
    try:
        lines = F.read_text("/proc/self/cgroup").splitlines()
    except OSError:
        return F.unsupported("/proc/self/cgroup does not exist here")
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            path = f"/sys/fs/cgroup{parts[2]}/cpu.max"
            if os.path.exists(path):
                quota, _, period = F.read_text(path).strip().partition(" ")
                cpus = None if quota == "max" else round(int(quota) / int(period or 100000), 2)
                return F.ok({"cpus": cpus, "source": "cgroup v2 cpu.max"})
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and "cpu" in parts[1].split(","):
            for base in ("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"):
                q = f"{base}{parts[2].rstrip('/')}/cpu.cfs_quota_us"
                if os.path.exists(q):
                    quota_us = int(F.read_text(q).strip())
                    period_us = int(F.read_text(q.replace("quota", "period")).strip())
                    cpus = None if quota_us < 0 else round(quota_us / period_us, 2)
                    return F.ok({"cpus": cpus, "source": "cgroup v1 cpu.cfs_quota_us"})
    return F.ok({"cpus": None, "source": "no cpu quota file"})


def _hypervisor(info: dict[str, Any]) -> F.Field:
    def first(*paths: str) -> str | None:
        for p in paths:
            try:
                v = F.read_text(p).strip()
            except OSError:
                continue
            if v:
                return v
        return None

    kind = first("/sys/hypervisor/type")
    vendor = first("/sys/class/dmi/id/sys_vendor")
    product = first("/sys/class/dmi/id/product_name")
    if not info["hypervisor_flag"] and not kind:
        return F.ok(None)
    desc = " ".join(x for x in (kind, vendor, product) if x) or "yes (cpuinfo hypervisor flag)"
    return F.ok(desc)


def _container() -> F.Field:
    if os.path.exists("/.dockerenv"):
        return F.ok("docker")
    if os.path.exists("/run/.containerenv"):
        return F.ok("podman")
    try:
        if "kubepods" in F.read_text("/proc/self/cgroup"):
            return F.ok("kubernetes")
    except OSError:
        pass
    return F.ok(None)


def collect(use_psutil: bool = True) -> dict[str, Any]:
    ps = _psutil() if use_psutil else None
    info_f = F.guard(_cpuinfo)
    info = (
        info_f["value"]
        if info_f["status"] == F.OK
        else {"model": None, "physical_cores": None, "hypervisor_flag": False, "mhz": []}
    )
    uname = os.uname()
    fields: dict[str, F.Field] = {
        "hostname": F.ok(socket.gethostname()),
        "os": F.guard(_os_release),
        "kernel": F.ok(uname.release),
        "arch": F.ok(uname.machine),
        "kernel_cmdline": F.guard(lambda: scrub_text(F.read_text("/proc/cmdline").strip())),
        "python_version": F.ok(sys.version.split()[0]),
        "python_implementation": F.ok(platform.python_implementation()),
        "python_executable": F.ok(sys.executable),
        "cpu_model": F.ok(info["model"]) if info_f["status"] == F.OK else info_f,
        "cpu_count": F.ok(os.cpu_count()),
    }
    if ps is not None:
        fields["cpu_physical_cores"] = F.guard(lambda: ps.cpu_count(logical=False))
    else:
        fields["cpu_physical_cores"] = F.ok(info["physical_cores"])
    fields["cpus_usable"] = F.guard(lambda: len(os.sched_getaffinity(0)))
    fields["numa_nodes"] = F.guard(lambda: len(glob.glob("/sys/devices/system/node/node[0-9]*")) or None)
    fields["cpu_governor"] = _per_policy("scaling_governor")
    fields["cpu_scaling_driver"] = _per_policy("scaling_driver")
    fields["cpu_boost"] = F.guard(_boost)
    freq = _freq(ps, info)
    for key, label in (("min", "cpu_freq_min_mhz"), ("max", "cpu_freq_max_mhz"), ("current", "cpu_freq_mhz")):
        v = freq[key]
        fields[label] = F.ok(v) if v is not None else F.unsupported("CPU frequency is not exposed here")
    fields["isolated_cpus"] = F.read_sys(f"{CPU}/isolated")
    fields["smt_active"] = F.read_sys(f"{CPU}/smt/active")  # "1": sibling hardware threads in use
    fields["nohz_full"] = F.read_sys(f"{CPU}/nohz_full")
    fields["load_avg"] = F.guard(lambda: [round(x, 2) for x in os.getloadavg()])
    mem = F.guard(lambda: _memory(ps))
    for key in ("total", "available"):
        fields[f"memory_{key}_mib"] = F.ok(mem["value"][key]) if mem["status"] == F.OK else mem
    fields["transparent_hugepages"] = _bracketed("/sys/kernel/mm/transparent_hugepage/enabled")
    fields["numa_balancing"] = F.read_sys("/proc/sys/kernel/numa_balancing")
    fields["open_files_limit"] = F.guard(_nofile)
    fields["cgroup_cpu_quota"] = F.guard(_cgroup_cpu)
    fields["hypervisor"] = F.guard(lambda: _hypervisor(info))
    fields["container"] = F.guard(_container)
    group = F.group(fields)
    group["psutil"] = ps is not None
    return group
