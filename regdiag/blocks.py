"""The node as a statistical block: an A/B run spread over the nodes of a fleet (docs/fleet.md).

Pair p ran A and B back to back on one node, so its difference d = log(B) - log(A) (of the launch
medians of one metric) carries nothing of that node's own speed. Per node, the pairs whose two halves
both count (`run_view.usable`) are kept, then the order is rebalanced (pairs of the orientation in
excess are dropped, the latest first, until the AB and BA counts differ by at most one).

- **Interaction** (does the change differ by node?): a one-way ANOVA of d across the nodes. When it
  finds none (p >= alpha), the pairs are pooled: one estimate of the change (mean d, t interval).
  Otherwise each node gets its own estimate and the node whose change departs most from the others' is
  named.
- **Node level** (is a node slower whatever the side?): a one-way ANOVA of the pair means
  (log A + log B) / 2 across nodes; the slowest or fastest node against the others' median is named when
  it departs by more than the margin.
- A claim about the fleet (that the change holds on every node, that no node is an outlier) needs at
  least MIN_FLEET nodes; with fewer the result says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from regdiag.run_view import usable

MIN_FLEET = 3
ALPHA = 0.05


@dataclass
class NodeBlock:
    node: str
    diffs: list[float]  # log(B) - log(A), one per kept pair
    levels: list[float]  # (log A + log B) / 2, one per kept pair
    dropped: int = 0  # pairs left out: a half missing or failed, or to rebalance the order

    def estimate(self) -> dict[str, Any]:
        return {"node": self.node, "pairs": len(self.diffs), "dropped": self.dropped, **_ratio(self.diffs)}


@dataclass
class FleetResult:
    metric: str
    nodes: list[NodeBlock]
    pooled: dict[str, Any] | None  # the one estimate, when the change does not differ by node
    interaction_p: float | None
    change_outlier: dict[str, Any] | None
    level_p: float | None
    slow_node: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "nodes": [b.estimate() for b in self.nodes],
            "pooled": self.pooled,
            "interaction_p": self.interaction_p,
            "change_outlier": self.change_outlier,
            "level_p": self.level_p,
            "slow_node": self.slow_node,
            "notes": self.notes,
        }


def _ratio(d: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    """exp(mean d) with a t interval; None bounds with fewer than 2 values."""
    from scipy import stats as st

    if not d:
        return {"ratio": None, "lo": None, "hi": None}
    m = statistics.fmean(d)
    if len(d) < 2:
        return {"ratio": math.exp(m), "lo": None, "hi": None}
    half = st.t.ppf(0.5 + level / 2, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    return {"ratio": math.exp(m), "lo": math.exp(m - half), "hi": math.exp(m + half)}


def _halves(run: Mapping[str, Any], metric: str) -> dict[int, tuple[str, int, float]]:
    """pair -> (node, order, launch median of `metric`) for the launches that count."""
    out = {}
    for la in run.get("launches") or []:
        xs = (la.get("samples") or {}).get(metric)
        if usable(la) and xs and isinstance(la.get("pair"), int) and la.get("node"):
            out[la["pair"]] = (str(la["node"]), int(la.get("order") or 0), float(statistics.median(xs)))
    return out


def _rebalance(
    pairs: list[tuple[int, float, float, bool]],
) -> tuple[list[tuple[int, float, float, bool]], int]:
    """Drop pairs of the orientation in excess, the latest first, until AB and BA differ by <= 1."""
    kept = sorted(pairs)
    dropped = 0
    while True:
        ab = [p for p in kept if p[3]]
        ba = [p for p in kept if not p[3]]
        if abs(len(ab) - len(ba)) <= 1:
            return kept, dropped
        kept.remove((ab if len(ab) > len(ba) else ba)[-1])
        dropped += 1


def node_blocks(a: Mapping[str, Any], b: Mapping[str, Any], metric: str) -> list[NodeBlock]:
    """Per node (in name order), its kept pairs of an A/B run's two records."""
    ha, hb = _halves(a, metric), _halves(b, metric)
    per: dict[str, list[tuple[int, float, float, bool]]] = {}
    missing: dict[str, int] = {}
    for la in [*(a.get("launches") or []), *(b.get("launches") or [])]:
        p = la.get("pair")
        if la.get("node") and isinstance(p, int) and not (p in ha and p in hb):
            missing[str(la["node"])] = missing.get(str(la["node"]), 0) + 1
    for p in sorted(set(ha) & set(hb)):
        (na, oa, va), (nb, ob, vb) = ha[p], hb[p]
        if na == nb and va > 0 and vb > 0:
            per.setdefault(na, []).append((p, va, vb, oa < ob))
    blocks = []
    for node in sorted(set(per) | set(missing)):
        kept, dropped = _rebalance(per.get(node, []))
        diffs = [math.log(vb) - math.log(va) for _, va, vb, _ in kept]
        levels = [(math.log(va) + math.log(vb)) / 2 for _, va, vb, _ in kept]
        halves = missing.get(node, 0)
        blocks.append(NodeBlock(node, diffs, levels, dropped + halves))
    return blocks


def _anova(groups: Sequence[Sequence[float]]) -> float | None:
    from scipy import stats as st

    usable_groups = [g for g in groups if len(g) >= 2]
    if len(usable_groups) < 2:
        return None
    if all(statistics.pvariance(g) == 0 for g in usable_groups):
        return None
    return float(st.f_oneway(*usable_groups).pvalue)


def _departing(blocks: Sequence[NodeBlock], values: Mapping[str, float]) -> dict[str, Any]:
    """The node farthest from the median of the others, and by how much (a ratio)."""
    best: dict[str, Any] = {}
    for blk in blocks:
        others = [values[o.node] for o in blocks if o.node != blk.node]
        if not others:
            continue
        gap = values[blk.node] - statistics.median(others)
        if not best or abs(gap) > abs(best["log_gap"]):
            best = {"node": blk.node, "log_gap": gap, "ratio": math.exp(gap)}
    return best


def analyse(a: Mapping[str, Any], b: Mapping[str, Any], metric: str, margin: float = 0.02) -> FleetResult:
    """The fleet reading of an A/B run's records; see the module docstring."""
    blocks = [blk for blk in node_blocks(a, b, metric) if blk.diffs]
    notes = []
    p_int = _anova([blk.diffs for blk in blocks])
    pooled = None
    outlier = None
    if p_int is None or p_int >= ALPHA:
        pooled = {
            "pairs": sum(len(blk.diffs) for blk in blocks),
            **_ratio([d for blk in blocks for d in blk.diffs]),
        }
    else:
        outlier = _departing(blocks, {blk.node: statistics.fmean(blk.diffs) for blk in blocks})
        notes.append(
            f"the change differs by node (interaction p={p_int:.3g}): per-node estimates, not pooled; "
            f"{outlier['node']} departs most from the others"
        )
    p_level = _anova([blk.levels for blk in blocks])
    slow = None
    if len(blocks) >= 2:
        dep = _departing(blocks, {blk.node: statistics.fmean(blk.levels) for blk in blocks})
        if dep and abs(dep["ratio"] - 1) > margin and (p_level is None or p_level < ALPHA):
            slow = {**dep, "p": p_level, "slower": dep["ratio"] > 1}
            notes.append(
                f"node {dep['node']} is {'slower' if slow['slower'] else 'faster'} than the others on both "
                f"sides ({(dep['ratio'] - 1) * 100:+.1f} % {metric} against the others' median)"
            )
    named = (slow or {}).get("node") or (outlier or {}).get("node")
    if named:
        diffs = node_differences(a.get("node_snapshots") or {}, named)
        for d in diffs:
            notes.append(f"{named} differs from the others in {d}")
    if len(blocks) < MIN_FLEET:
        notes.append(
            f"{len(blocks)} node(s) measured: a claim about the fleet (every node, no outlier) needs at least "
            f"{MIN_FLEET}; this speaks for these nodes only"
        )
    return FleetResult(metric, blocks, pooled, p_int, outlier, p_level, slow, notes)


def fleet_reading(a: Mapping[str, Any], b: Mapping[str, Any], margin: float) -> FleetResult | None:
    """The node-as-block reading of two records whose launches ran on several nodes (an A/B run over a
    Slurm allocation), of their primary metric; None for records of one node."""
    if not (has_nodes(a) and has_nodes(b)):
        return None
    return analyse(a, b, str(a.get("primary") or "cycle"), margin)


def has_nodes(run: Mapping[str, Any]) -> bool:
    """Whether a record's launches ran on two or more named nodes."""
    return len({la.get("node") for la in run.get("launches") or [] if la.get("node")}) >= 2


def node_differences(snaps: Mapping[str, Any], node: str, limit: int = 5) -> list[str]:
    """What `node`'s snapshot says that every other node's does not (most likely culprits first): the
    fields in which it differs from each of the others, with its value and theirs."""
    from regdiag.snapshot.diff import diff_snapshots

    others = [n for n in sorted(snaps) if n != node and isinstance(snaps[n], dict)]
    if not isinstance(snaps.get(node), dict) or not others:
        return []
    per = [{(it["group"], it["field"]): it for it in diff_snapshots(snaps[o], snaps[node])} for o in others]
    common = [k for k in per[0] if all(k in p for p in per[1:])]
    return [
        f"{g}.{f}: {per[0][(g, f)]['new']!r} (others {per[0][(g, f)]['old']!r})" for g, f in common[:limit]
    ]
