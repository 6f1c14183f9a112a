"""compare reads the variables the probe's ranks saw (the launch header's `env`), not only the
snapshots: an A/B run sets its sides' variables for the probe alone, so the snapshots, taken by
regdiag itself, are identical while the ranks ran differently. The stored pair is a real A/B run on
two H200s (`regdiag ab --a=-NCCL_GRAPH_MIXING_SUPPORT --b NCCL_GRAPH_MIXING_SUPPORT=0 ...`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from regdiag.compare import compare_runs

BASE = Path(__file__).resolve().parent.parent / "baselines"


def _pair() -> tuple[dict, dict]:
    return tuple(  # type: ignore[return-value]
        json.loads((BASE / f"h200x2-kimi-tp2-graph-mixing-{s}.json").read_text()) for s in ("on", "off")
    )


def test_an_env_difference_only_the_ranks_saw_is_named():
    on, off = _pair()
    c = compare_runs(on, off)
    names = [(it["field"], it["old"], it["new"]) for it in c.env_diff or []]
    assert ("NCCL_GRAPH_MIXING_SUPPORT", "<absent>", "0") in names, c.env_note
    item = next(it for it in c.env_diff if it["field"] == "NCCL_GRAPH_MIXING_SUPPORT")
    assert "launch header" in item["source"]["new"] and item["rank"] <= 3  # an NCCL variable ranks high


def test_the_same_variables_on_both_sides_add_nothing():
    on, _ = _pair()
    twin = copy.deepcopy(on)
    twin["id"] += "-twin"
    c = compare_runs(on, twin, allow_mismatch=True)
    assert not [it for it in c.env_diff or [] if "launch header" in str(it.get("source"))]


def test_without_snapshots_the_ranks_still_tell():
    on, off = _pair()
    for r in (on, off):
        r.pop("snapshot_before")
    c = compare_runs(on, off)
    assert [it["field"] for it in c.env_diff or []] == ["NCCL_GRAPH_MIXING_SUPPORT"]
    assert "no environment snapshot" in c.env_note
