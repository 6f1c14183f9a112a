"""One rank of the spec-decode probe: set up, build the model and its graphs, time cycles, gather, report.

Timing (docs/probes.md, "Timing"): on CUDA, events recorded on the compute stream at the cycle start,
between phases and at the cycle end, one synchronize per cycle; on CPU, perf_counter at the same points.
Each rank keeps its own times; at the end of the launch one all-reduce(MAX) makes every number the
slowest rank's, so the cycle lines come out after the last cycle, not during the run.

Cycle kinds, interleaved in blocks (make_schedule): instrumented ('i'), bare ('b': no events between
phases, the probe's own overhead) and, at TP > 1, no-communication ('n': the same per-rank shapes and
graphs with every collective left out, so the communication share of each phase is a measured
difference inside one launch).
"""

from __future__ import annotations

# zip(strict=) is 3.10+; the probes run on the target host's python, which may be 3.9 (noqa: B905 below).
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import _presets
import torch
import torch.nn.functional as F
from _dist import barrier, device_info, init_dist, max_over_ranks, nccl_version, pick_device, teardown
from _hooks import hang_here
from _protocol import Emitter, Progress, UsageError, summary
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


# ---------------------------------------------------------------------------------------- set-up


@dataclass
class Setup:
    """The resolved configuration of one rank: device, group, preset, shapes."""

    a: Any
    rank: int
    world: int
    cuda: bool
    device: torch.device
    group: Any
    preset: str
    dtype: torch.dtype
    shard: int
    eagle: bool
    ctx: int
    shape: Any
    layers_auto: bool
    moe_impl: str
    copy_gbps: float
    t_rank0: float

    @property
    def elt(self) -> int:
        return torch.finfo(self.dtype).bits // 8

    @property
    def t_in(self) -> int:
        return self.a.num_draft_tokens if self.eagle else 1

    @property
    def comm_off(self) -> bool:
        """Time the phases without communication too (only where there is communication)."""
        return self.world > 1

    @property
    def target_phase(self) -> str:
        return "verify" if self.eagle else "decode"


def setup(a: Any, progress: Progress) -> Setup:
    rank, world = a._rank, a._world
    t_rank0 = time.time()
    device = pick_device(a.device, rank, world)
    cuda = device.type == "cuda"
    if not cuda and "OMP_NUM_THREADS" not in os.environ:
        # One thread per rank unless the user says otherwise: OpenMP teams spinning on a shared or
        # oversubscribed CPU made cycles 8x slower and erratic (measured on a loaded 2-core VM).
        torch.set_num_threads(1)
    group = init_dist(a._port, rank, world, cuda)
    preset = a.preset if a.preset != "auto" else ("kimi-k2" if cuda else "tiny")
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}.get(a.dtype) or (
        torch.bfloat16 if cuda else torch.float32
    )
    eagle = a.mode == "eagle"
    shard = a.tp_slice or world
    ctx = a.context or _presets.CONTEXT.get(preset, _presets.DEFAULT_CONTEXT)
    progress("bandwidth", force=True)
    copy_gbps = copy_bandwidth(device, dtype)
    shape = _presets.resolve_shape(preset, a.layers, shard)
    if a.layers is None:
        shape = _presets.resolve_shape(preset, _layers_that_fit(shape, device, dtype, a, ctx, preset), shard)
    moe_impl = a.moe_impl if a.moe_impl != "auto" else ("grouped_mm" if cuda else "loop")
    if moe_impl == "grouped_mm" and not grouped_mm_available(device, dtype):
        raise UsageError(
            f"torch {torch.__version__} has no usable torch._grouped_mm on {device.type}; use --moe-impl loop"
        )
    return Setup(a, rank, world, cuda, device, group, preset, dtype, shard, eagle, ctx, shape,
                 a.layers is None, moe_impl, copy_gbps, t_rank0)  # fmt: skip


def _layers_that_fit(
    shape: Any, device: torch.device, dtype: torch.dtype, a: Any, ctx: int, preset: str
) -> int:
    elt = torch.finfo(dtype).bits // 8
    free = available_bytes(device)
    cuda = device.type == "cuda"
    reserve = int(4 * 2**30 + 0.05 * free) if cuda else int(2**30 + 0.25 * free)
    t_in = a.num_draft_tokens if a.mode == "eagle" else 1
    kv_layer = a.batch * (ctx + t_in) * (shape.kv_lora + shape.rope) * elt
    n = _presets.fit_layers(shape, elt, free, reserve, kv_layer)
    if n < 1:
        per = shape.layer_bytes(elt)
        raise UsageError(
            f"{preset} at TP={shape.shard}: one MoE layer needs {_presets.gib(shape.experts * per['expert'])} GiB, "
            f"{_presets.gib(free)} GiB free; use a larger --tp/--tp-slice or a smaller preset"
        )
    return n


# ------------------------------------------------------------------------------------------ build


@dataclass
class Model:
    """The built phases: functions, their graphs (with and without communication), and the inputs."""

    comm: Comm
    init: Init
    target: Target
    fns: dict[str, Callable[[], None]]
    inp: torch.Tensor  # tokens then accept indices, refreshed at the start of each cycle
    collectives: dict[str, list[dict[str, Any]]]
    graphs: dict[str, bool] = field(default_factory=dict)
    runners: dict[str, Callable[[], None]] = field(default_factory=dict)
    runners_nocomm: dict[str, Callable[[], None]] = field(default_factory=dict)
    build_s: float = 0.0

    def release(self) -> None:
        """Drop the CUDA graphs (they keep NCCL's teardown from returning) and the phase closures."""
        self.runners.clear()
        self.runners_nocomm.clear()
        self.fns.clear()


def _eagle_fns(s: Setup, target: Target, draft: Draft, inp: torch.Tensor) -> dict[str, Callable[[], None]]:
    a, shape, device, dtype = s.a, s.shape, s.device, s.dtype
    ndt, steps, batch, ctx = a.num_draft_tokens, a.num_steps, a.batch, s.ctx
    n_pos = ctx + ndt + steps + 1
    cos_t, sin_t = rope_tables(shape.rope, n_pos, shape.rope_theta, device, dtype)
    cos_d, sin_d = rope_tables(shape.draft_head_dim, n_pos, shape.rope_theta, device, dtype)
    tok_in = inp[: batch * ndt].view(batch, ndt)
    acc_idx = inp[batch * ndt :]
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

    return {"draft": f_draft, "verify": f_verify, "extend": f_extend}


def _decode_fns(s: Setup, target: Target, inp: torch.Tensor) -> dict[str, Callable[[], None]]:
    shape, batch = s.shape, s.a.batch
    n_pos = s.ctx + s.a.num_draft_tokens + s.a.num_steps + 1  # the same tables as the eagle mode's
    cos_t, sin_t = rope_tables(shape.rope, n_pos, shape.rope_theta, s.device, s.dtype)
    tok_in = inp[:batch].view(batch, 1)
    pos_dec = Pos(s.ctx, 1, batch, cos_t, sin_t)
    dec_ids = torch.zeros(batch, dtype=torch.long, device=s.device)

    def f_decode() -> None:
        dec_ids.copy_(target(tok_in, pos_dec))

    return {"decode": f_decode}


def _collective_table(log: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """[(op, bytes), ...] -> [{"op", "bytes", "count"}] in first-seen order."""
    out: dict[tuple[str, int], int] = {}
    for key in log:
        out[key] = out.get(key, 0) + 1
    return [{"op": op, "bytes": b, "count": n} for (op, b), n in out.items()]


def build(s: Setup, progress: Progress) -> Model:
    a, shape = s.a, s.shape
    t_build = time.time()
    torch.manual_seed(a.seed * 7919 + s.rank)
    comm = Comm(s.group, s.world)
    init = Init(s.device, s.dtype)
    ndt, steps, batch = a.num_draft_tokens, a.num_steps, a.batch
    target = Target(shape, init, comm, batch, s.ctx + s.t_in, s.moe_impl,
                    on_layer=lambda i, n: progress("build", i, n))  # fmt: skip
    # One static input buffer per cycle: the tokens (batch x t_in) then the accept index per sequence,
    # refreshed by a single device-to-device copy at the start of each cycle (the cycle's "other" time).
    inp = torch.zeros(batch * s.t_in + batch, dtype=torch.long, device=s.device)
    if s.eagle:
        draft = Draft(shape, init, comm, batch, s.ctx + ndt + steps, target.embed)
        fns = _eagle_fns(s, target, draft, inp)
    else:
        fns = _decode_fns(s, target, inp)
    # One eager pass per phase: warms kernels and NCCL, and logs the collectives each phase issues.
    collectives = {}
    for ph, fn in fns.items():
        comm.log = []
        fn()
        collectives[ph] = _collective_table(comm.log)
    comm.log = None
    _sync(s.cuda)
    m = Model(comm, init, target, fns, inp, collectives)
    progress("capture", force=True)
    pool = torch.cuda.graph_pool_handle() if s.cuda else None
    for ph, fn in fns.items():
        use_graph = s.cuda and not (ph == "verify" and a.verify_graph == "off")
        if use_graph and ph in ("verify", "decode") and s.moe_impl == "loop":
            use_graph = False  # the loop syncs the host to learn which experts were hit
        m.graphs[ph] = use_graph
        m.runners[ph] = _capture(fn, pool) if use_graph else fn
        if s.comm_off:
            m.runners_nocomm[ph] = _without_comm(comm, fn, pool if use_graph else None)
        progress("capture", len(m.runners), len(fns))
    _sync(s.cuda)
    m.build_s = round(time.time() - t_build, 3)
    return m


def _without_comm(comm: Comm, fn: Callable[[], None], pool: Any) -> Callable[[], None]:
    """The phase with every collective left out: captured that way, or run eagerly with comm off."""
    if pool is not None:
        comm.enabled = False
        try:
            return _capture(fn, pool)
        finally:
            comm.enabled = True

    def eager() -> None:
        comm.enabled = False
        try:
            fn()
        finally:
            comm.enabled = True

    return eager


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


# ---------------------------------------------------------------------------------------- header


def _value_units(target_phase: str, eagle: bool) -> dict[str, str]:
    """Units of the per-cycle values: experts the target forward touched, and the accept length."""
    return {f"experts_{target_phase}": "experts", **({"accept_len": "tokens/step"} if eagle else {})}


def _value_better(target_phase: str, eagle: bool) -> dict[str, str]:
    """The experts touched follow from the routing (context, not an outcome); a longer accept is better."""
    return {f"experts_{target_phase}": "context", **({"accept_len": "higher"} if eagle else {})}


def header(s: Setup, m: Model, meta: dict[str, Any], hooks: dict[str, Any], alpha: float) -> dict[str, Any]:
    a, shape = s.a, s.shape
    eagle = s.eagle
    cfg = {
        "preset": s.preset, "mode": a.mode, "tp": s.world, "tp_slice": a.tp_slice, "shard": s.shard,
        "layers": shape.layers, "layers_full": shape.layers_full, "layers_auto": s.layers_auto,
        "batch": a.batch, "context": s.ctx, "num_steps": a.num_steps if eagle else None,
        "num_draft_tokens": a.num_draft_tokens if eagle else None, "accept_mean": a.accept_mean if eagle else None,
        "verify_graph": a.verify_graph if eagle else None, "cycles": a.cycles, "warmup": a.warmup,
        "block": a.block, "naive_timer": a.naive_timer, "device": s.device.type,
        "dtype": str(s.dtype).split(".")[-1], "moe_impl": s.moe_impl, "seed": a.seed,
    }  # fmt: skip
    t_tok = a.batch * s.t_in
    return {
        "type": "header", "protocol": meta["protocol"], "probe": meta["name"], "version": meta["version"],
        "config": cfg, "primary": "cycle", "phases": meta["phases"],
        "units": {**{k: "ms" for k in ["cycle", *meta["phases"]]}, **_value_units(s.target_phase, eagle)},
        "better": {**{k: "lower" for k in ["cycle", *meta["phases"]]}, **_value_better(s.target_phase, eagle)},
        "timer": "cuda-events" if s.cuda else "perf_counter",
        "labels": {"accept_len": f"simulated: chain acceptance, per-token probability {alpha:.4f}, mean {a.accept_mean}"}
        if eagle else {},
        "accept_len_simulated": eagle,
        "python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": nccl_version() if s.cuda else None,
        "device": device_info(s.device), "world": s.world,
        "backend": (("nccl" if s.cuda else "gloo") if s.world > 1 else None),
        "threads": torch.get_num_threads(), "env": meta["env"], "launch_index": a.launch_index,
        "model": {
            "shape": _presets.shape_dict(shape), "source": _presets.SOURCES[s.preset],
            "weight_bytes_rank": m.init.bytes, "aux_layers": shape.aux_layers() if eagle else None,
            "collectives_per_phase": {ph: sum(c["count"] for c in t) for ph, t in m.collectives.items()},
            "collectives": m.collectives,
            "collectives_issued": s.world > 1,
            "expected_unique_experts": {s.target_phase: round(shape.expected_unique(t_tok), 3)},
            "target_tokens": {s.target_phase: t_tok},
            "mla": "absorbed (W_UK into q, W_UV after attention) over a latent cache of kv_lora+rope",
            "moe": s.moe_impl, "lm_head": "vocabulary sharded, logits all-gathered",
        },
        "comm_off_cycles": s.comm_off,
        "copy_GBps": s.copy_gbps, "graphs": m.graphs, "hooks": hooks, "build_s": m.build_s,
    }  # fmt: skip


# ------------------------------------------------------------------------------------------ cycles


def make_schedule(warmup: int, cycles: int, block: int, comm_off: bool = False) -> list[str]:
    """'w' warm-up, then instrumented ('i') and bare ('b') blocks in ABBA order (I B, B I, I B, ...),
    so a drift during the launch (host load, clocks) weighs on both kinds alike. With `comm_off` a
    no-communication block ('n') sits between them (I N B, B N I, ...): always next to an I block, so
    each I block has an N neighbour to be paired with."""
    schedule = ["w"] * warmup
    for b in range(math.ceil(cycles / block)):
        n = min(block, cycles - b * block)
        kinds = ["i", "b"] if b % 2 == 0 else ["b", "i"]
        if comm_off:
            kinds.insert(1, "n")
        for k in kinds:
            schedule += [k] * n
    return schedule


@dataclass
class Measured:
    """What one rank measured: rows per instrumented cycle, bare cycle times, no-comm rows."""

    schedule: list[str]
    rows: list[list[float]] = field(default_factory=list)  # i and w cycles: cycle, phases[, naive]
    bare: list[float] = field(default_factory=list)
    nocomm: list[list[float]] = field(default_factory=list)  # cycle, phases
    experts: list[float] = field(default_factory=list)
    t_measure: float = 0.0
    t_end: float = 0.0


def measure(s: Setup, m: Model, hooks: dict[str, Any], inputs: torch.Tensor, progress: Progress) -> Measured:
    a, cuda = s.a, s.cuda
    order = list(m.fns)
    slow = {
        ph: (_gpu_sleep_ms(ms) if cuda else _spin_ms(ms)) for ph, ms in hooks["slow_ms"].items() if ms > 0
    }
    crash = hooks["crash"]
    crash_here = crash is not None and crash[0] == s.rank and crash[1] == a.launch_index
    out = Measured(make_schedule(a.warmup, a.cycles, a.block, s.comm_off))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(order) + 3)] if cuda else []
    progress("measure", 0, len(out.schedule), force=True)
    barrier(s.group, s.world, s.device)
    hang_here(hooks.get("hang"), s.rank, "measure")
    out.t_measure = time.time()
    for ci, kind in enumerate(out.schedule):
        if crash_here and kind != "w":
            sys.stderr.write(
                f"rank {s.rank}: crashing on purpose (test hook --crash-rank) in launch {a.launch_index}\n"
            )
            sys.stderr.flush()
            os._exit(17)
        runners = m.runners_nocomm if kind == "n" else m.runners
        row, naive = _one_cycle(order, runners, slow, ev, m.inp, inputs[ci], kind != "b", cuda)
        # Bare cycles do the same between-cycle work, so the kinds differ only inside the cycle.
        c = m.target.counts.cpu()
        if kind == "b":
            out.bare.append(row[0])
        elif kind == "n":
            out.nocomm.append(row)
        else:
            out.rows.append(row + naive if a.naive_timer else row)
            out.experts.append(float((c > 0).sum(1).float().mean()) if s.shape.n_moe else 0.0)
        progress("warmup" if kind == "w" else "measure", ci + 1, len(out.schedule))
    out.t_end = time.time()
    return out


def _one_cycle(order: list[str], runners: dict[str, Callable[[], None]], slow: dict[str, Callable[[], None]],
               ev: list[Any], inp: torch.Tensor, cycle_inputs: torch.Tensor, inst: bool,
               cuda: bool) -> tuple[list[float], list[float]]:  # fmt: skip
    """One cycle: [cycle, phase...] in ms (phases only when instrumented) and the naive perf_counter times."""
    tw0 = time.perf_counter()
    if cuda:
        ev[0].record()
    inp.copy_(cycle_inputs)
    marks = [0.0] * (len(order) + 1)
    if inst:
        if cuda:
            ev[1].record()
        marks[0] = time.perf_counter()
    for k, ph in enumerate(order):
        runners[ph]()
        if ph in slow:
            slow[ph]()
        if inst:
            if cuda:
                ev[2 + k].record()
            marks[k + 1] = time.perf_counter()
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
    naive = [(marks[k + 1] - marks[k]) * 1e3 for k in range(len(order))] + [(tw1 - tw0) * 1e3] if inst else []
    return [cyc, *ph_ms], naive


# ------------------------------------------------------------------------------------------ rank


def run_rank(
    a: Any, hooks: dict[str, Any], meta: dict[str, Any], accept_alpha: Callable[[float, int], float]
) -> None:
    """One rank's whole launch. `meta`: name, version, protocol, phases, env (for the header)."""
    progress = Progress()
    progress("start", force=True)
    s = setup(a, progress)
    progress("build", force=True)
    hang_here(hooks.get("hang"), s.rank, "build")
    m = build(s, progress)
    ndt = a.num_draft_tokens if s.eagle else 1
    alpha = accept_alpha(a.accept_mean, ndt) if s.eagle else 0.0
    # Inputs of every cycle drawn up front (same on every rank: TP ranks must see the same tokens).
    schedule_len = len(make_schedule(a.warmup, a.cycles, a.block, s.comm_off))
    gen = torch.Generator().manual_seed(a.seed * 1_000_003 + a.launch_index)
    tok_host = torch.randint(0, s.shape.vocab, (schedule_len, a.batch, s.t_in), generator=gen)
    acc_len = simulate_accept_len(schedule_len, a.batch, ndt, alpha, gen)
    inputs = torch.cat([tok_host.view(schedule_len, -1), (acc_len - 1).long().view(schedule_len, -1)], 1)
    inputs = inputs.to(s.device)
    if s.rank == 0:
        Emitter().emit(header(s, m, meta, hooks, alpha))
    got = measure(s, m, hooks, inputs, progress)
    progress("gather", force=True)
    order = list(m.fns)
    n_cols = 1 + len(order) + ((len(order) + 1) if a.naive_timer else 0)
    rows = max_over_ranks(got.rows, n_cols, s.group, s.world, s.device)
    bare = [r[0] for r in max_over_ranks([[x] for x in got.bare], 1, s.group, s.world, s.device)]
    nocomm = max_over_ranks(got.nocomm, 1 + len(order), s.group, s.world, s.device)
    if s.rank == 0:
        t0 = a._t0 or s.t_rank0
        report = Report(s, order, got.schedule, rows, bare, nocomm, got.experts, acc_len,
                        (got.t_measure - t0, got.t_end - t0))  # fmt: skip
        report.emit()
    progress("teardown", force=True)
    hang_here(hooks.get("hang"), s.rank, "teardown")
    teardown(s.world, s.cuda, release=m.release)


# ------------------------------------------------------------------------------------------ report


@dataclass
class Report:
    """Rank 0 turns the gathered (slowest-rank) numbers into cycle lines and the footer."""

    s: Setup
    order: list[str]
    schedule: list[str]
    rows: list[list[float]]
    bare: list[float]
    nocomm: list[list[float]]
    experts: list[float]
    acc_len: torch.Tensor
    window: tuple[float, float]
    kept: dict[str, list[float]] = field(default_factory=dict)
    naive_kept: dict[str, list[float]] = field(default_factory=dict)

    def emit(self) -> None:
        em = Emitter()
        stats = self._cycle_lines(em)
        em.emit(self._footer(*stats))

    def _cycle_lines(self, em: Emitter) -> tuple[list[float], list[float], list[float]]:
        a, P = self.s.a, len(self.order)
        self.kept = {k: [] for k in ["cycle", *self.order]}
        self.naive_kept = {k: [] for k in [*self.order, "cycle"]} if a.naive_timer else {}
        gaps: list[float] = []
        accept: list[float] = []
        exp_kept: list[float] = []
        inst_i = [i for i, k in enumerate(self.schedule) if k in ("i", "w")]
        for j, (ci, row) in enumerate(zip(inst_i, self.rows)):  # noqa: B905
            warm = self.schedule[ci] == "w"
            t = {"cycle": round(row[0], 5), **{ph: round(row[1 + k], 5) for k, ph in enumerate(self.order)}}
            line: dict[str, Any] = {"type": "cycle", "i": ci, "t": t}
            if warm:
                line["warmup"] = True
            if a.naive_timer:
                line["naive"] = {**{ph: round(row[1 + P + k], 5) for k, ph in enumerate(self.order)},
                                 "cycle": round(row[1 + 2 * P], 5)}  # fmt: skip
            vals: dict[str, Any] = {f"experts_{self.s.target_phase}": round(self.experts[j], 3)}
            if self.s.eagle:
                vals["accept_len"] = float(self.acc_len[ci].float().mean())
                line["accept_len_simulated"] = True
            line["values"] = vals
            em.emit(line)
            if warm:
                continue
            for k_, v in t.items():
                self.kept[k_].append(v)
            for k_, v in line.get("naive", {}).items():
                self.naive_kept[k_].append(v)
            gaps.append(abs(row[0] - sum(row[1 : 1 + P])) / row[0] * 100 if row[0] > 0 else 0.0)
            exp_kept.append(self.experts[j])
            if self.s.eagle:
                accept.append(vals["accept_len"])
        for ci, v in zip([i for i, k in enumerate(self.schedule) if k == "b"], self.bare):  # noqa: B905
            em.emit({"type": "cycle", "i": ci, "bare": True, "t": {"cycle": round(v, 5)}})
        for ci, row in zip([i for i, k in enumerate(self.schedule) if k == "n"], self.nocomm):  # noqa: B905
            t = {"cycle": round(row[0], 5), **{ph: round(row[1 + k], 5) for k, ph in enumerate(self.order)}}
            em.emit({"type": "cycle", "i": ci, "nocomm": True, "t": t})
        return gaps, accept, exp_kept

    def _footer(self, gaps: list[float], accept: list[float], exp_kept: list[float]) -> dict[str, Any]:
        s, a = self.s, self.s.a
        med = {k_: summary(v) for k_, v in self.kept.items()}
        inst_med, bare_med = med["cycle"]["median"], summary(self.bare)["median"]
        inst_cycles = self.kept["cycle"]
        paired = paired_overhead(inst_cycles, self.bare, a.cycles, a.block)
        accept_mean = sum(accept) / len(accept) if accept else 1.0
        unique = sum(exp_kept) / len(exp_kept) if exp_kept else 0.0
        tp = s.target_phase
        tokens = a.batch * s.t_in
        floor_bytes = s.shape.target_bytes(
            tokens, a.batch, s.ctx + s.t_in, s.elt, unique if s.shape.n_moe else 0.0
        )
        floor_ms = floor_bytes / (s.copy_gbps * 1e9) * 1e3
        scalars: dict[str, Any] = {
            "overhead_pct": paired, "copy_GBps": s.copy_gbps,
            f"experts_{tp}_mean": round(unique, 3),
            f"experts_{tp}_expected": round(s.shape.expected_unique(tokens), 3),
            f"bytes_{tp}": floor_bytes, f"hbm_floor_ms_{tp}": round(floor_ms, 5),
            f"floor_fraction_{tp}": round(floor_ms / med[tp]["median"], 4),
            "tok_s": round(a.batch * accept_mean / inst_med * 1e3, 3),
        }  # fmt: skip
        if s.eagle:
            scalars.update({"accept_len_mean": round(accept_mean, 4), "accept_len_simulated": True,
                            "tok_s_simulated": True})  # fmt: skip
        for ph in self.order if a.naive_timer else []:
            nmed = summary(self.naive_kept[ph])["median"]
            scalars[f"naive_over_event_{ph}"] = (
                round(nmed / med[ph]["median"], 4) if med[ph]["median"] else None
            )
        comm = self._comm()
        for ph, c in comm.items():
            scalars[f"comm_ms_{ph}"] = c["comm_ms"]
            scalars[f"comm_share_{ph}"] = c["share"]
        return {
            "type": "footer", "cycles": len(self.kept["cycle"]), "warmup_dropped": self.schedule.count("w"),
            "bare_cycles": len(self.bare), "nocomm_cycles": len(self.nocomm), "summary": med,
            "naive_summary": {k_: summary(v) for k_, v in self.naive_kept.items()} if a.naive_timer else None,
            "bare_summary": summary(self.bare),
            "overhead": {"instrumented_median_ms": inst_med, "bare_median_ms": bare_med,
                         "pct": paired, "unpaired_pct": round((inst_med - bare_med) / bare_med * 100, 3),
                         "pairs": math.ceil(a.cycles / a.block)},
            "comm": comm or None,
            "fidelity": {"phase_sum_gap_pct": summary(gaps)},
            "scalars": scalars, "measure_window_s": [round(self.window[0], 3), round(self.window[1], 3)],
            "duration_s": round(time.time() - s.t_rank0, 3),
        }  # fmt: skip

    def _comm(self) -> dict[str, dict[str, Any]]:
        """Per phase (and the cycle): median with and without communication, and the communication
        time as the median over adjacent (I, N) block pairs of the difference of their medians."""
        if not self.nocomm:
            return {}
        a = self.s.a
        out = {}
        for k, name in enumerate(["cycle", *self.order]):
            with_ = self.kept[name]
            without = [row[k] for row in self.nocomm]
            diffs = []
            for b in range(math.ceil(a.cycles / a.block)):
                wi, wo = with_[b * a.block : (b + 1) * a.block], without[b * a.block : (b + 1) * a.block]
                if wi and wo:
                    diffs.append(summary(wi)["median"] - summary(wo)["median"])
            w_med, wo_med = summary(with_)["median"], summary(without)["median"]
            comm_ms = summary(diffs)["median"] if diffs else w_med - wo_med
            out[name] = {"with_ms": round(w_med, 5), "without_ms": round(wo_med, 5), "comm_ms": round(comm_ms, 5),
                         "share": round(comm_ms / w_med, 4) if w_med > 0 else None, "pairs": len(diffs)}  # fmt: skip
        return out


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
