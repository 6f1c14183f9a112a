"""Which way is better for a metric: declared by the record where it can be, inferred where it cannot.

A probe header (and so the run record) may carry `better`: {metric: "higher" | "lower"} next to `units`.
That declaration wins. Records written before probes declared directions (and metrics a probe left out)
fall back on the unit and the name: a bandwidth, a rate, tokens per step or a speedup is higher-is-better,
anything else (times) lower-is-better. The fallback is what made `compare` call a bandwidth drop
IMPROVED while the collectives probe's algbw_/busbw_ values carried no unit; it now knows those names.

Pure: no I/O, nothing else of regdiag.
"""

from __future__ import annotations

from typing import Any

HIGHER = "higher"
LOWER = "lower"
DIRECTIONS = (HIGHER, LOWER)

HIGHER_IS_BETTER_UNITS = frozenset(
    {"tok/s", "tokens/s", "GB/s", "GiB/s", "MB/s", "B/s", "tokens", "tokens/step", "x", "req/s"}
)
HIGHER_IS_BETTER_NAMES = frozenset(
    {"accept_len", "tok_s", "throughput", "busbw", "algbw", "bandwidth", "goodput"}
)
# Name shapes of higher-is-better metrics in records that declare nothing: the collectives probe's
# per-size bandwidths (algbw_64KiB, busbw_arg_64KiB) and rates written with their unit in the name.
HIGHER_IS_BETTER_PREFIXES = ("algbw_", "busbw_", "bandwidth_", "tok_s_")
HIGHER_IS_BETTER_SUFFIXES = ("_tok_s", "_gbps", "_GBps", "_req_s", "_bw")


def declared(record: dict[str, Any]) -> dict[str, str]:
    """The record's own `better` map, valid entries only (an unknown word is ignored, not trusted)."""
    raw = record.get("better")
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if v in DIRECTIONS}


def inferred(name: str, unit: str) -> str:
    """The fallback for a metric whose record does not say: by unit, then by name."""
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


def merge(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """One map for a comparison of two records, and a warning per metric they disagree on (OLD's wins:
    a verdict is about how NEW moved relative to OLD, in OLD's terms)."""
    a, b = declared(old), declared(new)
    conflicts = [
        f"{k}: {a[k]} is better in OLD, {b[k]} in NEW" for k in sorted(set(a) & set(b)) if a[k] != b[k]
    ]
    return {**b, **a}, conflicts
