"""A torch.profiler Chrome trace (`export_chrome_trace`, `.json` or `.json.gz`): the trace files
`probe spec-decode --profile` keeps, and the ones an engine's own profiler writes with torch.profiler
(SGLang's and vLLM's `start_profile`). One launch per file.

Each `record_function` range (a `user_annotation` event; NVTX-named phases of the probe: draft,
verify, extend) is a phase; `cycle`, `ProfilerStep#N` and ranges beyond the MAX_RANGES of most total
time are left out. The launch carries the same per-phase `profile` as a `--profile` launch
(probes/_profile.py reads it, per occurrence of the range: GPU busy and idle, host time, syncs, top
kernels), so `regdiag compare a.trace.json.gz b.trace.json.gz` splits each range's change into GPU work
and GPU idle, the kernels that moved listed good against bad; and one sample per range, its wall time
(ms), which compare judges like any metric (no primary: the ranges are not parts of one sum).
"""

from __future__ import annotations

import json
from typing import Any

from regdiag.direction import LOWER, declare
from regdiag.errors import BadInput
from regdiag.importers import launch, new_import

NAME = "torch-trace"
TITLE = "torch.profiler Chrome trace (export_chrome_trace; --profile's trace files)"
MAX_RANGES = 16
SKIP = ("cycle",)


def sniff(text: str) -> bool:
    head = text.lstrip()[:4096]
    return head.startswith("{") and '"traceEvents"' in text and ('"cpu_op"' in text or '"kernel"' in text)


def parse(text: str, source: str) -> list[dict[str, Any]]:
    from regdiag.probe_modules import load

    try:
        trace = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{source}: not a JSON trace ({e.msg} at line {e.lineno})") from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise BadInput(f"{source}: no traceEvents list (not a Chrome trace)")
    ranges = [
        e
        for e in events
        if isinstance(e, dict)
        and e.get("cat") == "user_annotation"
        and isinstance(e.get("dur"), (int, float))
    ]
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for e in ranges:
        name = str(e.get("name"))
        if name in SKIP or name.startswith("ProfilerStep#"):
            continue
        total[name] = total.get(name, 0.0) + float(e["dur"])
        count[name] = count.get(name, 0) + 1
    if not total:
        raise BadInput(f"{source}: no record_function / NVTX ranges in the trace: nothing to call a phase")
    kept = sorted(total, key=lambda n: -total[n])[:MAX_RANGES]
    order = [n for n in dict.fromkeys(str(e.get("name")) for e in ranges) if n in kept]
    cuda = any(isinstance(e, dict) and e.get("cat") == "kernel" for e in events)
    prof = load("_profile")
    phases = {ph: prof.analyze(trace, [ph], cuda, count[ph])["phases"][ph] for ph in order}
    run = new_import(NAME, source, tool="torch.profiler", config={}, primary=None, select="trace")
    la = launch(0, {ph: [f["wall_ms"]] for ph, f in phases.items() if f["wall_ms"] > 0})
    la["profile"] = {
        "cycles": min(count[ph] for ph in order),
        "device": "cuda" if cuda else "cpu",
        "busy": prof.BUSY_GPU if cuda else prof.BUSY_CPU,
        "phases": phases,
        "occurrences": {ph: count[ph] for ph in order},
    }
    run["launches"].append(la)
    declare(run, {ph: ("ms", LOWER) for ph in order})
    return [run]
