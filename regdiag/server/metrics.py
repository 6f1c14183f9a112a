"""Speculative-decoding counters from /metrics (Prometheus text), read before and after a launch.

vLLM (V1 engine) counts speculative decoding in three counters, exported with the `_total`
suffix and one series per engine (label `engine`, plus `model_name`); llama.cpp's server
(started with --metrics) exports the same three under the prefix `llamacpp:`:

  vllm:spec_decode_num_drafts           draft proposals (one per request per verify step)
  vllm:spec_decode_num_draft_tokens     draft tokens proposed
  vllm:spec_decode_num_accepted_tokens  draft tokens accepted

Over a launch, with deltas d = after - before summed over all series:
  mean acceptance length = 1 + d(accepted) / d(drafts)   (vLLM's own convention: includes the bonus)
  acceptance rate        = d(accepted) / d(draft_tokens)
Per-position rates come from vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}.
Older engines without num_drafts (the V0 spec_decode counters) give the rate but no length.

SGLang has no accepted-token counter: its spec_accept_length and spec_accept_rate are gauges of the
last logging interval (multiprocess_mode "mostrecent"), not of the launch. Its one cumulative
speculative counter is sglang:spec_verify_calls_total (metrics/collector.py, TokenizerMetricsCollector:
each finished request adds its spec_verify_ct, the verify passes that produced its tokens; added by
sgl-project/sglang#25689), next to sglang:generation_tokens_total. A request's accept length is
completion_tokens / spec_verify_ct (the identity SGLang's own per-request spec_accept_length obeys), so
over a launch:
  mean acceptance length = d(sglang:generation_tokens) / d(sglang:spec_verify_calls)
(no acceptance rate: no draft-token count is exported).

Prefix-cache hits over the launch, for the engine section: vLLM's vllm:prefix_cache_hits and
vllm:prefix_cache_queries counters (tokens), hits / queries; SGLang's sglang:cache_hit_rate gauge, as
read after the launch.
"""

from __future__ import annotations

import math
import re
from typing import Any

_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')

# Engines that export these counters, by metric-name prefix: vLLM, and llama.cpp's server (with
# --metrics), which uses the same names and meaning under "llamacpp:".
PREFIXES = {"vllm:": "vllm", "llamacpp:": "llama.cpp"}
DRAFTS = "spec_decode_num_drafts"
DRAFT_TOKENS = "spec_decode_num_draft_tokens"
ACCEPTED = "spec_decode_num_accepted_tokens"
PER_POS = "spec_decode_num_accepted_tokens_per_pos"
GENERATION_TOKENS = {"vllm:": "generation_tokens", "llamacpp:": "tokens_predicted"}
SGL_VERIFY_CALLS = "sglang:spec_verify_calls"
SGL_GENERATION_TOKENS = "sglang:generation_tokens"

Sample = tuple[str, dict[str, str], float]


def parse_prometheus(text: str) -> list[Sample]:
    """Samples of the Prometheus text format; comment lines and lines that do not parse are skipped."""
    out: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group("labels") or ""))
        out.append((m.group("name"), labels, value))
    return out


def counter_sum(samples: list[Sample], base: str) -> float | None:
    """Sum of a counter over all its series; accepts the name with or without `_total`."""
    total = 0.0
    seen = False
    for name, _labels, value in samples:
        if name in (base, base + "_total") and math.isfinite(value):
            total += value
            seen = True
    return total if seen else None


def per_position(samples: list[Sample], base: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for name, labels, value in samples:
        if name in (base, base + "_total") and "position" in labels and math.isfinite(value):
            try:
                pos = int(labels["position"])
            except ValueError:
                continue
            out[pos] = out.get(pos, 0.0) + value
    return out


def spec_counters(text: str) -> dict[str, Any]:
    """The counters regdiag uses, from one /metrics scrape (None where absent), and whose they are."""
    s = parse_prometheus(text)
    found = [
        p
        for p in PREFIXES
        if counter_sum(s, p + DRAFTS) is not None or counter_sum(s, p + ACCEPTED) is not None
    ]
    prefix = found[0] if found else "vllm:"
    verify_calls = counter_sum(s, SGL_VERIFY_CALLS)
    return {
        "engine": PREFIXES[prefix] if found else ("sglang" if verify_calls is not None else None),
        "verify_calls": verify_calls,
        "sglang_generation_tokens": counter_sum(s, SGL_GENERATION_TOKENS),
        "drafts": counter_sum(s, prefix + DRAFTS),
        "draft_tokens": counter_sum(s, prefix + DRAFT_TOKENS),
        "accepted": counter_sum(s, prefix + ACCEPTED),
        "generation_tokens": counter_sum(s, prefix + GENERATION_TOKENS[prefix]),
        "per_position": per_position(s, prefix + PER_POS),
        "prefix_cache_hits": counter_sum(s, "vllm:prefix_cache_hits"),
        "prefix_cache_queries": counter_sum(s, "vllm:prefix_cache_queries"),
        "cache_hit_rate": next(
            (v for n, _, v in s if n == "sglang:cache_hit_rate" and math.isfinite(v)), None
        ),
    }


def spec_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """Deltas over a launch and what follows from them. Empty when the server has no spec counters."""
    if not before or not after:
        return {}
    out: dict[str, Any] = {"engine": after.get("engine")} if after.get("engine") else {}
    for key in (
        "drafts",
        "draft_tokens",
        "accepted",
        "generation_tokens",
        "prefix_cache_hits",
        "prefix_cache_queries",
        "verify_calls",
        "sglang_generation_tokens",
    ):
        b, a = before.get(key), after.get(key)
        if b is not None and a is not None:
            if a < b:  # a counter that went down means the server restarted in between
                out["counter_reset"] = True
                continue
            out[key] = a - b
    drafts, accepted, draft_tokens = out.get("drafts"), out.get("accepted"), out.get("draft_tokens")
    if drafts and accepted is not None:
        out["accept_len"] = 1.0 + accepted / drafts
    if draft_tokens and accepted is not None:
        out["accept_rate"] = accepted / draft_tokens
    verify, sgl_tokens = out.pop("verify_calls", None), out.pop("sglang_generation_tokens", None)
    if drafts is None and verify and sgl_tokens is not None:  # SGLang: tokens per verify pass
        out["verify_calls"], out["generation_tokens"] = verify, sgl_tokens
        out["accept_len"] = sgl_tokens / verify
        out["accept_len_from"] = "sglang:generation_tokens_total / sglang:spec_verify_calls_total"
    queries = out.pop("prefix_cache_queries", None)
    hits = out.pop("prefix_cache_hits", None)
    if queries and hits is not None:
        out["prefix_cache_hit_rate"] = hits / queries
    elif after.get("cache_hit_rate") is not None:
        out["prefix_cache_hit_rate"] = after["cache_hit_rate"]
    pb, pa = before.get("per_position") or {}, after.get("per_position") or {}
    if drafts and pa:
        out["per_position_rate"] = [
            (pa[p] - pb.get(p, 0.0)) / drafts for p in sorted(pa) if pa[p] >= pb.get(p, 0.0)
        ]
    return out
