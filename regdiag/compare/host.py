"""The host side of a comparison: which launches' host stood out (flagged), what explains launches
that disagree, host contention on a side, and the verdict with and without the flagged launches.

Flagging never changes the verdict by itself (docs/statistics.md, "Flagged launches"): the headline
counts every usable launch unless the user asks for --exclude-flagged; either way the other verdict
is computed too and the report shows both.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from regdiag import host_phantom, stats
from regdiag.compare.checks import usable_launches
from regdiag.compare.result import Comparison
from regdiag.errors import BadInput


def _flags(run: dict[str, Any], label: str, pooled: list[dict[str, Any]], start: int) -> dict[int, list[str]]:
    flags = host_phantom.flag_launches(pooled)
    used, _ = usable_launches(run, label)
    return {int(used[i - start]["index"]): why for i, why in flags.items() if start <= i < start + len(used)}


def _without(run: dict[str, Any], flagged: dict[int, list[str]]) -> dict[str, Any]:
    out = copy.copy(run)
    out["launches"] = [
        la for i, la in enumerate(run.get("launches", [])) if la.get("index", i) not in flagged
    ]
    return out


def with_host(
    c: Comparison,
    old: dict[str, Any],
    new: dict[str, Any],
    compare: Callable[[dict[str, Any], dict[str, Any]], Comparison],
    exclude_flagged: bool,
) -> Comparison:
    """Comparison `c` of old and new with the host's reading added; `compare` compares again (the other
    choice of launches: without the flagged ones, or with them when --exclude-flagged left them out)."""
    ol, nl = c.old.label, c.new.label
    uo, un = usable_launches(old, ol)[0], usable_launches(new, nl)[0]
    pooled = [*uo, *un]
    flags = {"old": _flags(old, ol, pooled, 0), "new": _flags(new, nl, pooled, len(uo))}
    n_flagged = sum(len(f) for f in flags.values())
    other: str | None = None
    excluded = False
    if n_flagged:
        try:
            alt = compare(_without(old, flags["old"]), _without(new, flags["new"]))
            other = alt.verdict
        except BadInput:  # a side with no launch left
            alt, other = None, "none (no launch of a side left)"
        if exclude_flagged and alt is not None:
            c, other, excluded = alt, c.verdict, True
    head = [p for p in (c.primary, *dict.fromkeys(m.name for m in c.metrics)) if p]
    units = {**(old.get("units") or {}), **(new.get("units") or {})}
    lines = host_phantom.explain_launches([(ol, uo), (nl, un)], head, units.get(head[0], "") if head else "")
    if c.verdict != stats.UNCHANGED:  # the two sides disagree (or cannot tell): what differs between them
        lines += host_phantom.side_differences([(ol, uo), (nl, un)])
    lines += host_phantom.side_contention([(ol, uo, flags["old"]), (nl, un, flags["new"])])
    shares = [host_phantom.others_pct(la) for la in pooled]
    more = f"--launches {2 * max(len(uo), len(un), 1)}"
    if busy := host_phantom.busy_line(shares, host_phantom.cpus_of(pooled), more):
        lines.append(busy)
    if n_flagged:
        labels = {"old": ol, "new": nl}
        which = "; ".join(
            f"{labels[k]} {', '.join(str(i) for i in sorted(f))}" for k, f in flags.items() if f
        )
        if excluded:
            lines.append(
                f"flagged launches left out (--exclude-flagged): {which}; with them the verdict is {other}"
            )
        elif exclude_flagged:
            lines.append(
                f"flagged launches: {which}; not left out (--exclude-flagged): no launch of a side would be left"
            )
        else:
            lines.append(
                f"flagged launches: {which}; without them (--exclude-flagged) the verdict is {other}"
            )
    elif c.verdict in (stats.REGRESSED, stats.IMPROVED) and _recorded(pooled):
        lines.append("nothing recorded about the hosts' CPUs differs between the launches")
    c.phantom = [*c.phantom, *lines]
    c.host = {
        "flagged": {lab: {str(i): why for i, why in f.items()} for lab, f in flags.items()},
        "excluded": excluded,
        "verdict_other": other,
    }
    return c


def _recorded(launches: list[dict[str, Any]]) -> bool:
    return any(host_phantom.features(la) for la in launches)
