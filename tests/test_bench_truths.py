"""What the engines' bench files say, read right: tpot is per token (explain's cycle is tpot x the
accept length), vLLM's acceptance length is read by explain as compare reads it, and more failed
requests is a regression. Files: vLLM's real ones (tests/data/peer/README.md) and SGLang bench_serving
lines written by hand in the shape of sglang/benchmark/serving.py (no SGLang runs here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from regdiag import explain, importers
from regdiag.importers.vllm_bench import ACCEPT_LENGTH_KEYS, JUDGED, unit_of

DATA = Path(__file__).resolve().parent / "data"
PEER = DATA / "peer"


def _sglang_line(**change: Any) -> dict[str, Any]:
    first = json.loads((DATA / "sglang-bench-serving.jsonl").read_text().splitlines()[0])
    return first | change


# --- explain: the cycle of a bench file --------------------------------------------------------------


def test_sglang_tpot_is_per_token_so_the_cycle_is_tpot_times_the_accept_length(tmp_path: Path) -> None:
    f = tmp_path / "sgl.jsonl"
    f.write_text(json.dumps(_sglang_line(median_tpot_ms=5.24, accept_length=2.05)) + "\n")
    e = explain.explain_run(importers.load_run(f), decode_ms=8.0)
    t = e.throughput
    assert t is not None
    assert t.cycle_ms == pytest.approx(5.24 * 2.05)
    assert t.tok_s == pytest.approx(1e3 / 5.24)  # 191 tok/s: one token per tpot, not 391
    assert t.speedup == pytest.approx(8.0 / 5.24)  # 1.53x, not 3.13x
    assert t.sources["cycle"].startswith("median tpot 5.24 ms x accept length 2.05")
    assert t.sources["accept_len"] == "mean accept_length of the bench file"


def test_vllm_acceptance_length_is_read_and_the_cycle_is_tpot_times_it() -> None:
    run = importers.load_run(DATA / "vllm-bench-serve-0.32.0.json")  # real: vLLM 0.32.0, n-gram, k 3
    la = run["launches"][0]
    tpot, acc = la["samples"]["tpot"][0], la["scalars"]["spec_decode_acceptance_length"]
    e = explain.explain_run(run, decode_ms=30.0)
    t = e.throughput
    assert t is not None, e.notes
    assert t.accept_len == acc == 1.2
    assert t.sources["accept_len"] == "mean spec_decode_acceptance_length of the bench file"
    assert t.cycle_ms == pytest.approx(tpot * acc) and t.tok_s == pytest.approx(1e3 / tpot)


def test_one_table_of_accept_length_keys_for_compare_and_explain() -> None:
    assert set(ACCEPT_LENGTH_KEYS) <= set(JUDGED)
    assert all(unit_of(k) == ("tokens/step", "higher") for k in ACCEPT_LENGTH_KEYS)


def test_a_bench_file_of_e2e_only_has_no_cycle(tmp_path: Path) -> None:
    doc = json.loads((PEER / "vllm-bench-failed.json").read_text())
    doc = {k: v for k, v in doc.items() if "tpot" not in k and "itl" not in k} | {
        "spec_decode_acceptance_length": 1.5
    }
    f = tmp_path / "v.json"
    f.write_text(json.dumps(doc))
    run = importers.load_run(f)
    assert run["primary"] == "e2e"
    e = explain.explain_run(run)
    assert e.throughput is None
    assert any("e2e is a whole request's time, not a cycle: pass --cycle-ms" in n for n in e.notes)
