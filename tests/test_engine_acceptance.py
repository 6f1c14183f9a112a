"""Acceptance as a signal (regdiag.engine.acceptance): a launch's accept lengths as a series, checked
for drift as cycle times are; the run's launch means for a trend; the verify size as a distribution
(adaptive speculation). The end-to-end test runs the fake engine of tests/engine_fake with a draft
that loses its grip over a long launch, through the real hook."""

from __future__ import annotations

import json

import numpy as np
import pytest
from server_helpers import free_port
from test_engine_probe import FAKE_PHASES, _fake_server

from regdiag import explain as ex
from regdiag.engine import acceptance as A
from regdiag.models import preset_shape
from regdiag.roofline import roofline


def _noisy(levels: np.ndarray, seed: int = 0) -> list[float]:
    """Accept lengths per cycle: 1 + accepted drafts out of 3, each accepted with the level's rate."""
    rng = np.random.default_rng(seed)
    return [float(1 + rng.binomial(3, p)) for p in levels]


def test_a_draft_losing_its_grip_is_flagged_a_steady_one_is_not():
    drifting = A.series_check(_noisy(np.linspace(0.7, 0.35, 400)))  # 3.1 -> 2.05 tokens a cycle
    assert drifting is not None and drifting["flagged"] and drifting["drift_pct"] < -20
    assert drifting["rho"] < -0.9 and drifting["p"] < 0.05 and len(drifting["block_means"]) == A.BLOCKS
    steady = [A.series_check(_noisy(np.full(400, 0.55), seed)) for seed in range(20)]
    assert sum(s["flagged"] for s in steady if s) <= 1  # the test's own 5 % false alarms, at most
    assert A.series_check([2.0] * 15) is None  # too short to tell
    warn = A.warnings([{"index": 0, "acceptance": {"series": drifting, "accept_len_mean": 2.5}}])
    assert len(warn) == 1 and warn[0].startswith("launch 0: the accept length drifts over the launch")


def test_launch_means_trend_and_a_verify_size_that_varies():
    assert A.launches_check([2.6, 2.5, 2.4, 2.3, 2.2, 2.1])["flagged"]
    assert not A.launches_check([2.4, 2.5, 2.4, 2.5, 2.4, 2.5])["flagged"]
    assert A.launches_check([2.6, 2.5, 2.4]) is None
    dist = A.tokens_distribution([4] * 70 + [3] * 30)
    assert dist == {4: 0.7, 3: 0.3} and A.varies(dist)
    assert not A.varies(A.tokens_distribution([4] * 95 + [3] * 5))
    la = {"index": 1, "acceptance": A.launch_acceptance({"verify_tokens": [4] * 70 + [3] * 30})}
    assert any("vary within launch(es) 1" in w for w in A.warnings([la]))


def test_explain_weighs_the_verify_sizes_of_an_adaptive_run():
    """60 % of cycles verify 4 tokens, 40 % 2: verify's bytes are 0.6 x bytes(4) + 0.4 x bytes(2),
    not bytes(4) (the median)."""
    from compare_helpers import launch, run_record

    la = launch(
        {"cycle": [30.0] * 20, "verify": [20.0] * 20},
        values={"accept_len": [2.0] * 20, "verify_tokens": [4] * 12 + [2] * 8},
    )
    run = run_record([la], phases=["verify"], probe="engine", config={"preset": "vllm"})
    e = ex.explain_run(run, model="kimi-k2.5")
    (v,) = [p for p in e.phases if p.phase == "verify"]
    shape = preset_shape("kimi-k2.5", None, 1, "preset")
    b = {n: roofline("verify", shape, {"num_draft_tokens": n}, 2, 4.24e12, None, None).bytes for n in (2, 4)}
    assert v.bytes == pytest.approx(0.6 * b[4] + 0.4 * b[2])
    assert any("4 tokens 60 %, 2 tokens 40 %" in n for n in e.notes)


@pytest.mark.launch
@pytest.mark.engine
def test_an_accept_length_drift_in_a_long_run_is_flagged(cli, tmp_path):
    """A real launch of the fake engine whose draft accepts 3 drafts at first and 0 after 150 cycles."""
    port = free_port()
    out = tmp_path / "drift.json"
    env = "FAKE_ACCEPT_FROM=3 FAKE_ACCEPT=0 FAKE_ACCEPT_OVER=150 "
    env += "FAKE_VERIFY_N=300 FAKE_DRAFT_N=300 FAKE_EXTEND_N=100"
    r = cli(
        "probe",
        "engine",
        *_fake_server(port, workers=1, env=env),
        *FAKE_PHASES,
        "-L",
        "1",
        "-R",
        "1",
        "--max-tokens",
        "400",
        "-o",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    run = json.loads(out.read_text())
    s = run["launches"][0]["acceptance"]["series"]
    assert s["flagged"] and s["drift_pct"] < -40 and s["cycles"] >= 60
    assert any("the accept length drifts over the launch" in w for w in run["warnings"])
    assert "the accept length drifts over the launch" in r.stdout  # said where the run is shown
    r = cli("explain", str(out), "--json")
    assert r.returncode == 0 and any("accept length drifts" in n for n in json.loads(r.stdout)["notes"])


def test_per_position_rates_from_the_rejection_samplers_rows():
    """vLLM V1's sampled_token_ids: per request the accepted drafts, the bonus, -1 for rejected
    places. Requests accepting 3, 1 and 0 of 3 drafts: position 1 by 2 of 3, 2 and 3 by 1 of 3."""
    import importlib.util

    path = A.__file__.replace("regdiag/engine/acceptance.py", "probes/_engine_hook/regdiag_phase_readers.py")
    spec = importlib.util.spec_from_file_location("regdiag_phase_readers_t", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [[5, 6, 7, 8], [9, 4, -1, -1], [3, -1, -1, -1]]
    got = mod._positions(rows, {"reduce": "count_ne", "value": -1})
    assert got == pytest.approx({"accept_pos1": 2 / 3, "accept_pos2": 1 / 3, "accept_pos3": 1 / 3}, abs=1e-4)
    # a third cycle drafted nothing (its rows have no position): it counts 0 at every position
    values = {"accept_len": [2.0, 3.0, 1.0], "accept_pos1": [0.5, 1.0], "accept_pos2": [0.5, 1.0]}
    assert A.per_position_rates(values) == [0.5, 0.5] and set(values) == {"accept_len"}
    assert 1 + 0.5 + 0.5 == pytest.approx((2.0 + 3.0 + 1.0) / 3)
    assert A.per_position_rates({"accept_len": [2.0]}) is None
