"""`regdiag ingest-log`: SGLang decode lines (both forms), vLLM metrics lines, garbage around them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from regdiag.records import load_record
from regdiag.server.logparse import parse_file, parse_lines
from regdiag.server.record import log_launch

DATA = Path(__file__).parent / "data"


def kept(parse, key: str) -> list:  # type: ignore[no-untyped-def]
    return [iv[key] for iv in parse.intervals if not iv["warmup"] and key in iv]


def test_sglang_older_dot_form_with_prefill_requests_and_a_traceback() -> None:
    p = parse_file(str(DATA / "sglang_decode_dot.log"))
    assert p.counts() == {
        "lines": 20,
        "intervals": 7,
        "by_source": {"sglang-decode": 7},
        "warmup": 2,
        "prefill_lines": 2,
        "skipped": 10,
        "malformed": 1,
        "malformed_lines": [17],
    }
    assert (
        p.formats == {"sglang-decode-dot", "sglang-prefill"} and p.ranks == {"TP0"} and p.engine == "sglang"
    )
    # Warm-up: the first decode line (after a prefill into an empty batch, line 8) and the one after
    # a 32 s gap (line 13). A prefill that joins a running batch (line 14) is not idle.
    assert [iv["line"] for iv in p.intervals if iv["warmup"]] == [8, 13]
    assert kept(p, "accept_len") == [2.10, 1.95, 2.00, 1.90, 1.85]
    assert kept(p, "cuda_graph") == [True, True, True, True, False]
    assert kept(p, "running_req") == [1, 1, 1, 2, 2]
    assert kept(p, "tp_rank") == [0] * 5

    la = log_launch(p, str(DATA / "sglang_decode_dot.log"), 0)
    itl = [1000 / 60.12, 1000 / 58.40, 1000 / 59.88, 2000 / 105.20, 2000 / 70.00]
    assert la["samples"]["itl"] == pytest.approx(itl, abs=1e-4)
    assert la["samples"]["cycle"] == pytest.approx(
        [x * a for x, a in zip(itl, [2.10, 1.95, 2.00, 1.90, 1.85], strict=True)], abs=1e-3
    )
    assert la["values"]["cuda_graph"] == [1, 1, 1, 1, 0]
    assert la["scalars"]["accept_len_mean"] == pytest.approx(1.96)
    assert la["warmup_dropped"] == 2 and la["status"] == "ok"


def test_sglang_newer_comma_form_with_dp_ranks() -> None:
    p = parse_file(str(DATA / "sglang_decode_comma.log"))
    c = p.counts()
    got = tuple(c[k] for k in ("lines", "intervals", "warmup", "prefill_lines", "skipped", "malformed"))
    assert got == (13, 6, 2, 2, 4, 1)
    assert c["malformed_lines"] == [12]  # "cuda graph: maybe"
    assert p.formats == {"sglang-decode-comma", "sglang-prefill"} and p.ranks == {"DP0 TP0", "DP1 TP1"}
    assert [iv["line"] for iv in p.intervals if iv["warmup"]] == [5, 6]  # the first of each rank
    assert kept(p, "accept_rate") == [0.54, 0.52, 0.47, 0.50]
    assert kept(p, "dp_rank") == [0, 1, 0, 1]
    # The hybrid-model line: "#full token" is the tokens in use, "cpu graph" the graph flag.
    last = p.intervals[-1]
    assert (
        last["line"] == 11
        and last["tokens_used"] == 900
        and last["cuda_graph"] is False
        and last["queue_req"] == 1
    )

    only = parse_file(str(DATA / "sglang_decode_comma.log"), rank="DP1  TP1")
    assert [iv["line"] for iv in only.intervals] == [6, 8, 11]


def test_vllm_v1_throughput_and_specdecoding_lines() -> None:
    p = parse_file(str(DATA / "vllm_v1.log"))
    c = p.counts()
    got = tuple(c[k] for k in ("lines", "intervals", "warmup", "skipped", "malformed"))
    assert got == (11, 5, 1, 5, 1)
    assert c["by_source"] == {"vllm-throughput": 3, "vllm-spec": 2}
    spec = [iv for iv in p.intervals if iv["source"] == "vllm-spec"]
    assert [iv["accept_len"] for iv in spec] == [2.40, 2.50]
    assert [iv["drafts"] for iv in spec] == [170, 328]  # drafted / k, k = entries of the per-position list
    assert spec[1]["per_position"] == [0.750, 0.500, 0.250]
    la = log_launch(p, str(DATA / "vllm_v1.log"), 0)
    assert la["samples"]["itl"] == pytest.approx([1000 / 81.9, 2000 / 160.0], abs=1e-4)
    assert la["scalars"]["accept_len_mean"] == pytest.approx(1 + (238 + 492) / (170 + 328), abs=1e-4)
    assert la["scalars"]["accept_rate"] == pytest.approx(730 / 1494, abs=1e-4)


def test_vllm_older_forms_and_v0_cumulative_counters() -> None:
    p = parse_file(str(DATA / "vllm_older.log"))
    assert p.formats == {"vllm-throughput", "vllm-speculative-v0", "vllm-specdecoding"}
    spec = [iv for iv in p.intervals if iv["source"] == "vllm-spec"]
    # V0 prints totals: intervals are differences (the first line only sets the start).
    assert [round(iv["accept_len"], 4) for iv in spec if "accept_len" in iv] == [2.8, 2.8, 2.46]
    assert [iv["accept_rate"] for iv in spec] == pytest.approx([0.6, 0.6, 146 / 300, 0.4])
    assert "drafts" not in spec[-1]  # no mean length and no per-position list: rate only
    la = log_launch(p, str(DATA / "vllm_older.log"), 0)
    assert la["scalars"]["accept_len_mean"] == pytest.approx(1 + (180 + 180 + 146) / 300, abs=1e-4)


def test_garbage_interleaved_changes_nothing() -> None:
    lines = (DATA / "sglang_decode_dot.log").read_text().splitlines()
    rng = random.Random(7)
    junk = [
        "",
        "\x00\x01\x02",
        "Decode batch",
        "Decode batch size list: [1, 2]",
        "[2025-06-12 14:03:07 TP0] ",
        "x" * 5000,
        "SpecDecodingmetrics",
        "Prefill batch without numbers",
        "#running-req: 3, gen throughput",
    ]
    noisy: list[str] = []
    for ln in lines:
        noisy.extend(rng.choice(junk) for _ in range(rng.randrange(3)))
        noisy.append(ln)
    clean, dirty = parse_lines(lines), parse_lines(noisy)
    strip = [{k: v for k, v in iv.items() if k != "line"} for iv in clean.intervals]
    assert [{k: v for k, v in iv.items() if k != "line"} for iv in dirty.intervals] == strip
    assert dirty.skipped + dirty.malformed + len(dirty.intervals) + dirty.prefill_lines == len(noisy)


def test_cli_record_and_json(cli, tmp_path: Path) -> None:
    out = tmp_path / "log.json"
    p = cli(
        "ingest-log",
        str(DATA / "sglang_decode_dot.log"),
        str(DATA / "sglang_decode_comma.log"),
        "-o",
        str(out),
        "--json",
    )
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["status"] == "complete" and len(summary["launches"]) == 2
    run = load_record(out, "run")
    assert run["kind"] == "log" and run["primary"] == "itl" and run["phases"] == ["itl", "cycle"]
    assert run["phases_sum_to_primary"] is False
    assert [la["index"] for la in run["launches"]] == [0, 1]
    assert run["launches"][0]["header"]["sha256"] and run["launches"][1]["header"]["engine"] == "sglang"
    assert load_record(summary["path"], "run")["id"] == run["id"]  # also stored with the other runs


def test_cli_human_output(cli) -> None:
    p = cli("ingest-log", str(DATA / "sglang_decode_comma.log"))
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())  # a sentence wraps between words at the terminal's width
    assert "13 lines, 6 intervals (2 warm-up dropped), 4 other lines skipped, 1 malformed" in text
    assert "accept len 2.52" in text


def test_cli_garbage_is_one_line_exit_2(cli) -> None:
    p = cli("ingest-log", str(DATA / "garbage.log"))
    assert p.returncode == 2
    assert p.stderr == (
        f"regdiag: error: {DATA / 'garbage.log'}: no SGLang 'Decode batch' or vLLM metrics lines among 6 lines (1 malformed)\n"
    )


def test_only_warmup_intervals_is_an_error_launch(tmp_path: Path) -> None:
    f = tmp_path / "one.log"
    f.write_text(
        "[2025-06-12 14:03:06 TP0] Decode batch. #running-req: 1, #token: 64, token usage: 0.00, "
        "gen throughput (token/s): 41.32, #queue-req: 0\n"
    )
    la = log_launch(parse_file(str(f)), str(f), 0)
    assert (
        la["status"] == "error"
        and la["error"] == "all 1 intervals are warm-up (first after idle); nothing left to measure"
    )
