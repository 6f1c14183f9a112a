"""One rank of the spec-decode probe, set up: its device and process group, the preset and its shapes
(as many layers as fit when --layers is not given), the MoE implementation, and the device copy
bandwidth (the HBM floor's denominator). Part of the probe kit (probes/_spec_runner.py runs it)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any

import _presets
import torch
from _dist import init_dist, pick_device
from _lowbit import check_kernels, int4_chosen
from _protocol import Progress, UsageError, summary
from _spec_model import available_bytes, grouped_mm_available


def copy_bandwidth(device: torch.device, dtype: torch.dtype) -> float:
    """Device copy bandwidth in GB/s (bytes read + bytes written), the HBM floor's denominator."""
    n = (1 << 30) if device.type == "cuda" else (64 << 20)
    src = torch.empty(n // dtype.itemsize, dtype=dtype, device=device)
    src.fill_(1.0)  # a copy's speed does not depend on the values; random ones cost 0.1 s on a CPU
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
    lowbit: bool = False  # low-bit weights read by low-bit kernels (CUDA); else bytes modelled only
    int4_impl: str = "none"
    kernels: dict[str, str] | None = None  # each low-bit kernel's check at set-up: "ok" or its error
    lowbit_note: str = ""

    @property
    def elt(self) -> int:
        return torch.finfo(self.dtype).bits // 8

    @property
    def host_sync_moe(self) -> bool:
        """The MoE learns on the host which experts were hit: its phases cannot be graph-captured."""
        return self.moe_impl == "loop" or (self.lowbit and self.int4_impl == "int4pack")

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
    try:
        shape = _presets.resolve_shape(preset, a.layers, shard, a.weights, a.draft)
    except ValueError as e:
        raise UsageError(f"{preset}: {e}") from None
    if a.layers is None:
        # On CPU the weights are held in --dtype whatever their format: fit what is really allocated.
        held = shape if cuda else replace(shape, **dict.fromkeys(_presets.COMPONENTS, "base"))
        n = _layers_that_fit(held, device, dtype, a, ctx, preset)
        shape = _presets.resolve_shape(preset, n, shard, a.weights, a.draft)
    moe_impl = a.moe_impl if a.moe_impl != "auto" else ("grouped_mm" if cuda else "loop")
    if moe_impl == "grouped_mm" and not grouped_mm_available(device, dtype):
        raise UsageError(
            f"torch {torch.__version__} has no usable torch._grouped_mm on {device.type}; use --moe-impl loop"
        )
    low = _lowbit(shape, device, dtype, moe_impl)
    if low["fallback"]:
        shape = replace(shape, **low["fallback"])
    return Setup(
        **{k: v for k, v in low.items() if k != "fallback"},
        a=a,
        rank=rank,
        world=world,
        cuda=cuda,
        device=device,
        group=group,
        preset=preset,
        dtype=dtype,
        shard=shard,
        eagle=eagle,
        ctx=ctx,
        shape=shape,
        layers_auto=a.layers is None,
        moe_impl=moe_impl,
        copy_gbps=copy_gbps,
        t_rank0=t_rank0,
    )


def _lowbit(shape: Any, device: torch.device, dtype: torch.dtype, moe_impl: str) -> dict[str, Any]:
    """Whether low-bit kernels read the weights, which INT4 kernel, the kernels' checks, and the formats
    to drop back to the run's dtype where a kernel failed (the header says so)."""
    fmts = shape.formats()
    if all(v == "base" for v in fmts.values()):
        return {"lowbit": False, "int4_impl": "none", "kernels": None, "lowbit_note": "", "fallback": {}}
    if device.type != "cuda":
        note = f"weights computed in {str(dtype).split('.')[-1]} on CPU: only the low-bit formats' bytes are modelled"
        return {"lowbit": False, "int4_impl": "none", "kernels": None, "lowbit_note": note, "fallback": {}}
    if moe_impl == "loop":
        raise UsageError("low-bit weights need --moe-impl grouped_mm (the loop reads experts in --dtype)")
    kernels = check_kernels(device, dtype, fmts)
    fallback: dict[str, str] = {}
    failed = {k: v for k, v in kernels.items() if v != "ok"}
    if any(k.startswith("_scaled") for k in failed):
        fallback.update({c: "base" for c, v in fmts.items() if v.startswith("fp8")})
    impl = int4_chosen(kernels)
    if fmts.get("w_routed") == "int4_g32" and impl == "none":
        fallback["w_routed"] = "base"
    note = "low-bit kernels: " + ", ".join(f"{k} {v}" for k, v in kernels.items())
    if fallback:
        note += f"; fell back to {str(dtype).split('.')[-1]} for {', '.join(sorted(fallback))}"
    return {"lowbit": True, "int4_impl": impl, "kernels": kernels, "lowbit_note": note,
            "fallback": fallback}  # fmt: skip


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
