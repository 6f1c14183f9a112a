"""regdiag.compare on synthetic run records: verdicts, attribution, tok/s, PHANTOM, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from compare_helpers import launch, run_record, simulate_spec_run, snapshot, with_changes

from regdiag import stats
from regdiag.compare import compare_runs
from regdiag.errors import BadInput


def test_the_seeds_20_vs_30_ms_cycle_is_a_regression_in_verify():
    """The seeds' case: 20 ms -> 30 ms cycles at accept 2.0, i.e. 100 -> 67 tok/s, all in verify."""
    old = simulate_spec_run(11, draft=3.0, verify=15.0, extend=2.0)
    new = simulate_spec_run(12, draft=3.0, verify=25.0, extend=2.0)
    c = compare_runs(old, new)
    assert c.verdict == stats.REGRESSED and c.exit_code == 1
    cyc = c.metric("cycle").estimate
    assert cyc is not None and cyc.ratio == pytest.approx(1.5, rel=0.03)
    assert c.metric("verify").verdict == stats.REGRESSED
    assert c.metric("draft").verdict != stats.REGRESSED and c.metric("extend").verdict != stats.REGRESSED
    a = c.attribution
    assert a is not None and a.dominant == "verify"
    terms = {t.name: t for t in a.terms}
    assert terms["verify"].delta == pytest.approx(10.0, rel=0.05)
    assert terms["verify"].share is not None and terms["verify"].share > 0.95
    # The parts add up to the whole, exactly.
    assert sum(t.delta for t in a.terms) == pytest.approx(a.total.delta, abs=1e-9)
    t = c.throughput
    assert t is not None
    assert t.old.tok_s == pytest.approx(100, rel=0.03) and t.new.tok_s == pytest.approx(66.7, rel=0.03)
    assert t.accept_ratio == pytest.approx(1.0) and t.cycle_ratio == pytest.approx(1.5, rel=0.03)
    assert t.ratio == pytest.approx(t.accept_ratio / t.cycle_ratio)
    assert t.verdict == stats.REGRESSED
    assert t.old.mismatch is not None and t.old.mismatch < 1e-6


def test_improvement_exits_zero():
    c = compare_runs(simulate_spec_run(1, verify=25.0), simulate_spec_run(2, verify=15.0))
    assert c.verdict == stats.IMPROVED and c.exit_code == 0


def test_quiet_machine_with_many_launches_says_unchanged():
    old = simulate_spec_run(3, launches=20, within=0.01, between=0.004)
    new = simulate_spec_run(4, launches=20, within=0.01, between=0.004)
    c = compare_runs(old, new)
    assert c.verdict == stats.UNCHANGED and c.exit_code == 0
    e = c.metric("cycle").estimate
    assert e is not None and 0.98 < e.lo and e.hi < 1.02


def test_a_a_at_the_default_noise_is_never_called_regressed_and_says_how_many_launches_to_add():
    verdicts = []
    for seed in range(30):
        c = compare_runs(simulate_spec_run(100 + seed), simulate_spec_run(200 + seed))
        verdicts.append(c.verdict)
        m = c.metric("cycle")
        if m.verdict == stats.INCONCLUSIVE and m.more_launches is not None:
            assert m.more_launches >= 1
    # 2 % launch noise against a 2 % margin: mostly INCONCLUSIVE, false alarms rare (bench: ~2 %).
    assert verdicts.count(stats.REGRESSED) <= 3
    assert verdicts.count(stats.INCONCLUSIVE) >= 15


def test_secondary_metrics_are_holm_adjusted():
    c = compare_runs(simulate_spec_run(5), simulate_spec_run(6, verify=16.0))
    secondary = [m for m in c.metrics if m.role != "primary" and m.estimate and m.estimate.p is not None]
    raw = [m.estimate.p for m in secondary]
    assert [m.p_adjusted for m in secondary] == pytest.approx(stats.holm(raw))
    assert all(m.p_adjusted >= m.estimate.p for m in secondary)
    assert c.metric("cycle").p_adjusted == c.metric("cycle").estimate.p


def test_one_launch_per_side_is_inconclusive_with_a_note():
    c = compare_runs(simulate_spec_run(1, launches=1), simulate_spec_run(2, launches=1, verify=25.0))
    m = c.metric("cycle")
    assert c.verdict == stats.INCONCLUSIVE and c.exit_code == 3
    assert m.estimate is not None and m.estimate.lo is None and "one launch" in m.note
    assert m.estimate.ratio == pytest.approx(1.5, rel=0.05)


def test_failed_launches_are_skipped_and_said():
    old = simulate_spec_run(1)
    old["launches"][2]["status"] = "error"
    old["launches"][2]["error"] = "rank 1 died"
    old["status"] = "partial"
    c = compare_runs(old, simulate_spec_run(2))
    assert c.old.launches_used == 7 and c.old.launches_total == 8
    assert any("skipped launches: 1" in w for w in c.warnings)
    assert any("partial" in w for w in c.warnings)


# --- generic metrics --------------------------------------------------------------------------


def _sweep(seed: int, slow: dict[str, float] | None = None, primary: str | None = None) -> dict:
    rng = np.random.default_rng(seed)
    sizes = {"1KiB": 12.0, "1MiB": 40.0, "64MiB": 900.0}
    launches = []
    for i in range(6):
        shift = rng.normal(0, 0.01)
        samples = {
            k: (v * (slow or {}).get(k, 1.0) * np.exp(shift + rng.normal(0, 0.02, 20))).tolist()
            for k, v in sizes.items()
        }
        launches.append(launch(samples, index=i))
    return run_record(
        launches,
        primary=primary,  # type: ignore[arg-type]
        phases=[],
        probe="collectives",
        config={"op": "all_reduce"},
        units={k: "us" for k in sizes},
    )


def test_collective_sweep_metrics_compare_generically():
    c = compare_runs(_sweep(1), _sweep(2, slow={"1MiB": 1.3}))
    assert [m.name for m in c.metrics] == ["1KiB", "1MiB", "64MiB"]
    assert all(m.role == "metric" and m.unit == "us" for m in c.metrics)
    assert c.metric("1MiB").verdict == stats.REGRESSED
    assert c.verdict == stats.REGRESSED and c.exit_code == 1  # no primary: the worst metric decides
    assert c.attribution is None and c.throughput is None


def test_server_like_phases_of_other_lengths_get_no_attribution():
    rng = np.random.default_rng(0)

    def server(seed: int) -> dict:
        r = np.random.default_rng(seed)
        las = [
            launch(
                {
                    "e2e": (2000 * np.exp(r.normal(0, 0.02, 16))).tolist(),
                    "ttft": (80 * np.exp(r.normal(0, 0.05, 16))).tolist(),
                    "itl": (15 * np.exp(r.normal(0, 0.05, 400))).tolist(),
                },
                index=i,
            )
            for i in range(4)
        ]
        return run_record(las, primary="e2e", phases=["ttft", "itl"], probe="server", config={"url": "x"})

    del rng
    c = compare_runs(server(1), server(2))
    assert c.attribution is None
    assert any("not per-cycle parts" in n for n in c.notes)
    assert [m.name for m in c.metrics] == ["e2e", "ttft", "itl"]


# --- PHANTOM --------------------------------------------------------------------------------


def test_different_clocks_and_throttling_raise_phantom():
    old = simulate_spec_run(1, sm_mhz=1980)
    new = simulate_spec_run(2, sm_mhz=1755, reasons=["sw_power_cap"])
    c = compare_runs(old, new)
    text = " | ".join(c.phantom)
    assert "SM clock" in text and "1980" in text and "1755" in text
    assert "sw_power_cap" in text
    assert c.new.clocks.throttle == {"sw_power_cap": 1.0}


def test_same_clocks_raise_no_phantom():
    c = compare_runs(simulate_spec_run(1, sm_mhz=1980), simulate_spec_run(2, sm_mhz=1980))
    assert c.phantom == []


def test_power_cap_in_the_snapshots_raises_phantom_and_env_diff_is_ranked():
    old = simulate_spec_run(1, snapshot=snapshot(env={"NCCL_ALGO": "Ring"}, packages={"torch": "2.4.0"}))
    new = simulate_spec_run(
        2, snapshot=snapshot(power_limit_w=550.0, env={"NCCL_ALGO": "Tree"}, packages={"torch": "2.5.0"})
    )
    c = compare_runs(old, new)
    assert any("power_limit_w" in p and "550" in p for p in c.phantom)
    assert c.env_diff is not None
    fields = [(d["group"], d["field"]) for d in c.env_diff]
    assert ("packages", "torch") in fields and ("env", "NCCL_ALGO") in fields
    ranks = [d["rank"] for d in c.env_diff]
    assert ranks == sorted(ranks)


def test_different_gpu_models_warn():
    c = compare_runs(
        simulate_spec_run(1, snapshot=snapshot(gpu_name="NVIDIA H200")),
        simulate_spec_run(2, snapshot=snapshot(gpu_name="NVIDIA H100 80GB HBM3")),
    )
    assert any("different GPUs" in w for w in c.warnings)


def test_a_noisy_side_raises_phantom():
    c = compare_runs(simulate_spec_run(1), simulate_spec_run(2, between=0.09))
    assert any("too noisy" in p or "noisier" in p for p in c.phantom)


def test_missing_snapshots_are_said():
    c = compare_runs(simulate_spec_run(1), simulate_spec_run(2))
    assert c.env_diff is None and "no environment snapshot" in c.env_note


# --- bad input: one line each ---------------------------------------------------------------


def test_different_probes_are_refused_unless_allowed():
    old, new = simulate_spec_run(1), simulate_spec_run(2)
    new["probe"]["name"] = "collectives"
    with pytest.raises(BadInput, match="different probes.*--allow-mismatch"):
        compare_runs(old, new)
    c = compare_runs(old, new, allow_mismatch=True)
    assert any("different probes" in w for w in c.warnings)


def test_different_configs_are_refused_naming_the_keys_but_run_lengths_may_differ():
    old = simulate_spec_run(1, config={"preset": "tiny", "verify_graph": "on", "cycles": 30})
    new = simulate_spec_run(2, config={"preset": "tiny", "verify_graph": "off", "cycles": 50})
    with pytest.raises(BadInput, match=r"verify_graph: 'on' vs 'off'") as e:
        compare_runs(old, new)
    assert "cycles" not in str(e.value) and "\n" not in str(e.value)
    c = compare_runs(old, new, allow_mismatch=True)
    assert any("verify_graph" in w and "--allow-mismatch" in w for w in c.warnings)
    same = simulate_spec_run(3, config={"preset": "tiny", "verify_graph": "on", "cycles": 50, "seed": 4})
    compare_runs(old, same)  # only measurement keys differ: fine


def test_an_empty_run_is_bad_input():
    empty = run_record([], status="failed")
    with pytest.raises(
        BadInput, match=r"OLD: the run has no launch with samples \(0 launches, status 'failed'\)"
    ):
        compare_runs(empty, simulate_spec_run(1))
    all_failed = simulate_spec_run(1, launches=2)
    for la in all_failed["launches"]:
        la["status"] = "error"
    with pytest.raises(BadInput, match="NEW: the run has no launch with samples"):
        compare_runs(simulate_spec_run(1), all_failed)


def test_a_phase_on_one_side_only_is_bad_input_unless_allowed():
    old, new = simulate_spec_run(1), simulate_spec_run(2)
    for la in new["launches"]:
        la["samples"]["sample_tokens"] = [0.1] * len(la["samples"]["cycle"])
    with pytest.raises(BadInput, match="metric 'sample_tokens' is in NEW only, not in OLD"):
        compare_runs(old, new)
    c = compare_runs(old, new, allow_mismatch=True)
    assert "sample_tokens" not in [m.name for m in c.metrics]
    assert any("left out" in w for w in c.warnings)


def test_a_snapshot_given_as_a_run_is_bad_input():
    with pytest.raises(BadInput, match="is a snapshot record; a run record is needed here.*regdiag diff"):
        compare_runs(snapshot(), simulate_spec_run(1))


def test_different_primaries_and_junk_samples_are_bad_input():
    new = with_changes(simulate_spec_run(2), primary="decode")
    for la in new["launches"]:
        la["samples"]["decode"] = list(la["samples"]["cycle"])
    with pytest.raises(BadInput, match="different things: primary 'cycle'"):
        compare_runs(simulate_spec_run(1), new)
    junk = simulate_spec_run(2)
    junk["launches"][0]["samples"]["verify"][3] = "fast"
    with pytest.raises(BadInput, match=r"launch 0 samples\['verify'\]\[3\] is 'fast', not a number"):
        compare_runs(simulate_spec_run(1), junk)
    with pytest.raises(BadInput, match="margin"):
        compare_runs(simulate_spec_run(1), simulate_spec_run(2), margin=0)


def test_the_result_is_strict_json():
    c = compare_runs(simulate_spec_run(1, launches=1), simulate_spec_run(2, launches=1))
    d = c.to_dict()
    text = json.dumps(d, allow_nan=False)
    back = json.loads(text)
    assert back["verdict"] == "INCONCLUSIVE" and back["exit_code"] == 3
    assert back["metrics"][0]["name"] == "cycle" and back["metrics"][0]["estimate"]["lo"] is None
    assert back["schema"] == "regdiag.comparison/1"


def test_bootstrap_method_gives_the_same_verdict_on_a_clear_case():
    old = simulate_spec_run(11, verify=15.0)
    new = simulate_spec_run(12, verify=25.0)
    c = compare_runs(old, new, method="bootstrap", seed=3)
    assert c.verdict == stats.REGRESSED and c.method == "bootstrap"
    assert c.attribution is not None and c.attribution.dominant == "verify"
    again = compare_runs(old, new, method="bootstrap", seed=3)
    assert again.to_dict() == c.to_dict()
    assert math.isfinite(c.metric("verify").estimate.lo)


def test_tok_s_counts_every_sequence_of_a_batch():
    cfg = {"preset": "tiny", "batch": 4}
    c = compare_runs(simulate_spec_run(1, config=cfg), simulate_spec_run(2, config=cfg, verify=25.0))
    assert c.throughput is not None
    assert c.throughput.old.tok_s == pytest.approx(400, rel=0.03)
    assert c.throughput.new.tok_s == pytest.approx(267, rel=0.03)
