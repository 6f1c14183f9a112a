"""Run records for live-server measurements (kind "server") and ingested engine logs (kind "log").

Both use the regdiag.run/1 layout of docs/records.md. What is particular to them:

- primary "itl": milliseconds per output token of one request after its first token, i.e.
  1000 / (the tok/s a user of one stream sees). It is the number a speculative-decoding
  regression moves, and it does not depend on how many tokens a request happened to produce
  (e2e does) nor on prefill (ttft does).
- phases ["ttft", "itl", "e2e"] for a server run, and "phases_sum_to_primary": false: for a server
  the phases are views of the same requests, not parts of a sum, so compare must not attribute
  the primary to them. A log run has phases ["itl"] (plus "cycle" when the log has accept len).
- tok/s per launch are scalars; accept length is in values (per request or per interval) and in
  scalars, with its source in the launch header ("accept_len_source").
"""

from __future__ import annotations

import hashlib
import os
import statistics
from typing import Any

from regdiag.direction import LOG_METRICS, SERVER_METRICS, declare
from regdiag.runs import new_run, now_iso
from regdiag.server.client import Endpoint, RequestResult
from regdiag.server.logparse import LogParse
from regdiag.snapshot.redact import redact_argv, redact_tree, scrub_text  # noqa: F401 (re-exported)

SERVER_PROBE_VERSION = "1"
LOG_PROBE_VERSION = "1"
SERVER_PHASES = ["ttft", "itl", "e2e"]
MS = 1000.0


def server_run(
    config: dict[str, Any], *, host: dict[str, str] | None = None, stream: bool = True
) -> dict[str, Any]:
    run = new_run(
        kind="server",
        probe_name="server",
        probe_version=SERVER_PROBE_VERSION,
        config=config,
        primary="itl" if stream else "e2e",
        phases=SERVER_PHASES if stream else ["e2e"],
        host=host,
        units={
            "ttft": "ms",
            "itl": "ms",
            "e2e": "ms",
            "tpot": "ms",
            "cycle": "ms",
            "accept_len": "tokens/step",
        },
    )
    run["phases_sum_to_primary"] = False
    run["probe"]["measures"] = "served-itl"  # as ingest-log's: compare takes the two as one measurement
    declare(run, SERVER_METRICS)  # unit and which way is better, per metric: regdiag/direction.py
    return run


def request_detail(r: RequestResult) -> dict[str, Any]:
    d: dict[str, Any] = {
        "index": r.index,
        "prompt": r.prompt_index,
        "status": "ok" if r.ok else "error",
        "error": r.error,
        "http_status": r.http_status,
        "ttft_ms": None if r.ttft_s is None else round(r.ttft_s * MS, 4),
        "itl_ms": None if r.itl_s is None else round(r.itl_s * MS, 4),
        "e2e_ms": None if r.e2e_s is None else round(r.e2e_s * MS, 4),
        "output_tokens": r.output_tokens,
        "token_source": r.token_source,
        "finish_reason": r.finish_reason,
        "chunks": len(r.chunk_times),
    }
    if r.spec_verify_ct is not None:
        d["spec_verify_ct"] = r.spec_verify_ct
        d["accept_len"] = r.accept_len
    if len(r.chunk_times) > 1:
        d["chunk_gaps_ms"] = r.gaps_ms()
        d["chunk_tokens"] = r.chunk_tokens
    return d


def new_launch(index: int, started: str | None, header: dict[str, Any] | None = None) -> dict[str, Any]:
    """A launch record laid out as docs/records.md shows it, before anything is measured: status
    "interrupted" until it ends. `probe server`, `ingest-log` and `probe engine` all start from it."""
    return {
        "index": index,
        "status": "interrupted",
        "error": None,
        "started": started,
        "header": header if header is not None else {},
        "warmup_dropped": 0,
        "samples": {},
        "values": {},
        "scalars": {},
        "clocks": [],
    }


def server_launch_header(ep: Endpoint) -> dict[str, Any]:
    """The header a `probe server` launch starts with; the launch adds what it learns (engine version...)."""
    return {"url": ep.display, "api": ep.api, "model": ep.model}


def request_samples(ok: list[RequestResult]) -> dict[str, list[float]]:
    """Per-request times in ms (ttft, itl, e2e, and tpot = e2e / output tokens); empty series left out."""
    samples: dict[str, list[float]] = {"ttft": [], "itl": [], "e2e": []}
    tpot: list[float] = []
    for r in ok:
        if r.ttft_s is not None:
            samples["ttft"].append(round(r.ttft_s * MS, 4))
        if r.itl_s is not None:
            samples["itl"].append(round(r.itl_s * MS, 4))
        if r.e2e_s is not None:
            samples["e2e"].append(round(r.e2e_s * MS, 4))
            if r.output_tokens:
                tpot.append(round(r.e2e_s * MS / r.output_tokens, 4))
    samples = {k: v for k, v in samples.items() if v}
    if tpot:
        samples["tpot"] = tpot
    return samples


def _request_scalars(
    done: list[RequestResult], ok: list[RequestResult], samples: dict[str, list[float]], wall_s: float | None
) -> dict[str, Any]:
    scalars: dict[str, Any] = {
        "requests": len(done),
        "requests_ok": len(ok),
        "requests_failed": len(done) - len(ok),
        "accept_len_simulated": False,
    }
    tokens = sum(r.output_tokens or 0 for r in ok)
    scalars["output_tokens"] = tokens
    if wall_s and wall_s > 0 and ok:
        scalars["tok_s"] = round(tokens / wall_s, 4)  # all streams together, over the launch's wall time
    if samples.get("itl"):
        scalars["tok_s_per_request"] = round(MS / statistics.median(samples["itl"]), 4)
        scalars["itl_ms_median"] = statistics.median(samples["itl"])
    if samples.get("ttft"):
        scalars["ttft_ms_median"] = statistics.median(samples["ttft"])
    return scalars


def _accept_len(
    ok: list[RequestResult],
    spec: dict[str, Any] | None,
    values: dict[str, list[Any]],
    scalars: dict[str, Any],
) -> str | None:
    """Fill the launch's accept length from the requests (SGLang) or the engine's counters (vLLM);
    return where it came from, for the header."""
    accept = [r.accept_len for r in ok if r.accept_len is not None]
    if accept:
        values["accept_len"] = [round(a, 4) for a in accept]
        verify = sum(r.spec_verify_ct or 0 for r in ok if r.accept_len is not None)
        toks = sum(r.output_tokens or 0 for r in ok if r.accept_len is not None)
        # Token-weighted: all tokens over all verify steps, as the engine's own log line computes it.
        scalars["accept_len_mean"] = round(toks / verify, 4)
        return "sglang meta_info: completion_tokens / spec_verify_ct"
    if spec and spec.get("accept_len") is not None:
        scalars["accept_len_mean"] = round(spec["accept_len"], 4)
        engine = spec.get("engine") or "vllm"
        if spec.get("accept_len_from"):  # SGLang's counters: tokens per verify pass
            return f"{engine} /metrics: d({spec['accept_len_from'].replace(' / ', ') / d(')})"
        return f"{engine} /metrics: 1 + d(spec_decode_num_accepted_tokens) / d(spec_decode_num_drafts)"
    return None


def cycle_samples(ok: list[RequestResult], launch_accept: float | None) -> list[float]:
    """The speculative cycle a stream sees: tok/s of one stream = accept_len / cycle, so cycle = itl x
    accept_len (the request's own accept length, else the launch's from the engine's counters)."""
    cycle: list[float] = []
    for r in ok:
        acc = r.accept_len or launch_accept
        if r.itl_s is not None and acc:
            cycle.append(round(r.itl_s * MS * acc, 4))
    return cycle


def fill_launch(
    launch: dict[str, Any],
    results: list[RequestResult],
    *,
    wall_s: float | None,
    warmup: int,
    spec: dict[str, Any] | None = None,
) -> None:
    """Samples, values and scalars of one launch from its requests (in request order)."""
    done = sorted(results, key=lambda r: r.index)
    ok = [r for r in done if r.ok]
    samples = request_samples(ok)
    values: dict[str, list[Any]] = {"output_tokens": [r.output_tokens for r in ok]}
    scalars = _request_scalars(done, ok, samples, wall_s)
    header = launch.setdefault("header", {})
    sources = {r.token_source for r in ok}
    header["token_source"] = sources.pop() if len(sources) == 1 else sorted(sources)
    accept_source = _accept_len(ok, spec, values, scalars)
    if accept_source is not None:
        header["accept_len_source"] = accept_source
    cycle = cycle_samples(ok, spec.get("accept_len") if spec else None)
    if cycle:
        samples["cycle"] = cycle
    if spec and spec.get("accept_rate") is not None:
        scalars["accept_rate"] = round(spec["accept_rate"], 4)
    if spec:
        launch["engine_counters"] = spec
    launch["samples"] = samples
    launch["values"] = values
    launch["scalars"] = scalars
    launch["warmup_dropped"] = warmup
    launch["requests"] = [request_detail(r) for r in done]
    if wall_s is not None:
        launch["wall_s"] = round(wall_s, 4)


def failure_summary(results: list[RequestResult]) -> str | None:
    bad = [r for r in results if not r.ok]
    if not bad:
        return None
    first = bad[0]
    return f"{len(bad)} of {len(results)} requests failed; first (request {first.index}): {first.error}"


# ---- ingested logs --------------------------------------------------------------------------------


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def log_launch_header(parse: LogParse, path: str) -> dict[str, Any]:
    """The header of an ingested log's launch: which file (and its hash), which engine, which line forms."""
    return {
        "source": "log",
        "file": os.path.abspath(path),
        "sha256": _sha256(path),
        "engine": parse.engine,
        "formats": sorted(parse.formats),
        "ranks": sorted(parse.ranks),
    }


_SGLANG_VALUES = ("accept_rate", "tokens_used", "queue_req", "tp_rank", "dp_rank")


def log_series(kept: list[dict[str, Any]]) -> tuple[dict[str, list[float]], dict[str, list[Any]]]:
    """(samples, values) of the kept intervals: itl = 1000 x running requests / gen tok/s per decode
    interval, and cycle = itl x accept len where SGLang printed one."""
    samples: dict[str, list[float]] = {"itl": []}
    values: dict[str, list[Any]] = {}

    def add(name: str, v: Any) -> None:
        values.setdefault(name, []).append(v)

    for iv in kept:
        if iv["source"] == "vllm-spec":
            if "accept_len" in iv:
                add("spec_accept_len", iv["accept_len"])
            if "accept_rate" in iv:
                add("spec_accept_rate", round(iv["accept_rate"], 4))
            continue
        if iv["running_req"] <= 0 or iv["gen_tok_s"] <= 0:
            continue
        itl = MS * iv["running_req"] / iv["gen_tok_s"]
        samples["itl"].append(round(itl, 4))
        add("gen_tok_s", iv["gen_tok_s"])
        add("running_req", iv["running_req"])
        if iv["source"] != "sglang-decode":
            continue
        if iv.get("accept_len"):
            # tok/s of one request = accept_len / cycle, so cycle = accept_len x itl.
            samples.setdefault("cycle", []).append(round(itl * iv["accept_len"], 4))
            add("accept_len", iv["accept_len"])
        for key in _SGLANG_VALUES:
            if key in iv:
                add(key, iv[key])
        if "cuda_graph" in iv:
            add("cuda_graph", 1 if iv["cuda_graph"] else 0)
    return {k: v for k, v in samples.items() if v}, values


def _log_scalars(
    kept: list[dict[str, Any]], samples: dict[str, list[float]], values: dict[str, list[Any]]
) -> tuple[dict[str, Any], str | None]:
    """The launch's scalars, and where its accept length came from (None: the log had none)."""
    scalars: dict[str, Any] = {"intervals": len(kept), "accept_len_simulated": False}
    source = None
    if samples.get("itl"):
        scalars["itl_ms_median"] = statistics.median(samples["itl"])
        scalars["tok_s_per_request"] = round(MS / statistics.median(samples["itl"]), 4)
        scalars["gen_tok_s_median"] = statistics.median(values["gen_tok_s"])
    if values.get("accept_len"):
        scalars["accept_len_mean"] = round(statistics.fmean(values["accept_len"]), 4)
        source = "sglang log: 'accept len' of each Decode batch line (mean of intervals)"
    spec = [iv for iv in kept if iv["source"] == "vllm-spec"]
    if spec:
        drafted = sum(iv["drafted"] for iv in spec)
        counted = [iv for iv in spec if iv.get("drafts")]
        drafts = sum(iv["drafts"] for iv in counted)
        if drafts > 0:
            # Pooled over intervals like vLLM's own formula: 1 + accepted / drafts.
            scalars["accept_len_mean"] = round(1.0 + sum(iv["accepted"] for iv in counted) / drafts, 4)
            source = "vllm log: 1 + sum(Accepted) / sum(drafts) over the SpecDecoding lines"
        if drafted:
            scalars["accept_rate"] = round(sum(iv["accepted"] for iv in spec) / drafted, 4)
    return scalars, source


def log_launch(parse: LogParse, path: str, index: int) -> dict[str, Any]:
    """One log file as one launch: every kept interval is a sample, warm-up ones are dropped."""
    kept = [iv for iv in parse.intervals if not iv["warmup"]]
    samples, values = log_series(kept)
    scalars, accept_source = _log_scalars(kept, samples, values)
    header = log_launch_header(parse, path)
    if accept_source is not None:
        header["accept_len_source"] = accept_source
    warm = sum(1 for iv in parse.intervals if iv["warmup"])
    launch = new_launch(index, parse.intervals[0].get("time") if parse.intervals else None, header)
    launch["status"] = "ok" if samples or values.get("spec_accept_len") else "error"
    launch.update(warmup_dropped=warm, samples=samples, values=values, scalars=scalars)
    launch["footer"] = parse.counts()
    if launch["status"] == "error":
        launch["error"] = (
            f"all {warm} intervals are warm-up (first after idle); nothing left to measure"
            if warm
            else "no interval with generated tokens"
        )
    return launch


def log_run(config: dict[str, Any]) -> dict[str, Any]:
    run = new_run(
        kind="log",
        probe_name="ingest-log",
        probe_version=LOG_PROBE_VERSION,
        config=config,
        primary="itl",
        phases=["itl"],
        units={"itl": "ms", "cycle": "ms", "gen_tok_s": "tok/s", "accept_len": "tokens/step"},
    )
    run["phases_sum_to_primary"] = False
    run["probe"]["measures"] = "served-itl"  # as a live server run's (regdiag/importers: measures)
    declare(run, LOG_METRICS)  # unit and which way is better, per metric: regdiag/direction.py
    run["ingested"] = now_iso()
    return run
