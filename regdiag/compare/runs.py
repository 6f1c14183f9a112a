"""`compare_runs`: the checks, the design, the verdicts, the attribution and tok/s split, the PHANTOM
warnings, the drift and the environment diff, put together into one Comparison.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from regdiag import phantom, stats
from regdiag import units as unitconv
from regdiag.attribution import Attribution, Throughput, attribute, throughput
from regdiag.blocks import fleet_reading
from regdiag.compare.checks import (
    check_kind,
    check_options,
    check_same_measurement,
    check_side,
    metric_names,
    other_instrument,
    run_vocabulary,
    usable_launches,
)
from regdiag.compare.design import drift_verdict, measurement_design, pair_if_interleaved, side_drift
from regdiag.compare.envdiff import env_diff_of, machine_diff_of
from regdiag.compare.failures import failed
from regdiag.compare.host import with_host
from regdiag.compare.populations import populations_of
from regdiag.compare.result import Comparison, MetricResult, SideInfo
from regdiag.compare.verdicts import Method, derived_metrics, metric_verdicts, overall_verdict
from regdiag.errors import BadInput
from regdiag.profiles import profile_split
from regdiag.sizes import ordered, size_rows, sweep, sweep_verdict


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
    exclude_flagged: bool = False,
    host_reading: bool = True,
    metric: str | None = None,
) -> Comparison:
    """Launches whose host stood out are flagged and explained, and left out of the verdict only with
    `exclude_flagged`; `host_reading` False: without that reading (regdiag/compare/host.py). Records
    from several nodes are also read with the node as a block (`fleet`, regdiag/blocks.py). `metric`:
    the one metric the verdict is of (one size of a sweep); without it a sweep is judged per size, its
    verdict the worst of them."""
    options = {"margin": margin, "method": method, "level": level, "seed": seed, "n_boot": n_boot}
    options.update(allow_mismatch=allow_mismatch, old_label=old_label, new_label=new_label, metric=metric)
    c = compared(old, new, **options)
    old, new = check_kind(old, old_label), check_kind(new, new_label)
    if host_reading:
        c = with_host(c, old, new, lambda o, n: compared(o, n, **options), exclude_flagged)
    c.fleet = fleet_reading(old, new, margin)
    return _with_populations(c, old, new)


def compared(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    margin: float,
    method: str,
    level: float,
    seed: int,
    allow_mismatch: bool,
    old_label: str,
    new_label: str,
    n_boot: int,
    metric: str | None,
) -> Comparison:
    """The comparison itself, without the host's reading or the fleet's (compare_runs adds them)."""
    check_options(margin, method, level)
    old = check_kind(old, old_label)
    new = check_kind(new, new_label)
    old, new = _in_one_unit(old, new, old_label, new_label)
    warnings: list[str] = []
    notes: list[str] = []
    po, pn = old.get("probe") or {}, new.get("probe") or {}
    check_same_measurement(old, new, old_label, new_label, allow_mismatch, warnings, notes)
    primary, phases, units, better = run_vocabulary(old, new, old_label, warnings)

    (lo_, skip_o), (ln_, skip_n) = usable_launches(old, old_label), usable_launches(new, new_label)
    check_side(old, old_label, lo_, warnings)
    check_side(new, new_label, ln_, warnings)
    design = measurement_design(old, new, lo_, ln_)
    lo_, ln_, paired = pair_if_interleaved(design, lo_, ln_, method, warnings, notes)
    # two instruments of one measurement each have metrics the other cannot measure (a server's e2e and
    # ttft, a log's gen_tok_s; nccl-tests' out-of-place times): those are left out
    one_sided_ok = allow_mismatch or other_instrument(po, pn)
    names = metric_names(lo_, ln_, primary, phases, old_label, new_label, one_sided_ok, warnings)
    how = Method(method, level, margin, n_boot, np.random.default_rng(seed), paired)
    _warn_bootstrap(method, paired, lo_, ln_, warnings)
    results, context = metric_verdicts(names, lo_, ln_, units, better, how, derived_metrics(old, new))
    rows = ordered(size_rows(sweep([la["header"] for la in lo_]), list(results)))
    verdict, sweep_txt = _judged(results, rows, overall_verdict(results, primary), metric)
    att = _attribution(old, new, lo_, ln_, primary, phases, names, units, how, notes)
    batch = (_batch(po), _batch(pn))
    tput = _throughput(lo_, ln_, primary, units, how, batch)

    side_o, side_n = _side_info(old, old_label, lo_, skip_o), _side_info(new, new_label, ln_, skip_n)
    snap_o, snap_n = old.get("snapshot_before"), new.get("snapshot_before")
    ph = _phantoms(side_o, side_n, snap_o, snap_n, results, primary, margin)
    warnings += phantom.machine_warnings(snap_o, snap_n)
    if skip_o or skip_n:
        warnings.append(f"skipped launches: {len(skip_o)} in {old_label}, {len(skip_n)} in {new_label}")
    env, env_note = env_diff_of(old, new)
    drift = side_drift(lo_, ln_, primary or results[0].name, old_label, new_label)
    verdict_note = drift_verdict(drift, design, verdict, old_label, new_label, warnings, notes)
    verdict, verdict_note = failed(old, new, old_label, new_label, level, warnings) or (verdict, verdict_note)
    return Comparison(
        old=side_o,
        new=side_n,
        primary=primary,
        margin=margin,
        method=method,
        level=level,
        metrics=results,
        context=context,
        sizes=rows,
        sweep=sweep_txt,
        judged_by=metric,
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
        machine_diff=machine_diff_of(side_o, side_n, snap_o, snap_n, env),
        profile=profile_split(lo_, ln_, list(phases)),
    )


def _with_populations(c: Comparison, old: dict[str, Any], new: dict[str, Any]) -> Comparison:
    """The comparison with each side that is two populations of its headline metric said."""
    ol, nl = c.old.label, c.new.label
    lo_, ln_ = usable_launches(old, ol)[0], usable_launches(new, nl)[0]
    metric = c.primary or c.metrics[0].name
    units = {**(new.get("units") or {}), **(old.get("units") or {})}
    c.populations = _populations((old, lo_, ol), (new, ln_, nl), metric, units)
    c.phantom = [*c.phantom, *(p["line"] for p in c.populations)]
    return c


def _populations(
    old: tuple[dict[str, Any], list[dict[str, Any]], str],
    new: tuple[dict[str, Any], list[dict[str, Any]], str],
    metric: str,
    units: dict[str, str],
) -> list[dict[str, Any]]:
    """Each side (run, usable launches, label) whose launches are two groups of the metric
    (regdiag/compare/populations.py), each launch read with its record's node and engine_config."""
    both = [la for _r, ls, _l in (old, new) for la in ls]
    key = "samples" if any(la["samples"].get(metric) for la in both) else "values"
    sides = []
    for run, ls, label in (old, new):
        raw = {la.get("index", i): la for i, la in enumerate(run.get("launches") or [])}
        kept = [la for la in ls if la[key].get(metric)]
        merged = [{**raw.get(la["index"], {}), **la} for la in kept]
        sides.append((label, merged, [float(np.median(la[key][metric])) for la in kept]))
    return populations_of(sides, metric, units.get(metric, "ms" if key == "samples" else ""))


def _batch(probe: dict[str, Any]) -> int:
    b = (probe.get("config") or {}).get("batch")
    return b if isinstance(b, int) and not isinstance(b, bool) and b > 0 else 1


def _attribution(
    old: dict[str, Any],
    new: dict[str, Any],
    lo_: list[dict[str, Any]],
    ln_: list[dict[str, Any]],
    primary: str | None,
    phases: list[str],
    names: list[tuple[str, str]],
    units: dict[str, str],
    how: Method,
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
    how: Method,
    batch: tuple[int, int],
) -> Throughput | None:
    """tok/s split into cycle time and accept length, for a run with a primary."""
    if not primary:
        return None
    # A server run's primary is the inter-token latency; its speculative cycle is the "cycle" series.
    cyc = "cycle" if all("cycle" in la["samples"] for la in [*lo_, *ln_]) else primary
    return throughput(lo_, ln_, cyc, units.get(cyc, "ms"), how.margin, how.method, how.level, how.rng, batch)


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


def _in_one_unit(
    old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both sides in one unit per metric before anything is compared: each converted to the canonical
    unit of its dimension (regdiag/units.py), refused (exit 2) where a metric's dimensions differ,
    then shown in the unit that reads best, the same on both sides."""
    old, new = unitconv.canonical(old), unitconv.canonical(new)
    unitconv.check_dimensions(old, new, old_label, new_label)
    phases = [p for p in (old.get("phases") or []) if isinstance(p, str)]
    shown = unitconv.display_units(old, new, old.get("primary") or None, phases)
    return unitconv.shown_in(old, shown), unitconv.shown_in(new, shown)


def _warn_bootstrap(
    method: str, paired: bool, lo_: list[dict[str, Any]], ln_: list[dict[str, Any]], warnings: list[str]
) -> None:
    if method == stats.BOOTSTRAP and not paired and min(len(lo_), len(ln_)) < stats.BOOTSTRAP_MIN_LAUNCHES:
        warnings.append(
            f"--method bootstrap needs {stats.BOOTSTRAP_MIN_LAUNCHES} launches per side "
            f"({len(lo_)} vs {len(ln_)} here): no interval, so INCONCLUSIVE; Welch (the default) holds from 2"
        )


def _judged(
    results: list[MetricResult], rows: list[Any], verdict: str, metric: str | None
) -> tuple[str, str]:
    """(verdict, sweep sentence): of `metric` alone where one is named; of every size of a sweep (the
    worst beyond the margin: a slower 64 KiB fails the gate though 1 GiB held); else the primary's."""
    if metric is not None:
        m = next((x for x in results if x.name == metric), None)
        if m is None:
            judged = sorted(x.name for x in results)
            shown = ", ".join(judged[:12]) + (f", ... ({len(judged)} in all)" if len(judged) > 12 else "")
            raise BadInput(f"--metric {metric!r}: not a metric both runs hold ({shown})")
        if m.verdict is None:
            raise BadInput(f"--metric {metric!r} is a setting of the measurement (context), never judged")
        return m.verdict, ""
    sweep_v, txt = sweep_verdict(rows)
    if sweep_v is None:
        return verdict, ""
    return sweep_v, txt
