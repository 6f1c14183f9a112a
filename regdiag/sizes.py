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
