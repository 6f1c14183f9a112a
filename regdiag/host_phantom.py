"""Phantoms from the host side: what the CPUs (and the GPU's clock) were doing during each launch,
which launches stand out, and what a disagreement between launches or sides is explained by.

Each launch record carries `host` (probes/_hoststat.py: the measured processes' CPU time, context
switches and CPUs; load, steal, iowait, PSI, runnable tasks and the CPU other processes took over the
measured window). From it, per launch, a few features; a launch is *flagged* when one of them stands
out against the median of the other launches (docs/statistics.md, "Flagged launches"):

    flags = flag_launches(launches)          # {position: ["other processes took 38 % of the CPUs", ...]}
    lines = explain(old_launches, new_launches, metric, "old", "new")

Nothing here decides a verdict: compare reports the flags, and leaves them out only with
--exclude-flagged (and then shows the verdict with them too).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from regdiag.snapshot.redact import scrub_text

# How far a launch's feature must stand out from the median of the other launches to flag it.
OTHERS_PTS = 15.0  # other processes' share of the CPUs, percentage points above
CTX_RATIO = 5.0  # involuntary context switches per second of the busiest measured process, x
CTX_MIN_RATE = 20.0  # ... and at least this many per second more
# the measured processes' share of the window on a CPU below this x the others' (and this much): a
# relative rule, since on a machine shared with other work a quiet launch gets only a part of its CPU
SHARE_RATIO = 0.6
SHARE_PTS = 0.05
STEAL_PTS = 5.0
IOWAIT_PTS = 10.0
PSI_CPU_PTS = 10.0
PSI_MEM_PTS = 5.0
# (reading, points above the others', what it is): the host's pressures a launch can stand out in
PRESSURES = (
    ("steal_pct", STEAL_PTS, "steal"),
    ("iowait_pct", IOWAIT_PTS, "iowait"),
    ("psi_cpu_some", PSI_CPU_PTS, "CPU pressure (PSI some)"),
    ("psi_memory_some", PSI_MEM_PTS, "memory pressure (PSI some)"),
)
MHZ_DROP = 0.10  # CPU clock this much below
OUTLIER = 0.15  # a launch whose metric median is this far from the others' median "disagrees"


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def scrub_host(rec: Any) -> dict[str, Any] | None:
    """The host record as kept: process names through the redaction scrubber (a comm can be anything
    a program sets), no pids (the sampler records none)."""
    if not isinstance(rec, dict):
        return None
    out = dict(rec)
    for path in (("others", "top"), ("measured", "per_process")):
        sec = out.get(path[0])
        if isinstance(sec, dict) and isinstance(sec.get(path[1]), list):
            sec = dict(sec)
            sec[path[1]] = [
                {**p, "name": scrub_text(str(p.get("name", "?")))[:40]}
                for p in sec[path[1]]
                if isinstance(p, dict)
            ]
            out[path[0]] = sec
    return out


def features(launch: dict[str, Any]) -> dict[str, float]:
    """The numbers flags and explanations compare, from one launch's `host` (empty without one)."""
    h = launch.get("host")
    if not isinstance(h, dict) or not str(h.get("status", "")).startswith("proc"):
        return {}
    win = _num(h.get("window_s")) or 0.0
    out: dict[str, float] = {}
    m, s, o = h.get("measured") or {}, h.get("system") or {}, h.get("others") or {}
    procs = [p for p in (m.get("per_process") or []) if isinstance(p, dict)] if isinstance(m, dict) else []
    rates = [v / win for p in procs if (v := _num(p.get("ctx_invol"))) is not None and win > 0]
    if rates:
        out["ctx_invol_rate"] = max(rates)
    # the share of the window each busy measured process ran (a rank that spins on the GPU, or
    # computes on the CPU, runs all of it unless something else takes its CPU)
    shares = [
        (u + s_) / win
        for p in procs
        if win > 0 and (u := _num(p.get("user_s"))) is not None and (s_ := _num(p.get("sys_s"))) is not None
    ]
    busy = [x for x in shares if x >= 0.05]
    if busy:
        out["cpu_share"] = statistics.fmean(busy)
    if isinstance(o, dict):
        v = _num(o.get("pct_of_their_cpus"))
        v = v if v is not None else _num(o.get("pct"))
        if v is not None:
            out["others_pct"] = v
    if isinstance(s, dict):
        for key in ("steal_pct", "iowait_pct", "runnable_median"):
            if (v := _num(s.get(key))) is not None:
                out[key] = v
        psi: Any = s.get("psi_pct")
        psi = psi if isinstance(psi, dict) else {}
        for key in ("cpu_some", "memory_some"):
            if (v := _num(psi.get(key))) is not None:
                out[f"psi_{key}"] = v
    if (v := _num(h.get("cpus_usable"))) is not None:
        out["cpus_usable"] = v
    mhz = h.get("cpu_mhz")
    if isinstance(mhz, dict) and (v := _num(mhz.get("median"))) is not None:
        out["cpu_mhz"] = v
    return out


def top_others(launch: dict[str, Any], n: int = 2) -> str:
    o = (launch.get("host") or {}).get("others") if isinstance(launch.get("host"), dict) else None
    top = [p for p in (o.get("top") or []) if isinstance(p, dict)] if isinstance(o, dict) else []
    names = [
        f"{p.get('name')} {_num(p.get('pct')) or 0:.0f} %" for p in top[:n] if (_num(p.get("pct")) or 0) >= 1
    ]
    return f" ({', '.join(names)})" if names else ""


def _stands_out(f: dict[str, float], ref: dict[str, float], launch: dict[str, Any]) -> list[str]:
    """Phrases for each feature of `f` that stands out against `ref` (the other launches' medians)."""
    out = []
    a, b = f.get("ctx_invol_rate"), ref.get("ctx_invol_rate")
    if a is not None and b is not None and a - b >= CTX_MIN_RATE and a >= CTX_RATIO * max(b, 1.0):
        out.append(
            f"its busiest process had {a / max(b, 1.0):.0f}x the involuntary context switches ({a:.0f}/s)"
        )
    a, b = f.get("cpu_share"), ref.get("cpu_share")
    if a is not None and b is not None and b - a >= SHARE_PTS and a < SHARE_RATIO * b:
        out.append(f"its processes ran {100 * a:.0f} % of the time (vs {100 * b:.0f} %)")
    a, b = f.get("others_pct"), ref.get("others_pct")
    if a is not None and b is not None and a - b >= OTHERS_PTS:
        out.append(f"other processes took {a:.0f} % of the CPUs (vs {b:.0f} %){top_others(launch)}")
    for key, pts, what in PRESSURES:
        a, b = f.get(key), ref.get(key)
        if a is not None and b is not None and a - b >= pts:
            out.append(f"{what} {a:.0f} % (vs {b:.0f} %)")
    a, b, cpus = f.get("runnable_median"), ref.get("runnable_median"), f.get("cpus_usable")
    if a is not None and b is not None and cpus and a > cpus and b <= cpus:
        out.append(f"{a:.0f} runnable tasks on {cpus:.0f} usable CPUs (vs {b:.0f})")
    a, b = f.get("cpu_mhz"), ref.get("cpu_mhz")
    if a is not None and b is not None and b > 0 and a < (1 - MHZ_DROP) * b:
        out.append(f"its CPUs ran at {a:.0f} MHz (vs {b:.0f})")
    return out


def _reference(feats: Sequence[dict[str, float]], skip: int) -> dict[str, float]:
    ref: dict[str, float] = {}
    keys = {k for i, f in enumerate(feats) if i != skip for k in f}
    for k in keys:
        vals = [f[k] for i, f in enumerate(feats) if i != skip and k in f]
        if vals:
            ref[k] = float(statistics.median(vals))
    return ref


def flag_launches(launches: Sequence[dict[str, Any]]) -> dict[int, list[str]]:
    """{position in `launches`: phrases} for the launches whose host stands out from the others'."""
    feats = [features(la) for la in launches]
    if sum(1 for f in feats if f) < 2:
        return {}
    out = {}
    for i, f in enumerate(feats):
        if f and (why := _stands_out(f, _reference(feats, i), launches[i])):
            out[i] = why
    return out


def flag_run(run: dict[str, Any]) -> None:
    """Each launch of a run whose host stood out from the run's other launches gets `host_flags`."""
    launches = [la for la in run.get("launches", []) if isinstance(la, dict)]
    flags = flag_launches(launches)
    for i, la in enumerate(launches):
        if la.get("host") is not None:
            la["host_flags"] = flags.get(i, [])


def _median_of(la: dict[str, Any], metric: str) -> float | None:
    xs = (la.get("samples") or {}).get(metric) or []
    xs = [x for x in xs if _num(x) is not None]
    return float(statistics.median(xs)) if xs else None


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def explain_launches(
    sides: Sequence[tuple[str, Sequence[dict[str, Any]]]], metrics: Sequence[str], unit: str = "ms"
) -> list[str]:
    """A line for each launch whose metric median is far from its side's others, with what was
    recorded about it that stood out from all the other launches, or that nothing did, and what the
    canary says of the host's speed in its window."""
    pooled = [la for _, ls in sides for la in ls]
    feats = [features(la) for la in pooled]
    out, pos = [], 0
    for label, ls in sides:
        for j, la in enumerate(ls):
            worst = _disagreement(ls, j, metrics)
            if worst is not None:
                metric, mine, rest = worst
                why = _stands_out(feats[pos + j], _reference(feats, pos + j), la) if feats[pos + j] else []
                head = f"launch {la.get('index', j)} of {label}: {metric} {_fmt(mine)} {unit} vs {_fmt(rest)}"
                speed = canary_phrase(la, [x for k, x in enumerate(pooled) if k != pos + j], ls, metric)
                slower = speed is not None and "slower" in speed
                if why or slower:
                    out.append(f"{head}; {' and '.join([*why, *([speed] if speed else [])])}")
                elif feats[pos + j] or la.get("clocks") or speed:
                    tail = f"; {speed}" if speed else ""
                    nothing = "nothing recorded about its host or GPU differs from the other launches"
                    out.append(f"{head}; {nothing}{tail}")
                else:
                    out.append(f"{head}; no host record to explain it (recorded before host sampling)")
        pos += len(ls)
    return out


# -- the canary (probes/_canary.py): the host's speed in each launch's window ---------------------------

CANARY_OFF = 0.10  # a launch's canary this much slower (or faster) than the others' median is said so


def canary_ms(launch: dict[str, Any], column: str = "py_ms") -> float | None:
    """The median of a launch's canary samples (before, between and after its cycles), None without."""
    c = (launch.get("footer") or {}).get("canary") if isinstance(launch.get("footer"), dict) else None
    vals = [v for v in (c.get(column) or []) if _num(v) is not None] if isinstance(c, dict) else []
    return float(statistics.median(vals)) if vals else None


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    return sxy / (sx * sy) if sx > 0 and sy > 0 else None


def canary_phrase(
    la: dict[str, Any], others: Sequence[dict[str, Any]], side: Sequence[dict[str, Any]], metric: str
) -> str | None:
    """'the host ran 31 % slower in that window (canary: Python loop 2.6 ms vs 2.0; r = 0.93 between
    the canary and verify over 6 launches)', 'faster', or 'the host's speed did not change (canary
    ...)'; None when the launch or the others recorded no canary."""
    mine = canary_ms(la)
    ref_vals = [v for x in others if (v := canary_ms(x)) is not None]
    if mine is None or not ref_vals:
        return None
    ref = float(statistics.median(ref_vals))
    off = mine / ref - 1 if ref > 0 else 0.0
    detail = f"Python loop {_fmt(mine)} ms vs {_fmt(ref)}"
    k_mine, k_ref = canary_ms(la, "launch_us"), [v for x in others if (v := canary_ms(x, "launch_us"))]
    if k_mine and k_ref:
        detail += f", kernel launch {_fmt(k_mine)} us vs {_fmt(float(statistics.median(k_ref)))}"
    pairs = [
        (c, m) for x in side if (c := canary_ms(x)) is not None and (m := _median_of(x, metric)) is not None
    ]
    r = _pearson([c for c, _ in pairs], [m for _, m in pairs])
    if r is not None:
        detail += f"; r = {r:.2f} between the canary and {metric} over {len(pairs)} launches"
    if off > CANARY_OFF:
        return f"the host ran {off * 100:.0f} % slower in that window (canary: {detail})"
    if off < -CANARY_OFF:
        return f"the host ran {-off * 100:.0f} % faster in that window (canary: {detail})"
    return f"the host's speed did not change (canary: {detail})"


def _disagreement(
    ls: Sequence[dict[str, Any]], j: int, metrics: Sequence[str]
) -> tuple[str, float, float] | None:
    """(metric, this launch's median, the median of the side's other launches) of the metric on which
    launch j is furthest off, when that is more than OUTLIER; None otherwise (also with < 3 launches)."""
    if len(ls) < 3:
        return None
    best: tuple[float, str, float, float] | None = None
    for m in metrics:
        mine = _median_of(ls[j], m)
        rest = [v for k, la in enumerate(ls) if k != j and (v := _median_of(la, m)) is not None]
        if mine is None or len(rest) < 2:
            continue
        ref = float(statistics.median(rest))
        spread = max(rest) / min(rest) - 1 if min(rest) > 0 else math.inf
        off = abs(mine / ref - 1) if ref > 0 else 0.0
        if off > max(OUTLIER, 2 * spread) and (best is None or off > best[0]):
            best = (off, m, mine, ref)
    return None if best is None else (best[1], best[2], best[3])


def side_contention(sides: Sequence[tuple[str, Sequence[dict[str, Any]], dict[int, list[str]]]]) -> list[str]:
    """'host contention on new: 3 of 3 launches flagged (...)' for each side (label, its launches, their
    flags by index) most of whose launches stood out."""
    out = []
    for label, ls, fl in sides:
        if ls and len(fl) * 2 > len(ls):
            first = fl[min(fl)]
            out.append(
                f"host contention on {label}: {len(fl)} of {len(ls)} launches flagged ({'; '.join(first)})"
            )
    return out


def group_stands_out(group: Sequence[dict[str, Any]], others: Sequence[dict[str, Any]]) -> list[str]:
    """What stands out in one group of launches' median host features against another group's."""
    meds = []
    for ls in (group, others):
        feats = [f for f in (features(la) for la in ls) if f]
        meds.append(_reference(feats, -1) if feats else {})
    mine, other = meds
    return [w.replace("its ", "the ") for w in _stands_out(mine, other, {})] if mine and other else []


def side_differences(sides: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> list[str]:
    """'on new, its processes ran 31 % of the time (vs 49 %) ...': what stands out between the two
    sides' median host features (each side against the other), when the sides disagree."""
    out = []
    for (label, ls), (_, other) in zip(sides, reversed(sides), strict=True):
        if why := group_stands_out(ls, other):
            out.append(f"the {label} side's host: {'; '.join(why)}")
    return out


# -- a busy machine, said --------------------------------------------------------------------------

BUSY_PCT = 25.0  # a launch during which other work took at least this share of the machine's CPUs
BUSY_SHARE = 1 / 3  # ... in at least this share of the launches: the answer is said to need a quieter box


def busy_line(others_pct: Sequence[float | None], cpus: int | None, advice: str) -> str | None:
    """'others used 71 % of the 2 CPUs during 9 of 12 launches; answers need a quieter machine or more
    launches (--max-launches 20)': what other work took while the launches ran (each launch's share of
    the machine's CPUs other processes used, None where not told), when enough launches were busy;
    None otherwise. `advice`: what more launches means to the command that asks."""
    told = [p for p in others_pct if p is not None]
    busy = [p for p in told if p >= BUSY_PCT]
    if not busy or len(busy) < BUSY_SHARE * len(told):
        return None
    of = f"the {cpus} CPUs" if cpus else "the CPUs"
    return (
        f"others used {statistics.median(busy):.0f} % of {of} during {len(busy)} of {len(told)} launches; "
        f"answers need a quieter machine or more launches ({advice})"
    )


def others_pct(launch: dict[str, Any]) -> float | None:
    """The share of the machine's CPUs other processes took during a launch, as its host record says."""
    h = launch.get("host")
    o = h.get("others") if isinstance(h, dict) else None
    return _num(o.get("pct")) if isinstance(o, dict) else None


def cpus_of(launches: Sequence[dict[str, Any]]) -> int | None:
    """How many CPUs the launches' host had online, as their host records say."""
    for la in launches:
        h = la.get("host")
        if isinstance(h, dict) and isinstance(h.get("cpus_online"), int):
            return int(h["cpus_online"])
    return None


class OthersLoad:
    """What other work took of this machine's CPUs while a child process ran here: the whole machine's
    busy CPU time (/proc/stat) less this process's and its waited-for children's (os.times), over the
    wall time and the CPUs. For measurements that record no host of their own (a --command); `pct` is
    None where /proc/stat cannot be read."""

    def __init__(self) -> None:
        self.pct: float | None = None
        self.cpus = os.cpu_count() or 1

    @staticmethod
    def _busy_s() -> float | None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [float(x) for x in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        if len(fields) < 5:
            return None
        return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle, iowait

    @staticmethod
    def _ours_s() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def __enter__(self) -> OthersLoad:
        self._t0, self._b0, self._o0 = time.monotonic(), self._busy_s(), self._ours_s()
        return self

    def __exit__(self, *exc: object) -> None:
        wall, b1 = time.monotonic() - self._t0, self._busy_s()
        if b1 is None or self._b0 is None or wall <= 0:
            return
        rest = max(0.0, (b1 - self._b0) - (self._ours_s() - self._o0))
        self.pct = round(min(100.0, 100 * rest / (wall * self.cpus)), 1)
