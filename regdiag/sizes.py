"""A collectives comparison as nccl-tests prints a sweep: one row per message size (and mode), latency
and bus bandwidth side by side, each with its own verdict.

The rows only regroup the metrics compare already judged (ar_64KiB in us, busbw_64KiB in GB/s): no new
statistics. The probe's header lists its sweep (`sizes`: op, bytes, label and the metric of each mode);
runs of other probes have no such list and get no rows.

Pure: no I/O, no typer or rich.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class Judged(Protocol):
    """What a row needs of a compared metric (regdiag.compare.MetricResult)."""

    name: str
    unit: str
    verdict: str | None

    @property
    def change(self) -> float | None: ...

    @property
    def estimate(self) -> Any: ...


def bw_name(kind: str, metric: str) -> str:
    """The bandwidth value of a latency metric, as probes/collectives.py names it: busbw_64KiB for
    ar_64KiB (the names of its version 1), busbw_arg_64KiB for arg_64KiB and every other op."""
    return f"{kind}_{metric[3:]}" if metric.startswith("ar_") else f"{kind}_{metric}"


@dataclass
class Cell:
    metric: str
    unit: str
    old: float | None
    new: float | None
    change: float | None
    verdict: str | None

    @classmethod
    def of(cls, m: Judged) -> Cell:
        e = m.estimate
        old, new = (None, None) if e is None else (e.old_center, e.new_center)
        return cls(m.name, m.unit, old, new, m.change, m.verdict)


@dataclass
class SizeRow:
    op: str
    bytes: int
    label: str
    mode: str
    latency: Cell
    busbw: Cell | None

    @property
    def metrics(self) -> set[str]:
        """The metrics this row stands for: latency, busbw and the algbw that busbw is a multiple of."""
        return {
            self.latency.metric,
            bw_name("busbw", self.latency.metric),
            bw_name("algbw", self.latency.metric),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "bytes": self.bytes,
            "label": self.label,
            "mode": self.mode,
            "latency": vars(self.latency),
            "busbw": None if self.busbw is None else vars(self.busbw),
        }


def sweep(headers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first header's list of sizes (every launch of a run has the same sweep)."""
    for h in headers:
        items = h.get("sizes")
        if isinstance(items, list):
            return [it for it in items if isinstance(it, dict) and isinstance(it.get("metrics"), dict)]
    return []


def size_rows(items: list[dict[str, Any]], judged: list[Judged]) -> list[SizeRow]:
    """One row per (op, bytes, mode) of the sweep whose latency metric both runs measured."""
    by_name = {m.name: m for m in judged}
    rows = []
    for it in items:
        for mode, name in it["metrics"].items():
            lat = by_name.get(str(name))
            if lat is None:
                continue
            bw = by_name.get(bw_name("busbw", lat.name))
            rows.append(
                SizeRow(
                    op=str(it.get("op", "all_reduce")),
                    bytes=int(it.get("bytes") or 0),
                    label=str(it.get("label") or ""),
                    mode=str(mode),
                    latency=Cell.of(lat),
                    busbw=None if bw is None else Cell.of(bw),
                )
            )
    return rows


def ordered(rows: list[SizeRow]) -> list[SizeRow]:
    """Rows by op and mode as the sweep first lists them, then by message size."""
    first: dict[tuple[str, str], int] = {}
    for i, r in enumerate(rows):
        first.setdefault((r.op, r.mode), i)
    return sorted(rows, key=lambda r: (first[(r.op, r.mode)], r.bytes))


# How one size's verdict weighs in the sweep's: the worst beyond the margin decides (a gate on a sweep
# fails when any size regressed), then any size not settled, then an improvement.
_WORST_FIRST = ("REGRESSED", "INCONCLUSIVE", "IMPROVED", "UNCHANGED")


def sweep_verdict(rows: list[SizeRow]) -> tuple[str | None, str]:
    """The verdict of a sweep judged per size, and the sentence that names the sizes that moved:
    "REGRESSED at 1 KiB-64 KiB (+30.1 %); unchanged from 128 KiB to 1 GiB". (None, "") without rows."""
    judged = [r for r in ordered(rows) if r.latency.verdict in _WORST_FIRST]
    if not judged:
        return None, ""
    verdict = next(v for v in _WORST_FIRST if any(r.latency.verdict == v for r in judged))
    groups: dict[tuple[str, str], list[SizeRow]] = {}
    for r in judged:
        groups.setdefault((r.op, r.mode), []).append(r)
    several = len(groups) > 1
    parts = []
    for (op, mode), rs in groups.items():
        runs = _runs_of_one_verdict(rs)
        said = []
        for v in _WORST_FIRST:  # what moved first, then what is not settled, then what held
            spans = [span for w, span in runs if w == v]
            if not spans:
                continue
            if v == "UNCHANGED":
                said.append("unchanged at " + ", ".join(_range_txt(span) for span in spans))
            else:
                said.append(f"{v} at " + ", ".join(_span_txt(span) for span in spans))
        parts.append((f"{op} {mode}: " if several else "") + "; ".join(said))
    return verdict, " | ".join(parts)


def _runs_of_one_verdict(rows: list[SizeRow]) -> list[tuple[str, list[SizeRow]]]:
    out: list[tuple[str, list[SizeRow]]] = []
    for r in rows:
        v = str(r.latency.verdict)
        if out and out[-1][0] == v:
            out[-1][1].append(r)
        else:
            out.append((v, [r]))
    return out


def _range_txt(span: list[SizeRow]) -> str:
    a, b = human_bytes(span[0].bytes), human_bytes(span[-1].bytes)
    return a if a == b else f"{a}-{b}"


def _span_txt(span: list[SizeRow]) -> str:
    changes = sorted(c for r in span if (c := r.latency.change) is not None)
    if not changes:
        return _range_txt(span)
    lo, hi = changes[0] * 100, changes[-1] * 100
    how = f"{lo:+.1f} %" if abs(hi - lo) < 0.05 else f"{lo:+.1f} to {hi:+.1f} %"
    return f"{_range_txt(span)} ({how})"


def human_bytes(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def approx_bytes(n: int) -> str:
    """A size to three digits: 2.34 MiB, 512 KiB, 17 B."""
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{n} B"
