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


# --- compare: failed requests change the verdict -----------------------------------------------------

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times")
PER_REQUEST += ("generated_texts", "errors")


def _vllm_file(path: Path, requests: int, failed: int, scale: float) -> Path:
    """The real `--save-detailed` file of tests/data/peer (vLLM 0.32.0: 4 requests answered, 2 HTTP 500)
    grown to `requests`, `failed` of them as vLLM writes a failed one (its own failed entries: latency
    and ttft 0.0, no gaps, the error), the answered ones its answered entries, times x `scale`."""
    doc = json.loads((PEER / "vllm-bench-failed-detailed.json").read_text())
    good = [i for i, e in enumerate(doc["errors"]) if not e]
    bad = [i for i, e in enumerate(doc["errors"]) if e]
    picks = [good[k % len(good)] for k in range(requests - failed)] + [
        bad[k % len(bad)] for k in range(failed)
    ]
    out = {k: v for k, v in doc.items() if k not in PER_REQUEST}
    for k in PER_REQUEST:
        out[k] = [doc[k][i] for i in picks]
    for k in ("ttfts", "latencies"):
        out[k] = [x * scale for x in out[k]]
    out["itls"] = [[x * scale for x in g] for g in out["itls"]]
    out |= {"num_prompts": requests, "completed": requests - failed, "failed": failed}
    path.write_text(json.dumps(out))
    return path


def _side(tmp_path: Path, name: str, failed: list[int]) -> dict[str, Any]:
    """Three benchmark runs of 64 requests a side, one record (the runs are launches, as
    --append-result repeats are)."""
    files = [
        _vllm_file(tmp_path / f"{name}{k}.json", 64, f, s)
        for k, (f, s) in enumerate(zip(failed, (1.0, 1.004, 0.997), strict=True))
    ]
    runs = [importers.load_run(f) for f in files]
    run = runs[0]
    run["launches"] = [dict(r["launches"][0], index=k) for k, r in enumerate(runs)]
    return run


@pytest.mark.parametrize(("old", "new"), [([2, 2, 2], [16, 16, 16]), ([0, 0, 0], [16, 16, 16])])
def test_more_failed_requests_is_a_regression(tmp_path: Path, old: list[int], new: list[int]) -> None:
    from regdiag.compare import compare_runs
    from regdiag.report.text import headline

    c = compare_runs(_side(tmp_path, "o", old), _side(tmp_path, "n", new))
    tpot = next(m for m in c.metrics if m.name == "tpot")
    assert tpot.verdict != "REGRESSED"  # the latencies of the requests answered did not move
    assert c.verdict == "REGRESSED"
    assert c.verdict_note is not None and c.verdict_note.startswith(
        f"NEW failed more requests ({sum(old)}/192 \u2192 48/192, p "
    )
    assert f"; {c.verdict_note}" in headline(c)
    assert any(
        w.startswith(f"failed requests: {sum(old)} of 192 in OLD, 48 of 192 in NEW") for w in c.warnings
    )


def test_one_failed_request_more_is_said_not_judged(tmp_path: Path) -> None:
    from regdiag.compare import compare_runs

    c = compare_runs(_side(tmp_path, "o", [0, 0, 0]), _side(tmp_path, "n", [1, 0, 0]))
    assert c.verdict != "REGRESSED" and c.verdict_note is None
    assert any("0 of 192 in OLD, 1 of 192 in NEW" in w and "p 0.5" in w for w in c.warnings)


def test_the_failed_share_test_is_fishers() -> None:
    from scipy.stats import fisher_exact

    from regdiag.compare.failures import more_often

    for o, so, n, sn in [(6, 192, 48, 192), (0, 192, 1, 192), (3, 10, 1, 10), (2, 6, 2, 6), (0, 50, 7, 20)]:
        ref = fisher_exact([[n, sn - n], [o, so - o]], alternative="greater")[1]
        assert more_often(o, so, n, sn) == pytest.approx(ref, rel=1e-9)


@pytest.mark.cli
def test_three_files_a_side_with_more_failed_requests_exit_1(tmp_path: Path) -> None:
    from conftest import run_cli

    args = []
    for side, failed in (("old", 2), ("new", 16)):
        for k, s in enumerate((1.0, 1.004, 0.997)):
            args += [f"--{side}", str(_vllm_file(tmp_path / f"{side}{k}.json", 64, failed, s))]
    p = run_cli("compare", *args)
    assert p.returncode == 1, p.stdout + p.stderr
    text = " ".join(p.stdout.split())
    assert text.startswith("REGRESSED tpot +0.0 %") and "failed more requests (6/192 \u2192 48/192, p" in text
