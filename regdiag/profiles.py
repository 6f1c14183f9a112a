"""What a phase's milliseconds are made of, good against bad: the `--profile` figures of two runs
(probes/_profile.py, one "profile" per launch) split into GPU work and GPU idle.

    split = profile_split(old_launches, new_launches, phases)   # None unless both sides were profiled
    for line in split_lines(split): print(line)

Per phase, each side's figure is the median over its profiled launches. A change of the phase's wall
time is GPU work (busy: kernels, copies) plus GPU idle (the GPU waiting: on the host's dispatch, or on
syncs). The side that moved more names it: "GPU work, kernel X" (the kernel whose time moved most) or
"GPU idle, host-bound" / "GPU idle, host syncs". Kernels are matched by name, shown with template
arguments and parameter lists cut (`short_name`), kept whole in the JSON. On CPU the "GPU" is the aten
ops: work is the time inside ops, idle the host time between them (the record says so).

Collectives (NCCL kernels, gloo / c10d ops) are a bucket of their own, neither work nor idle: a rank
waiting in one for a slow peer is not doing the phase's work. The noise gate: each launch's profile
keeps the spread of every figure over its profiled cycles; a change is given with its 95 % interval
(the two sides' standard errors, `_standard_errors`), and one inside it reads "within noise"."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

FIGURES = (
    "wall_ms",
    "busy_ms",
    "idle_ms",
    "host_ms",
    "dispatch_ms",
    "sync_wait_ms",
    "syncs",
    "kernels",
    "graph_launches",
    "collective_ms",
    "collectives",
    "copies",
    "copy_ms",
)
# The figures a profile's per-cycle spread covers (probes/_profile.py, SPREAD): the noise gate's.
NOISY = ("wall_ms", "busy_ms", "idle_ms", "dispatch_ms", "sync_wait_ms", "syncs", "collective_ms")
Z95 = 1.96
MOVED = 0.05  # a phase whose wall time moved by this fraction gets a line
KERNELS_SHOWN = 4
KERNELS_KEPT = 20
CPU_NOTE = "on CPU, GPU work is the time inside aten ops and GPU idle the host time between them"


def short_name(name: str, limit: int = 80) -> str:
    """A kernel's name for display: `void ` and parameter lists dropped, templates cut but for the
    outermost one's first argument that is a name (a number such as a vector width is skipped), so that
    `cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>` and a CUTLASS GEMM's do not read the same."""
    s = _params_off(name.removeprefix("void ").replace(ANON, "\0"))
    i = s.find("<")
    args, close = _template_args(s, i) if i > 0 else (None, len(s))
    if args is not None:
        first = _cut(next((a for a in args if not _literal(a)), args[0] if args else ""))
        # a function-template argument reads by its name: no return type, no lambda inside it
        first = first.removeprefix("void ").split("::[", 1)[0].strip()
        rest = _cut(s[close + 1 :])
        s = f"{_cut(s[:i])}<{first}>{rest}" if first else f"{_cut(s[:i])}{rest}"
    else:
        s = _cut(s)
    s = s.replace("\0", "(anon)").strip() or name
    return s if len(s) <= limit else s[: limit - 3] + "..."


ANON = "(anonymous namespace)"


def _params_off(s: str) -> str:
    """The name without its parameter list: from the first '(' outside template brackets."""
    depth = 0
    for j, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and j > 0:
            return s[:j]
    return s


def _cut(s: str) -> str:
    """Every template argument list and parameter list cut, innermost first."""
    for _ in range(12):
        cut = re.sub(r"\([^()]*\)", "", re.sub(r"<[^<>]*>", "", s))
        if cut == s:
            break
        s = cut
    return s.strip()


def _template_args(s: str, i: int) -> tuple[list[str] | None, int]:
    """The top-level arguments of the template list opening at s[i] == '<', and where it closes."""
    depth, args, start = 0, [], i + 1
    for j in range(i, len(s)):
        ch = s[j]
        if ch in "<({":
            depth += 1
        elif ch in ">)}":
            depth -= 1
            if depth == 0:
                args.append(s[start:j].strip())
                return [a for a in args if a], j
        elif ch == "," and depth == 1:
            args.append(s[start:j].strip())
            start = j + 1
    return None, len(s)


def _literal(arg: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d.]+[uUlLfF]*|true|false|\(.*\)[-+\d.]+[uUlL]*", arg))


def _profiles(launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p for la in launches if isinstance(p := la.get("profile"), dict) and isinstance(p.get("phases"), dict)
    ]


def side_profile(launches: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One side's profile: per phase the median over launches of each figure, and per kernel name the
    median of its count and total time (0 where a launch did not list it among its top kernels)."""
    profs = _profiles(launches)
    if not profs:
        return None
    phases: dict[str, Any] = {}
    for ph in dict.fromkeys(ph for p in profs for ph in p["phases"]):
        rows = [p["phases"][ph] for p in profs if isinstance(p["phases"].get(ph), dict)]
        fig = {k: statistics.median(float(r.get(k) or 0.0) for r in rows) for k in FIGURES}
        names = dict.fromkeys(k["name"] for r in rows for k in r.get("top") or [] if isinstance(k, dict))
        kern = {}
        for name in names:
            got = [next((k for k in r.get("top") or [] if k.get("name") == name), {}) for r in rows]
            kern[name] = {
                "count": statistics.median(float(k.get("count") or 0) for k in got),
                "total_ms": statistics.median(float(k.get("total_ms") or 0) for k in got),
            }
        phases[ph] = {**fig, "top": kern}
    return {
        "se": {ph: _standard_errors(profs, ph) for ph in phases},
        "launches": len(profs),
        "cycles": profs[0].get("cycles"),
        "device": profs[0].get("device"),
        "graph_kernels_visible": profs[0].get("graph_kernels_visible"),
        "note": str(profs[0].get("note") or ""),  # what an imported profile's figures are (nsys)
        # per phase: whether every launch listed all its kernels (nsys summaries do), so that a kernel
        # missing from the list was not run at all
        "complete": {
            ph: all(
                isinstance(f := p["phases"].get(ph), dict) and f.get("top_complete") is True for p in profs
            )
            for ph in phases
        },
        "phases": phases,
    }


def _standard_errors(profs: list[dict[str, Any]], ph: str) -> dict[str, float | None]:
    """How sure one side's figure of a phase is: the standard error of its mean per cycle, from the
    cycles' spread within the launches (pooled) and, with two launches or more, from the launches'
    figures; the larger. None where no launch told a spread (a record from before it was kept)."""
    rows = [p["phases"][ph] for p in profs if isinstance(p["phases"].get(ph), dict)]
    spreads = [r["spread"] for r in rows if isinstance(r.get("spread"), dict)]
    out: dict[str, float | None] = {}
    for k in NOISY:
        got = [(int(sp.get("n") or 0), (sp.get("sd") or {}).get(k)) for sp in spreads]
        got = [(n, float(sd)) for n, sd in got if n > 1 and isinstance(sd, (int, float))]
        if not got:
            out[k] = None
            continue
        within = math.sqrt(statistics.fmean(sd * sd for _, sd in got) / sum(n for n, _ in got))
        figures = [float(r.get(k) or 0.0) for r in rows]
        between = statistics.stdev(figures) / math.sqrt(len(figures)) if len(figures) > 1 else 0.0
        out[k] = max(within, between)
    return out


def _noise(se_o: dict[str, Any], se_n: dict[str, Any], d: dict[str, float]) -> dict[str, Any] | None:
    """The noise gate of one phase's change: per figure the half-width of its 95 % interval, and
    whether the change is outside it (a figure the same in every cycle on both sides, a sync count,
    is sure at any size)."""
    ci = {
        k: Z95 * math.hypot(se_o[k], se_n[k])
        for k in NOISY
        if se_o.get(k) is not None and se_n.get(k) is not None
    }
    if "wall_ms" not in ci:
        return None
    sure = {k: abs(d[k]) > w if w > 0 else abs(d[k]) > 1e-9 for k, w in ci.items()}
    return {"ci95": {k: round(w, 5) for k, w in ci.items()}, "sure": sure}


def profile_split(
    old: list[dict[str, Any]], new: list[dict[str, Any]], phases: list[str]
) -> dict[str, Any] | None:
    """Per phase both sides hold: the change of its wall time as GPU work and GPU idle, the host's
    dispatch and syncs, and the kernels that moved (module docstring). None unless both were profiled."""
    po, pn = side_profile(old), side_profile(new)
    if po is None or pn is None:
        return None
    rows = []
    for ph in [p for p in phases if p in po["phases"] and p in pn["phases"]] or list(po["phases"]):
        if ph not in pn["phases"]:
            continue
        o, n = po["phases"][ph], pn["phases"][ph]
        d = {k: n[k] - o[k] for k in FIGURES}
        kernels = _kernels(o["top"], n["top"], (po["complete"][ph], pn["complete"][ph]))
        noise = _noise(po["se"][ph], pn["se"][ph], d)
        reading = _reading(d, kernels) if not (_hidden(o) or _hidden(n)) else HIDDEN
        if noise is not None and not noise["sure"]["wall_ms"]:
            reading = {**reading, "sure": False}
        rows.append(
            {
                "phase": ph,
                "old": {k: o[k] for k in FIGURES},
                "new": {k: n[k] for k in FIGURES},
                "delta": d,
                # a phase gets a line when its time moved, or its syncs did (one more a cycle is a
                # change of what the host does, however small its time)
                "moved": abs(d["wall_ms"]) >= MOVED * max(o["wall_ms"], 1e-9)
                or (abs(d["syncs"]) >= 0.5 and (noise is None or noise["sure"].get("syncs", True))),
                "noise": noise,
                "reading": reading,
                "kernels": kernels[:KERNELS_KEPT],
            }
        )
    device = po["device"] if po["device"] == pn["device"] else f"{po['device']} vs {pn['device']}"
    notes = (po["note"], pn["note"])
    return {
        "device": device,
        "launches": [po["launches"], pn["launches"]],
        "cycles": [po["cycles"], pn["cycles"]],
        "graph_kernels_visible": [po["graph_kernels_visible"], pn["graph_kernels_visible"]],
        "note": CPU_NOTE if "cpu" in str(device) else "; ".join(dict.fromkeys(filter(None, notes))),
        "kernels_complete": all(
            po["complete"].get(r["phase"]) and pn["complete"].get(r["phase"]) for r in rows
        ),
        "phases": rows,
    }


def _kernels(
    o: dict[str, Any], n: dict[str, Any], complete: tuple[bool, bool] = (False, False)
) -> list[dict[str, Any]]:
    out = []
    # Below a side's smallest listed kernel, a kernel may be there unlisted; above it, it is not there
    # (nor anywhere on a side that listed all its kernels).
    floor = [
        0.0 if whole else min((k["total_ms"] for k in side.values()), default=0.0)
        for side, whole in zip((o, n), complete, strict=True)
    ]
    for name in dict.fromkeys([*o, *n]):
        a, b = o.get(name, {"count": 0.0, "total_ms": 0.0}), n.get(name, {"count": 0.0, "total_ms": 0.0})
        known = [name in o or b["total_ms"] > floor[0], name in n or a["total_ms"] > floor[1]]
        out.append(
            {
                "name": name,
                "short": short_name(name),
                "count": [a["count"], b["count"]],
                "total_ms": [a["total_ms"], b["total_ms"]],
                "delta_ms": b["total_ms"] - a["total_ms"],
                "listed": [name in o, name in n],  # false: not among that side's top kernels (0 shown)
                "known": known,  # its count is known on both sides: listed, or too large to be left out
            }
        )
    # kernels known on both sides first: one below a side's top list only seems to appear or vanish; one
    # above it (20 new GEMMs) did appear
    return sorted(out, key=lambda k: (not all(k.pop("known")), -abs(k["delta_ms"])))


HIDDEN = {"kind": "unknown", "text": "not split: the kernels inside its CUDA graph replays were not traced"}


def _hidden(f: dict[str, Any]) -> bool:
    """A graph phase whose replays' kernels the trace does not show: its busy time reads 0, not idle."""
    return f.get("graph_launches", 0) > 0 and not f.get("kernels")


def _reading(d: dict[str, float], kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """Which side of the split the change is: GPU work (and the kernel that moved most that way) or
    GPU idle (host-bound, or host syncs when syncs or the time waiting in them grew)."""
    if abs(d["busy_ms"]) >= abs(d["idle_ms"]):
        sign = 1 if d["busy_ms"] >= 0 else -1
        k = next((k for k in kernels if k["delta_ms"] * sign > 0), None)
        return {
            "kind": "gpu-work",
            "kernel": k["name"] if k else None,
            "text": "GPU work" + (f", kernel {k['short']}" if k else ""),
        }
    syncs = d["syncs"] * (1 if d["idle_ms"] >= 0 else -1) >= 0.5
    waits = abs(d["sync_wait_ms"]) >= 0.5 * abs(d["idle_ms"])
    bound = "host syncs" if syncs or waits else "host-bound"
    return {"kind": "gpu-idle", "bound": bound, "text": f"GPU idle, {bound}"}


def _ms(x: float) -> str:
    return f"{x:+.3g} ms" if abs(x) < 100 else f"{x:+.0f} ms"


def phase_line(r: dict[str, Any]) -> str:
    """`verify +20.1 ms (±0.4 ms): GPU work +0.2 ms (kernels aten::mm +0.1 ms), GPU idle +19.9 ms
    (host-bound: dispatch +19.8 ms, syncs +0) -> GPU idle, host-bound`; collectives and copies where
    either side had them; `-> within noise` where the change is inside its 95 % interval."""
    d, noise = r["delta"], r.get("noise")
    moved = [k for k in r["kernels"] if abs(k["delta_ms"]) >= 0.001][:2]
    kern = ", ".join(f"{k['short']} {_ms(k['delta_ms'])}" for k in moved) or "none moved"
    syncs = f"{d['syncs']:+.3g}"
    if d.get("copies"):
        syncs += f", copies {d['copies']:+.3g} ({_ms(d.get('copy_ms', 0.0))})"
    bound = r["reading"].get("bound") or ("host syncs" if d["syncs"] > 0 else "host-bound")
    ci = f" (±{noise['ci95']['wall_ms']:.2g} ms)" if noise else ""
    coll = ""
    if any(side.get("collective_ms") or side.get("collectives") for side in (r["old"], r["new"])):
        coll = f", collectives {_ms(d['collective_ms'])} ({d['collectives']:+.3g} a cycle)"
    reading = r["reading"]["text"]
    if r["reading"].get("sure") is False and noise:
        reading = f"time within noise (±{noise['ci95']['wall_ms']:.2g} ms at 95 %)"
        if noise["sure"].get("syncs") and abs(d["syncs"]) >= 0.5:
            reading += f"; syncs {d['syncs']:+.3g} a cycle, beyond it"
    return (
        f"{r['phase']} {_ms(d['wall_ms'])}{ci}: GPU work {_ms(d['busy_ms'])} (kernels {kern}), "
        f"GPU idle {_ms(d['idle_ms'])} ({bound}: dispatch {_ms(d['dispatch_ms'])}, syncs {syncs}){coll} "
        f"-> {reading}"
    )


def kernel_lines(r: dict[str, Any]) -> list[str]:
    """The kernels that moved in one phase, old against new, per cycle."""
    out = []
    for k in [k for k in r["kernels"] if abs(k["delta_ms"]) >= 0.001][:KERNELS_SHOWN]:
        (co, cn), (to, tn) = k["count"], k["total_ms"]
        lo, ln = k.get("listed", [True, True])
        calls = (f"{co:.4g}" if lo else "-", f"{cn:.4g}" if ln else "-")
        times = (f"{to:.4g}" if lo else "-", f"{tn:.4g}" if ln else "-")
        moved = _ms(k["delta_ms"])
        out.append(f"{k['short']}: {calls[0]} -> {calls[1]} calls, {times[0]} -> {times[1]} ms ({moved})")
    return out


def split_lines(split: dict[str, Any] | None) -> list[str]:
    """The split as text: one line per phase that moved (all phases' figures are in the JSON)."""
    if not split:
        return []
    cyc = split["cycles"]
    head = f"profile ({split['device']}, {cyc[0]} vs {cyc[1]} profiled cycles per launch)"
    moved = [r for r in split["phases"] if r["moved"]]
    if not moved:
        return [f"{head}: no phase's profiled wall time moved {100 * MOVED:.0f} % or more"]
    absent = "not run on that side" if split.get("kernels_complete") else "not among that side's top kernels"
    out = [f"{head}; '-': {absent}:"]
    for r in moved:
        out.append("  " + phase_line(r))
        out += ["    " + k for k in kernel_lines(r)]
    if split.get("note"):
        out.append(f"  ({split['note']})")
    if any(v is False for v in split.get("graph_kernels_visible") or []):
        out.append("  (the kernels inside CUDA graph replays were not traced: a graph shows as its launch)")
    return out


SMALL_KERNEL_US = 20.0  # kernels shorter than this on average: launch and tail costs dominate them


def profile_reason(f: dict[str, Any]) -> str | None:
    """Why a phase sits far from its roofline floor, from its --profile figures: the GPU idle (waiting
    on the host's dispatch, or on syncs) or busy (with many small kernels, or with the slow ones)."""
    wall = float(f.get("wall_ms") or 0.0)
    if wall <= 0:
        return None
    idle, busy, n = float(f.get("idle_ms") or 0), float(f.get("busy_ms") or 0), float(f.get("kernels") or 0)
    syncs = float(f.get("syncs") or 0)
    if idle >= busy:
        waits = float(f.get("sync_wait_ms") or 0) >= 0.5 * idle
        what = f"host syncs ({syncs:.3g} per cycle)" if syncs and waits else "host-bound (dispatch)"
        return (
            f"GPU idle {100 * idle / wall:.0f} % of it: {what}, {n:.4g} kernels, {syncs:.3g} syncs (profiled)"
        )
    mean_us = busy / n * 1e3 if n else 0.0
    top = (f.get("top") or {}) if isinstance(f.get("top"), dict) else {}
    first = max(top, key=lambda k: top[k].get("total_ms", 0), default=None)
    if n and mean_us < SMALL_KERNEL_US:
        return (
            f"GPU busy {100 * busy / wall:.0f} % with {n:.4g} small kernels ({mean_us:.3g} us each, profiled)"
        )
    return f"GPU busy {100 * busy / wall:.0f} %, {n:.4g} kernels" + (
        f", most in {short_name(first)}" if first else ""
    )


def profile_summary(run: dict[str, Any], launches: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A run's profile for the probe summary: per phase busy / idle / host / syncs, the top kernels,
    what profiling cost, and where the trace lies."""
    side = side_profile(launches)
    if side is None:
        errors = [
            p["error"] for la in launches if isinstance(p := la.get("profile"), dict) and p.get("error")
        ]
        return {"error": str(errors[0]), "launches": len(errors)} if errors else None
    profs = _profiles(launches)
    costs = [p.get("cost") or {} for p in profs]
    cost_s = [float(c["profile_s"]) for c in costs if isinstance(c.get("profile_s"), (int, float))]
    traces = [p["trace"] for p in profs if isinstance(p.get("trace"), dict)]
    ratio = [
        c["cycle_ms_profiled"] / c["cycle_ms_measured"]
        for c in costs
        if isinstance(c.get("cycle_ms_profiled"), (int, float)) and c.get("cycle_ms_measured")
    ]
    return {
        **{k: v for k, v in side.items() if k not in ("note", "complete", "se")},  # as a probe records it
        "phases": {
            ph: {**{k: round(v, 5) for k, v in f.items() if k != "top"}, "top": _top(f["top"])}
            for ph, f in side["phases"].items()
        },
        "cost_s_per_launch": round(statistics.median(cost_s), 3) if cost_s else None,
        # which cycles were profiled: after the measured window (a probe's), or after the warm-up
        # (the engine hook's), in the profile's own words
        "window": next((str(c["window"]) for c in costs if c.get("window")), None),
        "cycle_under_profiler_x": round(statistics.median(ratio), 3) if ratio else None,
        "traces": traces,
    }


def _top(kern: dict[str, Any], n: int = 3) -> list[dict[str, Any]]:
    items = sorted(kern.items(), key=lambda kv: -kv[1]["total_ms"])[:n]
    return [{"name": k, "short": short_name(k), **v} for k, v in items]
