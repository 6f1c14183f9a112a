"""Low-bit weights of the spec-decode probe (probes/_lowbit.py) and the formats in its record.

On this CPU: torch._scaled_mm runs (FP8 with the layout the CUDA kernel takes: a column-major second
operand, float32 scales (M, 1) and (1, N)), the INT4 packing is checked against its own dequantization,
and the probe records that on CPU only the low-bit bytes are modelled. The grouped FP8 kernel and the
INT4 kernels run on CUDA only (bench/gpu_lowbit.sh); the Triton kernel also runs in Triton's interpreter
where triton is installed (TRITON_INTERPRET=1), and is skipped where it is not.
"""

from __future__ import annotations

import os
import sys

import pytest
from probe_helpers import PROBES, TINY, run_probe_script

sys.path.insert(0, str(PROBES))

import _lowbit  # noqa: E402
import _presets  # noqa: E402
import torch  # noqa: E402


def test_fp8_linear_matches_its_dequantized_weights():
    torch.manual_seed(0)
    m = _lowbit.Fp8Linear(64, 256, "cpu")
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    y = m(x)
    xq, xs = _lowbit.quantize_rows(x)
    ref = (xq.float() * xs) @ (m.w.float() * m.scale.view(-1, 1)).t()  # the same FP8 activations
    assert y.shape == (5, 64) and y.dtype == torch.bfloat16
    assert torch.allclose(y.float(), ref, rtol=1e-2, atol=1e-2)
    assert (y.float() - x.float() @ (m.w.float() * m.scale.view(-1, 1)).t()).abs().mean() < 0.05
    assert m.nbytes == 64 * 256 + 4 * 64


def test_int4_packing_round_trips_and_scales_per_group_of_32():
    q = torch.randint(0, 16, (3, 8, 64), dtype=torch.uint8)
    packed = _lowbit.pack_nibbles(q)
    assert packed.shape == (3, 8, 32) and packed.dtype == torch.uint8
    scales = torch.rand(3, 8, 2) + 0.5
    w = _lowbit.dequant_int4(packed, scales)
    assert torch.equal(w, (q.float() - 8) * scales.repeat_interleave(32, -1))


def test_int4_experts_read_each_slots_own_expert():
    m = _lowbit.Int4Experts(4, 16, 128, "cpu", torch.float32, "reference")
    x = torch.randn(3, 128)
    rows, experts = torch.tensor([0, 2, 2, 1]), torch.tensor([3, 3, 0, 1])
    y = m(x, rows, experts)
    w = _lowbit.dequant_int4(m.w, m.scales)
    for s in range(4):
        assert torch.allclose(y[s], w[experts[s]] @ x[rows[s]], atol=1e-4)
    assert m.nbytes == 4 * 16 * 128 // 2 + 4 * 16 * 4 * 4  # nibbles + one float32 scale per 32 here


@pytest.mark.skipif(_lowbit.triton is None, reason="triton is not installed (CUDA builds of torch ship it)")
def test_the_triton_int4_kernel_matches_the_reference_in_the_interpreter():
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 on a machine without a GPU")
    m = _lowbit.Int4Experts(3, 96, 256, "cpu", torch.float32, "triton")
    m.scales.uniform_(0.01, 0.05)
    x = torch.randn(2, 256)
    rows, experts = torch.tensor([0, 1, 1]), torch.tensor([2, 0, 2])
    y = m(x, rows, experts)
    m.impl = "reference"
    assert torch.allclose(y, m(x, rows, experts), atol=1e-4)


def test_weight_formats_of_the_presets():
    assert _presets.weight_formats("kimi-k2.5")["w_routed"] == "int4_g32"
    assert _presets.weight_formats("kimi-k2.5")["w_shared"] == "base"
    assert _presets.weight_formats("deepseek-v3")["w_attn"] == "fp8_block128"
    assert set(_presets.weight_formats("kimi-k2", "bf16").values()) == {"base"}
    assert _presets.weight_formats("tiny", "int4")["w_routed"] == "int4_g32"
    with pytest.raises(ValueError, match="unknown weights"):
        _presets.weight_formats("tiny", "nf4")


@pytest.mark.slow
def test_on_cpu_the_probe_models_the_int4_bytes_and_says_so():
    out = run_probe_script("spec_decode", *TINY, "--weights", "int4")
    assert out.returncode == 0, out.stderr[-3000:]
    h = out.header
    w = h["model"]["weights"]
    assert h["config"]["weights"] == "int4" and w["formats"]["w_routed"] == "int4_g32"
    assert w["low_bit_kernels"] is False and "only the low-bit formats' bytes are modelled" in w["note"]
    assert h["model"]["shape"]["w_routed"] == "int4_g32"
    sc = out.footer["scalars"]
    int4 = _presets.resolve_shape("tiny", None, 1, "int4").target_breakdown(
        3, 1, 67, 4, sc["experts_verify_mean"]
    )
    fp32 = _presets.resolve_shape("tiny", None, 1, "bf16").target_breakdown(
        3, 1, 67, 4, sc["experts_verify_mean"]
    )
    # The floor prices the routed experts at 4.5 bits a weight, the rest in the run's float32.
    assert int4["routed_experts"] == pytest.approx(fp32["routed_experts"] * (0.5 + 2 / 32) / 4)
    assert sc["bytes_verify"] == pytest.approx(sum(int4.values()), rel=1e-3)


def test_the_probe_refuses_an_unknown_weight_format():
    out = run_probe_script("spec_decode", *TINY, "--weights", "nf4")
    assert out.returncode == 2 and "--weights" in out.stderr
