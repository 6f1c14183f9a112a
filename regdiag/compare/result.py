"""What `regdiag compare` returns: a verdict per metric (MetricResult), each side as it was measured
(SideInfo), and the whole Comparison with its JSON form (`regdiag.comparison/1`, docs/records.md).

Data only: the code that fills these in is the rest of regdiag/compare/.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from regdiag import direction, phantom, stats
from regdiag.attribution import Attribution, Throughput
from regdiag.compare.design import UNKNOWN
from regdiag.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSED
from regdiag.records import COMPARISON, finite, schema_id
from regdiag.sizes import SizeRow
from regdiag.version import __version__

EXIT_CODES = {
    stats.REGRESSED: EXIT_REGRESSED,
    stats.INCONCLUSIVE: EXIT_INCONCLUSIVE,
    stats.UNCHANGED: EXIT_OK,
    stats.IMPROVED: EXIT_OK,
}


@dataclass
class MetricResult:
    name: str
    role: str  # "primary", "phase", "metric" (another timed series), "value" (per-cycle values) or "context"
    unit: str
    higher_is_better: bool
    reduce: str  # how a launch becomes one number: "median" (times) or "mean" (values)
    estimate: stats.RatioEstimate | None
    p_adjusted: float | None
    verdict: str | None  # None for a context metric: a setting, never judged
    more_launches: int | None  # for INCONCLUSIVE: launches per side to add, None if > cap or unknown
    note: str
    old_centers: list[float]
    new_centers: list[float]
    noise_old: stats.Noise
    noise_new: stats.Noise
    direction_source: str = "inferred"  # "declared" by the record's `better` map, or inferred from unit/name
    better: str = direction.LOWER  # "higher", "lower" or "context" (regdiag/direction.py)

    @property
    def change(self) -> float | None:
        return None if self.estimate is None else self.estimate.ratio - 1.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["estimate"] = None if self.estimate is None else self.estimate.to_dict()
        d["change"] = self.change
        return finite(d)


@dataclass
class SideInfo:
    label: str
    id: str | None
    created: str | None
    status: str | None
    probe: str | None
    probe_version: str | None
    config: dict[str, Any]
    host: str | None
    launches_total: int
    launches_used: int
    skipped: list[str]
    clocks: phantom.ClockSummary

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["clocks"] = self.clocks.to_dict()
        return finite(d)


@dataclass
class Comparison:
    old: SideInfo
    new: SideInfo
    primary: str | None
    margin: float
    method: str
    level: float
    metrics: list[MetricResult]
    attribution: Attribution | None
    throughput: Throughput | None
    verdict: str
    phantom: list[str]
    warnings: list[str]
    env_diff: list[dict[str, Any]] | None
    env_note: str
    notes: list[str] = field(default_factory=list)
    # How the two sides were measured: {"kind": "interleaved" | "sequential" | "overlapping" | "unknown", ...}
    design: dict[str, Any] = field(default_factory=lambda: {"kind": UNKNOWN})
    drift: dict[str, stats.Trend | None] = field(default_factory=dict)  # per side label, of the primary
    verdict_note: str | None = None  # "possibly drift": a change that a drifting machine can explain
    # Runs from two different hosts: how the two machines differ (GPU clocks, power cap, PCIe link,
    # driver, NCCL, host settings), a subset of env_diff; None when both ran on the same host.
    machine_diff: list[dict[str, Any]] | None = None
    # Metrics that are settings or conditions, not outcomes (direction "context"): how they moved, no verdict.
    context: list[MetricResult] = field(default_factory=list)
    # A collectives sweep, one row per message size and mode: latency and busbw together (regdiag/sizes.py).
    sizes: list[SizeRow] = field(default_factory=list)
    # The host's reading (regdiag/compare/host.py): flagged launches per side, whether they were left
    # out (--exclude-flagged) and the verdict of the other choice.
    host: dict[str, Any] = field(default_factory=dict)
    # A sweep judged per size (no --metric): the sentence naming the sizes that moved, "" otherwise.
    sweep: str = ""
    # The metric the verdict is of, where --metric chose it (else the primary, or the sweep's sizes).
    judged_by: str | None = None
    # Records from several nodes: the node-as-block reading (regdiag.blocks.FleetResult), else None.
    fleet: Any = None
    # --profile on both sides: each phase's change split into GPU work and GPU idle (profiles.py).
    profile: dict[str, Any] | None = None
    # A side whose launches are two groups (regdiag/compare/populations.py): which, and what differs.
    populations: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def metric(self, name: str) -> MetricResult:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return finite(
            {
                "schema": schema_id(COMPARISON),
                "regdiag_version": __version__,
                "verdict": self.verdict,
                "exit_code": self.exit_code,
                "primary": self.primary,
                "margin": self.margin,
                "method": self.method,
                "level": self.level,
                "old": self.old.to_dict(),
                "new": self.new.to_dict(),
                "metrics": [m.to_dict() for m in self.metrics],
                "context": [m.to_dict() for m in self.context],
                "sizes": [r.to_dict() for r in self.sizes],
                "attribution": None if self.attribution is None else self.attribution.to_dict(),
                "throughput": None if self.throughput is None else self.throughput.to_dict(),
                "phantom": self.phantom,
                "warnings": self.warnings,
                "notes": self.notes,
                "env_diff": self.env_diff,
                "env_note": self.env_note,
                "design": self.design,
                "drift": {k: None if t is None else t.to_dict() for k, t in self.drift.items()},
                "verdict_note": self.verdict_note,
                "machine_diff": self.machine_diff,
                "host": self.host,
                "sweep": self.sweep,
                "judged_by": self.judged_by,
                **({"fleet": self.fleet.to_dict()} if self.fleet is not None else {}),
                "profile": self.profile,
                "populations": self.populations,
            }
        )
