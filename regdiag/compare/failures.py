"""Results that failed, which a side's latencies leave out: wrong values of nccl-tests, failed requests
of bench files.

nccl-tests checks its results (`-c 1`): a test with a `#wrong` value that is not 0, or out-of-bounds
values in its footer, is a failed launch (regdiag/importers/nccl_tests.py). NEW with such a test where
OLD has none is REGRESSED (exit 1), named in the headline, whatever its other tests' times say.

Failed requests of bench files (vllm bench serve, SGLang bench_serving): a side that fails more of
its requests is a regression, however fast it answered the rest. Its latencies leave the failed
requests out (regdiag/importers/vllm_bench.py), so a server that drops its slowest requests would
otherwise look faster. Tested as counts: one-sided Fisher exact on failed / sent per side
(more_often), at the comparison's level, so 0 -> 1 of 192 (p 0.5) is said, not judged.
"""

from __future__ import annotations

import math
from typing import Any

from regdiag import stats

WRONG_VALUES = "wrong_values"  # a failed nccl-tests launch's header (regdiag/importers/nccl_tests.py)
FAILED_REQUESTS = "failed_requests"  # a bench file's count per launch (regdiag/importers/vllm_bench.py)
COMPLETED = "completed"  # the requests that succeeded, in the same launch's scalars


def counts(run: dict[str, Any]) -> tuple[int, int] | None:
    """(failed, sent) over the run's launches (failed ones too: a launch whose every request failed
    counts them all), or None where no launch says how many failed."""
    failed = sent = 0
    seen = False
    for la in run.get("launches") or []:
        sc = la.get("scalars") or {}
        f, c = sc.get(FAILED_REQUESTS), sc.get(COMPLETED)
        if not _count(f):
            continue
        seen = True
        failed += int(f)
        sent += int(f) + (int(c) if _count(c) else 0)
    return (failed, sent) if seen else None


def _count(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and x >= 0


def failed_requests(
    old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str, level: float
) -> tuple[list[str], str | None]:
    """(warnings, the note of a verdict it makes REGRESSED or None): one warning when either side had
    failed requests; REGRESSED when NEW's share of failed requests is significantly higher."""
    o, n = counts(old), counts(new)
    if o is None and n is None:
        return [], None
    (fo, so), (fn, sn) = o or (0, 0), n or (0, 0)
    if not (fo or fn):
        return [], None
    where = f"{fo} of {so} in {old_label}, {fn} of {sn} in {new_label}"
    if o is None or n is None:
        side = old_label if o is None else new_label
        return [f"failed requests: {where} ({side}'s files do not say how many failed; not judged)"], None
    p = more_often(fo, so, fn, sn)
    more = "more" if fn / max(sn, 1) > fo / max(so, 1) else "fewer" if fn * so < fo * sn else "as many"
    line = (
        f"failed requests: {where} (left out of the latencies; {more} in {new_label}, "
        f"Fisher exact one-sided p {p:.2g})"
    )
    if p < 1 - level:
        return [line], f"{new_label} failed more requests ({fo}/{so} \u2192 {fn}/{sn}, p {p:.2g})"
    return [line], None


def failed(
    old: dict[str, Any],
    new: dict[str, Any],
    old_label: str,
    new_label: str,
    level: float,
    warnings: list[str],
) -> tuple[str, str] | None:
    """(REGRESSED, why) where NEW computed wrong results or failed more requests, whatever the times
    say; None otherwise. Each side's failures are added to `warnings`."""
    wrong_w, wrong = wrong_values(old, new, old_label, new_label)
    failed_w, more = failed_requests(old, new, old_label, new_label, level)
    warnings += failed_w + wrong_w
    why = wrong or more
    return (stats.REGRESSED, why) if why else None


def wrong_values(
    old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str
) -> tuple[list[str], str | None]:
    """(warnings, the note of a verdict it makes REGRESSED or None): each side's launches whose
    results were wrong, by cause; REGRESSED when NEW has some and OLD none."""
    o, n = _wrong(old), _wrong(new)
    warnings = [
        f"wrong results in {label}: {len(bad)} launch{'es' if len(bad) > 1 else ''} left out of the "
        f"numbers ({'; '.join(bad[:3])}{'; ...' if len(bad) > 3 else ''})"
        for label, bad in ((old_label, o), (new_label, n))
        if bad
    ]
    if n and not o:
        return warnings, f"{new_label} computed wrong results ({n[0]})"
    return warnings, None


def _wrong(run: dict[str, Any]) -> list[str]:
    return [
        f"launch {la.get('index')}: {la.get('error')}"
        for la in run.get("launches") or []
        if isinstance(la, dict) and (la.get("header") or {}).get(WRONG_VALUES)
    ]


def more_often(old_hits: int, old_total: int, new_hits: int, new_total: int) -> float:
    """One-sided Fisher exact p that NEW's share of hits (failed requests) is higher than OLD's: the
    chance, given the hits of both sides together, that NEW draws at least as many of them as it did
    (the hypergeometric upper tail). Counts, not launches: each request is one trial."""
    hits, total = old_hits + new_hits, old_total + new_total
    if not 0 <= old_hits <= old_total or not 0 <= new_hits <= new_total or hits == 0:
        return 1.0

    def log_comb(n: int, k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)

    base = log_comb(total, new_total)
    top = min(hits, new_total)
    tail = [
        log_comb(hits, x) + log_comb(total - hits, new_total - x) - base for x in range(new_hits, top + 1)
    ]
    if not tail:
        return 0.0
    m = max(tail)
    return min(1.0, math.exp(m) * sum(math.exp(t - m) for t in tail))
