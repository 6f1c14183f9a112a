"""`--profile [N]`: N more cycles after the measured window, under torch.profiler, read per phase.

The measured window is not touched: the profiled cycles run after it (same inputs, same hooks), on
rank 0 only (the other ranks run the same cycles unprofiled, so the collectives still meet). What the
footer's "profile" says per phase, per cycle (the mean over the N cycles; docs/probes.md, "Profile"):

- wall_ms: the phase as its CUDA events time it, rebuilt from the trace: from when the GPU could start
  it (the previous phase's last GPU op, or the host reaching the phase) to its last GPU op or the host
  leaving the phase, whichever is later;
- busy_ms / idle_ms / collective_ms: GPU activity (kernels, copies, memsets) inside that wall time
  but the collectives; the collectives' own (NCCL kernels, custom all-reduce: a rank waiting there for
  a slow peer is not doing the phase's work); and the rest, the GPU doing nothing;
- host_ms: the host's time inside the phase; sync_wait_ms: the part of it spent in synchronizing calls
  (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, blocking cudaMemcpy);
  dispatch_ms: host_ms - sync_wait_ms; syncs: those calls; copies / copy_ms: memcpy on the GPU (dtoh:
  the device-to-host ones);
- kernels: GPU ops attributed to the phase (by the correlation id of the host call that launched them:
  a CUDA graph's kernels carry its cudaGraphLaunch's id where CUPTI traces graph kernels);
  graph_launches: cudaGraphLaunch calls;
- top: the kernels by total time: name (whole), count, total_ms, mean_us, share of wall_ms;
- spread: {"n": cycles, "sd": {figure: standard deviation over the cycles}}: a cycle is the `cycle`
  range that holds the phases where the trace has one, else each start of the first phase; with it a
  reading says how sure it is (regdiag/profiles.py, the noise gate).

On CPU the "device" is the aten ops: busy_ms is the time inside top-level ops, idle_ms the host time
between them (Python, the planted host work), dispatch_ms = idle_ms, host_ms = wall_ms, and the
"kernels" are the ops by self time; syncs are the aten::_local_scalar_dense calls (`.item()`, a tensor's
bool / int / float: on a GPU each waits for it), copies the aten::copy_ calls, collectives the gloo /
c10d ops (and what they hold).

The trace (Chrome / Perfetto JSON, gzip-compressed where the path ends in .gz) goes where
--profile-trace says; without it the trace is read and dropped.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

TOP = 24  # kernels kept per phase
SYNC_CALLS = set(
    "cudaStreamSynchronize cudaDeviceSynchronize cudaEventSynchronize cudaMemcpy cuStreamSynchronize "
    "cuCtxSynchronize cuEventSynchronize cuMemcpyDtoH_v2".split()
)
LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaGraphLaunch",
    "cuGraphLaunch",
)
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
BUSY_CPU = "aten ops on the CPU (their time; idle = host time between them)"
BUSY_GPU = "kernels, copies and memsets on the GPU"


class Ranges:
    """The `nvtx`-shaped object _one_cycle pushes ranges into: record_function ranges for the profiler."""

    def __init__(self) -> None:
        import torch

        self._rf = torch.profiler.record_function
        self._open: list[Any] = []

    def range_push(self, name: str) -> None:
        r = self._rf(name)
        r.__enter__()
        self._open.append(r)

    def range_pop(self) -> None:
        self._open.pop().__exit__(None, None, None)


def run_profiled(
    cycles: int,
    cuda: bool,
    one_cycle: Callable[[Any], list[float]],
    phases: list[str],
    trace_path: str | None,
    measured_cycle_ms: float | None = None,
) -> dict[str, Any]:
    """Run `cycles` cycles (`one_cycle(ranges)` returns [cycle_ms, phase_ms...] as the events timed
    them) under the profiler; return the footer's "profile" object. A profiler that fails never costs
    the launch its measurement: the cycles still run (the other ranks wait in them) and the profile
    says {"error": why}."""
    import torch

    t0 = time.perf_counter()
    prof, why = _start(cuda)
    rows = [one_cycle(Ranges() if prof is not None else None) for _ in range(cycles)]
    if cuda:
        torch.cuda.synchronize()
    t_run = time.perf_counter() - t0
    try:
        if prof is None:
            raise RuntimeError(why)
        prof.__exit__(None, None, None)
        out = _read(prof, phases, cuda, cycles, trace_path)
    except Exception as e:  # noqa: BLE001 - the measured window is done: keep it, say why
        out = {"error": " ".join(f"{type(e).__name__}: {e}".split())[:300], "cycles": cycles}
    event_ms = sorted(r[0] for r in rows)
    out["events_ms"] = {
        "cycle": round(event_ms[len(event_ms) // 2], 5),
        **{ph: round(sum(r[1 + k] for r in rows) / len(rows), 5) for k, ph in enumerate(phases)},
    }
    out["cost"] = {
        "profile_s": round(time.perf_counter() - t0, 3),
        "profiled_cycles_s": round(t_run, 3),
        "cycle_ms_profiled": out["events_ms"]["cycle"],
        "cycle_ms_measured": measured_cycle_ms,
        "window": "after the measured window: the measured cycles are not profiled",
    }
    return out


def _start(cuda: bool) -> tuple[Any, str]:
    """The profiler, started (CPU activities, and CUDA's where the cycles run on CUDA), or None and why."""
    try:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        prof = profile(activities=acts)
        prof.__enter__()
        return prof, ""
    except Exception as e:  # noqa: BLE001 - no profiler here: the cycles run unprofiled
        return None, f"the profiler did not start: {type(e).__name__}: {e}"


def _read(prof: Any, phases: list[str], cuda: bool, cycles: int, trace_path: str | None) -> dict[str, Any]:
    """The exported trace read per phase (analyze), and kept where --profile-trace says."""
    fd, tmp = tempfile.mkstemp(prefix="regdiag-trace-", suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp, encoding="utf-8") as f:
            trace = json.load(f)
        out = analyze(trace, phases, cuda, cycles)
        out["trace"] = _keep(tmp, trace_path)
        return out
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _keep(tmp: str, path: str | None) -> dict[str, Any] | None:
    """The trace where --profile-trace says (gzip-compressed for a .gz path): {"path", "bytes"}."""
    if not path:
        return None
    path = os.path.expanduser(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.endswith(".gz"):
        with open(tmp, "rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
    else:
        shutil.copyfile(tmp, path)
    os.chmod(path, 0o600)  # as private as the record beside it
    return {"path": os.path.abspath(path), "bytes": os.path.getsize(path), "rank": 0}


# -------------------------------------------------------------------------------------- analysis

CYCLE = "cycle"  # the range that holds one cycle's phases (spec-decode's _one_cycle, the engine hook)
# Collectives: NCCL's kernels (and the engines' custom all-reduce) on the GPU, gloo / c10d ops on the CPU.
# A rank waiting in one for a slow peer is not doing the phase's work: they are a bucket of their own.
COLLECTIVE = re.compile(
    r"nccl|gloo|c10d::|record_param_comms|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter"
    r"|all_?to_?all",
    re.IGNORECASE,
)
# On CPU, the ops that on a GPU make the host wait for it: `.item()`, a tensor's bool / int / float.
CPU_SYNC_OPS = ("aten::_local_scalar_dense",)
CPU_COPY_OPS = ("aten::copy_",)
SPREAD = ("wall_ms", "busy_ms", "idle_ms", "dispatch_ms", "sync_wait_ms", "syncs", "collective_ms")


def analyze(trace: dict[str, Any], phases: list[str], cuda: bool, cycles: int) -> dict[str, Any]:
    """Per-phase figures from a Chrome trace as torch.profiler exports it (module docstring)."""
    evs = [e for e in trace.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    ranges = [e for e in evs if e.get("cat") == "user_annotation" and e.get("name") in phases]
    per_range = _gpu(evs, ranges) if cuda else _cpu(evs, ranges)
    cycle_of = _cycles(evs, ranges, phases)
    n = max(1, cycles, max(cycle_of.values(), default=-1) + 1)
    acc: dict[str, dict[str, Any]] = {ph: _blank() for ph in phases}
    each: dict[str, list[dict[str, float]]] = {
        ph: [dict.fromkeys(SPREAD, 0.0) for _ in range(n)] for ph in phases
    }
    for r, f in per_range:
        a = acc[r["name"]]
        for key, v in f.items():
            if key == "k":
                for name, (c, t) in v.items():
                    c0, t0 = a["k"].get(name, (0, 0.0))
                    a["k"][name] = (c0 + c, t0 + t)
            else:
                a[key] = a.get(key, 0) + v
        row = each[r["name"]][cycle_of.get(id(r), 0)]
        for key, v in _figures(f).items():
            row[key] += v
    out_ph = {ph: {**_per_cycle(a, n), "spread": _spread(each[ph])} for ph, a in acc.items()}
    graph_kernels = None
    if cuda and any(a["graph_launches"] for a in acc.values()):
        graph_kernels = any(a["graph_kernels"] for a in acc.values())
    return {
        "cycles": cycles,
        "device": "cuda" if cuda else "cpu",
        "rank": 0,
        "busy": BUSY_GPU if cuda else BUSY_CPU,
        "syncs": "host calls that wait for the GPU"
        if cuda
        else "aten::_local_scalar_dense calls (.item(), a tensor's bool/int/float): on a GPU each waits for it",
        "collectives": "NCCL kernels, custom all-reduce" if cuda else "gloo / c10d ops",
        "graph_kernels_visible": graph_kernels,
        "ranges_found": len(ranges),
        "phases": out_ph,
    }


def _cycles(evs: list[dict[str, Any]], ranges: list[dict[str, Any]], phases: list[str]) -> dict[int, int]:
    """Each phase range's cycle: the `cycle` range that holds it where the trace has them, else the
    count of the first phase's ranges so far (each start of the first phase opens a cycle)."""
    cyc = sorted(
        (e for e in evs if e.get("cat") == "user_annotation" and e.get("name") == CYCLE),
        key=lambda e: e["ts"],
    )
    out: dict[int, int] = {}
    if cyc:
        for r in ranges:
            out[id(r)] = next((k for k, c in enumerate(cyc) if _within(r, c)), 0)
        return out
    k = -1
    for r in sorted(ranges, key=lambda r: r["ts"]):
        if r["name"] == phases[0] or k < 0:
            k += 1
        out[id(r)] = k
    return out


def _figures(f: dict[str, Any]) -> dict[str, float]:
    """One range's figures as the spread keeps them (ms; syncs as a count)."""
    busy, coll, wall = f.get("busy", 0.0), f.get("coll", 0.0), f.get("wall", 0.0)
    dispatch = f["cpu"] if "cpu" in f else f.get("host", 0.0) - f.get("sync_wait", 0.0)
    return {
        "wall_ms": wall / 1e3,
        "busy_ms": busy / 1e3,
        "idle_ms": max(0.0, wall - busy - coll) / 1e3,
        "dispatch_ms": dispatch / 1e3,
        "sync_wait_ms": f.get("sync_wait", 0.0) / 1e3,
        "syncs": float(f.get("syncs", 0)),
        "collective_ms": coll / 1e3,
    }


def _spread(rows: list[dict[str, float]]) -> dict[str, Any]:
    """The standard deviation over the profiled cycles of each figure: how sure the mean is."""
    sd = {k: round(statistics.stdev(r[k] for r in rows), 5) if len(rows) > 1 else None for k in SPREAD}
    return {"n": len(rows), "sd": sd}


def _blank() -> dict[str, Any]:
    acc: dict[str, Any] = dict.fromkeys(("wall", "busy", "coll", "host", "sync_wait", "copy_time"), 0.0)
    acc.update(
        dict.fromkeys(
            (
                "syncs",
                "dtoh",
                "copies",
                "launches",
                "kernels",
                "collectives",
                "graph_launches",
                "graph_kernels",
            ),
            0,
        )
    )
    return {**acc, "k": {}}


def _per_cycle(a: dict[str, Any], n: int) -> dict[str, Any]:
    wall = a["wall"] / n
    dispatch = (a["host"] - a["sync_wait"]) / n
    top = sorted(a["k"].items(), key=lambda kv: -kv[1][1])[:TOP]
    return {
        "wall_ms": round(wall / 1e3, 5),
        "busy_ms": round(a["busy"] / n / 1e3, 5),
        "idle_ms": round(max(0.0, wall - a["busy"] / n - a["coll"] / n) / 1e3, 5),
        "collective_ms": round(a["coll"] / n / 1e3, 5),
        "collectives": round(a["collectives"] / n, 3),
        "host_ms": round(a["host"] / n / 1e3, 5),
        "dispatch_ms": round(dispatch / 1e3, 5) if a.get("cpu") is None else round(a["cpu"] / n / 1e3, 5),
        "sync_wait_ms": round(a["sync_wait"] / n / 1e3, 5),
        "syncs": round(a["syncs"] / n, 3),
        "dtoh": round(a["dtoh"] / n, 3),
        "copies": round(a["copies"] / n, 3),
        "copy_ms": round(a["copy_time"] / n / 1e3, 5),
        "launches": round(a["launches"] / n, 3),
        "kernels": round(a["kernels"] / n, 3),
        "graph_launches": round(a["graph_launches"] / n, 3),
        "top": [
            {
                "name": name,
                "count": round(c / n, 3),
                "total_ms": round(t / n / 1e3, 5),
                "mean_us": round(t / c, 3) if c else None,
                "share": round(t / a["wall"], 4) if a["wall"] else None,
            }
            for name, (c, t) in top
        ],
    }


def _within(e: dict[str, Any], r: dict[str, Any]) -> bool:
    return r["ts"] <= e["ts"] <= r["ts"] + r["dur"] and e.get("tid") == r.get("tid")


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


Figures = list[tuple[dict[str, Any], dict[str, Any]]]  # (range, its figures), per phase range


def _cpu(evs: list[dict[str, Any]], ranges: list[dict[str, Any]]) -> Figures:
    """CPU: the device is the aten ops; busy = time inside top-level ops (collectives apart: gloo / c10d
    ops and the ops they hold), kernels = ops by self time, syncs = the ops that would wait for a GPU."""
    ops = sorted(
        (e for e in evs if e.get("cat") == "cpu_op" or (e.get("cat") == "user_annotation" and _coll(e))),
        key=lambda e: (e["ts"], -e.get("dur", 0)),
    )
    out: Figures = []
    for r in ranges:
        mine = [e for e in ops if _within(e, r) and e is not r]
        wall = float(r["dur"])
        top_level: list[list[Any]] = []  # [start, end, collective]
        stack: list[list[Any]] = []  # [end, event, self time]
        selfs: list[tuple[str, float]] = []
        f: dict[str, Any] = {"wall": wall, "host": wall, "kernels": len(mine), "k": {}}
        for e in mine:
            s, d = float(e["ts"]), float(e.get("dur", 0))
            while stack and stack[-1][0] <= s:
                done = stack.pop()
                selfs.append((done[1]["name"], done[2]))
            if stack:
                stack[-1][2] -= d
            else:
                top_level.append([s, s + d, False])
            if _coll(e):
                top_level[-1][2] = True
                f["collectives"] = f.get("collectives", 0) + (not stack)
            if e["name"] in CPU_SYNC_OPS:
                f["syncs"] = f.get("syncs", 0) + 1
                f["sync_wait"] = f.get("sync_wait", 0.0) + d
            if e["name"] in CPU_COPY_OPS:
                f["copies"] = f.get("copies", 0) + 1
                f["copy_time"] = f.get("copy_time", 0.0) + d
            stack.append([s + d, e, d])
        selfs += [(x[1]["name"], x[2]) for x in stack]
        f["busy"] = _union([(a, b) for a, b, c in top_level if not c])
        f["coll"] = max(0.0, _union([(a, b) for a, b, _ in top_level]) - f["busy"])
        f["cpu"] = max(0.0, wall - f["busy"] - f["coll"])  # host time between ops
        for name, t in selfs:
            c, tot = f["k"].get(name, (0, 0.0))
            f["k"][name] = (c + 1, tot + max(0.0, t))
        out.append((r, f))
    return out


def _coll(e: dict[str, Any]) -> bool:
    return bool(COLLECTIVE.search(str(e.get("name", ""))))


def _gpu(evs: list[dict[str, Any]], ranges: list[dict[str, Any]]) -> Figures:
    """CUDA: GPU ops go to the phase whose range holds the host call that launched them; NCCL kernels
    (and custom all-reduce) are the collectives' time, not the phase's work."""
    runtime = [e for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    gpu = [e for e in evs if e.get("cat") in GPU_CATS]
    by_corr: dict[Any, dict[str, Any]] = {}
    for e in runtime:
        c = (e.get("args") or {}).get("correlation")
        if c is not None:
            by_corr[c] = e
    ranges = sorted(ranges, key=lambda r: r["ts"])
    owner: dict[int, list[dict[str, Any]]] = {id(r): [] for r in ranges}
    graph_kernels: dict[int, int] = {id(r): 0 for r in ranges}
    for g in gpu:
        call = by_corr.get((g.get("args") or {}).get("correlation"))
        if call is None:
            continue
        for r in ranges:
            if _within(call, r):
                owner[id(r)].append(g)
                if _base(call["name"]) in ("cudaGraphLaunch", "cuGraphLaunch"):
                    graph_kernels[id(r)] += 1
                break
    out: Figures = []
    for r in ranges:
        mine = owner[id(r)]
        cs, ce = float(r["ts"]), float(r["ts"] + r["dur"])
        before = [g["ts"] + g.get("dur", 0) for g in gpu if _launched_before(g, by_corr, cs)]
        start = max(cs, max(before, default=cs))  # the GPU could start the phase here
        end = max([ce, *(g["ts"] + g.get("dur", 0) for g in mine)])

        def clip(gs: list[dict[str, Any]], start: float = start, end: float = end) -> float:
            return _union([(max(g["ts"], start), min(g["ts"] + g.get("dur", 0), end)) for g in gs])

        colls = [g for g in mine if g.get("cat") == "kernel" and _coll(g)]
        busy = clip([g for g in mine if not (g.get("cat") == "kernel" and _coll(g))])
        copies = [g for g in mine if g.get("cat") == "gpu_memcpy"]
        f: dict[str, Any] = {
            "wall": max(0.0, end - start),
            "busy": busy,
            "coll": max(0.0, clip(mine) - busy),
            "collectives": len(colls),
            "host": ce - cs,
            "copies": len(copies),
            "copy_time": sum(float(g.get("dur", 0)) for g in copies),
            "dtoh": sum("DtoH" in g.get("name", "") for g in copies),
            "kernels": sum(g.get("cat") == "kernel" for g in mine),
            "graph_kernels": graph_kernels[id(r)],
            "k": {},
        }
        _host_calls([e for e in runtime if _within(e, r)], f)
        for g in mine:
            c, tot = f["k"].get(g["name"], (0, 0.0))
            f["k"][g["name"]] = (c + 1, tot + float(g.get("dur", 0)))
        out.append((r, f))
    return out


def _host_calls(calls: list[dict[str, Any]], f: dict[str, Any]) -> None:
    """A phase's runtime calls into its figures: syncs (and the time waiting in them), launches."""
    for call in calls:
        name = _base(call.get("name", ""))
        if name in SYNC_CALLS:
            f["syncs"] = f.get("syncs", 0) + 1
            f["sync_wait"] = f.get("sync_wait", 0.0) + float(call.get("dur", 0))
        if name.startswith(LAUNCH_CALLS):
            f["launches"] = f.get("launches", 0) + 1
        if name in ("cudaGraphLaunch", "cuGraphLaunch"):
            f["graph_launches"] = f.get("graph_launches", 0) + 1


def _base(name: str) -> str:
    """A runtime call's name without CUPTI's version suffix (`cudaGraphLaunch_v10000`)."""
    head, sep, tail = name.rpartition("_v")
    return head if sep and tail.isdigit() else name


def _launched_before(g: dict[str, Any], by_corr: dict[Any, dict[str, Any]], t: float) -> bool:
    call = by_corr.get((g.get("args") or {}).get("correlation"))
    return call is not None and call["ts"] < t


# ------------------------------------------------------------------- planted changes (test hooks)


def plant_extra_op(
    fns: dict[str, Callable[[], None]], spec: dict[str, list[int]], device: Any, dtype: Any
) -> None:
    """REGDIAG_PROBE_EXTRA_OP: N more square matmuls at the end of a phase (captured with it when the
    phase is a CUDA graph): more device work, a kernel the profile can name."""
    import torch

    for ph, (n, size) in spec.items():
        if ph not in fns:
            continue
        x = torch.randn(size, size, device=device, dtype=dtype) / size**0.5
        out = torch.empty_like(x)

        def extra(fn: Callable[[], None] = fns[ph], x: Any = x, out: Any = out, n: int = n) -> None:
            fn()
            for _ in range(n):
                torch.mm(x, x, out=out)

        fns[ph] = extra


def plant_host_slow(runner: Callable[[], None], ms: float, graph: bool) -> Callable[[], None]:
    """REGDIAG_PROBE_HOST_SLOW: `ms` of busy host work in the phase: spread between its torch calls
    where it runs eagerly (the first call counts them), after the replay where it is a CUDA graph.
    The device waits for the host: a host-bound slowdown."""
    from torch.overrides import TorchFunctionMode

    def spin(s: float) -> None:
        end = time.perf_counter() + s
        while time.perf_counter() < end:
            pass

    if graph:

        def after() -> None:
            runner()
            spin(ms / 1e3)

        return after

    state = {"calls": 0, "counted": 0}
    points = 32  # the spin is cut into this many pieces, spread evenly over the phase's calls

    class Slow(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            state["calls"] += 1
            n = state["counted"]
            if n and state["calls"] % max(1, n // points) == 0:
                spin(ms / 1e3 / min(n, points))
            return func(*args, **(kwargs or {}))

    def slowed() -> None:
        state["calls"] = 0
        with Slow():
            runner()
        if not state["counted"]:
            state["counted"] = max(1, state["calls"])
            spin(ms / 1e3)  # the first call: all of it after the phase

    return slowed
