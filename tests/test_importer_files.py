"""Other tools' files the importers used to refuse, read as runs: vLLM bench files with failed requests
and `--append-result` JSON Lines (real files, vLLM 0.32.0 against a stand-in server:
tests/data/peer/README.md), SGLang bench_serving lines in the same shapes (written here by hand from
sglang/benchmark/serving.py: no SGLang runs here), hyperfine's summary-only exports (made by hyperfine
in the test), and nsys reports with long kernel names, of two kinds in one file, or printed as the
console table (hand-made: nsys does not run here). Every time is checked in ms, after import_text's
conversion."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from test_cli_bad_input import one_error_line

from regdiag import direction, importers
from regdiag.errors import BadInput
from regdiag.importers import nsys

DATA = Path(__file__).resolve().parent / "data"
PEER = DATA / "peer"
needs_hyperfine = pytest.mark.skipif(shutil.which("hyperfine") is None, reason="hyperfine not installed")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _declared(run: dict[str, Any], metric: str) -> tuple[str, str]:
    """(unit, direction) of a metric, the direction as compare takes it (declared, not guessed)."""
    way, source = direction.direction(metric, run["units"][metric], run["better"])
    assert source == "declared", metric
    return run["units"][metric], way


# --- vLLM: failed requests -------------------------------------------------------------------------


def test_vllm_failed_requests_are_left_out_and_counted() -> None:
    path = PEER / "vllm-bench-failed-detailed.json"
    doc = json.loads(path.read_text())
    assert doc["failed"] == 2 and doc["completed"] == 4 and doc["latencies"].count(0.0) == 2
    run = importers.load_run(path)
    assert run["status"] == "complete" and run["primary"] == "tpot"
    (la,) = run["launches"]
    assert la["status"] == "ok" and la["error"] is None
    ok = [i for i, e in enumerate(doc["errors"]) if not e]
    assert la["samples"]["e2e"] == pytest.approx([doc["latencies"][i] * 1e3 for i in ok])
    assert la["samples"]["ttft"] == pytest.approx([doc["ttfts"][i] * 1e3 for i in ok])
    tpot = [(doc["latencies"][i] - doc["ttfts"][i]) * 1e3 / (doc["output_lens"][i] - 1) for i in ok]
    assert la["samples"]["tpot"] == pytest.approx(tpot)
    itl = [sum(doc["itls"][i]) / len(doc["itls"][i]) * 1e3 for i in ok]
    assert la["samples"]["itl"] == pytest.approx(itl)
    assert all(run["units"][m] == "ms" for m in ("e2e", "ttft", "tpot", "itl"))
    assert la["scalars"]["failed_requests"] == 2 and "failed" not in la["scalars"]
    assert _declared(run, "failed_requests") == ("requests", "lower")
    assert la["scalars"]["median_tpot_ms"] == pytest.approx(doc["median_tpot_ms"])  # ms as written


def test_vllm_failed_requests_without_details_keep_the_other_latencies() -> None:
    path = PEER / "vllm-bench-failed.json"
    doc = json.loads(path.read_text())
    assert "errors" not in doc and doc["failed"] == 2
    la = importers.load_run(path)["launches"][0]
    assert la["samples"]["e2e"] == pytest.approx([x * 1e3 for x in doc["latencies"] if x > 0])
    assert len(la["samples"]["e2e"]) == doc["completed"] == 4
    assert la["samples"]["tpot"] == [pytest.approx(doc["median_tpot_ms"])]  # no lists: the median, in ms
    assert la["scalars"]["failed_requests"] == 2
    assert la["scalars"]["duration"] == pytest.approx(doc["duration"] * 1e3)  # s as written, then ms


def test_a_vllm_file_with_failed_requests_compares() -> None:
    path = PEER / "vllm-bench-failed-detailed.json"
    p = run_cli("compare", str(path), str(path), "--json")
    assert p.returncode == 3, p.stderr  # one benchmark run a side: no CI, but no refusal
    out = json.loads(p.stdout)
    assert out["primary"] == "tpot" and out["old"]["launches_used"] == 1


def test_a_vllm_file_whose_requests_all_failed_is_a_failed_launch() -> None:
    path = PEER / "vllm-bench-all-failed.json"
    assert json.loads(path.read_text())["completed"] == 0
    run = importers.load_run(path)
    assert run["status"] == "failed" and run["primary"] == "tpot"
    (la,) = run["launches"]
    assert la["status"] == "error" and la["samples"] == {}
    assert la["error"] == "all 6 requests failed; first: Internal Server Error"
    assert la["scalars"]["failed_requests"] == 6
    line = one_error_line(run_cli("compare", str(path), str(path)))
    assert "no launch with samples" in line


# --- vLLM: --append-result ---------------------------------------------------------------------------


def test_vllm_appended_repeats_are_launches_of_one_run() -> None:
    path = PEER / "vllm-bench-append-repeats.jsonl"
    lines = _lines(path)
    assert len(lines) == 3 and len({ln["date"] for ln in lines}) == 3
    run = importers.load_run(path)
    assert run["select"] == "bench" and run["probe"]["config"]["max_concurrency"] == 2
    assert [la["index"] for la in run["launches"]] == [0, 1, 2]
    for la, ln in zip(run["launches"], lines, strict=True):
        assert la["samples"]["tpot"] == [pytest.approx(ln["median_tpot_ms"])]
        assert la["samples"]["e2e"] == pytest.approx([x * 1e3 for x in ln["latencies"]])
        assert la["scalars"]["request_goodput"] == pytest.approx(ln["request_goodput"])
        assert la["scalars"]["output_throughput"] == pytest.approx(ln["output_throughput"])
        assert la["scalars"]["failed_requests"] == 0
        assert la["duration_s"] == pytest.approx(ln["duration"])
    assert _declared(run, "request_goodput") == ("req/s", "higher")
    assert _declared(run, "output_throughput") == ("tok/s", "higher")
    p = run_cli("compare", str(path), str(path), "--json")
    assert p.returncode in (0, 3), p.stderr
    out = json.loads(p.stdout)
    assert out["old"]["launches_used"] == 3 and out["primary"] == "tpot"


def test_vllm_appended_lines_of_different_loads_are_picked_by_number() -> None:
    path = PEER / "vllm-bench-append-sweep.jsonl"
    runs = importers.import_text(path.read_text(), str(path))
    assert [r["select"] for r in runs] == ["0", "1"]
    assert [r["probe"]["config"]["max_concurrency"] for r in runs] == [1, 3]
    with pytest.raises(BadInput, match=r"holds 2 results \('0', '1'\): pick one as"):
        importers.load_run(path)
    second = importers.load_run(path, select="1")
    assert second["launches"][0]["samples"]["e2e"] == pytest.approx(
        [x * 1e3 for x in _lines(path)[1]["latencies"]]
    )
    line = one_error_line(run_cli("compare", f"{path}#0", f"{path}#1"))
    assert "max_concurrency" in line  # two loads: refused as any two configs are


def test_a_broken_line_of_a_vllm_jsonl_is_named(tmp_path: Path) -> None:
    text = (PEER / "vllm-bench-append-repeats.jsonl").read_text().splitlines()
    bad = tmp_path / "b.jsonl"
    bad.write_text("\n".join([text[0], text[1][:-40], text[2]]) + "\n")
    with pytest.raises(BadInput, match=r"b\.jsonl line 2: malformed vllm bench serve JSON"):
        importers.load_run(bad)


# --- directions of the summary numbers ---------------------------------------------------------------


def test_accept_length_throughput_and_goodput_are_metrics_with_directions() -> None:
    run = importers.load_run(DATA / "vllm-bench-serve-0.32.0.json")
    la = run["launches"][0]
    assert la["scalars"]["spec_decode_acceptance_length"] == 1.2
    assert _declared(run, "spec_decode_acceptance_length") == ("tokens/step", "higher")
    assert la["scalars"]["output_throughput"] == pytest.approx(48.911855471760404)
    assert _declared(run, "output_throughput") == ("tok/s", "higher")
    assert _declared(run, "max_output_tokens_per_s") == ("tok/s", "higher")
    assert _declared(run, "request_throughput") == ("req/s", "higher")
    assert "request_goodput" not in la["scalars"]  # null: run without --goodput
    sgl = importers.load_run(DATA / "sglang-bench-serving.jsonl", select="0")
    assert sgl["launches"][0]["scalars"]["accept_length"] == 2.6
    assert _declared(sgl, "accept_length") == ("tokens/step", "higher")
    assert _declared(sgl, "output_throughput") == ("tok/s", "higher")


# --- SGLang: failed requests and repeats (lines written by hand in bench_serving's shape) -------------


def _sglang_line(**change: Any) -> dict[str, Any]:
    """The detailed line of tests/data/sglang-bench-serving.jsonl (4 requests), changed."""
    doc = _lines(DATA / "sglang-bench-serving.jsonl")[1]
    doc["errors"] = [""] * 4
    doc["generated_texts"] = ["a b c"] * 4
    return doc | change


def test_sglang_failed_requests_are_left_out_and_counted(tmp_path: Path) -> None:
    base = _sglang_line()
    # SGLang 0.5.23 writes a request that failed at once with ttft 0.0 and no gaps, and one that broke
    # off mid-stream with its ttft and the gaps it had; both carry their error and are not completed.
    doc = base | {
        "ttfts": [*base["ttfts"], 0.0, 0.07],
        "itls": [*base["itls"], [], [0.04]],
        "output_lens": [*base["output_lens"], 0, 0],
        "input_lens": [128] * 6,
        "generated_texts": [*base["generated_texts"], "", ""],
        "errors": ["", "", "", "", "Internal Server Error: boom", "Traceback ...\nClientPayloadError: cut"],
    }
    f = tmp_path / "sgl.jsonl"
    f.write_text(json.dumps(doc) + "\n")
    run = importers.load_run(f)
    assert run["select"] == "0" and run["status"] == "complete"
    la = run["launches"][0]
    assert la["status"] == "ok" and la["scalars"]["failed_requests"] == 2
    assert la["samples"]["ttft"] == pytest.approx([88.0, 90.0, 86.0, 92.0])
    assert la["samples"]["itl"] == pytest.approx([47.5, 47.5, 48.0, 48.5])
    e2e = [(t + sum(g)) * 1e3 for t, g in zip(base["ttfts"], base["itls"], strict=True)]
    assert la["samples"]["e2e"] == pytest.approx(e2e)
    assert _declared(run, "failed_requests") == ("requests", "lower")


def test_an_sglang_line_whose_requests_all_failed_is_a_failed_launch(tmp_path: Path) -> None:
    failed = _sglang_line(
        completed=0,
        ttfts=[0.0] * 4,
        itls=[[]] * 4,
        output_lens=[0] * 4,
        errors=["Traceback (most recent call last):\n ...\naiohttp.ClientConnectorError: refused"] * 4,
    )
    f = tmp_path / "sgl.jsonl"
    f.write_text(json.dumps(failed) + "\n")
    (la,) = importers.load_run(f)["launches"]
    assert la["status"] == "error" and la["samples"] == {}
    assert la["error"] == "all 4 requests failed; first: aiohttp.ClientConnectorError: refused"


def test_sglang_repeats_of_one_load_are_launches(tmp_path: Path) -> None:
    first = _lines(DATA / "sglang-bench-serving.jsonl")[0]
    f = tmp_path / "sgl.jsonl"
    f.write_text("".join(json.dumps(first | {"median_tpot_ms": t}) + "\n" for t in (11.6, 11.9, 11.4)))
    run = importers.load_run(f)
    assert [la["samples"]["tpot"] for la in run["launches"]] == [[11.6], [11.9], [11.4]]
    assert "failed_requests" not in run["units"]  # no details, no failed count: the file cannot say
    assert importers.load_run(f, select="0")["launches"] == run["launches"]


# --- hyperfine: summary-only exports -----------------------------------------------------------------


@needs_hyperfine
@pytest.mark.tool
def test_hyperfine_summary_exports_point_to_the_json_export(tmp_path: Path) -> None:
    out = {k: tmp_path / f"a.{k}" for k in ("json", "csv", "md", "adoc", "org")}
    cmd = ["hyperfine", "-N", "-r", "3", "--style", "none"]
    for flag, k in (
        ("json", "json"),
        ("csv", "csv"),
        ("markdown", "md"),
        ("asciidoc", "adoc"),
        ("orgmode", "org"),
    ):
        cmd += [f"--export-{flag}", str(out[k])]
    subprocess.run([*cmd, "sleep 0.01"], check=True, capture_output=True, timeout=60)
    assert out["csv"].read_text().startswith("command,mean,stddev,median,user,system,min,max\n")
    assert out["md"].read_text().startswith("| Command | Mean [ms] |")
    for k, flag in (("csv", "csv"), ("md", "markdown"), ("adoc", "asciidoc"), ("org", "orgmode")):
        text = out[k].read_text()
        assert importers.sniff(text) == "hyperfine", k
        with pytest.raises(BadInput) as e:
            importers.load_run(out[k])
        msg = str(e.value)
        assert "\n" not in msg and f"--export-{flag} holds only each command's summary" in msg
        assert "per-run times, which are what compare tests" in msg and "hyperfine --export-json FILE" in msg
    line = one_error_line(run_cli("compare", str(out["csv"]), str(out["json"])))
    assert "hyperfine --export-json FILE" in line
    (run,) = importers.import_text(out["json"].read_text(), str(out["json"]))
    times = json.loads(out["json"].read_text())["results"][0]["times"]
    assert [la["samples"]["time"][0] for la in run["launches"]] == pytest.approx([t * 1e3 for t in times])
    assert run["units"]["time"] == "ms" and min(t * 1e3 for t in times) > 5  # sleep 0.01: about 10 ms


# --- nsys ----------------------------------------------------------------------------------------------

NVTX_CSV = (DATA / "nsys_nvtx_sum_fixture.csv").read_text()
KERN_HEADER = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"


def _template(tail: str) -> str:
    """A 600-character templated kernel name: a common 560-character prefix and its own tail."""
    prefix = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, "
    prefix += ", ".join(f"cute::C<{k}>" for k in range(1000, 1100))
    name = prefix[:560] + tail
    return name + "x" * (600 - len(name))


def test_nsys_kernel_names_of_600_characters_load_and_stay_distinct(tmp_path: Path) -> None:
    a, b = _template(">(bf16)"), _template(">(fp16)")
    assert len(a) == len(b) == 600 and a[:560] == b[:560] and a != b
    f = tmp_path / "kern.csv"
    rows = [f'61.0,61000000,1000,61000.0,60950.0,59000,70000,900.4,"{a}"\n']
    rows.append(f'30.5,30500000,1000,30500.0,30480.0,29800,33000,400.1,"{b}"\n')
    rows.append("8.5,8500000,2000,4250.0,4224.0,4000,5100,90.2,elementwise\n")
    f.write_text(KERN_HEADER + "".join(rows))
    run = importers.load_run(f)
    assert run["select"] == "cuda_gpu_kern_sum"
    samples = run["launches"][0]["samples"]
    ma, mb = nsys.metric_name(a), nsys.metric_name(b)
    assert ma != mb and len(ma) <= nsys.MAX_NAME and len(mb) <= nsys.MAX_NAME and ma[:100] == a[:100]
    assert samples == {
        ma: [pytest.approx(0.06095)],
        mb: [pytest.approx(0.03048)],
        "elementwise": [pytest.approx(0.004224)],
    }
    assert run["imported"]["names"] == {ma: a, mb: b}
    assert run["units"][ma] == "ms" and run["better"][mb] == "lower"


def test_nsys_csv_of_two_kinds_of_report_is_one_record_per_kind(tmp_path: Path) -> None:
    f = tmp_path / "both.csv"
    f.write_text(
        NVTX_CSV + "\n" + KERN_HEADER + "61.0,61000000,1000,61000.0,60950.0,59000,70000,900.4,gemm\n"
    )
    with pytest.raises(BadInput, match=r"holds 2 results \('nvtx_sum', 'cuda_gpu_kern_sum'\)"):
        importers.load_run(f)
    nvtx = importers.load_run(f, select="nvtx_sum")
    assert nvtx["probe"]["config"] == {"report": "nvtx_sum"}
    assert nvtx["launches"][0]["samples"] == {
        "verify": [pytest.approx(8.9121)],
        "draft": [pytest.approx(1.4689)],
        "extend": [pytest.approx(1.012)],
    }
    kern = importers.load_run(f, select="cuda_gpu_kern_sum")
    assert kern["launches"][0]["samples"] == {"gemm": [pytest.approx(0.06095)]}
    assert kern["units"]["gemm"] == "ms"


def test_nsys_console_output_is_read_like_csv() -> None:
    path = PEER / "nsys_stats_console.txt"
    text = path.read_text()
    assert "--format" not in text and importers.sniff(text) == "nsys"
    runs = importers.import_text(text, str(path))
    assert [r["select"] for r in runs] == ["nvtx_sum", "cuda_gpu_kern_sum"]  # osrt_sum passed over
    nvtx = importers.load_run(path, select="nvtx_sum")
    csv_run = importers.load_run(DATA / "nsys_nvtx_sum_fixture.csv")
    assert nvtx["launches"][0]["samples"] == csv_run["launches"][0]["samples"]  # 8,912,100.0 ns: 8.9121 ms
    assert nvtx["launches"][0]["samples"]["verify"] == [pytest.approx(8.9121)]
    assert nvtx["probe"]["config"] == csv_run["probe"]["config"] and nvtx["units"]["verify"] == "ms"
    kern = importers.load_run(path, select="cuda_gpu_kern_sum")
    samples = kern["launches"][0]["samples"]
    assert sorted(x for xs in samples.values() for x in xs) == pytest.approx([0.004224, 0.03048, 0.06095])
    long = kern["imported"]["names"]
    assert len(long) == 2 and all(len(n) > 600 and "cute::tuple<cute::C<9>" in n for n in long.values())
    assert {n.rsplit(", ", 1)[1] for n in long.values()} == {
        "cutlass::bfloat16_t>>(T1::Params)",
        "cutlass::half_t>>(T1::Params)",
    }
    elementwise = next(m for m in samples if m.startswith("void at::native::vectorized_elementwise_kernel"))
    assert elementwise.endswith("std::array<char *, 1>>(int, T2, T3)")  # spaces and commas in the name kept
    p = run_cli("compare", f"{path}#nvtx_sum", str(DATA / "nsys_nvtx_sum_fixture.csv"), "--json")
    assert p.returncode == 3, p.stderr  # one report a side: no CI; the two layouts compare
    assert {m["name"] for m in json.loads(p.stdout)["metrics"]} == {"verify", "draft", "extend"}


def test_concatenated_nsys_console_reports_are_launches(tmp_path: Path) -> None:
    text = (PEER / "nsys_stats_console.txt").read_text()
    f = tmp_path / "three.txt"
    f.write_text(text + "\n" + text.replace("8,912,100.0", "9,001,000.0") + "\n" + text)
    run = importers.load_run(f, select="nvtx_sum")
    assert [la["samples"]["verify"][0] for la in run["launches"]] == pytest.approx([8.9121, 9.001, 8.9121])


def test_a_broken_nsys_console_row_is_one_line(tmp_path: Path) -> None:
    lines = (PEER / "nsys_stats_console.txt").read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if ln.rstrip().endswith(":draft"))
    lines[n] = lines[n].replace("1,468,900.0", "  n/a      ")
    f = tmp_path / "bad.txt"
    f.write_text("\n".join(lines))
    with pytest.raises(BadInput, match=rf"line {n + 1}: 'Med \(ns\)' is not a number"):
        importers.load_run(f, select="nvtx_sum")
