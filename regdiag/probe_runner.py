"""Moved: measuring on a host lives in regdiag/measure/ (docs/architecture.md). These names stay
importable from here for code written against the old module."""

from __future__ import annotations

from regdiag.measure.launch import measure_launch
from regdiag.measure.probe import RunResult, new_probe_run, run_probe
from regdiag.measure.probes import presets, probe_script, probe_table
from regdiag.measure.stream import PROGRESS_PREFIX, PROTOCOL, LaunchStream
from regdiag.measure.summary import summarize_run

PROBES = probe_table()
PRESETS = presets()

__all__ = [
    "PRESETS", "PROBES", "PROGRESS_PREFIX", "PROTOCOL", "LaunchStream", "RunResult", "measure_launch",
    "new_probe_run", "probe_script", "run_probe", "summarize_run",
]  # fmt: skip
