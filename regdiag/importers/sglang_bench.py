"""SGLang `python -m sglang.bench_serving --output-file` JSONL: one run record per line (the script
appends one line per run: per request rate or concurrency), one launch each; FILE#N picks line N.

A line (sglang/bench_serving.py, `result`) holds the summary (`output_throughput`, `median_itl_ms`,
`mean_e2e_latency_ms`, `accept_length` where the server speculates, ...) and with `--output-details`
the per-request `ttfts`, `itls` (seconds) and `output_lens`; e2e per request is not in the file, so
`tpot` is taken from its medians when the lists are absent. Units and directions as for the vLLM file
(regdiag/importers/vllm_bench.py, which holds the shared reading). Read from SGLang's source; no
SGLang runs here, so the test file is written in that shape by hand (said so in the test).
"""

from __future__ import annotations

from typing import Any

from regdiag.errors import BadInput
from regdiag.importers.vllm_bench import _json, bench_record

NAME = "sglang-bench"
TITLE = "SGLang bench_serving --output-file JSONL"


def sniff(text: str) -> bool:
    head = text.lstrip()
    return head.startswith("{") and '"total_output_tokens_retokenized"' in head


def parse(text: str, source: str) -> list[dict[str, Any]]:
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    if not lines:
        raise BadInput(f"{source}: an empty SGLang bench_serving file")
    out = []
    for n, (i, ln) in enumerate(lines):
        doc = _json(ln, f"{source} line {i}", "SGLang bench_serving")
        if not isinstance(doc, dict) or "completed" not in doc:
            raise BadInput(f'{source} line {i}: not an SGLang bench_serving result (no "completed" count)')
        doc = {**doc, "median_tpot_ms": doc.get("median_tpot_ms"), "latencies": _latencies(doc)}
        out.append(bench_record(doc, source, NAME, "sglang bench_serving", select=str(n)))
    return out


def _latencies(doc: dict[str, Any]) -> list[float]:
    """Per-request e2e, where the file lets it be rebuilt exactly: ttft + the stream's gaps."""
    ttfts, itls = doc.get("ttfts") or [], doc.get("itls") or []
    if len(ttfts) != len(itls) or not ttfts:
        return []
    return [t + sum(g) for t, g in zip(ttfts, itls, strict=True) if isinstance(g, list)]
