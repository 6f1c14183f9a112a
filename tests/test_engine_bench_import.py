"""The engines' own benchmark files as run records: a `vllm bench serve --save-result` JSON written
by vLLM 0.32.0 (CPU build) against the test server of tests/test_vllm_server.py (which also makes new
ones and compares them), and an SGLang bench_serving JSONL written by hand in the shape of
sglang/bench_serving.py's `result` (no SGLang runs here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from regdiag.errors import BadInput
from regdiag.importers import load_run

DATA = Path(__file__).resolve().parent / "data"


def test_vllm_bench_file_becomes_a_run_with_units_and_directions():
    run = load_run(DATA / "vllm-bench-serve-0.32.0.json")
    assert run["imported"]["format"] == "vllm-bench" and run["primary"] == "tpot"
    la = run["launches"][0]
    # Without --save-detailed the file keeps per-request latencies only: e2e per request, medians else.
    assert len(la["samples"]["e2e"]) == 6 and la["samples"]["tpot"] == [pytest.approx(28.577948, abs=1e-6)]
    assert la["scalars"]["spec_decode_acceptance_length"] == 1.2
    assert run["better"]["output_throughput"] == "higher" and run["units"]["output_throughput"] == "tok/s"
    assert run["better"]["median_ttft_ms"] == "lower" and run["better"]["completed"] == "context"
    assert run["probe"]["config"]["max_concurrency"] == 2 and run["labels"]["model_id"] == "tiny"


def test_sglang_bench_lines_are_runs_picked_by_number(cli):
    path = DATA / "sglang-bench-serving.jsonl"
    one = load_run(path, select="0")
    assert one["primary"] == "tpot" and one["launches"][0]["samples"]["tpot"] == [11.6]
    assert one["launches"][0]["scalars"]["accept_length"] == 2.6
    detailed = load_run(path, select="1")
    la = detailed["launches"][0]
    assert la["samples"]["ttft"] == pytest.approx([88.0, 90.0, 86.0, 92.0])
    assert la["samples"]["itl"] == pytest.approx([47.5, 47.5, 48.0, 48.5])
    r = cli("compare", f"{path}#0", f"{path}#1", "--json", "--allow-mismatch")
    assert r.returncode in (1, 3), r.stderr
    assert json.loads(r.stdout)["primary"] == "tpot"


def test_a_broken_bench_file_is_one_line(tmp_path):
    bad = tmp_path / "b.json"
    bad.write_text('{"request_throughput": 1, "tokenizer_id": "x"')
    with pytest.raises(BadInput, match="truncated JSON"):
        load_run(bad)
