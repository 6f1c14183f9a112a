"""What the engine did, not what it was asked: each fact read from log lines quoted verbatim from
upstream threads (tests/data/engine_lines_upstream.txt names where each line's format comes from)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from regdiag.compare import compare_runs
from regdiag.hosts.local import LocalHost
from regdiag.server import metrics
from regdiag.server.engine_config import EngineConfigReader
from regdiag.server.launch import ServerProcess
from tests.compare_helpers import launch, run_record

DATA = Path(__file__).resolve().parent / "data"
SGL_ARGS = "server_args=ServerArgs(tp_size=3, disable_custom_all_reduce=False, disable_cuda_graph=False)"


def sections() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    name = None
    for line in (DATA / "engine_lines_upstream.txt").read_text().splitlines():
        if line.startswith("## "):
            name = line[3:].split("|")[0].strip()
            out[name] = []
        elif name and line.strip() and not line.startswith("#"):
            out[name].append(line)
    return out


def read(*names: str, extra: tuple[str, ...] = ()) -> dict:
    s = sections()
    r = EngineConfigReader()
    for line in [*extra, *(ln for n in names for ln in s[n])]:
        r.feed(line)
    cfg = r.result()
    assert cfg is not None
    return cfg


def test_sglang_custom_all_reduce_refused_on_pcie_is_nccl_over_p2p_ipc():
    cfg = read("sglang-pcie-refused", "nccl-p2p-ipc", extra=(SGL_ARGS,))
    assert cfg["engine"] == "sglang"
    assert cfg["all_reduce"] == "nccl via P2P/IPC"  # what ran
    assert cfg["all_reduce_asked"] == "custom"  # what disable_custom_all_reduce=False asked for
    assert cfg["all_reduce_refused"] == "it's not supported on more than two PCIe-only GPUs"
    assert cfg["nccl"]["transports"] == ["P2P/IPC"]
    # without the refusal, the settings' answer stands
    assert read(extra=(SGL_ARGS,))["all_reduce"] == "custom"


@pytest.mark.parametrize(
    ("section", "backend", "quant"),
    [
        ("vllm-moe-fp8", "FLASHINFER_CUTLASS", "Fp8"),
        ("vllm-moe-nvfp4", "MARLIN", "NvFp4"),
        ("vllm-moe-wna16", "MARLIN", "WNA16"),
    ],
)
def test_every_form_of_vllms_moe_backend_line(section, backend, quant):
    cfg = read(section)
    assert (cfg["moe_backend"], cfg["moe_quant"]) == (backend, quant)


def test_attention_backend_enum_and_the_drafts_backend_apart():
    cfg = read("vllm-attention-enum")
    # the vision encoder's AttentionBackendEnum lines are not the decoder's
    assert cfg["attention_backend"] == {"decode": "TRITON_ATTN", "verify": "TRITON_ATTN"}
    cfg = read("vllm-attention-enum", "vllm-drafter", "vllm-moe-nvfp4")
    want = {"decode": "TRITON_ATTN", "verify": "TRITON_ATTN", "draft": "FLASH_ATTN"}
    assert cfg["attention_backend"] == want
    # the MoE line came after the drafter's: the draft's
    assert cfg["draft_moe_backend"] == "MARLIN" and "moe_quant" not in cfg


def test_full_graphs_asked_piecewise_run_and_none_run():
    cfg = read("vllm-flashinfer-piecewise")
    g = cfg["graphs"]
    assert (g["mode"], g["mode_asked"], g["decode"]) == ("PIECEWISE", "FULL_AND_PIECEWISE", True)
    assert "FULL_AND_PIECEWISE asked, PIECEWISE run" in g["downgraded"]
    assert "FlashInferBackend" in g["downgraded"]
    cfg = read("vllm-flashinfer-none")
    assert cfg["attention_backend"]["verify"] == "FLASHINFER"
    assert (cfg["graphs"]["mode"], cfg["graphs"]["decode"], cfg["graphs"]["verify"]) == ("NONE", False, False)


def test_sglang_decode_graphs_at_run_time():
    cfg = read("sglang-decode-graph", extra=(SGL_ARGS,))
    assert cfg["graphs"]["decode"] is True  # asked (disable_cuda_graph=False)
    assert cfg["graphs_run"] == {"decode": 0.5}  # 2 of the 4 decode lines ran eager


def test_a_worker_whose_nccl_lacks_a_variable_is_named():
    cfg = read("nccl-env-rank0", "nccl-env-none")
    n = cfg["nccl"]
    env = {"NCCL_IBEXT_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo"}
    assert n["set_by_environment"] == env
    assert n["missing_on_ranks"] == {
        "NCCL_IBEXT_DISABLE": ["sh-03 [0]"],
        "NCCL_IB_DISABLE": ["sh-03 [0]"],
        "NCCL_SOCKET_IFNAME": ["sh-03 [0]"],
    }
    assert "missing_on_ranks" not in read("nccl-env-rank0")["nccl"]


def _hit_run(rate: float, n: int = 5) -> dict:
    """A server run whose launches carry the prefix-cache hit rate the launcher records."""
    rng = np.random.default_rng(7)
    las = []
    for i in range(n):
        sp = ServerProcess(LocalHost(), ["true"])
        for line in sections()["vllm-prefix-rate"]:
            sp.config.feed(line.replace("18.8%", f"{100 * (rate + 0.002 * i):.1f}%"))
        la = launch({"e2e": list(rng.normal(100.0, 1.0, 20))}, index=i)
        sp.record_into(la)
        las.append(la)
    run = run_record(las, primary="e2e", phases=[], probe="server")
    run["units"], run["better"] = {"e2e": "ms"}, {"e2e": "lower"}
    return run


def test_prefix_cache_hit_rate_is_a_measurement_higher_is_better():
    s = sections()["vllm-prefix-rate"]
    assert read("vllm-prefix-rate")["prefix_cache_hit_rate"] == pytest.approx(0.188)
    assert "18.8%" in s[0]
    old, new = _hit_run(0.60), _hit_run(0.20)
    assert old["launches"][0]["values"]["prefix_cache_hit_rate"] == [0.6]
    got = {m.name: m for m in compare_runs(old, new).metrics}
    hit = got["prefix_cache_hit_rate"]
    assert hit.higher_is_better and hit.verdict == "REGRESSED"  # fewer hits is worse, not "faster"
    assert {m.name: m for m in compare_runs(new, old).metrics}["prefix_cache_hit_rate"].verdict == "IMPROVED"


def test_sglang_acceptance_from_its_own_counters():
    text = "\n".join(sections()["sglang-spec-metrics"])
    zero = metrics.spec_counters(text.replace(" 106.0", " 0").replace(" 43.0", " 0"))
    after = metrics.spec_counters(text)
    assert after["engine"] == "sglang" and after["verify_calls"] == 43
    d = metrics.spec_delta(zero, after)
    # completion_tokens / spec_verify_ct: the 2.4651 SGLang reported for that request
    assert d["accept_len"] == pytest.approx(106 / 43) and d["verify_calls"] == 43
    assert "accept_rate" not in d  # no draft-token counter exported: no rate made up
    # the gauge (the last interval's mean) is not what is read
    assert metrics.spec_delta(after, after).get("accept_len") is None


def test_draft_graphs_captured_and_never_replayed_are_said_by_explain():
    """SGLang's capture lines say the draft's graphs exist; the hook saw none replayed in the draft."""
    sp = ServerProcess(LocalHost(), ["true"])
    for line in (DATA / "sglang_startup_shaped.log").read_text().splitlines():
        sp.config.feed(line)
    la = launch({"cycle": [10.0] * 5, "verify": [6.0] * 5, "draft": [3.0] * 5}, index=0)
    la["graph_share"] = {"verify": 1.0, "draft": 0.0}
    sp.record_into(la)
    said = la["engine_config"]["graphs_at_run_time"]
    assert said == ["draft: CUDA graphs captured, never replayed: the draft ran eager in every cycle"]
    from regdiag import explain as ex

    run = run_record([la], phases=["draft", "verify"], probe="engine", config={"preset": "sglang"})
    notes = ex.explain_run(run, given=ex.Given(accept_len=2.0)).notes
    assert f"the engine: {said[0]}" in notes
