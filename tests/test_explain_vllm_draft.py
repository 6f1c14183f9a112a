"""explain's physics of vLLM's draft phase (its extend pass inside it) and the refused remainder when
the priced collectives exceed the decode they belong to."""

from __future__ import annotations

import json

import pytest

from regdiag import explain as ex
from tests.test_explain import _flat_latencies, _main


def _rows(e: ex.Explanation) -> dict:
    return {p.phase: p for p in e.phases}


def test_a_vllm_draft_of_kimi_k2_at_tp8_is_priced_with_its_extend_pass():
    lat = _flat_latencies(40.0, 10.0)
    sgl = _rows(ex.explain_model("kimi-k2", 8, given=ex.Given(collectives=lat, num_steps=3)))
    vll = _rows(ex.explain_model("kimi-k2", 8, given=ex.Given(collectives=lat, num_steps=3, engine="vllm")))
    # SGLang times the extend pass apart; vLLM's propose runs it first, inside its draft phase
    assert "extend" in sgl and "extend" not in vll
    d = vll["draft"]
    assert d.bytes == pytest.approx(sgl["draft"].bytes + sgl["extend"].bytes)
    assert d.tokens == sgl["extend"].tokens == 4  # the extend pass over the verified tokens (3 steps + 1)
    # EAGLE-3: 4 collectives per draft forward: the extend forward and 2 one-token forwards
    assert d.collectives == sgl["draft"].collectives + sgl["extend"].collectives == 12
    assert d.comm_ms == pytest.approx(sgl["draft"].comm_ms + sgl["extend"].comm_ms)
    assert d.floor_ms > sgl["draft"].floor_ms + sgl["extend"].bytes_floor_ms
    assert "extend pass" in " ".join(ex.explain_model("kimi-k2", 8, given=ex.Given(engine="vllm")).notes)


def _vllm_engine_run(draft_ms: float, verify_ms: float) -> dict:
    cyc = [draft_ms + verify_ms + 0.5] * 12
    la = {
        "index": 0,
        "status": "ok",
        "processes_timed": 8,
        "header": {"config": {"preset": "vllm-eagle"}},
        "samples": {"cycle": cyc, "verify": [verify_ms] * 12, "draft": [draft_ms] * 12},
        "values": {"verify_tokens": [4] * 12, "accept_len": [2.5] * 12},
        "scalars": {},
        "footer": {},
        "engine_config": {"engine": "vllm", "all_reduce": "custom"},
    }
    return {
        "schema": "regdiag.run/1",
        "kind": "probe",
        "probe": {"name": "engine", "config": {"preset": "vllm-eagle", "num_steps": 3}},
        "primary": "cycle",
        "phases": ["verify", "draft"],
        "units": {"cycle": "ms", "verify": "ms", "draft": "ms"},
        "launches": [la],
    }


def test_a_vllm_engine_run_prices_its_draft_as_vllm_runs_it():
    lat = _flat_latencies(40.0, 10.0)
    run = _vllm_engine_run(4.0, 20.0)
    e = ex.explain_run(run, given=ex.Given(model="kimi-k2", collectives=lat))
    d = _rows(e)["draft"]
    assert d.tokens == 4 and d.collectives == 12  # the extend forward and 2 one-token forwards
    assert any("vLLM's draft phase includes its extend pass" in n for n in e.notes)
    # --engine sglang says otherwise: 2 one-token forwards, the extend pass left to a phase it lacks
    e2 = ex.explain_run(run, given=ex.Given(model="kimi-k2", collectives=lat, engine="sglang"))
    assert _rows(e2)["draft"].collectives == 8


def test_collectives_priced_above_the_decode_they_belong_to_refuse_the_remainder(capsys):
    """124 collectives per Kimi-K2.5 forward at TP=8, priced at a record's 150 us each (an eager NCCL
    over PCIe, say) cost 18.6 ms, more than the 12.2 ms decode that issues them: that record did not
    measure what this engine paid, and a remainder computed from it would be fiction."""
    lat = _flat_latencies(150.0, 150.0)
    g = ex.Given(decode_ms=12.2, verify_ms=29.0, collectives=lat)
    e = ex.explain_model("kimi-k2.5", 8, given=g)
    assert _rows(e)["decode"].comm_ms == pytest.approx(124 * 0.150)
    assert e.remainder() is None
    line = e.physics_line() or ""
    head = "no remainder: decode's collectives priced at 18.6 ms exceed the decode itself, 12.2 ms"
    assert line.startswith(head)
    assert "flat is not the path this engine used" in line
    assert e.to_dict()["physics_remainder_ms"] is None and e.to_dict()["physics_refused"] == line
    # priced within the decode: a remainder as before
    ok = ex.Given(decode_ms=12.2, verify_ms=29.0, collectives=_flat_latencies(40.0, 10.0))
    assert ex.explain_model("kimi-k2.5", 8, given=ok).remainder() is not None


def test_the_engines_own_all_reduce_is_named_in_the_refusal():
    run = _vllm_engine_run(4.0, 3.0)
    run["launches"][0]["engine_config"]["all_reduce"] = "nccl via P2P/IPC"
    e = ex.explain_run(run, given=ex.Given(model="kimi-k2", collectives=_flat_latencies(150.0, 150.0),
                                           decode_ms=2.0))  # fmt: skip
    assert "(the engine's all-reduce: nccl via P2P/IPC)" in (e.comm_refused() or "")


def test_explain_engine_option(capsys):
    args = ("explain", "--preset", "kimi-k2", "--tp", "8", "--engine", "vllm", "--json")
    code, out, err = _main(capsys, *args)
    assert code == 0, err
    rows = {p["phase"]: p for p in json.loads(out)["phases"]}
    assert "extend" not in rows and rows["draft"]["collectives"] == 8  # 2 steps: extend + 1 forward
    code, _, err = _main(capsys, "explain", "--preset", "kimi-k2", "--engine", "tgi")
    assert code == 2 and "--engine must be sglang or vllm" in err
