"""`vllm bench serve --save-result` JSON (or `--append-result` JSON Lines): run records, one launch
per benchmark run.

The file (vllm/benchmarks/serve.py, `result_json`) holds the run's summary (`output_throughput`,
`median_tpot_ms`, `spec_decode_acceptance_length`, `request_goodput` with `--goodput`, ...) and, per
request, `latencies` and `queue_times`; with `--save-detailed` also `ttfts`, `itls` (seconds),
`output_lens` and `errors`. Per-request lists become samples in ms: `e2e`, and where the file has
them `ttft`, `itl` (the mean gap of one request's stream) and `tpot` ((latency - ttft) / (tokens - 1),
vLLM's own definition); the summary's numbers (times in ms, throughputs in tok/s or req/s, accept
length in tokens/step) become the launch's scalars, and its medians one-sample series of what the
per-request lists lack. Every metric gets its unit and direction (`unit_of`). The primary is
`tpot` (what speculative decoding moves), else `itl`, else `e2e`. What must match for `compare`: the
load (backend, dataset, prompts, rate, concurrency, lengths); the model is a label.

Failed requests: vLLM keeps a failed request in the per-request lists with a latency (and ttft) of
0.0, an empty `itls` entry and its `errors` entry, counts it in `failed` and leaves it out of
`completed`. Those requests are left out of the samples, and the launch's scalar `failed_requests`
(lower is better) counts them. A benchmark run whose requests all failed is a failed launch (status
"error", saying how many).

`--append-result` writes one result object per line, one line per benchmark run. Lines of one load
(the same config, model and label) are repeats: one record, each line a launch. Lines of different
loads (a sweep of rates or concurrencies) are one record each, picked as FILE#0, FILE#1, ... (0 is the
first line). Read from vLLM 0.32.0's source and files it wrote (tests/test_vllm_server.py,
tests/data/peer/README.md).
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from regdiag.direction import CONTEXT, HIGHER, LOWER, declare
from regdiag.errors import BadInput
from regdiag.importers import launch, new_import
from regdiag.records import UnusableJSON, loads_json
from regdiag.snapshot.redact import scrub_text

NAME = "vllm-bench"
TITLE = "vllm bench serve --save-result JSON (--append-result JSON Lines)"
LOAD_KEYS = (
    "backend",
    "endpoint_type",
    "dataset_name",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
)
# What, beside the load, makes two lines of one file two runs rather than repeats of one.
IDENTITY_KEYS = ("model_id", "label", "tag")
LABEL_KEYS = ("model_id", "tokenizer_id", "date", "label", "tag")
LATENCIES = ("tpot", "itl", "e2e")  # the primary: the first of these the launches have
FAILED = "failed_requests"
# The mean accept length (tokens one speculative step yields) as each engine's bench file names it:
# vLLM's summary of its spec-decode counters, SGLang's server info. The one table compare judges and
# explain reads: its first key a launch has is the run's accept length.
ACCEPT_LENGTH_KEYS = ("spec_decode_acceptance_length", "accept_length")


def sniff(text: str) -> bool:
    head = text.lstrip()
    return head.startswith("{") and '"request_throughput"' in head and '"tokenizer_id"' in head


def parse(text: str, source: str) -> list[dict[str, Any]]:
    docs = documents(text, source, "vllm bench serve")
    return bench_records(docs, source, NAME, "vllm bench serve", select=_label(docs[0][1]) or "bench")


def _label(doc: Any) -> str | None:
    return str(doc["label"]) if isinstance(doc, dict) and doc.get("label") else None


def documents(text: str, source: str, what: str) -> list[tuple[str, Any]]:
    """(where, object) of each result the file holds: the whole file when it is one JSON document,
    else each non-empty line (JSON Lines: what `--append-result` and SGLang's `--output-file` write)."""
    if not text.strip():
        raise BadInput(f"{source}: an empty {what} file")
    try:
        return [(source, _loads(text))]
    except UnusableJSON as e:  # a key twice, a number no float64 holds, a lone surrogate
        raise BadInput(f"{source}: {e}") from None
    except json.JSONDecodeError as e:
        if e.msg != "Extra data":  # one document, broken; "Extra data": a second one follows
            raise BadInput(
                f"{source}: malformed {what} JSON at line {e.lineno} column {e.colno}: {e.msg}"
            ) from None
    lines = [(f"{source} line {i}", ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    return [(where, _json(ln, where, what)) for where, ln in lines]


def _loads(text: str) -> Any:
    try:
        return loads_json(text)
    except RecursionError:
        raise UnusableJSON("JSON nested too deeply to be a benchmark result") from None


def _json(text: str, source: str, what: str) -> Any:
    try:
        return _loads(text)
    except UnusableJSON as e:
        raise BadInput(f"{source}: {e}") from None
    except json.JSONDecodeError as e:
        raise BadInput(
            f"{source}: malformed {what} JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None


def unit_of(key: str) -> tuple[str, str] | None:
    """A summary number's unit and direction, from the names both engines' bench scripts use."""
    if key.endswith("_ms"):
        return "ms", LOWER
    if key in (
        "output_throughput",
        "total_token_throughput",
        "input_throughput",
        "total_throughput",
        "max_output_tokens_per_s",
    ):
        return "tok/s", HIGHER
    if key.endswith("throughput") or key == "request_goodput":
        return "req/s", HIGHER
    if key in ACCEPT_LENGTH_KEYS:
        return "tokens/step", HIGHER
    if key == "spec_decode_acceptance_rate":
        return "%", HIGHER
    if key == "slo_attainment":  # SGLang with --goodput: good requests / requests sent
        return "fraction", HIGHER
    if key in ("completed", "total_input_tokens", "total_output_tokens", "max_concurrent_requests"):
        return "count", CONTEXT
    if key == "duration":
        return "s", CONTEXT
    return None


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def _pos(x: Any) -> bool:
    return _num(x) and x > 0


def _column(doc: dict[str, Any], key: str, n: int) -> list[Any] | None:
    """A per-request list of the file, when it has one entry per request."""
    xs = doc.get(key)
    return xs if isinstance(xs, list) and n and len(xs) == n else None


def _requests(doc: dict[str, Any]) -> int:
    """How many requests the per-request lists describe (0: the file has none)."""
    for key in ("latencies", "ttfts", "errors"):
        xs = doc.get(key)
        if isinstance(xs, list) and xs:
            return len(xs)
    return 0


def succeeded(doc: dict[str, Any]) -> list[bool]:
    """Per request, whether it succeeded: no error written for it and a latency above 0 (both engines
    write 0.0, and an empty `itls` entry, for a failed request; vLLM's error text may be empty)."""
    n = _requests(doc)
    errors, lat = _column(doc, "errors", n), _column(doc, "latencies", n)
    timed = lat if lat is not None else _column(doc, "ttfts", n)
    return [not (errors and errors[i]) and (timed is None or _pos(timed[i])) for i in range(n)]


def per_request(doc: dict[str, Any], ok: list[bool] | None = None) -> dict[str, list[float]]:
    """Samples in ms from the per-request lists (seconds in both engines' files), of the requests that
    succeeded."""
    ok = succeeded(doc) if ok is None else ok
    n = len(ok)
    keep = [i for i in range(n) if ok[i]]
    lat, ttfts, outs, itls = (_column(doc, k, n) for k in ("latencies", "ttfts", "output_lens", "itls"))
    samples: dict[str, list[float]] = {}
    if lat is not None:
        samples["e2e"] = [lat[i] * 1e3 for i in keep if _pos(lat[i])]
    if ttfts is not None:
        samples["ttft"] = [ttfts[i] * 1e3 for i in keep if _pos(ttfts[i])]
    if lat is not None and ttfts is not None and outs is not None:
        samples["tpot"] = [
            (lat[i] - ttfts[i]) * 1e3 / (outs[i] - 1)
            for i in keep
            if _num(outs[i]) and outs[i] > 1 and _pos(ttfts[i]) and _num(lat[i]) and lat[i] > ttfts[i]
        ]
    if itls is not None:
        gaps = [itls[i] for i in keep if isinstance(itls[i], list) and itls[i]]
        samples["itl"] = [
            g * 1e3 for g in (statistics.fmean(x) for x in gaps if all(_num(v) for v in x)) if g > 0
        ]
    return {m: xs for m, xs in samples.items() if xs}


def failures(doc: dict[str, Any], ok: list[bool]) -> int | None:
    """How many requests failed: the file's own count (vLLM's `failed`), else the per-request lists',
    else prompts sent less completed; None where the file cannot say (SGLang without details)."""
    if _num(doc.get("failed")):
        return int(doc["failed"])
    if ok:
        return ok.count(False)
    if _num(doc.get("num_prompts")) and _num(doc.get("completed")):
        return max(int(doc["num_prompts"]) - int(doc["completed"]), 0)
    return None


def bench_records(
    docs: list[tuple[str, Any]], source: str, fmt: str, tool: str, select: str
) -> list[dict[str, Any]]:
    """The results of one file as records: one record whose launches are the results when they are
    repeats of one load, else one record per result, picked by its number (FILE#0 is the first)."""
    for where, doc in docs:
        if not isinstance(doc, dict) or "completed" not in doc:
            raise BadInput(f'{where}: not a {tool} result (no "completed" count)')
    keys = [_identity(doc) for _w, doc in docs]
    if all(k == keys[0] for k in keys):
        return [bench_record([doc for _w, doc in docs], source, fmt, tool, select, [w for w, _d in docs])]
    return [bench_record([doc], source, fmt, tool, str(n), [w]) for n, (w, doc) in enumerate(docs)]


def _identity(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return {k: doc.get(k) for k in LOAD_KEYS}, {k: doc.get(k) for k in IDENTITY_KEYS}


def bench_record(
    docs: list[dict[str, Any]],
    source: str,
    fmt: str,
    tool: str,
    select: str,
    wheres: list[str] | None = None,
) -> dict[str, Any]:
    """One run record: each result of `docs` (repeats of one load) one launch."""
    wheres = wheres or [source] * len(docs)
    launches = [_launch(k, doc, where, tool) for k, (doc, where) in enumerate(zip(docs, wheres, strict=True))]
    good = [la["samples"] for la in launches if la["status"] == "ok"]
    primary = next((m for m in LATENCIES if good and all(m in s for s in good)), None) or next(
        (m for m in LATENCIES if any(m in s for s in good)), None
    )
    if primary is None:  # every launch failed: the metric its requests would have had
        primary = "tpot" if any(_num(d.get("median_tpot_ms")) for d in docs) else "e2e"
    first = docs[0]
    config = {k: first[k] for k in LOAD_KEYS if k in first}
    run = new_import(fmt, source, tool=tool, config=config, primary=primary, select=select)
    run["labels"] = {k: str(first[k]) for k in LABEL_KEYS if first.get(k)}
    if not good:
        run["status"] = "failed"
    timed = {primary} | {m for la in launches for m in la["samples"]}
    declare(
        run,
        {m: ("ms", LOWER) for m in sorted(timed)}
        | {k: u for la in launches for k in la["scalars"] if (u := unit_of(k))}
        | ({FAILED: ("requests", LOWER)} if any(FAILED in la["scalars"] for la in launches) else {}),
    )
    run["launches"] = launches
    return run


def _launch(k: int, doc: dict[str, Any], where: str, tool: str) -> dict[str, Any]:
    """One benchmark run: the samples of its requests that succeeded, its summary as scalars."""
    ok = succeeded(doc)
    samples = per_request(doc, ok)
    for m in ("tpot", "itl", "ttft", "e2e"):  # what the per-request lists lack: the summary's median
        if m not in samples and _pos(doc.get(f"median_{m}_ms")):
            samples[m] = [float(doc[f"median_{m}_ms"])]
    scalars: dict[str, Any] = {
        key: v for key, v in doc.items() if _num(v) and key != "failed" and unit_of(key) is not None
    }
    failed = failures(doc, ok)
    if failed is not None:
        scalars[FAILED] = failed
    duration = doc["duration"] if _num(doc.get("duration")) else None
    completed = doc.get("completed")
    if (_num(completed) and completed == 0) or (ok and not any(ok)):
        return launch(
            k, {}, status="error", error=_all_failed(doc, failed), scalars=scalars, duration_s=duration
        )
    if not any(m in samples for m in LATENCIES):
        raise BadInput(f"{where}: the {tool} result has no latency to compare (no latencies, no medians)")
    return launch(k, samples, values=judged(scalars), scalars=scalars, duration_s=duration)


# The outcomes of a bench run that compare judges beside the latencies, each one value per launch:
# what speculative decoding is for. The failure count stays a scalar (0 on one side has no ratio):
# compare tests it as counts, failed of sent (regdiag/compare/failures.py).
JUDGED = (
    *ACCEPT_LENGTH_KEYS,
    "output_throughput",
    "request_goodput",
    "slo_attainment",
)


def judged(scalars: dict[str, Any]) -> dict[str, list[float]]:
    """The outcome scalars as one-value series: compare tests a launch's `values` with their directions."""
    return {k: [float(scalars[k])] for k in JUDGED if k in scalars and scalars[k] > 0}


def _all_failed(doc: dict[str, Any], failed: int | None) -> str:
    """The one line of a benchmark run none of whose requests succeeded: how many, and the first error."""
    what = f"all {failed} requests failed" if failed else "all requests failed (0 completed)"
    errors = [e for e in doc.get("errors") or [] if isinstance(e, str) and e.strip()]
    if not errors:
        return what
    last = errors[0].strip().splitlines()[-1].strip()  # a traceback's last line says what it was
    return f"{what}; first: {scrub_text(last)[:200]}"
