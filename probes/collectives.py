"""collectives probe: all-reduce latency and bus bandwidth over message sizes, in the manner of nccl-tests.

Runs with the interpreter of the machine under test (stdlib + torch). One process per rank (NCCL on GPU,
gloo on CPU); per size: warm-up, then `--reps` timed repetitions of `iters` back-to-back in-place
all-reduces (CUDA events around the loop on GPU, perf_counter on CPU), time per operation = total/iters,
the slowest rank's time kept. algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests' all-reduce
factor). Protocol and record layout: docs/probes.md.

    python collectives.py --tp 2 --sizes 1K:16M
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _dist import device_info, init_dist, nccl_version, pick_device, probe_main, teardown  # noqa: E402
from _protocol import (  # noqa: E402
    PROTOCOL,
    Emitter,
    ProbeArgParser,
    Progress,
    UsageError,
    add_common_args,
    env_vars,
    summary,
)

NAME = "collectives"
VERSION = "1"
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = 1
    if t and t[-1] in UNITS:
        mult, t = UNITS[t[-1]], t[:-1]
    try:
        n = int(float(t) * mult)
    except ValueError:
        raise UsageError(f"size {text!r}: expected a number with an optional K, M or G suffix") from None
    if n < 4:
        raise UsageError(f"size {text!r}: at least 4 bytes")
    return n


def parse_sizes(spec: str) -> list[int]:
    """'1K:256M' (doubling), '1K:256M:4' (times 4), or '1K,64K,1M'."""
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise UsageError(f"--sizes {spec!r}: expected MIN:MAX[:FACTOR] or a comma-separated list")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        factor = int(parts[2]) if len(parts) == 3 else 2
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


def build_parser() -> ProbeArgParser:
    p = ProbeArgParser(prog="collectives.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--tp", type=int, default=2, help="ranks, one process each (default 2)")
    p.add_argument(
        "--sizes",
        default=None,
        help="MIN:MAX[:FACTOR] or a list, e.g. 1K:256M (default 1K:256M on GPU, 1K:16M on CPU)",
    )
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="default float32")
    p.add_argument(
        "--iters", type=int, default=20, help="all-reduces per timed repetition, at most (default 20)"
    )
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size (default 5)")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per size (default 5)")
    p.add_argument(
        "--target-ms",
        type=float,
        default=20.0,
        help="fewer iterations for sizes whose one all-reduce already takes this long (default 20)",
    )
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto", help="default auto")
    add_common_args(p)
    return p  # fmt: skip


def validate(a: Any) -> None:
    if a.tp < 1:
        raise UsageError("--tp must be >= 1")
    for name in ("iters", "reps"):
        if getattr(a, name) < 1:
            raise UsageError(f"--{name} must be >= 1")
    if a.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    if a.sizes is not None and not parse_sizes(a.sizes):
        raise UsageError("--sizes: no sizes given")
    if a.hang_timeout is not None and a.hang_timeout <= 0:
        raise UsageError("--hang-timeout must be > 0 seconds")


def run_rank(a: Any, _checked: Any = None) -> None:
    import torch
    import torch.distributed as dist

    rank, world = a._rank, a._world
    progress = Progress()
    progress("start", force=True)
    t_rank0 = time.time()
    device = pick_device(a.device, rank, world)
    cuda = device.type == "cuda"
    backend = "nccl" if cuda else "gloo"
    init_dist(a._port, rank, world, cuda, single=True)
    sizes = parse_sizes(a.sizes or ("1K:256M" if cuda else "1K:16M"))
    dtype = getattr(torch, a.dtype)
    elt = torch.finfo(dtype).bits // 8
    names = ["ar_" + size_name(n) for n in sizes]
    factor = 2 * (world - 1) / world
    cfg = {"tp": world, "sizes": sizes, "dtype": a.dtype, "iters": a.iters, "warmup": a.warmup, "reps": a.reps,
           "target_ms": a.target_ms, "device": device.type, "backend": backend, "op": "all_reduce(sum), in place"}  # fmt: skip
    if rank == 0:
        Emitter().emit({
            "type": "header", "protocol": PROTOCOL, "probe": NAME, "version": VERSION, "config": cfg,
            "primary": names[-1], "phases": [], "units": {n: "us" for n in names},
            "timer": "cuda-events" if cuda else "perf_counter", "python": sys.version.split()[0],
            "torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl_version() if cuda else None,
            "device": device_info(device), "world": world, "backend": backend, "env": env_vars(), "launch_index": a.launch_index,
            "busbw_factor": factor, "labels": {"busbw": "algbw * 2(n-1)/n, as nccl-tests reports for all-reduce"},
        })  # fmt: skip

    table = torch.zeros(a.reps, len(sizes), dtype=torch.float64)
    iters_used = []
    for j, n in enumerate(sizes):
        buf = torch.rand(max(1, n // elt), dtype=dtype, device=device)
        for _ in range(a.warmup):
            dist.all_reduce(buf)
        one = _time_ops(dist, buf, 1, cuda)
        # Every rank must issue the same number of all-reduces: agree on the slowest rank's estimate.
        t1 = torch.tensor([one], dtype=torch.float64, device=device)
        dist.all_reduce(t1, op=dist.ReduceOp.MAX)
        iters = max(1, min(a.iters, math.ceil(a.target_ms * 1e3 / max(float(t1.item()), 1e-3))))
        iters_used.append(iters)
        for r in range(a.reps):
            table[r, j] = _time_ops(dist, buf, iters, cuda)
        buf.mul_(0.0)  # values grow with every sum; never time on overflowing data
        progress("measure", j + 1, len(sizes), force=True)
    t = table.to(device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    table = t.cpu()
    if rank == 0:
        em = Emitter()
        per: dict[str, list[float]] = {m: [] for m in names}
        for r in range(a.reps):
            tt = {m: round(float(table[r, j]), 4) for j, m in enumerate(names)}
            vals = {}
            for n, m in zip(sizes, names):  # noqa: B905 (python >= 3.9 on the target)
                algbw = n / (tt[m] * 1e-6) / 1e9
                vals["algbw_" + m[3:]] = sig(algbw)
                vals["busbw_" + m[3:]] = sig(algbw * factor)
                per[m].append(tt[m])
            em.emit({"type": "cycle", "i": r, "t": tt, "values": vals})
        rows = []
        for j, (n, m) in enumerate(zip(sizes, names)):  # noqa: B905
            med = summary(per[m])["median"]
            algbw = n / (med * 1e-6) / 1e9
            rows.append({"bytes": n, "metric": m, "us": round(med, 3), "algbw_GBps": sig(algbw),
                         "busbw_GBps": sig(algbw * factor), "iters": iters_used[j]})  # fmt: skip
        em.emit({
            "type": "footer", "cycles": a.reps, "warmup_dropped": 0,
            "summary": {m: summary(v) for m, v in per.items()}, "table": rows,
            "scalars": {"busbw_max_GBps": max(r["busbw_GBps"] for r in rows), "latency_min_us": min(r["us"] for r in rows)},
            "duration_s": round(time.time() - t_rank0, 3),
        })  # fmt: skip
    progress("teardown", force=True)
    del buf, t
    teardown(world, cuda)


def _time_ops(dist: Any, buf: Any, iters: int, cuda: bool) -> float:
    """Microseconds per all-reduce over `iters` back-to-back calls."""
    import torch

    if cuda:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            dist.all_reduce(buf)
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e3 / iters
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    return (time.perf_counter() - t) * 1e6 / iters


def main(argv: list[str]) -> int:
    return probe_main(
        argv, build_parser, validate, run_rank, __file__, gpu_sampling=lambda a: a.device != "cpu"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
