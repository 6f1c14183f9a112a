"""SGLang `python -m sglang.bench_serving --output-file` JSONL: the script appends one line per run
(per request rate or concurrency, or per repeat). Lines of one load (the same config and tag) are
repeats: one record, each line a launch. Lines of different loads are one record each, picked as
FILE#0, FILE#1, ... (0 is the first line).

A line (sglang/benchmark/serving.py, `result`) holds the summary (`output_throughput`,
`median_itl_ms`, `mean_e2e_latency_ms`, `accept_length` where the server speculates,
`request_goodput` and `slo_attainment` with `--goodput`, ...) and with `--output-details` the
per-request `ttfts`, `itls` (seconds), `output_lens` and `errors`; e2e per request is not in the file
(it is rebuilt as ttft + the stream's gaps), so `tpot` is taken from its medians when the lists are
absent. A failed request is in the lists with a ttft of 0.0, an empty `itls` entry and its `errors`
entry, and is not `completed`: it is left out of the samples and counted in the launch's scalar
`failed_requests` (lower is better; the file has no failed count of its own, so a file without
`--output-details` cannot say). A run whose requests all failed (`completed` 0) is a failed launch.
Units and directions as for the vLLM file (regdiag/importers/vllm_bench.py, which holds the shared
reading). Read from SGLang 0.5.23's source (sglang/benchmark/serving.py); no SGLang runs here, so the
test files are written in that shape by hand (said so in the tests).
"""

from __future__ import annotations

from typing import Any

from regdiag.importers.vllm_bench import bench_records, documents

NAME = "sglang-bench"
TITLE = "SGLang bench_serving --output-file JSONL"


def sniff(text: str) -> bool:
    head = text.lstrip()
    return head.startswith("{") and '"total_output_tokens_retokenized"' in head


def parse(text: str, source: str) -> list[dict[str, Any]]:
    docs = documents(text, source, "SGLang bench_serving")
    docs = [(where, _with_latencies(doc)) for where, doc in docs]
    return bench_records(docs, source, NAME, "sglang bench_serving", select="0")


def _with_latencies(doc: Any) -> Any:
    if not isinstance(doc, dict):
        return doc  # refused by bench_records, naming its line
    return {**doc, "latencies": _latencies(doc)}


def _latencies(doc: dict[str, Any]) -> list[float]:
    """Per-request e2e, where the file lets it be rebuilt exactly: ttft + the stream's gaps (0.0 for a
    failed request, as SGLang writes its ttft)."""
    ttfts, itls = doc.get("ttfts") or [], doc.get("itls") or []
    if len(ttfts) != len(itls) or not ttfts:
        return []
    ok = all(isinstance(t, (int, float)) and isinstance(g, list) for t, g in zip(ttfts, itls, strict=True))
    if not ok or not all(isinstance(x, (int, float)) for g in itls for x in g):
        return []
    return [t + sum(g) if t > 0 else 0.0 for t, g in zip(ttfts, itls, strict=True)]
