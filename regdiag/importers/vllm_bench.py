"""`vllm bench serve --save-result` JSON: one run record per file, one launch (one benchmark run).

The file (vllm/benchmarks/serve.py, `result_json`) holds the run's summary (`output_throughput`,
`median_tpot_ms`, `spec_decode_acceptance_length`, ...) and, per request, `latencies` and
`queue_times`; with `--save-detailed` also `ttfts`, `itls` (seconds) and `output_lens`. Per-request
lists become samples in ms: `e2e`, and where the file has them `ttft`, `itl` (the mean gap of one
request's stream) and `tpot` ((latency - ttft) / (tokens - 1), vLLM's own definition); the summary's
numbers become scalars and, for a file without per-request lists, one-sample series of its medians.
Every metric gets its unit and direction. The primary is `tpot` (what speculative decoding moves),
else `e2e`. What must match for `compare`: the load (backend, dataset, prompts, rate, concurrency,
lengths); the model is a label. Read from vLLM 0.32.0's source and a file it wrote (tests/test_vllm_server.py).
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from regdiag.direction import CONTEXT, HIGHER, LOWER, declare
from regdiag.errors import BadInput
from regdiag.importers import launch, new_import
from regdiag.records import UnusableJSON, loads_json

NAME = "vllm-bench"
TITLE = "vllm bench serve --save-result JSON"
LOAD_KEYS = (
    "backend", "endpoint_type", "dataset_name", "num_prompts", "request_rate", "burstiness",
    "max_concurrency", "random_input_len", "random_output_len", "random_range_ratio",
)  # fmt: skip


def sniff(text: str) -> bool:
    head = text.lstrip()
    return head.startswith("{") and '"request_throughput"' in head and '"tokenizer_id"' in head


def parse(text: str, source: str) -> list[dict[str, Any]]:
    doc = _json(text, source, "vllm bench serve")
    if not isinstance(doc, dict) or "completed" not in doc:
        raise BadInput(f'{source}: not a vllm bench serve result (no "completed" count)')
    return [bench_record(doc, source, NAME, "vllm bench serve", select=str(doc.get("label") or "bench"))]


def _json(text: str, source: str, what: str) -> Any:
    try:
        return loads_json(text)
    except UnusableJSON as e:  # a key twice, a number no float64 holds, a lone surrogate
        raise BadInput(f"{source}: {e}") from None
    except json.JSONDecodeError as e:
        raise BadInput(
            f"{source}: malformed {what} JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None


def unit_of(key: str) -> tuple[str, str] | None:
    """A summary number's unit and direction, from the names both engines' bench scripts use."""
    if key.endswith("_ms"):
        return "ms", LOWER
    if key in ("output_throughput", "total_token_throughput", "input_throughput", "total_throughput"):
        return "tok/s", HIGHER
    if key.endswith("throughput") or key == "request_goodput":
        return "req/s", HIGHER
    if key in ("spec_decode_acceptance_length", "accept_length"):
        return "tokens/step", HIGHER
    if key == "spec_decode_acceptance_rate":
        return "%", HIGHER
    if key == "failed":
        return "requests", LOWER
    if key in (
        "completed",
        "duration",
        "total_input_tokens",
        "total_output_tokens",
        "max_concurrent_requests",
    ):
        return ("s" if key == "duration" else "count"), CONTEXT
    return None


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def per_request(doc: dict[str, Any]) -> dict[str, list[float]]:
    """Samples in ms from the per-request lists (seconds in both engines' files)."""
    lat = [x for x in doc.get("latencies") or [] if _num(x)]
    samples: dict[str, list[float]] = {}
    if lat:
        samples["e2e"] = [x * 1e3 for x in lat]
    ttfts, itls, outs = doc.get("ttfts") or [], doc.get("itls") or [], doc.get("output_lens") or []
    if ttfts and len(ttfts) == len(lat):
        samples["ttft"] = [x * 1e3 for x in ttfts if _num(x)]
        if len(outs) == len(lat):
            samples["tpot"] = [
                (e - t) * 1e3 / (n - 1) for e, t, n in zip(lat, ttfts, outs, strict=True) if _num(n) and n > 1
            ]
    gaps = [statistics.fmean(g) * 1e3 for g in itls if isinstance(g, list) and g and all(_num(x) for x in g)]
    if gaps:
        samples["itl"] = gaps
    return samples


def bench_record(doc: dict[str, Any], source: str, fmt: str, tool: str, select: str) -> dict[str, Any]:
    samples = per_request(doc)
    for m in ("tpot", "itl", "ttft", "e2e"):  # a file without per-request lists: its medians
        if m not in samples and _num(doc.get(f"median_{m}_ms")):
            samples[m] = [float(doc[f"median_{m}_ms"])]
    primary = next((m for m in ("tpot", "itl", "e2e") if samples.get(m)), None)
    if primary is None:
        raise BadInput(f"{source}: the benchmark file has no latency to compare (no latencies, no medians)")
    config = {k: doc[k] for k in LOAD_KEYS if k in doc}
    run = new_import(fmt, source, tool=tool, config=config, primary=primary, select=select)
    run["labels"] = {k: str(doc[k]) for k in ("model_id", "tokenizer_id", "date", "label") if doc.get(k)}
    scalars = {k: v for k, v in doc.items() if _num(v) and unit_of(k) is not None}
    declare(run, {m: ("ms", LOWER) for m in samples} | {k: u for k in scalars if (u := unit_of(k))})
    failed = int(doc.get("failed") or 0) if _num(doc.get("failed")) else 0
    run["launches"].append(
        launch(
            0, samples, scalars=scalars, duration_s=doc.get("duration") if _num(doc.get("duration")) else None
        )
    )
    if failed:
        run["launches"][0]["error"] = f"{failed} requests failed"
    return run
