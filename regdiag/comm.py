"""How much of each phase is communication: the probe times every phase at TP > 1 with its collectives
and, interleaved in the same launch, with them left out (probes/_spec_runner.py); each launch's footer
holds the paired difference per phase. Across launches (the unit of evidence) this gives the mean
communication time with a 95 % t-interval, and its share of the phase.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from scipy import stats as _st

from regdiag.run_view import usable
from regdiag.sizes import approx_bytes

LEVEL = 0.95


@dataclass(frozen=True)
class CommShare:
    phase: str
    with_ms: float  # median over launches of the phase's median with communication
    without_ms: float  # ... and without
    comm_ms: float  # mean over launches of the paired difference
    ci_ms: tuple[float, float] | None  # 95 % t-interval of that mean (None with one launch)
    launches: int
    collectives: list[dict[str, Any]]  # per forward of the phase: op, bytes, count

    @property
    def share(self) -> float | None:
        return self.comm_ms / self.with_ms if self.with_ms > 0 else None

    def collectives_text(self) -> str:
        """'18 all_reduce x 14 KiB, 1 all_gather x 80 KiB' (per forward of the phase)."""
        return ", ".join(f"{c['count']} {c['op']} x {approx_bytes(c['bytes'])}" for c in self.collectives)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["share"] = self.share
        d["ci_ms"] = list(self.ci_ms) if self.ci_ms else None
        return d


def comm_shares(run: dict[str, Any]) -> list[CommShare]:
    """One CommShare per phase (and the cycle) of the ok launches that measured it; [] when none did."""
    ok = [la for la in run.get("launches", []) if usable(la)]
    per: dict[str, list[dict[str, Any]]] = {}
    for la in ok:
        for ph, c in ((la.get("footer") or {}).get("comm") or {}).items():
            if isinstance(c, dict) and isinstance(c.get("comm_ms"), (int, float)):
                per.setdefault(ph, []).append(c)
    header: dict[str, Any] = next((la["header"] for la in ok if isinstance(la.get("header"), dict)), {})
    model = header.get("model")  # an object in a probe's header, a name in a server's
    table = (model.get("collectives") if isinstance(model, dict) else None) or {}
    out = []
    for ph, cs in per.items():
        diffs = [float(c["comm_ms"]) for c in cs]
        mean = statistics.fmean(diffs)
        ci = None
        if len(diffs) >= 2:
            half = (
                _st.t.ppf(0.5 + LEVEL / 2, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
            )
            ci = (mean - half, mean + half)
        out.append(
            CommShare(
                phase=ph,
                with_ms=statistics.median(float(c["with_ms"]) for c in cs),
                without_ms=statistics.median(float(c["without_ms"]) for c in cs),
                comm_ms=mean,
                ci_ms=ci,
                launches=len(cs),
                collectives=list(table.get(ph) or []),
            )
        )
    return out
