"""The spec-decode probe script itself: its JSON-lines protocol, phase structure, test hooks and model.

The probe runs for real (torch on CPU, float32); the model pieces are checked against references.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from probe_helpers import PROBES, ROOT, TINY, run_probe_script

sys.path.insert(0, str(PROBES))

import _presets  # noqa: E402

SLOW_MS = 40.0


@pytest.fixture(scope="module")
def plain():
    out = run_probe_script("spec_decode", *TINY, "--naive-timer")
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.mark.slow
def test_protocol_header_cycles_footer(plain):
    kinds = [ln["type"] for ln in plain.lines]
    assert kinds[0] == "header" and kinds[-2:] == ["footer", "teardown"]
    assert set(kinds) == {"header", "cycle", "footer", "teardown"}
    assert plain.of("teardown")[0]["forced"] is False  # the ranks left on their own after the footer
    h = plain.header
    assert h["protocol"] == 1 and h["probe"] == "spec-decode" and h["version"] == "1"
    assert h["config"]["preset"] == "tiny" and h["config"]["context"] == 64 and h["config"]["tp"] == 1
    assert h["primary"] == "cycle" and h["phases"] == ["draft", "verify", "extend"]
    assert h["units"] == {"cycle": "ms", "draft": "ms", "verify": "ms", "extend": "ms",
                          "experts_verify": "experts", "accept_len": "tokens/step"}  # fmt: skip
    assert h["better"] == {"cycle": "lower", "draft": "lower", "verify": "lower", "extend": "lower",
                           "experts_verify": "context", "accept_len": "higher"}  # fmt: skip
    assert h["timer"] == "perf_counter" and h["device"]["type"] == "cpu"
    assert h["accept_len_simulated"] is True and "simulated" in h["labels"]["accept_len"]
    assert h["torch"] and h["python"] and h["threads"] == 1
    # As SGLang issues them: the embedding all-reduce, two per layer, the logits all-gather (2L + 2).
    assert h["model"]["collectives_per_phase"]["verify"] == 2 * 4 + 2
    assert h["model"]["collectives_per_phase"]["draft"] == 4  # llama_eagle3: embedding, o_proj, MLP, logits
    assert h["graphs"] == {"draft": False, "verify": False, "extend": False}
    assert h["supervisor"]["env_defaults_applied"] or h["env"].get("NCCL_NVLS_ENABLE") == "0"
    assert h["env"]["NCCL_NVLS_ENABLE"] == "0" and h["env"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"

    cycles = plain.of("cycle")
    assert sum(1 for c in cycles if c.get("warmup")) == 2
    assert sum(1 for c in cycles if c.get("bare")) == 6
    measured = plain.measured()
    assert len(measured) == 6
    for c in measured:
        assert set(c["t"]) == {"cycle", "draft", "verify", "extend"}
        assert set(c["naive"]) == {"cycle", "draft", "verify", "extend"}
        assert c["accept_len_simulated"] is True
        assert 1 <= c["values"]["accept_len"] <= 3
        assert 1 <= c["values"]["experts_verify"] <= 16  # unique experts per MoE layer for 3 tokens
    f = plain.footer
    assert f["warmup_dropped"] == 2 and f["cycles"] == 6 and f["bare_cycles"] == 6
    assert set(f["summary"]) == {"cycle", "draft", "verify", "extend"}
    assert {"instrumented_median_ms", "bare_median_ms", "pct", "unpaired_pct", "pairs"} <= set(f["overhead"])
    assert f["scalars"]["accept_len_simulated"] is True and f["scalars"]["tok_s_simulated"] is True
    assert f["clocks"] == []  # no GPU here: nothing sampled, and the header says why
    assert h["supervisor"]["clock_sampler"] != "nvml"
    progress = [ln for ln in plain.stderr.splitlines() if ln.startswith("regdiag-progress ")]
    assert any('"stage":"measure"' in p for p in progress)


@pytest.mark.slow
def test_phases_partition_the_cycle(plain):
    # One rank: each phase is a slice of the cycle, and only the input copy lies outside the phases.
    gaps = []
    for c in plain.measured():
        t = c["t"]
        parts = t["draft"] + t["verify"] + t["extend"]
        assert parts <= t["cycle"] + 1e-3
        gaps.append((t["cycle"] - parts) / t["cycle"])
    assert sorted(gaps)[len(gaps) // 2] < 0.05
    assert plain.footer["fidelity"]["phase_sum_gap_pct"]["median"] < 5


@pytest.mark.slow
def test_a_slowed_phase_shows_up_in_that_phase_only(plain):
    # Half by the flag, half by the environment variable: the two add up.
    half = f"verify:{SLOW_MS / 2}"
    slow = run_probe_script("spec_decode", *TINY, "--slow-phase", half, env={"REGDIAG_PROBE_SLOW": half})
    assert slow.returncode == 0, slow.stderr[-3000:]
    assert slow.header["hooks"]["slow_ms"] == {"verify": SLOW_MS}
    assert min(c["t"]["verify"] for c in slow.measured()) >= SLOW_MS
    # Minima, not medians: this CPU is shared, and a busy neighbour inflates a run's median, never its best
    # cycle. The added work is a fixed wall time, so the best verify moves by it and nothing else does.
    d_verify = slow.min("verify") - plain.min("verify")
    assert 0.75 * SLOW_MS < d_verify < 1.5 * SLOW_MS
    for other in ("draft", "extend"):
        assert abs(slow.min(other) - plain.min(other)) < 0.5 * SLOW_MS


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--tp", "3"], "not divisible"),
        (["--num-draft-tokens", "5"], "num-steps + 1"),
        (["--accept-mean", "9"], "--accept-mean"),
        (["--slow-phase", "decode:1"], "phase must be one of draft, verify, extend"),
        (["--crash-rank", "4"], "not a rank"),
        (["--preset", "gpt-5"], "invalid choice"),
    ],
)
def test_bad_arguments_give_one_usage_line(args, needle):
    out = (
        run_probe_script("spec_decode", "--preset", "tiny", *args)
        if "--preset" not in args
        else run_probe_script("spec_decode", *args)
    )
    assert out.returncode == 2
    assert len(out.lines) == 1 and out.lines[0]["type"] == "error" and out.lines[0]["kind"] == "usage"
    assert needle in out.lines[0]["message"]


# ------------------------------------------------------------------------------ the model, in-process


def test_moe_reads_only_routed_experts_and_matches_a_dense_reference():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from _spec_model import Comm, Init, MoE

    torch.manual_seed(1)
    s = _presets.resolve_shape("tiny", None, 1)
    moe = MoE(s, Init(torch.device("cpu"), torch.float32), Comm(None, 1), "loop")
    x = torch.randn(7, s.hidden)
    counts = torch.zeros(s.experts, dtype=torch.int32)
    y_loop = moe(x, counts)
    idx, w = moe.route(x)
    ref = torch.zeros(7, s.hidden, dtype=torch.float64)
    ml = s.moe_inter
    for t in range(7):
        for j in range(s.topk):
            e = int(idx[t, j])
            h = x[t].double() @ moe.w13[e].double().T
            ref[t] += w[t, j].double() * ((F.silu(h[:ml]) * h[ml:]) @ moe.w2[e].double().T)
    hs = x.double() @ moe.s13.double().T
    ref += (F.silu(hs[:, :ml]) * hs[:, ml:]) @ moe.s2.double().T
    assert float((y_loop.double() - ref).norm() / ref.norm()) < 1e-5
    assert int(counts.sum()) == 7 * s.topk and set(counts.nonzero().flatten().tolist()) == set(
        idx.flatten().tolist()
    )
    if not hasattr(torch, "_grouped_mm"):
        return
    moe.impl = "grouped_mm"  # the CUDA path (counting sort + offsets), run here on CPU
    counts2 = torch.zeros_like(counts)
    y_g = moe(x, counts2)
    assert torch.equal(counts, counts2)
    assert float((y_g.double() - ref).norm() / ref.norm()) < 1e-5


def test_simulated_accept_length_has_the_stated_mean():
    torch = pytest.importorskip("torch")
    from _spec_model import simulate_accept_len
    from spec_decode import accept_alpha

    gen = torch.Generator().manual_seed(0)
    for mean in (1.0, 2.0, 2.7):
        a = simulate_accept_len(20000, 1, 3, accept_alpha(mean, 3), gen)
        assert a.min() >= 1 and a.max() <= 3
        assert abs(float(a.float().mean()) - mean) < 0.03


def test_expert_touch_prediction():
    s = _presets.resolve_shape("kimi-k2", 4, 8)
    assert s.expected_unique(1) == pytest.approx(8)
    assert s.expected_unique(3) == pytest.approx(384 * (1 - (1 - 8 / 384) ** 3))
    assert s.expected_unique(10_000) == pytest.approx(384)


def test_presets_match_the_published_table_in_the_docs():
    from regdiag.measure.probes import presets

    assert presets() == ("auto", *_presets.PRESETS)
    text = (ROOT / "docs" / "probes.md").read_text(encoding="utf-8")
    fields = ["hidden", "layers", "heads", "q_lora", "kv_lora", "nope", "rope", "v_head", "experts", "shared",
              "topk", "moe_inter", "inter", "dense_layers", "vocab"]  # fmt: skip
    for name, p in _presets.PRESETS.items():
        row = re.search(rf"^\| `{re.escape(name)}` \|(.+)\|\s*$", text, re.M)
        assert row, f"docs/probes.md has no row for {name}"
        cells = [c.strip() for c in row.group(1).split("|")]
        assert [int(c.replace(",", "").replace("—", "0")) for c in cells[: len(fields)]] == [
            p[f] for f in fields
        ]


def test_tensor_parallel_shapes_are_checked():
    with pytest.raises(ValueError, match="not divisible"):
        _presets.resolve_shape("tiny", None, 3)
    s = _presets.resolve_shape("kimi-k2", None, 8, "bf16")
    b = s.layer_bytes(2)
    assert b["expert"] == 3 * 7168 * 256 * 2  # moe_intermediate 2048 / 8 ranks
    assert s.draft_kv_local == 8  # the trained Kimi EAGLE-3 drafts have 64 KV heads
    fp8 = _presets.resolve_shape("kimi-k2", None, 8).layer_bytes(2)  # the checkpoint's FP8 blocks
    assert fp8["expert"] == pytest.approx(3 * 7168 * 256 * (1 + 4 / 128**2))
    dsv3 = _presets.resolve_shape("deepseek-v3", None, 8)
    assert (dsv3.draft_heads, dsv3.draft_kv_heads, dsv3.draft_inter) == (56, 8, 40960)  # SpecForge's


@pytest.mark.slow
def test_the_mtp_draft_runs_and_issues_four_collectives_a_forward():
    out = run_probe_script("spec_decode", *TINY, "--draft", "mtp")
    assert out.returncode == 0, out.stderr[-3000:]
    m = out.header["model"]
    assert m["draft"] == "mtp" and m["aux_layers"] == [3] and "num_nextn_predict_layers" in m["draft_source"]
    assert m["collectives_per_phase"] == {"draft": 4, "verify": 2 * 4 + 2, "extend": 4}
    assert len(out.measured()) == 6
    bad = run_probe_script(
        "spec_decode", "--preset", "kimi-k2", "--layers", "2", "--draft", "mtp", "--device", "cpu"
    )
    assert bad.returncode == 2 and "no MTP layer" in bad.lines[0]["message"]


def test_probe_dir_has_no_regdiag_imports():
    for f in Path(PROBES).glob("*.py"):
        assert not re.search(r"^\s*(from|import) regdiag", f.read_text(encoding="utf-8"), re.M), f.name
