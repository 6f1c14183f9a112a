"""The engine's configuration in effect (the `engine_config` section of engine and server launches),
read from what the engine prints: a real vLLM 0.32 CPU start-up (tests/data/vllm_cpu_0.32_startup.log,
captured from tests/engine_vllm/gen.py on this machine), SGLang lines shaped as the 0.5.3 and 0.5.23
sources print them (server_args repr / dict, the graph runners' capture lines, the prefill line), and
NCCL's INFO lines as NCCL prints them (no GPU here: hand-written in its format, said so in
tests/data/README.md). The ServerProcess test runs a real process that prints such lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from regdiag.hosts.local import LocalHost
from regdiag.server.engine_config import EngineConfigReader, dict_settings, split_settings
from regdiag.server.launch import ServerProcess
from regdiag.snapshot.diff import diff_engine_config, diff_records

DATA = Path(__file__).resolve().parent / "data"


def _read(name: str) -> dict:
    r = EngineConfigReader()
    for line in (DATA / name).read_text().splitlines():
        r.feed(line)
    out = r.result()
    assert out is not None
    return out


def test_a_real_vllm_cpu_start_up():
    cfg = _read("vllm_cpu_0.32_startup.log")
    assert cfg["engine"] == "vllm" and cfg["version"] == "0.32.0"
    s = cfg["settings"]
    assert s["enforce_eager"] is True and s["enable_prefix_caching"] is True
    assert s["cudagraph_mode"] == "NONE" and s["tensor_parallel_size"] == 1 and s["dtype"] == "torch.float32"
    assert cfg["graphs"] == {"decode": False, "verify": False, "mode": "NONE"}
    assert cfg["speculative"] == {"method": "ngram", "model": None, "num_spec_tokens": 3}
    assert cfg["moe_backend"] == "auto"  # kernel_config(moe_backend='auto'), nested in the line
    assert cfg["all_reduce"] == "custom all-reduce disabled"
    # The CPU build does not say which attention backend it picked: unknown, not guessed.
    assert cfg["attention_backend"] is None


def test_sglang_0_5_3_server_args_graphs_nccl_and_prefix_hits():
    cfg = _read("sglang_startup_shaped.log")
    assert cfg["engine"] == "sglang"
    # verify runs on the prefill backend unless speculative_attention_mode is 'decode'
    assert cfg["attention_backend"] == {"decode": "fa3", "verify": "fa3"}
    assert cfg["moe_backend"] == "auto" and cfg["all_reduce"] == "custom"
    # target graph captured (decode and verify), the draft's too, no draft-extend graph: eager extend
    assert cfg["graphs"] == {"decode": True, "verify": True, "draft": True, "extend": False}
    assert cfg["speculative"]["speculative_algorithm"] == "EAGLE3"
    assert cfg["speculative"]["speculative_draft_model_path"] == "/models/kimi-eagle3"
    assert cfg["prefix_cache_hit_rate"] == pytest.approx(90 / 160)
    assert cfg["nccl"] == {
        "version": "2.27.3+cuda12.9",
        "set_by_environment": {"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": "1"},
        "tuning": [  # sorted by (operation, bytes); "?": a line of an NCCL that names none
            {"op": "?", "bytes": 4096, "algo": "TREE", "proto": "LL128"},
            {"op": "AllReduce", "bytes": 14336, "algo": "RING", "proto": "LL"},
            {"op": "AllReduce", "bytes": 1048576, "algo": "RING", "proto": "SIMPLE"},
            {"op": "Broadcast", "bytes": 32768, "algo": "RING", "proto": "SIMPLE"},
        ],
        # device 1's NCCL read NCCL_ALGO from its environment but not NCCL_P2P_DISABLE
        "missing_on_ranks": {"NCCL_P2P_DISABLE": ["gpu-node-1 [1]"]},
    }
    assert "sk-test-secret" not in json.dumps(cfg)  # api_key is never a setting kept


def test_sglang_0_5_23_dict_form_and_its_capture_lines():
    cfg = _read("sglang_0.5.23_startup_shaped.log")
    assert cfg["attention_backend"] == {"decode": "flashinfer", "verify": "flashinfer"}  # mode 'decode'
    assert cfg["moe_backend"] == "flashinfer_cutlass" and cfg["all_reduce"] == "symm-mem"
    assert cfg["graphs"] == {"decode": True, "verify": True, "draft": True, "extend": True}
    assert cfg["prefix_cache_hit_rate"] == pytest.approx(0.75)
    assert "sk-test-secret" not in json.dumps(cfg)


def test_settings_split_on_top_level_commas_only():
    assert split_settings("a=1, b='x, y', c={'k': [1, 2]}, d=F(m='z', n=2)") == {
        "a": "1",
        "b": "'x, y'",
        "c": "{'k': [1, 2]}",
        "d": "F(m='z', n=2)",
    }
    assert dict_settings("{'a': 'x, y', 'b': None, 'c': 3}") == {"a": "'x, y'", "b": "None", "c": "3"}


def test_nothing_known_printed_is_no_section():
    r = EngineConfigReader()
    for line in ("hello", "INFO loading weights", "Using LBHNC KV cache layout."):
        r.feed(line)
    assert r.result() is None


def _run(cfg_a: dict, cfg_b: dict) -> tuple[dict, dict]:
    a = {"schema": "regdiag.run/1", "launches": [{"status": "ok", "engine_config": cfg_a}]}
    b = {"schema": "regdiag.run/1", "launches": [{"status": "ok", "engine_config": cfg_b}]}
    return a, b


def test_diff_names_an_engine_setting_first_before_the_snapshot():
    base = _read("vllm_cpu_0.32_startup.log")
    other = json.loads(json.dumps(base))
    other["settings"]["enable_prefix_caching"] = False
    other["prefix_cache_hit_rate"] = 0.5  # a rate, not a setting: left out
    a, b = _run(base, other)
    items = diff_engine_config(a, b)
    assert [(i["field"], i["old"], i["new"], i["rank"]) for i in items] == [
        ("settings.enable_prefix_caching", True, False, 0)
    ]
    assert any(i["field"] == "prefix_cache_hit_rate" for i in diff_engine_config(a, b, True))
    # with snapshots on both sides, the engine section comes before the environment's differences
    a["snapshot_before"] = {"groups": {"env": {"fields": {"NCCL_ALGO": {"status": "ok", "value": "Ring"}}}}}
    b["snapshot_before"] = {"groups": {"env": {"fields": {"NCCL_ALGO": {"status": "ok", "value": "Tree"}}}}}
    got = diff_records(a, b)
    assert [(i["group"], i["field"]) for i in got] == [
        ("engine_config", "settings.enable_prefix_caching"),
        ("env", "NCCL_ALGO"),
    ]
    sg = _read("sglang_startup_shaped.log")
    sg2 = json.loads(json.dumps(sg))
    sg2["nccl"]["set_by_environment"]["NCCL_ALGO"] = "Tree"
    sg2["nccl"]["tuning"][1]["algo"] = "TREE"  # AllReduce 14336: RING -> TREE
    sg2["graphs"]["extend"] = True
    fields = [i["field"] for i in diff_engine_config(*_run(sg, sg2))]
    assert fields == ["graphs.extend", "nccl.set_by_environment.NCCL_ALGO", "nccl.tuning.AllReduce.14336"]


PRINTER = r"""
import os, sys
print("server_args=ServerArgs(tp_size=2, attention_backend='fa3', disable_cuda_graph=False, api_key='sk-x')")
print("[TP0] NCCL_DEBUG=" + str(os.environ.get("NCCL_DEBUG")), flush=True)
if os.environ.get("NCCL_DEBUG") == "INFO":
    print("host:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL", flush=True)
"""


@pytest.mark.engine
@pytest.mark.parametrize("user", [None, "WARN"])
def test_the_launcher_adds_nccl_debug_reads_its_lines_and_hides_them(user):
    env = {"NCCL_DEBUG": user} if user else {}
    sp = ServerProcess(LocalHost(), [sys.executable, "-c", PRINTER], env, grace_s=5)
    sp.start()
    assert sp.wait_exit(60)
    sp.stop()
    launch: dict = {}
    sp.record_into(launch)
    cfg = launch["engine_config"]
    assert cfg["settings"]["attention_backend"] == "fa3" and "sk-x" not in json.dumps(cfg)
    tail = "\n".join(sp.tail)
    if user is None:
        assert cfg["nccl_debug"] == "added by regdiag (INFO)"
        assert cfg["nccl"]["set_by_environment"] == {"NCCL_PROTO": "LL"}
        assert "NCCL_DEBUG=INFO" in tail and "NCCL INFO" not in tail  # read, not shown
    else:
        assert cfg["nccl_debug"] == "as the user set it" and "NCCL_DEBUG=WARN" in tail
        assert cfg["nccl"]["set_by_environment"] == {}


def _draft_dir(d: Path, config: dict, tensors: list[str]) -> Path:
    """A draft checkpoint as engines load it: config.json and a safetensors file (its header only)."""
    import struct

    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    header = json.dumps({t: {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]} for t in tensors}).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    return d


def test_the_drafts_identity_and_a_changed_draft_named_by_diff(tmp_path):
    from regdiag.server.draft import draft_path, read_draft

    base = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 163840,
        "draft_vocab_size": 32000,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]},
    }
    a = _draft_dir(tmp_path / "a", base, ["d2t", "fc.weight", "midlayer.self_attn.q_proj.weight"])
    other = {**base, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    b = _draft_dir(tmp_path / "b", other, ["d2t", "fc.weight"])
    ia, ib = read_draft(LocalHost(), str(a)), read_draft(LocalHost(), str(b))
    assert ia["kind"] == "EAGLE-3" and ia["d2t"] is True and ia["attention"] == "GQA"
    assert ia["aux_hidden_state_layer_ids"] == [1, 29, 57] and ia["draft_vocab_size"] == 32000
    mtp = {"architectures": ["DeepseekV3ForCausalLMNextN"], "kv_lora_rank": 512}
    mla = read_draft(LocalHost(), str(_draft_dir(tmp_path / "m", mtp, [])))
    assert mla["kind"] == "MTP" and mla["attention"] == "MLA" and mla["d2t"] is False
    assert read_draft(LocalHost(), "org/some-hub-draft") == {"path": "org/some-hub-draft"}
    assert draft_path({"speculative": {"speculative_draft_model_path": str(a)}}) == str(a)
    assert draft_path({"speculative": {"method": "ngram", "model": None}}) is None
    cfg = _read("sglang_startup_shaped.log")
    fields = [i["field"] for i in diff_engine_config(*_run({**cfg, "draft": ia}, {**cfg, "draft": ib}))]
    assert fields == ["draft.aux_hidden_state_layer_ids", "draft.config_sha256", "draft.path"]


def test_a_running_engines_draft_in_its_snapshot(tmp_path):
    """A --pid snapshot reads the draft its command line names; diff of two names the changed draft."""
    from regdiag.snapshot import engine
    from regdiag.snapshot.diff import diff_snapshots
    from regdiag.snapshot.draft import path_from_argv

    a = _draft_dir(tmp_path / "a", {"architectures": ["LlamaForCausalLMEagle3"]}, ["d2t"])
    b = _draft_dir(tmp_path / "b", {"architectures": ["LlamaForCausalLMEagle"]}, [])
    sgl = [
        "python",
        "-m",
        "sglang.launch_server",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(a),
    ]
    vll = ["vllm", "serve", "m", f'--speculative-config={{"method": "eagle", "model": "{b}"}}']
    assert path_from_argv(sgl) == str(a) and path_from_argv(vll) == str(b)
    assert path_from_argv(["vllm", "serve", "m", "--speculative-config", "not json"]) is None
    ga = engine.collect(repo=str(tmp_path), argv=sgl)  # not a git repository: the draft is still read
    gb = engine.collect(repo=str(tmp_path), argv=vll)
    assert (
        ga["fields"]["draft"]["value"]["kind"] == "EAGLE-3"
        and gb["fields"]["draft"]["value"]["kind"] == "EAGLE"
    )
    snap = {"schema": "regdiag.snapshot/1"}
    items = diff_snapshots({**snap, "groups": {"engine": ga}}, {**snap, "groups": {"engine": gb}})
    assert [(i["group"], i["field"], i["rank"]) for i in items] == [("engine", "draft", 1)]


def test_compare_lists_engine_section_differences_first():
    from regdiag.compare.envdiff import env_diff_of

    base = _read("vllm_cpu_0.32_startup.log")
    eager = json.loads(json.dumps(base))
    eager["settings"]["enforce_eager"] = False
    a, b = _run(base, eager)
    a["launches"][0]["header"] = {"env": {"NCCL_ALGO": "Ring"}}
    b["launches"][0]["header"] = {"env": {"NCCL_ALGO": "Tree"}}
    items, note = env_diff_of(a, b)
    assert [(i["group"], i["field"]) for i in items] == [
        ("engine_config", "settings.enforce_eager"),
        ("env", "NCCL_ALGO"),
    ]
    assert "the engines' configuration in effect" in note


def test_prefix_cache_hits_from_metrics_over_the_launch():
    from regdiag.server import metrics

    def prom(hits: float, queries: float) -> str:
        return (
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
            f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n'
        )

    d = metrics.spec_delta(metrics.spec_counters(prom(100, 400)), metrics.spec_counters(prom(400, 1000)))
    assert d["prefix_cache_hit_rate"] == pytest.approx(300 / 600)
    sgl = metrics.spec_counters('sglang:cache_hit_rate{model_name="m"} 0.25\n')
    assert metrics.spec_delta(sgl, sgl)["prefix_cache_hit_rate"] == 0.25
    launch = {"engine_counters": d}
    sp = ServerProcess(LocalHost(), ["true"])
    sp.config.feed("server_args=ServerArgs(tp_size=1, disable_radix_cache=False)")
    sp.record_into(launch)
    assert launch["engine_config"]["prefix_cache_hit_rate"] == 0.5


def test_the_version_where_the_log_names_none():
    sp = ServerProcess(LocalHost(), ["true"])
    sp.config.feed("server_args=ServerArgs(tp_size=1)")
    launch = {"header": {"engine_versions": ["torch 2.13.0", "sglang 0.5.23"]}}
    sp.record_into(launch)
    assert launch["engine_config"]["version"] == "0.5.23"
    launch = {"header": {"engine_version": "0.5.3"}}
    sp.record_into(launch)
    assert launch["engine_config"]["version"] == "0.5.3"
