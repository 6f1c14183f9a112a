"""Which way is better for a metric: declared by the record where it can be, inferred where it cannot.

A probe header (and so the run record) carries `better`: {metric: "higher" | "lower" | "context"} next to
`units`. That declaration wins. "context" is a setting or a condition of the measurement, not an outcome
(tp_rank, running_req, queue_req, cuda_graph, the experts a forward touched): compare shows how it moved,
apart from the verdicts, and never gives it one. Records written before probes declared directions (and metrics a probe left out)
fall back on the unit and the name: a bandwidth, a rate, tokens per step or a speedup is higher-is-better,
anything else (times) lower-is-better. The fallback is what made `compare` call a bandwidth drop
IMPROVED while the collectives probe's algbw_/busbw_ values carried no unit; it now knows those names.

Pure: no I/O, nothing else of regdiag.
"""

from __future__ import annotations

from typing import Any

HIGHER = "higher"
LOWER = "lower"
CONTEXT = "context"
DIRECTIONS = (HIGHER, LOWER, CONTEXT)

HIGHER_IS_BETTER_UNITS = frozenset(
    {"tok/s", "tokens/s", "GB/s", "GiB/s", "MB/s", "B/s", "tokens", "tokens/step", "x", "req/s"}
)
HIGHER_IS_BETTER_NAMES = frozenset(
    {
        "accept_len",
        "tok_s",
        "throughput",
        "busbw",
        "algbw",
        "bandwidth",
        "goodput",
        "prefix_cache_hit_rate",
    }
)
# Name shapes of higher-is-better metrics in records that declare nothing: the collectives probe's
# per-size bandwidths (algbw_64KiB, busbw_arg_64KiB) and rates written with their unit in the name.
HIGHER_IS_BETTER_PREFIXES = ("algbw_", "busbw_", "bandwidth_", "tok_s_")
HIGHER_IS_BETTER_SUFFIXES = ("_tok_s", "_gbps", "_GBps", "_req_s", "_bw")
CONTEXT_PREFIXES = ("experts_",)

# What regdiag's own instruments write (the probes under probes/ declare theirs in their header, as
# they cannot import regdiag): {metric: (unit, better)}.
SERVER_METRICS: dict[str, tuple[str, str]] = {
    "ttft": ("ms", LOWER),
    "itl": ("ms", LOWER),
    "e2e": ("ms", LOWER),
    "tpot": ("ms", LOWER),
    "cycle": ("ms", LOWER),
    "accept_len": ("tokens/step", HIGHER),
    "output_tokens": ("tokens", CONTEXT),
    # the engine's prefix-cache hits over the launch (engine_config.prefix_cache_hit_rate): a share of
    # prompt tokens served from the cache, one value per launch
    "prefix_cache_hit_rate": ("fraction", HIGHER),
}
LOG_METRICS: dict[str, tuple[str, str]] = {
    "itl": ("ms", LOWER),
    "cycle": ("ms", LOWER),
    "gen_tok_s": ("tok/s", HIGHER),
    "accept_len": ("tokens/step", HIGHER),
    "accept_rate": ("fraction", HIGHER),
    "spec_accept_len": ("tokens/step", HIGHER),
    "spec_accept_rate": ("fraction", HIGHER),
    "running_req": ("requests", CONTEXT),
    "queue_req": ("requests", CONTEXT),
    "tokens_used": ("tokens", CONTEXT),
    "tp_rank": ("rank", CONTEXT),
    "dp_rank": ("rank", CONTEXT),
    "cuda_graph": ("bool", CONTEXT),
}
# Settings and conditions that old ingest-log and server records wrote without a direction: the
# context entries of the two tables above.
CONTEXT_NAMES = frozenset(
    k for t in (SERVER_METRICS, LOG_METRICS) for k, (_u, b) in t.items() if b == CONTEXT
)


def declare(run: dict[str, Any], metrics: dict[str, tuple[str, str]]) -> None:
    """Write each metric's unit and direction into a run record (`units`, `better`)."""
    run["units"] = {**(run.get("units") or {}), **{k: u for k, (u, _b) in metrics.items()}}
    run["better"] = {**(run.get("better") or {}), **{k: b for k, (_u, b) in metrics.items()}}


def declared(record: dict[str, Any]) -> dict[str, str]:
    """The record's own `better` map, valid entries only (an unknown word is ignored, not trusted)."""
    raw = record.get("better")
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if v in DIRECTIONS}


def inferred(name: str, unit: str) -> str:
    """The fallback for a metric whose record does not say: by unit, then by name."""
    if name in CONTEXT_NAMES or name.startswith(CONTEXT_PREFIXES):
        return CONTEXT
    if unit in HIGHER_IS_BETTER_UNITS or name in HIGHER_IS_BETTER_NAMES:
        return HIGHER
    if name.startswith(HIGHER_IS_BETTER_PREFIXES) or name.endswith(HIGHER_IS_BETTER_SUFFIXES):
        return HIGHER
    return LOWER


def direction(name: str, unit: str, better: dict[str, str] | None = None) -> tuple[str, str]:
    """(direction, source): source is "declared" when the record said so, else "inferred"."""
    if better and better.get(name) in DIRECTIONS:
        return better[name], "declared"
    return inferred(name, unit), "inferred"


def higher_is_better(name: str, unit: str, better: dict[str, str] | None = None) -> bool:
    return direction(name, unit, better)[0] == HIGHER


def undeclared(record: dict[str, Any], names: set[str] | list[str]) -> list[str]:
    """The metrics among `names` whose unit or direction the record does not declare."""
    units = record.get("units")
    units = units if isinstance(units, dict) else {}
    better = declared(record)
    return sorted(n for n in names if n not in better or n not in units)


def of_header(name: str, header: dict[str, Any] | None) -> str:
    """Which way is better for one metric of a probe's header line: its declaration, else the fallback."""
    h = header if isinstance(header, dict) else {}
    units = h.get("units")
    units = units if isinstance(units, dict) else {}
    return direction(name, str(units.get(name, "")), declared(h))[0]


def merge(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """One map for a comparison of two records, and a warning per metric they disagree on (OLD's wins:
    a verdict is about how NEW moved relative to OLD, in OLD's terms)."""
    a, b = declared(old), declared(new)
    conflicts = [
        f"{k}: {a[k]} is better in OLD, {b[k]} in NEW" for k in sorted(set(a) & set(b)) if a[k] != b[k]
    ]
    return {**b, **a}, conflicts
