"""regdiag explain: the throughput arithmetic, the MoE byte model, the roofline of a run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from compare_helpers import launch, run_record, simulate_spec_run, write

from regdiag import explain as ex
from regdiag.cli import main
from regdiag.errors import BadInput
from regdiag.models import PRESETS, preset_shape, touched_experts

ROOT = Path(__file__).resolve().parent.parent


def _main(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


def test_the_seeds_throughput_arithmetic():
    """decode 12 ms, cycle 30 ms, accept 2.0: 67 tok/s vs 83, loses until accept >= 2.5 or cycle <= 24 ms."""
    t = ex.explain_numbers(cycle_ms=30, decode_ms=12, accept_len=2.0)
    assert t.tok_s == pytest.approx(66.667, rel=1e-4)
    assert t.baseline_tok_s == pytest.approx(83.333, rel=1e-4)
    assert t.speedup == pytest.approx(0.8)
    assert t.breakeven_accept == pytest.approx(2.5)
    assert t.breakeven_cycle_ms == pytest.approx(24.0)
    old = ex.explain_numbers(cycle_ms=20, decode_ms=12, accept_len=2.0)
    assert old.tok_s == pytest.approx(100.0) and old.speedup == pytest.approx(1.2)


def test_explain_with_plain_numbers_says_it_in_words(cli):
    r = cli("explain", "--cycle-ms", "30", "--decode-ms", "12", "--accept-len", "2.0", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert "67 tok/s vs 83 baseline" in first
    assert "speculation loses until accept_len >= 2.5 or cycle <= 24 ms" in first


def test_explain_numbers_json_and_bad_numbers(capsys):
    code, out, _ = _main(
        capsys, "explain", "--cycle-ms", "20", "--decode-ms", "12", "--accept-len", "2", "--json"
    )
    d = json.loads(out)["throughput"]
    assert code == 0 and d["tok_s"] == pytest.approx(100.0) and d["breakeven_accept"] == pytest.approx(5 / 3)
    code, _, err = _main(capsys, "explain", "--cycle-ms", "-3", "--accept-len", "2")
    assert code == 2 and err.startswith("regdiag: error: cycle must be a positive number")
    code, _, err = _main(capsys, "explain")
    assert code == 2 and "give a RUN, --preset, or --cycle-ms and --accept-len" in err


def test_touched_experts_matches_a_routing_simulation():
    rng = np.random.default_rng(0)
    for e, k, t in ((384, 8, 1), (384, 8, 4), (256, 8, 16), (64, 6, 3)):
        # Each token picks k distinct experts uniformly; count distinct experts over t tokens.
        picks = np.argsort(rng.random((4000, t, e)), axis=-1)[..., :k].reshape(4000, -1)
        unique = np.mean([len(np.unique(row)) for row in picks])
        assert touched_experts(e, k, t) == pytest.approx(unique, rel=0.01)
    assert touched_experts(384, 8, 1) == pytest.approx(8.0)


def _probe_presets():
    """The probe's own preset table (probes/ import nothing of regdiag, so load it by path)."""
    path = ROOT / "probes" / "_presets.py"
    if not path.exists():
        pytest.skip("probe not available")
    name = "_regdiag_probe_presets"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = mod  # dataclasses look their module up while the class is built
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return sys.modules[name]


def test_model_table_agrees_with_the_probe_presets():
    probe = _probe_presets()
    assert set(PRESETS) == set(probe.PRESETS)
    for name, shape in PRESETS.items():
        for key, value in shape.items():
            assert probe.PRESETS[name][key] == value, (name, key)


@pytest.mark.parametrize(
    ("preset", "tokens", "shard"), [("kimi-k2", 4, 8), ("deepseek-v3", 16, 4), ("tiny", 3, 2)]
)
def test_the_probe_floor_and_explain_read_one_byte_model(preset, tokens, shard):
    # The probe's footer floor (target_bytes) is the sum of the breakdown explain shows, part by part.
    s = preset_shape(preset, shard=shard)
    parts = s.target_breakdown(tokens, 1, 4096 + tokens, 2)
    assert s.target_bytes(tokens, 1, 4096 + tokens, 2) == int(sum(parts.values()))
    assert set(parts) == {"attention", "kv_cache", "dense_mlp", "router", "shared_experts", "routed_experts",
                          "lm_head", "embedding_rows"}  # fmt: skip


def test_kimi_k2_routed_expert_bytes_by_hand():
    s = preset_shape("kimi-k2", shard=8, weights="bf16")
    parts = s.target_breakdown(tokens=3, batch=1, kv_len=4096)
    per_expert = 3 * 7168 * (2048 // 8) * 2  # gate, up, down of one expert slice, bf16
    touched = 384 * (1 - (1 - 8 / 384) ** 3)
    assert parts["routed_experts"] == pytest.approx(60 * touched * per_expert)
    assert parts["kv_cache"] == pytest.approx(61 * 4096 * (512 + 64) * 2)
    assert parts["lm_head"] == pytest.approx(7168 * 163840 / 8 * 2)
    # The checkpoint's own formats: FP8 e4m3 with a float32 scale per 128x128 block.
    fp8 = preset_shape("kimi-k2", shard=8).target_breakdown(tokens=3, batch=1, kv_len=4096)
    assert fp8["routed_experts"] == pytest.approx(parts["routed_experts"] / 2 * (1 + 4 / 128**2))
    assert fp8["lm_head"] == parts["lm_head"] and fp8["router"] == parts["router"]  # bf16 in the checkpoint
    # Kimi-K2.5: INT4 routed experts, a bf16 scale per 32 weights (4.5 bits); the rest bf16.
    int4 = preset_shape("kimi-k2.5", shard=8).target_breakdown(tokens=3, batch=1, kv_len=4096)
    assert int4["routed_experts"] == pytest.approx(parts["routed_experts"] * (0.5 + 2 / 32) / 2)
    assert int4["shared_experts"] == parts["shared_experts"] and int4["attention"] == parts["attention"]


def test_kimi_k2_5_at_tp8_verify_reads_1_46_decodes_not_2_01():
    """Context 4096, 2 steps: bf16 experts give 2.01x, the INT4 checkpoint 1.46x (2.01 / 1.46 changes the
    seeds' 29 vs 12 ms from +4.9 ms to +11.5 ms not explained by bytes)."""
    bf16 = ex.explain_model("kimi-k2.5", 8, given=ex.Given())
    assert bf16.bytes_ratio_verify_decode == pytest.approx(1.456, abs=0.005)
    s = preset_shape("kimi-k2.5", shard=8, weights="bf16")
    d = sum(s.target_breakdown(1, 1, 4097).values())
    v = sum(s.target_breakdown(3, 1, 4099).values())
    assert v / d == pytest.approx(2.013, abs=0.005)
    assert 29 - 12 * bf16.bytes_ratio_verify_decode == pytest.approx(11.5, abs=0.1)
    # bf16 routed experts would not fit a 96 GB card at TP=8: ~253 GB per rank.
    assert 60 * 384 * s.layer_bytes(2)["expert"] / 1e9 == pytest.approx(253.7, abs=0.5)


def test_explain_model_without_a_run_json(capsys):
    code, out, err = _main(capsys, "explain", "--preset", "kimi-k2.5", "--tp", "8", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["bytes_ratio_verify_decode"] == pytest.approx(1.456, abs=0.005) and d["tok_s"] is None
    rows = {p["phase"]: p for p in d["phases"]}
    # SGLang's count: embedding all-reduce, two per layer, the logits all-gather: 2L + 2 = 124 at 61 layers;
    # EAGLE-3 draft: 4 per forward (2 steps: one draft forward, one extend).
    assert rows["verify"]["collectives"] == 124 and rows["draft"]["collectives"] == 4
    assert rows["extend"]["collectives"] == 4
    assert d["model"]["w_routed"] == "int4_g32" and d["model"]["draft_kv_heads"] == 64


def test_the_seeds_94_and_60_with_overhead(capsys):
    code, out, _ = _main(capsys, "explain", "--cycle-ms", "20", "--decode-ms", "12.2", "--accept-len", "2.0",
                         "--overhead-ms", "1.28", "--json")  # fmt: skip
    d = json.loads(out)
    assert code == 0 and round(d["tok_s"]) == 94 and round(d["throughput"]["baseline_tok_s"]) == 82
    t = ex.explain_numbers(30, 12.2, 2.0, overhead_ms=3.33)
    assert round(t.tok_s) == 60
    # Against 82 tok/s, with 3.33 ms per cycle beyond the GPU, the GPU cycle must be <= 21.1 ms, not 24.
    assert t.breakeven_cycle_ms == pytest.approx(21.07, abs=0.01)
    assert "or cycle <= 21.1 ms" in t.summary()[-1]


@pytest.mark.parametrize("acc", ["0.5", "3.5", "1e308", "nan"])
def test_an_accept_length_outside_1_to_steps_plus_1_is_refused(capsys, acc):
    code, _, err = _main(capsys, "explain", "--cycle-ms", "30", "--decode-ms", "12", "--accept-len", acc,
                         "--num-steps", "2")  # fmt: skip
    assert (
        code == 2 and err.startswith("regdiag: error: accept length must be") and len(err.splitlines()) == 1
    )


@pytest.mark.parametrize(
    "args",
    [["--cycle-ms", "1e-308"], ["--cycle-ms", "1e300"], ["--overhead-ms", "-1"], ["--num-steps", "0"],
     ["--num-steps", "100"], ["--bandwidth", "1e-300"], ["--gpu", "TPU v5"]],
)  # fmt: skip
def test_numbers_that_would_overflow_are_refused(capsys, args):
    base = {"--cycle-ms": "30", "--decode-ms": "12", "--accept-len": "2"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    code, _, err = _main(capsys, "explain", *[x for kv in base.items() for x in kv])
    assert code == 2 and err.startswith("regdiag: error:"), err


def test_a_break_even_beyond_steps_plus_one_says_it_cannot_pay():
    t = ex.explain_numbers(60, 12, 2.0, num_steps=2)  # needs 5 tokens a cycle; 2 steps give 3
    line = t.summary()[-1]
    assert "cannot pay at 2 steps" in line and "at most 3" in line and ">= 4 steps" in line
    assert "cycle <= 24 ms" in line


def test_a_per_position_acceptance_curve_sweeps_the_step_count():
    t = ex.explain_numbers(30, 12, 2.0, num_steps=3)
    t.per_position = [0.65, 0.42, 0.24]
    rows = t.sweep()
    assert [r["steps"] for r in rows] == [1, 2, 3]
    assert [r["accept_len"] for r in rows] == pytest.approx([1.65, 2.07, 2.31])
    assert rows[1]["breakeven_cycle_ms"] == pytest.approx(2.07 * 12)
    assert any("at 2 steps the acceptance curve gives accept_len 2.07" in x for x in t.summary())


def test_bandwidth_from_the_records_device_or_the_table():
    from regdiag.bandwidth import bandwidth_for, lookup

    assert lookup("NVIDIA H100 PCIe")[0] == "H100 PCIe" and lookup("NVIDIA H100 80GB HBM3")[0] == "H100"
    assert lookup("NVIDIA RTX PRO 6000 Blackwell Server Edition")[1] == pytest.approx(1.792e12)
    la = {"header": {"device": {"type": "cuda", "name": "NVIDIA B200"}}}
    bw, src = bandwidth_for([la], None)
    assert bw == 8.0e12 and "NVIDIA B200" in src
    assert bandwidth_for([la], 1e12)[0] == 1e12 and bandwidth_for([la], None, "L40S")[0] == 8.64e11


def _gpu_like_run(mode: str, cycle_ms: dict[str, float], graphs: dict[str, bool]) -> dict:
    shape = {"preset": "kimi-k2", **PRESETS["kimi-k2"], "layers": 4, "layers_full": 61, "shard": 8}
    phases = ["decode"] if mode == "baseline" else ["draft", "verify", "extend"]
    config = {"preset": "kimi-k2", "mode": mode, "tp": 8, "shard": 8, "layers": 4, "batch": 1, "context": 4096,
              "num_steps": 2, "num_draft_tokens": 3, "verify_graph": "off" if not graphs.get("verify", True) else "on",
              "device": "cuda", "dtype": "bfloat16"}  # fmt: skip
    rng = np.random.default_rng(0)
    launches = []
    for i in range(3):
        samples = {p: (cycle_ms[p] * np.exp(rng.normal(0, 0.01, 20))).tolist() for p in phases}
        samples["cycle"] = np.sum([samples[p] for p in phases], axis=0).tolist()
        values = {} if mode == "baseline" else {"accept_len": [1.0, 2.0, 3.0] * 6 + [2.0, 2.0]}
        la = launch(samples, index=i, values=values)
        la["header"] = {"config": config, "model": {"shape": shape}, "graphs": graphs, "copy_GBps": 4000.0}
        launches.append(la)
    return run_record(launches, phases=phases, config=config)


def test_explain_a_run_with_its_baseline_flags_the_eager_verify():
    spec = _gpu_like_run(
        "eagle",
        {"draft": 0.5, "verify": 4.65, "extend": 0.6},
        {"draft": True, "verify": False, "extend": True},
    )
    base = _gpu_like_run("baseline", {"decode": 1.2}, {"decode": True})
    e = ex.explain_run(spec, base)
    t = e.throughput
    assert t is not None and t.decode_ms == pytest.approx(1.2, rel=0.02)
    assert t.cycle_ms == pytest.approx(5.75, rel=0.02) and t.accept_len == pytest.approx(2.0)
    assert t.breakeven_accept == pytest.approx(t.cycle_ms / t.decode_ms)
    assert e.bandwidth == pytest.approx(4.0e12) and "measured by the probe" in e.bandwidth_source
    rows = {p.phase: p for p in e.phases}
    assert set(rows) == {"draft", "verify", "extend", "decode"}
    assert rows["verify"].launch_bound and "launch-bound" in rows["verify"].note
    assert not rows["decode"].launch_bound
    assert rows["verify"].touched_experts == pytest.approx(touched_experts(384, 8, 3))
    assert rows["verify"].floor_ms == pytest.approx(rows["verify"].bytes / 4.0e12 * 1e3)
    assert any("4 of 61 layers" in n for n in e.notes)
    line = e.physics_line()
    assert line is not None and line.startswith("verify costs 3.8")


def test_explain_cli_on_run_files(capsys, tmp_path):
    spec = write(
        tmp_path / "spec.json",
        _gpu_like_run("eagle", {"draft": 0.5, "verify": 4.65, "extend": 0.6}, {"verify": False}),
    )
    base = write(tmp_path / "base.json", _gpu_like_run("baseline", {"decode": 1.2}, {"decode": True}))
    code, out, _ = _main(capsys, "explain", str(spec), "--baseline", str(base), "--markdown")
    assert code == 0
    assert out.startswith("**speedup 0.42x")
    assert "| verify | 3 | 23.5 |" in out and "launch-bound" in out
    code, out, _ = _main(capsys, "explain", str(spec), "--bandwidth", "2e12", "--json")
    d = json.loads(out)
    assert d["bandwidth"] == 2e12 and d["throughput"]["decode_ms"] is None
    code, _, err = _main(capsys, "explain", str(spec), "--preset", "gpt-5")
    assert code == 2 and "unknown model 'gpt-5'" in err


def test_explain_a_synthetic_cpu_run_without_header_uses_its_preset():
    e = ex.explain_run(simulate_spec_run(1), decode_ms=12.0)
    assert e.throughput is not None and e.throughput.tok_s == pytest.approx(100, rel=0.03)
    assert e.model is not None and e.model["name"] == "tiny"
    # A given decode time is a decode row too: the physics line weighs the run's verify against it.
    assert [p.phase for p in e.phases] == ["draft", "verify", "extend", "decode"]
    assert e.phases[-1].measured_ms == 12.0 and e.physics_line() is not None
    assert "default: copy bandwidth measured on one H200" in e.bandwidth_source
    with pytest.raises(BadInput, match="no launch with samples"):
        ex.explain_run(run_record([]))


def test_a_given_cycle_replaces_the_runs_own():
    e = ex.explain_run(simulate_spec_run(1), decode_ms=12.0, cycle_ms=40.0)
    assert e.throughput is not None and e.throughput.cycle_ms == 40.0
    assert e.throughput.sources["cycle"] == "given"
    assert e.throughput.tok_s == pytest.approx(e.throughput.accept_len / 40.0 * 1e3)
    with pytest.raises(BadInput, match="cycle must be a positive number"):
        ex.explain_run(simulate_spec_run(1), cycle_ms=float("nan"))


@pytest.mark.launch
@pytest.mark.engine
def test_explain_takes_an_engines_time_between_cycles_as_its_overhead(cli, tmp_path):
    """A real engine run (the fake engine's processes, the real hook): period minus cycle per launch."""
    from server_helpers import free_port
    from test_engine_probe import FAKE_PHASES, _fake_server

    port = free_port()
    out = tmp_path / "run.json"
    r = cli("probe", "engine", *_fake_server(port, workers=1), *FAKE_PHASES, "-L", "2", "-R", "2",
            "--max-tokens", "40", "-o", str(out), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = json.loads(out.read_text())
    between = [la["scalars"]["between_cycles_ms"] for la in run["launches"]]
    e = ex.explain_run(run, decode_ms=5.0)
    t = e.throughput
    assert t is not None and t.overhead_ms == pytest.approx(float(np.median(between)))
    assert "period minus its GPU cycle" in t.sources["overhead"]
    assert t.tok_s == pytest.approx(t.accept_len / (t.cycle_ms + t.overhead_ms) * 1e3)
    given = ex.explain_run(run, given=ex.Given(decode_ms=5.0, overhead_ms=0.0))
    assert given.throughput is not None and given.throughput.overhead_ms == 0.0


def test_collectives_priced_from_a_probe_collectives_record(capsys):
    """The H200 pair's all-reduce sweep (a real record): tiny at TP=2, one decode token: 2L+1 = 9
    all-reduces of 512 B (below the smallest size: its latency) and the 4 KiB logits all-gather (not in
    the sweep: the all-reduce's latency at that size, said so)."""
    import statistics

    from regdiag.collective_costs import Latencies

    rec = json.loads((ROOT / "baselines" / "h200x2-kimi-tp2-collectives.json").read_text())
    us = {}
    for size in (1024, 4096):
        us[size] = statistics.median(
            r["us"] for la in rec["launches"] for r in la["footer"]["table"] if r["bytes"] == size
        )
    e = ex.explain_model(
        "tiny", 2, context=64, given=ex.Given(collectives=Latencies.from_record(rec, "sweep"))
    )
    rows = {p.phase: p for p in e.phases}
    d = rows["decode"]
    assert d.collectives == 10 and d.comm_ms == pytest.approx((9 * us[1024] + us[4096]) / 1e3)
    assert d.floor_ms == pytest.approx(d.bytes_floor_ms + d.comm_ms)
    assert rows["verify"].comm_ms > d.comm_ms
    assert any("all_gather" in n and "not measured" in n for n in e.notes)
    code, out, _ = _main(capsys, "explain", "--preset", "tiny", "--tp", "2", "--context", "64", "--collectives",
                         str(ROOT / "baselines" / "h200x2-kimi-tp2-collectives.json"), "--json")  # fmt: skip
    assert code == 0 and {p["phase"]: p for p in json.loads(out)["phases"]}["decode"][
        "comm_ms"
    ] == pytest.approx(d.comm_ms)
    code, _, err = _main(capsys, "explain", "--preset", "tiny", "--collectives", str(ROOT / "baselines" /
                         "h200-kimi-tp1-eagle.json"))  # fmt: skip
    assert code == 2 and "takes a `probe collectives` run" in err


def test_deepseek_v3_mtp_draft_reads_one_moe_layer_and_the_full_head(capsys):
    e = ex.explain_model("deepseek-v3", 8, given=ex.Given(), draft="mtp")
    rows = {p.phase: p for p in e.phases}
    s = preset_shape("deepseek-v3", shard=8, draft="mtp")
    b = s.layer_bytes(2)
    # One draft forward (2 steps: one draft step of one token): eh_proj, MLA, router, shared, 8 experts, head.
    expect = 2 * 7168**2 * 2 + b["attn"] + b["gate"] + b["shared"] + 8 * b["expert"] + b["lm_head"]
    expect += 4096 * (512 + 64) * 2 + 7168 * 2  # its latent KV cache and one embedding row
    assert rows["draft"].bytes == pytest.approx(expect)
    assert rows["draft"].collectives == 4 and e.model is not None and e.model["draft"] == "mtp"
    code, _, err = _main(capsys, "explain", "--preset", "kimi-k2", "--draft", "mtp")
    assert code == 2 and "no MTP layer" in err


def test_a_servers_cycle_minus_the_gpu_cycle_is_the_overhead(cli, tmp_path):
    """An SGLang log ingested for real: its cycle is itl x accept length, a wall time; with the GPU
    cycle given, the difference is the engine's time per cycle, and tok/s stays the server's own."""
    out = tmp_path / "sg.json"
    r = cli("ingest-log", str(ROOT / "tests" / "data" / "sglang_decode_dot.log"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    run = json.loads(out.read_text())
    own = ex.explain_run(run, decode_ms=12.0).throughput
    t = ex.explain_run(run, decode_ms=12.0, cycle_ms=10.0).throughput
    assert own is not None and t is not None and own.overhead_ms == 0.0
    assert t.overhead_ms == pytest.approx(own.cycle_ms - 10.0) and "server's cycle" in t.sources["overhead"]
    assert t.tok_s == pytest.approx(own.tok_s)


def test_the_acceptance_curve_from_the_servers_counters_or_given(capsys):
    """vLLM's per-position counters as `probe server` files them (server.metrics.spec_delta over a launch)."""
    from regdiag.server.metrics import spec_delta

    before = {
        "drafts": 100.0,
        "accepted": 50.0,
        "draft_tokens": 300.0,
        "per_position": {0: 40.0, 1: 20.0, 2: 10.0},
    }
    after = {
        "drafts": 300.0,
        "accepted": 320.0,
        "draft_tokens": 900.0,
        "per_position": {0: 170.0, 1: 104.0, 2: 58.0},
    }
    counters = spec_delta(before, after)
    assert counters["per_position_rate"] == pytest.approx([0.65, 0.42, 0.24])
    run = simulate_spec_run(1)
    for la in run["launches"]:
        la["engine_counters"] = counters
    t = ex.explain_run(run, decode_ms=12.0).throughput
    assert t is not None and t.per_position == pytest.approx([0.65, 0.42, 0.24])
    assert "per-position" in t.sources["per_position"]
    assert [round(r["accept_len"], 2) for r in t.sweep()] == [1.65, 2.07, 2.31]
    code, out, _ = _main(capsys, "explain", "--cycle-ms", "30", "--decode-ms", "12", "--accept-len", "2",
                         "--per-position", "0.7,0.5", "--json")  # fmt: skip
    sweep = json.loads(out)["throughput"]["sweep"]
    assert code == 0 and [r["accept_len"] for r in sweep] == pytest.approx([1.7, 2.2])
    code, _, err = _main(capsys, "explain", "--cycle-ms", "30", "--accept-len", "2", "--per-position", "1.5")
    assert code == 2 and "--per-position" in err


def test_the_terminal_view_of_a_model_without_a_run(cli):
    r = cli("explain", "--preset", "kimi-k2.5", "--tp", "8", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "a verify reads 1.46x the bytes of a decode" in r.stdout
    assert (
        "collectives per phase, as the engine issues them: decode 124, draft 4, verify 124, extend 4"
        in r.stdout
    )
    assert r.stdout.count("not measured in this run") == 1  # one note for the four unmeasured rows


def _flat_latencies(eager_us: float, graph_us: float, tp: int = 8):
    """A `probe collectives` record whose every size costs the same: all-reduce and all-gather at
    `eager_us` eagerly and `graph_us` inside a CUDA graph (the arithmetic below is then by hand)."""
    from regdiag.collective_costs import Latencies

    table = [
        {"op": op, "mode": mode, "bytes": b, "us": us}
        for op in ("all_reduce", "all_gather")
        for mode, us in (("eager", eager_us), ("graph", graph_us))
        for b in (1024, 1 << 24)
    ]
    la = {"status": "ok", "header": {"config": {"tp": tp}}, "footer": {"table": table}}
    rec = {"probe": {"name": "collectives"}, "launches": [la]}
    return Latencies.from_record(rec, "flat")


def test_the_seeds_remainder_takes_collectives_out_before_scaling_by_the_bytes():
    """Kimi-K2.5 at TP=8, the seeds' verify 29 ms against a decode of 12.2 ms. A verify reads 1.456x a
    decode's bytes; each target forward issues 124 collectives (2L + 2). The old remainder scaled the
    whole decode, its collectives included: 29 - 12.2 x 1.456 = +11.24 ms. Collectives do not grow
    with the bytes: take a decode's out before scaling and add verify's, v - [(d - d_comm) x ratio +
    v_comm]. At 40 us a collective eagerly, 124 x 40 us = 4.96 ms each:
    29 - [(12.2 - 4.96) x 1.456 + 4.96] = 29 - [10.54 + 4.96] = +13.50 ms. In a graph (10 us):
    d_comm = v_comm = 1.24 ms, 29 - [(12.2 - 1.24) x 1.456 + 1.24] = +11.80 ms."""
    lat = _flat_latencies(40.0, 10.0)
    for graph, comm, want in ((False, 4.96, 13.50), (True, 1.24, 11.80)):
        g = ex.Given(decode_ms=12.2, verify_ms=29.0, collectives=lat, graph=graph)
        e = ex.explain_model("kimi-k2.5", 8, given=g)
        rows = {p.phase: p for p in e.phases}
        v, d = rows["verify"], rows["decode"]
        ratio = v.bytes / d.bytes
        assert ratio == pytest.approx(1.456, abs=1e-3) and v.collectives == d.collectives == 124
        assert d.comm_ms == pytest.approx(comm) and v.comm_ms == pytest.approx(comm)
        rest, r, priced = e.remainder()
        assert priced and r == pytest.approx(ratio)
        assert rest == pytest.approx(29 - ((12.2 - comm) * ratio + comm))
        assert rest == pytest.approx(want, abs=0.01)
        assert f"{want:+.3g} ms, is not explained by bytes or collectives" in (e.physics_line() or "")
    # Without a latency record: the old arithmetic, said without "or collectives".
    e = ex.explain_model("kimi-k2.5", 8, given=ex.Given(decode_ms=12.2, verify_ms=29.0))
    rest, ratio, priced = e.remainder()
    assert not priced and rest == pytest.approx(29 - 12.2 * ratio) and rest == pytest.approx(11.24, abs=0.01)


def test_verify_ms_and_graph_on_the_command_line(capsys, tmp_path):
    rec = ROOT / "baselines" / "h200x2-kimi-tp2-collectives.json"
    args = ["explain", "--verify-ms", "29", "--decode-ms", "12.2", "--preset", "kimi-k2.5", "--tp", "8"]
    code, out, _ = _main(capsys, *args, "--collectives", str(rec), "--json")
    assert code == 0
    d = json.loads(out)
    rows = {p["phase"]: p for p in d["phases"]}
    # Without a run, decode and verify are priced as the engines run them: CUDA graphs.
    assert rows["decode"]["graph"] is True and rows["verify"]["graph"] is True
    assert rows["decode"]["measured_ms"] == 12.2 and rows["verify"]["measured_ms"] == 29.0
    v, dc, ratio = rows["verify"], rows["decode"], d["bytes_ratio_verify_decode"]
    assert d["physics_remainder_ms"] == pytest.approx(29 - ((12.2 - dc["comm_ms"]) * ratio + v["comm_ms"]))
    assert any("priced as CUDA-graph replays" in n for n in d["notes"])
    code, out, _ = _main(capsys, *args, "--collectives", str(rec), "--graph", "off", "--json")
    assert code == 0 and {p["phase"]: p["graph"] for p in json.loads(out)["phases"]}["verify"] is False
    code, _, err = _main(capsys, *args, "--graph", "maybe")
    assert code == 2 and "--graph 'maybe': on or off" in err
    code, _, err = _main(capsys, "explain", "--verify-ms", "29", "--decode-ms", "12")
    assert code == 2 and "--verify-ms needs --preset" in err
    code, _, err = _main(capsys, *args[:3], "-1", *args[3:])
    assert code == 2


def test_two_engines_cycles_are_not_compared_as_one(tmp_path):
    """vLLM's cycle runs verify start to verify start, SGLang's is one forward_batch_generation call:
    compare warns, explain notes it when the baseline's cycle is another kind."""
    from regdiag.compare.checks import cycle_warning
    from regdiag.engine.presets import PRESETS

    sgl, vll = PRESETS["sglang"].cycle_definition(), PRESETS["vllm"].cycle_definition()
    assert sgl["kind"] == "one-call" and "forward_batch_generation" in sgl["text"]
    assert vll["kind"] == "start-to-start" and vll["text"].startswith("from one start of verify")
    assert PRESETS["transformers"].cycle_definition()["kind"] == "to-sync"
    old, new = {"engine": {"cycle": sgl}}, {"engine": {"cycle": vll}}
    (w,) = cycle_warning(old, new, "OLD", "NEW")
    assert "define a cycle differently" in w and "not comparable" in w
    assert cycle_warning(old, old, "OLD", "NEW") == [] and cycle_warning({}, new, "OLD", "NEW") == []
    run, base = simulate_spec_run(1), run_record([launch({"cycle": [12.0] * 20})], phases=["decode"])
    run["engine"], base["engine"] = {"cycle": sgl}, {"cycle": vll}
    e = ex.explain_run(run, base)
    assert any("define a cycle differently" in n for n in e.notes)


def test_a_given_verify_time_beside_a_decode_run():
    """A plain-decode run (its decode measured) and --verify-ms: the physics line without a spec run."""
    run = simulate_spec_run(1)
    run["phases"] = ["decode"]
    for la in run["launches"]:
        la["samples"] = {"decode": [12.0] * 20}
    run["primary"] = "decode"
    e = ex.explain_run(run, given=ex.Given(verify_ms=29.0))
    rows = {p.phase: p for p in e.phases}
    assert rows["verify"].measured_ms == 29.0 and rows["decode"].measured_ms == pytest.approx(12.0)
    rest, ratio, _ = e.remainder()
    assert rest == pytest.approx(29.0 - 12.0 * ratio)
