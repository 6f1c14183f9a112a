"""Low-bit weights of the spec-decode probe (`--weights preset|fp8|int4`): what the checkpoints store,
read by the low-bit kernels torch has on Hopper. Part of the probe kit (stdlib + torch; Triton when
torch ships it).

- FP8 e4m3 (DeepSeek-V3, Kimi-K2): dense weights through `torch._scaled_mm`, routed experts through
  `torch._scaled_grouped_mm`, activations quantized per row on the fly (amax / 448), weights with one
  float32 scale per output row. The checkpoints' 128x128 block scales are 1/16384 of the bytes; the
  rowwise kernel reads the same FP8 weight bytes, so the byte floor (which prices the block scales) and
  the reads agree.
- INT4 W4A16, group 32, symmetric (Kimi-K2.5's routed experts): torch has no grouped INT4 kernel.
  `triton`: one Triton program per (token, expert) pair and block of outputs, reading only that
  expert's packed nibbles and bf16 group scales (no host sync: captured in a CUDA graph);
  `int4pack`: `torch._weight_int4pack_mm` per expert that was hit (a host sync learns which: eager).
- On CPU no low-bit kernel runs: the weights stay in the run's dtype and only their bytes are modelled
  (the header says so).

Weights are random: FP8 values drawn N(0, 1) then cast (never zeros), INT4 nibbles uniform in 0..15.
"""

from __future__ import annotations

from typing import Any

import torch

FP8 = getattr(torch, "float8_e4m3fn", None)
FP8_MAX = 448.0
GROUP = 32  # INT4 group size (Kimi-K2.5's compressed-tensors group_size)

try:  # Triton ships with CUDA builds of torch; a CPU build has none
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the torch build
    triton = None  # type: ignore[assignment]
    tl = None  # type: ignore[assignment]


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8, scale) with x ~= x_fp8 * scale[:, None]: dynamic per-row activation quantization."""
    xf = x.float()
    scale = xf.abs().amax(-1, keepdim=True).clamp_(min=1e-12) / FP8_MAX
    return (xf / scale).to(FP8), scale


class Fp8Linear:
    """y = x @ W^T with W (N, K) in FP8 e4m3 and a float32 scale per output row."""

    def __init__(self, n: int, k: int, device: Any, fan_in: int | None = None) -> None:
        self.w = torch.randn(n, k, device=device).clamp_(-FP8_MAX, FP8_MAX).to(FP8)
        self.scale = torch.full((1, n), (fan_in or k) ** -0.5, device=device, dtype=torch.float32)
        self.nbytes = n * k + 4 * n

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        xq, xs = quantize_rows(x.contiguous())
        # b must be column-major: the transpose of a row-major (N, K) weight is (K, N) column-major.
        return torch._scaled_mm(xq, self.w.t(), scale_a=xs, scale_b=self.scale, out_dtype=x.dtype,
                                use_fast_accum=True)  # fmt: skip


class Fp8Experts:
    """E experts' (N, K) weights in FP8, one float32 scale per expert and output row; rows sorted by
    expert with group offsets, as torch._grouped_mm takes them."""

    def __init__(self, e: int, n: int, k: int, device: Any) -> None:
        self.w = torch.randn(e, n, k, device=device).clamp_(-FP8_MAX, FP8_MAX).to(FP8)
        self.scale = torch.full((e, n), k**-0.5, device=device, dtype=torch.float32)
        self.nbytes = e * n * k + 4 * e * n

    def __call__(self, xs: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        xq, sc = quantize_rows(xs.contiguous())
        return torch._scaled_grouped_mm(xq, self.w.transpose(1, 2), scale_a=sc.view(-1), scale_b=self.scale,
                                        offs=offs, out_dtype=out_dtype, use_fast_accum=True)  # fmt: skip


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """(..., K) values 0..15 -> (..., K/2) uint8: element 2j in the low nibble, 2j+1 in the high."""
    return (q[..., 0::2] | (q[..., 1::2] << 4)).to(torch.uint8)


def dequant_int4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The reference: (..., N, K/2) nibbles and (..., N, K/32) scales -> (..., N, K) float32 weights,
    symmetric: (q - 8) * scale."""
    lo = (packed & 0xF).float() - 8
    hi = (packed >> 4).float() - 8
    q = torch.stack([lo, hi], -1).flatten(-2)
    return q * scales.float().repeat_interleave(GROUP, -1)


class Int4Experts:
    """E experts' (N, K) weights as INT4 (group 32, symmetric, bf16 scales), read per (token, expert) pair."""

    def __init__(self, e: int, n: int, k: int, device: Any, dtype: torch.dtype, impl: str) -> None:
        if k % 128:
            raise ValueError(f"INT4 experts need K divisible by 128 (got {k})")
        self.e, self.n, self.k, self.impl = e, n, k, impl
        q = torch.randint(0, 16, (e, n, k), device=device, dtype=torch.uint8)
        self.scales = torch.full((e, n, k // GROUP), (k**-0.5) / 4, device=device, dtype=dtype)
        self.nbytes = e * n * k // 2 + e * n * (k // GROUP) * self.scales.element_size()
        if impl == "int4pack":  # tinygemm's layout: packed per expert, scales_and_zeros (K/32, N, 2)
            self.packed = [torch._convert_weight_to_int4pack(pack_nibbles(q[i]), 8) for i in range(e)]
            sz = torch.zeros(k // GROUP, n, 2, device=device, dtype=dtype)
            sz[..., 0] = (k**-0.5) / 4
            self.sz = sz
        else:
            self.w = pack_nibbles(q).contiguous()  # (E, N, K/2)
        del q

    def __call__(self, x: torch.Tensor, rows: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """(S, N): slot s = x[rows[s]] @ W[experts[s]]^T."""
        if self.impl == "int4pack":
            return self._int4pack(x, rows, experts)
        if self.impl == "reference":
            w = dequant_int4(self.w.index_select(0, experts), self.scales.index_select(0, experts))
            return torch.bmm(w, x.index_select(0, rows).float().unsqueeze(-1)).squeeze(-1).to(x.dtype)
        out = torch.empty(rows.numel(), self.n, device=x.device, dtype=x.dtype)
        grid = (rows.numel(), triton.cdiv(self.n, 64))
        _w4a16_slots[grid](
            x, rows, experts, self.w, self.scales, out, self.n, self.k,
            x.stride(0), self.w.stride(0), self.w.stride(1), self.scales.stride(0), self.scales.stride(1),
            out.stride(0), BN=64, BKH=64, num_warps=4,
        )  # fmt: skip
        return out

    def _int4pack(self, x: torch.Tensor, rows: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        out = torch.empty(rows.numel(), self.n, device=x.device, dtype=x.dtype)
        ex = experts.tolist()  # the host sync: which experts were hit
        for e in sorted(set(ex)):
            idx = torch.tensor([i for i, v in enumerate(ex) if v == e], device=x.device)
            xs = x.index_select(0, rows.index_select(0, idx)).contiguous()
            out.index_copy_(0, idx, torch._weight_int4pack_mm(xs, self.packed[e], GROUP, self.sz))
        return out


if triton is not None:

    @triton.jit
    def _w4a16_slots(
        x_ptr, row_ptr, exp_ptr, w_ptr, s_ptr, o_ptr, N, K,
        stride_xm, stride_we, stride_wn, stride_se, stride_sn, stride_om,
        BN: tl.constexpr, BKH: tl.constexpr,
    ):  # fmt: skip
        """One (slot, block of BN outputs): BKH packed bytes (2*BKH weights) of K per step."""
        s = tl.program_id(0)
        pn = tl.program_id(1)
        row = tl.load(row_ptr + s)
        e = tl.load(exp_ptr + s)
        offs_n = pn * BN + tl.arange(0, BN)
        nmask = offs_n < N
        j = tl.arange(0, BKH)
        acc = tl.zeros([BN], dtype=tl.float32)
        w_base = w_ptr + e * stride_we + offs_n[:, None] * stride_wn
        s_base = s_ptr + e * stride_se + offs_n[:, None] * stride_sn
        x_base = x_ptr + row * stride_xm
        for it in range(0, K // (2 * BKH)):
            kb = it * BKH + j  # packed byte index along K
            w = tl.load(w_base + kb[None, :], mask=nmask[:, None], other=0)
            lo = (w & 0xF).to(tl.float32) - 8.0
            hi = (w >> 4).to(tl.float32) - 8.0
            xe = tl.load(x_base + 2 * kb).to(tl.float32)
            xo = tl.load(x_base + 2 * kb + 1).to(tl.float32)
            sc = tl.load(s_base + (2 * kb // 32)[None, :], mask=nmask[:, None], other=0.0).to(tl.float32)
            acc += tl.sum((lo * xe[None, :] + hi * xo[None, :]) * sc, axis=1)
        tl.store(o_ptr + s * stride_om + offs_n, acc.to(o_ptr.dtype.element_ty), mask=nmask)


def int4_impl(cuda: bool) -> str:
    """The INT4 expert kernel this torch can run: triton (graph-capturable) or int4pack (eager)."""
    if not cuda:
        return "none"
    return "triton" if triton is not None else "int4pack"


def check_kernels(device: Any, dtype: torch.dtype, fmts: dict[str, str]) -> dict[str, str]:
    """Run each low-bit kernel the formats need once on small shapes; {kernel: "ok" | error}. On CPU:
    {} (nothing runs low-bit there)."""
    if device.type != "cuda":
        return {}
    out: dict[str, str] = {}
    x = torch.randn(3, 256, device=device, dtype=dtype)
    if any(v.startswith("fp8") for v in fmts.values()):
        out["_scaled_mm"] = _try(lambda: Fp8Linear(128, 256, device)(x))
        offs = torch.tensor([1, 1, 3], device=device, dtype=torch.int32)  # an empty group among them
        out["_scaled_grouped_mm"] = _try(lambda: Fp8Experts(3, 128, 256, device)(x, offs, dtype))
    if fmts.get("w_routed") == "int4_g32":
        rows = torch.tensor([0, 2, 1], device=device)
        ex = torch.tensor([1, 0, 1], device=device)
        for impl in ("triton", "int4pack") if int4_impl(True) == "triton" else ("int4pack",):
            out[impl] = _try(lambda impl=impl: Int4Experts(2, 128, 256, device, dtype, impl)(x, rows, ex))
            if out[impl] == "ok":
                break  # the first INT4 kernel that runs is the one used
    return out


def int4_chosen(kernels: dict[str, str]) -> str:
    """The INT4 kernel check_kernels found running ("none" when neither did)."""
    return next((k for k in ("triton", "int4pack") if kernels.get(k) == "ok"), "none")


def _try(fn: Any) -> str:
    try:
        fn()
        torch.cuda.synchronize()
        return "ok"
    except Exception as e:  # the record says which kernel failed and why
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
