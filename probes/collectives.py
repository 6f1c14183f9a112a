"""collectives probe: all-reduce / all-gather / reduce-scatter / all-to-all latency and bus bandwidth over
message sizes, as nccl-tests.

Runs with the interpreter of the machine under test (stdlib + torch). One process per rank (NCCL on GPU,
gloo on CPU); per size: warm-up, then `--reps` timed repetitions of `iters` back-to-back in-place
collectives, each repetition timed two ways on CUDA:

- eager: the Python loop of `iters` calls between two CUDA events, the host's launch cost included
  (what an engine pays outside a CUDA graph);
- graph: the same loop captured once in a torch.cuda.CUDAGraph (warm-up on a side stream, capture,
  one untimed replay) and replayed between two CUDA events (what decode and verify pay inside graphs).

CUDA graphs do not exist on CPU/gloo: there the loop is eager only, timed with perf_counter. Time per
operation = total/iters, the slowest rank's. algbw = bytes / time; busbw = algbw * 2(n-1)/n for
all-reduce and algbw * (n-1)/n for the others (nccl-tests' factors, and its bytes: an all-gather's
gathered output, a reduce-scatter's input, an all-to-all's send buffer). `--sizes model:PRESET` sweeps the messages the preset's
decode / draft / verify forwards send. Protocol and record layout: docs/probes.md.

    python collectives.py --tp 2 --sizes 1K:16M
    python collectives.py --tp 2 --sizes model:kimi-k2
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _dist import device_info, init_dist, nccl_version, pick_device, probe_main, teardown  # noqa: E402
from _presets import PRESETS  # noqa: E402
from _protocol import (  # noqa: E402
    MAX_COUNT,
    MAX_RANKS,
    MAX_SECONDS,
    PROTOCOL,
    Emitter,
    ProbeArgParser,
    Progress,
    UsageError,
    add_common_args,
    check_ranges,
    env_vars,
    summary,
)

NAME = "collectives"
VERSION = "3"
# What a run record says before the first header arrives (regdiag reads these literals: measure/probes.py).
PRIMARY = "ar_256MiB"
PHASES: tuple[str, ...] = ()
# What its processes import beyond the standard library (a bisect loads these before any launch).
LOADS = ("torch", "torch.distributed")
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MAX_SIZE = 64 << 30  # one buffer (an all_gather holds world x this)
# metric prefix per op; the graph-mode metric adds "g" (arg_64KiB)
OPS = {"all_reduce": "ar", "all_gather": "ag", "reduce_scatter": "rs", "all_to_all": "aa"}
OP_TEXT = {
    "all_reduce": "all_reduce(sum), in place",
    "all_gather": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter_tensor(sum)",
    "all_to_all": "all_to_all_single, equal splits (NCCL: grouped send/recv per peer)",
}
# The bytes of a size, as nccl-tests counts them, and its busbw factor
BUSBW_TEXT = {
    "all_reduce": "algbw * 2(n-1)/n, as nccl-tests reports for all-reduce",
    "all_gather": "algbw * (n-1)/n of the gathered bytes, as nccl-tests reports for all-gather",
    "reduce_scatter": "algbw * (n-1)/n of the bytes reduced (every rank's input), as nccl-tests reports",
    "all_to_all": "algbw * (n-1)/n of the bytes each rank sends, as nccl-tests reports for alltoall",
}
MODES = ("auto", "eager", "graph", "both")
# Token counts of the model sweep: decode / a draft step (1), verify and draft-extend at the default
# --num-steps 2 (3 = num_draft_tokens), and verify at 4 and 8 draft tokens.
MODEL_TOKENS = (1, 3, 4, 8)
MODEL_ELT = 2  # bf16 activations and logits, as the engines send them
GRAPH_NOTE = "CUDA graphs do not exist on CPU/gloo: eager only"
APIS = ("auto", "nccl", "torch")
API_TEXT = {
    "nccl": "NCCL called directly (ctypes) on the current CUDA stream, as SGLang and vLLM call it in graphs",
    "torch": "torch.distributed (ProcessGroupNCCL / gloo): its own stream and events per call",
}


def busbw_factor(op: str, world: int) -> float:
    return (2 * (world - 1) / world) if op == "all_reduce" else ((world - 1) / world)


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = 1
    if t and t[-1] in UNITS:
        mult, t = UNITS[t[-1]], t[:-1]
    try:
        x = float(t) * mult
        n = int(x) if not x > MAX_SIZE else MAX_SIZE + 1  # 1e400 (inf), 1e27: too large, not a traceback
    except ValueError:  # int(NaN) too
        raise UsageError(f"size {text!r}: expected a number with an optional K, M or G suffix") from None
    if n < 4:
        raise UsageError(f"size {text!r}: at least 4 bytes")
    if n > MAX_SIZE:
        raise UsageError(f"size {text!r}: at most 64G bytes")
    return n


def parse_sizes(spec: str) -> list[int]:
    """'1K:256M' (doubling), '1K:256M:4' (times 4), or '1K,64K,1M'."""
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise UsageError(f"--sizes {spec!r}: expected MIN:MAX[:FACTOR] or a comma-separated list")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        try:
            factor = int(parts[2]) if len(parts) == 3 else 2
        except ValueError:
            raise UsageError(f"--sizes {spec!r}: FACTOR must be a whole number") from None
        if factor < 2 or hi < lo:
            raise UsageError(f"--sizes {spec!r}: need MIN <= MAX and FACTOR >= 2")
        out, n = [], lo
        while n <= hi:
            out.append(n)
            n *= factor
        return out
    return [parse_size(s) for s in spec.split(",") if s.strip()]


def sig(x: float, digits: int = 6) -> float:
    """Round to significant digits: bandwidths span 0.001 GB/s (gloo, 1 KiB) to 400 GB/s (NVLink)."""
    return float(f"{x:.{digits}g}")


def size_name(n: int) -> str:
    for suffix, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % mult == 0:
            return f"{n // mult}{suffix}"
    return f"{n}B"


def model_preset(spec: str | None) -> str | None:
    """'model:kimi-k2' -> 'kimi-k2'; None for a numeric sweep; UsageError for an unknown preset."""
    if not spec or not spec.startswith("model:"):
        return None
    preset = spec[len("model:") :]
    if preset not in PRESETS:
        raise UsageError(f"--sizes {spec!r}: unknown model preset; known: {', '.join(sorted(PRESETS))}")
    return preset


def model_items(preset: str, world: int) -> list[dict[str, Any]]:
    """The messages a preset's forwards send at TP=world, in bytes (bf16): the hidden-state all-reduce
    after attention and after the MLP/MoE (hidden x tokens x 2), and the all-gather of the vocabulary-
    sharded logits (target lm_head and the EAGLE-3 draft's; each rank holds ceil(vocab/world) columns);
    and, for an expert-parallel layout of the same ranks, the all-to-all that dispatches each token's
    hidden state to its top-k experts (the combine sends the same bytes back)."""
    p = PRESETS[preset]
    items: list[dict[str, Any]] = []
    for t in MODEL_TOKENS:
        where = "decode, draft step" if t == 1 else f"verify / draft-extend at {t} tokens"
        items.append({"op": "all_reduce", "bytes": p["hidden"] * t * MODEL_ELT,
                      "label": f"hidden all-reduce, {where} (hidden {p['hidden']} x {t} x 2 B)"})  # fmt: skip
    for t in MODEL_TOKENS:  # expert parallel: every token's hidden state to each of its top-k experts
        items.append({"op": "all_to_all", "bytes": t * p["topk"] * p["hidden"] * MODEL_ELT,
                      "label": f"expert-parallel dispatch / combine at EP={world}, {t} token{'s' if t > 1 else ''} "
                               f"(top-{p['topk']} x hidden {p['hidden']} x 2 B)"})  # fmt: skip
    for which, vocab in (("target", p["vocab"]), ("draft", p["draft_vocab"])):
        for t in MODEL_TOKENS:
            total = math.ceil(vocab / world) * world * t * MODEL_ELT
            items.append({"op": "all_gather", "bytes": total,
                          "label": f"{which} logits all-gather, {t} token{'s' if t > 1 else ''} (vocab {vocab})"})  # fmt: skip
    return items


def resolve_items(a: Any, world: int, cuda: bool, modes: list[str]) -> list[dict[str, Any]]:
    """The sweep: one item per (op, bytes), labelled, with its metric per mode (ar_64KiB eager,
    arg_64KiB graph); duplicates (same op and size) merged."""
    preset = model_preset(a.sizes)
    if preset is not None:
        raw = model_items(preset, world)
    else:
        sizes = parse_sizes(a.sizes or ("1K:256M" if cuda else "1K:16M"))
        raw = [{"op": a.op, "bytes": n, "label": ""} for n in sizes]
    items: list[dict[str, Any]] = []
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    for it in raw:
        key = (it["op"], it["bytes"])
        if key in seen:
            seen[key]["label"] += "; " + it["label"]
            continue
        name = f"{OPS[it['op']]}_{size_name(it['bytes'])}"
        it = {**it, "metrics": {m: name if m == "eager" else graph_metric(name) for m in modes}}
        seen[key] = it
        items.append(it)
    return items


def graph_metric(metric: str) -> str:
    """ar_64KiB -> arg_64KiB: the same size captured in a CUDA graph."""
    prefix, size = metric.split("_", 1)
    return f"{prefix}g_{size}"


def bw_name(kind: str, metric: str) -> str:
    """algbw/busbw value names: algbw_64KiB for ar_64KiB (as in version 1), algbw_arg_64KiB otherwise."""
    return f"{kind}_{metric[3:]}" if metric.startswith("ar_") else f"{kind}_{metric}"


def build_parser() -> ProbeArgParser:
    p = ProbeArgParser(prog="collectives.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--tp", type=int, default=2, help="ranks, one process each (default 2)")
    p.add_argument(
        "--sizes",
        default=None,
        help="MIN:MAX[:FACTOR], a list (1K,64K,1M) or model:PRESET (the preset's all-reduce and logits "
        "all-gather messages at 1, 3, 4 and 8 tokens). Default 1K:256M on GPU, 1K:16M on CPU",
    )
    p.add_argument("--op", choices=list(OPS), default="all_reduce",
                   help="collective of a numeric sweep (default all_reduce; model: sweeps set their own)")  # fmt: skip
    p.add_argument("--mode", choices=list(MODES), default="auto",
                   help="eager loop, the loop captured in a CUDA graph, or both (default auto: both on "
                        "CUDA, eager on CPU where graphs do not exist)")  # fmt: skip
    p.add_argument("--api", choices=list(APIS), default="auto",
                   help="how collectives are called: nccl (NCCL directly on the current CUDA stream, as "
                        "engines do in graphs), torch (torch.distributed), or auto (default: nccl on CUDA "
                        "when the library loads, torch on CPU)")  # fmt: skip
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float32"], default="auto",
                   help="default auto: bfloat16 for model: sweeps, float32 otherwise (as nccl-tests)")  # fmt: skip
    p.add_argument(
        "--iters", type=int, default=20, help="operations per timed repetition, at most (default 20)"
    )
    p.add_argument("--warmup", type=int, default=5, help="untimed operations per size (default 5)")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per size (default 5)")
    p.add_argument(
        "--target-ms",
        type=float,
        default=20.0,
        help="fewer iterations for sizes whose one operation already takes this long (default 20)",
    )
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto", help="default auto")
    add_common_args(p)
    return p  # fmt: skip


def validate(a: Any) -> None:
    ranges = {"tp": (1, MAX_RANKS), "iters": (1, MAX_COUNT), "reps": (1, 100_000), "warmup": (0, MAX_COUNT)}
    check_ranges(a, **ranges, target_ms=(0.001, 60_000.0), hang_timeout=(0.001, MAX_SECONDS))
    if a.sizes is not None and model_preset(a.sizes) is None and not parse_sizes(a.sizes):
        raise UsageError("--sizes: no sizes given")
    if a.device == "cpu" and a.mode in ("graph", "both"):
        raise UsageError(f"--mode {a.mode} --device cpu: {GRAPH_NOTE}")
    if a.device == "cpu" and a.api == "nccl":
        raise UsageError("--api nccl --device cpu: NCCL needs CUDA; on CPU the collectives go through gloo")


def resolve_modes(mode: str, cuda: bool) -> list[str]:
    if not cuda:
        if mode in ("graph", "both"):
            raise UsageError(f"--mode {mode}: no CUDA device here; {GRAPH_NOTE}")
        return ["eager"]
    return {"auto": ["eager", "graph"], "both": ["eager", "graph"]}.get(mode, [mode])


@dataclass
class Setup:
    """What every rank resolves before measuring: the sweep, its metrics, and how collectives are called."""

    rank: int
    world: int
    device: Any
    cuda: bool
    modes: list[str]
    items: list[dict[str, Any]]
    metrics: dict[str, list[str]]  # per mode, one metric name per item
    dtype: Any
    dtype_name: str
    elt: int
    api: str  # "nccl": NCCL through ctypes on the current stream; "torch": torch.distributed
    comm: Any  # the _pynccl.Communicator when api == "nccl"
    preset: str | None


def resolve_api(want: str, cuda: bool) -> tuple[str, Any]:
    """(api, Library or None). auto: NCCL directly on CUDA when a library loads, else torch.distributed."""
    if not cuda:
        if want == "nccl":
            raise UsageError(
                "--api nccl needs CUDA and no GPU is in use here; on CPU the collectives go through gloo"
            )
        return "torch", None
    if want == "torch":
        return "torch", None
    from _pynccl import Library, NcclUnavailable

    try:
        return "nccl", Library()
    except NcclUnavailable:
        if want == "nccl":
            raise
        return "torch", None


def setup(a: Any) -> Setup:
    import torch
    import torch.distributed as dist

    rank, world = a._rank, a._world
    device = pick_device(a.device, rank, world)
    cuda = device.type == "cuda"
    modes = resolve_modes(a.mode, cuda)
    items = resolve_items(a, world, cuda, modes)
    api, library = resolve_api(a.api, cuda)
    init_dist(a._port, rank, world, cuda, single=True)
    comm = None
    if library is not None:
        from _pynccl import Communicator

        comm = Communicator(torch, dist, rank, world, device, library)
    preset = model_preset(a.sizes)
    dtype_name = a.dtype if a.dtype != "auto" else ("bfloat16" if preset else "float32")
    dtype = getattr(torch, dtype_name)
    return Setup(
        rank=rank,
        world=world,
        device=device,
        cuda=cuda,
        modes=modes,
        items=items,
        metrics={m: [it["metrics"][m] for it in items] for m in modes},
        dtype=dtype,
        dtype_name=dtype_name,
        elt=torch.finfo(dtype).bits // 8,
        api=api,
        comm=comm,
        preset=preset,
    )


def header(a: Any, s: Setup) -> dict[str, Any]:
    import torch

    names = [n for m in s.modes for n in s.metrics[m]]
    units: dict[str, str] = {n: "us" for n in names}
    better: dict[str, str] = {n: "lower" for n in names}
    derived: dict[str, str] = {}  # bandwidth -> the time it is computed from: one test, not three
    for n in names:
        for kind in ("algbw", "busbw"):
            units[bw_name(kind, n)] = "GB/s"
            better[bw_name(kind, n)] = "higher"
            derived[bw_name(kind, n)] = n
    if s.preset:  # the decode message: what every token pays, in the mode the engines run it
        primary = s.metrics["graph" if "graph" in s.modes else "eager"][0]
    else:
        primary = s.metrics[s.modes[0]][-1]
    ops = sorted({it["op"] for it in s.items})
    backend = "nccl" if s.cuda else "gloo"
    cfg = {"tp": s.world, "sizes": [it["bytes"] for it in s.items],
           "sweep": f"model:{s.preset}" if s.preset else "bytes", "ops": ops, "modes": s.modes,
           "dtype": s.dtype_name, "iters": a.iters, "warmup": a.warmup, "reps": a.reps, "target_ms": a.target_ms,
           "device": s.device.type, "backend": backend, "api": s.api, "op": "; ".join(OP_TEXT[o] for o in ops)}  # fmt: skip
    labels = {f"busbw ({o})": BUSBW_TEXT[o] for o in ops}
    labels["eager"] = "the loop of iters calls between CUDA events: host launch cost included"
    labels["graph"] = (
        "the same loop captured in one CUDA graph, replayed between CUDA events" if s.cuda else GRAPH_NOTE
    )
    labels["api"] = API_TEXT[s.api]
    nccl = s.comm.nccl.version() if s.comm is not None else (nccl_version() if s.cuda else None)
    return {
        "type": "header", "protocol": PROTOCOL, "probe": NAME, "version": VERSION, "config": cfg,
        "primary": primary, "phases": [], "units": units, "better": better, "derived": derived,
        "modes": s.modes,
        "graph": s.cuda, "sizes": s.items, "timer": "cuda-events" if s.cuda else "perf_counter",
        "python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": nccl, "device": device_info(s.device), "world": s.world, "backend": backend, "api": s.api,
        "env": env_vars(), "launch_index": a.launch_index,
        "busbw_factor": {o: busbw_factor(o, s.world) for o in ops}, "labels": labels,
    }  # fmt: skip


def run_rank(a: Any, _checked: Any = None) -> None:
    import torch
    import torch.distributed as dist

    progress = Progress()
    progress("start", force=True)
    t_rank0 = time.time()
    s = setup(a)
    if s.rank == 0:
        Emitter().emit(header(a, s))
    times, iters_used = measure(a, s, progress)
    stacked = torch.cat([times[m] for m in s.modes], dim=1).to(s.device)
    dist.all_reduce(stacked, op=dist.ReduceOp.MAX)  # the slowest rank's time per operation
    table = stacked.cpu()
    if s.rank == 0:
        _emit_results(a, s.items, s.modes, s.metrics, table, iters_used, s.world, t_rank0)
    progress("teardown", force=True)
    del stacked, table
    teardown(s.world, s.cuda, close=s.comm.close if s.comm is not None else None)


def measure(a: Any, s: Setup, progress: Progress) -> tuple[dict[str, Any], list[int]]:
    """times[mode] is reps x items, microseconds per operation on this rank; and the iterations per item."""
    import torch
    import torch.distributed as dist

    times = {m: torch.zeros(a.reps, len(s.items), dtype=torch.float64) for m in s.modes}
    iters_used = []
    steps, done = len(s.items) * len(s.modes), 0
    for j, it in enumerate(s.items):
        op, reset = _make_op(torch, dist, s.comm, it, s.world, s.elt, s.dtype, s.device)
        for _ in range(a.warmup):
            op()
        reset()
        one = _time_eager(op, 1, s.cuda)
        # Every rank must issue the same number of operations: agree on the slowest rank's estimate.
        t1 = torch.tensor([one], dtype=torch.float64, device=s.device)
        dist.all_reduce(t1, op=dist.ReduceOp.MAX)
        iters = max(1, min(a.iters, math.ceil(a.target_ms * 1e3 / max(float(t1.item()), 1e-3))))
        iters_used.append(iters)
        if "eager" in s.modes:
            for r in range(a.reps):
                reset()  # in-place sums grow; start every repetition from the same data
                times["eager"][r, j] = _time_eager(op, iters, s.cuda)
            done += 1
            progress("measure", done, steps, force=True)
        if "graph" in s.modes:
            progress("capture", done, steps, force=True)
            _measure_graph(torch, op, reset, iters, times["graph"], j)
            done += 1
            progress("measure", done, steps, force=True)
        del op, reset
    return times, iters_used


def _measure_graph(torch: Any, op: Any, reset: Any, iters: int, out: Any, j: int) -> None:
    """Capture `iters` calls in one graph and time its replays into out[:, j]. The graph dies here: one
    that captured a collective must not outlive its size (teardown waits on it)."""
    graph = _capture(torch, op, iters)
    try:
        graph.replay()  # the first replay uploads the graph: untimed
        for r in range(out.shape[0]):
            reset()
            out[r, j] = _time_graph(torch, graph, iters)
    finally:
        torch.cuda.synchronize()
        del graph


def _emit_results(
    a: Any,
    items: list[dict[str, Any]],
    modes: list[str],
    metrics: dict[str, list[str]],
    table: Any,
    iters_used: list[int],
    world: int,
    t_rank0: float,
) -> None:
    em = Emitter()
    cols = [(mode, j, name) for mode in modes for j, name in enumerate(metrics[mode])]
    per: dict[str, list[float]] = {name: [] for _m, _j, name in cols}
    for r in range(a.reps):
        tt, vals = {}, {}
        for c, (_mode, j, name) in enumerate(cols):
            us = round(float(table[r, c]), 4)
            tt[name] = us
            per[name].append(us)
            algbw = items[j]["bytes"] / (us * 1e-6) / 1e9
            vals[bw_name("algbw", name)] = sig(algbw)
            vals[bw_name("busbw", name)] = sig(algbw * busbw_factor(items[j]["op"], world))
        em.emit({"type": "cycle", "i": r, "t": tt, "values": vals})
    rows = []
    for mode, j, name in cols:
        it = items[j]
        med = summary(per[name])["median"]
        algbw = it["bytes"] / (med * 1e-6) / 1e9
        rows.append({"bytes": it["bytes"], "op": it["op"], "mode": mode, "metric": name, "label": it["label"],
                     "us": round(med, 3), "algbw_GBps": sig(algbw),
                     "busbw_GBps": sig(algbw * busbw_factor(it["op"], world)), "iters": iters_used[j]})  # fmt: skip
    scalars: dict[str, float] = {}
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        sfx = "" if mode == "eager" else "_graph"
        scalars["busbw_max_GBps" + sfx] = max(r["busbw_GBps"] for r in mine)
        scalars["latency_min_us" + sfx] = min(r["us"] for r in mine)
    em.emit({
        "type": "footer", "cycles": a.reps, "warmup_dropped": 0,
        "summary": {m: summary(v) for m, v in per.items()}, "table": rows, "scalars": scalars,
        "duration_s": round(time.time() - t_rank0, 3),
    })  # fmt: skip


def _make_op(
    torch: Any, dist: Any, comm: Any, it: dict[str, Any], world: int, elt: int, dtype: Any, device: Any
) -> Any:
    """(op, reset): one collective of this item on fixed buffers (a graph replays the same addresses),
    and how to put its input back to the starting values. `comm` (a _pynccl.Communicator) calls NCCL
    on the current stream; without it the call goes through torch.distributed."""
    if it["op"] == "all_reduce":
        buf = torch.ones(max(1, it["bytes"] // elt), dtype=dtype, device=device)
        if comm is not None:
            return comm.all_reduce_op(buf), lambda: buf.fill_(1.0)

        def all_reduce() -> None:
            dist.all_reduce(buf)

        # Values grow by the world size with every sum: reset before each repetition so they stay
        # finite for iters < 128 / log2(world) (denormals, slow on CPUs, never occur: the data only grows).
        return all_reduce, lambda: buf.fill_(1.0)
    per_rank = max(1, it["bytes"] // (elt * world))
    if it["op"] == "reduce_scatter":  # every rank reduces world x per_rank, keeps its per_rank share
        inp = torch.ones(per_rank * world, dtype=dtype, device=device)
        out = torch.empty(per_rank, dtype=dtype, device=device)
        if comm is not None:
            return comm.reduce_scatter_op(out, inp), lambda: None
        return (lambda: dist.reduce_scatter_tensor(out, inp)), lambda: None
    if it["op"] == "all_to_all":  # every rank sends per_rank to each rank (itself included)
        inp = torch.ones(per_rank * world, dtype=dtype, device=device)
        out = torch.empty(per_rank * world, dtype=dtype, device=device)
        if comm is not None:
            return comm.all_to_all_op(out, inp), lambda: None
        return (lambda: dist.all_to_all_single(out, inp)), lambda: None
    inp = torch.ones(per_rank, dtype=dtype, device=device)
    out = torch.empty(per_rank * world, dtype=dtype, device=device)
    # all_gather_single is the newer name (torch >= 2.13); the old one warns there.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    if comm is not None:
        return comm.all_gather_op(out, inp), lambda: None

    def all_gather() -> None:
        gather(out, inp)

    return all_gather, lambda: None


def _time_eager(op: Any, iters: int, cuda: bool) -> float:
    """Microseconds per operation over `iters` back-to-back calls from Python."""
    if cuda:
        import torch

        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            op()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e3 / iters
    t = time.perf_counter()
    for _ in range(iters):
        op()
    return (time.perf_counter() - t) * 1e6 / iters


def _capture(torch: Any, op: Any, iters: int) -> Any:
    """`iters` calls of op captured in one CUDA graph. The warm-up runs on a side stream first (as
    torch.cuda.graphs documents for captures); thread-local capture mode keeps ProcessGroupNCCL's
    watchdog thread, which queries events of earlier collectives, from invalidating the capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            op()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        ctx = torch.cuda.graph(graph, capture_error_mode="thread_local")
    except TypeError:  # torch < 2.1
        ctx = torch.cuda.graph(graph)
    with ctx:
        for _ in range(iters):
            op()
    torch.cuda.synchronize()
    return graph


def _time_graph(torch: Any, graph: Any, iters: int) -> float:
    """Microseconds per operation: one replay of the captured loop between CUDA events."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    graph.replay()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e3 / iters


def main(argv: list[str]) -> int:
    return probe_main(
        argv, build_parser, validate, run_rank, __file__, gpu_sampling=lambda a: a.device != "cpu"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
