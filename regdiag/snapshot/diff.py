"""What differs between two snapshots, most likely culprit of a slowdown first.

    diff_snapshots(old, new, include_volatile=False) -> [{"group", "field", "old", "new", "change",
                                                          "rank", "why"}, ...]

Ranks (lower first): 0 the engine's configuration in effect, for two runs whose launches recorded it
(`engine_config`: backends, graphs, all-reduce, draft, speculative settings, NCCL's applied settings;
diff_engine_config, diff_records); 1 the engine's code and its command line; 2 the kernels and libraries under
it: first the library files a running process really loaded (--pid snapshots: libnccl, sgl_kernel,
flashinfer, ... by build id), then package versions (sgl-kernel, flashinfer, torch, NCCL, triton, GPU
driver); 3 NCCL_* variables and nccl.conf files; 4 variables of the families that change kernels,
allocators, threads, the loader or the engines (regdiag.snapshot.families), and the start-up
files (sitecustomize.py, ...) that set variables; 5 GPU configuration (clock limits, power limit,
PCIe link, persistence, ECC, MIG, the GPU model); 6 other packages, other variables, other loaded
libraries; 7 the host (CPU governor, kernel, ...) and where the snapshot was taken.
Readings that change from one second to the next (current clocks, power draw, temperature, load,
counters, a process's pid) and variables that only describe a login session are not differences
between environments; they are left out unless include_volatile, and then rank 8.

A variable recorded as a keyed hash is compared by its hash and shown as "<hashed>", never by
value. When a variable's value came from a file (a sitecustomize.py, an nccl.conf) the item says
so in `source`. A run record stands for its snapshot_before.
"""

from __future__ import annotations

import re
from typing import Any

from regdiag.snapshot import fields as F
from regdiag.snapshot.engine import ENGINES
from regdiag.snapshot.env import family
from regdiag.snapshot.keyedhash import is_hashed
from regdiag.snapshot.libs import ROLE_ORDER
from regdiag.snapshot.packages import split as split_packages

ABSENT = "<absent>"
HASHED = "<hashed>"

# Readings, not configuration: they differ between any two snapshots of the same machine.
VOLATILE_GPU = frozenset(
    {
        "clock_sm_mhz",
        "clock_mem_mhz",
        "pstate",
        "clock_event_reasons",
        "violation_time_ns",
        "power_draw_w",
        "temperature_c",
        "utilization_gpu_pct",
        "utilization_mem_pct",
        "memory_used_mib",
        "compute_processes",
        "pcie_gen",
        "pcie_replay_count",
    }
)
VOLATILE_HOST = frozenset({"load_avg", "memory_available_mib", "cpu_freq_mhz"})

# Rank 2, in this order: what a kernel-level slowdown most often traces back to.
LIBRARY_ORDER = (
    "sgl-kernel",
    "sglang-kernel",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "flashinfer",
    "torch",
    "nccl",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
    "triton",
    "deep-gemm",
    "deep-ep",
    "cuda-python",
    "nvidia-cublas-cu12",
    "nvidia-cublas",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    "nvidia-nvshmem-cu12",
    "nvidia-nvshmem-cu13",
)
GPU_CONFIG_ORDER = (
    "name",
    "clock_sm_max_mhz",
    "clock_sm_app_mhz",
    "clock_sm_default_app_mhz",
    "clock_mem_max_mhz",
    "clock_mem_app_mhz",
    "clock_mem_default_app_mhz",
    "power_limit_w",
    "power_default_limit_w",
    "pcie_width",
    "pcie_width_max",
    "pcie_gen_max",
    "persistence_mode",
    "ecc_mode",
    "mig_mode",
    "compute_mode",
    "vbios_version",
    "nvlink",
    "numa_node",
    "temperature_slowdown_c",
    "memory_total_mib",
)
HOST_ORDER = (
    "cpu_governor",
    "cpu_boost",
    "cpu_scaling_driver",
    "cpu_freq_max_mhz",
    "cpu_freq_min_mhz",
    "cgroup_cpu_quota",
    "cpus_usable",
    "isolated_cpus",
    "nohz_full",
    "numa_balancing",
    "transparent_hugepages",
    "kernel",
    "kernel_cmdline",
    "cpu_model",
    "cpu_count",
)

WHY = {
    "engine": "the engine's code changed: any kernel path, scheduler or default may differ",
    "engine_pkg": "the engine package changed version",
    "library": "a kernel / communication library under the engine changed version",
    "driver": "the GPU driver changed: kernels, clocks and NCCL transports can behave differently",
    "nccl_env": "NCCL variable: changes collective algorithms, protocols or channels",
    "env": "variable of a family that changes engine, kernel, allocator, thread or loader behaviour",
    "other_env": "another environment variable",
    "session": "describes the login session, not the environment",
    "loaded_lib": "the running process loaded a different library file (path, build id or owner)",
    "other_lib": "the running process loaded another library file",
    "cmdline": "the engine's command line changed: server flags decide kernels, graphs and batch sizes",
    "interpreter": "another Python interpreter runs the engine",
    "nccl_conf": "an NCCL config file changed: it sets NCCL variables the environment does not",
    "startup": "a start-up file every Python process runs changed (it can set variables)",
    "gpu": "GPU configuration: caps or changes what the hardware delivers",
    "gpu_model": "different GPU hardware: numbers are not like for like",
    "package": "another package changed version",
    "host": "host configuration: CPU-side latency and launch overhead",
    "origin": "taken on a different host or interpreter",
    "volatile": "a momentary reading, not configuration",
    "engine_config": "the engine chose another configuration at start (its own log says so)",
}


def _flat(snapshot: dict[str, Any]) -> dict[tuple[str, str], Any]:
    out: dict[tuple[str, str], Any] = {}
    origin = snapshot.get("origin") or {}
    for k in ("host", "python"):
        if k in origin:
            out[("origin", k)] = origin[k]
    for gname, group in (snapshot.get("groups") or {}).items():
        if not isinstance(group, dict):
            continue
        fields = group.get("fields") or {}
        if gname == "packages":  # versions and metadata alike, under the names /1 gave them
            versions, metadata = split_packages(group)
            fields = {**versions, **metadata}
        if not fields and group.get("status") not in (None, F.OK):
            out[(gname, "*")] = f"<{group.get('status')}>"
            continue
        for fname, f in fields.items():
            if not isinstance(f, dict):
                continue
            if f.get("status") != F.OK:
                out[(gname, fname)] = f"<{f.get('status')}>"
            elif gname == "packages" and fname == "all" and isinstance(f.get("value"), dict):
                for pkg, ver in f["value"].items():
                    out[("packages", f"all.{pkg}")] = ver
            elif gname == "process" and fname == "children" and isinstance(f.get("value"), dict):
                # Pids differ between any two runs: compare what the children are, not their numbers.
                v = f["value"]
                kids = sorted(
                    (" ".join(k.get("cmdline") or []), sorted(k.get("env_differs") or {}))
                    for k in v.get("processes") or []
                )
                out[(gname, fname)] = {
                    "count": len(kids),
                    "kinds": sorted({k[0] for k in kids}),
                    "differ_between_workers": sorted(v.get("differ_between_workers") or {}),
                }
            else:
                out[(gname, fname)] = f.get("value")
    return out


def _classify(group: str, field: str, value: Any = None) -> tuple[int, int, str]:
    """(rank, order within rank, why key). `value` is either side's value (libraries: its role)."""
    if group == "libraries":
        role = value.get("role") if isinstance(value, dict) else None
        if role in ROLE_ORDER:
            return 2, -100 + ROLE_ORDER[role], "loaded_lib"
        return 6, 5, "other_lib"
    if group == "process":
        if field == "cmdline":
            return 1, 3, "cmdline"
        if field in ("exe", "python"):
            return 2, -200, "interpreter"
        if field in ("pid", "ppid"):
            return 8, 0, "volatile"
        return 7, 50, "host"
    if group == "startup":
        if field == "nccl_conf":
            return 3, 1, "nccl_conf"
        if field == "interpreter":
            return 7, 60, "origin"
        return 4, 1, "startup"
    if group == "engine":
        return 1, 0 if field in ("commit", "dirty", "diff_hash") else 1, "engine"
    if group == "packages":
        name = field[4:] if field.startswith("all.") else field
        if name in ENGINES:
            return 1, 2, "engine_pkg"
        if name in LIBRARY_ORDER:
            return 2, LIBRARY_ORDER.index(name), "library"
        return 6, 0, "package"
    if group == "env":
        fam = family(field)
        if fam == "session":
            return 8, 0, "volatile"
        return {"nccl": (3, 0, "nccl_env"), "perf": (4, 0, "env")}.get(fam, (6, 1, "other_env"))
    if group == "gpu":
        m = re.match(r"gpu\d+\.(.+)", field)
        sub = m.group(1) if m else field
        if field in ("driver_version", "cuda_driver_version"):
            return 2, len(LIBRARY_ORDER), "driver"
        if sub in VOLATILE_GPU:
            return 8, 0, "volatile"
        if sub == "name" or field == "count" or re.fullmatch(r"gpu\d+", field):
            return 5, 0, "gpu_model"
        return 5, GPU_CONFIG_ORDER.index(sub) + 1 if sub in GPU_CONFIG_ORDER else 99, "gpu"
    if group == "host":
        if field in VOLATILE_HOST:
            return 8, 0, "volatile"
        return 7, HOST_ORDER.index(field) if field in HOST_ORDER else 99, "host"
    if group == "origin":
        return 7, 100, "origin"
    return 7, 200, "host"


def diff_snapshots(
    old: dict[str, Any], new: dict[str, Any], include_volatile: bool = False
) -> list[dict[str, Any]]:
    from regdiag.snapshot import snapshot_of

    sa, sb = snapshot_of(old), snapshot_of(new)
    a, b = _flat(sa), _flat(sb)
    env_a, env_b = _env_meta(sa), _env_meta(sb)
    # Without --all-packages on both sides, per-package "all." entries are not comparable.
    if not any(k[1].startswith("all.") for k in a) or not any(k[1].startswith("all.") for k in b):
        a = {k: v for k, v in a.items() if not k[1].startswith("all.")}
        b = {k: v for k, v in b.items() if not k[1].startswith("all.")}
    # A GPU present on one side only is one difference ("gpu3: <absent> -> NVIDIA H200"), not thirty.
    ga, gb = _gpu_set(a), _gpu_set(b)
    for i in sorted(ga ^ gb):
        name = f"gpu{i}"
        old_v = a.get(("gpu", f"{name}.name"), "a GPU") if i in ga else ABSENT
        new_v = b.get(("gpu", f"{name}.name"), "a GPU") if i in gb else ABSENT
        a[("gpu", name)], b[("gpu", name)] = old_v, new_v
    lone = tuple(f"gpu{i}." for i in ga ^ gb)

    def kept(flat: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
        return {k: v for k, v in flat.items() if not (k[0] == "gpu" and k[1].startswith(lone))}

    return _diff_flat(kept(a), kept(b), env_a, env_b, include_volatile)


def engine_config_of(record: dict[str, Any]) -> dict[str, Any] | None:
    """A run's engine section (`engine_config` of its first launch that has one; launches that count
    first), or None: a snapshot, or a run whose engine printed nothing regdiag reads."""
    launches = [la for la in record.get("launches") or [] if isinstance(la, dict)]
    launches.sort(key=lambda la: la.get("status") not in (None, "ok"))
    for la in launches:
        if isinstance(la.get("engine_config"), dict):
            return la["engine_config"]
    return None


# What the section says about how it was read, or measures rather than configures.
_ENGINE_CONFIG_SKIP = ("nccl_debug", "ranks_differ")
_ENGINE_CONFIG_VOLATILE = ("prefix_cache_hit_rate",)


def _flat_engine_config(cfg: dict[str, Any]) -> dict[tuple[str, str], Any]:
    out: dict[tuple[str, str], Any] = {}

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict) and v:
            for k, x in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), x)
        elif prefix == "nccl.tuning" and isinstance(v, list):
            for t in v:  # one item per (collective, size): the algorithm and protocol NCCL chose
                if isinstance(t, dict):
                    out[("engine_config", f"nccl.tuning.{t.get('op')}.{t.get('bytes')}")] = (
                        f"{t.get('algo')}/{t.get('proto')}"
                    )
        elif v not in (None, {}, []):
            out[("engine_config", prefix)] = v

    for k, v in cfg.items():
        if k not in _ENGINE_CONFIG_SKIP:
            walk(k, v)
    return out


def diff_engine_config(
    old: dict[str, Any], new: dict[str, Any], include_volatile: bool = False
) -> list[dict[str, Any]]:
    """The differences of two runs' engine sections (the configuration each engine printed it chose at
    start: backends, graphs, all-reduce, NCCL's applied settings, speculative settings), rank 0: before
    anything a snapshot sees. Empty when either side has no section."""
    a, b = engine_config_of(old), engine_config_of(new)
    if a is None or b is None:
        return []
    items = []
    fa, fb = _flat_engine_config(a), _flat_engine_config(b)
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, ABSENT), fb.get(key, ABSENT)
        if va == vb:
            continue
        volatile = key[1] in _ENGINE_CONFIG_VOLATILE
        if volatile and not include_volatile:
            continue
        items.append(
            {
                "group": key[0],
                "field": key[1],
                "old": va,
                "new": vb,
                "change": "added" if va == ABSENT else "removed" if vb == ABSENT else "changed",
                "rank": 8 if volatile else 0,
                "why": WHY["volatile" if volatile else "engine_config"],
            }
        )
    # What the engine chose (backends, graphs) before the settings it was given, then NCCL's.
    order = (
        "attention_backend",
        "moe_backend",
        "all_reduce",
        "graphs",
        "draft",
        "speculative",
        "settings",
        "nccl",
    )
    items.sort(
        key=lambda it: (it["rank"], next((i for i, o in enumerate(order) if it["field"].startswith(o)), 9))
    )
    return items


def diff_records(
    old: dict[str, Any], new: dict[str, Any], include_volatile: bool = False
) -> list[dict[str, Any]]:
    """`regdiag diff`: the engine sections of two runs first, then their snapshots' differences (a
    run without a snapshot but with an engine section is compared on that section alone)."""
    from regdiag.snapshot import snapshot_of

    items = diff_engine_config(old, new, include_volatile)
    try:
        sa, sb = snapshot_of(old), snapshot_of(new)
    except ValueError:
        if engine_config_of(old) is not None and engine_config_of(new) is not None:
            return items
        raise
    return items + diff_snapshots(sa, sb, include_volatile)


def diff_env(old: dict[str, str], new: dict[str, str], source: str) -> list[dict[str, Any]]:
    """Items for two sets of variables read somewhere other than a snapshot (what a probe's ranks saw,
    from its header), ranked like the snapshot's env items; `source` says where they were read."""
    meta = {"key": None, "sources": {name: source for name in set(old) | set(new)}}
    return _diff_flat(
        {("env", k): v for k, v in old.items()}, {("env", k): v for k, v in new.items()}, meta, meta, True
    )


def _diff_flat(
    a: dict[tuple[str, str], Any],
    b: dict[tuple[str, str], Any],
    env_a: dict[str, Any],
    env_b: dict[str, Any],
    include_volatile: bool,
) -> list[dict[str, Any]]:
    """One item per (group, field) whose value differs, most likely culprits first."""
    items = []
    for key in set(a) | set(b):
        va, vb = a.get(key, ABSENT), b.get(key, ABSENT)
        if va == vb:
            continue
        rank, order, why = _classify(*key, va if va != ABSENT else vb)
        if rank == 8 and not include_volatile:
            continue
        change = "added" if va == ABSENT else "removed" if vb == ABSENT else "changed"
        why_text = WHY[why]
        if key[0] == "env" and (is_hashed(va) or is_hashed(vb)):
            if is_hashed(va) and is_hashed(vb) and env_a["key"] != env_b["key"]:
                change = "unknown"
                why_text += "; hashed under two different keys (two REGDIAG_HOMEs): cannot tell if it changed"
            va, vb = (HASHED if is_hashed(va) else va), (HASHED if is_hashed(vb) else vb)
        item = {
            "group": key[0],
            "field": key[1],
            "old": va,
            "new": vb,
            "change": change,
            "rank": rank,
            "why": why_text,
            "_order": order,
        }
        if key[0] == "env":
            src = {"old": env_a["sources"].get(key[1]), "new": env_b["sources"].get(key[1])}
            if src["old"] or src["new"]:
                item["source"] = src
        items.append(item)
    items.sort(key=lambda it: (it["rank"], it["_order"], _gpu_index(it["field"]), it["group"], it["field"]))
    for it in items:
        del it["_order"]
    return items


def _env_meta(snapshot: dict[str, Any]) -> dict[str, Any]:
    g = (snapshot.get("groups") or {}).get("env") or {}
    src = g.get("sources")
    return {"key": g.get("hash_key_id"), "sources": src if isinstance(src, dict) else {}}


def _gpu_set(flat: dict[tuple[str, str], Any]) -> set[int]:
    out = set()
    for group, field in flat:
        m = re.match(r"gpu(\d+)\.", field) if group == "gpu" else None
        if m:
            out.add(int(m.group(1)))
    return out


def _gpu_index(field: str) -> int:
    m = re.match(r"gpu(\d+)\.", field)
    return int(m.group(1)) if m else -1
