"""`probe engine --profile`: the launch's profile from the hook's "profile" lines (probes/_engine_hook:
the cycles after the warm-up under torch.profiler, read per phase by probes/_profile.py in each
process, written as soon as they are read).

Each process that timed cycles profiled its own; the launch keeps the one whose phases took longest
(the slowest rank, as the launch's phase times are the slowest process's), says how many processes
profiled, and what the profiler cost: the profiled cycles' median against the measured ones'.
"""

from __future__ import annotations

import statistics
from typing import Any

from regdiag.measure.stream import LaunchStream


def launch_profile(streams: list[LaunchStream], launch: dict[str, Any]) -> None:
    """Set launch["profile"] from the streams' profile lines (nothing where no process profiled)."""
    told = [(s, s.profile) for s in streams if s.profile is not None]
    if not told:
        launch.pop("profile", None)
        return
    read = [(s, p) for s, p in told if isinstance(p.get("phases"), dict)]
    if not read:
        launch["profile"] = {**told[0][1], "processes": len(told)}
        return
    stream, prof = max(read, key=lambda sp: _wall(sp[1]))
    cost = dict(prof.get("cost") or {})
    profiled = [
        c["t"]["cycle"]
        for c in stream.cycles
        if c.get("profiled") == "read" and "cycle" in (c.get("t") or {})
    ]
    measured = (launch.get("samples") or {}).get("cycle") or []
    cost["cycle_ms_profiled"] = round(statistics.median(profiled), 5) if profiled else None
    cost["cycle_ms_measured"] = round(statistics.median(measured), 5) if measured else None
    launch["profile"] = {**prof, "cost": cost, "processes": len(told)}


def _wall(p: dict[str, Any]) -> float:
    return sum(float(f.get("wall_ms") or 0.0) for f in p["phases"].values() if isinstance(f, dict))
