"""An A/B run over several nodes read with the node as a block (regdiag.blocks): per node its pairs and
change, the pooled change or the node that departs, and the notes (fewer than 3 nodes, a slow node and
what tells it apart), as compare_runs finds it (Comparison.fleet, regdiag.blocks.fleet_reading); shown
after the comparison by `ab` and by `compare` of such records."""

from __future__ import annotations

from typing import Any


def show_fleet(f: Any, console: Any) -> None:
    """Per node: its pairs and change; the pooled change or the outlier; the notes (fewer than 3 nodes)."""

    def pct(r: dict[str, Any]) -> str:
        if r.get("ratio") is None:
            return "no pairs"
        ci = f" [{(r['lo'] - 1) * 100:+.1f}, {(r['hi'] - 1) * 100:+.1f}]" if r.get("lo") is not None else ""
        return f"{(r['ratio'] - 1) * 100:+.1f} %{ci}"

    console.print(f"nodes ({f.metric}, B against A within each node):", highlight=False)
    for blk in f.nodes:
        e = blk.estimate()
        console.print(
            f"  {blk.node}: {e['pairs']} pairs, {pct(e)}"
            + (f", {blk.dropped} left out" if blk.dropped else ""),
            highlight=False,
        )
    if f.pooled is not None:
        p = "" if f.interaction_p is None else f" (no node x change interaction, p={f.interaction_p:.3g})"
        console.print(f"  pooled over {f.pooled['pairs']} pairs: {pct(f.pooled)}{p}", highlight=False)
    for note in f.notes:
        console.print(f"  note: {note}", highlight=False)
