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
    assert code == 2 and "give a RUN, or --cycle-ms and --accept-len" in err


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
    s = preset_shape("kimi-k2", shard=8)
    parts = s.target_breakdown(tokens=3, batch=1, kv_len=4096)
    per_expert = 3 * 7168 * (2048 // 8) * 2  # gate, up, down of one expert slice, bf16
    touched = 384 * (1 - (1 - 8 / 384) ** 3)
    assert parts["routed_experts"] == pytest.approx(60 * touched * per_expert)
    assert parts["kv_cache"] == pytest.approx(61 * 4096 * (512 + 64) * 2)
    assert parts["lm_head"] == pytest.approx(7168 * 163840 / 8 * 2)


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
    code, _, err = _main(capsys, "explain", str(spec), "--model", "gpt-5")
    assert code == 2 and "unknown model 'gpt-5'" in err


def test_explain_a_synthetic_cpu_run_without_header_uses_its_preset():
    e = ex.explain_run(simulate_spec_run(1), decode_ms=12.0)
    assert e.throughput is not None and e.throughput.tok_s == pytest.approx(100, rel=0.03)
    assert e.model is not None and e.model["name"] == "tiny"
    assert [p.phase for p in e.phases] == ["draft", "verify", "extend"]
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
