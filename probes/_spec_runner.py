"""One rank of the spec-decode probe: build the model, capture graphs, time cycles, gather, report.

Timing (docs/probes.md, "Timing"): on CUDA, events recorded on the compute stream at the cycle start,
between phases and at the cycle end, one synchronize per cycle; on CPU, perf_counter at the same points.
Each rank keeps its own times; at the end of the launch one all-reduce(MAX) makes every number the
slowest rank's, so the cycle lines come out after the last cycle, not during the run.
"""

from __future__ import annotations

# zip(strict=) is 3.10+; the probes run on the target host's python, which may be 3.9 (noqa: B905 below).
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import _presets
import torch
import torch.nn.functional as F
from _probe_common import Emitter, Progress, UsageError, summary
from _spec_model import (
    Comm,
    Draft,
    Init,
    Pos,
    Target,
    available_bytes,
    grouped_mm_available,
    rope_tables,
    simulate_accept_len,
)


def _spin_ms(ms: float) -> Callable[[], None]:
    def spin() -> None:  # real busy work on the CPU: the phase really takes this much longer
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            pass

    return spin


def _gpu_sleep_ms(ms: float) -> Callable[[], None]:
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    ev0.record()
    torch.cuda._sleep(2_000_000)
    ev1.record()
    ev1.synchronize()
    cycles = max(1, int(2_000_000 * ms / max(ev0.elapsed_time(ev1), 1e-3)))
    return lambda: torch.cuda._sleep(cycles)  # a spinning kernel on the compute stream


def copy_bandwidth(device: torch.device, dtype: torch.dtype) -> float:
    """Device copy bandwidth in GB/s (bytes read + bytes written), the HBM floor's denominator."""
    n = (1 << 30) if device.type == "cuda" else (64 << 20)
    src = torch.empty(n // dtype.itemsize, dtype=dtype, device=device)
    src.normal_()
    dst = torch.empty_like(src)
    times = []
    for i in range(8):
        if device.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            dst.copy_(src)
            e1.record()
            e1.synchronize()
            ms = e0.elapsed_time(e1)
        else:
            t = time.perf_counter()
            dst.copy_(src)
            ms = (time.perf_counter() - t) * 1e3
        if i >= 2:
            times.append(ms)
    del src, dst
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return round(2 * n / (summary(times)["median"] / 1e3) / 1e9, 1)


def run_rank(a: Any, hooks: dict[str, Any], name: str, version: str, protocol: int, phases: list[str],
             env: dict[str, str], accept_alpha: Callable[[float, int], float]) -> None:  # fmt: skip
    rank, world = a._rank, a._world
    t_rank0 = time.time()
    progress = Progress() if rank == 0 else (lambda *x, **k: None)
    progress("start", force=True)
    cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device")
    if cuda and rank >= torch.cuda.device_count():
        raise UsageError(f"--tp {world} needs {world} GPUs; {torch.cuda.device_count()} visible")
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not cuda and "OMP_NUM_THREADS" not in os.environ:
        # One thread per rank unless the user says otherwise: OpenMP teams spinning on a shared or
        # oversubscribed CPU made cycles 8x slower and erratic (measured on a loaded 2-core VM).
        torch.set_num_threads(1)
    group = _init_dist(a, rank, world, cuda)
    preset = a.preset if a.preset != "auto" else ("kimi-k2" if cuda else "tiny")
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(a.dtype) or (
        torch.bfloat16 if cuda else torch.float32
    )
    elt = torch.finfo(dtype).bits // 8
    shard = a.tp_slice or world
    eagle = a.mode == "eagle"
    ndt, steps, batch = a.num_draft_tokens, a.num_steps, a.batch
    ctx = a.context or _presets.CONTEXT.get(preset, _presets.DEFAULT_CONTEXT)
    t_in = ndt if eagle else 1
    slots_t = ctx + t_in
    progress("bandwidth", force=True)
    copy_gbps = copy_bandwidth(device, dtype)

    shape = _presets.resolve_shape(preset, a.layers, shard)
    layers_auto = a.layers is None
    if layers_auto:
        free = available_bytes(device)
        reserve = int(4 * 2**30 + 0.05 * free) if cuda else int(2**30 + 0.25 * free)
        kv_layer = batch * slots_t * (shape.kv_lora + shape.rope) * elt
        n = _presets.fit_layers(shape, elt, free, reserve, kv_layer)
        if n < 1:
            per = shape.layer_bytes(elt)
            raise UsageError(
                f"{preset} at TP={shard}: one MoE layer needs {_presets.gib(shape.experts * per['expert'])} GiB, "
                f"{_presets.gib(free)} GiB free; use a larger --tp/--tp-slice or a smaller preset"
            )
        shape = _presets.resolve_shape(preset, n, shard)
    moe_impl = a.moe_impl
    if moe_impl == "auto":
        moe_impl = "grouped_mm" if cuda else "loop"
    if moe_impl == "grouped_mm" and not grouped_mm_available(device, dtype):
        raise UsageError(
            f"torch {torch.__version__} has no usable torch._grouped_mm on {device.type}; use --moe-impl loop"
        )

    progress("build", force=True)
    t_build = time.time()
    torch.manual_seed(a.seed * 7919 + rank)
    comm = Comm(group, world)
    init = Init(device, dtype)
    target = Target(shape, init, comm, batch, slots_t, moe_impl)
    draft = Draft(shape, init, comm, batch, ctx + ndt + steps, target.embed) if eagle else None
    n_pos = ctx + ndt + steps + 1
    cos_t, sin_t = rope_tables(shape.rope, n_pos, shape.rope_theta, device, dtype)
    cos_d, sin_d = rope_tables(shape.draft_head_dim, n_pos, shape.rope_theta, device, dtype)

    # One static input buffer per cycle: the tokens (batch x t_in) then the accept index per sequence,
    # refreshed by a single device-to-device copy at the start of each cycle (the cycle's "other" time).
    inp = torch.zeros(batch * t_in + batch, dtype=torch.long, device=device)
    tok_in = inp[: batch * t_in].view(batch, t_in)
    acc_idx = inp[batch * t_in :]
    fns: dict[str, Callable[[], None]] = {}
    if eagle:
        assert draft is not None
        pos_verify = Pos(ctx, ndt, batch, cos_t, sin_t)
        pos_ext = Pos(ctx, ndt, batch, cos_d, sin_d)
        pos_draft = [Pos(ctx + ndt + j, 1, batch, cos_d, sin_d) for j in range(steps - 1)]
        aux = torch.zeros(batch * ndt, 3 * shape.hidden, dtype=dtype, device=device)
        verify_ids = torch.zeros(batch * ndt, dtype=torch.long, device=device)
        start_hidden = torch.randn(batch, shape.hidden, dtype=dtype, device=device)
        start_tok = torch.zeros(batch, dtype=torch.long, device=device)
        draft_out = torch.zeros(batch, steps, dtype=torch.long, device=device)
        row_base = torch.arange(batch, device=device) * ndt

        def f_draft() -> None:
            # SGLang's order: the first draft token came from draft-extend; steps - 1 more forwards here.
            draft_out[:, 0].copy_(start_tok)
            tok, hid = start_tok, start_hidden
            for j in range(steps - 1):
                ids, hid = draft(tok, hid, pos_draft[j])
                draft_out[:, j + 1].copy_(ids)
                tok = ids

        def f_verify() -> None:
            verify_ids.copy_(target(tok_in, pos_verify, aux))

        def f_extend() -> None:
            ids, hid = draft(tok_in, F.linear(aux, draft.fc), pos_ext)
            sel = row_base + acc_idx
            start_hidden.copy_(hid.index_select(0, sel))
            start_tok.copy_(ids.index_select(0, sel))

        fns = {"draft": f_draft, "verify": f_verify, "extend": f_extend}
    else:
        pos_dec = Pos(ctx, 1, batch, cos_t, sin_t)
        dec_ids = torch.zeros(batch, dtype=torch.long, device=device)

        def f_decode() -> None:
            dec_ids.copy_(target(tok_in, pos_dec))

        fns = {"decode": f_decode}

    # One eager pass per phase: warms kernels and NCCL, and counts the collectives each phase issues.
    collectives = {}
    for ph, fn in fns.items():
        comm.count = 0
        fn()
        collectives[ph] = comm.count
    _sync(cuda)
    target_phase = "verify" if eagle else "decode"
    graphs: dict[str, bool] = {}
    runners: dict[str, Callable[[], None]] = {}
    progress("capture", force=True)
    pool = torch.cuda.graph_pool_handle() if cuda else None
    for ph, fn in fns.items():
        use_graph = cuda and not (ph == "verify" and a.verify_graph == "off")
        if use_graph and ph in ("verify", "decode") and moe_impl == "loop":
            use_graph = False  # the loop syncs the host to learn which experts were hit
        graphs[ph] = use_graph
        runners[ph] = _capture(fn, pool) if use_graph else fn
    _sync(cuda)
    build_s = round(time.time() - t_build, 3)

    slow = {
        ph: (_gpu_sleep_ms(ms) if cuda else _spin_ms(ms)) for ph, ms in hooks["slow_ms"].items() if ms > 0
    }
    crash = hooks["crash"]
    crash_here = crash is not None and crash[0] == rank and crash[1] == a.launch_index

    # Inputs of every cycle drawn up front (same on every rank: TP ranks must see the same tokens).
    n_total = a.warmup + 2 * a.cycles
    gen = torch.Generator().manual_seed(a.seed * 1_000_003 + a.launch_index)
    tok_host = torch.randint(0, shape.vocab, (n_total, batch, t_in), generator=gen)
    alpha = accept_alpha(a.accept_mean, ndt) if eagle else 0.0
    acc_len = simulate_accept_len(n_total, batch, ndt if eagle else 1, alpha, gen)
    inputs = torch.cat([tok_host.view(n_total, -1), (acc_len - 1).long().view(n_total, -1)], 1).to(device)

    schedule = make_schedule(a.warmup, a.cycles, a.block)

    cfg = {
        "preset": preset, "mode": a.mode, "tp": world, "tp_slice": a.tp_slice, "shard": shard,
        "layers": shape.layers, "layers_full": shape.layers_full, "layers_auto": layers_auto,
        "batch": batch, "context": ctx, "num_steps": steps if eagle else None,
        "num_draft_tokens": ndt if eagle else None, "accept_mean": a.accept_mean if eagle else None,
        "verify_graph": a.verify_graph if eagle else None, "cycles": a.cycles, "warmup": a.warmup,
        "block": a.block, "naive_timer": a.naive_timer, "device": device.type, "dtype": str(dtype).split(".")[-1],
        "moe_impl": moe_impl, "seed": a.seed,
    }  # fmt: skip
    t_tok = batch * (ndt if eagle else 1)
    exp_unique = shape.expected_unique(t_tok)
    if rank == 0:
        header = {
            "type": "header", "protocol": protocol, "probe": name, "version": version, "config": cfg,
            "primary": "cycle", "phases": phases, "units": {m: "ms" for m in ["cycle", *phases]},
            "timer": "cuda-events" if cuda else "perf_counter",
            "labels": {"accept_len": f"simulated: chain acceptance, per-token probability {alpha:.4f}, mean {a.accept_mean}"}
            if eagle else {},
            "accept_len_simulated": eagle,
            "python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": _nccl_version() if cuda else None,
            "device": _device_info(device), "world": world,
            "backend": (("nccl" if cuda else "gloo") if world > 1 else None),
            "threads": torch.get_num_threads(), "env": env, "launch_index": a.launch_index,
            "model": {
                "shape": _presets.shape_dict(shape), "source": _presets.SOURCES[preset],
                "weight_bytes_rank": init.bytes, "aux_layers": shape.aux_layers() if eagle else None,
                "collectives_per_phase": collectives,
                "collectives_issued": world > 1,
                "expected_unique_experts": {target_phase: round(exp_unique, 3)},
                "target_tokens": {target_phase: t_tok},
                "mla": "absorbed (W_UK into q, W_UV after attention) over a latent cache of kv_lora+rope",
                "moe": moe_impl, "lm_head": "vocabulary sharded, logits all-gathered",
            },
            "copy_GBps": copy_gbps, "graphs": graphs, "hooks": hooks, "build_s": build_s,
        }  # fmt: skip
        Emitter().emit(header)

    # ------------------------------------------------------------------------------ the cycles
    order = list(fns)
    n_cols = 1 + len(order) + ((len(order) + 1) if a.naive_timer else 0)
    rows: list[list[float]] = []
    bare: list[float] = []
    experts: list[float] = []
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(order) + 3)] if cuda else []
    done = 0
    progress("measure", 0, len(schedule), force=True)
    _barrier(group, world, device)
    t_measure = time.time()
    for ci, kind in enumerate(schedule):
        if crash_here and kind != "w":
            sys.stderr.write(
                f"rank {rank}: crashing on purpose (test hook --crash-rank) in launch {a.launch_index}\n"
            )
            sys.stderr.flush()
            os._exit(17)
        inst = kind != "b"
        tw0 = time.perf_counter()
        if cuda:
            ev[0].record()
        inp.copy_(inputs[ci])
        marks = [0.0] * (len(order) + 1)
        naive = [0.0] * (len(order) + 1)
        if inst:
            if cuda:
                ev[1].record()
            marks[0] = naive[0] = time.perf_counter()
        for k, ph in enumerate(order):
            runners[ph]()
            if ph in slow:
                slow[ph]()
            if inst:
                if cuda:
                    ev[2 + k].record()
                marks[k + 1] = naive[k + 1] = time.perf_counter()
        if cuda:
            ev[-1].record()
            ev[-1].synchronize()  # the one synchronize per cycle
        tw1 = time.perf_counter()
        if cuda:
            cyc = ev[0].elapsed_time(ev[-1])
            ph_ms = [ev[1 + k].elapsed_time(ev[2 + k]) for k in range(len(order))] if inst else []
        else:
            cyc = (tw1 - tw0) * 1e3
            ph_ms = [(marks[k + 1] - marks[k]) * 1e3 for k in range(len(order))] if inst else []
        # Bare cycles do the same between-cycle work, so the two kinds differ only inside the cycle.
        c = target.counts.cpu()
        if inst:
            row = [cyc, *ph_ms]
            if a.naive_timer:
                row += [(naive[k + 1] - naive[k]) * 1e3 for k in range(len(order))] + [(tw1 - tw0) * 1e3]
            rows.append(row)
            experts.append(float((c > 0).sum(1).float().mean()) if shape.n_moe else 0.0)
        else:
            bare.append(cyc)
        done += 1
        progress("warmup" if kind == "w" else "measure", done, len(schedule))
    t_end = time.time()

    # ---------------------------------------------------------------------- gather: max over ranks
    progress("gather", force=True)
    m = _max_over_ranks(rows, n_cols, group, world, device)
    bm = _max_over_ranks([[x] for x in bare], 1, group, world, device)
    if rank == 0:
        _report(
            a,
            m,
            [r[0] for r in bm],
            experts,
            schedule,
            order,
            acc_len,
            eagle,
            shape,
            copy_gbps,
            exp_unique,
            target_phase,
            batch,
            ndt,
            ctx,
            elt,
            t_measure - (a._t0 or t_rank0),
            t_end - (a._t0 or t_rank0),
            t_rank0,
        )
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()


def _report(a: Any, m: list[list[float]], bare: list[float], experts: list[float], schedule: list[str],
            order: list[str], acc_len: torch.Tensor, eagle: bool, shape: Any, copy_gbps: float,
            exp_unique: float, target_phase: str, batch: int, ndt: int, ctx: int, elt: int,
            t_begin: float, t_end: float, t_rank0: float) -> None:  # fmt: skip
    em = Emitter()
    P = len(order)
    inst_i = [i for i, k in enumerate(schedule) if k != "b"]
    bare_i = [i for i, k in enumerate(schedule) if k == "b"]
    kept: dict[str, list[float]] = {m_: [] for m_ in ["cycle", *order]}
    naive_kept: dict[str, list[float]] = {m_: [] for m_ in [*order, "cycle"]} if a.naive_timer else {}
    gaps: list[float] = []
    accept: list[float] = []
    exp_kept: list[float] = []
    for j, (ci, row) in enumerate(zip(inst_i, m)):  # noqa: B905
        warm = schedule[ci] == "w"
        t = {"cycle": round(row[0], 5), **{ph: round(row[1 + k], 5) for k, ph in enumerate(order)}}
        line: dict[str, Any] = {"type": "cycle", "i": ci, "t": t}
        if warm:
            line["warmup"] = True
        if a.naive_timer:
            nv = {ph: round(row[1 + P + k], 5) for k, ph in enumerate(order)}
            nv["cycle"] = round(row[1 + 2 * P], 5)
            line["naive"] = nv
        vals: dict[str, Any] = {f"experts_{target_phase}": round(experts[j], 3)}
        if eagle:
            al = float(acc_len[ci].float().mean())
            vals["accept_len"] = al
            line["accept_len_simulated"] = True
        line["values"] = vals
        em.emit(line)
        if warm:
            continue
        for k_, v in t.items():
            kept[k_].append(v)
        if a.naive_timer:
            for k_, v in line["naive"].items():
                naive_kept[k_].append(v)
        gaps.append(abs(row[0] - sum(row[1 : 1 + P])) / row[0] * 100 if row[0] > 0 else 0.0)
        exp_kept.append(experts[j])
        if eagle:
            accept.append(vals["accept_len"])
    for ci, v in zip(bare_i, bare):  # noqa: B905
        em.emit({"type": "cycle", "i": ci, "bare": True, "t": {"cycle": round(v, 5)}})

    med = {k_: summary(v) for k_, v in kept.items()}
    inst_med, bare_med = med["cycle"]["median"], summary(bare)["median"]
    inst_cycles = [row[0] for ci, row in zip(inst_i, m) if schedule[ci] == "i"]  # noqa: B905
    paired = paired_overhead(inst_cycles, bare, a.cycles, a.block)
    unpaired = round((inst_med - bare_med) / bare_med * 100, 3)
    accept_mean = sum(accept) / len(accept) if accept else 1.0
    unique = sum(exp_kept) / len(exp_kept) if exp_kept else 0.0
    tokens = batch * (ndt if eagle else 1)
    floor_bytes = shape.target_bytes(
        tokens, batch, ctx + (ndt if eagle else 1), elt, unique if shape.n_moe else 0.0
    )
    floor_ms = floor_bytes / (copy_gbps * 1e9) * 1e3
    scalars: dict[str, Any] = {
        "overhead_pct": paired,
        "copy_GBps": copy_gbps,
        f"experts_{target_phase}_mean": round(unique, 3),
        f"experts_{target_phase}_expected": round(exp_unique, 3),
        f"bytes_{target_phase}": floor_bytes,
        f"hbm_floor_ms_{target_phase}": round(floor_ms, 5),
        f"floor_fraction_{target_phase}": round(floor_ms / med[target_phase]["median"], 4),
        "tok_s": round(batch * accept_mean / inst_med * 1e3, 3),
    }
    if eagle:
        scalars.update(
            {"accept_len_mean": round(accept_mean, 4), "accept_len_simulated": True, "tok_s_simulated": True}
        )
    if a.naive_timer:
        for ph in order:
            nmed = summary(naive_kept[ph])["median"]
            scalars[f"naive_over_event_{ph}"] = (
                round(nmed / med[ph]["median"], 4) if med[ph]["median"] else None
            )
    em.emit({
        "type": "footer", "cycles": len(kept["cycle"]), "warmup_dropped": schedule.count("w"),
        "bare_cycles": len(bare), "summary": med,
        "naive_summary": {k_: summary(v) for k_, v in naive_kept.items()} if a.naive_timer else None,
        "bare_summary": summary(bare),
        "overhead": {"instrumented_median_ms": inst_med, "bare_median_ms": bare_med,
                     "pct": paired, "unpaired_pct": unpaired, "pairs": math.ceil(a.cycles / a.block)},
        "fidelity": {"phase_sum_gap_pct": summary(gaps)},
        "scalars": scalars, "measure_window_s": [round(t_begin, 3), round(t_end, 3)],
        "duration_s": round(time.time() - t_rank0, 3),
    })  # fmt: skip


def make_schedule(warmup: int, cycles: int, block: int) -> list[str]:
    """'w' warm-up, then instrumented ('i') and bare ('b') blocks in ABBA order (I B, B I, I B, ...),
    so a drift during the launch (host load, clocks) weighs on both kinds alike."""
    schedule = ["w"] * warmup
    for b in range(math.ceil(cycles / block)):
        n = min(block, cycles - b * block)
        first, second = ("i", "b") if b % 2 == 0 else ("b", "i")
        schedule += [first] * n + [second] * n
    return schedule


def paired_overhead(inst: list[float], bare: list[float], cycles: int, block: int) -> float | None:
    """The probe's overhead in %: median over adjacent (instrumented, bare) block pairs of
    (median instrumented - median bare) / median bare. Pairing cancels slow drifts that a comparison
    of the two overall medians would mistake for overhead."""
    pcts = []
    for b in range(math.ceil(cycles / block)):
        n = min(block, cycles - b * block)
        i_blk, b_blk = inst[b * block : b * block + n], bare[b * block : b * block + n]
        if i_blk and b_blk:
            mb = summary(b_blk)["median"]
            pcts.append((summary(i_blk)["median"] - mb) / mb * 100)
    return round(summary(pcts)["median"], 3) if pcts else None


def _capture(fn: Callable[[], None], pool: Any) -> Callable[[], None]:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool):
        fn()
    return g.replay


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def _init_dist(a: Any, rank: int, world: int, cuda: bool) -> Any:
    if world == 1:
        return None
    from datetime import timedelta

    import torch.distributed as dist

    kw: dict[str, Any] = dict(
        backend="nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{a._port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=600),
    )
    if cuda:
        kw["device_id"] = torch.device("cuda", rank)
    try:
        dist.init_process_group(**kw)
    except TypeError:  # torch without device_id
        kw.pop("device_id", None)
        dist.init_process_group(**kw)
    return dist.group.WORLD


def _barrier(group: Any, world: int, device: torch.device) -> None:
    if world > 1:
        import torch.distributed as dist

        t = torch.zeros(1, device=device)
        dist.all_reduce(t, group=group)
        if device.type == "cuda":
            torch.cuda.synchronize()


def _max_over_ranks(
    rows: list[list[float]], n_cols: int, group: Any, world: int, device: torch.device
) -> list[list[float]]:
    if world == 1 or not rows:
        return rows
    import torch.distributed as dist

    t = torch.tensor(rows, dtype=torch.float64, device=device).reshape(len(rows), n_cols)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.cpu().tolist()


def _nccl_version() -> str | None:
    try:
        v = torch.cuda.nccl.version()
        return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:
        return None


def _device_info(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        return {"type": "cuda", "name": p.name, "count": torch.cuda.device_count(),
                "capability": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 1),
                "sms": p.multi_processor_count}  # fmt: skip
    return {"type": "cpu", "name": platform.processor() or platform.machine(), "count": os.cpu_count()}
