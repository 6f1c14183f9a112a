"""The input checks of `regdiag compare`: the options, that both records are runs that measure the
same thing (probe, config, primary; --allow-mismatch turns a refusal into a warning), what they name
(primary, phases, units, directions), which launches count, and which metrics both sides hold.

Each refusal is a BadInput with one line.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

import numpy as np

from regdiag import direction, importers, stats
from regdiag.errors import BadInput
from regdiag.records import RUN, RecordError, check_record
from regdiag.run_view import usable

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


def check_options(margin: float, method: str, level: float) -> None:
    if not 0 < margin < 1:
        raise BadInput(f"margin must be between 0 and 100 % (got {100 * margin:g} %)")
    if method not in stats.METHODS:
        raise BadInput(f"unknown method {method!r}; use {' or '.join(stats.METHODS)}")
    if not 0.5 <= level < 1:
        raise BadInput(f"confidence level must be in [0.5, 1) (got {level})")


def check_kind(run: Any, label: str) -> dict[str, Any]:
    try:
        return check_record(run, label, RUN)
    except RecordError as e:
        msg = str(e)
        if "snapshot record" in msg:
            msg += " (compare takes runs: `regdiag probe ... -o FILE`; for environments use `regdiag diff`)"
        raise BadInput(msg) from None


def check_same_measurement(
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
    if other_instrument(po, pn):
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
        died = _died(old, old_label) or _died(new, new_label)
        if died:  # a run cut short holds what it reached: say that it died, not that it is another config
            keys = ", ".join(d.split(":", 1)[0] for d in diffs[:4])
            msg = f"{died[0]}; so its config ({keys}) is what it reached, not what it set out to measure"
        if died and not died[1]:
            raise BadInput(msg + ": no launch of it finished, nothing to compare")
        if not allow_mismatch:
            raise BadInput(msg + " (--allow-mismatch to compare anyway)")
        warnings.append(msg + " (compared with --allow-mismatch)")
    if po.get("version") != pn.get("version") and po.get("name") == pn.get("name"):
        warnings.append(f"probe versions differ: {po.get('version')} vs {pn.get('version')}")
    warnings += cycle_warning(old, new, old_label, new_label)
    if old.get("primary") != new.get("primary"):
        raise BadInput(
            f"the runs measure different things: primary {old.get('primary')!r} in {old_label}, "
            f"{new.get('primary')!r} in {new_label}"
        )


def _died(run: dict[str, Any], label: str) -> tuple[str, bool] | None:
    """('LABEL's run died (launch k: cause)', whether a launch of it finished) for a run that did not
    finish and has a failed launch; None for any other run."""
    if run.get("status") in (None, "complete"):
        return None
    launches = [la for la in run.get("launches") or [] if isinstance(la, dict)]
    for la in launches:
        if la.get("status") == "error" and la.get("error"):
            said = f"{label}'s run died (launch {la.get('index')}: {la['error']})"
            return said, any(usable(x) for x in launches)
    return None


def cycle_warning(old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str) -> list[str]:
    """Engine runs whose hooks define a cycle differently (SGLang: one forward_batch_generation call;
    vLLM: verify start to the next verify start): their cycle times are not like for like."""
    co, cn = ((r.get("engine") or {}).get("cycle") for r in (old, new))
    if not isinstance(co, dict) or not isinstance(cn, dict) or co.get("kind") == cn.get("kind"):
        return []
    return [
        f"the runs define a cycle differently ({old_label}: {co.get('text')}; "
        f"{new_label}: {cn.get('text')}): their cycle times are not comparable, compare phases instead"
    ]


def other_instrument(po: dict[str, Any], pn: dict[str, Any]) -> bool:
    """Two different probes (or imported tools) that measure the same thing (`probe.measures`)."""
    return po.get("name") != pn.get("name") and importers.measures(po) == importers.measures(pn)


def _instrument_note(old: dict[str, Any], new: dict[str, Any]) -> str:
    po, pn = old.get("probe") or {}, new.get("probe") or {}
    on = f"{old['primary']} and" if old.get("primary") else "the metrics and"
    return (
        f"{po.get('name')} against {pn.get('name')}: two instruments of one measurement "
        f"({importers.measures(po)}), compared on {on} the config keys both hold; the same subject assumed"
    )


def _config_diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    keys = sorted((set(a) | set(b)) - MEASUREMENT_KEYS)
    return [
        f"{k}: {a.get(k, '(absent)')!r} vs {b.get(k, '(absent)')!r}" for k in keys if a.get(k) != b.get(k)
    ]


def run_vocabulary(
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


def usable_launches(run: dict[str, Any], label: str) -> tuple[list[dict[str, Any]], list[str]]:
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
                "host": la.get("host") if isinstance(la.get("host"), dict) else None,
                "clocks_window_s": la.get("clocks_window_s"),
                "profile": la.get("profile") if isinstance(la.get("profile"), dict) else None,
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


def _span(la: dict[str, Any]) -> tuple[float, float] | None:
    """(start, end) of a launch in seconds since the epoch, from its `started` and `duration_s`."""
    try:
        start = _dt.datetime.fromisoformat(str(la["started"])).timestamp()
    except (KeyError, TypeError, ValueError):
        return None
    dur = la.get("duration_s")
    return start, start + (float(dur) if isinstance(dur, (int, float)) else 0.0)


def check_side(run: dict[str, Any], label: str, used: list[dict[str, Any]], warnings: list[str]) -> None:
    """A side without a usable launch is refused; an unfinished run is a warning."""
    if not used:
        n = len(run.get("launches", []))
        errors = [
            str(la.get("error")) for la in run.get("launches", []) if isinstance(la, dict) and la.get("error")
        ]
        why = f"; launch 0 failed: {errors[0]}" if errors else ""
        raise BadInput(
            f"{label}: the run has no launch with samples ({n} launch{'es' if n != 1 else ''}, "
            f"status {run.get('status')!r}){why}"
        )
    if run.get("status") not in (None, "complete"):
        warnings.append(
            f"{label} run status is {run.get('status')!r}: using its {len(used)} finished launches"
        )


def metric_names(
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
