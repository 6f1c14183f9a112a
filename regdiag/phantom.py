"""Is it the machine rather than the code? Clock, power and throttle state of each side.

A "phantom" regression is a real difference in the measurements whose cause is the state of the
GPU (a different boost clock, a lower power cap, thermal or power throttling) or a machine too
noisy for the margin, not the software under test. The statistics cannot tell those apart; these
checks can, from the clock samples the probe takes during each launch and from the snapshots.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from regdiag import stats
from regdiag.snapshot.check import THROTTLE_REASONS as CHECK_THROTTLE_REASONS
from regdiag.snapshot.fields import value_of

# Clock-event reasons that mean "slowed down" (idle, application-clock and sync-boost reasons do not):
# one table, snapshot/check.py's, whose names are probes/_nvml.py's REASON_BITS (tests/test_layers.py).
THROTTLE_REASONS = frozenset(CHECK_THROTTLE_REASONS)
CLOCK_TOLERANCE = 0.02  # median SM or memory clock differing by more: a different GPU state
THROTTLE_MIN_FRACTION = 0.05  # a reason present in at least this share of samples counts
NOISE_FACTOR = 2.5  # a side varying more than this x margin launch to launch cannot resolve it
NOISE_RATIO = 3.0  # one side this much noisier than the other: something else was running

# Snapshot fields (per GPU: "gpu0.power_limit_w") that are settings, not momentary readings.
SETTING_FIELDS = (
    "power_limit_w",
    "power_default_limit_w",
    "clock_sm_app_mhz",
    "clock_mem_app_mhz",
    "clock_sm_max_mhz",
    "clock_mem_max_mhz",
    "persistence_mode",
    "pcie_gen",
    "pcie_width",
)


@dataclass
class ClockSummary:
    samples: int = 0
    gpus: int = 0
    sm_mhz: float | None = None  # median over launches of each launch's median
    sm_mhz_min: float | None = None
    sm_mhz_max: float | None = None
    sm_mhz_lo: float | None = None  # the lowest and highest sample while measuring
    sm_mhz_hi: float | None = None
    mem_mhz: float | None = None
    power_w: float | None = None
    temp_c_max: float | None = None
    throttle: dict[str, float] = field(default_factory=dict)  # reason -> share of samples
    per_launch_sm: list[float | None] = field(default_factory=list)
    traces: list[list[tuple[float, float]]] = field(default_factory=list)  # (t, sm_mhz) of gpu 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("traces")
        return d


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def in_measure_window(launch: dict[str, Any], clocks: list[Any]) -> list[Any]:
    """The samples taken while cycles were measured.

    A launch also builds its model and warms up, at idle clocks (345 MHz on an H200): counting those
    would make two identical runs look like different clock states. The probe's footer gives the
    measured window on the same time base as the samples (a server launcher: `clocks_window_s`, the
    load's); without it every sample counts.
    """
    footer: Any = launch.get("footer")
    footer = footer if isinstance(footer, dict) else {}
    # a server's or engine's launcher says when the load ran, on its samples' time base
    window = footer.get("measure_window_s") or launch.get("clocks_window_s")
    if not (isinstance(window, list) and len(window) == 2 and all(_num(w) is not None for w in window)):
        return clocks
    lo, hi = float(window[0]), float(window[1])
    inside = [
        c for c in clocks if isinstance(c, dict) and (t := _num(c.get("t"))) is not None and lo <= t <= hi
    ]
    return inside or clocks


def summarize_clocks(launches: Sequence[dict[str, Any]]) -> ClockSummary:
    s = ClockSummary()
    gpus: set[Any] = set()
    launch_sm, launch_mem, launch_pw, temps, all_sm = [], [], [], [], []
    reasons: dict[str, int] = {}
    for la in launches:
        all_clocks = la.get("clocks") or []
        if not isinstance(all_clocks, list):
            all_clocks = []
        clocks = in_measure_window(la, all_clocks)
        sm = [v for c in clocks if isinstance(c, dict) and (v := _num(c.get("sm_mhz"))) is not None]
        all_sm += sm
        mem = [v for c in clocks if isinstance(c, dict) and (v := _num(c.get("mem_mhz"))) is not None]
        pw = [v for c in clocks if isinstance(c, dict) and (v := _num(c.get("power_w"))) is not None]
        temps += [v for c in clocks if isinstance(c, dict) and (v := _num(c.get("temp_c"))) is not None]
        trace = []
        for c in clocks:
            if not isinstance(c, dict):
                continue
            s.samples += 1
            gpus.add(c.get("gpu", 0))
            for r in c.get("reasons") or []:
                if isinstance(r, str):
                    reasons[r] = reasons.get(r, 0) + 1
        for c in all_clocks:  # the plotted trace shows the whole launch, model build included
            if not isinstance(c, dict):
                continue
            t, v = _num(c.get("t")), _num(c.get("sm_mhz"))
            if c.get("gpu", 0) in (0, None) and t is not None and v is not None:
                trace.append((t, v))
        s.traces.append(trace)
        s.per_launch_sm.append(float(np.median(sm)) if sm else None)
        if sm:
            launch_sm.append(float(np.median(sm)))
        if mem:
            launch_mem.append(float(np.median(mem)))
        if pw:
            launch_pw.append(float(np.median(pw)))
    s.gpus = len(gpus)
    if all_sm:
        s.sm_mhz_lo, s.sm_mhz_hi = min(all_sm), max(all_sm)
    if launch_sm:
        s.sm_mhz = float(np.median(launch_sm))
        s.sm_mhz_min, s.sm_mhz_max = min(launch_sm), max(launch_sm)
    s.mem_mhz = float(np.median(launch_mem)) if launch_mem else None
    s.power_w = float(np.median(launch_pw)) if launch_pw else None
    s.temp_c_max = max(temps) if temps else None
    if s.samples:
        s.throttle = {r: n / s.samples for r, n in sorted(reasons.items()) if r in THROTTLE_REASONS}
    return s


def clock_warnings(old: ClockSummary, new: ClockSummary) -> list[str]:
    out = []
    for label, a, b in (("SM clock", old.sm_mhz, new.sm_mhz), ("memory clock", old.mem_mhz, new.mem_mhz)):
        if a and b and abs(b / a - 1) > CLOCK_TOLERANCE:
            out.append(
                f"{label} during launches differs: {a:.0f} MHz old vs {b:.0f} MHz new ({100 * (b / a - 1):+.1f} %)"
            )
    for reason in sorted(set(old.throttle) | set(new.throttle)):
        fo, fn = old.throttle.get(reason, 0.0), new.throttle.get(reason, 0.0)
        if max(fo, fn) >= THROTTLE_MIN_FRACTION and abs(fn - fo) >= THROTTLE_MIN_FRACTION:
            out.append(f"throttle reason {reason}: {100 * fo:.0f} % of samples old vs {100 * fn:.0f} % new")
    for label, side in (("old", old), ("new", new)):
        lo, hi = side.sm_mhz_min, side.sm_mhz_max
        if lo and hi and hi / lo - 1 > CLOCK_TOLERANCE:
            out.append(f"SM clock moved between {label} launches: {lo:.0f} to {hi:.0f} MHz")
    return out


def _fields(snapshot: dict[str, Any] | None, group: str) -> dict[str, Any]:
    if not isinstance(snapshot, dict):
        return {}
    g = (snapshot.get("groups") or {}).get(group) or {}
    fields = g.get("fields") if isinstance(g, dict) else None
    return fields if isinstance(fields, dict) else {}


def setting_warnings(old_snap: dict[str, Any] | None, new_snap: dict[str, Any] | None) -> list[str]:
    """GPU settings (power cap, application clocks, persistence, PCIe link) that differ between sides."""
    fo, fn = _fields(old_snap, "gpu"), _fields(new_snap, "gpu")
    out = []
    pattern = re.compile(r"^(gpu\d+)\.(" + "|".join(SETTING_FIELDS) + r")$")
    for key in sorted(set(fo) & set(fn), key=lambda k: (len(k), k)):
        m = pattern.match(key)
        if not m:
            continue
        a, b = value_of(old_snap, "gpu", key), value_of(new_snap, "gpu", key)
        if a is not None and b is not None and a != b:
            out.append(f"{key}: {a} old vs {b} new")
    return out


def machine_warnings(old_snap: dict[str, Any] | None, new_snap: dict[str, Any] | None) -> list[str]:
    """Different GPU models or hosts: comparable only with care (pyperf refuses to mix them)."""
    out = []
    a, b = value_of(old_snap, "gpu", "gpu0.name"), value_of(new_snap, "gpu", "gpu0.name")
    if a and b and a != b:
        out.append(f"different GPUs: {a} old vs {b} new")
    for key in ("hostname", "cpu_model"):
        a, b = value_of(old_snap, "host", key), value_of(new_snap, "host", key)
        if a and b and a != b:
            out.append(f"different {key.replace('_', ' ')}: {a} old vs {b} new")
    return out


def noise_warnings(
    old: stats.Noise, new: stats.Noise, margin: float, metric: str, sd_log: float, k_old: int, k_new: int
) -> list[str]:
    out = []
    for label, n in (("old", old), ("new", new)):
        if math.isfinite(n.between) and n.between > NOISE_FACTOR * margin:
            out.append(
                f"{metric} varies {100 * n.between:.1f} % launch to launch on the {label} side, too noisy for a "
                f"{100 * margin:g} % margin"
            )
    if math.isfinite(old.between) and math.isfinite(new.between) and min(old.between, new.between) > 0:
        r = max(old.between, new.between) / min(old.between, new.between)
        if r > NOISE_RATIO and max(old.between, new.between) > margin / 2:
            noisy = "new" if new.between > old.between else "old"
            out.append(
                f"the {noisy} side is {r:.1f}x noisier launch to launch: something else may have been running"
            )
    if math.isfinite(sd_log) and k_old >= 2 and k_new >= 2:
        mde = stats.minimum_detectable(sd_log, k_old, k_new)
        if mde > NOISE_FACTOR * margin:
            out.append(
                f"with this noise, {k_old} vs {k_new} launches detect only changes above {100 * mde:.1f} % "
                f"(95 % power); the margin is {100 * margin:g} %"
            )
    return out
