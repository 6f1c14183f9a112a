"""`regdiag compare OLD NEW`: is it real, where does it live, what changed.

Takes two run records (docs/records.md) and returns a Comparison: a verdict per metric (ratio of
launch medians with a CI against a margin, Holm across the secondary metrics), the attribution of
the primary's change to its phases, the tok/s split, the noise, the GPU state of each side
(PHANTOM warnings) and the environment diff. Works on any named metrics: a spec-decode cycle and
its phases, a server's e2e / ttft / itl, a collective sweep's one metric per message size.

Library code: no typer, no rich. Bad input raises BadInput with one line.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from regdiag import __version__, direction, importers, phantom, stats
from regdiag.attribution import Attribution, Throughput, attribute, throughput
from regdiag.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSED, BadInput
from regdiag.records import COMPARISON, RUN, RecordError, check_record, finite, schema_id
from regdiag.run_view import usable
from regdiag.sizes import SizeRow, size_rows, sweep

# Config keys that say how long or how often to measure, not what is measured: they may differ.
MEASUREMENT_KEYS = frozenset(
    {
        "launches",
        "cycles",
        "warmup",
        "warmup_cycles",
        "seed",
        "output",
        "out",
        "timeout",
        "timeout_s",
        "progress",
        "block",
        "launch_index",
        "layers_auto",
    }
)
INTERLEAVED = "interleaved"
SEQUENTIAL = "sequential"
OVERLAPPING = "overlapping"
UNKNOWN = "unknown"
DRIFT_ALPHA = 0.05
POSSIBLY_DRIFT = "possibly drift"
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
            }
        )


@dataclass
class _Method:
    """How every metric of one comparison is tested: the same method, level, margin and random stream."""

    method: str
    level: float
    margin: float
    n_boot: int
    rng: np.random.Generator
    paired: bool = False


# --- input checks -------------------------------------------------------------------------------


def _usable(run: dict[str, Any], label: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Launches that measured something, each normalised to samples/values/scalars of floats."""
    used, skipped = [], []
    for i, la in enumerate(run.get("launches", [])):
        idx = la.get("index", i)
        if la.get("status") != "error":  # a malformed series is refused, not skipped
            samples = _series(la.get("samples"), label, idx, "samples")
        if not usable(la):
            why = f"error: {la.get('error') or 'no message'}" if la.get("status") == "error" else "no samples"
            skipped.append(f"launch {idx}: {why}")
            continue
        scalars = la.get("scalars") if isinstance(la.get("scalars"), dict) else {}
        used.append(
            {
                "index": idx,
                "samples": samples,
                "values": _series(la.get("values"), label, idx, "values"),
                "scalars": scalars,
                "clocks": la.get("clocks") if isinstance(la.get("clocks"), list) else [],
                "header": la.get("header") if isinstance(la.get("header"), dict) else {},
                "footer": la.get("footer") if isinstance(la.get("footer"), dict) else {},
                "order": la.get("order") if isinstance(la.get("order"), int) else None,
                "pair": la.get("pair") if isinstance(la.get("pair"), int) else None,
                "span": _span(la),
            }
        )
    return used, skipped


def _series(obj: Any, label: str, idx: int, what: str) -> dict[str, list[float]]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise BadInput(f"{label}: launch {idx}: {what} is not an object of lists")
    out = {}
    for name, xs in obj.items():
        if not isinstance(xs, list):
            raise BadInput(f"{label}: launch {idx}: {what}[{name!r}] is not a list")
        try:
            a = np.asarray([np.nan if x is None else x for x in xs], dtype=float)
        except (TypeError, ValueError):
            raise BadInput(f"{label}: launch {idx}: {what}[{name!r}] holds non-numbers") from None
        out[name] = a[np.isfinite(a)].tolist()
    return out


def _check_kind(run: Any, label: str) -> dict[str, Any]:
    try:
        return check_record(run, label, RUN)
    except RecordError as e:
        msg = str(e)
        if "snapshot record" in msg:
            msg += " (compare takes runs: `regdiag probe ... -o FILE`; for environments use `regdiag diff`)"
        raise BadInput(msg) from None


def _other_instrument(po: dict[str, Any], pn: dict[str, Any]) -> bool:
    """Two different probes (or imported tools) that measure the same thing (`probe.measures`)."""
    return po.get("name") != pn.get("name") and importers.measures(po) == importers.measures(pn)


def _config_diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    keys = sorted((set(a) | set(b)) - MEASUREMENT_KEYS)
    return [
        f"{k}: {a.get(k, '(absent)')!r} vs {b.get(k, '(absent)')!r}" for k in keys if a.get(k) != b.get(k)
    ]


def _batch(probe: dict[str, Any]) -> int:
    b = (probe.get("config") or {}).get("batch")
    return b if isinstance(b, int) and not isinstance(b, bool) and b > 0 else 1


def higher_is_better(name: str, unit: str, better: dict[str, str] | None = None) -> bool:
    """The record's declared direction (`better`), else the unit/name fallback: regdiag/direction.py."""
    return direction.higher_is_better(name, unit, better)


# --- the comparison -----------------------------------------------------------------------------


def compare_runs(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    margin: float = stats.DEFAULT_MARGIN,
    method: str = stats.WELCH,
    level: float = stats.DEFAULT_LEVEL,
    seed: int = 0,
    allow_mismatch: bool = False,
    old_label: str = "OLD",
    new_label: str = "NEW",
    n_boot: int = stats.DEFAULT_BOOT,
) -> Comparison:
    _check_options(margin, method, level)
    old = _check_kind(old, old_label)
    new = _check_kind(new, new_label)
    warnings: list[str] = []
    notes: list[str] = []
    po, pn = old.get("probe") or {}, new.get("probe") or {}
    _check_same_measurement(old, new, old_label, new_label, allow_mismatch, warnings, notes)
    primary, phases, units, better = _vocabulary(old, new, old_label, warnings)

    (lo_, skip_o), (ln_, skip_n) = _usable(old, old_label), _usable(new, new_label)
    _check_side(old, old_label, lo_, warnings)
    _check_side(new, new_label, ln_, warnings)
    design = _design(old, new, lo_, ln_)
    lo_, ln_, paired = _pair_if_interleaved(design, lo_, ln_, method, warnings, notes)
    # two instruments of one measurement each have metrics the other cannot measure (a server's e2e and
    # ttft, a log's gen_tok_s; nccl-tests' out-of-place times): those are left out
    one_sided_ok = allow_mismatch or _other_instrument(po, pn)
    names = _metric_names(lo_, ln_, primary, phases, old_label, new_label, one_sided_ok, warnings)
    how = _Method(method, level, margin, n_boot, np.random.default_rng(seed), paired)
    derived = _derived(old, new)
    results, context = _verdicts(names, lo_, ln_, units, better, how, derived)
    verdict = _overall(results, primary)
    att = _attribution(old, new, lo_, ln_, primary, phases, names, units, how, notes)
    batch = (_batch(po), _batch(pn))
    tput = _throughput(lo_, ln_, primary, units, how, batch)

    side_o = _side_info(old, old_label, lo_, skip_o)
    side_n = _side_info(new, new_label, ln_, skip_n)
    snap_o, snap_n = old.get("snapshot_before"), new.get("snapshot_before")
    ph = _phantoms(side_o, side_n, snap_o, snap_n, results, primary, margin)
    warnings += phantom.machine_warnings(snap_o, snap_n)
    if skip_o or skip_n:
        warnings.append(f"skipped launches: {len(skip_o)} in {old_label}, {len(skip_n)} in {new_label}")
    env, env_note = _env_diff(old, new)
    drift = _drift(lo_, ln_, primary or results[0].name, old_label, new_label)
    verdict_note = _drift_verdict(drift, design, verdict, old_label, new_label, warnings, notes)
    return Comparison(
        old=side_o,
        new=side_n,
        primary=primary,
        margin=margin,
        method=method,
        level=level,
        metrics=results,
        context=context,
        sizes=size_rows(sweep([la["header"] for la in lo_]), list(results)),
        attribution=att,
        throughput=tput,
        verdict=verdict,
        phantom=ph,
        warnings=warnings,
        env_diff=env,
        env_note=env_note,
        notes=notes,
        design=design,
        drift=drift,
        verdict_note=verdict_note,
        machine_diff=_machine_diff(side_o, side_n, snap_o, snap_n, env),
    )


def _check_options(margin: float, method: str, level: float) -> None:
    if not 0 < margin < 1:
        raise BadInput(f"margin must be between 0 and 100 % (got {100 * margin:g} %)")
    if method not in stats.METHODS:
        raise BadInput(f"unknown method {method!r}; use {' or '.join(stats.METHODS)}")
    if not 0.5 <= level < 1:
        raise BadInput(f"confidence level must be in [0.5, 1) (got {level})")


def _check_same_measurement(
    old: dict[str, Any],
    new: dict[str, Any],
    old_label: str,
    new_label: str,
    allow_mismatch: bool,
    warnings: list[str],
    notes: list[str],
) -> None:
    """The two runs measure the same thing: same probe, same config (but for how long or how often),
    same primary. A mismatch is refused, or a warning under --allow-mismatch."""
    if old.get("id") and old.get("id") == new.get("id") and old.get("created") == new.get("created"):
        warnings.append(
            f"OLD and NEW are the same run ({old.get('id')}): this compares a record with itself, "
            "not two measurements"
        )
    po, pn = old.get("probe") or {}, new.get("probe") or {}
    co, cn = po.get("config") or {}, pn.get("config") or {}
    if _other_instrument(po, pn):
        # Two instruments of one measurement (a server's log and a live `probe server` run: itl in ms;
        # nccl-tests and `probe collectives`): their configs describe different instruments, so only
        # the keys both hold must match (docs/server.md, docs/compare.md "Other tools' files").
        co, cn = ({k: c[k] for k in set(co) & set(cn)} for c in (co, cn))
        notes.append(_instrument_note(old, new))
    elif po.get("name") != pn.get("name"):
        msg = f"runs from different probes: {old_label} is {po.get('name')!r}, {new_label} is {pn.get('name')!r}"
        if not allow_mismatch:
            raise BadInput(msg + " (--allow-mismatch to compare anyway)")
        warnings.append(msg)
    diffs = _config_diff(co, cn)
    if diffs:
        msg = "probe configs differ: " + "; ".join(diffs[:4]) + ("; ..." if len(diffs) > 4 else "")
        if not allow_mismatch:
            raise BadInput(msg + " (--allow-mismatch to compare anyway)")
        warnings.append(msg + " (compared with --allow-mismatch)")
    if po.get("version") != pn.get("version") and po.get("name") == pn.get("name"):
        warnings.append(f"probe versions differ: {po.get('version')} vs {pn.get('version')}")
    if old.get("primary") != new.get("primary"):
        raise BadInput(
            f"the runs measure different things: primary {old.get('primary')!r} in {old_label}, "
            f"{new.get('primary')!r} in {new_label}"
        )


def _instrument_note(old: dict[str, Any], new: dict[str, Any]) -> str:
    po, pn = old.get("probe") or {}, new.get("probe") or {}
    on = f"{old['primary']} and" if old.get("primary") else "the metrics and"
    return (
        f"{po.get('name')} against {pn.get('name')}: two instruments of one measurement "
        f"({importers.measures(po)}), compared on {on} the config keys both hold; the same subject assumed"
    )


def _vocabulary(
    old: dict[str, Any], new: dict[str, Any], old_label: str, warnings: list[str]
) -> tuple[str | None, list[str], dict[str, str], dict[str, str]]:
    """What the runs name: the primary, the phases, each metric's unit and which way is better."""
    primary = old.get("primary") or None
    phases = [p for p in (old.get("phases") or []) if isinstance(p, str)]
    if list(new.get("phases") or []) != phases:
        warnings.append(f"phase lists differ: {phases} vs {list(new.get('phases') or [])}")
    units = {**(new.get("units") or {}), **(old.get("units") or {})}
    better, conflicts = direction.merge(old, new)
    warnings += [
        f"the runs disagree on which way is better for {c}: {old_label}'s is used" for c in conflicts
    ]
    return primary, phases, units, better


def _check_side(run: dict[str, Any], label: str, used: list[dict[str, Any]], warnings: list[str]) -> None:
    """A side without a usable launch is refused; an unfinished run is a warning."""
    if not used:
        n = len(run.get("launches", []))
        raise BadInput(
            f"{label}: the run has no launch with samples ({n} launch{'es' if n != 1 else ''}, "
            f"status {run.get('status')!r})"
        )
    if run.get("status") not in (None, "complete"):
        warnings.append(
            f"{label} run status is {run.get('status')!r}: using its {len(used)} finished launches"
        )


def _pair_if_interleaved(
    design: dict[str, Any],
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    method: str,
    warnings: list[str],
    notes: list[str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """An interleaved run's launches reduced to the A/B pairs, and whether the test pairs them."""
    if design["kind"] != INTERLEAVED:
        return lo_, ln_, False
    lo_, ln_, unpaired = _pairs(lo_, ln_)
    design["pairs"] = len(lo_)
    if unpaired:
        warnings.append(f"{unpaired} launch(es) without a partner in the other side left out of the pairing")
    if method != stats.WELCH:
        notes.append("interleaved run compared with the bootstrap: the pairing is not used")
    return lo_, ln_, method == stats.WELCH and len(lo_) >= 2


def _attribution(
    old: dict[str, Any],
    new: dict[str, Any],
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    primary: str | None,
    phases: list[str],
    names: list[tuple[str, str]],
    units: dict[str, str],
    how: _Method,
    notes: list[str],
) -> Attribution | None:
    """The primary's change split into its phases, when the phases are per-cycle parts of it."""
    sums = (
        old.get("phases_sum_to_primary", True) is not False
        and new.get("phases_sum_to_primary", True) is not False
    )
    if not sums:
        notes.append(f"the phases of these runs are not parts of {primary}: no attribution")
    if not (sums and primary and phases and all(p in dict(names) for p in phases)):
        return None
    att = attribute(
        [la["samples"] for la in lo_],
        [la["samples"] for la in ln_],
        primary,
        list(phases),
        units.get(primary, "ms"),
        how.method,
        how.level,
        how.n_boot,
        how.rng,
    )
    if att is None:
        notes.append("phases are not per-cycle parts of the primary (lengths differ): no attribution")
    return att


def _throughput(
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    primary: str | None,
    units: dict[str, str],
    how: _Method,
    batch: tuple[int, int],
) -> Throughput | None:
    """tok/s split into cycle time and accept length, for a run with a primary."""
    if not primary:
        return None
    # A server run's primary is the inter-token latency; its speculative cycle is the "cycle" series.
    cyc = "cycle" if all("cycle" in la["samples"] for la in [*lo_, *ln_]) else primary
    return throughput(lo_, ln_, cyc, units.get(cyc, "ms"), how.margin, how.method, how.level, how.rng, batch)


def _phantoms(
    side_o: SideInfo,
    side_n: SideInfo,
    snap_o: dict[str, Any] | None,
    snap_n: dict[str, Any] | None,
    results: list[MetricResult],
    primary: str | None,
    margin: float,
) -> list[str]:
    """PHANTOM warnings: clocks, settings, and noise large enough to fake the headline's change."""
    ph = phantom.clock_warnings(side_o.clocks, side_n.clocks) + phantom.setting_warnings(snap_o, snap_n)
    head = next((m for m in results if m.name == primary), results[0])
    if head.estimate is not None:
        ph += phantom.noise_warnings(
            head.noise_old,
            head.noise_new,
            margin,
            head.name,
            head.estimate.sd_log,
            head.estimate.n_old,
            head.estimate.n_new,
        )
    return ph


# --- design and drift ---------------------------------------------------------------------------


def _span(la: dict[str, Any]) -> tuple[float, float] | None:
    """(start, end) of a launch in seconds since the epoch, from its `started` and `duration_s`."""
    try:
        start = _dt.datetime.fromisoformat(str(la["started"])).timestamp()
    except (KeyError, TypeError, ValueError):
        return None
    dur = la.get("duration_s")
    return start, start + (float(dur) if isinstance(dur, (int, float)) else 0.0)


def _design(
    old: dict[str, Any], new: dict[str, Any], lo_: list[dict[str, Any]], ln_: list[dict[str, Any]]
) -> dict[str, Any]:
    """interleaved: the two halves of one `regdiag ab` run; sequential: one side's launches all ended
    before the other's began; overlapping: they ran at the same time; unknown: no launch times."""
    do, dn = old.get("design") or {}, new.get("design") or {}
    if (
        isinstance(do, dict)
        and isinstance(dn, dict)
        and do.get("kind") == INTERLEAVED == dn.get("kind")
        and do.get("pair_id")
        and do.get("pair_id") == dn.get("pair_id")
    ):
        return {"kind": INTERLEAVED, "order": do.get("order", "ABBA"), "pair_id": do["pair_id"]}
    so = [la["span"] for la in lo_]
    sn = [la["span"] for la in ln_]
    if not so or not sn or any(x is None for x in so + sn):
        return {"kind": UNKNOWN}
    o0, o1 = min(x[0] for x in so), max(x[1] for x in so)
    n0, n1 = min(x[0] for x in sn), max(x[1] for x in sn)
    if o1 <= n0 or n1 <= o0:
        gap = n0 - o1 if o1 <= n0 else o0 - n1
        return {"kind": SEQUENTIAL, "gap_s": round(gap, 1)}
    return {"kind": OVERLAPPING}


def _pairs(
    lo_: list[dict[str, Any]], ln_: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The launches of an interleaved run that have a partner, both sides in pair order."""
    po = {la["pair"]: la for la in lo_ if la["pair"] is not None}
    pn = {la["pair"]: la for la in ln_ if la["pair"] is not None}
    both = sorted(set(po) & set(pn))
    if len(both) < 2:
        return lo_, ln_, 0
    return [po[k] for k in both], [pn[k] for k in both], len(lo_) + len(ln_) - 2 * len(both)


def _run_order(launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Launches in the order they ran: by `order` (an ab run), else by start time, else as recorded."""
    if all(la["order"] is not None for la in launches):
        return sorted(launches, key=lambda la: la["order"])
    if all(la["span"] is not None for la in launches):
        return sorted(launches, key=lambda la: la["span"][0])
    return sorted(launches, key=lambda la: la["index"])


def _drift(
    lo_: list[dict[str, Any]], ln_: list[dict[str, Any]], name: str, old_label: str, new_label: str
) -> dict[str, stats.Trend | None]:
    """The trend of each side's launch centres of `name` in run order, Holm across the two sides."""
    out: list[stats.Trend | None] = []
    for used in (lo_, ln_):
        key = "samples" if any(la["samples"].get(name) for la in used) else "values"
        how = "median" if key == "samples" else "mean"
        series = [la[key][name] for la in _run_order(used) if la[key].get(name)]
        out.append(stats.trend(stats.launch_centers(series, how)) if series else None)
    a, b = stats.trends_holm(out)
    return {old_label: a, new_label: b}


def _drift_verdict(
    drift: dict[str, stats.Trend | None],
    design: dict[str, Any],
    verdict: str,
    old_label: str,
    new_label: str,
    warnings: list[str],
    notes: list[str],
) -> str | None:
    """One line per trending side; "possibly drift" on a change measured in a design drift can fake."""
    flagged = [
        (label, t)
        for label, t in drift.items()
        if t is not None and t.p_adjusted is not None and t.p_adjusted < DRIFT_ALPHA
    ]
    kind = design["kind"]
    for label, t in flagged:
        what = (
            f"DRIFT: the {label} launches trend with launch order ({100 * t.slope:+.2f} % per launch, "
            f"Spearman rho {t.rho:+.2f}, p {t.p_adjusted:.2g} Holm over both sides)"
        )
        if kind == INTERLEAVED:
            notes.append(what + "; the interleaved pairs cancel a steady drift")
        else:
            where = "one after the other" if kind == SEQUENTIAL else "without interleaving"
            warnings.append(
                f"{what}; the sides were measured {where}, so drift and change cannot be told apart: "
                "measure them interleaved with `regdiag ab`"
            )
    if kind == INTERLEAVED:
        notes.append(
            f"design: interleaved ({design.get('order', 'ABBA')}, {design.get('pairs', '?')} pairs of "
            f"{old_label}/{new_label} launches run back to back); the verdict uses the pairing"
        )
        return None
    if flagged and verdict in (stats.REGRESSED, stats.IMPROVED):
        return POSSIBLY_DRIFT
    return None


def _metric_names(
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    primary: str | None,
    phases: list[str],
    old_label: str,
    new_label: str,
    allow_mismatch: bool,
    warnings: list[str],
) -> list[tuple[str, str]]:
    """(name, role) in display order: primary, phases, other timed metrics, per-cycle values."""

    def present(launches: list[dict[str, Any]], key: str) -> set[str]:
        return {n for la in launches for n, xs in la[key].items() if xs}

    so, sn = present(lo_, "samples"), present(ln_, "samples")
    vo, vn = present(lo_, "values") - so, present(ln_, "values") - sn
    for kind, a, b in (("metric", so, sn), ("value", vo, vn)):
        for name in sorted(a ^ b):
            where, other = (old_label, new_label) if name in a else (new_label, old_label)
            msg = f"{kind} {name!r} is in {where} only, not in {other}"
            if not allow_mismatch or name == primary:
                raise BadInput(msg + ("" if name == primary else " (--allow-mismatch to compare the rest)"))
            warnings.append(msg + ": left out")
    both_s, both_v = so & sn, vo & vn
    if primary and primary not in both_s:
        raise BadInput(f"neither run has samples of its primary metric {primary!r}")
    out: list[tuple[str, str]] = []
    if primary:
        out.append((primary, "primary"))
    out += [(p, "phase") for p in phases if p in both_s and p != primary]
    taken = {n for n, _ in out}
    out += [(n, "metric") for n in sorted(both_s - taken)]
    out += [(n, "value") for n in sorted(both_v)]
    return out


def _metric(
    name: str,
    role: str,
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    units: dict[str, str],
    how: _Method,
    better: dict[str, str] | None = None,
) -> MetricResult:
    key = "values" if role == "value" else "samples"
    reduce = "mean" if role == "value" else "median"
    unit = units.get(name, "" if role == "value" else "ms")
    old = [la[key][name] for la in lo_ if la[key].get(name)]
    new = [la[key][name] for la in ln_ if la[key].get(name)]
    better_way, better_source = direction.direction(name, unit, better)
    note = ""
    est = None
    try:
        if how.paired and len(old) == len(new) >= 2:
            est = stats.estimate_ratio_paired(old, new, reduce, how.level)
        else:
            est = stats.estimate_ratio(old, new, reduce, how.method, how.level, how.n_boot, how.rng)
    except ValueError as e:
        note = f"not compared: {e}"
    if est is not None and (est.n_old < 2 or est.n_new < 2):
        note = "one launch on a side: launch-to-launch noise unknown, no CI; run >= 3 launches per side"
    return MetricResult(
        name=name,
        role=role,
        unit=unit,
        higher_is_better=better_way == direction.HIGHER,
        better=better_way,
        reduce=reduce,
        estimate=est,
        p_adjusted=None,
        verdict=stats.INCONCLUSIVE,
        more_launches=None,
        note=note,
        old_centers=stats.launch_centers(old, reduce).tolist(),
        new_centers=stats.launch_centers(new, reduce).tolist(),
        noise_old=stats.noise(old),
        noise_new=stats.noise(new),
        direction_source=better_source,
    )


def _verdicts(
    names: list[tuple[str, str]],
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    units: dict[str, str],
    better: dict[str, str],
    how: _Method,
    derived: dict[str, str] | None = None,
) -> tuple[list[MetricResult], list[MetricResult]]:
    """The judged metrics, each with its verdict (Holm across the secondaries), and the context metrics
    (settings such as running_req or tp_rank): their change is shown, they take no verdict and no place
    in the Holm family."""
    judged, context = [], []
    for n, role in names:
        m = _metric(n, role, lo_, ln_, units, how, better)
        if m.better == direction.CONTEXT:
            if role == "primary":  # the overall verdict is the primary's, and a setting has none
                raise BadInput(
                    f"primary metric {n!r} is a setting of the measurement, not an outcome: nothing to judge"
                )
            m.role, m.verdict = "context", None
            m.note = m.note or "a setting or condition of the measurement, not an outcome: no verdict"
            context.append(m)
        else:
            judged.append(m)
    if not judged:
        what = ", ".join(m.name for m in context)
        raise BadInput(f"nothing to judge: every metric the runs share is context ({what})")
    _decide(judged, how.margin, how.level, derived or {})
    return judged, context


def _derived(old: dict[str, Any], new: dict[str, Any]) -> dict[str, str]:
    """metric -> the metric it is computed from (a bandwidth from its time), as the records declare it."""
    out: dict[str, str] = {}
    for run in (new, old):  # OLD's word wins, as for directions
        raw = run.get("derived")
        if isinstance(raw, dict):
            out.update({str(k): str(v) for k, v in raw.items() if isinstance(v, str)})
    return out


def _decide(results: list[MetricResult], margin: float, level: float, derived: dict[str, str]) -> None:
    """Primary at its own level; every other metric Holm-adjusted as one family. A metric computed from
    another (algbw_64KiB = bytes / ar_64KiB) is the same test, not one more: it takes its source's
    adjusted p and stays out of the family, which would otherwise grow threefold for nothing."""
    by_name = {m.name: m for m in results}
    follows = {m.name: by_name[derived[m.name]] for m in results if derived.get(m.name) in by_name}
    secondary: list[tuple[MetricResult, float]] = [
        (m, m.estimate.p)
        for m in results
        if m.role != "primary"
        and m.name not in follows
        and m.estimate is not None
        and m.estimate.p is not None
    ]
    adjusted = stats.holm([p for _m, p in secondary])
    for (m, _p), p in zip(secondary, adjusted, strict=True):
        m.p_adjusted = p
    for m in results:
        if m.role == "primary" and m.estimate is not None:
            m.p_adjusted = m.estimate.p
    for name, src in follows.items():
        m = by_name[name]
        if m.estimate is not None and m.estimate.p is not None:
            m.p_adjusted = src.p_adjusted
            m.note = m.note or f"computed from {src.name}: tested with it"
    for m in results:
        if m.estimate is None:
            continue
        m.verdict = stats.decide(m.estimate, m.p_adjusted, margin, m.higher_is_better, level)
        if m.verdict == stats.INCONCLUSIVE and m.estimate.lo is not None:
            k_now = min(m.estimate.n_old, m.estimate.n_new)
            k = stats.launches_to_settle(m.estimate.sd_log, math.log(m.estimate.ratio), margin, level)
            m.more_launches = None if k is None else max(k - k_now, 1)


def _overall(results: list[MetricResult], primary: str | None) -> str:
    if primary:
        return next(m.verdict or stats.INCONCLUSIVE for m in results if m.name == primary)
    verdicts = {m.verdict for m in results}
    for v in (stats.REGRESSED, stats.INCONCLUSIVE, stats.IMPROVED):
        if v in verdicts:
            return v
    return stats.UNCHANGED


def _side_info(run: dict[str, Any], label: str, used: list[dict[str, Any]], skipped: list[str]) -> SideInfo:
    probe = run.get("probe") or {}
    host = run.get("host") or {}
    return SideInfo(
        label=label,
        id=run.get("id"),
        created=run.get("created"),
        status=run.get("status"),
        probe=probe.get("name"),
        probe_version=probe.get("version"),
        config=probe.get("config") or {},
        host=host.get("name") if isinstance(host, dict) else None,
        launches_total=len(run.get("launches", [])),
        launches_used=len(used),
        skipped=skipped,
        clocks=phantom.summarize_clocks(used),
    )


def _env_diff(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str]:
    """The snapshot diff, most likely culprits first (regdiag.snapshot.diff), when both sides have one;
    plus the variables the probe's ranks saw (its header's `env`) where they differ and the snapshots do
    not say so: an A/B run's sides, or a variable set for the probe only, differ there alone."""
    from regdiag.snapshot.diff import diff_env, diff_snapshots

    spec = _spec_differences(old, new)
    named = {it["field"] for it in spec}
    ranks = spec + [
        it
        for it in diff_env(_launch_env(old), _launch_env(new), "the probe's ranks (launch header)")
        if it["field"] not in named
    ]
    so, sn = old.get("snapshot_before"), new.get("snapshot_before")
    if not isinstance(so, dict) or not isinstance(sn, dict):
        missing = [lbl for lbl, s in (("old", so), ("new", sn)) if not isinstance(s, dict)]
        if ranks:
            return (
                ranks,
                f"{_differences(ranks)} in what the probe's ranks saw (no environment snapshot in the {' and '.join(missing)} run)",
            )
        return None, f"no environment snapshot in the {' and '.join(missing)} run"
    items = list(diff_snapshots(so, sn))
    seen = {(it["group"], it["field"]) for it in items}
    items += [it for it in ranks if (it["group"], it["field"]) not in seen]
    if not items:
        return [], "environments identical (as far as the snapshots and the probe's ranks see)"
    return items, _differences(items)


def _spec_differences(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """The differences between the two sides' specs that an A/B run's records name (design.differences,
    every kind: env vars, packages, commits, GPU clocks): set per launch, so no snapshot sees them."""
    do, dn = old.get("design") or {}, new.get("design") or {}
    if not do.get("pair_id") or do.get("pair_id") != dn.get("pair_id"):
        return []
    sides = (do.get("side"), dn.get("side"))
    return [
        {"group": "spec", "field": str(d.get("name")), "old": d.get(sides[0]), "new": d.get(sides[1]),
         "change": "changed", "rank": 0, "why": f"the A/B run's sides differ here ({d.get('kind')})"}
        for d in do.get("differences") or []
        if isinstance(d, dict)
    ]  # fmt: skip


def _differences(items: list[dict[str, Any]]) -> str:
    return f"{len(items)} environment difference{'s' if len(items) != 1 else ''}"


def _launch_env(run: dict[str, Any]) -> dict[str, str]:
    """The variables the first launch's ranks saw, as its header recorded them (already redacted)."""
    for la in run.get("launches") or []:
        env = (la.get("header") or {}).get("env") if isinstance(la, dict) else None
        if isinstance(env, dict):
            return {str(k): str(v) for k, v in env.items()}
    return {}


def _is_machine_item(item: dict[str, Any]) -> bool:
    group, name = str(item.get("group")), str(item.get("field"))
    if group in ("gpu", "host"):
        return True
    if group == "env":
        return name.startswith("NCCL_")
    if group == "startup":
        return name == "nccl_conf"
    return group in ("packages", "libraries") and "nccl" in name.lower()


def _machine_diff(
    side_o: SideInfo,
    side_n: SideInfo,
    snap_o: dict[str, Any] | None,
    snap_n: dict[str, Any] | None,
    env: list[dict[str, Any]] | None,
) -> list[dict[str, Any]] | None:
    """The machine part of the environment diff, when the runs come from two hosts (by the name the
    user gave, or what the hosts call themselves); None otherwise."""
    from regdiag.snapshot.fields import value_of

    names = {side_o.host, side_n.host} - {None}
    hostnames = {value_of(snap_o, "host", "hostname"), value_of(snap_n, "host", "hostname")} - {None}
    if len(names) < 2 and len(hostnames) < 2:
        return None
    return [it for it in env or [] if _is_machine_item(it)]
