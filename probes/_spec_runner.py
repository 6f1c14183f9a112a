"""One rank of the spec-decode probe: set up (_spec_setup.py), build the model and its graphs, time
cycles, gather, report (rank 0, _spec_report.py).

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

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import _presets
import torch
from _canary import COLUMNS, Canary
from _dist import barrier, device_info, max_over_ranks, nccl_version, teardown
from _hooks import hang_here
from _profile import plant_extra_op, plant_host_slow, run_profiled
from _protocol import Emitter, Progress
from _spec_model import MTP, Comm, Draft, Init, Pos, Target, rope_tables, simulate_accept_len
from _spec_report import Report
from _spec_setup import Setup, setup


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


def _slow(hooks: dict[str, Any], cuda: bool) -> dict[str, Callable[[], None]]:
    """The --slow-phase hook: per phase, MS of busy work (a spinning kernel on CUDA, the host on CPU)."""
    return {
        ph: (_gpu_sleep_ms(ms) if cuda else _spin_ms(ms)) for ph, ms in hooks["slow_ms"].items() if ms > 0
    }


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


def _eagle_fns(s: Setup, target: Target, draft: Any, inp: torch.Tensor) -> dict[str, Callable[[], None]]:
    a, shape, device, dtype = s.a, s.shape, s.device, s.dtype
    ndt, steps, batch, ctx = a.num_draft_tokens, a.num_steps, a.batch, s.ctx
    n_pos = ctx + ndt + steps + 1
    cos_t, sin_t = rope_tables(shape.rope, n_pos, shape.rope_theta, device, dtype)
    mtp = shape.draft == "mtp"  # the MTP layer's MLA ropes like the target's
    cos_d, sin_d = (
        (cos_t, sin_t) if mtp else rope_tables(shape.draft_head_dim, n_pos, shape.rope_theta, device, dtype)
    )
    tok_in = inp[: batch * ndt].view(batch, ndt)
    acc_idx = inp[batch * ndt :]
    pos_verify = Pos(ctx, ndt, batch, cos_t, sin_t)
    pos_ext = Pos(ctx, ndt, batch, cos_d, sin_d)
    pos_draft = [Pos(ctx + ndt + j, 1, batch, cos_d, sin_d) for j in range(steps - 1)]
    aux = torch.zeros(batch * ndt, len(shape.aux_layers()) * shape.hidden, dtype=dtype, device=device)
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
        ids, hid = draft(tok_in, draft.hidden_in(aux), pos_ext)
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


def build(s: Setup, progress: Progress, hooks: dict[str, Any] | None = None) -> Model:
    a, shape = s.a, s.shape
    t_build = time.time()
    torch.manual_seed(a.seed * 7919 + s.rank)
    comm = Comm(s.group, s.world)
    init = Init(s.device, s.dtype, s.lowbit, s.int4_impl)
    ndt, steps, batch = a.num_draft_tokens, a.num_steps, a.batch
    target = Target(
        shape,
        init,
        comm,
        batch,
        slots=s.ctx + s.t_in,
        moe_impl=s.moe_impl,
        on_layer=lambda i, n: progress("build", i, n),
    )
    # One static input buffer per cycle: the tokens (batch x t_in) then the accept index per sequence,
    # refreshed by a single device-to-device copy at the start of each cycle (the cycle's "other" time).
    inp = torch.zeros(batch * s.t_in + batch, dtype=torch.long, device=s.device)
    if s.eagle:
        slots = s.ctx + ndt + steps
        draft: Any = (
            MTP(shape, init, comm, batch, slots, target)
            if shape.draft == "mtp"
            else Draft(shape, init, comm, batch, slots, target.embed)
        )
        fns = _eagle_fns(s, target, draft, inp)
    else:
        fns = _decode_fns(s, target, inp)
    plant_extra_op(fns, (hooks or {}).get("extra_op") or {}, s.device, s.dtype)
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
        moe_phase = ph in ("verify", "decode") or s.shape.draft == "mtp"  # the MTP draft has a MoE too
        if use_graph and moe_phase and s.host_sync_moe:
            use_graph = False  # the loop syncs the host to learn which experts were hit
        m.graphs[ph] = use_graph
        m.runners[ph] = _capture(fn, pool) if use_graph else fn
        if s.comm_off:
            m.runners_nocomm[ph] = _without_comm(comm, fn, pool if use_graph else None)
        progress("capture", len(m.runners), len(fns))
    _sync(s.cuda)
    for ph, ms in ((hooks or {}).get("host_slow_ms") or {}).items():
        if ms > 0 and ph in m.runners:
            m.runners[ph] = plant_host_slow(m.runners[ph], ms, m.graphs[ph])
            if ph in m.runners_nocomm:
                m.runners_nocomm[ph] = plant_host_slow(m.runners_nocomm[ph], ms, m.graphs[ph])
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
        "dtype": str(s.dtype).split(".")[-1], "moe_impl": s.moe_impl, "seed": a.seed, "weights": a.weights,
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
            "draft": shape.draft,
            "draft_source": _presets.MTP_SOURCE if shape.draft == "mtp" else _presets.DRAFT_SOURCES[s.preset],
            "weight_bytes_rank": m.init.bytes, "aux_layers": shape.aux_layers() if eagle else None,
            "collectives_per_phase": {ph: sum(c["count"] for c in t) for ph, t in m.collectives.items()},
            "collectives": m.collectives,
            "collectives_issued": s.world > 1,
            "expected_unique_experts": {s.target_phase: round(shape.expected_unique(t_tok), 3)},
            "target_tokens": {s.target_phase: t_tok},
            "mla": "absorbed (W_UK into q, W_UV after attention) over a latent cache of kv_lora+rope",
            "moe": s.moe_impl, "lm_head": "vocabulary sharded, logits all-gathered",
            "embedding": "vocabulary sharded, all-reduced (VocabParallelEmbedding)",
            "weights": {"formats": shape.formats(), "kernels": s.kernels, "int4": s.int4_impl if s.lowbit else None,
                        "low_bit_kernels": s.lowbit, "note": s.lowbit_note},
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


def nvtx_ranges(cuda: bool) -> Any:
    """torch.cuda.nvtx where the cycles run on CUDA and REGDIAG_NVTX is not 0, else None: the one
    check, made once per launch; a CPU run, or a torch without NVTX, pushes nothing."""
    if not cuda or os.environ.get("REGDIAG_NVTX", "1") == "0":
        return None
    nvtx = getattr(torch.cuda, "nvtx", None)
    return nvtx if nvtx is not None and hasattr(nvtx, "range_push") else None


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
    canary: Canary | None = None  # the host's speed before, between and after the cycles (_canary.py)


def measure(s: Setup, m: Model, hooks: dict[str, Any], inputs: torch.Tensor, progress: Progress) -> Measured:
    a, cuda = s.a, s.cuda
    order = list(m.fns)
    slow = _slow(hooks, cuda)
    crash = hooks["crash"]
    crash_here = crash is not None and crash[0] == s.rank and crash[1] == a.launch_index
    out = Measured(make_schedule(a.warmup, a.cycles, a.block, s.comm_off))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(order) + 3)] if cuda else []
    nvtx = nvtx_ranges(cuda)
    progress("measure", 0, len(out.schedule), force=True)
    barrier(s.group, s.world, s.device)
    hang_here(hooks.get("hang"), s.rank, "measure")
    out.canary = Canary(cuda)
    out.canary.take("before")
    out.t_measure = time.time()
    for ci, kind in enumerate(out.schedule):
        if ci == len(out.schedule) // 2:
            out.canary.take("between")
        if crash_here and kind != "w":
            sys.stderr.write(
                f"rank {s.rank}: crashing on purpose (test hook --crash-rank) in launch {a.launch_index}\n"
            )
            sys.stderr.flush()
            os._exit(17)
        runners = m.runners_nocomm if kind == "n" else m.runners
        row, naive = _one_cycle(
            order, runners, slow, ev, m.inp, inputs[ci], inst=kind != "b", cuda=cuda, nvtx=nvtx
        )
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
    out.canary.take("after")
    return out


def _one_cycle(
    order: list[str],
    runners: dict[str, Callable[[], None]],
    slow: dict[str, Callable[[], None]],
    ev: list[Any],
    inp: torch.Tensor,
    cycle_inputs: torch.Tensor,
    inst: bool,
    cuda: bool,
    nvtx: Any = None,
) -> tuple[list[float], list[float]]:
    """One cycle: [cycle, phase...] in ms (phases only when instrumented) and the naive perf_counter times.

    `nvtx` (nvtx_ranges): an instrumented cycle on CUDA is an NVTX range "cycle" holding one range per
    phase, named after it, so `nsys profile` timelines show draft, verify and extend; bare cycles push
    nothing, so what the ranges cost is inside the probe overhead the bare cycles measure."""
    tw0 = time.perf_counter()
    if cuda:
        ev[0].record()
    inp.copy_(cycle_inputs)
    marks = [0.0] * (len(order) + 1)
    if inst:
        if cuda:
            ev[1].record()
        marks[0] = time.perf_counter()
    nv = nvtx if inst else None
    if nv is not None:
        nv.range_push("cycle")
    for k, ph in enumerate(order):
        if nv is not None:
            nv.range_push(ph)
        runners[ph]()
        if ph in slow:
            slow[ph]()
        if nv is not None:
            nv.range_pop()
        if inst:
            if cuda:
                ev[2 + k].record()
            marks[k + 1] = time.perf_counter()
    if nv is not None:
        nv.range_pop()
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


def profile(
    s: Setup, m: Model, hooks: dict[str, Any], inputs: torch.Tensor, got: Measured, progress: Progress
) -> dict[str, Any] | None:
    """--profile: --profile-cycles N instrumented cycles after the measured window, under torch.profiler
    on rank 0 (probes/_profile.py); the other ranks run the same cycles unprofiled. None on ranks other
    than 0."""
    order, cuda, n = list(m.fns), s.cuda, s.a.profile_cycles
    slow = _slow(hooks, cuda)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(order) + 3)] if cuda else []
    measured = [i for i, k in enumerate(got.schedule) if k == "i"] or [0]
    done = [0]

    def one(ranges: Any) -> list[float]:
        ci = measured[done[0] % len(measured)]
        row, _ = _one_cycle(order, m.runners, slow, ev, m.inp, inputs[ci], inst=True, cuda=cuda, nvtx=ranges)
        done[0] += 1
        progress("profile", done[0], n)
        return row

    progress("profile", 0, n, force=True)
    barrier(s.group, s.world, s.device)
    if s.rank != 0:
        for _ in range(n):
            one(None)
        return None
    cyc = sorted(r[0] for r in got.rows[s.a.warmup :]) or [0.0]
    trace = s.a.profile_trace
    return run_profiled(n, cuda, one, order, trace, round(cyc[len(cyc) // 2], 5))


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
    m = build(s, progress, hooks)
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
    prof = profile(s, m, hooks, inputs, got, progress) if a.profile else None
    progress("gather", force=True)
    order = list(m.fns)
    n_cols = 1 + len(order) + ((len(order) + 1) if a.naive_timer else 0)
    rows = max_over_ranks(got.rows, n_cols, s.group, s.world, s.device)
    bare = [r[0] for r in max_over_ranks([[x] for x in got.bare], 1, s.group, s.world, s.device)]
    nocomm = max_over_ranks(got.nocomm, 1 + len(order), s.group, s.world, s.device)
    assert got.canary is not None
    canary = got.canary.record(max_over_ranks(got.canary.rows, len(COLUMNS), s.group, s.world, s.device))
    if s.rank == 0:
        t0 = a._t0 or s.t_rank0
        report = Report(
            s=s,
            order=order,
            schedule=got.schedule,
            rows=rows,
            bare=bare,
            nocomm=nocomm,
            experts=got.experts,
            acc_len=acc_len,
            window=(got.t_measure - t0, got.t_end - t0),
            canary=canary,
        )
        report.emit(prof)
    progress("teardown", force=True)
    hang_here(hooks.get("hang"), s.rank, "teardown")
    teardown(s.world, s.cuda, release=m.release)
