"""`regdiag compare OLD NEW`: is it real, where does it live, what changed.

Takes two run records (docs/records.md) and returns a Comparison: a verdict per metric (ratio of
launch medians with a CI against a margin, Holm across the secondary metrics), the attribution of
the primary's change to its phases, the tok/s split, the noise, the GPU state of each side
(PHANTOM warnings) and the environment diff. Works on any named metrics: a spec-decode cycle and
its phases, a server's e2e / ttft / itl, a collective sweep's one metric per message size.

One module per job: runs.py (`compare_runs`, putting it together), checks.py (options, mismatches,
which launches and metrics count), design.py (interleaved or not; drift), verdicts.py (each metric's
test, Holm, the overall verdict), envdiff.py (what changed around the runs), result.py (the data).

Library code: no typer, no rich. Bad input raises BadInput with one line.
"""

from __future__ import annotations

from regdiag.compare.checks import MEASUREMENT_KEYS
from regdiag.compare.design import (
    DRIFT_ALPHA,
    INTERLEAVED,
    OVERLAPPING,
    POSSIBLY_DRIFT,
    SEQUENTIAL,
    UNKNOWN,
)
from regdiag.compare.result import EXIT_CODES, Comparison, MetricResult, SideInfo
from regdiag.compare.runs import compare_runs
from regdiag.compare.verdicts import higher_is_better

__all__ = [
    "DRIFT_ALPHA",
    "EXIT_CODES",
    "INTERLEAVED",
    "MEASUREMENT_KEYS",
    "OVERLAPPING",
    "POSSIBLY_DRIFT",
    "SEQUENTIAL",
    "UNKNOWN",
    "Comparison",
    "MetricResult",
    "SideInfo",
    "compare_runs",
    "higher_is_better",
]
